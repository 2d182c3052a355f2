// HERReplayBuffer (tensordict/her.h): a ReplayBuffer whose writes are
// checked for the goal keys first, and whose samples are relabelled after
// the buffer's own sample: the episode of each relabelled row is found in
// the episode ends (kept in write order, recomputed from the stored end
// flags after a write), the goal rows drawn with the arithmetic of TorchRL
// 0.14, their achieved goals copied in and the rewards recomputed.
#include "tensordict/her.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/names.h"
#include "io/files.h"
#include "rl/returns_keys.h"
#include "rl/samplers.h"

namespace tensordict {

namespace {

constexpr const char* kName = "HERReplayBuffer";

// The key beside `key` named `last` (("next", "done") -> ("next",
// "terminated")), as TorchRL derives the terminated key.
NestedKey beside(const NestedKey& key, const std::string& last) {
  std::vector<std::string> parts = key.parts();
  parts.back() = last;
  return NestedKey(parts);
}

// The tensor at `key`, or an undefined one when `data` has none there.
at::Tensor optional_tensor(const TensorDict& data, const NestedKey& key) {
  if (!data.contains(key)) return {};
  const Entry entry = data.get_entry(key);
  return entry.is_tensor() ? entry.tensor() : at::Tensor();
}

// The fields of LibTorch's CPU generator state (CPUGeneratorImplState, a
// POD since 1.5) that index its Mersenne Twister: `left` (1..624) and
// `next`, where `left + next == 625` except right after seeding (1, 0). A
// state that breaks this would read past the twister's array.
bool valid_generator_state(const at::Tensor& bytes) {
  constexpr size_t kLeftAt = 8;   // after the initial seed (uint64)
  constexpr size_t kNextAt = 16;  // after left and seeded (two ints)
  const auto* p = bytes.data_ptr<uint8_t>();
  int32_t left = 0;
  uint64_t next = 0;
  std::memcpy(&left, p + kLeftAt, sizeof(left));
  std::memcpy(&next, p + kNextAt, sizeof(next));
  return left >= 1 && left <= 624 &&
         (static_cast<uint64_t>(left) + next == 625 ||
          (left == 1 && next == 0));
}

}  // namespace

struct HERReplayBuffer::Impl {
  Impl(HERRewardFn fn, ReplayBufferOptions options, HEROptions h)
      : reward_fn(std::move(fn)),
        her(std::move(h)),
        rb(std::move(options)),
        terminated_key(beside(her.end_key(), "terminated")),
        next_goal_key(NestedKey("next").join(her.goal_key())) {
    uint64_t seed = 0;
    if (her.seed().has_value()) {
      seed = *her.seed();
    } else {
      std::random_device rd;
      seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  }

  // Checks the HER keys of `data` (`batch_dims` leading dims: 0 for a row,
  // 1 for a batch) before the buffer writes it.
  void check(const TensorDict& data, int64_t batch_dims, const char* fn) const {
    const at::Tensor goal =
        detail::input_tensor(fn, "goal_key", data, her.goal_key());
    const at::Tensor achieved = detail::input_tensor(
        fn, "achieved_goal_key", data, her.achieved_goal_key());
    TORCH_CHECK(
        goal.sizes().slice(batch_dims) == achieved.sizes().slice(batch_dims) &&
            c10::canCast(achieved.scalar_type(), goal.scalar_type()),
        fn, ": the achieved goal (", her.achieved_goal_key(), ", ",
        detail::dtype_name(achieved.scalar_type()), " ",
        detail::shape_str(achieved.sizes().slice(batch_dims)),
        " per row) must fit the desired goal (", her.goal_key(), ", ",
        detail::dtype_name(goal.scalar_type()), " ",
        detail::shape_str(goal.sizes().slice(batch_dims)), " per row)");
    (void)detail::input_tensor(fn, "reward_key", data, her.reward_key());
    const at::Tensor done = optional_tensor(data, her.end_key());
    const at::Tensor terminated = optional_tensor(data, terminated_key);
    TORCH_CHECK(done.defined() || terminated.defined(), fn,
                ": the rows hold neither ", her.end_key(), " (end_key) nor ",
                terminated_key,
                ": the episode ends are read from them (store the env's "
                "done flags)");
    for (const auto& [key, flag] :
         {std::make_pair(her.end_key(), done),
          std::make_pair(terminated_key, terminated)}) {
      TORCH_CHECK(
          !flag.defined() ||
              c10::multiply_integers(flag.sizes().slice(batch_dims)) == 1,
          fn, ": key ", key, " must hold one flag per row, got ",
          detail::shape_str(flag.sizes().slice(batch_dims)), " per row");
    }
  }

  // The episode ends in write order ("ages": 0 is the oldest row), with
  // the newest row last. Recomputed after a write.
  const std::vector<int64_t>& ends() {
    if (ends_valid) return ends_age;
    ends_age.clear();
    const int64_t n = rb.size();
    const int64_t cap = rb.capacity();
    origin = n == cap ? rb.cursor() % cap : 0;
    const TensorDict storage = rb.storage();
    at::Tensor flags;
    for (const NestedKey& key : {her.end_key(), terminated_key}) {
      const at::Tensor t = optional_tensor(storage, key);
      if (!t.defined()) continue;
      const at::Tensor f = t.narrow(0, 0, n).reshape({n}).ne(0).to(at::kCPU);
      flags = flags.defined() ? flags.logical_or(f) : f;
    }
    // Rolled into write order: row `origin` is the oldest.
    const at::Tensor aged = at::roll(flags, -origin, 0).contiguous();
    const auto* f = aged.data_ptr<bool>();
    for (int64_t a = 0; a < n; ++a) {
      if (f[a] || a == n - 1) ends_age.push_back(a);
    }
    ends_valid = true;
    return ends_age;
  }

  // The storage rows whose achieved goals relabel the sampled rows `idx`.
  at::Tensor goal_rows(const at::Tensor& idx) {
    const int64_t m = idx.numel();
    const int64_t cap = rb.capacity();
    if (her.strategy() == HindsightStrategy::kRandom) {
      return at::randint(rb.size(), {m}, gen, at::kLong);
    }
    const std::vector<int64_t>& e = ends();
    const at::Tensor ends_t =
        at::from_blob(const_cast<int64_t*>(e.data()),
                      {static_cast<int64_t>(e.size())}, at::kLong);
    const at::Tensor age = (idx - origin).remainder(cap);
    const at::Tensor pos = at::searchsorted(ends_t, age);
    const at::Tensor ep_end = ends_t.index_select(0, pos);
    const at::Tensor ep_start =
        at::where(pos.eq(0), at::zeros_like(ep_end),
                  ends_t.index_select(0, (pos - 1).clamp_min(0)) + 1);
    at::Tensor goal_age;
    switch (her.strategy()) {
      case HindsightStrategy::kFuture: {
        const at::Tensor span = (ep_end - age).clamp_min(0).to(at::kFloat);
        const at::Tensor offsets = (at::rand({m}, gen) * (span + 1))
                                       .to(at::kLong)
                                       .clamp_max(span.to(at::kLong));
        goal_age = age + offsets;
        break;
      }
      case HindsightStrategy::kFinal:
        goal_age = ep_end;
        break;
      case HindsightStrategy::kEpisode: {
        const at::Tensor span = (ep_end - ep_start + 1).to(at::kFloat);
        goal_age = ep_start + (at::rand({m}, gen) * span).to(at::kLong);
        break;
      }
      case HindsightStrategy::kRandom:
        break;  // above
    }
    return (goal_age + origin).remainder(cap);
  }

  // Relabels the first rows of `data` (sampled at `index`).
  at::Tensor relabel(const TensorDict& data, const at::Tensor& index) {
    const int64_t n = index.numel();
    const auto m =
        static_cast<int64_t>(static_cast<double>(n) * her.her_ratio());
    if (m == 0) return at::empty({0}, at::kLong);
    at::Tensor goals = goal_rows(index.narrow(0, 0, m).to(at::kCPU));
    const at::Tensor stored = rb.storage().get(her.achieved_goal_key());
    const at::Tensor achieved =
        stored.index_select(0, goals.to(stored.device()));
    // In place: `data` is the sample's own copy, dropped when this throws.
    const TensorDict part = data.index({at::indexing::Slice(0, m)});
    part.get(her.goal_key()).copy_(achieved);
    const at::Tensor next_goal = optional_tensor(part, next_goal_key);
    if (next_goal.defined()) next_goal.copy_(achieved);
    const at::Tensor reward = part.get(her.reward_key());
    const at::Tensor fresh = reward_fn(part);
    TORCH_CHECK(fresh.defined(), kName,
                "::sample: the reward function returned an undefined tensor");
    TORCH_CHECK(fresh.dim() >= 1 && fresh.size(0) == m &&
                    fresh.numel() == reward.numel(),
                kName, "::sample: the reward function returned ",
                detail::shape_str(fresh.sizes()), " for ", m,
                " relabelled rows whose reward (", her.reward_key(), ") is ",
                detail::shape_str(reward.sizes()));
    reward.copy_(fresh.reshape(reward.sizes()));
    return goals;
  }

  HERRewardFn reward_fn;
  HEROptions her;
  ReplayBuffer rb;
  NestedKey terminated_key;
  NestedKey next_goal_key;
  at::Generator gen;
  std::vector<int64_t> ends_age;
  int64_t origin = 0;  // the oldest row's index, once full
  bool ends_valid = false;
  mutable std::mutex mu;
};

HERReplayBuffer::HERReplayBuffer(HERRewardFn reward_fn,
                                 ReplayBufferOptions options, HEROptions her) {
  TORCH_CHECK_VALUE(static_cast<bool>(reward_fn), kName,
                    ": the reward function is empty");
  TORCH_CHECK_VALUE(std::isfinite(her.her_ratio()) && her.her_ratio() >= 0.0 &&
                        her.her_ratio() <= 1.0,
                    kName, ": her_ratio must be in [0, 1], got ",
                    her.her_ratio());
  TORCH_CHECK_VALUE(!options.rate_limiter().has_value(), kName,
                    ": a rate limiter is not supported (a sample would hold "
                    "the buffer's lock while the limiter waits for writes)");
  TORCH_CHECK_VALUE(!options.shared(), kName,
                    ": a shared buffer is not supported (other processes' "
                    "writes would not renew the episode ends)");
  TORCH_CHECK_VALUE(
      std::holds_alternative<RoundRobinWriter>(options.writer()), kName,
      ": MaxValueWriter is not supported: episodes are read in write order, "
      "which only the round-robin writer keeps");
  impl_ = std::make_unique<Impl>(std::move(reward_fn), std::move(options),
                                 std::move(her));
}

HERReplayBuffer::~HERReplayBuffer() = default;
HERReplayBuffer::HERReplayBuffer(HERReplayBuffer&&) noexcept = default;
HERReplayBuffer& HERReplayBuffer::operator=(HERReplayBuffer&&) noexcept =
    default;

int64_t HERReplayBuffer::add(const TensorDict& row) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.check(row, 0, "HERReplayBuffer::add");
  const int64_t at = m.rb.add(row);
  m.ends_valid = false;
  return at;
}

at::Tensor HERReplayBuffer::extend(const TensorDict& batch) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  TORCH_CHECK(batch.batch_dims() == 1,
              "HERReplayBuffer::extend: the batch "
              "must have one batch dim (time), got batch size ",
              detail::shape_str(batch.batch_size()));
  m.check(batch, 1, "HERReplayBuffer::extend");
  at::Tensor written = m.rb.extend(batch);
  m.ends_valid = false;
  return written;
}

