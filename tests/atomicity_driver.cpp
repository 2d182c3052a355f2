// The atomicity tests' driver (atomicity_driver.h): the helpers, the
// snapshots, running one operation, and the sequences.
#include "atomicity_driver.h"

#include <gtest/gtest.h>

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <utility>

namespace tensordict_test::atomicity {

namespace {

std::string KeysStr(const std::vector<NestedKey>& keys) {
  std::string out = "[";
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ", ";
    out += keys[i].str();
  }
  return out + "]";
}

std::string FirstLine(const std::string& s) {
  const size_t nl = s.find('\n');
  std::string out = nl == std::string::npos ? s : s.substr(0, nl);
  if (out.size() > 300) out = out.substr(0, 300) + "...";
  return out;
}

// ===========================================================================
// Snapshots (like test_util.h's TakeSnapshot/ExpectUnchanged, which compare
// keys, leaf identity, values and versions, plus data pointers, strides,
// sub-dict identity, meta leaves and NaNs; returns a description instead of
// failing, so that the failure names the operation)
// ===========================================================================

struct LeafSnap {
  at::Tensor tensor;
  at::Tensor value;  // undefined for meta leaves
  int64_t version = 0;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;
  const void* data = nullptr;
  at::ScalarType dtype = at::kFloat;
  std::string device;
  bool requires_grad = false;
};

struct EntrySnap {
  bool is_dict = false;
  TensorDict dict;
  Shape batch;
  LeafSnap leaf;
};

struct Snapshot {
  TensorDict root;
  Shape batch;
  std::vector<NestedKey> keys;
  std::vector<EntrySnap> entries;
};

Snapshot TakeSnap(const TensorDict& td) {
  Snapshot s;
  s.root = td;
  s.batch = td.batch_size().vec();
  s.keys = td.keys(/*include_nested=*/true);
  s.entries.reserve(s.keys.size());
  for (const auto& k : s.keys) {
    tensordict::Entry e = td.get_entry(k);
    EntrySnap es;
    if (e.is_tensordict()) {
      es.is_dict = true;
      es.dict = e.tensordict();
      es.batch = es.dict.batch_size().vec();
    } else {
      const at::Tensor& t = e.tensor();
      LeafSnap& l = es.leaf;
      l.tensor = t;
      l.version = t._version();
      l.sizes = t.sizes().vec();
      l.strides = t.strides().vec();
      l.offset = t.storage_offset();
      l.dtype = t.scalar_type();
      l.device = t.device().str();
      l.requires_grad = t.requires_grad();
      if (!t.is_meta()) {
        at::NoGradGuard no_grad;
        l.value = t.detach().clone();
        l.data = t.data_ptr();
      }
    }
    s.entries.push_back(std::move(es));
  }
  return s;
}

// "" when `td` matches the snapshot, else what differs.
std::string Diff(const TensorDict& td, const Snapshot& s) {
  std::ostringstream out;
  if (!td.is_same(s.root)) out << "  the dict handle is a different dict\n";
  if (td.batch_size().vec() != s.batch) {
    out << "  batch_size " << ShapeStr(s.batch) << " -> "
        << ShapeStr(td.batch_size()) << "\n";
  }
  const std::vector<NestedKey> keys = td.keys(/*include_nested=*/true);
  if (keys != s.keys) {
    out << "  keys changed: before " << KeysStr(s.keys) << "\n"
        << "                after  " << KeysStr(keys) << "\n";
    return out.str();
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string k = keys[i].str();
    const EntrySnap& es = s.entries[i];
    tensordict::Entry e = td.get_entry(keys[i]);
    if (e.is_tensordict() != es.is_dict) {
      out << "  key " << k << ": changed between leaf and sub-dict\n";
      continue;
    }
    if (es.is_dict) {
      TensorDict d = e.tensordict();
      if (!d.is_same(es.dict))
        out << "  key " << k << ": the sub-dict was replaced\n";
      if (d.batch_size().vec() != es.batch) {
        out << "  key " << k << ": sub-dict batch_size " << ShapeStr(es.batch)
            << " -> " << ShapeStr(d.batch_size()) << "\n";
      }
      continue;
    }
    const at::Tensor& t = e.tensor();
    const LeafSnap& l = es.leaf;
    if (!t.is_same(l.tensor))
      out << "  key " << k << ": the stored tensor was replaced\n";
    if (t.sizes().vec() != l.sizes) {
      out << "  key " << k << ": shape " << ShapeStr(l.sizes) << " -> "
          << ShapeStr(t.sizes()) << "\n";
    }
    if (t.strides().vec() != l.strides) {
      out << "  key " << k << ": strides " << ShapeStr(l.strides) << " -> "
          << ShapeStr(t.strides()) << "\n";
    }
    if (t.storage_offset() != l.offset)
      out << "  key " << k << ": storage offset changed\n";
    if (t.scalar_type() != l.dtype) {
      out << "  key " << k << ": dtype " << l.dtype << " -> " << t.scalar_type()
          << "\n";
    }
    if (t.device().str() != l.device) {
      out << "  key " << k << ": device " << l.device << " -> " << t.device()
          << "\n";
    }
    if (t.requires_grad() != l.requires_grad)
      out << "  key " << k << ": requires_grad changed\n";
    if (!t.is_meta() && l.value.defined()) {
      if (t.data_ptr() != l.data)
        out << "  key " << k << ": data pointer changed\n";
      at::NoGradGuard no_grad;
      if (t.sizes() == l.value.sizes() && t.scalar_type() == l.dtype &&
          !SameValues(t.detach(), l.value)) {
        out << "  key " << k << ": values changed (partial write)\n";
      }
    }
    if (t._version() != l.version) {
      out << "  key " << k << ": version " << l.version << " -> "
          << t._version() << "\n";
    }
  }
  return out.str();
}

bool FeatureOn(Rng& rng, FeatureId f) {
  return kFeatures[f].enabled && Coin(rng, kFeatures[f].probability);
}

// {"a": f32 [B, 3], "i": i64 [B], "b": bool [B, 2],
//  "next": {"obs": f32 [B, 3], "r": i64 [B]},
//  optional "e": f32 [B, 3] expanded, "g": f32 [B, 2] requiring grad,
//  "m": f32 [B, 2] on meta}, with B = [6] or [4, 3]; optionally locked.
TensorDict MakeDict(Rng& rng) {
  const Shape batch = Coin(rng, 0.5) ? Shape{6} : Shape{4, 3};
  TensorDict td{c10::IntArrayRef(batch)};
  td.set("a", RandT(rng, Cat(batch, {3}), at::kFloat));
  td.set("i", RandT(rng, batch, at::kLong));
  td.set("b", RandT(rng, Cat(batch, {2}), at::kBool));
  td.set({"next", "obs"}, RandT(rng, Cat(batch, {3}), at::kFloat));
  td.set({"next", "r"}, RandT(rng, batch, at::kLong));
  if (FeatureOn(rng, kExpandedLeaf)) {
    Shape ones(batch.size(), 1);
    td.set("e", RandT(rng, Cat(ones, {3}), at::kFloat).expand(Cat(batch, {3})));
  }
  if (FeatureOn(rng, kGradLeaf)) {
    td.set("g", RandT(rng, Cat(batch, {2}), at::kFloat).requires_grad_());
  }
  if (FeatureOn(rng, kMetaLeaf))
    td.set("m", MetaT(Cat(batch, {2}), at::kFloat));
  if (FeatureOn(rng, kLocked)) td.lock_();
  return td;
}

// The seed; a bad TENSORDICT_ATOMICITY_SEED goes to `*error` (every
// family's test fails with it) and the default seed is used.
uint64_t ReadSeed(std::string* error) {
  const char* s = std::getenv("TENSORDICT_ATOMICITY_SEED");
  if (s == nullptr || *s == '\0') return kDefaultSeed;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0') {
    *error = std::string("TENSORDICT_ATOMICITY_SEED is not a number: ") + s;
    return kDefaultSeed;
  }
  return static_cast<uint64_t>(v);
}

