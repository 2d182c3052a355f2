// A Google Benchmark main that also prints each target as a ratio of two
// benchmarks measured in the same run.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace tensordict_bench {

struct Ratio {
  const char* what;
  const char* measured;
  const char* baseline;
  double target;  // 0: informational, no target
  // Report `measured - baseline` in ns instead, with `target` in ns (for
  // overheads whose target is absolute).
  bool difference = false;
  // Also report `measured` itself against this many ns (0: none), for
  // targets set in absolute time (another library's published numbers).
  double absolute_ns = 0;
};

class CapturingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    // With repetitions, the median of the repetitions is used; otherwise the
    // single run.
    for (const auto& r : runs) {
      const std::string name = r.run_name.str();
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median") {
        times_[name] = r.GetAdjustedRealTime();
        medians_[name] = true;
      } else if (r.run_type == Run::RT_Iteration && r.iterations > 0 &&
                 !medians_[name]) {
        times_[name] = r.GetAdjustedRealTime();
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  const std::map<std::string, double>& times() const { return times_; }

 private:
  std::map<std::string, double> times_;
  std::map<std::string, bool> medians_;
};

inline int run(int argc, char** argv, const std::vector<Ratio>& ratios) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf(
      "\nRatios (measured / raw-LibTorch baseline, same run; or the\n"
      "difference, for absolute targets):\n");
  for (const auto& r : ratios) {
    auto m = reporter.times().find(r.measured);
    auto b = reporter.times().find(r.baseline);
    if (m == reporter.times().end() || b == reporter.times().end()) continue;
    if (r.difference) {
      // Google Benchmark reports in the benchmark's time unit (ns by default).
      const double diff = m->second - b->second;
      if (r.target > 0) {
        std::printf("  %-40s %+8.0f ns  (target <= %.0f ns: %s)\n", r.what,
                    diff, r.target, diff <= r.target ? "met" : "NOT met");
      } else {
        std::printf("  %-40s %+8.0f ns\n", r.what, diff);
      }
      continue;
    }
    const double ratio = m->second / b->second;
    if (r.target > 0) {
      std::printf("  %-40s %8.3fx  (target <= %.2fx: %s)\n", r.what, ratio,
                  r.target, ratio <= r.target ? "met" : "NOT met");
    } else {
      std::printf("  %-40s %8.3fx\n", r.what, ratio);
    }
    if (r.absolute_ns > 0) {
      // In the benchmark's time unit: every absolute case uses ns.
      std::printf("  %-40s %8.0f ns  (target <= %.0f ns: %s)\n", r.what,
                  m->second, r.absolute_ns,
                  m->second <= r.absolute_ns ? "met" : "NOT met");
    }
  }
  benchmark::Shutdown();
  return 0;
}

}  // namespace tensordict_bench

#define TENSORDICT_BENCHMARK_MAIN(...)                     \
  int main(int argc, char** argv) {                        \
    return tensordict_bench::run(argc, argv, __VA_ARGS__); \
  }
