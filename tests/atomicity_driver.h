// The driver of the atomicity tests (atomicity_writes_test.cpp,
// atomicity_structure_test.cpp): a seeded, randomized check that a call that
// fails leaves the dict exactly as it was.
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
// Each operation picks one of the families below (a generator, Gen<Family>,
// in the test files), so that the dict one family works on has been shaped
// by the others. The driver runs every sequence once per process (on the
// first Atomicity test that runs) and records each failure under its
// family; each family's TEST (Atomicity.Set, Atomicity.IndexPut, ...)
// reports its own failures and its own count.
//
// Reproducing: the seed is printed first; rerun with
// TENSORDICT_ATOMICITY_SEED=<seed> (and TENSORDICT_ATOMICITY_SEQUENCE=<n> to
// run a single sequence), and --gtest_filter=Atomicity.<Family>. Each failure
// message names the family, the seed, the sequence, the operation's index
// and its description. Each operation family (and each optional leaf kind)
// can be switched off in the tables below.
#pragma once

#include <tensordict/tensordict.h>

#include <ATen/ATen.h>
#include <ATen/TensorIndexing.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace tensordict_test::atomicity {

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
inline constexpr Family kFamilies[kNumFamilies] = {
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
inline constexpr Feature kFeatures[kNumFeatures] = {
    {"expanded leaf 'e' (stride 0)", true, 0.3},
    {"leaf 'g' requiring grad", true, 0.3},
    {"meta leaf 'm'", true, 0.25},
    // lock_(): adding, removing, renaming or replacing keys throws; in-place
    // writes still go through.
    {"locked dict", true, 0.2},
};

// Inputs that are views of the destination (stack_out / cat_out / index_put_
// / update_ / apply_ / ReplayBuffer).
inline constexpr bool kAliasedInputs = true;
// Compare the written region with the inputs' clones after a successful
// stack_out / cat_out / ReplayBuffer write (catches aliasing bugs).
inline constexpr bool kCheckAliasedResults = true;

inline constexpr uint64_t kDefaultSeed = 20261123;
inline constexpr int kSequences = 200;
inline constexpr int kOpsPerSequence = 30;
// No new sequence starts after this (only slow sanitizer builds get there).
inline constexpr double kTimeBudgetSeconds = 8.0;
inline constexpr double kRecreateProbability = 0.03;
inline constexpr size_t kMaxKeys = 16;  // rebuild the dict beyond this
inline constexpr double kViewProbability =
    0.3;                                        // write through td[Slice(a, b)]
inline constexpr int kMaxReportsPerFamily = 3;  // detailed failures per family
inline constexpr int64_t kBufferCapacity = 5;

// ===========================================================================
// Randomness and small helpers
// ===========================================================================

using Rng = std::mt19937_64;
using Shape = std::vector<int64_t>;

int64_t Uniform(Rng& rng, int64_t lo, int64_t hi);  // inclusive
bool Coin(Rng& rng, double p);

template <typename T>
const T& Pick(Rng& rng, const std::vector<T>& v) {
  return v[static_cast<size_t>(
      Uniform(rng, 0, static_cast<int64_t>(v.size()) - 1))];
}

Shape Cat(c10::IntArrayRef a, c10::IntArrayRef b);
std::string ShapeStr(c10::IntArrayRef s);

// A fresh CPU tensor with small integer values (exact in float, so that no
// NaN or rounding gets in the way of comparisons), drawn from `rng`.
at::Tensor RandT(Rng& rng, c10::IntArrayRef shape, at::ScalarType dtype);
at::Tensor MetaT(c10::IntArrayRef shape, at::ScalarType dtype);

// `trailing` made incompatible: its last dim grown by one (or a new dim).
Shape BadTrailing(c10::IntArrayRef trailing);

bool IsDict(const TensorDict& d, const NestedKey& k);
bool IsLeaf(const TensorDict& d, const NestedKey& k);
bool IsIntegral(at::ScalarType t);

struct LeafRef {
  NestedKey key;
  at::Tensor tensor;
};

std::vector<LeafRef> Leaves(const TensorDict& d);

// Exact equality of values; NaNs compare equal to NaNs.
bool SameValues(const at::Tensor& a, const at::Tensor& b);

// A shallow view of `d` (same tensors) without its non-floating leaves.
TensorDict FloatOnly(const TensorDict& d);

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
  // The detailed failures of each family (at most kMaxReportsPerFamily),
  // reported by the family's TEST.
  std::vector<std::string> reports[kNumFamilies];

  void Fail(FamilyId f, const std::string& desc, const std::string& what);
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
           const std::function<std::string()>& state = nullptr);

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

// `td`, or (sometimes) the view dict `td[Slice(a, b)]`, whose leaves are views
// of td's (so a write through it must also be all-or-nothing for td).
TensorDict PickDst(World& w, std::string* name);

// A row for `dst`: a random subset of its leaves (meta leaves rarely, as a
// CPU value cannot be written into them), with batch `row_batch`.
TensorDict RandomRow(World& w, const TensorDict& dst, const Shape& row_batch,
                     bool all_keys);

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

IndexSpec RandomIndex(Rng& rng, const Shape& batch, bool allow_bad);
TensorIndex ToIndex(const IndexSpec& s);

// The batch shape `s` selects from `batch`; false for an invalid index.
bool IndexedShape(const Shape& batch, const IndexSpec& s, Shape* out);

// Whether a value of batch `vb` may be written into an indexed region of
// batch `s` (equal, or a suffix that broadcasts from the left).
bool BatchFits(const Shape& vb, const Shape& s);

// ===========================================================================
// Op generators: each draws one operation of its family for `w.td` (or for
// `w.rb`) and runs it with w.Run / RunOp; some draw nothing.
// ===========================================================================

// atomicity_structure_test.cpp
void GenSet(World& w);
void GenUpdate(World& w);
void GenRename(World& w);
void GenErase(World& w);
// atomicity_writes_test.cpp
void GenIndexPut(World& w);
void GenStackCat(World& w);
void GenArith(World& w);
void GenApply(World& w);
void GenReplayBuffer(World& w);

// ===========================================================================
// The driver
// ===========================================================================

// What one run of every sequence found.
struct DriverResult {
  uint64_t seed = 0;
  int sequences = 0;      // the sequences run
  bool complete = false;  // every sequence ran (no time budget, no filter)
  Runner runner;          // the stats and failures of each family
  std::string error;      // a bad TENSORDICT_ATOMICITY_SEED
  std::string summary;    // every family's counts
};

// Runs every sequence on its first call, and returns that run's result.
const DriverResult& RunDriver();

// The body of the TEST of family `f`: runs the driver (once per process) and
// fails with the family's failures.
void ExpectFamilyLeavesTheDictUnchanged(FamilyId f);

}  // namespace tensordict_test::atomicity
