// Benchmarks for tensor classes (tensordict/tensorclass.h) against the
// plain dict, in the same run: a tensor class is a TensorDict handle, so
// each typed operation should cost what the dict operation costs.
//
// Target: each typed case <= 1.10x its dict case (a nested field read,
// `t[i]`, a typed `sample_as` of 32 rows, whose one key check is the only
// extra work).
#include <benchmark/benchmark.h>
#include <tensordict/tensordict.h>

#include "ratio_main.h"

namespace {

struct Next : tensordict::TensorClass<Next> {
  TENSORDICT_TENSORCLASS(Next)
  TENSORDICT_FIELDS(obs, reward, done)
};

struct Transition : tensordict::TensorClass<Transition> {
  TENSORDICT_TENSORCLASS(Transition)
  TENSORDICT_FIELDS(obs, action)
  TENSORDICT_CLASS_FIELDS(Next, next)
};

using tensordict::ReplayBuffer;
using tensordict::ReplayBufferOptions;
using tensordict::TensorDict;

// Rows of the rlox layout (benchmarks/rlox.cpp), with an int64 action.
TensorDict Rows(int64_t n) {
  return TensorDict({{"obs", torch::rand({n, 4})},
                     {"action", torch::randint(0, 2, {n})},
                     {{"next", "obs"}, torch::rand({n, 4})},
                     {{"next", "reward"}, torch::rand({n, 1})},
                     {{"next", "done"}, torch::zeros({n, 1}, torch::kBool)}},
                    {n});
}

void BM_DictNestedGet(benchmark::State& state) {
  const TensorDict td = Rows(64);
  for (auto _ : state) benchmark::DoNotOptimize(td.get({"next", "obs"}));
}
BENCHMARK(BM_DictNestedGet);

void BM_ClassNestedGet(benchmark::State& state) {
  const Transition t(Rows(64));
  for (auto _ : state) benchmark::DoNotOptimize(t.next().obs());
}
BENCHMARK(BM_ClassNestedGet);

void BM_DictIndex(benchmark::State& state) {
  const TensorDict td = Rows(64);
  for (auto _ : state) {
    TensorDict row = td[7];
    benchmark::DoNotOptimize(row);
  }
}
BENCHMARK(BM_DictIndex);

void BM_ClassIndex(benchmark::State& state) {
  const Transition t(Rows(64));
  for (auto _ : state) {
    Transition row = t[7];
    benchmark::DoNotOptimize(row);
  }
}
BENCHMARK(BM_ClassIndex);

ReplayBuffer Filled() {
  ReplayBuffer rb(ReplayBufferOptions(100000).seed(0));
  for (int i = 0; i < 100; ++i) rb.extend(Rows(1000));
  return rb;
}

void BM_DictSample(benchmark::State& state) {
  ReplayBuffer rb = Filled();
  for (auto _ : state) benchmark::DoNotOptimize(rb.sample(32));
}
BENCHMARK(BM_DictSample);

void BM_ClassSample(benchmark::State& state) {
  ReplayBuffer rb = Filled();
  for (auto _ : state) {
    benchmark::DoNotOptimize(tensordict::sample_as<Transition>(rb, 32));
  }
}
BENCHMARK(BM_ClassSample);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"t.next().obs() vs td.get({\"next\", \"obs\"})", "BM_ClassNestedGet",
     "BM_DictNestedGet", 1.10},
    {"t[i] vs td[i]", "BM_ClassIndex", "BM_DictIndex", 1.10},
    {"sample_as<T>(rb, 32) vs rb.sample(32)", "BM_ClassSample", "BM_DictSample",
     1.10},
})
