// Non-tensor data (Python tensordict's NonTensorData and NonTensorStack):
// set/get, keys, printing, indexing, stacking, row writes, memmap, and the
// operations that hold tensors only. The expected strings are what Python
// tensordict 0.4.0 prints for the same dicts.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using json = nlohmann::ordered_json;
using tensordict::TensorDict;
using tensordict_test::ExpectThrowsMsg;
using tensordict_test::Keys;
using tensordict_test::TempDir;
using torch::indexing::None;
using torch::indexing::Slice;

// {"a": zeros(n), "s": "hello"}, batch [n].
TensorDict Hello(int64_t n = 3) {
  TensorDict td({{"a", torch::zeros({n})}}, {n});
  td.set_non_tensor("s", "hello");
  return td;
}

// A row {"a": 0, "s": value}.
TensorDict Row(const json& value) {
  TensorDict td({{"a", torch::zeros({})}}, {});
  td.set_non_tensor("s", value);
  return td;
}

// The repr line of the entry `key` (the field line, without indentation).
std::string Field(const TensorDict& td, const std::string& key) {
  const std::string r = tensordict::repr(td);
  const size_t at = r.find(key + ": ");
  if (at == std::string::npos) return "<no field " + key + ">";
  size_t end = r.find(")}", at);
  if (end == std::string::npos) end = r.find("),\n", at);
  return r.substr(at, end + 1 - at);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(NonTensor, SetPrintsAndGetsAsPython) {
  TensorDict td = Hello();
  EXPECT_EQ(tensordict::repr(td),
            "TensorDict(\n"
            "    fields={\n"
            "        a: Tensor(shape=torch.Size([3]), device=cpu, "
            "dtype=torch.float32, is_shared=False),\n"
            "        s: NonTensorData(data=hello, batch_size=torch.Size([3]), "
            "device=None)},\n"
            "    batch_size=torch.Size([3]),\n"
            "    device=None,\n"
            "    is_shared=False)");
  EXPECT_EQ(td.get_non_tensor("s"), json("hello"));
  EXPECT_TRUE(td.is_non_tensor("s"));
  EXPECT_FALSE(td.is_non_tensor("a"));
  EXPECT_TRUE(td.get_entry("s").is_non_tensor());
  EXPECT_EQ(td.get_entry("s").non_tensor(), json("hello"));
  // set_non_tensor replaces any entry, a tensor included.
  td.set_non_tensor("a", 7);
  EXPECT_EQ(td.get_non_tensor("a"), json(7));
  td.set("a", torch::ones({3}));
  EXPECT_FALSE(td.is_non_tensor("a"));
}

TEST(NonTensor, ValuesPrintAsPythonsStr) {
  struct Case {
    json value;
    std::string data;
  };
  const std::vector<Case> cases = {
      {1, "1"},
      {2.5, "2.5"},
      {1.0, "1.0"},
      {1e-5, "1e-05"},
      {1e20, "1e+20"},
      {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},
      {-0.0, "-0.0"},
      {true, "True"},
      {nullptr, "None"},
      {"it's", "it's"},
      {"say \"hi\"", "say \"hi\""},
      {"", ""},
      {json::array({1, "a", nullptr, true, 2.0}), "[1, 'a', None, True, 2.0]"},
      {json{{"k", 1}, {"z", {1, 2}}, {"s", "v"}},
       "{'k': 1, 'z': [1, 2], 's': 'v'}"},
      {json::object(), "{}"},
      {json::array(), "[]"},
      {json::array({"it's", "say \"hi\"", "both ' \"", "a\nb", "\x01", "\\"}),
       "[\"it's\", 'say \"hi\"', 'both \\' \"', 'a\\nb', '\\x01', '\\\\']"},
      {std::string(250, 'x'),
       std::string(20, 'x') + "  ...  " + std::string(20, 'x')},
      {"h\xc3\xa9llo", "h\xc3\xa9llo"},
      {"back\\slash", "back\\slash"},
  };
  for (const Case& c : cases) {
    TensorDict td({}, {2});
    td.set_non_tensor("v", c.value);
    EXPECT_EQ(Field(td, "v"), "v: NonTensorData(data=" + c.data +
                                  ", batch_size=torch.Size([2]), device=None)")
        << c.value.dump();
  }
  json range = json::array();
  for (int i = 0; i < 100; ++i) range.push_back(i);
  TensorDict td({}, {2});
  td.set_non_tensor("v", range);
  EXPECT_EQ(Field(td, "v"),
            "v: NonTensorData(data=[0, 1, 2, 3, 4, 5, 6  ...   95, 96, 97, 98, "
            "99], batch_size=torch.Size([2]), device=None)");
}

TEST(NonTensor, IsAnEntryButNotALeaf) {
  TensorDict td({{"a", torch::zeros({3})}, {{"n", "b"}, torch::zeros({3})}},
                {3});
  td.set_non_tensor("s", "hello");
  td.set_non_tensor({"n", "t"}, 7);
  EXPECT_EQ(td.keys(), Keys({"a", "n", "s"}));
  EXPECT_EQ(td.keys(true), Keys({"a", "n", {"n", "b"}, {"n", "t"}, "s"}));
  EXPECT_EQ(td.keys(true, true), Keys({"a", {"n", "b"}}));
  ExpectThrowsMsg<c10::TypeError>([&] { (void)td.get("s"); },
                                  "key s holds non-tensor data, not a tensor; "
                                  "use get_non_tensor()");
  ExpectThrowsMsg<c10::TypeError>([&] { (void)td.get_tensordict("s"); },
                                  "key s holds non-tensor data, not a "
                                  "TensorDict; use get_non_tensor()");
  ExpectThrowsMsg<c10::TypeError>([&] { (void)td.get_non_tensor("a"); },
                                  "key a holds a tensor, not non-tensor data; "
                                  "use get()");
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        td.set({"s", "x"}, torch::zeros({3}));
      },
      "key ('s', 'x'): cannot create a sub-TensorDict at s: non-tensor data "
      "lives there");
  // Arithmetic, apply and clone keep it; flatten_keys names it as Python.
  TensorDict sum = td + 1;
  EXPECT_EQ(sum.get_non_tensor({"n", "t"}), json(7));
  EXPECT_EQ(
      td.apply([](const at::Tensor& t) { return t * 2; }).get_non_tensor("s"),
      json("hello"));
  EXPECT_EQ(td.clone().get_non_tensor("s"), json("hello"));
  EXPECT_EQ(td.flatten_keys().keys(), Keys({"a", "n.b", "n.t", "s"}));
  EXPECT_EQ(td.flatten_keys().get_non_tensor("n.t"), json(7));
  EXPECT_EQ(td.select({"s"}).keys(), Keys({"s"}));
  EXPECT_EQ(td.exclude({"s"}).keys(), Keys({"a", "n"}));
  TensorDict other({}, {3});
  other.set_non_tensor("s", "bye");
  td.update(other);
  EXPECT_EQ(td.get_non_tensor("s"), json("bye"));
}