int ReadOnlySequence() {
  const char* s = std::getenv("TENSORDICT_ATOMICITY_SEQUENCE");
  if (s == nullptr || *s == '\0') return -1;
  return std::atoi(s);
}

DriverResult RunSequences() {
  DriverResult result;
  const uint64_t seed = ReadSeed(&result.error);
  result.seed = seed;
  std::cout << "atomicity seed: " << seed
            << " (replay with TENSORDICT_ATOMICITY_SEED=" << seed << ")"
            << std::endl;
  c10::AutoGradMode grad_mode(true);  // leaves requiring grad are protected

  std::vector<FamilyId> enabled;
  for (int f = 0; f < kNumFamilies; ++f) {
    if (kFamilies[f].enabled) enabled.push_back(static_cast<FamilyId>(f));
  }
  if (enabled.empty()) return result;

  Runner& runner = result.runner;
  runner.seed = seed;
  const int only = ReadOnlySequence();
  const auto start = std::chrono::steady_clock::now();
  int sequences = 0;
  bool out_of_time = false;
  for (int seq = 0; seq < kSequences; ++seq) {
    if (only >= 0 && seq != only) continue;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (only < 0 && elapsed > kTimeBudgetSeconds) {
      std::cout << "atomicity: time budget reached after " << sequences
                << " of " << kSequences << " sequences" << std::endl;
      out_of_time = true;
      break;
    }
    ++sequences;
    runner.seq = seq;
    World w(runner,
            seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(seq + 1)));
    w.td = MakeDict(w.rng);
    for (int op = 0; op < kOpsPerSequence; ++op) {
      runner.op = op;
      if (w.recreate || Coin(w.rng, kRecreateProbability) ||
          w.td.keys(true).size() > kMaxKeys) {
        w.td = MakeDict(w.rng);
        w.recreate = false;
      }
      switch (Pick(w.rng, enabled)) {
        case kSet:
          GenSet(w);
          break;
        case kIndexPut:
          GenIndexPut(w);
          break;
        case kStackCat:
          GenStackCat(w);
          break;
        case kUpdate:
          GenUpdate(w);
          break;
        case kArith:
          GenArith(w);
          break;
        case kApply:
          GenApply(w);
          break;
        case kRename:
          GenRename(w);
          break;
        case kErase:
          GenErase(w);
          break;
        case kReplayBuffer:
          GenReplayBuffer(w);
          break;
        default:
          break;
      }
    }
  }
  result.sequences = sequences;
  result.complete = only < 0 && !out_of_time;

  std::ostringstream summary;
  summary << "atomicity summary (seed " << seed << ", " << sequences
          << " sequences):\n";
  for (int f = 0; f < kNumFamilies; ++f) {
    const Stats& s = runner.stats[f];
    summary << "  " << kFamilies[f].name << ": " << s.ops << " ops, " << s.threw
            << " threw, " << s.failures << " failures\n";
  }
  result.summary = summary.str();
  std::cout << result.summary << std::flush;
  return result;
}

}  // namespace

