// examples/ppo_distributed.cpp — PPO on CartPole-v1 with a learner process
// and N actor processes, TensorDicts moving between them over c10d (Gloo).
//
// One command starts everything on loopback: the program is the learner
// (rank 0), and it starts N copies of itself as actors (ranks 1..N), which
// meet it at a c10d TCPStore on 127.0.0.1 (`make_gloo_group`). Each actor
// is a Collector (tensordict/collectors.h) of the library's CartPoleEnv
// served to the learner with `serve_learner`; the learner iterates over
// their batches with `RemoteCollectors`. Each iteration:
//
//  1. the learner sends every actor its policy's weights (`from_module`:
//     the parameters themselves), which land in place in the actor's
//     policy;
//  2. each actor's collector runs its 8 envs for T = 128 / N steps with
//     them and sends the batch: the first time with its structure, then
//     as one consolidated message into the dict the learner made of it;
//  3. the learner stacks the N batches, `[N, 8, T]`, writes them time
//     first into a `[T, 8N]` RolloutBuffer, computes GAE with its critic
//     and runs the PPO epochs.
//
// The rollout per iteration is 1024 transitions whatever N, so the learning
// is the same and only the throughput changes with N.
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
  // Its policy acts with the learner's weights (its critic is unused).
  ppo::Agent agent(/*obs_dim=*/4, ppo::Discrete{2}, cfg.hyper.lr, gen);
  // Categorical actions; RewardSum keeps each episode's return, which the
  // learner reports, in "episode_reward".
  auto env = std::make_unique<tensordict::TransformedEnv>(
      std::make_unique<tensordict::CartPoleEnv>(
          std::vector<int64_t>{E}, /*categorical_action_encoding=*/true),
      std::make_shared<tensordict::RewardSum>());
  env->set_seed(seed);
  tensordict::Collector collector(std::move(env), agent.policy,
                                  tensordict::CollectorOptions(T * E));
  tensordict::serve_learner(collector, pg);  // until the learner stops
  return 0;
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
  const int64_t E = cfg.num_envs * cfg.actors;  // the envs of every actor
  const int64_t T = cfg.steps_per_rollout / cfg.actors;
  const int64_t per_iter = T * E;
  const int64_t max_iters = cfg.quick ? 2 : cfg.max_steps / per_iter;
  std::vector<int> ranks;
  for (int r = 1; r <= cfg.actors; ++r) ranks.push_back(r);
  tensordict::RemoteCollectors collectors(
      pg, ranks, tensordict::from_module(agent.policy), max_iters * per_iter);
  tensordict::RolloutBuffer buffer(T, E);

  std::vector<double> returns;
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
  double waiting = 0.0;  // seconds spent on the weights and the batches
  for (; !collectors.finished() && !solved(); ++iter) {
    const double t0 = elapsed();
    // [N, E / N, T] -> [E, T] -> time first, into the [T, E] buffer.
    const TensorDict steps = collectors.next().reshape({E, T}).transpose(0, 1);
    waiting += elapsed() - t0;
    for (int64_t t = 0; t < T; ++t) buffer.step(t, steps.index({t}));
    ppo::episode_returns(buffer.data(), returns);
    agent.gae(buffer, h);
    const double last_loss = agent.learn(buffer, h, collectors.frames(),
                                         per_iter, cfg.max_steps, gen);
    std::printf(
        "iter %4lld  env steps %7lld  episodes %5zu  mean return (last %zu) "
        "%6.1f  loss %8.4f  %6.0f steps/s\n",
        static_cast<long long>(iter + 1),
        static_cast<long long>(collectors.frames()), returns.size(),
        h.solved_window, ppo::mean_last(returns, h.solved_window), last_loss,
        static_cast<double>(collectors.frames()) / elapsed());
    std::fflush(stdout);
  }
  collectors.shutdown();  // the actors' serve_learner returns
  const int64_t env_steps = collectors.frames();
  const double secs = elapsed();
  const bool actors_ok = reap(actors);
  std::printf(
      "time: %.1f s training, %.1f s waiting for the weights to go out "
      "and the batches to come in (collection and transfer: %.0f env "
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