TEST(NonTensor, IndexingChangesOnlyTheBatchSize) {
  TensorDict td = Hello(4);
  EXPECT_EQ(tensordict::repr(td.index({0})),
            "TensorDict(\n"
            "    fields={\n"
            "        a: Tensor(shape=torch.Size([]), device=cpu, "
            "dtype=torch.float32, is_shared=False),\n"
            "        s: NonTensorData(data=hello, batch_size=torch.Size([]), "
            "device=None)},\n"
            "    batch_size=torch.Size([]),\n"
            "    device=None,\n"
            "    is_shared=False)");
  auto batch_of = [](const TensorDict& t) { return Field(t, "s"); };
  EXPECT_EQ(
      batch_of(td.index({Slice(1, 3)})),
      "s: NonTensorData(data=hello, batch_size=torch.Size([2]), device=None)");
  EXPECT_EQ(
      batch_of(td.index({torch::tensor({true, false, true, false})})),
      "s: NonTensorData(data=hello, batch_size=torch.Size([2]), device=None)");
  EXPECT_EQ(
      batch_of(td.index({torch::tensor({0, 2, 2, 1})})),
      "s: NonTensorData(data=hello, batch_size=torch.Size([4]), device=None)");
  EXPECT_EQ(batch_of(td.index({None})),
            "s: NonTensorData(data=hello, batch_size=torch.Size([1, 4]), "
            "device=None)");
  EXPECT_EQ(batch_of(td.reshape({2, 2})),
            "s: NonTensorData(data=hello, batch_size=torch.Size([2, 2]), "
            "device=None)");
}

