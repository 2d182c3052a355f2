// Benchmarks for the return estimators (tensordict/returns.h), as ratios
// against a plain C++ loop doing the same arithmetic in the same run.
//
// The cases: 32,768 float32 steps as [T = 2048, B = 16] (time first, 16 envs)
// and as [32768, 1] (one long env), with about 1% episode ends, half of them
// truncations. The plain loops read the float tensors' memory directly,
// compute in float and write a new float tensor, which is what a hand-written
// C++ estimator does.
//
// Targets: td_lambda_return and vtrace <= 1.1x their plain loops on
// [2048, 16]; gae <= 1.0x on both shapes. rlox publishes 69 us for GAE over
// 32k steps (Apple M3 Pro): read the BM_Gae times in us.
//
// glibc's malloc serves blocks of 128 KB and more (every output here) from
// fresh, page-faulting mappings until a freed one raises its threshold, so
// a case's time depended on which cases ran before it: the plain TD(lambda)
// loop took 21 to 37 us, and td_lambda_return's ratio read 0.83x to 1.35x.
// The thresholds are pinned, as in apply.cpp, so that every case, both
// sides alike, reuses heap memory from the start.
#include <ATen/CPUGeneratorImpl.h>
#include <benchmark/benchmark.h>
#include <tensordict/returns.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ratio_main.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace {

#ifdef __GLIBC__
const bool kMallocTuned = [] {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
}();
#endif

constexpr double kGamma = 0.99;
constexpr double kLambda = 0.95;
// The same, for the plain loops' float arithmetic.
constexpr float kGammaF = 0.99F;
constexpr float kLambdaF = 0.95F;

struct Inputs {
  at::Tensor reward, value, next_value, done, terminated, log_pi, log_mu;
};

Inputs make_inputs(int64_t steps, int64_t envs) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(0);
  Inputs in;
  in.reward = at::randn({steps, envs}, gen);
  in.value = at::randn({steps, envs}, gen);
  in.next_value = at::randn({steps, envs}, gen);
  in.done = at::rand({steps, envs}, gen) < 0.01;
  in.terminated = in.done.logical_and(at::rand({steps, envs}, gen) < 0.5);
  in.log_pi = at::randn({steps, envs}, gen) * 0.1;
  in.log_mu = at::randn({steps, envs}, gen) * 0.1;
  return in;
}

const Inputs& inputs(int64_t envs) {
  // One thread, as every figure in docs/performance.md (vtrace's one
  // LibTorch op would otherwise start OpenMP workers that spin on the other
  // core).
  static const bool one_thread = [] {
    at::set_num_threads(1);
    return true;
  }();
  (void)one_thread;
  static const Inputs wide = make_inputs(2048, 16);
  static const Inputs tall = make_inputs(32768, 1);
  return envs == 16 ? wide : tall;
}

struct Raw {
  const float *r, *v, *nv, *lpi, *lmu;
  const bool *d, *term;
  int64_t steps, envs;
  explicit Raw(const Inputs& in)
      : r(in.reward.data_ptr<float>()),
        v(in.value.data_ptr<float>()),
        nv(in.next_value.data_ptr<float>()),
        lpi(in.log_pi.data_ptr<float>()),
        lmu(in.log_mu.data_ptr<float>()),
        d(in.done.data_ptr<bool>()),
        term(in.terminated.data_ptr<bool>()),
        steps(in.reward.size(0)),
        envs(in.reward.size(1)) {}
};

// ---- GAE -----------------------------------------------------------------------

void BM_RawGaeLoop(benchmark::State& state) {
  const Inputs& in = inputs(state.range(0));
  const Raw x(in);
  const float g = kGammaF;
  const float gl = kGammaF * kLambdaF;
  for (auto _ : state) {
    at::Tensor adv = at::empty(in.value.sizes());
    at::Tensor tgt = at::empty(in.value.sizes());
    float* a = adv.data_ptr<float>();
    float* t = tgt.data_ptr<float>();
    std::vector<float> last(static_cast<size_t>(x.envs), 0.0F);
    for (int64_t s = x.steps - 1; s >= 0; --s) {
      for (int64_t e = 0; e < x.envs; ++e) {
        const int64_t i = s * x.envs + e;
        const float delta = x.r[i] + (x.term[i] ? 0.0F : g * x.nv[i]) - x.v[i];
        last[e] = delta + (x.d[i] ? 0.0F : gl * last[e]);
        a[i] = last[e];
        t[i] = last[e] + x.v[i];
      }
    }
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(t);
  }
}
BENCHMARK(BM_RawGaeLoop)->Arg(16)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_Gae(benchmark::State& state) {
  const Inputs& in = inputs(state.range(0));
  for (auto _ : state) {
    auto res = tensordict::gae(in.reward, in.value, in.next_value, in.done,
                               in.terminated, kGamma, kLambda);
    benchmark::DoNotOptimize(res.advantage.data_ptr());
  }
}
BENCHMARK(BM_Gae)->Arg(16)->Arg(1)->Unit(benchmark::kMicrosecond);

