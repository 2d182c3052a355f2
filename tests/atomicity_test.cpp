// A seeded, randomized atomicity test: a call that fails must leave the dict
// exactly as it was.
//
// Each sequence builds a small dict (batch [6] or [4, 3]; float, int64 and
// bool leaves; a sub-dict "next"; optionally an expanded leaf "e" with a
// stride-0 dim, a leaf "g" that requires grad and a meta leaf "m"; optionally
// locked), then runs
// random operations on it, each with valid or deliberately bad inputs. Before
// every operation the dict is snapshotted; when the operation throws a
// `c10::Error`, the dict must equal the snapshot: the same keys in the same
// order, the same sub-dicts (identity and batch size), and for every leaf the
// same tensor (identity, data pointer, shape, strides, dtype, device,
// requires_grad), the same version counter and the same values. A failed call
// that bumps a version without changing any byte is reported too. Any other
// exception type is a failure. Calls whose bad input must be rejected (as
// documented in the headers) are also reported when they succeed. Successful
// calls are not checked against a model, except the writes whose inputs alias
// the destination (stack_out / cat_out, ReplayBuffer::add / extend), whose
// written region is compared with the clones of the inputs taken before.
//
// Reproducing: the seed is printed first; rerun with
// TENSORDICT_ATOMICITY_SEED=<seed> (and TENSORDICT_ATOMICITY_SEQUENCE=<n> to
// run a single sequence). Each failure message names the seed, the sequence,
// the operation's index and its description. Each operation family (and each
// optional leaf kind) can be switched off in the tables below.
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using at::indexing::Slice;
using at::indexing::TensorIndex;
using tensordict::NestedKey;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;

// ===========================================================================
// Configuration
// ===========================================================================

enum FamilyId : int {
  kSet,
  kIndexPut,
  kStackCat,
  kUpdate,
  kArith,
  kApply,
  kRename,
  kErase,
  kReplayBuffer,
  kNumFamilies
};

struct Family {
  const char* name;
  bool enabled;
};

// The operation families; each op picks one enabled family uniformly.
constexpr Family kFamilies[kNumFamilies] = {
    {"set", true},            // set(): leading dims, key conflicts, cycles
    {"index_put_", true},     // td[idx] = row / index_put_, lazy allocation
    {"stack_cat_out", true},  // stack_out / cat_out into td[Slice(...)]
    {"update", true},         // update_ / update
    {"arith", true},          // add_ / sub_ / mul_ / div_
    {"apply_", true},         // apply_ with a misbehaving callback
    {"rename_key_", true},    // rename_key_
    {"erase", true},          // erase
    {"replay_buffer", true},  // ReplayBuffer::add / extend
};

enum FeatureId : int {
  kExpandedLeaf,
  kGradLeaf,
  kMetaLeaf,
  kLocked,
  kNumFeatures
};

struct Feature {
  const char* name;
  bool enabled;
  double probability;  // per freshly built dict
};

// Optional leaves of the dicts. They come after "a", "i", "b" and "next", so
// a write that fails on them has already written the others.
constexpr Feature kFeatures[kNumFeatures] = {
    {"expanded leaf 'e' (stride 0)", true, 0.3},
    {"leaf 'g' requiring grad", true, 0.3},
    {"meta leaf 'm'", true, 0.25},
    // lock_(): adding, removing, renaming or replacing keys throws; in-place
    // writes still go through.
    {"locked dict", true, 0.2},
};

// Inputs that are views of the destination (stack_out / cat_out / index_put_
// / update_ / apply_ / ReplayBuffer).
constexpr bool kAliasedInputs = true;
// Compare the written region with the inputs' clones after a successful
// stack_out / cat_out / ReplayBuffer write (catches aliasing bugs).
constexpr bool kCheckAliasedResults = true;

constexpr uint64_t kDefaultSeed = 20261123;
constexpr int kSequences = 200;
constexpr int kOpsPerSequence = 30;
// No new sequence starts after this (only slow sanitizer builds get there).
constexpr double kTimeBudgetSeconds = 8.0;
constexpr double kRecreateProbability = 0.03;
constexpr size_t kMaxKeys = 16;           // rebuild the dict beyond this
constexpr double kViewProbability = 0.3;  // write through td[Slice(a, b)]
constexpr int kMaxReportsPerFamily = 3;   // detailed failures per family
constexpr int64_t kBufferCapacity = 5;

// ===========================================================================
// Randomness and small helpers
// ===========================================================================

using Rng = std::mt19937_64;
using Shape = std::vector<int64_t>;

