// The library on CUDA tensors: moves, row writes and reads, stacking, the
// replay and rollout buffers with device storage. Each test skips, with a
// message, where LibTorch has no CUDA device (.ci/run counts the skips).
#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>
#include <tensordict/tensordict.h>

#include <vector>

namespace {

using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::RolloutBuffer;
using tensordict::TensorDict;

#define SKIP_WITHOUT_CUDA()                                                \
  if (!at::hasCUDA()) {                                                    \
    GTEST_SKIP() << "no CUDA device: the CUDA tests run on a GPU machine"; \
  }

const at::Device kCuda(at::kCUDA, 0);

// A stream of the CUDA pool (device-generic API: the test links no CUDA
// library of its own).
c10::Stream PoolStream() {
  return c10::impl::VirtualGuardImpl(at::kCUDA).getStreamFromGlobalPool(kCuda);
}

// Queues about a second of matrix products on `stream`, so that what is
// queued after them is still pending when the host goes on.
void QueueBusyWork(c10::Stream stream) {
  c10::StreamGuard guard(stream);
  at::Tensor a = at::rand({8192, 8192}, at::TensorOptions().device(kCuda));
  at::Tensor b = at::empty_like(a);
  for (int i = 0; i < 25; ++i) {
    at::mm_out(b, a, a);
    at::mm_out(a, b, b);
  }
}

TensorDict Row(float v) {
  return TensorDict({{"obs", at::full({4}, v)},
                     {"done", at::zeros({1}, at::kBool)},
                     {{"next", "obs"}, at::full({4}, v + 1)}},
                    {});
}

TEST(Cuda, ToDeviceAndBackKeepsEveryLeaf) {
  SKIP_WITHOUT_CUDA();
  const TensorDict cpu = Row(3);
  for (bool non_blocking : {false, true}) {
    const TensorDict gpu = cpu.to(kCuda, non_blocking);
    ASSERT_TRUE(gpu.device().has_value());
    EXPECT_EQ(*gpu.device(), kCuda);
    EXPECT_TRUE(gpu.get("obs").is_cuda());
    EXPECT_TRUE(gpu.get({"next", "obs"}).is_cuda());
    const TensorDict back = gpu.cpu();
    EXPECT_TRUE(at::equal(back.get("obs"), cpu.get("obs")));
    EXPECT_TRUE(at::equal(back.get({"next", "obs"}), cpu.get({"next", "obs"})));
    EXPECT_TRUE(at::equal(back.get("done"), cpu.get("done")));
  }
}

// Large enough for the pinned staging of `to(cuda, non_blocking)`.
TEST(Cuda, NonBlockingMoveOfALargeDictThroughPinnedStaging) {
  SKIP_WITHOUT_CUDA();
  std::vector<tensordict::Item> items;
  for (int k = 0; k < 12; ++k) {
    items.emplace_back("leaf" + std::to_string(k),
                       at::arange(k, k + (1 << 16), at::kFloat));
  }
  items.emplace_back(tensordict::NestedKey{"sub", "ints"},
                     at::arange(1 << 16, at::kLong));
  const TensorDict cpu(std::move(items), {});
  const TensorDict gpu = cpu.to(kCuda, /*non_blocking=*/true);
  ASSERT_TRUE(gpu.device().has_value());
  EXPECT_EQ(*gpu.device(), kCuda);
  for (const auto& key : cpu.keys(true, true)) {
    EXPECT_TRUE(gpu.get(key).is_cuda()) << key.str();
    EXPECT_TRUE(at::equal(gpu.get(key).cpu(), cpu.get(key))) << key.str();
  }
  // Each leaf has storage of its own, as with per-leaf copies.
  EXPECT_NE(gpu.get("leaf0").data_ptr(), gpu.get("leaf1").data_ptr());
  EXPECT_FALSE(cpu.get("leaf0").is_pinned());  // the source is untouched
}

// The copies of that staging go on the caller's current stream, though
// several threads make them: work queued on that stream after the move sees
// the values, while the default stream is busy.
TEST(Cuda, NonBlockingMoveOfALargeDictRunsOnTheCurrentStream) {
  SKIP_WITHOUT_CUDA();
  std::vector<tensordict::Item> items;
  for (int k = 0; k < 16; ++k) {
    items.emplace_back("leaf" + std::to_string(k),
                       at::full({1 << 16}, static_cast<float>(k + 1)));
  }
  const TensorDict cpu(std::move(items), {});
  const c10::Stream side = PoolStream();
  QueueBusyWork(c10::impl::VirtualGuardImpl(at::kCUDA).getDefaultStream(kCuda));
  std::vector<at::Tensor> sums;
  {
    const c10::StreamGuard on_side(side);
    const TensorDict gpu = cpu.to(kCuda, /*non_blocking=*/true);
    for (const auto& key : cpu.keys()) sums.push_back(gpu.get(key).sum());
    side.synchronize();
  }
  for (size_t k = 0; k < sums.size(); ++k) {
    EXPECT_EQ(sums[k].item<float>(), static_cast<float>((k + 1) << 16)) << k;
  }
}

TEST(Cuda, RowWritesFromCpuRowsIntoACudaBufferAndReadsBack) {
  SKIP_WITHOUT_CUDA();
  TensorDict buf({}, {6}, kCuda);
  for (int64_t t = 0; t < 6; ++t) buf[t] = Row(static_cast<float>(t));
  const at::Tensor obs = buf.get("obs");
  EXPECT_TRUE(obs.is_cuda());
  EXPECT_EQ(obs.sizes().vec(), std::vector<int64_t>({6, 4}));
  buf[2] = Row(20);  // in place: the buffer keeps its identity
  EXPECT_TRUE(buf.get("obs").is_same(obs));
  const TensorDict row = buf[2];
  EXPECT_TRUE(row.get("obs").is_cuda());
  EXPECT_TRUE(at::equal(row.get("obs").cpu(), at::full({4}, 20.0f)));
  EXPECT_TRUE(at::equal(row.get({"next", "obs"}).cpu(), at::full({4}, 21.0f)));
  EXPECT_TRUE(at::equal(buf[5].get("obs").cpu(), at::full({4}, 5.0f)));
}

TEST(Cuda, DeviceToDeviceRowWritesAndSliceWrites) {
  SKIP_WITHOUT_CUDA();
  TensorDict buf({}, {4}, kCuda);
  buf[0] = Row(1).to(kCuda);
  const TensorDict rows = tensordict::stack({Row(7), Row(8)}, 0).to(kCuda);
  buf[at::indexing::Slice(1, 3)] = rows;
  const at::Tensor obs = buf.get("obs").cpu();
  EXPECT_TRUE(
      at::equal(obs.select(1, 0), at::tensor({1.0f, 7.0f, 8.0f, 0.0f})));
}

// The fused device copy (CUDA builds): 70 leaves (two kernel launches), rows
// of odd byte sizes and dtypes, an empty leaf; CPU rows are staged, so the
// source may change as soon as the write returns.
TEST(Cuda, ManyLeavesOfOddSizesWrittenAndGatheredExactly) {
  SKIP_WITHOUT_CUDA();
  auto make_row = [](int64_t v) {
    std::vector<tensordict::Item> items;
    for (int64_t k = 0; k < 70; ++k) {
      const int64_t width = 1 + k % 7;  // 1..7 elements
      const at::ScalarType dtype =
          k % 3 == 0 ? at::kByte : (k % 3 == 1 ? at::kShort : at::kFloat);
      items.emplace_back("leaf" + std::to_string(k),
                         at::full({width}, v * 100 + k).to(dtype));
    }
    items.emplace_back("empty", at::zeros({0}));
    items.emplace_back("flag", at::full({1}, v % 2 == 1, at::kBool));
    return TensorDict(items, {});
  };
  TensorDict buf({}, {9}, kCuda);
  for (int64_t t = 0; t < 9; ++t) {
    TensorDict row = make_row(t);
    buf[t] = row;
    row.get("leaf0").fill_(255);  // the write staged its bytes already
  }
  const auto version = buf.get("leaf5")._version();
  buf[4] = make_row(4);
  EXPECT_EQ(buf.get("leaf5")._version(), version + 1);
  for (int64_t t = 0; t < 9; ++t) {
    const TensorDict want = make_row(t);
    for (const auto& key : want.keys()) {
      EXPECT_TRUE(at::equal(buf[t].get(key).cpu(), want.get(key)))
          << "row " << t << " key " << key.str();
    }
  }
  // Device-to-device rows.
  TensorDict buf2({}, {9}, kCuda);
  for (int64_t t = 0; t < 9; ++t) buf2[t] = buf[8 - t];
  ReplayBuffer rb(ReplayBufferOptions(9).device(kCuda).seed(1));
  (void)rb.extend(buf2);
  auto [batch, info] = rb.sample(32);
  const at::Tensor idx = info.index.cpu();
  for (const auto& key : buf2.keys()) {
    EXPECT_TRUE(at::equal(batch.get(key).cpu(),
                          buf2.get(key).cpu().index_select(0, idx)))
        << key.str();
  }
}

TEST(Cuda, StackAndCatOfCudaRows) {
  SKIP_WITHOUT_CUDA();
  std::vector<TensorDict> rows;
  for (int i = 0; i < 5; ++i)
    rows.push_back(Row(static_cast<float>(i)).to(kCuda));
  const TensorDict s = tensordict::stack(rows, 0);
  EXPECT_TRUE(s.get("obs").is_cuda());
  EXPECT_EQ(s.get("obs").sizes().vec(), std::vector<int64_t>({5, 4}));
  EXPECT_TRUE(
      at::equal(s.get("obs").cpu().select(1, 0), at::arange(5, at::kFloat)));
  TensorDict out = s.clone();
  tensordict::stack_out(out, rows, 0);
  EXPECT_TRUE(at::equal(out.get("obs").cpu(), s.get("obs").cpu()));
  const TensorDict c = tensordict::cat({s, s}, 0);
  EXPECT_EQ(c.batch_size().vec(), std::vector<int64_t>({10}));
}

TEST(Cuda, PinMemoryPinsEveryLeaf) {
  SKIP_WITHOUT_CUDA();
  const TensorDict pinned = Row(1).pin_memory();
  EXPECT_TRUE(pinned.get("obs").is_pinned());
  EXPECT_TRUE(pinned.get({"next", "obs"}).is_pinned());
}

// 4 MiB in all: pinned by several threads; a leaf already pinned is kept.
TEST(Cuda, PinMemoryOfALargeDictKeepsValuesAndPinnedLeaves) {
  SKIP_WITHOUT_CUDA();
  const at::Tensor already = at::arange(1 << 10, at::kFloat).pin_memory();
  std::vector<tensordict::Item> items;
  for (int k = 0; k < 4; ++k) {
    items.emplace_back("leaf" + std::to_string(k),
                       at::arange(k, k + (1 << 18), at::kFloat));
  }
  items.emplace_back(tensordict::NestedKey{"sub", "pinned"}, already);
  const TensorDict cpu(std::move(items), {});
  const TensorDict pinned = cpu.pin_memory();
  EXPECT_EQ(pinned.keys(true, true), cpu.keys(true, true));
  for (const auto& key : cpu.keys(true, true)) {
    EXPECT_TRUE(pinned.get(key).is_pinned()) << key.str();
    EXPECT_TRUE(at::equal(pinned.get(key), cpu.get(key))) << key.str();
  }
  EXPECT_TRUE(pinned.get({"sub", "pinned"}).is_same(already));
  EXPECT_FALSE(cpu.get("leaf0").is_pinned());
}

// record_stream: the leaves' memory is not reused while the stream that
// used them still has work queued.
TEST(Cuda, RecordStreamKeepsMemoryUntilTheStreamIsDone) {
  SKIP_WITHOUT_CUDA();
  const auto on_cuda = at::TensorOptions().device(kCuda);
  {  // Without it, freed memory is reused at once (the control).
    void* p = at::empty({1 << 20}, on_cuda).data_ptr();
    EXPECT_EQ(at::empty({1 << 20}, on_cuda).data_ptr(), p);
  }
  const c10::Stream side = PoolStream();
  TensorDict td(
      {{"obs", at::ones({1 << 20}, at::TensorOptions().device(kCuda))}}, {});
  void* const freed = td.get("obs").data_ptr();
  EXPECT_EQ(&td.record_stream(side), &td);
  QueueBusyWork(side);
  ASSERT_FALSE(side.query());
  td = TensorDict();
  const at::Tensor next =
      at::empty({1 << 20}, at::TensorOptions().device(kCuda));
  EXPECT_NE(next.data_ptr(), freed);
  side.synchronize();
  // Every leaf must be on the stream's device: nothing is marked otherwise.
  TensorDict mixed({{"a", at::ones({2}, at::TensorOptions().device(kCuda))},
                    {{"b", "c"}, at::ones({2})}},
                   {});
  try {
    mixed.record_stream(side);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_EQ(e.msg(),
              "record_stream: key ('b', 'c') is on cpu, but the "
              "stream is on cuda:0");
  }
}

// TorchRL's rl#3463: a write queued on one stream and a sample on another
// take effect in the order the host made the calls, without blocking the
// host.
TEST(Cuda, ReplayBufferOrdersCallsFromDifferentStreams) {
  SKIP_WITHOUT_CUDA();
  const c10::Stream actor = PoolStream();
  const c10::Stream learner = PoolStream();
  ASSERT_NE(actor, learner);
  // A write behind a second of work on the actor's stream, then a sample on
  // the learner's: the sample sees the row.
  ReplayBuffer rb(ReplayBufferOptions(4).device(kCuda).seed(0));
  {
    c10::StreamGuard on_actor(actor);
    QueueBusyWork(actor);
    rb.add(Row(5));
  }
  ASSERT_FALSE(actor.query());
  {
    c10::StreamGuard on_learner(learner);
    auto [batch, info] = rb.sample(8);
    learner.synchronize();
    EXPECT_TRUE(at::equal(batch.get("obs").cpu(), at::full({8, 4}, 5.0f)));
  }
  // A sample behind a second of work on the learner's stream, then writes
  // over every row on the actor's: the sample still reads the old rows.
  actor.synchronize();
  for (int i = 0; i < 3; ++i) rb.add(Row(5));
  at::Tensor sampled;
  {
    c10::StreamGuard on_learner(learner);
    QueueBusyWork(learner);
    sampled = rb.sample(8).first.get("obs");
  }
  ASSERT_FALSE(learner.query());
  {
    c10::StreamGuard on_actor(actor);
    for (int i = 0; i < 4; ++i) rb.add(Row(9));
    actor.synchronize();
  }
  EXPECT_TRUE(at::equal(sampled.cpu(), at::full({8, 4}, 5.0f)));
  EXPECT_TRUE(at::equal(rb.storage().get("obs").cpu(), at::full({4, 4}, 9.0f)));
}

// Writing CPU rows into CUDA storage and sampling it (prioritized: the
// indices are drawn on the host) queue work without waiting for the GPU.
TEST(Cuda, ReplayBufferCallsDoNotWaitForTheGpu) {
  SKIP_WITHOUT_CUDA();
  ReplayBuffer rb(ReplayBufferOptions(64)
                      .device(kCuda)
                      .sampler(tensordict::PrioritizedSampler())
                      .seed(0));
  rb.add(Row(1));  // allocates the storage
  const c10::Stream stream =
      c10::impl::VirtualGuardImpl(at::kCUDA).getStream(kCuda);
  QueueBusyWork(stream);
  rb.add(Row(2));
  (void)rb.extend(tensordict::stack({Row(3), Row(4)}, 0));
  auto [batch, info] = rb.sample(256);
  EXPECT_FALSE(stream.query()) << "a call waited for the GPU";
  stream.synchronize();
  const at::Tensor first = batch.get("obs").cpu().select(1, 0);
  EXPECT_TRUE(at::equal(first, info.index.to(at::kFloat) + 1));
}

TEST(Cuda, ConsolidatedDictMovesToTheDeviceAndBack) {
  SKIP_WITHOUT_CUDA();
  const TensorDict c = Row(2).consolidate();
  const TensorDict gpu = c.to(kCuda, /*non_blocking=*/true);
  EXPECT_TRUE(gpu.get("obs").is_cuda());
  EXPECT_TRUE(at::equal(gpu.cpu().get({"next", "obs"}), at::full({4}, 3.0f)));
}

TEST(Cuda, ReplayBufferWithCudaStorageSamplesOnTheDevice) {
  SKIP_WITHOUT_CUDA();
  for (bool prioritized : {false, true}) {
    ReplayBufferOptions opts = ReplayBufferOptions(8).device(kCuda).seed(0);
    if (prioritized) opts.sampler(tensordict::PrioritizedSampler());
    ReplayBuffer rb(opts);
    for (int i = 0; i < 10; ++i) rb.add(Row(static_cast<float>(i)));
    EXPECT_TRUE(rb.storage().get("obs").is_cuda());
    auto [batch, info] = rb.sample(16);
    EXPECT_TRUE(batch.get("obs").is_cuda());
    EXPECT_EQ(batch.batch_size().vec(), std::vector<int64_t>({16}));
    // Each sampled row is the stored row its index names.
    const at::Tensor idx = info.index.cpu();
    const at::Tensor stored = rb.storage().get("obs").cpu();
    EXPECT_TRUE(at::equal(batch.get("obs").cpu(), stored.index_select(0, idx)));
    if (prioritized) {
      rb.update_priority(info.index, at::ones({16}));
    }
    // The oldest rows (0 and 1) were overwritten by rows 8 and 9.
    EXPECT_TRUE(at::equal(
        stored.select(1, 0),
        at::tensor({8.0f, 9.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f})));
  }
}

TEST(Cuda, RolloutBufferOnTheDeviceComputesGae) {
  SKIP_WITHOUT_CUDA();
  RolloutBuffer buf(3, 2, kCuda);
  for (int64_t t = 0; t < 3; ++t) {
    buf.step(t,
             TensorDict({{"state_value", at::zeros({2, 1})},
                         {{"next", "reward"}, at::ones({2, 1})},
                         {{"next", "done"}, at::zeros({2, 1}, at::kBool)},
                         {{"next", "terminated"}, at::zeros({2, 1}, at::kBool)},
                         {{"next", "state_value"}, at::zeros({2, 1})}},
                        {2}));
  }
  EXPECT_TRUE(buf.data().get({"next", "reward"}).is_cuda());
  buf.compute_gae(1.0, 1.0);
  // With no discounting and zero values, the advantage at step t is the
  // rewards still to come: 3, 2, 1.
  const at::Tensor adv = buf.data().get("advantage").cpu();
  EXPECT_TRUE(
      at::equal(adv.select(1, 0).flatten(), at::tensor({3.0f, 2.0f, 1.0f})));
}

}  // namespace
