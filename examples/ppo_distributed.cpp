// examples/ppo_distributed.cpp — PPO on CartPole-v1 with a learner process
// and N actor processes, TensorDicts moving between them over c10d (Gloo).
//
// One command starts everything on loopback: the program is the learner
// (rank 0), and it starts N copies of itself as actors (ranks 1..N), which
// meet it at a c10d TCPStore on 127.0.0.1 (`make_gloo_group`). Then, each
// iteration:
//
//  1. the learner broadcasts the weights: a TensorDict of the actor's and
//     critic's parameters (plus a "stop" flag), written in place into every
//     actor's own parameters (`broadcast`: one fused message);
//  2. each actor's Collector (tensordict/collectors.h) runs its batch of the
//     library's CartPoleEnv for T steps straight into a RolloutBuffer; the
//     actor computes GAE with its critic and sends the buffer's dict to the
//     learner: the first time with its structure
//     (`init_remote` / `from_remote_init`), then as one consolidated
//     message into the dict the learner made of it
//     (`send`/`recv(..., consolidated=true)`);
//  3. the learner concatenates the N rollouts and runs the PPO epochs.
//
// The rollout per iteration is 1024 transitions whatever N (each actor runs
// 8 envs for 128 / N steps), so the learning is the same and only the
// throughput changes with N.
//
// Usage: ppo_distributed [--actors N] [--seed N] [--max-steps N]
//
// Stops when the mean return of the last 20 finished episodes reaches 475;
// exits 1 if that does not happen within --max-steps env steps. With
// TENSORDICT_EXAMPLE_QUICK=1 (sanitizer CI) it runs two iterations.
#include <ATen/CPUGeneratorImpl.h>
#include <tensordict/collectors.h>
#include <tensordict/envs.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loopback.h"
#include "ppo.h"

extern char** environ;

using tensordict::Group;
using tensordict::TensorDict;

namespace {

struct Config {
  int actors = 2;
  uint64_t seed = 1;
  int64_t max_steps = 500000;
  int64_t num_envs = 8;             // per actor
  int64_t steps_per_rollout = 128;  // split between the actors
  ppo::Hyper hyper;
  bool quick = false;
  // Set in the actor processes.
  int rank = 0;
  int port = 0;
};

// The weights every iteration broadcasts: the networks' parameters as
// dicts (`from_module`: their leaves are the networks' own tensors, so
// writes into this dict are writes into the networks), and the stop flag.
TensorDict weights_of(ppo::Agent& agent, const at::Tensor& stop) {
  TensorDict w;
  w.set("actor", tensordict::from_module(*agent.actor));
  w.set("critic", tensordict::from_module(*agent.critic));
  w.set("stop", stop);
  return w;
}

// ---- An actor -----------------------------------------------------------------

int run_actor(const Config& cfg) {
  at::set_num_threads(1);
  tensordict::GlooGroupOptions options;
  options.port = cfg.port;
  options.timeout = std::chrono::seconds(120);
  const Group pg =
      tensordict::make_gloo_group(cfg.rank, cfg.actors + 1, options);

  const int64_t E = cfg.num_envs;
  const int64_t T = cfg.steps_per_rollout / cfg.actors;
  const uint64_t seed = cfg.seed * 1000 + static_cast<uint64_t>(cfg.rank);
  torch::manual_seed(seed);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  ppo::Agent agent(/*obs_dim=*/4, ppo::Discrete{2}, cfg.hyper.lr, gen);
  torch::NoGradGuard no_grad;  // an actor never trains
  at::Tensor stop = at::zeros({1}, at::kBool);
  const TensorDict weights = weights_of(agent, stop);
  // Categorical actions; RewardSum keeps each episode's return, which the
  // learner reports, in "episode_reward". Each batch: T steps of the E
  // envs, written into the [T, E] buffer (the policy draws its actions).
  auto env = std::make_unique<tensordict::TransformedEnv>(
      std::make_unique<tensordict::CartPoleEnv>(
          std::vector<int64_t>{E}, /*categorical_action_encoding=*/true),
      std::make_shared<tensordict::RewardSum>());
  env->set_seed(seed);
  tensordict::RolloutBuffer buffer(T, E);
  tensordict::Collector collector(
      std::move(env), agent.policy,
      tensordict::CollectorOptions(T * E).rollout_buffer(&buffer));
  TensorDict wire;  // the rollout as one consolidated storage
  bool first = true;
  while (true) {
    // The weights land in the agent's networks, which the collector's
    // policy runs.
    tensordict::broadcast(weights, 0, pg);
    if (stop.item<bool>()) return 0;
    (void)collector.next();
    agent.gae(buffer, cfg.hyper);
    if (first) {
      // First rollout: the learner has no dict yet; send the structure too.
      wire = buffer.data().consolidate();
      tensordict::init_remote(wire, 0, pg);
      first = false;
    } else {
      wire.update_(buffer.data());
      tensordict::send(wire, 0, pg, 0, /*consolidated=*/true);
    }
  }
}

// ---- The learner ----------------------------------------------------------------

std::vector<pid_t> spawn_actors(const Config& cfg, const char* self) {
  std::vector<pid_t> pids;
  for (int r = 1; r <= cfg.actors; ++r) {
    std::vector<std::string> args = {self,
                                     "--actors",
                                     std::to_string(cfg.actors),
                                     "--seed",
                                     std::to_string(cfg.seed),
                                     "--actor-rank",
                                     std::to_string(r),
                                     "--port",
                                     std::to_string(cfg.port)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(),
                      environ) != 0) {
      std::fprintf(stderr, "cannot start actor %d\n", r);
      for (pid_t p : pids) ::kill(p, SIGKILL);
      std::exit(1);
    }
    pids.push_back(pid);
  }
  return pids;
}

