// ParallelEnv (tensordict/envs.h): the options, the calls handed to the
// workers (envs/parallel_workers.h), and what both kinds of worker run.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "envs/batched.h"
#include "envs/env_access.h"
#include "envs/flags.h"
#include "envs/parallel_workers.h"
#include "envs/row_views.h"

namespace tensordict {

namespace detail {

// The message of the exception in flight.
std::string current_message() {
  try {
    throw;
  } catch (const c10::Error& e) {
    return e.msg();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// What a call is, for errors: "step 17", "reset", "set_seed".
std::string call_name(Command cmd, int64_t step) {
  switch (cmd) {
    case Command::kStep:
      return "step " + std::to_string(step);
    case Command::kReset:
      return "reset";
    case Command::kState:
      return "state_dict";
    case Command::kLoadState:
      return "load_state_dict";
    default:
      return "set_seed";
  }
}

// Env range [begin, end) of worker `w` of `workers` over `n` envs.
std::pair<int64_t, int64_t> env_range(int64_t w, int64_t workers, int64_t n) {
  return {w * n / workers, (w + 1) * n / workers};
}

// Runs `cmd` on envs [begin, end) with their row dicts; returns the index
// of the env that threw (and its message in `error`), or -1. `seed` is the
// first env's seed on the way in and the next one's on the way out.
int64_t run_share(Command cmd, std::vector<std::unique_ptr<EnvBase>>& envs,
                  int64_t begin, const std::vector<TensorDict>* in,
                  const std::vector<TensorDict>* out, int64_t per_env,
                  uint64_t& seed, std::string& error,
                  std::atomic<int64_t>* current) {
  const bool* mask = nullptr;
  at::Tensor mask_tensor;
  if (cmd != Command::kSeed) {
    const char* key = cmd == Command::kReset ? "_reset" : "_step";
    if (!in->empty() && (*in)[0].contains(key)) {
      // The rows' masks are views of one contiguous parent mask.
      mask_tensor = (*in)[0].get(key);
      mask = detail::flag_bytes(mask_tensor);
    }
  }
  for (size_t i = 0; i < envs.size(); ++i) {
    const int64_t env = begin + static_cast<int64_t>(i);
    if (current != nullptr) current->store(env, std::memory_order_relaxed);
    try {
      if (cmd == Command::kSeed) {
        seed = envs[i]->set_seed(seed);
        continue;
      }
      // `mask` points at row `begin`'s first flag.
      if (!detail::any_of(mask, static_cast<int64_t>(i) * per_env, per_env)) {
        continue;
      }
      if (cmd == Command::kReset) {
        detail::EnvAccess::reset(*envs[i], (*in)[i]);
      } else {
        detail::EnvAccess::step(*envs[i], (*in)[i], (*out)[i]);
      }
    } catch (...) {
      error = current_message();
      return env;
    }
  }
  return -1;
}

int64_t run_state(Command cmd, std::vector<std::unique_ptr<EnvBase>>& envs,
                  int64_t begin, TensorDict& states, std::string& error) {
  for (size_t i = 0; i < envs.size(); ++i) {
    const int64_t env = begin + static_cast<int64_t>(i);
    const std::string key = std::to_string(env);
    try {
      if (cmd == Command::kState) {
        states.set(key, envs[i]->state_dict());
      } else {
        envs[i]->load_state_dict(states.get_tensordict(key));
      }
    } catch (...) {
      error = current_message();
      return env;
    }
  }
  return -1;
}

std::string failure(int64_t env, Command cmd, int64_t step,
                    const std::string& message) {
  if (cmd == Command::kLoadState) {
    return "env " + std::to_string(env) + ": " + message;
  }
  return "ParallelEnv: env " + std::to_string(env) + " failed at " +
         call_name(cmd, step) + ": " + message;
}

}  // namespace detail

// ---- ParallelEnv ------------------------------------------------------------------

namespace {

std::unique_ptr<EnvBase> make_meta(int64_t n, const EnvFactory& factory) {
  TORCH_CHECK_VALUE(n > 0, "ParallelEnv: num_envs must be positive, got ", n);
  TORCH_CHECK_VALUE(static_cast<bool>(factory),
                    "ParallelEnv: the factory is empty");
  std::unique_ptr<EnvBase> meta = factory();
  TORCH_CHECK_VALUE(meta != nullptr,
                    "ParallelEnv: the factory returned no env");
  return meta;
}

}  // namespace

ParallelEnv::ParallelEnv(int64_t num_envs, const EnvFactory& factory,
                         const ParallelEnvOptions& options)
    : ParallelEnv(make_meta(num_envs, factory), num_envs, factory, options) {}

ParallelEnv::ParallelEnv(std::unique_ptr<EnvBase> meta, int64_t num_envs,
                         const EnvFactory& factory,
                         const ParallelEnvOptions& options)
    : EnvBase(detail::batched_shape(*meta, num_envs), meta->device()) {
  TORCH_CHECK_VALUE(options.num_workers() >= 0,
                    "ParallelEnv: num_workers must be 0 or positive, got ",
                    options.num_workers());
  TORCH_CHECK_VALUE(options.timeout() > 0,
                    "ParallelEnv: timeout must be positive, got ",
                    options.timeout());
  detail::set_batched_specs(*this, *meta);
  int64_t workers = options.num_workers();
  if (workers == 0) {
    workers = options.processes()
                  ? num_envs
                  : static_cast<int64_t>(
                        std::max(1U, std::thread::hardware_concurrency()));
  }
  workers = std::min(workers, num_envs);
  if (options.processes()) {
    workers_ = detail::make_process_workers(num_envs, workers, factory, *meta,
                                            options.timeout());
  } else {
    const std::vector<int64_t> row(meta->batch_size().begin(),
                                   meta->batch_size().end());
    meta.reset();
    workers_ = detail::make_thread_workers(num_envs, workers, factory, row,
                                           options.timeout());
  }
}

ParallelEnv::~ParallelEnv() {
  try {
    close();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor returns
  }
}

int64_t ParallelEnv::num_envs() const { return batch_size()[0]; }

std::vector<int64_t> ParallelEnv::worker_pids() const {
  return workers_ == nullptr ? std::vector<int64_t>() : workers_->pids();
}

void ParallelEnv::close() {
  if (workers_ != nullptr) workers_->close();
}

void ParallelEnv::reset_impl(const TensorDict& td) {
  uint64_t seed = 0;
  workers_->run(detail::Command::kReset, &td, nullptr, seed);
}

void ParallelEnv::step_impl(const TensorDict& td, const TensorDict& next) {
  workers_->steps += 1;
  uint64_t seed = 0;
  workers_->run(detail::Command::kStep, &td, &next, seed);
}

c10::optional<TensorDict> ParallelEnv::shared_tensordict(bool next) const {
  return workers_->shared(next);
}

void ParallelEnv::set_seed_impl(uint64_t seed) {
  workers_->run(detail::Command::kSeed, nullptr, nullptr, seed);
}

void ParallelEnv::state_dict_impl(TensorDict& out) const {
  workers_->check_usable();
  out.set("envs", workers_->env_states());
}

void ParallelEnv::load_state_dict_impl(const TensorDict& state) {
  workers_->load_env_states(state.get_tensordict("envs"));
}

}  // namespace tensordict
