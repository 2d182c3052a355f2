// The code of docs/tutorials/replay_buffer.md. Every claim the tutorial makes
// is checked here with TORCH_CHECK, so CI fails if one stops being true.
#include <tensordict/her.h>
#include <tensordict/replay_ensemble.h>
#include <tensordict/tensordict.h>

#include <ftw.h>
#include <stdlib.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using tensordict::HEROptions;
using tensordict::HERReplayBuffer;
using tensordict::HindsightStrategy;
using tensordict::MaxValueWriter;
using tensordict::OfflineToOnlineReplayBuffer;
using tensordict::PrioritizedSampler;
using tensordict::PrioritizedSliceSampler;
using tensordict::RateLimiter;
using tensordict::RateLimiterInfo;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferEnsemble;
using tensordict::ReplayBufferEnsembleOptions;
using tensordict::ReplayBufferOptions;
using tensordict::SamplerWithoutReplacement;
using tensordict::SliceSampler;
using tensordict::SliceSamplerWithoutReplacement;
using tensordict::TensorDict;

// Removes `path` and everything under it, as `rm -rf`. Not
// std::filesystem::remove_all: pytorch.org's and pip's libtorch.so (2.5 and
// later) export their own copy of it, which programs linked with them may
// call, and it crashes (pytorch/pytorch#133437).
void remove_tree(const std::string& path) {
  ::nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);
        return 0;
      },
      16, FTW_DEPTH | FTW_PHYS);
}

// One environment step of `n` parallel environments.
TensorDict make_step(int64_t n) {
  return TensorDict({{"obs", torch::rand({n, 64})},
                     {"action", torch::rand({n, 4})},
                     {"reward", torch::rand({n, 1})},
                     {"done", torch::zeros({n, 1}, torch::kBool)},
                     {{"next", "obs"}, torch::rand({n, 64})}},
                    {n});
}

// "[3, 0, 1]": an integer tensor's values on one line.
std::string str(const at::Tensor& t) {
  at::Tensor c = t.to(torch::kLong).contiguous();
  std::string out = "[";
  for (int64_t k = 0; k < c.numel(); ++k) {
    out += (k ? ", " : "") + std::to_string(c.data_ptr<int64_t>()[k]);
  }
  return out + "]";
}