// ===========================================================================
// Randomness and small helpers
// ===========================================================================

int64_t Uniform(Rng& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

bool Coin(Rng& rng, double p) {
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p;
}

Shape Cat(c10::IntArrayRef a, c10::IntArrayRef b) {
  Shape out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

std::string ShapeStr(c10::IntArrayRef s) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < s.size(); ++i) out << (i ? ", " : "") << s[i];
  out << "]";
  return out.str();
}

at::Tensor RandT(Rng& rng, c10::IntArrayRef shape, at::ScalarType dtype) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  at::Tensor t = at::empty({n}, at::kLong);
  int64_t* p = t.data_ptr<int64_t>();
  for (int64_t j = 0; j < n; ++j) {
    p[j] = dtype == at::kBool ? Uniform(rng, 0, 1) : Uniform(rng, -4, 4);
  }
  return t.reshape(shape).to(dtype);
}

at::Tensor MetaT(c10::IntArrayRef shape, at::ScalarType dtype) {
  return at::empty(shape, at::TensorOptions().dtype(dtype).device(at::kMeta));
}

Shape BadTrailing(c10::IntArrayRef trailing) {
  Shape out(trailing.begin(), trailing.end());
  if (out.empty()) {
    out.push_back(2);
  } else {
    out.back() += 1;
  }
  return out;
}

bool IsDict(const TensorDict& d, const NestedKey& k) {
  return d.contains(k) && d.get_entry(k).is_tensordict();
}