std::pair<TensorDict, HERSampleInfo> HERReplayBuffer::sample(
    int64_t batch_size) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  auto [data, info] = m.rb.sample(batch_size);
  HERSampleInfo out{info.index, info.weight, {}};
  out.goal_index = m.relabel(data, info.index);
  return {data, out};
}

void HERReplayBuffer::update_priority(const at::Tensor& index,
                                      const at::Tensor& priority) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.rb.update_priority(index, priority);
}

void HERReplayBuffer::dumps(const std::string& dir) const {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.rb.dumps(dir);
  (void)TensorDict({{"state", m.gen.get_state()}}, {}).memmap(dir + "/her_rng");
}

void HERReplayBuffer::loads(const std::string& dir) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  const std::string path = dir + "/her_rng";
  const int64_t numel = m.gen.get_state().numel();
  at::Tensor state;
  try {
    state = detail::checkpoint_entry(
                TensorDict::load_memmap(path, /*read_only=*/true), "state",
                at::kByte, numel)
                .clone();
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, "HERReplayBuffer::loads: '", dir,
                "': the goals' generator (her_rng): ", e.msg());
  }
  TORCH_CHECK(valid_generator_state(state), "HERReplayBuffer::loads: '", dir,
              "': her_rng is not a generator state");
  // The rows (when there are any) must hold the keys a write needs.
  const std::string rows = dir + "/storage";
  if (detail::path_exists(rows + "/meta.json")) {
    m.check(TensorDict::load_memmap(rows, /*read_only=*/true), 1,
            "HERReplayBuffer::loads");
  }
  m.rb.loads(dir);
  m.gen.set_state(state);
  m.ends_valid = false;
}

int64_t HERReplayBuffer::size() const { return impl_->rb.size(); }
int64_t HERReplayBuffer::capacity() const { return impl_->rb.capacity(); }
int64_t HERReplayBuffer::cursor() const { return impl_->rb.cursor(); }
void HERReplayBuffer::clear() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.rb.clear();
  m.ends_valid = false;
}
TensorDict HERReplayBuffer::storage() const { return impl_->rb.storage(); }
const ReplayBufferOptions& HERReplayBuffer::options() const {
  return impl_->rb.options();
}
void HERReplayBuffer::manual_seed(uint64_t seed) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mu);
  m.rb.manual_seed(seed);
  m.gen.set_current_seed(seed);
}
const HEROptions& HERReplayBuffer::her_options() const { return impl_->her; }

}  // namespace tensordict