TEST(NonTensor, StackingEqualValuesKeepsOneAndOthersMakeAStack) {
  TensorDict td = Hello(2);
  EXPECT_EQ(
      Field(tensordict::stack({td.index({0}), td.index({1})}), "s"),
      "s: NonTensorData(data=hello, batch_size=torch.Size([2]), device=None)");
  // Python's ==: 1 == 1.0 == True.
  EXPECT_EQ(
      Field(tensordict::stack({Row(1), Row(1.0), Row(true)}), "s"),
      "s: NonTensorData(data=1, batch_size=torch.Size([3]), device=None)");
  TensorDict st = tensordict::stack({Row("hello"), Row("world"), Row("hello")});
  EXPECT_EQ(tensordict::repr(st),
            "TensorDict(\n"
            "    fields={\n"
            "        a: Tensor(shape=torch.Size([3]), device=cpu, "
            "dtype=torch.float32, is_shared=False),\n"
            "        s: NonTensorStack(\n"
            "            ['hello', 'world', 'hello'],\n"
            "            batch_size=torch.Size([3]),\n"
            "            device=None)},\n"
            "    batch_size=torch.Size([3]),\n"
            "    device=None,\n"
            "    is_shared=False)");
  EXPECT_EQ(st.get_non_tensor("s"), json::array({"hello", "world", "hello"}));
  // Indexing a stack: one element is NonTensorData, several stay a stack.
  EXPECT_EQ(
      Field(st.index({1}), "s"),
      "s: NonTensorData(data=world, batch_size=torch.Size([]), device=None)");
  EXPECT_EQ(st.index({Slice(None, None, 2)}).get_non_tensor("s"),
            json::array({"hello", "hello"}));
  EXPECT_TRUE(tensordict::repr(st.index({Slice(None, None, 2)}))
                  .find("NonTensorStack(") != std::string::npos);
  EXPECT_EQ(st.index({torch::tensor({2, 1})}).get_non_tensor("s"),
            json::array({"hello", "world"}));
  TensorDict lifted = st.index({None});
  EXPECT_EQ(lifted.batch_size().vec(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(lifted.get_non_tensor("s"),
            json::array({json::array({"hello", "world", "hello"})}));
  // An integer at the stack dim leaves NonTensorData, as in Python (the
  // new dim of None is no stack dim).
  EXPECT_EQ(
      Field(lifted.index({Slice(), 1}), "s"),
      "s: NonTensorData(data=world, batch_size=torch.Size([1]), device=None)");
  EXPECT_EQ(lifted.index({Slice(), 1}).get_non_tensor("s"), "world");
  // cat follows the elements.
  EXPECT_EQ(tensordict::cat({st, Hello(2)}).get_non_tensor("s"),
            json::array({"hello", "world", "hello", "hello", "hello"}));
  // A stack follows reshapes; a reduction cannot carry it.
  EXPECT_EQ(
      tensordict::stack({st, st}).reshape({6}).get_non_tensor("s"),
      json::array({"hello", "world", "hello", "hello", "world", "hello"}));
  ExpectThrowsMsg(
      [&] { (void)st.sum(0); },
      "sum: key s holds a NonTensorStack, whose values cannot follow a "
      "change of its batch size from [3] to []");
}

// Comparisons as Python 0.4's (tests/python_ops_test.cpp checks the
// reprs against it): values compare element by element; a comparison with a
// scalar, or of NonTensorData with a stack, gives None values.
TEST(NonTensor, ComparisonsCompareValuesAsPythonDoes) {
  const TensorDict st =
      tensordict::stack({Row("hello"), Row("world"), Row("hello")});
  TensorDict same = (st == st.clone());
  EXPECT_TRUE(same.get("s").equal(torch::ones({3}, torch::kBool)));
  EXPECT_TRUE(same.all());
  const TensorDict other =
      tensordict::stack({Row("hello"), Row("x"), Row("hello")});
  EXPECT_TRUE((st == other).get("s").equal(torch::tensor({true, false, true})));
  EXPECT_TRUE(
      (st != other).get("s").equal(torch::tensor({false, true, false})));
  EXPECT_FALSE((st == other).all());
  // 1 == 1.0, as in Python.
  EXPECT_TRUE((Row(1) == Row(1.0)).get("s").item<bool>());
  EXPECT_EQ(Field(st == 0, "s"),
            "s: NonTensorStack(\n"
            "            [None, None, None],\n"
            "            batch_size=torch.Size([3]),\n"
            "            device=None)");
  EXPECT_EQ(
      Field(Hello(2) != 1, "s"),
      "s: NonTensorData(data=None, batch_size=torch.Size([2]), device=None)");
  EXPECT_EQ(
      Field(Hello(3) == st, "s"),
      "s: NonTensorData(data=None, batch_size=torch.Size([3]), device=None)");
  // What cannot be compared is a clear error.
  TensorDict plain({{"a", torch::zeros({3})}, {"s", TensorDict({}, {3})}}, {3});
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)(Hello(3) == plain); },
      "operator==: key s is non-tensor data in the left-hand side but a "
      "TensorDict in the right-hand side");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { (void)(Hello(3) != Hello(1)); },
      "operator!=: key s: non-tensor data of batch size [3] cannot be "
      "compared with non-tensor data of batch size [1]");
}