bool IsLeaf(const TensorDict& d, const NestedKey& k) {
  return d.contains(k) && d.get_entry(k).is_tensor();
}

bool IsIntegral(at::ScalarType t) {
  return at::isIntegralType(t, /*includeBool=*/false);
}

std::vector<LeafRef> Leaves(const TensorDict& d) {
  std::vector<LeafRef> out;
  for (const auto& k : d.keys(/*include_nested=*/true, /*leaves_only=*/true)) {
    out.push_back(LeafRef{k, d.get(k)});
  }
  return out;
}

bool SameValues(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type())
    return false;
  if (a.numel() == 0) return true;
  if (at::isFloatingType(a.scalar_type())) {
    return at::allclose(a, b, /*rtol=*/0.0, /*atol=*/0.0, /*equal_nan=*/true);
  }
  return at::equal(a, b);
}

TensorDict FloatOnly(const TensorDict& d) {
  std::vector<NestedKey> drop;
  for (const auto& l : Leaves(d)) {
    if (!at::isFloatingType(l.tensor.scalar_type())) drop.push_back(l.key);
  }
  return d.exclude(drop);
}

// ===========================================================================
// Running one operation
// ===========================================================================

void Runner::Fail(FamilyId f, const std::string& desc,
                  const std::string& what) {
  Stats& s = stats[f];
  ++s.failures;
  ++failures;
  if (s.reported >= kMaxReportsPerFamily) return;
  ++s.reported;
  std::ostringstream out;
  out << "[" << kFamilies[f].name << "] seed " << seed << ", sequence " << seq
      << ", op " << op << ": " << desc << "\n"
      << what << "\n(replay: TENSORDICT_ATOMICITY_SEED=" << seed
      << " TENSORDICT_ATOMICITY_SEQUENCE=" << seq << ")";
  reports[f].push_back(out.str());
}

void RunOp(Runner& r, const std::function<TensorDict()>& root, const Op& op,
           const std::function<std::string()>& state) {
  ++r.stats[op.family].ops;
  const Snapshot before = TakeSnap(root());
  const std::string state_before = state ? state() : std::string();
  bool threw = false;
  std::string message;
  try {
    op.run();
  } catch (const c10::Error& e) {
    threw = true;
    message = e.msg();
  } catch (const std::exception& e) {
    threw = true;
    message = e.what();
    r.Fail(op.family, op.desc,
           std::string("threw an exception that is not a c10::Error: ") +
               FirstLine(e.what()));
  } catch (...) {
    threw = true;
    r.Fail(op.family, op.desc, "threw something that is not a std::exception");
  }
  if (!threw) {
    std::string problem = op.after_success ? op.after_success() : std::string();
    if (op.expect_throw) {
      problem = "expected a c10::Error, but the call succeeded" +
                (problem.empty() ? std::string() : "; " + problem);
    }
    if (!problem.empty()) r.Fail(op.family, op.desc, problem);
    return;
  }
  ++r.stats[op.family].threw;
  std::string diff = Diff(root(), before);
  if (state) {
    const std::string after = state();
    if (after != state_before) {
      diff += "  state " + state_before + " -> " + after + "\n";
    }
  }
  if (!diff.empty()) {
    r.Fail(op.family, op.desc,
           "the call threw (" + FirstLine(message) +
               ") but did not leave the dict unchanged:\n" + diff);
  }
}

// ===========================================================================
// The dicts
// ===========================================================================

TensorDict PickDst(World& w, std::string* name) {
  const int64_t n0 = w.td.batch_size()[0];
  if (n0 >= 2 && Coin(w.rng, kViewProbability)) {
    const int64_t a = Uniform(w.rng, 0, n0 - 2);
    const int64_t b = Uniform(w.rng, a + 2, n0);
    *name = "v=td[Slice(" + std::to_string(a) + "," + std::to_string(b) + ")]";
    return w.td.index({Slice(a, b)});
  }
  *name = "td";
  return w.td;
}

