// examples/getting_started.cpp — the code of docs/getting-started.md and of
// the README's tour.
//
// Every C++ block of the guide and the tour is an excerpt of this file (a
// section body, with its indentation removed), so CI compiles and runs each
// one. The TORCH_CHECKs verify what the text says about them.
#include <tensordict/tensordict.h>

#include <iostream>
#include <string>
#include <vector>

using tensordict::NestedKey;
using tensordict::TensorDict;
using namespace torch::indexing;

namespace {

// The message of the c10::Error that `fn` throws ("" if it throws nothing).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const c10::Error& e) {
    return e.msg();
  }
  return "";
}

bool contains_text(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void readme_tour() {
  // A rollout buffer of 1000 steps. Nothing is allocated yet.
  TensorDict buffer({}, {1000});
  for (int64_t t = 0; t < 1000; ++t) {
    TensorDict step({{"obs", torch::rand({64})},
                     {"action", torch::rand({4})},
                     {"reward", torch::rand({1})},
                     {"done", torch::zeros({1}, torch::kBool)},
                     {{"next", "obs"}, torch::rand({64})}},
                    {});
    buffer[t] = step;  // t == 0 allocates [1000, ...] zeros; then in place
  }
  TensorDict batch = buffer[torch::randint(1000, {32})];  // a copy, [32]
  TensorDict recent = buffer.index({Slice(-10, None)});   // views, [10]
  torch::Tensor next_obs = batch.get({"next", "obs"});    // [32, 64]
  std::cout << batch << "\n";
  TORCH_CHECK(next_obs.sizes() == std::vector<int64_t>({32, 64}));
  TORCH_CHECK(recent.batch_size() == std::vector<int64_t>{10});
}

void construction() {
  TensorDict td({{"obs", torch::zeros({4, 3})},
                 {"reward", torch::zeros({4, 1})},
                 {{"next", "obs"}, torch::zeros({4, 3})}},
                {4});
  TORCH_CHECK(td.batch_size() == std::vector<int64_t>{4});
  TORCH_CHECK(td.batch_dims() == 1 && td.numel() == 4);
  TORCH_CHECK(td.size() == 3);            // obs, reward, next
  TORCH_CHECK(!td.device().has_value());  // prints as device=None

  TensorDict buffer({}, {10, 3});  // no keys yet, batch_size [10, 3]
  TORCH_CHECK(buffer.empty() && buffer.numel() == 30);

  TensorDict scalar({{"x", torch::ones({2})}}, {});  // no batch dims
  TORCH_CHECK(scalar.batch_dims() == 0 && scalar.numel() == 1);

  TensorDict on_cpu({{"obs", torch::zeros({4, 3})}}, {4}, torch::kCPU);
  TORCH_CHECK(on_cpu.device() == torch::Device(torch::kCPU));
}

void keys() {
  NestedKey plain = "obs";
  NestedKey nested = {"next", "obs"};
  TORCH_CHECK(nested.is_nested() && nested.depth() == 2);
  TORCH_CHECK(nested.front() == "next" && nested.back() == "obs");
  TORCH_CHECK(NestedKey(std::vector<std::string>{"obs"}) == plain);
  TORCH_CHECK(nested.str() == "('next', 'obs')" && plain.str() == "obs");
}

void get_and_set() {
  TensorDict td(
      {{"obs", torch::zeros({4, 3})}, {{"next", "obs"}, torch::zeros({4, 3})}},
      {4});
  td.set("reward", torch::zeros({4}));            // a new leaf
  td.set({"next", "reward"}, torch::zeros({4}));  // into the sub-dict "next"
  td.set({"info", "step"}, torch::arange(4));     // creates the sub-dict "info"
  TORCH_CHECK(td.contains({"next", "reward"}) && !td.contains("done"));
  TORCH_CHECK(td.get_tensordict("info").batch_size() ==
              std::vector<int64_t>{4});

  torch::Tensor obs = td.get("obs");    // the stored tensor, not a copy
  td.set_("obs", torch::ones({4, 3}));  // copies into it, in place
  TORCH_CHECK(td.get("obs").is_same(obs));
  td.set("obs", torch::ones({4, 3}));  // replaces it with a new tensor
  TORCH_CHECK(!td.get("obs").is_same(obs));

  using Keys = std::vector<NestedKey>;
  TORCH_CHECK(td.keys() == Keys({"obs", "next", "reward", "info"}));
  TORCH_CHECK(td.keys(/*include_nested=*/true, /*leaves_only=*/true) ==
              Keys({"obs",
                    {"next", "obs"},
                    {"next", "reward"},
                    "reward",
                    {"info", "step"}}));

  td.rename_key_({"info", "step"}, "step");      // now a top-level leaf
  torch::Tensor step = td.pop("step").tensor();  // removed and returned
  td.erase("info");                              // the now-empty sub-dict
  TORCH_CHECK(td.keys() == Keys({"obs", "next", "reward"}));
  TORCH_CHECK(step.equal(torch::arange(4)));
}

void handles() {
  TensorDict a({{"x", torch::zeros({3})}}, {3});
  TensorDict b = a;  // the same dict, like copying an at::Tensor
  b.set("y", torch::ones({3}));
  TORCH_CHECK(a.contains("y") && a.is_same(b));

  TensorDict shallow = a.copy();  // new structure, same tensors
  shallow.set("z", torch::ones({3}));
  TORCH_CHECK(!a.contains("z"));
  TORCH_CHECK(shallow.get("x").is_same(a.get("x")));

  TensorDict deep = a.clone();  // new structure, new tensors
  deep.get("x").fill_(7);
  TORCH_CHECK(a.get("x").eq(0).all().item<bool>());

  a.set({"next", "obs"}, torch::zeros({3, 2}));
  TensorDict next = a.get_tensordict("next");  // a's own child
  next.set("reward", torch::ones({3}));
  TORCH_CHECK(a.contains({"next", "reward"}));
}

void indexing() {
  TensorDict td({{"obs", torch::arange(40.).reshape({10, 4})},
                 {{"next", "obs"}, torch::zeros({10, 4})}},
                {10});

  TensorDict row = td[3];                          // batch_size [], views
  TensorDict last = td[-1];                        // row 9
  TensorDict head = td[Slice(None, 4)];            // batch_size [4], views
  TensorDict odd = td.index({Slice(1, None, 2)});  // batch_size [5], views
  TensorDict lifted = td.index({None});            // batch_size [1, 10]
  torch::Tensor mask = torch::arange(10) % 3 == 0;
  TensorDict picked = td[mask];                                  // [4], a copy
  TensorDict some = td[torch::tensor({0, 2, 2}, torch::kLong)];  // [3], a copy

  TORCH_CHECK(row.batch_size().empty() && row.get("obs").size(0) == 4);
  TORCH_CHECK(last.get("obs")[0].item<float>() == 36);
  TORCH_CHECK(odd.batch_size() == std::vector<int64_t>{5});
  TORCH_CHECK(lifted.get({"next", "obs"}).sizes() ==
              std::vector<int64_t>({1, 10, 4}));
  TORCH_CHECK(some.batch_size() == std::vector<int64_t>{3});

  head.get("obs").fill_(-1);  // views: the write reaches td
  TORCH_CHECK(td.get("obs")[0][0].item<float>() == -1);
  picked.get("obs").fill_(-2);  // a copy: td is unchanged
  TORCH_CHECK(!td.get("obs").eq(-2).any().item<bool>());

  TensorDict grid({{"x", torch::zeros({2, 5, 3})}}, {2, 5});
  TensorDict column = grid.index({Ellipsis, 0});  // batch_size [2]
  TORCH_CHECK(column.get("x").sizes() == std::vector<int64_t>({2, 3}));
}

void writing() {
  TensorDict buffer({}, {100});  // no keys, nothing allocated yet
  TensorDict step({{"obs", torch::ones({4})}, {"done", torch::tensor(true)}},
                  {});
  buffer[0] = step;  // allocates obs [100, 4] float32 and done [100] bool
  TORCH_CHECK(buffer.get("obs").sizes() == std::vector<int64_t>({100, 4}));
  TORCH_CHECK(buffer.get("done").scalar_type() == torch::kBool);
  TORCH_CHECK(
      buffer.index({Slice(1, None)}).get("obs").eq(0).all().item<bool>());

  torch::Tensor obs = buffer.get("obs");
  buffer[1] = step;                        // in place, same tensors
  buffer.index_put_({Slice(2, 4)}, step);  // batch [] broadcasts to [2]
  buffer[torch::tensor({7, 9}, torch::kLong)] = step;  // rows 7 and 9
  TORCH_CHECK(buffer.get("obs").is_same(obs));
  TORCH_CHECK(buffer.get("done").sum().item<int64_t>() == 6);
}

void copies_and_moves() {
  TensorDict td({{"obs", torch::rand({4, 3})}, {"step", torch::arange(4)}},
                {4});
  TensorDict half = td.to(torch::kHalf);  // every leaf cast to float16
  TensorDict here = td.to(torch::kCPU);   // device() is now set to cpu
  TORCH_CHECK(half.get("step").scalar_type() == torch::kHalf);
  TORCH_CHECK(here.device() == torch::Device(torch::kCPU));
  TORCH_CHECK(here.get("obs").is_same(td.get("obs")));  // already there
  TORCH_CHECK(td.cpu().device() == torch::Device(torch::kCPU));

  TensorDict strided = td.index({Slice(None, None, 2)});  // views, stride 2
  TensorDict packed = strided.contiguous();
  TORCH_CHECK(!strided.get("obs").is_contiguous());
  TORCH_CHECK(packed.get("obs").is_contiguous());

  TensorDict detached = td.detach();  // shares storage, no autograd history
  TensorDict zeros = td.clone().zero_();
  TORCH_CHECK(!(zeros != 0).any());
  TORCH_CHECK(detached.get("obs").data_ptr() == td.get("obs").data_ptr());
}

void comparisons() {
  TensorDict a({{"x", torch::zeros({3})}, {"y", torch::ones({3})}}, {3});
  TensorDict b = a.clone();
  TensorDict eq = a == b;  // a dict of bool leaves, same keys
  TORCH_CHECK(eq.get("x").scalar_type() == torch::kBool);
  TORCH_CHECK((a == b).all() && !(a != b).any());
  TORCH_CHECK((a == 0).any() && !(a == 0).all());
}

void printing() {
  TensorDict td({{"a", torch::zeros({10, 3})},
                 {{"nested", "b"}, torch::zeros({10, 3, 4}, torch::kLong)}},
                {10, 3});
  std::cout << td << "\n";
  std::string s = fmt::format("{}", td);  // the same bytes
  fmt::print("{}\n", NestedKey({"next", "obs"}));
  TORCH_CHECK(s == tensordict::repr(td));
}

void errors() {
  TensorDict td({}, {4, 8});
  try {
    td.set({"next", "obs"}, torch::zeros({4, 7}));
  } catch (const c10::Error& e) {
    std::cout << e.msg() << "\n";
  }
  TORCH_CHECK(!td.contains("next"));  // nothing was created
}

void checked_errors() {
  // What the guide says about error messages and all-or-nothing writes.
  TensorDict td({}, {4, 8});
  TORCH_CHECK(error_of([&] {
                td.set({"next", "obs"}, torch::zeros({4, 7}));
              }) ==
              "key ('next', 'obs'): expected leading dims [4, 8], got [4, 7]");

  TensorDict buffer({{"obs", torch::zeros({10, 4})}}, {10});
  TensorDict bad({{"reward", torch::ones({1})}, {"obs", torch::ones({5})}}, {});
  std::string msg = error_of([&] { buffer[0] = bad; });
  TORCH_CHECK(contains_text(msg, "key obs"), msg);
  TORCH_CHECK(!buffer.contains("reward"));  // all-or-nothing

  msg = error_of([&] { (void)buffer.get("action"); });
  TORCH_CHECK(contains_text(msg, "key action not found"), msg);
  TORCH_CHECK(contains_text(msg, "[obs]"), msg);

  msg = error_of([&] { (void)buffer.index({10}); });
  TORCH_CHECK(contains_text(msg, "index 10 is out of bounds"), msg);
}

}  // namespace

int main() {
  readme_tour();
  construction();
  keys();
  get_and_set();
  handles();
  indexing();
  writing();
  copies_and_moves();
  comparisons();
  printing();
  errors();
  checked_errors();
  std::cout << "getting_started: all checks passed\n";
}