TEST(NonTensor, ALongStackIsCutAsPythonCutsIt) {
  std::vector<TensorDict> rows;
  for (int i = 0; i < 10; ++i)
    rows.push_back(Row("abcdefghij" + std::to_string(i)));
  EXPECT_EQ(
      Field(tensordict::stack(rows), "s"),
      "s: NonTensorStack(\n"
      "            ['abcdefghij0', 'abcdefghij1', 'abcdefghij2', 'abc...,\n"
      "            batch_size=torch.Size([10]),\n"
      "            device=None)");
}

TEST(NonTensor, RowWritesMakeAStackAsPythonDoes) {
  TensorDict td = Hello(3);
  td.index_put_({0}, Row("hello"));  // equal: nothing changes (as Python)
  EXPECT_EQ(
      Field(td, "s"),
      "s: NonTensorData(data=hello, batch_size=torch.Size([3]), device=None)");
  td[0] = Row("rowval");
  EXPECT_EQ(Field(td, "s"),
            "s: NonTensorStack(\n"
            "            ['rowval', 'hello', 'hello'],\n"
            "            batch_size=torch.Size([3]),\n"
            "            device=None)");
  TensorDict sub = Hello(2);
  sub.set_non_tensor("s", "x");
  td.index_put_({Slice(1, 3)}, sub);
  EXPECT_EQ(td.get_non_tensor("s"), json::array({"rowval", "x", "x"}));
  td.index_put_({torch::tensor({2, 0})},
                tensordict::stack({Row("p"), Row("q")}));
  EXPECT_EQ(td.get_non_tensor("s"), json::array({"q", "x", "p"}));
  // update_ replaces the data, as Python's.
  TensorDict other = Hello(3);
  other.set_non_tensor("s", "other");
  td.update_(other);
  EXPECT_EQ(
      Field(td, "s"),
      "s: NonTensorData(data=other, batch_size=torch.Size([3]), device=None)");
  // A missing key: every row gets the value (as Python).
  TensorDict buf({}, {3});
  buf[0] = Row("first");
  EXPECT_EQ(
      Field(buf, "s"),
      "s: NonTensorData(data=first, batch_size=torch.Size([3]), device=None)");
}

TEST(NonTensor, AMemoryMappedDictsNonTensorDataCannotChangeInPlace) {
  TempDir tmp;
  TensorDict td = Hello(3);
  td.memmap_(tmp / "td");
  const auto snap = tensordict_test::TakeSnapshot(td);
  TensorDict row({{"a", torch::ones({})}}, {});
  row.set_non_tensor("s", "other");
  ExpectThrowsMsg(
      [&] { td[1] = row; },
      "index_put_: key s: the non-tensor data of a memory-mapped dict lives "
      "in its meta.json and cannot change in place (the value's 'other' "
      "differs from the stored 'hello')");
  tensordict_test::ExpectUnchanged(td, snap);
  td[1] = Row("hello");  // equal: fine
}

TEST(NonTensor, TensorOnlyStorageRejectsIt) {
  TensorDict td = Hello(2);
  tensordict::ReplayBuffer rb(tensordict::ReplayBufferOptions(4));
  ExpectThrowsMsg<c10::TypeError>(
      [&] { rb.extend(td); },
      "ReplayBuffer::extend: key s holds non-tensor data, which a "
      "ReplayBuffer cannot hold (tensors only)");
  EXPECT_EQ(rb.size(), 0);
  TensorDict out({{"a", torch::zeros({2})}}, {2});
  ExpectThrowsMsg<c10::TypeError>(
      [&] {
        tensordict::stack_out(out, {td.index({0}), td.index({1})});
      },
      "stack_out: key s holds non-tensor data, which out cannot hold "
      "(tensors only)");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)tensordict::pickle_save(td); },
      "pickle_save: key s holds non-tensor data, which a pickled dict of "
      "tensors cannot hold (tensors only)");
  ExpectThrowsMsg<c10::TypeError>(
      [&] { (void)td.consolidate(); },
      "consolidate: key s holds non-tensor data, which a consolidated "
      "TensorDict cannot hold (tensors only)");
  ExpectThrowsMsg<c10::ValueError>(
      [&] { td.set_non_tensor("x", std::nan("")); },
      "set_non_tensor: key x: the value holds NaN or an infinity, which JSON "
      "(and so the memmap format) cannot hold");
  td.lock_();
  EXPECT_THROW(td.set_non_tensor("s", 1), c10::Error);
}

