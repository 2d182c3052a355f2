// The list buffers (tensordict/lazy_replay_buffer.h) against ReplayBuffer,
// sample(32), in the same run. Informational: no targets.
//
// Ragged rows: 1,000 token sequences of 16 to 64 floats (uniform) and a
// reward.
//   - BM_LazySample: LazyStackReplayBuffer::sample(32), a lazy stack;
//   - BM_LazySamplePadded: the same, then get_padded("tokens"): the dense
//     [32, longest] batch a model takes;
//   - BM_PaddedSample (the baseline): a ReplayBuffer of the rows padded to
//     64 with a mask, sample(32).
// Frames: 1,000 uint8 frames [4, 84, 84] (a dark screen with a few bright
// rectangles, as game screens are), and an action.
//   - BM_CompressedSample: CompressedReplayBuffer::sample(32) (zlib, level
//     3), decompressed into a lazy stack; get("pixels") stacks it;
//   - BM_DenseFramesSample (the baseline): a ReplayBuffer of the same
//     frames, sample(32).
// The counter "stored_MB" is what each buffer holds.
#include <ATen/CPUGeneratorImpl.h>
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>
#include <torch/torch.h>

#include <vector>

#include "ratio_main.h"

namespace {

using tensordict::CompressedReplayBuffer;
using tensordict::LazyStackReplayBuffer;
using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;

constexpr int64_t kRows = 1000;
constexpr int64_t kLongest = 64;
constexpr int64_t kBatch = 32;

std::vector<TensorDict> ragged_rows() {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  std::vector<TensorDict> rows;
  for (int64_t i = 0; i < kRows; ++i) {
    const int64_t len =
        16 + at::randint(kLongest - 16 + 1, {1}, gen).item<int64_t>();
    rows.emplace_back(
        std::vector<tensordict::Item>{{"tokens", at::randn({len}, gen)},
                                      {"reward", at::randn({}, gen)}},
        c10::IntArrayRef{});
  }
  return rows;
}

std::vector<TensorDict> frame_rows() {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1);
  std::vector<TensorDict> rows;
  for (int64_t i = 0; i < kRows; ++i) {
    at::Tensor frame = at::zeros({4, 84, 84}, at::kByte);
    for (int k = 0; k < 4; ++k) {  // a few bright rectangles
      const int64_t y = at::randint(70, {1}, gen).item<int64_t>();
      const int64_t x = at::randint(70, {1}, gen).item<int64_t>();
      frame.narrow(1, y, 12).narrow(2, x, 8).fill_(
          at::randint(1, 256, {1}, gen).item<int64_t>());
    }
    rows.emplace_back(
        std::vector<tensordict::Item>{{"pixels", frame},
                                      {"action", at::randint(6, {}, gen)}},
        c10::IntArrayRef{});
  }
  return rows;
}

LazyStackReplayBuffer& lazy() {
  static LazyStackReplayBuffer* rb = [] {
    at::set_num_threads(1);
    auto* b = new LazyStackReplayBuffer(ReplayBufferOptions(kRows).seed(0));
    b->extend(ragged_rows());
    return b;
  }();
  return *rb;
}

ReplayBuffer& padded() {
  static ReplayBuffer* rb = [] {
    auto* b = new ReplayBuffer(ReplayBufferOptions(kRows).seed(0));
    for (const TensorDict& r : ragged_rows()) {
      const at::Tensor t = r.get("tokens");
      at::Tensor tokens = at::zeros({kLongest});
      at::Tensor mask = at::zeros({kLongest}, at::kBool);
      tokens.narrow(0, 0, t.numel()).copy_(t);
      mask.narrow(0, 0, t.numel()).fill_(true);
      b->add(TensorDict(
          {{"tokens", tokens}, {"mask", mask}, {"reward", r.get("reward")}},
          {}));
    }
    return b;
  }();
  return *rb;
}

CompressedReplayBuffer& compressed() {
  static CompressedReplayBuffer* rb = [] {
    auto* b = new CompressedReplayBuffer(ReplayBufferOptions(kRows).seed(0));
    b->extend(frame_rows());
    return b;
  }();
  return *rb;
}

ReplayBuffer& dense_frames() {
  static ReplayBuffer* rb = [] {
    auto* b = new ReplayBuffer(ReplayBufferOptions(kRows).seed(0));
    b->extend(tensordict::stack(frame_rows(), 0));
    return b;
  }();
  return *rb;
}

void BM_LazySample(benchmark::State& state) {
  LazyStackReplayBuffer& rb = lazy();
  for (auto _ : state) {
    auto s = rb.sample(kBatch);
    benchmark::DoNotOptimize(s.first.tensordicts().data());
  }
}
BENCHMARK(BM_LazySample)->Unit(benchmark::kMicrosecond);

void BM_LazySamplePadded(benchmark::State& state) {
  LazyStackReplayBuffer& rb = lazy();
  for (auto _ : state) {
    auto s = rb.sample(kBatch);
    benchmark::DoNotOptimize(s.first.get_padded("tokens").data_ptr());
  }
}
BENCHMARK(BM_LazySamplePadded)->Unit(benchmark::kMicrosecond);

void BM_PaddedSample(benchmark::State& state) {
  ReplayBuffer& rb = padded();
  for (auto _ : state) {
    auto s = rb.sample(kBatch);
    benchmark::DoNotOptimize(s.first.get("tokens").data_ptr());
  }
}
BENCHMARK(BM_PaddedSample)->Unit(benchmark::kMicrosecond);

void BM_CompressedSample(benchmark::State& state) {
  CompressedReplayBuffer& rb = compressed();
  for (auto _ : state) {
    auto s = rb.sample(kBatch);
    benchmark::DoNotOptimize(s.first.get("pixels").data_ptr());
  }
  state.counters["stored_MB"] = static_cast<double>(rb.bytes()) / 1e6;
}
BENCHMARK(BM_CompressedSample)->Unit(benchmark::kMicrosecond);

void BM_DenseFramesSample(benchmark::State& state) {
  ReplayBuffer& rb = dense_frames();
  for (auto _ : state) {
    auto s = rb.sample(kBatch);
    benchmark::DoNotOptimize(s.first.get("pixels").data_ptr());
  }
  state.counters["stored_MB"] =
      static_cast<double>(rb.storage().get("pixels").nbytes() +
                          rb.storage().get("action").nbytes()) /
      1e6;
}
BENCHMARK(BM_DenseFramesSample)->Unit(benchmark::kMicrosecond);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"lazy sample(32) vs padded ReplayBuffer", "BM_LazySample",
     "BM_PaddedSample", 0},
    {"lazy sample(32) + get_padded vs padded", "BM_LazySamplePadded",
     "BM_PaddedSample", 0},
    {"compressed sample(32) vs dense frames", "BM_CompressedSample",
     "BM_DenseFramesSample", 0},
})