TensorDict RandomRow(World& w, const TensorDict& dst, const Shape& row_batch,
                     bool all_keys) {
  TensorDict row{c10::IntArrayRef(row_batch)};
  const size_t bd = static_cast<size_t>(dst.batch_dims());
  for (const auto& l : Leaves(dst)) {
    if (!all_keys && !Coin(w.rng, l.tensor.is_meta() ? 0.25 : 0.85)) continue;
    row.set(l.key, RandT(w.rng, Cat(row_batch, l.tensor.sizes().slice(bd)),
                         l.tensor.scalar_type()));
  }
  return row;
}

// ===========================================================================
// Indices over the first batch dim
// ===========================================================================

IndexSpec RandomIndex(Rng& rng, const Shape& batch, bool allow_bad) {
  IndexSpec s;
  const int64_t n0 = batch[0];
  switch (Uniform(rng, 0, allow_bad ? 5 : 4)) {
    case 0:
      s.kind = IndexSpec::kInt;
      s.i = Uniform(rng, 0, n0 - 1);
      s.str = std::to_string(s.i);
      break;
    case 1:
      s.kind = IndexSpec::kNegInt;
      s.i = Uniform(rng, -n0, -1);
      s.str = std::to_string(s.i);
      break;
    case 2:
      s.kind = IndexSpec::kSlice;
      s.start = Uniform(rng, 0, n0 - 1);
      s.stop = Uniform(rng, s.start + 1, n0);
      s.step = Coin(rng, 0.2) ? 2 : 1;
      s.str = "Slice(" + std::to_string(s.start) + "," +
              std::to_string(s.stop) + "," + std::to_string(s.step) + ")";
      break;
    case 3: {
      s.kind = IndexSpec::kMask;
      const Shape shape =
          batch.size() > 1 && Coin(rng, 0.3) ? batch : Shape{n0};
      s.t = RandT(rng, shape, at::kBool);
      s.str = "mask" + ShapeStr(shape) + "(" +
              std::to_string(s.t.sum().item<int64_t>()) + " true)";
      break;
    }
    case 4: {
      s.kind = IndexSpec::kTensor;
      const int64_t len = Uniform(rng, 1, 3);
      s.t = at::empty({len}, at::kLong);
      int64_t* p = s.t.data_ptr<int64_t>();
      s.str = "tensor{";
      for (int64_t j = 0; j < len; ++j) {
        const int64_t v = Uniform(rng, -n0, n0 - 1);
        p[j] = v;
        s.str += (j ? "," : "") + std::to_string(v);
      }
      s.str += "}";
      break;
    }
    default:
      s.kind = IndexSpec::kOutOfRange;
      s.i = Coin(rng, 0.5) ? n0 : -n0 - 1;
      s.str = std::to_string(s.i) + " (out of range)";
      break;
  }
  return s;
}

TensorIndex ToIndex(const IndexSpec& s) {
  switch (s.kind) {
    case IndexSpec::kSlice:
      return TensorIndex(Slice(s.start, s.stop, s.step));
    case IndexSpec::kMask:
    case IndexSpec::kTensor:
      return TensorIndex(s.t);
    default:
      return TensorIndex(s.i);
  }
}

bool IndexedShape(const Shape& batch, const IndexSpec& s, Shape* out) {
  try {
    *out = at::zeros(batch, at::kByte).index({ToIndex(s)}).sizes().vec();
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

bool BatchFits(const Shape& vb, const Shape& s) {
  if (vb.size() > s.size()) return false;
  return std::equal(vb.begin(), vb.end(),
                    s.end() - static_cast<int64_t>(vb.size()));
}

// ===========================================================================
// The driver
// ===========================================================================

const DriverResult& RunDriver() {
  static const DriverResult result = RunSequences();
  return result;
}

void ExpectFamilyLeavesTheDictUnchanged(FamilyId f) {
  if (!kFamilies[f].enabled) {
    GTEST_SKIP() << kFamilies[f].name << " is switched off in kFamilies";
  }
  const DriverResult& result = RunDriver();
  if (!result.error.empty()) ADD_FAILURE() << result.error;
  const Stats& s = result.runner.stats[f];
  for (const std::string& report : result.runner.reports[f]) {
    ADD_FAILURE() << report;
  }
  EXPECT_EQ(s.failures, 0) << result.summary;
  // A family that drew no operation checked nothing.
  if (result.complete) {
    EXPECT_GT(s.ops, 0) << result.summary;
  }
}
}  // namespace tensordict_test::atomicity