int main() {
  torch::manual_seed(0);  // the data; the buffers have their own seeds
  // ---- A buffer and its lazy storage ----------------------------------------
  ReplayBuffer rb(ReplayBufferOptions(1000).seed(0));
  TORCH_CHECK(rb.storage().empty() && rb.size() == 0);

  rb.extend(make_step(8));  // allocates 1000 rows, writes rows 0..7
  TensorDict storage = rb.storage();
  std::cout << storage << "\n";
  TORCH_CHECK(storage.get("obs").sizes() == at::IntArrayRef({1000, 64}));
  TORCH_CHECK(rb.size() == 8 && rb.cursor() == 8);

  TensorDict row = make_step(1)[0];  // batch size []
  int64_t i = rb.add(row);
  TORCH_CHECK(i == 8 && (rb.storage()[8] == row).all());
  TORCH_CHECK(rb.storage().get("obs").is_same(storage.get("obs")));

  // ---- Circular writes ------------------------------------------------------
  ReplayBuffer small(ReplayBufferOptions(4));
  small.extend(TensorDict({{"x", torch::arange(3)}}, {3}));  // rows 0, 1, 2
  at::Tensor where =
      small.extend(TensorDict({{"x", torch::arange(3, 6)}}, {3}));
  std::cout << str(where) << " " << str(small.storage().get("x")) << "\n";
  TORCH_CHECK(at::equal(where, torch::tensor({3, 0, 1})));
  TORCH_CHECK(at::equal(small.storage().get("x"), torch::tensor({4, 5, 2, 3})));
  TORCH_CHECK(small.size() == 4 && small.cursor() == 2);

  small.extend(TensorDict({{"x", torch::arange(10, 20)}}, {10}));  // > capacity
  TORCH_CHECK(at::equal(std::get<0>(small.storage().get("x").sort()),
                        torch::tensor({16, 17, 18, 19})));

  // ---- Sampling -------------------------------------------------------------
  auto [batch, info] = rb.sample(32);
  TORCH_CHECK(batch.batch_size() == at::IntArrayRef({32}));
  TORCH_CHECK((batch == rb.storage()[info.index].value()).all());
  TORCH_CHECK(!info.weight.defined());  // only the prioritized sampler weighs

  // ---- Without replacement --------------------------------------------------
  ReplayBuffer epochs(
      ReplayBufferOptions(100).sampler(SamplerWithoutReplacement()).seed(0));
  epochs.extend(TensorDict({{"x", torch::arange(10)}}, {10}));
  at::Tensor seen = torch::cat(
      {epochs.sample(5).second.index, epochs.sample(5).second.index});
  std::cout << str(seen) << "\n";
  TORCH_CHECK(at::equal(std::get<0>(seen.sort()), torch::arange(10)));

  // ---- Prioritized ----------------------------------------------------------
  ReplayBuffer per(ReplayBufferOptions(1000)
                       .sampler(PrioritizedSampler().alpha(0.6).beta(0.4))
                       .seed(0));
  per.extend(make_step(100));
  auto [b, pinfo] = per.sample(64);
  at::Tensor td_error = torch::rand({64});  // stands for |Q - target|
  per.update_priority(pinfo.index, td_error);
  at::Tensor loss_weight = pinfo.weight;  // [64], max 1
  TORCH_CHECK(loss_weight.max().item<float>() <= 1.0f);
  // Row 0 gets a huge priority: it now dominates the samples.
  per.update_priority(torch::tensor({0}), torch::tensor({10000.0}));
  at::Tensor idx = per.sample(1000).second.index;
  const double share = idx.eq(0).sum().item<double>() / 1000;
  std::cout << "share of row 0: " << share << "\n";
  TORCH_CHECK(share > 0.5);

  // ---- Slices of trajectories -----------------------------------------------
  ReplayBuffer traj(ReplayBufferOptions(100).sampler(SliceSampler(4)).seed(0));
  // Two episodes of 6 and 10 steps; ("next", "done") ends each.
  at::Tensor done = torch::zeros({16, 1}, torch::kBool);
  done[5] = true;
  done[15] = true;
  at::Tensor episode = torch::cat({torch::zeros({6}), torch::ones({10})});
  traj.extend(TensorDict({{"episode", episode},
                          {"t", torch::arange(16)},
                          {{"next", "done"}, done}},
                         {16}));
  auto [slices, sinfo] = traj.sample(8);  // 2 slices of 4 steps
  std::cout << str(slices.get("t")) << "\n";
  for (int64_t s = 0; s < 8; s += 4) {
    at::Tensor ep = slices.get("episode").narrow(0, s, 4);
    at::Tensor t = slices.get("t").narrow(0, s, 4);
    TORCH_CHECK((ep == ep[0]).all().item<bool>());       // one episode
    TORCH_CHECK(at::equal(t - t[0], torch::arange(4)));  // consecutive steps
  }

  // ---- Slices without replacement, prioritized slices -----------------------
  ReplayBuffer visits(ReplayBufferOptions(100)
                          .sampler(SliceSamplerWithoutReplacement(4))
                          .seed(0));
  visits.extend(traj.storage()[at::indexing::Slice(0, 16)]);
  // 2 episodes long enough: each epoch gives one slice of each.
  auto [epoch, einfo] = visits.sample(8);
  TORCH_CHECK(epoch.get("episode")[0].item<float>() !=
              epoch.get("episode")[4].item<float>());

  ReplayBuffer pslices(ReplayBufferOptions(100)
                           .sampler(PrioritizedSliceSampler(4).alpha(1.0))
                           .seed(0));
  pslices.extend(traj.storage()[at::indexing::Slice(0, 16)]);
  // Slices starting at row 8 get a large priority: they dominate.
  pslices.update_priority(torch::tensor({8}), torch::tensor({1000.0}));
  auto [ps, psinfo] = pslices.sample(400);  // 100 slices
  const double from_8 =
      psinfo.index.view({100, 4}).select(1, 0).eq(8).sum().item<double>() / 100;
  std::cout << "slices from row 8: " << (from_8 > 0.9 ? "most" : "few") << "\n";
  TORCH_CHECK(at::equal(psinfo.weight.view({100, 4}).select(1, 0),
                        psinfo.weight.view({100, 4}).select(1, 3)));

  // ---- Keeping the best rows ------------------------------------------------
  ReplayBuffer best(ReplayBufferOptions(3).writer(
      MaxValueWriter().rank_key(tensordict::NestedKey("return"))));
  at::Tensor returns = torch::tensor({5.0, 1.0, 7.0, 3.0, 9.0});
  at::Tensor kept =
      best.extend(TensorDict({{"return", returns}}, {5}));  // 1 and 3 lose
  std::cout << str(kept) << "\n";

  // ---- Threads: producers extend while a learner samples --------------------
  ReplayBuffer shared(ReplayBufferOptions(10000).seed(0));
  std::vector<std::thread> producers;
  for (int p = 0; p < 2; ++p) {
    producers.emplace_back([&shared] {
      for (int k = 0; k < 100; ++k) shared.extend(make_step(16));
    });
  }
  int64_t sampled = 0;
  while (sampled < 50) {
    if (shared.empty()) continue;
    auto [data, unused] = shared.sample(64);
    sampled += 1;
  }
  for (auto& t : producers) t.join();
  TORCH_CHECK(shared.size() == 2 * 100 * 16);

  // ---- Rate limiting: the learner samples 4 rows per row inserted -----------
  ReplayBuffer limited(ReplayBufferOptions(10000).seed(0).rate_limiter(
      RateLimiter(/*samples_per_insert=*/4.0)
          .min_size_to_sample(256)
          .error_buffer(512)
          .block_inserts(true)));
  std::thread actor([&limited] {
    for (int k = 0; k < 200; ++k) limited.extend(make_step(16));  // 3200 rows
  });
  for (int k = 0; k < 180; ++k) {
    auto [rows, unused] = limited.sample(64);  // waits for the actor
    const RateLimiterInfo state = limited.rate_limiter_info();
    TORCH_CHECK(state.diff >= state.min_diff && state.diff <= state.max_diff);
  }
  actor.join();
  const RateLimiterInfo counts = limited.rate_limiter_info();
  TORCH_CHECK(counts.inserted == 3200 && counts.sampled == 180 * 64);
  std::cout << "rate limiter: " << counts.inserted << " rows inserted, "
            << counts.sampled << " sampled (4 per insert, +-512)\n";

  // ---- Errors leave the buffer unchanged ------------------------------------
  try {
    rb.add(TensorDict({{"obs", torch::rand({64})}}, {}));
    TORCH_CHECK(false, "expected an error");
  } catch (const c10::Error& e) {
    std::cout << e.msg() << "\n";
  }
  TORCH_CHECK(rb.size() == 9 && rb.cursor() == 9);

  // ---- Disk-backed storage ----------------------------------------------------
  std::string tmpl =
      (std::filesystem::temp_directory_path() / "rb_example_XXXXXX").string();
  TORCH_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
  const std::string dir = tmpl + "/buffer";
  TensorDict first = make_step(300);
  {
    ReplayBuffer disk(ReplayBufferOptions(256).storage_dir(dir).seed(0));
    TORCH_CHECK(!std::filesystem::exists(dir));  // nothing before a write
    disk.extend(first);                          // wraps: 300 rows > 256
    TORCH_CHECK(disk.storage().is_memmap());
  }  // the buffer is gone; its files stay
  {
    ReplayBuffer disk(ReplayBufferOptions(256).storage_dir(dir).seed(0));
    TORCH_CHECK(disk.size() == 256 && disk.cursor() == 300 % 256);
    // Row 300 - 256 + k of the batch sits at storage row (300 + k) % 256.
    at::Tensor obs = disk.storage().get("obs");
    TORCH_CHECK(
        at::equal(obs.narrow(0, 0, 44), first.get("obs").narrow(0, 256, 44)));
    TORCH_CHECK(
        at::equal(obs.narrow(0, 44, 212), first.get("obs").narrow(0, 44, 212)));
    auto [data, sample_info] = disk.sample(32);
    TORCH_CHECK(
        at::equal(data.get("obs"), obs.index_select(0, sample_info.index)));
    disk.add(make_step(1)[0]);  // keeps writing at the cursor
    TORCH_CHECK(disk.cursor() == 45);
  }
  // The storage is a plain memmap directory: Python's
  // TensorDict.load_memmap(dir + "/storage") opens it, and so does this.
  TensorDict on_disk = TensorDict::load_memmap(dir + "/storage");
  TORCH_CHECK(on_disk.batch_size() == c10::IntArrayRef({256}));
  try {
    ReplayBuffer wrong(ReplayBufferOptions(512).storage_dir(dir));
    TORCH_CHECK(false, "expected an error");
  } catch (const c10::Error& e) {
    std::cout << e.msg() << "\n";
  }

  // ---- Checkpoints ------------------------------------------------------------
  ReplayBuffer live(
      ReplayBufferOptions(64).sampler(SamplerWithoutReplacement()).seed(7));
  live.extend(make_step(50));
  (void)live.sample(16);             // mid-epoch
  live.dumps(tmpl + "/checkpoint");  // a new (or empty) directory
  at::Tensor next = live.sample(16).second.index;
  ReplayBuffer resumed(
      ReplayBufferOptions(64).sampler(SamplerWithoutReplacement()));
  resumed.loads(tmpl + "/checkpoint");
  TORCH_CHECK(at::equal(resumed.sample(16).second.index, next));
  remove_tree(tmpl);

  // ---- Mixed replay -------------------------------------------------------------
  auto expert =
      std::make_shared<ReplayBuffer>(ReplayBufferOptions(100).seed(1));
  auto online =
      std::make_shared<ReplayBuffer>(ReplayBufferOptions(100).seed(2));
  expert->extend(make_step(40));
  online->extend(make_step(10));
  ReplayBufferEnsemble mixed({expert, online},
                             ReplayBufferEnsembleOptions().ratios({1, 3}));
  auto [mixed_batch, mixed_from] = mixed.sample(8);  // 2 expert rows, 6 online
  std::cout << "mixed: buffers " << str(mixed_from.buffer_ids) << "\n";
  TORCH_CHECK(at::equal(mixed_batch.get("obs")[0],
                        expert->storage().get("obs")[mixed_from.index[0]]));
  OfflineToOnlineReplayBuffer finetune(expert, ReplayBufferOptions(100).seed(3),
                                       /*offline_fraction=*/0.5);
  finetune.extend(make_step(4));
  finetune.anneal(1, 2);  // the offline fraction is now 0.25
  auto [finetune_batch, finetune_from] = finetune.sample(8);
  std::cout << "offline to online: buffers " << str(finetune_from.buffer_ids)
            << "\n";

  // ---- Hindsight relabelling ---------------------------------------------------
  // Episodes along a line, one unit per step, toward a desired goal (10)
  // they never reach: every stored reward is -1.
  auto walk = [](float start, int64_t steps) {
    const at::Tensor pos =
        torch::arange(start, start + static_cast<float>(steps)).unsqueeze(1);
    const at::Tensor ends = torch::zeros({steps, 1}, torch::kBool);
    ends[steps - 1].fill_(true);
    return TensorDict({{"achieved_goal", pos},
                       {"desired_goal", torch::full({steps, 1}, 10.0F)},
                       {{"next", "achieved_goal"}, pos + 1},
                       {{"next", "reward"}, torch::full({steps, 1}, -1.0F)},
                       {{"next", "done"}, ends}},
                      {steps});
  };
  HERReplayBuffer her(
      [](const TensorDict& td) {  // 0 at the goal, -1 elsewhere
        return (td.get({"next", "achieved_goal"}) - td.get("desired_goal"))
                   .abs()
                   .lt(0.5)
                   .to(torch::kFloat) -
               1;
      },
      ReplayBufferOptions(100).seed(4),
      HEROptions().strategy(HindsightStrategy::kFuture).her_ratio(0.5).seed(4));
  her.extend(walk(0, 3));   // rows 0 to 2: positions 0, 1, 2
  her.extend(walk(20, 4));  // rows 3 to 6: positions 20 to 23
  auto [her_batch, her_info] = her.sample(6);  // rows 0 to 2 relabelled
  std::cout << "hindsight: rows " << str(her_info.index) << ", goals from "
            << str(her_info.goal_index) << ", rewards "
            << str(her_batch.get({"next", "reward"})) << "\n";
  for (int64_t k = 0; k < 3; ++k) {  // the goal is in the row's episode, later
    const int64_t her_row = her_info.index[k].item<int64_t>();
    const int64_t goal = her_info.goal_index[k].item<int64_t>();
    TORCH_CHECK(goal >= her_row && (her_row < 3) == (goal < 3));
  }
  std::cout << "disk-backed buffer reopened intact\n";
  return 0;
}