TEST(NonTensor, MemmapWritesPythonsFormatAndReadsItBack) {
  TempDir tmp;
  TensorDict td({{"a", torch::zeros({3})}}, {3});
  td.set_non_tensor("s", "hello");
  td.set_non_tensor({"nested", "x"}, 5);
  td.memmap_(tmp / "td");
  const std::string dir = tmp / "td";
  EXPECT_EQ(json::parse(ReadFile(dir + "/meta.json"))["s"],
            json({{"type", "NonTensorData"}}));
  EXPECT_EQ(
      json::parse(ReadFile(dir + "/s/meta.json")),
      json::parse(
          R"({"_type": "<class 'tensordict.tensorclass.NonTensorData'>", "data": "hello", "_metadata": null})"));
  EXPECT_EQ(
      json::parse(ReadFile(dir + "/s/_tensordict/meta.json")),
      json::parse(
          R"({"shape": [3], "device": "cpu", "_type": "<class 'tensordict._td.TensorDict'>"})"));
  const std::string expected =
      "TensorDict(\n"
      "    fields={\n"
      "        a: MemoryMappedTensor(shape=torch.Size([3]), device=cpu, "
      "dtype=torch.float32, is_shared=True),\n"
      "        nested: TensorDict(\n"
      "            fields={\n"
      "                x: NonTensorData(data=5, batch_size=torch.Size([3]), "
      "device=cpu)},\n"
      "            batch_size=torch.Size([3]),\n"
      "            device=cpu,\n"
      "            is_shared=False),\n"
      "        s: NonTensorData(data=hello, batch_size=torch.Size([3]), "
      "device=cpu)},\n"
      "    batch_size=torch.Size([3]),\n"
      "    device=cpu,\n"
      "    is_shared=False)";
  EXPECT_EQ(tensordict::repr(td), expected);
  EXPECT_EQ(tensordict::repr(TensorDict::load_memmap(dir)), expected);

  TensorDict st = tensordict::stack({Row("hello"), Row("world")});
  st.memmap_(tmp / "st");
  EXPECT_EQ(
      json::parse(ReadFile(tmp / "st/s/meta.json")),
      json::parse(
          R"({"_type": "<class 'tensordict.tensorclass.NonTensorStack'>", "stack_dim": 0, "device": "cpu", "data": ["hello", "world"]})"));
  EXPECT_EQ(TensorDict::load_memmap(tmp / "st").get_non_tensor("s"),
            json::array({"hello", "world"}));
  // Stacked along dim 1: Python writes "stack_dim": 1.
  TensorDict rows2({{"a", torch::zeros({2})}}, {2});
  rows2.set_non_tensor("s", "p");
  TensorDict rows3 = rows2.clone();
  rows3.set_non_tensor("s", "q");
  tensordict::stack({rows2, rows3}, 1).memmap_(tmp / "st1");
  EXPECT_EQ(
      json::parse(ReadFile(tmp / "st1/s/meta.json")),
      json::parse(
          R"({"_type": "<class 'tensordict.tensorclass.NonTensorStack'>", "stack_dim": 1, "device": "cpu", "data": [["p", "q"], ["p", "q"]]})"));
}

TEST(NonTensor, DamagedNonTensorEntriesAreClearErrors) {
  TempDir tmp;
  Hello(3).memmap(tmp / "td");
  const std::string meta = tmp / "td/s/meta.json";
  std::ofstream(meta)
      << R"({"_type": "<class 'tensordict.tensorclass.NonTensorData'>", "_metadata": null})";
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(tmp / "td"); },
      "load_memmap: key s: its value was pickled by Python (it is not "
      "JSON), which this library cannot read ('" +
          meta + "' has no JSON \"data\")");
  std::ofstream(meta)
      << R"({"_type": "<class 'tensordict._td.TensorDict'>", "data": 1})";
  ExpectThrowsMsg(
      [&] { (void)TensorDict::load_memmap(tmp / "td"); },
      "load_memmap: '" + meta +
          "': key s should hold a <class "
          "'tensordict.tensorclass.NonTensorData'>"
          ", but \"_type\" is \"<class 'tensordict._td.TensorDict'>\"");
}

}  // namespace