// ---- TD(lambda) ----------------------------------------------------------------

void BM_RawTdLambdaLoop(benchmark::State& state) {
  const Inputs& in = inputs(state.range(0));
  const Raw x(in);
  const float g = kGammaF;
  const float l = kLambdaF;
  for (auto _ : state) {
    at::Tensor ret = at::empty(in.value.sizes());
    float* out = ret.data_ptr<float>();
    std::vector<float> acc(static_cast<size_t>(x.envs));
    const int64_t last = (x.steps - 1) * x.envs;
    for (int64_t e = 0; e < x.envs; ++e) {
      acc[e] = x.term[last + e] ? 0.0F : x.nv[last + e];
    }
    for (int64_t s = x.steps - 1; s >= 0; --s) {
      for (int64_t e = 0; e < x.envs; ++e) {
        const int64_t i = s * x.envs + e;
        const float boot = x.term[i] ? 0.0F : x.nv[i];
        const float next = x.d[i] ? boot : acc[e];
        acc[e] = x.r[i] + g * ((1.0F - l) * boot + l * next);
        out[i] = acc[e];
      }
    }
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_RawTdLambdaLoop)->Arg(16)->Unit(benchmark::kMicrosecond);

void BM_TdLambdaReturn(benchmark::State& state) {
  const Inputs& in = inputs(state.range(0));
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        tensordict::td_lambda_return(kGamma, kLambda, in.next_value, in.reward,
                                     in.done, in.terminated, 0)
            .data_ptr());
  }
}
BENCHMARK(BM_TdLambdaReturn)->Arg(16)->Unit(benchmark::kMicrosecond);

// ---- V-trace -------------------------------------------------------------------

void BM_RawVtraceLoop(benchmark::State& state) {
  const Inputs& in = inputs(state.range(0));
  const Raw x(in);
  const float g = kGammaF;
  // The thresholds are arguments, as they are the estimator's (a constant 1
  // would let the compiler merge the two clips).
  float rho_thresh = 1.0F;
  float c_thresh = 1.0F;
  benchmark::DoNotOptimize(rho_thresh);
  benchmark::DoNotOptimize(c_thresh);
  for (auto _ : state) {
    at::Tensor adv = at::empty(in.value.sizes());
    at::Tensor vs = at::empty(in.value.sizes());
    float* a = adv.data_ptr<float>();
    float* out = vs.data_ptr<float>();
    std::vector<float> acc(static_cast<size_t>(x.envs), 0.0F);
    std::vector<float> vnext(static_cast<size_t>(x.envs), 0.0F);
    for (int64_t s = x.steps - 1; s >= 0; --s) {
      const bool last = s == x.steps - 1;
      for (int64_t e = 0; e < x.envs; ++e) {
        const int64_t i = s * x.envs + e;
        const float rho = std::exp(x.lpi[i] - x.lmu[i]);
        const float crho = std::min(rho, rho_thresh);
        const float cc = std::min(rho, c_thresh);
        const float disc = x.term[i] ? 0.0F : g;
        const float delta = crho * (x.r[i] + disc * x.nv[i] - x.v[i]);
        const float next = delta + (x.d[i] ? 0.0F : g * cc * acc[e]);
        const float boot = x.d[i] || last ? x.nv[i] : vnext[e];
        a[i] = crho * (x.r[i] + disc * boot - x.v[i]);
        acc[e] = next;
        vnext[e] = out[i] = next + x.v[i];
      }
    }
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(out);
  }
}
BENCHMARK(BM_RawVtraceLoop)->Arg(16)->Unit(benchmark::kMicrosecond);

void BM_Vtrace(benchmark::State& state) {
  const Inputs& in = inputs(state.range(0));
  for (auto _ : state) {
    auto res = tensordict::vtrace(kGamma, in.log_pi, in.log_mu, in.value,
                                  in.next_value, in.reward, in.done,
                                  in.terminated, 1.0, 1.0, 0);
    benchmark::DoNotOptimize(res.advantage.data_ptr());
  }
}
BENCHMARK(BM_Vtrace)->Arg(16)->Unit(benchmark::kMicrosecond);

}  // namespace

TENSORDICT_BENCHMARK_MAIN({
    {"gae [2048x16] vs plain loop", "BM_Gae/16", "BM_RawGaeLoop/16", 1.0},
    {"gae [32768x1] vs plain loop", "BM_Gae/1", "BM_RawGaeLoop/1", 1.0},
    {"td_lambda_return [2048x16] vs loop", "BM_TdLambdaReturn/16",
     "BM_RawTdLambdaLoop/16", 1.1},
    {"vtrace [2048x16] vs plain loop", "BM_Vtrace/16", "BM_RawVtraceLoop/16",
     1.1},
})
