// EnvBase (tensordict/envs.h): TorchRL's reset/step/step_mdp calls and the
// spec setters. The rollout loop is in rollout.cpp, the spec check in
// check_env_specs.cpp.
//
// Every call that TorchRL makes out of place works here in a dict of its
// own: `reset(td)` copies the leaves it will write before the hook writes
// into them, and `step` gives the hook fresh "next" entries, so that no
// tensor a caller holds is ever written. The hooks themselves write in
// place into those dicts (`flags.h`: the done flags by bytes).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/names.h"
#include "envs/env_access.h"
#include "envs/flags.h"
#include "rl/random.h"
#include "tensordict/envs.h"

namespace tensordict {

using detail::dtype_name;
using detail::shape_str;

namespace {

const char* const kReset = "_reset";
const char* const kStep = "_step";

Composite leaf_composite(const char* key, const SpecEntry& spec,
                         c10::IntArrayRef batch) {
  return Composite({{key, spec}},
                   std::vector<int64_t>(batch.begin(), batch.end()));
}

}  // namespace

EnvBase::EnvBase(std::vector<int64_t> batch_size, at::Device device)
    : batch_size_(std::move(batch_size)),
      device_(device),
      observation_spec_(batch_size_, device),
      action_spec_(batch_size_, device),
      reward_spec_(batch_size_, device),
      done_spec_(batch_size_, device),
      state_spec_(batch_size_, device),
      generator_(at::make_generator<at::CPUGeneratorImpl>(0)) {
  for (const int64_t d : batch_size_) {
    TORCH_CHECK_VALUE(d >= 0, "EnvBase: batch size ", shape_str(batch_size_),
                      " has a negative dim");
  }
  std::vector<int64_t> flag_shape = batch_size_;
  flag_shape.push_back(1);
  reward_spec_.set("reward", Unbounded(flag_shape, at::kFloat, device));
  done_spec_.set("done", Categorical(2, flag_shape, at::kBool, device));
  done_spec_.set("terminated", Categorical(2, flag_shape, at::kBool, device));
  flag_keys_ = done_spec_.keys(true, true);
}

// ---- Specs ----------------------------------------------------------------

std::vector<NestedKey> EnvBase::observation_keys() const {
  return observation_spec_.keys(true, true);
}
std::vector<NestedKey> EnvBase::action_keys() const {
  return action_spec_.keys(true, true);
}
std::vector<NestedKey> EnvBase::reward_keys() const {
  return reward_spec_.keys(true, true);
}
std::vector<NestedKey> EnvBase::done_keys() const {
  return done_spec_.keys(true, true);
}
std::vector<NestedKey> EnvBase::state_keys() const {
  return state_spec_.keys(true, true);
}

namespace {

void check_spec_shape(const EnvBase& env, const char* what,
                      const Composite& spec) {
  TORCH_CHECK_VALUE(spec.shape() == env.batch_size(), env.name(), ": the ",
                    what, " spec has shape ", shape_str(spec.shape()),
                    ", but the env's batch size is ",
                    shape_str(env.batch_size()));
}

}  // namespace

void EnvBase::set_observation_spec(Composite spec) {
  check_spec_shape(*this, "observation", spec);
  observation_spec_ = std::move(spec);
}
void EnvBase::set_action_spec(Composite spec) {
  check_spec_shape(*this, "action", spec);
  action_spec_ = std::move(spec);
}
void EnvBase::set_action_spec(const SpecEntry& spec) {
  set_action_spec(leaf_composite("action", spec, batch_size_));
}
void EnvBase::set_reward_spec(Composite spec) {
  check_spec_shape(*this, "reward", spec);
  reward_spec_ = std::move(spec);
}
void EnvBase::set_reward_spec(const SpecEntry& spec) {
  set_reward_spec(leaf_composite("reward", spec, batch_size_));
}
void EnvBase::set_state_spec(Composite spec) {
  check_spec_shape(*this, "state", spec);
  state_spec_ = std::move(spec);
}

void EnvBase::set_done_spec(Composite spec) {
  check_spec_shape(*this, "done", spec);
  std::vector<int64_t> flag_shape = batch_size_;
  flag_shape.push_back(1);
  for (const auto& entry : spec.entries()) {
    const std::string& key = entry.first;
    TORCH_CHECK_VALUE(
        key == "done" || key == "terminated" || key == "truncated", name(),
        ": the done spec holds \"done\", \"terminated\" ",
        "and \"truncated\", got a key \"", key, "\"");
    const TensorSpec& leaf = entry.second.leaf();
    TORCH_CHECK_VALUE(leaf.dtype() == at::kBool && leaf.shape() == flag_shape,
                      name(), ": the done entry \"", key,
                      "\" must be a bool spec of shape ", shape_str(flag_shape),
                      ", got ", dtype_name(leaf.dtype()), " of shape ",
                      shape_str(leaf.shape()));
  }
  // TorchRL's _create_done_specs: "done" alone gets a "terminated" like it,
  // and "terminated" alone a "done".
  if (spec.contains("done") && !spec.contains("terminated")) {
    spec.set("terminated", spec.get("done"));
  } else if (spec.contains("terminated") && !spec.contains("done")) {
    spec.set("done", spec.get("terminated"));
  }
  TORCH_CHECK_VALUE(
      spec.contains("done"), name(),
      ": the done spec needs a \"done\" or a \"terminated\" entry");
  done_spec_ = std::move(spec);
  flag_keys_ = done_spec_.keys(true, true);
}

// ---- Working dicts -----------------------------------------------------------

c10::optional<TensorDict> EnvBase::shared_tensordict(bool /*next*/) const {
  return c10::nullopt;
}

TensorDict EnvBase::zeros_of(
    std::initializer_list<const Composite*> specs) const {
  TensorDict out(batch_size_, device_);
  for (const Composite* spec : specs) {
    for (const NestedKey& key : spec->keys(true, true)) {
      if (!out.contains(key)) out.set(key, spec->leaf(key).zero());
    }
  }
  return out;
}

TensorDict EnvBase::fake_tensordict() const {
  TensorDict root =
      zeros_of({&observation_spec_, &state_spec_, &action_spec_, &done_spec_});
  root.set("next", zeros_of({&observation_spec_, &reward_spec_, &done_spec_}));
  return root;
}

void EnvBase::complete_done(const TensorDict& next) const {
  const NestedKey& done_key = detail::flag_keys().done;
  const at::Tensor done = next.get(done_key);
  for (const NestedKey& key : flag_keys_) {
    if (key != done_key) detail::or_flags(done, next.get(key));
  }
}

void EnvBase::reset_rows(const TensorDict& work, const at::Tensor& mask) {
  const NestedKey& reset_key = detail::flag_keys().reset;
  for (const NestedKey& key : flag_keys_) {
    detail::clear_flags(work.get(key), mask);
  }
  if (mask.defined()) work.set(reset_key, mask);
  try {
    reset_impl(work);
  } catch (...) {
    if (mask.defined() && work.contains(reset_key)) work.erase(reset_key);
    throw;
  }
  if (mask.defined()) work.erase(reset_key);
  for (const NestedKey& key : flag_keys_) {
    TORCH_CHECK(!detail::any_flag(work.get(key), mask), name(),
                ": the done entry \"", key.str(),
                "\" was true after a reset of that env, which TorchRL "
                "does not allow");
  }
}

// ---- TorchRL's calls ----------------------------------------------------------

namespace {

void check_batch(const EnvBase& env, const char* call, const TensorDict& td) {
  TORCH_CHECK_VALUE(td.batch_size() == env.batch_size(), env.name(), "::", call,
                    ": expected a dict of batch size ",
                    shape_str(env.batch_size()), ", got ",
                    shape_str(td.batch_size()));
}

}  // namespace

TensorDict EnvBase::reset() {
  TensorDict work = zeros_of({&observation_spec_, &state_spec_, &done_spec_});
  reset_rows(work, at::Tensor());
  return work;
}

TensorDict EnvBase::own_input(const TensorDict& td, const char* call,
                              bool spec_keys_only) const {
  check_batch(*this, call, td);
  TensorDict work(batch_size_, device_);
  for (const Composite* spec :
       {&observation_spec_, &state_spec_, &done_spec_}) {
    for (const NestedKey& key : spec->keys(true, true)) {
      if (work.contains(key)) continue;
      const TensorSpec& leaf = spec->leaf(key);
      if (!td.contains(key) || !td.get_entry(key).is_tensor()) {
        work.set(key, leaf.zero());
        continue;
      }
      const at::Tensor value = td.get(key);
      TORCH_CHECK_VALUE(value.sizes() == leaf.shape(), name(), "::", call,
                        ": key ", key.str(), ": expected shape ",
                        shape_str(leaf.shape()), ", got ",
                        shape_str(value.sizes()));
      work.set(key, value.to(leaf.device(), leaf.dtype(), false, true,
                             at::MemoryFormat::Contiguous));
    }
  }
  if (!spec_keys_only) {
    for (const NestedKey& key : td.keys(true, true)) {
      if (key.front() == "next" || work.contains(key)) continue;
      work.set(key, td.get(key).clone(at::MemoryFormat::Contiguous));
    }
  }
  return work;
}

TensorDict EnvBase::reset(const TensorDict& td) {
  check_batch(*this, "reset", td);
  at::Tensor mask;
  if (td.contains(kReset)) {
    mask = detail::checked_mask(td.get(kReset), batch_size_,
                                name() + "::reset: \"_reset\"");
  }
  // The hook writes into copies of what `td` holds, so that nothing a
  // caller holds changes.
  const TensorDict work = own_input(td, "reset", true);
  reset_rows(work, mask);
  if (td.contains(kReset)) td.erase(kReset);
  td.update(work);
  return td;
}

TensorDict EnvBase::step(const TensorDict& td) {
  check_batch(*this, "step", td);
  for (const NestedKey& key : action_keys()) {
    TORCH_CHECK_VALUE(td.contains(key), name(), "::step: the action key ",
                      key.str(), " is missing");
  }
  TensorDict next = zeros_of({&observation_spec_, &reward_spec_, &done_spec_});
  step_impl(td, next);
  complete_done(next);
  if (td.contains("next") && td.get_entry("next").is_tensordict()) {
    // TorchRL: entries of a "next" already there that the step does not
    // write stay.
    const TensorDict preset = td.get_tensordict("next");
    for (const NestedKey& key : preset.keys(true, true)) {
      if (!next.contains(key)) next.set(key, preset.get(key));
    }
  }
  td.set("next", next);
  return td;
}

TensorDict EnvBase::step_mdp(const TensorDict& td) const {
  check_batch(*this, "step_mdp", td);
  TORCH_CHECK_VALUE(td.contains("next") && td.get_entry("next").is_tensordict(),
                    name(), "::step_mdp: the dict has no \"next\" sub-dict");
  std::vector<NestedKey> excluded = {"next", kReset, kStep};
  for (const NestedKey& key : reward_keys()) excluded.push_back(key);
  for (const NestedKey& key : done_keys()) excluded.push_back(key);
  TensorDict out = td.exclude(excluded);
  const TensorDict next = td.get_tensordict("next");
  for (const auto* keys : {&observation_spec_, &done_spec_}) {
    for (const NestedKey& key : keys->keys(true, true)) {
      if (next.contains(key)) out.set(key, next.get(key));
    }
  }
  return out;
}

TensorDict EnvBase::maybe_reset(const TensorDict& td) {
  check_batch(*this, "maybe_reset", td);
  if (!td.contains("done")) return td;
  const at::Tensor done = td.get("done");
  if (!detail::any_flag(done, at::Tensor())) return td;
  td.set(kReset, done.to(at::kBool).clone(at::MemoryFormat::Contiguous));
  return reset(td);
}

std::pair<TensorDict, TensorDict> EnvBase::step_and_maybe_reset(
    const TensorDict& td) {
  TensorDict stepped = step(td);
  TensorDict next = maybe_reset(step_mdp(stepped));
  return {stepped, next};
}

TensorDict EnvBase::rand_action(const c10::optional<TensorDict>& td) {
  TensorDict out = td.has_value() ? *td : TensorDict(batch_size_, device_);
  check_batch(*this, "rand_action", out);
  for (const NestedKey& key : action_keys()) {
    out.set(key, action_spec_.leaf(key).rand({}, generator_));
  }
  return out;
}

TensorDict EnvBase::rand_step(const c10::optional<TensorDict>& td) {
  return step(rand_action(td));
}

uint64_t EnvBase::set_seed(uint64_t seed) {
  set_seed_impl(seed);
  // The base's own draws (random actions) follow the seed too, from a
  // stream of their own.
  generator_.set_current_seed(detail::Generator(seed ^ 0x5eedULL)());
  return detail::Generator(seed)();
}

TensorDict EnvBase::state_dict() const {
  TensorDict out;
  out.set("rng", detail::generator_state(generator_));
  state_dict_impl(out);
  return out;
}

void EnvBase::state_dict_impl(TensorDict& /*out*/) const {}
void EnvBase::load_state_dict_impl(const TensorDict& /*state*/) {}

void EnvBase::load_state_dict(const TensorDict& state) {
  const std::string fn = name() + "::load_state_dict";
  const TensorDict mine = state_dict();
  const std::vector<NestedKey> keys = mine.keys(true, true);
  for (const NestedKey& key : keys) {
    TORCH_CHECK_VALUE(state.contains(key), fn, ": the state has no entry ",
                      key.str());
    TORCH_CHECK_VALUE(
        state.get(key).sizes() == mine.get(key).sizes() &&
            state.get(key).scalar_type() == mine.get(key).scalar_type(),
        fn, ": key ", key.str(), ": expected shape ",
        detail::shape_str(mine.get(key).sizes()), " and dtype ",
        detail::dtype_name(mine.get(key).scalar_type()), ", got shape ",
        detail::shape_str(state.get(key).sizes()), " and dtype ",
        detail::dtype_name(state.get(key).scalar_type()));
  }
  for (const NestedKey& key : state.keys(true, true)) {
    TORCH_CHECK_VALUE(mine.contains(key), fn, ": unexpected entry ", key.str(),
                      " (", name(), "'s state has ", keys.size(), " entries)");
  }
  const auto apply = [&](const TensorDict& s) {
    detail::set_generator_state(generator_, s.get("rng"), "rng");
    load_state_dict_impl(s);
  };
  try {
    apply(state);
  } catch (const c10::Error& e) {
    apply(mine);  // a state of its own: loads
    TORCH_CHECK_VALUE(false, fn, ": ", e.msg());
  } catch (...) {
    apply(mine);
    throw;
  }
}

namespace detail {

at::Tensor generator_state(const at::Generator& gen) {
  // Its owner's: an env is used from one thread.
  return gen.get_state();
}

void set_generator_state(at::Generator& gen, const at::Tensor& state,
                         const std::string& key) {
  const at::Tensor mine = generator_state(gen);
  TORCH_CHECK_VALUE(state.scalar_type() == at::kByte && state.dim() == 1 &&
                        state.numel() == mine.numel(),
                    "the generator state ", key, " must be uint8 [",
                    mine.numel(), "], got ", dtype_name(state.scalar_type()),
                    " ", shape_str(state.sizes()));
  // A storage of its own: LibTorch 2.x refuses a view into a larger one
  // ("Invalid mt19937 state"), such as a consolidated dict's leaf.
  const at::Tensor bytes = state.cpu().clone(at::MemoryFormat::Contiguous);
  // PyTorch's CPU generator state starts with its legacy layout: the seed
  // (uint64), `left` (int32), `seeded` (int32), `next` (uint64), then the
  // Mersenne Twister's 624 words. A draw decrements `left` (regenerating the
  // words at 0, which sets left = 624, next = 0), then reads word `next`:
  // a reachable position has left + next = 625, or is a fresh seed's
  // (left 1, next 0).
  int32_t left = 0;
  uint64_t next = 0;
  std::memcpy(&left, bytes.data_ptr<uint8_t>() + 8, sizeof(left));
  std::memcpy(&next, bytes.data_ptr<uint8_t>() + 16, sizeof(next));
  constexpr int64_t kWords = 624;
  const bool valid = (left >= 1 && left <= kWords &&
                      static_cast<int64_t>(next) + left == kWords + 1) ||
                     (left == 1 && next == 0);
  TORCH_CHECK_VALUE(valid, "the generator state ", key,
                    " is not a Mersenne Twister state (position ", next,
                    ", left ", left, ")");
  gen.set_state(bytes);
}

}  // namespace detail
}  // namespace tensordict