// Waits for the actors (at most 30 s each), killing any that hangs; true when
// all exited cleanly.
bool reap(const std::vector<pid_t>& pids) {
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

int run_learner(Config cfg, const char* self) {
  at::set_num_threads(1);
  cfg.port = loopback::free_port();
  const std::vector<pid_t> actors = spawn_actors(cfg, self);
  tensordict::GlooGroupOptions options;
  options.port = cfg.port;
  options.timeout = std::chrono::seconds(120);
  const Group pg = tensordict::make_gloo_group(0, cfg.actors + 1, options);

  const ppo::Hyper& h = cfg.hyper;
  torch::manual_seed(cfg.seed);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(cfg.seed);
  ppo::Agent agent(/*obs_dim=*/4, ppo::Discrete{2}, h.lr, gen);
  at::Tensor stop = at::zeros({1}, at::kBool);
  const TensorDict weights = weights_of(agent, stop);
  const int64_t per_iter =
      cfg.num_envs * (cfg.steps_per_rollout / cfg.actors) * cfg.actors;

  std::vector<TensorDict> rollouts(static_cast<size_t>(cfg.actors));
  std::vector<double> returns;
  int64_t env_steps = 0;
  const int64_t max_iters = cfg.quick ? 2 : cfg.max_steps / per_iter;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  auto solved = [&] {
    return returns.size() >= h.solved_window &&
           ppo::mean_last(returns, h.solved_window) >= h.solved_return;
  };
  std::printf(
      "Distributed PPO on CartPole-v1: 1 learner + %d actors x %lld envs, "
      "%lld transitions per iteration, seed %llu%s\n",
      cfg.actors, static_cast<long long>(cfg.num_envs),
      static_cast<long long>(per_iter),
      static_cast<unsigned long long>(cfg.seed),
      cfg.quick ? " (quick mode: 2 iterations)" : "");
  int64_t iter = 0;
  double waiting = 0.0;  // seconds spent on broadcasts and rollouts
  while (true) {
    const double t0 = elapsed();
    {
      torch::NoGradGuard no_grad;
      stop.fill_(iter >= max_iters || solved());
      tensordict::broadcast(weights, 0, pg);
    }
    if (stop.item<bool>()) break;
    // ---- The actors' rollouts: [T, E] each.
    for (int a = 0; a < cfg.actors; ++a) {
      TensorDict& r = rollouts[static_cast<size_t>(a)];
      if (iter == 0) {
        r = tensordict::from_remote_init(a + 1, pg);
      } else {
        tensordict::recv(r, a + 1, pg, 0, /*consolidated=*/true);
      }
      const at::Tensor done = r.get({"next", "done"});
      const at::Tensor ended =
          r.get({"next", "episode_reward"}).masked_select(done);
      for (int64_t i = 0; i < ended.numel(); ++i) {
        returns.push_back(ended[i].item<double>());
      }
    }
    env_steps += per_iter;
    waiting += elapsed() - t0;
    // ---- PPO epochs over shuffled minibatches of all the transitions.
    const TensorDict batch = tensordict::cat(rollouts, 1).reshape({-1});
    const double frac = 1.0 - static_cast<double>(env_steps - per_iter) /
                                  static_cast<double>(cfg.max_steps);
    agent.set_lr(h.lr * std::max(frac, 0.0));
    double last_loss = 0.0;
    const int64_t n = batch.batch_size()[0];
    for (int64_t epoch = 0; epoch < h.epochs; ++epoch) {
      const at::Tensor perm = at::randperm(n, gen);
      for (const at::Tensor& idx : perm.chunk(h.minibatches)) {
        last_loss = agent.update(batch[idx], h);
      }
    }
    ++iter;
    std::printf(
        "iter %4lld  env steps %7lld  episodes %5zu  mean return (last %zu) "
        "%6.1f  loss %8.4f  %6.0f steps/s\n",
        static_cast<long long>(iter), static_cast<long long>(env_steps),
        returns.size(), h.solved_window,
        ppo::mean_last(returns, h.solved_window), last_loss,
        static_cast<double>(env_steps) / elapsed());
    std::fflush(stdout);
  }
  const double secs = elapsed();
  const bool actors_ok = reap(actors);
  std::printf(
      "time: %.1f s training, %.1f s waiting for the weights to go out "
      "and the rollouts to come in (collection and transfer: %.0f env "
      "steps/s while waiting)\n",
      secs - waiting, waiting,
      waiting > 0 ? static_cast<double>(env_steps) / waiting : 0.0);
  if (!actors_ok) std::printf("an actor failed\n");
  const double ret = ppo::mean_last(returns, h.solved_window);
  if (cfg.quick) {
    std::printf("quick mode: %lld iterations, %lld env steps in %.1f s\n",
                static_cast<long long>(iter), static_cast<long long>(env_steps),
                secs);
    return actors_ok ? 0 : 1;
  }
  if (solved() && actors_ok) {
    std::printf(
        "SOLVED with %d actors: mean return %.1f over the last %zu episodes "
        "after %lld env steps, %lld iterations, %.1f s (%.0f steps/s)\n",
        cfg.actors, ret, h.solved_window, static_cast<long long>(env_steps),
        static_cast<long long>(iter), secs,
        static_cast<double>(env_steps) / secs);
    return 0;
  }
  std::printf("NOT SOLVED: mean return %.1f after %lld env steps, %.1f s\n",
              ret, static_cast<long long>(env_steps), secs);
  return 1;
}

bool parse_args(int argc, char** argv, Config& cfg) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return false;
    const long long v = std::atoll(argv[++i]);
    if (arg == "--actors") {
      cfg.actors = static_cast<int>(v);
    } else if (arg == "--seed") {
      cfg.seed = static_cast<uint64_t>(v);
    } else if (arg == "--max-steps") {
      cfg.max_steps = v;
    } else if (arg == "--actor-rank") {
      cfg.rank = static_cast<int>(v);
    } else if (arg == "--port") {
      cfg.port = static_cast<int>(v);
    } else {
      return false;
    }
  }
  return cfg.actors >= 1 && cfg.actors <= cfg.steps_per_rollout;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  if (!parse_args(argc, argv, cfg)) {
    std::fprintf(stderr, "usage: %s [--actors N] [--seed N] [--max-steps N]\n",
                 argv[0]);
    return 2;
  }
  const char* quick = std::getenv("TENSORDICT_EXAMPLE_QUICK");
  cfg.quick = quick != nullptr && std::strcmp(quick, "1") == 0;
  try {
    return cfg.rank > 0 ? run_actor(cfg) : run_learner(cfg, argv[0]);
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "%s %d: %s\n", cfg.rank > 0 ? "actor" : "learner",
                 cfg.rank, e.what_without_backtrace());
    return 1;
  }
}