int64_t Uniform(Rng& rng, int64_t lo, int64_t hi) {  // inclusive
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

bool Coin(Rng& rng, double p) {
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p;
}

template <typename T>
const T& Pick(Rng& rng, const std::vector<T>& v) {
  return v[static_cast<size_t>(
      Uniform(rng, 0, static_cast<int64_t>(v.size()) - 1))];
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

// A fresh CPU tensor with small integer values (exact in float, so that no
// NaN or rounding gets in the way of comparisons), drawn from `rng`.
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

// `trailing` made incompatible: its last dim grown by one (or a new dim).
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

struct LeafRef {
  NestedKey key;
  at::Tensor tensor;
};

std::vector<LeafRef> Leaves(const TensorDict& d) {
  std::vector<LeafRef> out;
  for (const auto& k : d.keys(/*include_nested=*/true, /*leaves_only=*/true)) {
    out.push_back(LeafRef{k, d.get(k)});
  }
  return out;
}

// Exact equality of values; NaNs compare equal to NaNs.
bool SameValues(const at::Tensor& a, const at::Tensor& b) {
  if (a.sizes() != b.sizes() || a.scalar_type() != b.scalar_type())
    return false;
  if (a.numel() == 0) return true;
  if (at::isFloatingType(a.scalar_type())) {
    return at::allclose(a, b, /*rtol=*/0.0, /*atol=*/0.0, /*equal_nan=*/true);
  }
  return at::equal(a, b);
}

// A shallow view of `d` (same tensors) without its non-floating leaves.
TensorDict FloatOnly(const TensorDict& d) {
  std::vector<NestedKey> drop;
  for (const auto& l : Leaves(d)) {
    if (!at::isFloatingType(l.tensor.scalar_type())) drop.push_back(l.key);
  }
  return d.exclude(drop);
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

// ===========================================================================
// Running one operation
// ===========================================================================

struct Stats {
  int64_t ops = 0;
  int64_t threw = 0;
  int64_t failures = 0;
  int reported = 0;
};

struct Runner {
  uint64_t seed = 0;
  int seq = 0;
  int op = 0;
  Stats stats[kNumFamilies];
  int64_t failures = 0;

  void Fail(FamilyId f, const std::string& desc, const std::string& what) {
    Stats& s = stats[f];
    ++s.failures;
    ++failures;
    if (s.reported >= kMaxReportsPerFamily) return;
    ++s.reported;
    ADD_FAILURE() << "[" << kFamilies[f].name << "] seed " << seed
                  << ", sequence " << seq << ", op " << op << ": " << desc
                  << "\n"
                  << what << "\n(replay: TENSORDICT_ATOMICITY_SEED=" << seed
                  << " TENSORDICT_ATOMICITY_SEQUENCE=" << seq << ")";
  }
};

struct Op {
  FamilyId family = kSet;
  std::string desc;
  // The input is invalid in a way the headers promise to reject.
  bool expect_throw = false;
  std::function<void()> run;
  // Runs right after a successful `run`, before anything else looks at the
  // dict (e.g. to break a reference cycle); returns a failure message or "".
  std::function<std::string()> after_success;
};

// Runs `op`. `root()` is the dict that must not change when `op` throws
// (snapshotted before the call), `state()` optional extra state compared as a
// string (e.g. a replay buffer's cursor and size).
void RunOp(Runner& r, const std::function<TensorDict()>& root, const Op& op,
           const std::function<std::string()>& state = nullptr) {
  SCOPED_TRACE(testing::Message()
               << "seed " << r.seed << ", sequence " << r.seq << ", op " << r.op
               << " [" << kFamilies[op.family].name << "]: " << op.desc);
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

struct World {
  World(Runner& r, uint64_t seed) : runner(r), rng(seed) {}

  Runner& runner;
  Rng rng;
  TensorDict td;
  std::unique_ptr<ReplayBuffer> rb;
  bool recreate = false;
  int64_t counter = 0;

  std::string NewKey(const char* prefix) {
    return std::string(prefix) + std::to_string(counter++);
  }
  void Run(const Op& op) {
    RunOp(
        runner, [this] { return td; }, op);
  }
};

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

// `td`, or (sometimes) the view dict `td[Slice(a, b)]`, whose leaves are views
// of td's (so a write through it must also be all-or-nothing for td).
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

// A row for `dst`: a random subset of its leaves (meta leaves rarely, as a
// CPU value cannot be written into them), with batch `row_batch`.
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

struct IndexSpec {
  enum Kind { kInt, kNegInt, kSlice, kMask, kTensor, kOutOfRange };
  Kind kind = kInt;
  int64_t i = 0;
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  at::Tensor t;
  std::string str;

  [[nodiscard]] bool is_int() const {
    return kind == kInt || kind == kNegInt || kind == kOutOfRange;
  }
};

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

// The batch shape `s` selects from `batch`; false for an invalid index.
bool IndexedShape(const Shape& batch, const IndexSpec& s, Shape* out) {
  try {
    *out = at::zeros(batch, at::kByte).index({ToIndex(s)}).sizes().vec();
    return true;
  } catch (const c10::Error&) {
    return false;
  }
}

// Whether a value of batch `vb` may be written into an indexed region of
// batch `s` (equal, or a suffix that broadcasts from the left).
bool BatchFits(const Shape& vb, const Shape& s) {
  if (vb.size() > s.size()) return false;
  return std::equal(vb.begin(), vb.end(),
                    s.end() - static_cast<int64_t>(vb.size()));
}

// ===========================================================================
// Op generators
// ===========================================================================

// set(): valid replacements and new keys; bad leading dims; a key through a
// tensor; a tensor where a dict lives and the reverse; a sub-dict with a bad
// batch size; a sub-dict set into its own descendant (a cycle); undefined.
void GenSet(World& w) {
  Rng& rng = w.rng;
  const TensorDict td = w.td;
  const Shape batch = td.batch_size().vec();
  const int64_t n0 = batch[0];
  const std::vector<LeafRef> leaves = Leaves(td);
  std::vector<NestedKey> top_leaves;
  for (const auto& k : td.keys()) {
    if (IsLeaf(td, k)) top_leaves.push_back(k);
  }
  const bool has_next = IsDict(td, "next");
  Op op;
  op.family = kSet;
  std::ostringstream d;
  switch (Uniform(rng, 0, 9)) {
    case 0: {  // replace a leaf with a valid tensor
      if (leaves.empty()) return;
      const LeafRef& l = Pick(rng, leaves);
      const at::Tensor v = RandT(rng, l.tensor.sizes(), l.tensor.scalar_type());
      d << "td.set(" << l.key.str() << ", new " << ShapeStr(v.sizes())
        << ") (valid)";
      op.run = [td, k = l.key, v] { td.set(k, v); };
      break;
    }
    case 1: {  // new key
      const std::string n = w.NewKey("s");
      const NestedKey k = Uniform(rng, 0, 2) == 0 ? NestedKey(n)
                          : (has_next && Coin(rng, 0.5))
                              ? NestedKey({"next", n})
                              : NestedKey({n, "x"});
      const at::Tensor v = RandT(rng, Cat(batch, {2}), at::kFloat);
      d << "td.set(" << k.str() << ", " << ShapeStr(v.sizes())
        << ") (valid, new key)";
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 2: {  // bad leading dims
      NestedKey k("a");
      switch (Uniform(rng, 0, 2)) {
        case 0:
          if (!leaves.empty()) k = Pick(rng, leaves).key;
          break;
        case 1:
          k = NestedKey(w.NewKey("s"));
          break;
        default:
          k = NestedKey(
              {w.NewKey("sub"), "x"});  // the path must not be created
          break;
      }
      Shape shape = Cat({n0 + 1}, c10::IntArrayRef(batch).slice(1));
      shape.push_back(2);
      if (Coin(rng, 0.2)) shape = {};  // fewer dims than the batch
      const at::Tensor v = RandT(rng, shape, at::kFloat);
      d << "td.set(" << k.str() << ", " << ShapeStr(v.sizes())
        << ") (bad leading dims for batch " << ShapeStr(batch) << ")";
      op.expect_throw = true;
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 3: {  // a key through a tensor
      if (top_leaves.empty()) return;
      const NestedKey k = Pick(rng, top_leaves).join(NestedKey("x"));
      const at::Tensor v = RandT(rng, batch, at::kFloat);
      d << "td.set(" << k.str() << ", ...) (an intermediate is a tensor)";
      op.expect_throw = true;
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 4: {  // tensor where a dict lives
      if (!has_next) return;
      const at::Tensor v = RandT(rng, batch, at::kFloat);
      d << "td.set(next, tensor) (a sub-dict lives there)";
      op.expect_throw = true;
      op.run = [td, v] { td.set("next", v); };
      break;
    }
    case 5: {  // dict where a tensor lives
      if (top_leaves.empty()) return;
      const NestedKey k = Pick(rng, top_leaves);
      const TensorDict v{c10::IntArrayRef(batch)};
      d << "td.set(" << k.str() << ", TensorDict) (a tensor lives there)";
      op.expect_throw = true;
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 6: {  // sub-dict with a bad batch size
      const Shape bad = Coin(rng, 0.5) ? Shape{n0 + 1} : Shape{};
      const TensorDict v({{"x", RandT(rng, Cat(bad, {1}), at::kFloat)}},
                         c10::IntArrayRef(bad));
      const std::string k = w.NewKey("sub");
      d << "td.set(" << k << ", TensorDict batch " << ShapeStr(bad) << ")";
      op.expect_throw = true;
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
    case 7: {  // a sub-dict into its own descendant
      if (!has_next) return;
      const std::string n = w.NewKey("loop");
      const bool deep = Coin(rng, 0.5);
      const NestedKey k =
          deep ? NestedKey({"next", n, "deep"}) : NestedKey({"next", n});
      d << "td.set(" << k.str() << ", td.get_tensordict(next)) (a cycle)";
      op.expect_throw = true;
      op.run = [td, k] { td.set(k, td.get_tensordict("next")); };
      // On success the dict contains itself: break the cycle before anything
      // walks it (keys(true) would recurse forever), then rebuild the dict.
      op.after_success = [&w, td, n] {
        try {
          td.erase({"next", n});
        } catch (const c10::Error&) {
        }
        w.recreate = true;
        return std::string(
            "the call created a reference cycle (next contains itself); "
            "broken by erasing it");
      };
      break;
    }
    case 8: {  // undefined tensor
      const std::string k = w.NewKey("u");
      d << "td.set(" << k << ", undefined tensor)";
      op.expect_throw = true;
      op.run = [td, k] { td.set(k, at::Tensor()); };
      break;
    }
    default: {  // valid sub-dict (a clone)
      const std::string k = w.NewKey("sub");
      const TensorDict v = has_next ? td.get_tensordict("next").clone()
                                    : TensorDict(c10::IntArrayRef(batch));
      d << "td.set(" << k << ", clone of next) (valid)";
      op.run = [td, k, v] { td.set(k, v); };
      break;
    }
  }
  op.desc = d.str();
  w.Run(op);
}

// td[idx] = row / index_put_: every index kind; rows with missing keys (lazy
// allocation), a wrong trailing shape, an uncastable dtype, a tensor where a
// dict lives and the reverse, a meta value, rows that are views of the
// destination, a batch that does not fit, an out-of-range index.
void GenIndexPut(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  const Shape batch = dst.batch_size().vec();
  const size_t bd = batch.size();
  const int64_t n0 = batch[0];
  const IndexSpec idx = RandomIndex(rng, batch, Coin(rng, 0.08));
  Shape ib;
  const bool index_ok = IndexedShape(batch, idx, &ib);
  Shape row_batch = index_ok ? ib : Shape(batch.begin() + 1, batch.end());
  if (index_ok && !row_batch.empty() && Coin(rng, 0.15)) {
    row_batch.erase(row_batch.begin());  // broadcasts from the left
  }
  TensorDict row = RandomRow(w, dst, row_batch, /*all_keys=*/false);
  Op op;
  op.family = kIndexPut;
  op.expect_throw = !index_ok;
  std::ostringstream d;
  d << dst_name << "[" << idx.str << "] = row(batch " << ShapeStr(row_batch)
    << ")";
  if (Coin(rng, 0.4)) {  // a key the destination lacks: allocated lazily
    const std::string n = w.NewKey("lazy");
    const NestedKey k = Coin(rng, 0.5)   ? NestedKey(n)
                        : Coin(rng, 0.5) ? NestedKey({"next", n})
                                         : NestedKey({n, "x"});
    const at::ScalarType dt = Pick(
        rng, std::vector<at::ScalarType>{at::kFloat, at::kLong, at::kBool});
    if (!(k.is_nested() && IsLeaf(row, NestedKey(k.front())))) {
      row.set(k, RandT(rng, Cat(row_batch, {2}), dt));
      d << " +lazy key " << k.str();
    }
  }
  std::vector<NestedKey> in_both;  // row leaves that dst holds as leaves
  for (const auto& k : row.keys(true, true)) {
    if (IsLeaf(dst, k)) in_both.push_back(k);
  }
  switch (Uniform(rng, 0, 10)) {
    case 0:
    case 1:
      d << " (valid)";
      break;
    case 2: {  // wrong trailing shape
      if (in_both.empty()) break;
      const NestedKey k = Pick(rng, in_both);
      const at::Tensor dt = dst.get(k);
      row.set(k, RandT(rng, Cat(row_batch, BadTrailing(dt.sizes().slice(bd))),
                       dt.is_meta() ? at::kFloat : dt.scalar_type()));
      d << "; wrong trailing shape at " << k.str();
      op.expect_throw = true;
      break;
    }
    case 3: {  // uncastable dtype (float -> int64/bool, int64 -> bool)
      std::vector<NestedKey> ints;
      for (const auto& k : in_both) {
        const auto st = dst.get(k).scalar_type();
        if (st == at::kLong || st == at::kBool) ints.push_back(k);
      }
      if (ints.empty()) break;
      const NestedKey k = Pick(rng, ints);
      const bool to_bool = dst.get(k).scalar_type() == at::kBool;
      const at::ScalarType src =
          to_bool && Coin(rng, 0.5) ? at::kLong : at::kFloat;
      row.set(k, RandT(rng, row.get(k).sizes(), src));
      d << "; uncastable " << src << " value at " << k.str();
      op.expect_throw = true;
      break;
    }
    case 4: {  // a tensor where a dict lives
      if (!IsDict(dst, "next")) break;
      if (row.contains("next")) row.erase("next");
      row.set("next", RandT(rng, Cat(row_batch, {1}), at::kFloat));
      d << "; tensor at next (a sub-dict in the destination)";
      op.expect_throw = true;
      break;
    }
    case 5: {  // a dict where a tensor lives
      const NestedKey k =
          Coin(rng, 0.5) ? NestedKey("a") : NestedKey({"next", "obs"});
      if (!IsLeaf(dst, k)) break;
      if (row.contains(k)) row.erase(k);
      row.set(k.join(NestedKey("z")), RandT(rng, row_batch, at::kFloat));
      d << "; sub-dict at " << k.str() << " (a tensor in the destination)";
      op.expect_throw = true;
      break;
    }
    case 6: {  // a meta value into a CPU buffer
      std::vector<NestedKey> cpu;
      for (const auto& k : in_both) {
        if (!dst.get(k).is_meta()) cpu.push_back(k);
      }
      if (cpu.empty()) break;
      const NestedKey k = Pick(rng, cpu);
      row.set(k, MetaT(row.get(k).sizes(), row.get(k).scalar_type()));
      d << "; meta value at " << k.str();
      op.expect_throw = true;
      break;
    }
    case 7: {  // castable dtype change (int64 into float, bool into int64)
      for (const auto& k : in_both) {
        const auto st = dst.get(k).scalar_type();
        if (at::isFloatingType(st))
          row.set(k, RandT(rng, row.get(k).sizes(), at::kLong));
        if (st == at::kLong)
          row.set(k, RandT(rng, row.get(k).sizes(), at::kBool));
      }
      d << "; castable dtypes (valid)";
      break;
    }
    case 8: {  // the row is a view of the destination
      if (!kAliasedInputs || !index_ok) break;
      if (idx.kind == IndexSpec::kSlice && idx.step == 1 && row_batch == ib) {
        const int64_t len = idx.stop - idx.start;
        int64_t s2 = -1;
        if (idx.start + 1 + len <= n0) {
          s2 = idx.start + 1;
        } else if (idx.start >= 1) {
          s2 = idx.start - 1;
        }
        if (s2 < 0) break;
        row = dst.index({Slice(s2, s2 + len)});
        // The first leaf is a copy, so that it is written before the
        // overlapping ones are reached.
        const auto ks = row.keys(true, true);
        if (!ks.empty()) row.set(ks[0], row.get(ks[0]).clone());
        d << "; row = " << dst_name << "[Slice(" << s2 << "," << s2 + len
          << ")] (views overlapping the region, first leaf cloned)";
      } else if (idx.is_int() && row_batch == ib) {
        const int64_t j = Uniform(rng, 0, n0 - 1);
        row = dst.index({TensorIndex(j)});
        d << "; row = " << dst_name << "[" << j << "] (views)";
      }
      break;
    }
    case 9: {  // a batch that does not fit the indexed region
      Shape bb = row_batch;
      if (bb.empty()) {
        bb = {2};
      } else {
        bb[0] += 1;
      }
      row = RandomRow(w, dst, bb, /*all_keys=*/false);
      d << "; row batch " << ShapeStr(bb) << " instead";
      op.expect_throw = !index_ok || !BatchFits(bb, ib);
      break;
    }
    default: {  // a nested dict where a nested tensor lives
      if (!IsLeaf(dst, {"next", "obs"})) break;
      if (row.contains({"next", "obs"})) row.erase({"next", "obs"});
      row.set({"next", "obs", "deep"}, RandT(rng, row_batch, at::kFloat));
      d << "; sub-dict at (next, obs)";
      op.expect_throw = true;
      break;
    }
  }
  const int how = static_cast<int>(Uniform(rng, 0, 2));
  d << (how == 0   ? " via index_put_"
        : how == 1 ? " via operator="
                   : " via td[i] (int)");
  op.desc = d.str();
  op.run = [dst, idx, row, how] {
    if (how == 0) {
      dst.index_put_({ToIndex(idx)}, row);
    } else if (how == 2 && idx.is_int()) {
      dst[idx.i] = row;
    } else {
      dst[ToIndex(idx)] = row;
    }
  };
  w.Run(op);
}

// stack_out / cat_out into dst[Slice(s, s + k)]: fresh rows, rows that are
// views of the destination, clones; one input with a wrong trailing shape, an
// uncastable dtype, a missing or extra key, a meta leaf; keys the destination
// lacks (lazy); the wrong number of rows; a bad stack dim.
void GenStackCat(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  const Shape batch = dst.batch_size().vec();
  const int64_t n0 = batch[0];
  const Shape row_batch(batch.begin() + 1, batch.end());
  const bool is_cat = Coin(rng, 0.4);
  const int64_t s = Uniform(rng, 0, n0 - 1);
  const int64_t k = Uniform(rng, 1, n0 - s);
  std::vector<TensorDict> inputs;
  std::ostringstream d;
  d << (is_cat ? "cat_out(" : "stack_out(") << dst_name << "[Slice(" << s << ","
    << s + k << ")], {";
  // len < 0: a stack row (batch row_batch); else a cat part of `len` rows.
  auto make_input = [&](int64_t len) {
    const int kind = static_cast<int>(Uniform(rng, 0, kAliasedInputs ? 2 : 0));
    d << (inputs.empty() ? "" : ", ");
    if (kind == 0) {
      const Shape b = len < 0 ? row_batch : Cat({len}, row_batch);
      d << "fresh";
      inputs.push_back(RandomRow(w, dst, b, /*all_keys=*/true));
      return;
    }
    TensorDict in;
    if (len < 0) {
      const int64_t j = Uniform(rng, 0, n0 - 1);
      in = dst.index({TensorIndex(j)});
      d << dst_name << "[" << j << "]";
    } else {
      const int64_t a = Uniform(rng, 0, n0 - len);
      in = dst.index({Slice(a, a + len)});
      d << dst_name << "[Slice(" << a << "," << a + len << ")]";
    }
    if (kind == 2) {
      in = in.clone();
      d << ".clone()";
    }
    inputs.push_back(in);
  };
  if (!is_cat) {
    for (int64_t j = 0; j < k; ++j) make_input(-1);
  } else {
    int64_t left = k;
    while (left > 0) {
      const int64_t len = Uniform(rng, 1, left);
      make_input(len);
      left -= len;
    }
  }
  d << "}";
  Op op;
  op.family = kStackCat;
  int64_t dim = 0;
  const size_t r = static_cast<size_t>(
      Uniform(rng, 0, static_cast<int64_t>(inputs.size()) - 1));
  TensorDict& in = inputs[r];
  const std::vector<NestedKey> in_keys = in.keys(true, true);
  const size_t in_bd = static_cast<size_t>(in.batch_dims());
  switch (Uniform(rng, 0, 10)) {
    case 0:
    case 1:
    case 2:
      d << " (valid)";
      break;
    case 3: {  // wrong trailing shape in one input
      if (in_keys.empty()) break;
      const NestedKey key = Pick(rng, in_keys);
      const at::Tensor t = in.get(key);
      in.set(key, RandT(rng,
                        Cat(t.sizes().slice(0, in_bd),
                            BadTrailing(t.sizes().slice(in_bd))),
                        t.scalar_type()));
      d << "; input " << r << " has a wrong trailing shape at " << key.str();
      op.expect_throw = true;
      break;
    }
    case 4: {  // uncastable dtype in one input
      std::vector<NestedKey> ints;
      for (const auto& key : in_keys) {
        if (IsLeaf(dst, key) &&
            !at::isFloatingType(dst.get(key).scalar_type())) {
          ints.push_back(key);
        }
      }
      if (ints.empty()) break;
      const NestedKey key = Pick(rng, ints);
      in.set(key, RandT(rng, in.get(key).sizes(), at::kFloat));
      d << "; input " << r << " has a float value at " << key.str()
        << " (uncastable)";
      op.expect_throw = true;
      break;
    }
    case 5: {  // a key missing from one input
      if (in_keys.empty()) break;
      const NestedKey key = Pick(rng, in_keys);
      in.erase(key);
      d << "; input " << r << " lacks " << key.str();
      op.expect_throw = inputs.size() >= 2;
      break;
    }
    case 6: {  // a key every input has and the destination lacks (lazy)
      const std::string n = w.NewKey("lazy");
      for (auto& x : inputs) {
        x.set(n, RandT(rng, Cat(x.batch_size(), {2}), at::kFloat));
      }
      d << "; every input has the new key " << n << " (valid, lazy)";
      break;
    }
    case 7: {  // an extra key in one input only
      const std::string n = w.NewKey("extra");
      in.set(n, RandT(rng, Cat(in.batch_size(), {2}), at::kFloat));
      d << "; input " << r << " has an extra key " << n;
      op.expect_throw = inputs.size() >= 2;
      break;
    }
    case 8: {  // a meta leaf in one input (the destination's leaf is on the CPU)
      std::vector<NestedKey> cpu;
      for (const auto& key : in_keys) {
        if (IsLeaf(dst, key) && !dst.get(key).is_meta()) cpu.push_back(key);
      }
      if (cpu.empty()) break;
      const NestedKey key = Pick(rng, cpu);
      in.set(key, MetaT(in.get(key).sizes(), in.get(key).scalar_type()));
      d << "; input " << r << " has a meta leaf at " << key.str();
      break;
    }
    case 9: {  // the wrong number of rows
      make_input(is_cat ? 1 : -1);
      d << "; one input too many";
      op.expect_throw = true;
      break;
    }
    default: {  // another dim
      if (is_cat) {
        if (!row_batch.empty()) break;
        dim = 1;
        op.expect_throw = true;  // inputs have one batch dim
      } else {
        dim = Uniform(rng, 1, static_cast<int64_t>(row_batch.size()) + 1);
        if (dim > static_cast<int64_t>(row_batch.size())) {
          op.expect_throw = true;
        } else {
          Shape stacked = row_batch;
          stacked.insert(stacked.begin() + dim, k);
          op.expect_throw = stacked != Cat({k}, row_batch);
        }
      }
      d << "; dim " << dim;
      break;
    }
  }
  // The values a correct write produces: the inputs as they are now.
  TensorDict expected;
  bool check = kCheckAliasedResults && dim == 0 && !op.expect_throw;
  if (check) {
    try {
      at::NoGradGuard no_grad;
      std::vector<TensorDict> clones;
      for (const auto& x : inputs) clones.push_back(x.clone());
      expected =
          is_cat ? tensordict::cat(clones, 0) : tensordict::stack(clones, 0);
    } catch (const c10::Error&) {
      check = false;
    }
  }
  op.desc = d.str();
  op.run = [dst, inputs, is_cat, s, k, dim] {
    if (is_cat) {
      (void)tensordict::cat_out(dst[Slice(s, s + k)], inputs, dim);
    } else {
      (void)tensordict::stack_out(dst[Slice(s, s + k)], inputs, dim);
    }
  };
  if (check) {
    op.after_success = [dst, expected, s, k]() -> std::string {
      at::NoGradGuard no_grad;
      std::ostringstream out;
      for (const auto& key : expected.keys(true, true)) {
        const at::Tensor e = expected.get(key);
        if (!IsLeaf(dst, key)) {
          out << "  key " << key.str() << " is missing after the call\n";
          continue;
        }
        const at::Tensor got = dst.get(key);
        if (got.is_meta() || e.is_meta()) continue;
        if (!SameValues(got.detach().narrow(0, s, k),
                        e.detach().to(got.scalar_type()))) {
          out << "  key " << key.str()
              << ": the written rows differ from the inputs' values before "
                 "the call\n";
        }
      }
      const std::string o = out.str();
      return o.empty() ? o : "the call succeeded but wrote wrong values:\n" + o;
    };
  }
  w.Run(op);
}

// update_ (in place): a key the dict lacks, a bad shape, a tensor where a
// dict lives, a source that overlaps the destination, a meta source, castable
// dtypes. update (structural): valid entries first, then a tensor where a
// dict lives, a dict where a tensor lives, bad leading dims, or a sub-dict set
// into itself.
void GenUpdate(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  const Shape batch = dst.batch_size().vec();
  const size_t bd = batch.size();
  Op op;
  op.family = kUpdate;
  std::ostringstream d;
  TensorDict other{c10::IntArrayRef(batch)};
  if (Coin(rng, 0.75)) {
    d << dst_name << ".update_(other)";
    for (const auto& l : Leaves(dst)) {
      if (Coin(rng, 0.75)) {
        other.set(l.key, RandT(rng, l.tensor.sizes(), l.tensor.scalar_type()));
      }
    }
    const std::vector<NestedKey> keys = other.keys(true, true);
    switch (Uniform(rng, 0, 8)) {
      case 0:
      case 1:
        d << " (valid)";
        break;
      case 2: {  // a key the dict lacks
        const std::string n = w.NewKey("nope");
        const NestedKey k =
            Coin(rng, 0.5) ? NestedKey(n) : NestedKey({"next", n});
        if (IsLeaf(other, "next")) break;
        other.set(k, RandT(rng, Cat(batch, {1}), at::kFloat));
        d << "; other has " << k.str() << ", which the dict lacks";
        op.expect_throw = true;
        break;
      }
      case 3: {  // a bad shape
        if (keys.empty()) break;
        const NestedKey k = Pick(rng, keys);
        const at::Tensor t = other.get(k);
        other.set(k, RandT(rng, Cat(batch, BadTrailing(t.sizes().slice(bd))),
                           t.scalar_type()));
        d << "; bad shape at " << k.str();
        op.expect_throw = true;
        break;
      }
      case 4: {  // a tensor where a dict lives
        if (!IsDict(dst, "next")) break;
        if (other.contains("next")) other.erase("next");
        other.set("next", RandT(rng, batch, at::kFloat));
        d << "; other has a tensor at next";
        op.expect_throw = true;
        break;
      }
      case 5: {  // a source that overlaps its destination
        if (!kAliasedInputs) break;
        std::vector<NestedKey> ok;
        for (const auto& k : keys) {
          const at::Tensor t = dst.get(k);
          if (!t.is_meta() && t.size(0) > 1) ok.push_back(k);
        }
        if (ok.empty()) break;
        const NestedKey k = Pick(rng, ok);
        const at::Tensor t = dst.get(k);
        other.set(k, t.narrow(0, 0, 1).expand(t.sizes()));
        d << "; other's " << k.str() << " is dst's row 0 expanded (overlaps)";
        break;
      }
      case 6: {  // a meta source into a CPU leaf
        std::vector<NestedKey> cpu;
        for (const auto& k : keys) {
          if (!dst.get(k).is_meta()) cpu.push_back(k);
        }
        if (cpu.empty()) break;
        const NestedKey k = Pick(rng, cpu);
        other.set(k, MetaT(other.get(k).sizes(), other.get(k).scalar_type()));
        d << "; meta source at " << k.str();
        break;
      }
      default: {  // other dtypes (update_ casts like copy_)
        for (const auto& k : keys) {
          other.set(k, RandT(rng, other.get(k).sizes(), at::kFloat));
        }
        d << "; float sources everywhere (valid)";
        break;
      }
    }
    op.run = [dst, other] { dst.update_(other); };
  } else {
    d << dst_name << ".update(other)";
    // Valid entries first: a later failure must undo them.
    other.set(w.NewKey("new"), RandT(rng, Cat(batch, {2}), at::kFloat));
    if (IsLeaf(dst, "a")) {
      other.set("a", RandT(rng, dst.get("a").sizes(), at::kFloat));
    }
    switch (Uniform(rng, 0, 4)) {
      case 0:
        d << " (valid)";
        break;
      case 1:
        if (!IsDict(dst, "next")) break;
        other.set(w.NewKey("late"), RandT(rng, batch, at::kFloat));
        other.set("next", RandT(rng, batch, at::kFloat));
        d << "; other has a tensor at next (a sub-dict here)";
        op.expect_throw = true;
        break;
      case 2:
        if (!IsLeaf(dst, "i")) break;
        other.set({"i", "z"}, RandT(rng, batch, at::kFloat));
        d << "; other has a sub-dict at i (a tensor here)";
        op.expect_throw = true;
        break;
      case 3: {
        Shape bad = batch;
        bad[0] += 1;
        TensorDict o{c10::IntArrayRef(bad)};
        o.set(w.NewKey("new"), RandT(rng, Cat(bad, {2}), at::kFloat));
        other = o;
        d << "; other has batch " << ShapeStr(bad);
        op.expect_throw = true;
        break;
      }
      default: {
        if (!IsDict(dst, "next")) break;
        const std::string n = w.NewKey("loop");
        TensorDict inner{c10::IntArrayRef(batch)};
        inner.set(n, dst.get_tensordict("next"));
        other.set("next", inner);
        d << "; other = {next: {" << n << ": dst's next}} (a cycle)";
        op.expect_throw = true;
        op.after_success = [&w, dst, n] {
          try {
            dst.get_tensordict("next").erase(n);
          } catch (const c10::Error&) {
          }
          w.recreate = true;
          return std::string(
              "the call created a reference cycle; broken by erasing it");
        };
        break;
      }
    }
    op.run = [dst, other] { dst.update(other); };
  }
  op.desc = d.str();
  w.Run(op);
}

// add_ / sub_ / mul_ / div_ with a scalar, a tensor or a dict operand, on the
// dict, its float leaves only, or its "next" sub-dict; dtype-invalid
// combinations, bad operand shapes, missing keys, a float alpha on integer
// leaves, meta operands.
void GenArith(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  TensorDict target = dst;
  std::string tname = dst_name;
  switch (Uniform(rng, 0, 2)) {
    case 0:
      break;
    case 1:
      target = FloatOnly(dst);
      tname = dst_name + ".exclude(non-float)";
      break;
    default:
      if (IsDict(dst, "next")) {
        target = dst.get_tensordict("next");
        tname = dst_name + ".next";
      }
      break;
  }
  const std::vector<LeafRef> leaves = Leaves(target);
  bool has_int = false;
  bool has_bool = false;
  bool has_grad_leaf = false;
  for (const auto& l : leaves) {
    has_int = has_int || IsIntegral(l.tensor.scalar_type());
    has_bool = has_bool || l.tensor.scalar_type() == at::kBool;
    has_grad_leaf =
        has_grad_leaf || (l.tensor.requires_grad() && l.tensor.is_leaf());
  }
  const Shape batch = target.batch_size().vec();
  const int opk = static_cast<int>(Uniform(rng, 0, 3));
  static const char* const kNames[] = {"add_", "sub_", "mul_", "div_"};
  const bool is_div = opk == 3;
  const bool is_sub = opk == 1;
  Op op;
  op.family = kArith;
  op.expect_throw = has_grad_leaf;
  std::ostringstream d;
  d << tname << "." << kNames[opk] << "(";
  switch (Uniform(rng, 0, 2)) {
    case 0: {  // scalar
      const int kind = static_cast<int>(Uniform(rng, 0, 2));
      const at::Scalar sc = kind == 0   ? at::Scalar(int64_t{2})
                            : kind == 1 ? at::Scalar(0.5)
                                        : at::Scalar(true);
      d << (kind == 0 ? "2" : kind == 1 ? "0.5" : "true") << ")";
      if ((is_div && (has_int || has_bool)) ||
          (kind == 1 && (has_int || has_bool)) || (has_bool && kind != 2) ||
          (is_sub && has_bool)) {
        op.expect_throw = true;
      }
      op.run = [target, opk, sc] {
        switch (opk) {
          case 0:
            target.add_(sc);
            break;
          case 1:
            target.sub_(sc);
            break;
          case 2:
            target.mul_(sc);
            break;
          default:
            target.div_(sc);
            break;
        }
      };
      break;
    }
    case 1: {  // tensor
      at::Tensor t;
      switch (Uniform(rng, 0, 5)) {
        case 0:
          t = RandT(rng, batch, at::kFloat);
          break;
        case 1:
          t = RandT(rng, batch, at::kLong);
          break;
        case 2:
          t = RandT(rng, {batch[0]}, at::kFloat);
          break;
        case 3:
          t = RandT(rng, {}, at::kFloat);
          break;
        case 4:
          t = RandT(rng, {batch[0] + 1}, at::kFloat);
          op.expect_throw = true;
          break;
        default:
          t = RandT(rng, Cat(batch, {7}), at::kFloat);
          op.expect_throw = true;
          break;
      }
      // Avoid division by zero: integer-valued operands, made nonzero.
      if (is_div) t = at::where(t == 0, at::ones_like(t), t);
      d << "tensor " << t.scalar_type() << ShapeStr(t.sizes()) << ")";
      const bool is_float = at::isFloatingType(t.scalar_type());
      if ((is_float && (has_int || has_bool)) || has_bool ||
          (is_div && (has_int || has_bool))) {
        op.expect_throw = true;
      }
      op.run = [target, opk, t] {
        switch (opk) {
          case 0:
            target.add_(t);
            break;
          case 1:
            target.sub_(t);
            break;
          case 2:
            target.mul_(t);
            break;
          default:
            target.div_(t);
            break;
        }
      };
      break;
    }
    default: {  // dict
      TensorDict other{c10::IntArrayRef(batch)};
      for (const auto& l : leaves) {
        other.set(l.key, RandT(rng, l.tensor.sizes(), l.tensor.scalar_type()));
      }
      at::Scalar alpha = int64_t{1};
      d << "dict";
      if (is_div && (has_int || has_bool)) op.expect_throw = true;
      if (is_sub && has_bool) op.expect_throw = true;
      switch (Uniform(rng, 0, 6)) {
        case 0:
        case 1:
        case 2:
          break;
        case 3:  // a key missing from the operand
          if (leaves.empty()) break;
          other.erase(Pick(rng, leaves).key);
          d << " missing a key";
          op.expect_throw = true;
          break;
        case 4: {  // a bad shape in the operand
          if (leaves.empty()) break;
          const LeafRef& l = Pick(rng, leaves);
          other.set(l.key, RandT(rng,
                                 Cat(batch, BadTrailing(l.tensor.sizes().slice(
                                                batch.size()))),
                                 l.tensor.scalar_type()));
          d << " with a bad shape at " << l.key.str();
          op.expect_throw = true;
          break;
        }
        case 5:  // a float alpha (LibTorch rejects it for integer leaves)
          if (opk > 1) break;
          alpha = 0.5;
          d << ", alpha=0.5";
          break;
        default: {  // a meta operand leaf
          std::vector<LeafRef> cpu;
          for (const auto& l : leaves) {
            if (!l.tensor.is_meta()) cpu.push_back(l);
          }
          if (cpu.empty()) break;
          const LeafRef& l = Pick(rng, cpu);
          other.set(l.key, MetaT(l.tensor.sizes(), l.tensor.scalar_type()));
          d << " with a meta leaf at " << l.key.str();
          break;
        }
      }
      if (is_div) {  // no integer division by zero
        for (const auto& l : Leaves(other)) {
          if (!l.tensor.is_meta() && l.tensor.scalar_type() != at::kBool) {
            other.set(l.key, at::where(l.tensor == 0, at::ones_like(l.tensor),
                                       l.tensor));
          }
        }
      }
      d << ")";
      op.run = [target, opk, other, alpha] {
        switch (opk) {
          case 0:
            target.add_(other, alpha);
            break;
          case 1:
            target.sub_(other, alpha);
            break;
          case 2:
            target.mul_(other);
            break;
          default:
            target.div_(other);
            break;
        }
      };
      break;
    }
  }
  if (leaves.empty()) op.expect_throw = false;
  op.desc = d.str();
  w.Run(op);
}

// apply_ with a callback that misbehaves for one leaf: a bad shape, a
// c10::Error, a view overlapping the leaf, a meta result; or behaves (t + 1,
// undefined, the leaf itself).
void GenApply(World& w) {
  Rng& rng = w.rng;
  std::string dst_name;
  const TensorDict dst = PickDst(w, &dst_name);
  TensorDict target = dst;
  std::string tname = dst_name;
  if (Coin(rng, 0.25) && IsDict(dst, "next")) {
    target = dst.get_tensordict("next");
    tname = dst_name + ".next";
  } else if (Coin(rng, 0.25)) {
    target = FloatOnly(dst);
    tname = dst_name + ".exclude(non-float)";
  }
  const std::vector<LeafRef> leaves = Leaves(target);
  Op op;
  op.family = kApply;
  std::ostringstream d;
  d << tname << ".apply_(fn)";
  at::Tensor victim;   // the leaf the callback misbehaves for
  at::Tensor special;  // what it returns for it
  int kind = leaves.empty() ? 0 : static_cast<int>(Uniform(rng, 0, 6));
  if (kind != 0) {
    const LeafRef& l = Pick(rng, leaves);
    victim = l.tensor;
    d << "; for " << l.key.str() << ": ";
  }
  switch (kind) {
    case 0:
      d << " (valid: t + 1 everywhere)";
      break;
    case 1:
      special = RandT(rng, Cat(victim.sizes(), {2}), at::kFloat);
      d << "returns a bad shape " << ShapeStr(special.sizes());
      op.expect_throw = true;
      break;
    case 2:
      d << "throws a c10::Error";
      op.expect_throw = true;
      break;
    case 3:
      d << "returns an undefined tensor (valid)";
      break;
    case 4:
      if (kAliasedInputs && !victim.is_meta() && victim.size(0) > 1) {
        d << "returns t.narrow(0, 0, 1) (overlaps the leaf)";
      } else {
        kind = 6;
        d << "returns t itself (valid)";
      }
      break;
    case 5:
      if (!victim.is_meta()) {
        special = MetaT(victim.sizes(), victim.scalar_type());
        d << "returns a meta tensor";
      } else {
        kind = 6;
        d << "returns t itself (valid)";
      }
      break;
    default:
      d << "returns t itself (valid)";
      break;
  }
  const TensorDict::LeafFn fn = [victim, special,
                                 kind](const at::Tensor& t) -> at::Tensor {
    if (victim.defined() && t.is_same(victim)) {
      switch (kind) {
        case 1:
        case 5:
          return special;
        case 2:
          TORCH_CHECK(false,
                      "atomicity test: the callback fails for this leaf");
          return at::Tensor();  // unreachable
        case 3:
          return at::Tensor();
        case 4:
          return t.narrow(0, 0, 1);
        default:
          return t;
      }
    }
    if (t.scalar_type() == at::kBool) return t.logical_not();
    return t + 1;
  };
  op.desc = d.str();
  op.run = [target, fn] { target.apply_(fn); };
  w.Run(op);
}

// rename_key_: to a new key, a nested new key, an existing key, a key inside
// the old one, a key through a tensor, an ancestor of the old key; a missing
// old key.
void GenRename(World& w) {
  Rng& rng = w.rng;
  const TensorDict td = w.td;
  const std::vector<NestedKey> keys = td.keys(true);
  std::vector<NestedKey> top_leaves;
  for (const auto& k : td.keys()) {
    if (IsLeaf(td, k)) top_leaves.push_back(k);
  }
  Op op;
  op.family = kRename;
  const bool missing = keys.empty() || Coin(rng, 0.15);
  const NestedKey old_key =
      missing ? NestedKey(w.NewKey("missing")) : Pick(rng, keys);
  op.expect_throw = missing;
  NestedKey new_key(w.NewKey("renamed"));
  switch (Uniform(rng, 0, 5)) {
    case 0:
      break;
    case 1:
      if (IsDict(td, "next"))
        new_key = NestedKey({"next", w.NewKey("renamed")});
      break;
    case 2:
      if (keys.size() > 1) new_key = Pick(rng, keys);  // replaces it
      break;
    case 3:
      new_key = old_key.join(NestedKey("x"));
      op.expect_throw = true;
      break;
    case 4:
      if (top_leaves.empty()) break;
      new_key = Pick(rng, top_leaves).join(NestedKey("x"));
      op.expect_throw = true;
      break;
    default:
      if (old_key.is_nested()) new_key = NestedKey(old_key.front());
      break;
  }
  op.desc = "td.rename_key_(" + old_key.str() + ", " + new_key.str() + ")";
  op.run = [td, old_key, new_key] { td.rename_key_(old_key, new_key); };
  w.Run(op);
}

// erase: missing keys (top-level, nested, through a tensor, under a missing
// parent), or (rarely) an existing key.
void GenErase(World& w) {
  Rng& rng = w.rng;
  const TensorDict td = w.td;
  std::vector<NestedKey> top_leaves;
  for (const auto& k : td.keys()) {
    if (IsLeaf(td, k)) top_leaves.push_back(k);
  }
  Op op;
  op.family = kErase;
  op.expect_throw = true;
  NestedKey key(w.NewKey("missing"));
  switch (Uniform(rng, 0, 7)) {
    case 0:
    case 1:
      break;
    case 2:
      key = NestedKey({"next", w.NewKey("missing")});
      break;
    case 3:
      if (!top_leaves.empty()) key = Pick(rng, top_leaves).join(NestedKey("x"));
      break;
    case 4:
      key = NestedKey({w.NewKey("missing"), "x"});
      break;
    case 5:
      // A path through the leaf ("next", "obs"), unless earlier ops turned
      // it into a sub-dict holding "x".
      key = NestedKey({"next", "obs", "x"});
      if (td.contains(key)) op.expect_throw = false;
      break;
    default: {
      const auto keys = td.keys(true);
      if (keys.empty()) break;
      key = Pick(rng, keys);
      op.expect_throw = false;
      break;
    }
  }
  op.desc = "td.erase(" + key.str() + ")";
  op.run = [td, key] { td.erase(key); };
  w.Run(op);
}

// ReplayBuffer::add / extend: valid rows and batches; a missing or extra
// key, a wrong row shape or dtype, the wrong batch dims, a meta leaf, rows
// that are views of the storage.
TensorDict RbData(Rng& rng, const Shape& b) {
  TensorDict r{c10::IntArrayRef(b)};
  r.set("obs", RandT(rng, Cat(b, {3}), at::kFloat));
  r.set("act", RandT(rng, b, at::kLong));
  r.set({"next", "obs"}, RandT(rng, Cat(b, {3}), at::kFloat));
  r.set("done", RandT(rng, b, at::kBool));
  return r;
}

void GenReplayBuffer(World& w) {
  Rng& rng = w.rng;
  if (!w.rb) {
    w.rb = std::make_unique<ReplayBuffer>(
        ReplayBufferOptions(kBufferCapacity).seed(1));
  }
  ReplayBuffer* rb = w.rb.get();
  const bool allocated = !rb->storage().empty();
  const bool extend = Coin(rng, 0.5);
  const int64_t n = Uniform(rng, 1, kBufferCapacity + 2);
  TensorDict data = RbData(rng, extend ? Shape{n} : Shape{});
  Op op;
  op.family = kReplayBuffer;
  std::ostringstream d;
  d << (extend ? "rb.extend(" : "rb.add(");
  bool check = false;
  // The first write defines the storage: keep it valid.
  switch (allocated ? Uniform(rng, 0, 8) : 0) {
    case 0:
    case 1:
      d << (extend ? "batch of " + std::to_string(n) : std::string("row"))
        << ", valid";
      check = true;
      break;
    case 2:
      data.erase("act");
      d << "missing act";
      op.expect_throw = true;
      break;
    case 3:
      data.set("extra", RandT(rng, Cat(data.batch_size(), {1}), at::kFloat));
      d << "extra key";
      op.expect_throw = true;
      break;
    case 4:
      data.set("obs", RandT(rng, Cat(data.batch_size(), {4}), at::kFloat));
      d << "obs with row shape [4]";
      op.expect_throw = true;
      break;
    case 5:
      data.set("act", RandT(rng, data.batch_size(), at::kFloat));
      d << "act as float";
      op.expect_throw = true;
      break;
    case 6:
      data = RbData(rng, extend ? Shape{} : Shape{2});
      d << "batch_size " << ShapeStr(data.batch_size());
      op.expect_throw = true;
      break;
    case 7:
      data.set("done", MetaT(data.batch_size(), at::kBool));  // the last leaf
      d << "done on meta (last leaf)";
      break;
    default: {
      if (!kAliasedInputs) break;
      const TensorDict st = rb->storage();
      if (extend) {
        const int64_t a = Uniform(rng, 0, kBufferCapacity - 1);
        const int64_t len = Uniform(rng, 1, kBufferCapacity - a);
        data = st.index({Slice(a, a + len)});
        d << "storage[Slice(" << a << "," << a + len << ")] (views; cursor "
          << rb->cursor() << ")";
      } else {
        const int64_t j = Uniform(rng, 0, kBufferCapacity - 1);
        data = st.index({TensorIndex(j)});
        d << "storage[" << j << "] (views; cursor " << rb->cursor() << ")";
      }
      check = true;
      break;
    }
  }
  d << ")";
  TensorDict expected;
  if (kCheckAliasedResults && check) {
    at::NoGradGuard no_grad;
    expected = data.clone();
  }
  auto written = std::make_shared<at::Tensor>();
  op.desc = d.str();
  op.run = [rb, data, extend, written] {
    if (extend) {
      *written = rb->extend(data);
    } else {
      *written = at::full({1}, rb->add(data), at::kLong);
    }
  };
  if (kCheckAliasedResults && check) {
    op.after_success = [rb, expected, extend, written]() -> std::string {
      const TensorDict st = rb->storage();
      const int64_t kept = written->size(0);
      std::ostringstream out;
      for (const auto& key : expected.keys(true, true)) {
        at::Tensor want = expected.get(key);
        want = extend ? want.narrow(0, want.size(0) - kept, kept)
                      : want.unsqueeze(0);
        const at::Tensor got = st.get(key).index_select(0, *written);
        if (!SameValues(got, want)) {
          out << "  key " << key.str()
              << ": the stored rows differ from the written values\n";
        }
      }
      const std::string o = out.str();
      return o.empty() ? o
                       : "the call succeeded but stored wrong values:\n" + o;
    };
  }
  RunOp(
      w.runner, [rb] { return rb->storage(); }, op,
      [rb] {
        return "size " + std::to_string(rb->size()) + ", cursor " +
               std::to_string(rb->cursor());
      });
}

// ===========================================================================
// The test
// ===========================================================================

uint64_t ReadSeed() {
  const char* s = std::getenv("TENSORDICT_ATOMICITY_SEED");
  if (s == nullptr || *s == '\0') return kDefaultSeed;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0') {
    ADD_FAILURE() << "TENSORDICT_ATOMICITY_SEED is not a number: " << s;
    return kDefaultSeed;
  }
  return static_cast<uint64_t>(v);
}

int ReadOnlySequence() {
  const char* s = std::getenv("TENSORDICT_ATOMICITY_SEQUENCE");
  if (s == nullptr || *s == '\0') return -1;
  return std::atoi(s);
}

TEST(AtomicityTest, FailedOpsLeaveTheDictUnchanged) {
  const uint64_t seed = ReadSeed();
  std::cout << "atomicity seed: " << seed
            << " (replay with TENSORDICT_ATOMICITY_SEED=" << seed << ")"
            << std::endl;
  c10::AutoGradMode grad_mode(true);  // leaves requiring grad are protected

  std::vector<FamilyId> enabled;
  for (int f = 0; f < kNumFamilies; ++f) {
    if (kFamilies[f].enabled) enabled.push_back(static_cast<FamilyId>(f));
  }
  ASSERT_FALSE(enabled.empty());

  Runner runner;
  runner.seed = seed;
  const int only = ReadOnlySequence();
  const auto start = std::chrono::steady_clock::now();
  int sequences = 0;
  for (int seq = 0; seq < kSequences; ++seq) {
    if (only >= 0 && seq != only) continue;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (only < 0 && elapsed > kTimeBudgetSeconds) {
      std::cout << "atomicity: time budget reached after " << sequences
                << " of " << kSequences << " sequences" << std::endl;
      break;
    }
    ++sequences;
    SCOPED_TRACE(testing::Message() << "seed " << seed << ", sequence " << seq);
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

  std::ostringstream summary;
  summary << "atomicity summary (seed " << seed << ", " << sequences
          << " sequences):\n";
  for (int f = 0; f < kNumFamilies; ++f) {
    const Stats& s = runner.stats[f];
    summary << "  " << kFamilies[f].name << ": " << s.ops << " ops, " << s.threw
            << " threw, " << s.failures << " failures\n";
  }
  std::cout << summary.str() << std::flush;
  EXPECT_EQ(runner.failures, 0) << summary.str();
}

}  // namespace
