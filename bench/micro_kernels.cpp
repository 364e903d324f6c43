// micro_kernels.cpp — Google Benchmark micro-benchmarks of the library's own code: the
// fast kernel's forward and backward on one thread and one head (GFLOP/s), and its vector
// exp on every ISA this CPU runs (elements/s). `sdpa bench` is the user-facing table;
// these isolate one piece at a time.
//
// Google Benchmark only names, filters and reports here: each benchmark is one iteration
// whose time is the median taken by the project's one timer rule (bench::TimerRule,
// src/bench/timer.hpp), and FLOPs are the project's one count (bench::flops), so these
// figures and `sdpa bench`'s are measured alike.
//
//   ./build/bench/sdpa_micro --benchmark_filter=Forward
#include <cmath>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "attention/fast.hpp"
#include "bench/flops.hpp"
#include "bench/timer.hpp"
#include "sdpa/sdpa.hpp"

namespace {

using sdpa::bench::i64;

std::vector<float> normal(i64 n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (auto& e : x) e = d(rng);
  return x;
}

sdpa::Isa isa_arg(int64_t a) { return a == 2 ? sdpa::Isa::avx512 : a == 1 ? sdpa::Isa::avx2 : sdpa::Isa::scalar; }

// Reports fn's median by the rule as this benchmark's (manual) time, with `work` units
// per call as the named rate.
template <class F>
void report(benchmark::State& st, F&& fn, const char* rate, double work) {
  sdpa::bench::Timing t;
  for (auto _ : st) {
    t = sdpa::bench::time_median(sdpa::bench::TimerRule{}, fn);
    st.SetIterationTime(t.median_seconds);
  }
  st.counters[rate] = work / t.median_seconds;
  st.counters["runs"] = t.runs;
}

// args: N, D, isa (0 scalar, 1 avx2, 2 avx512), causal (0/1). Shape (1, 1, N, D), one thread.
void Forward(benchmark::State& st) {
  const sdpa::bench::Shape s{1, 1, 1, st.range(0), st.range(0), st.range(1), st.range(1)};
  const sdpa::Isa isa = isa_arg(st.range(2));
  if (!sdpa::isa_supported(isa)) return st.SkipWithError("this CPU cannot run this ISA");
  const i64 N = s.Nq, D = s.Dk;
  auto q = normal(N * D, 1), k = normal(N * D, 2), v = normal(N * D, 3);
  std::vector<float> out(static_cast<std::size_t>(N * D)), lse(static_cast<std::size_t>(N));
  sdpa::Options opt;
  opt.threads = 1, opt.isa = isa, opt.causal = st.range(3) ? sdpa::Causal::top_left : sdpa::Causal::none;
  report(
      st,
      [&] {
        sdpa::forward(sdpa::contiguous<const float>(q.data(), {1, 1, N, D}),
                      sdpa::contiguous<const float>(k.data(), {1, 1, N, D}),
                      sdpa::contiguous<const float>(v.data(), {1, 1, N, D}), sdpa::contiguous(out.data(), {1, 1, N, D}),
                      sdpa::contiguous(lse.data(), {1, 1, N}), opt);
      },
      "FLOP/s", sdpa::bench::flops(s, opt.causal, sdpa::bench::Pass::forward));
}

void Backward(benchmark::State& st) {
  const sdpa::bench::Shape s{1, 1, 1, st.range(0), st.range(0), st.range(1), st.range(1)};
  const sdpa::Isa isa = isa_arg(st.range(2));
  if (!sdpa::isa_supported(isa)) return st.SkipWithError("this CPU cannot run this ISA");
  const i64 N = s.Nq, D = s.Dk;
  auto q = normal(N * D, 1), k = normal(N * D, 2), v = normal(N * D, 3), dout = normal(N * D, 4);
  std::vector<float> out(q.size()), lse(static_cast<std::size_t>(N)), dq(q.size()), dk(q.size()), dv(q.size());
  sdpa::Options opt;
  opt.threads = 1, opt.isa = isa;
  auto view = [&](const std::vector<float>& x) { return sdpa::contiguous<const float>(x.data(), {1, 1, N, D}); };
  sdpa::forward(view(q), view(k), view(v), sdpa::contiguous(out.data(), {1, 1, N, D}),
                sdpa::contiguous(lse.data(), {1, 1, N}), opt);
  report(
      st,
      [&] {
        sdpa::backward(view(q), view(k), view(v), view(out), sdpa::contiguous<const float>(lse.data(), {1, 1, N}),
                       view(dout), sdpa::contiguous(dq.data(), {1, 1, N, D}), sdpa::contiguous(dk.data(), {1, 1, N, D}),
                       sdpa::contiguous(dv.data(), {1, 1, N, D}), opt);
      },
      "FLOP/s", sdpa::bench::flops(s, opt.causal, sdpa::bench::Pass::backward));
}

// The kernel's own vector exp (what the online softmax spends its non-FMA time on). One
// timed call is kCalls passes over 4096 floats, so the clock's own cost is negligible.
void Exp(benchmark::State& st) {
  const sdpa::Isa isa = isa_arg(st.range(0));
  if (!sdpa::isa_supported(isa)) return st.SkipWithError("this CPU cannot run this ISA");
  const auto& kern = sdpa::detail::fast_kernels(isa);
  constexpr int kCalls = 256;
  auto x = normal(4096, 5);
  std::vector<float> y(x.size());
  report(
      st,
      [&] {
        for (int c = 0; c < kCalls; ++c) {
          kern.exp(x.data(), y.data(), static_cast<i64>(x.size()));
          benchmark::DoNotOptimize(y.data());
          benchmark::ClobberMemory();
        }
      },
      "items/s", double(kCalls) * double(x.size()));
}

BENCHMARK(Forward)
    ->ArgsProduct({{1024, 4096}, {64, 128}, {0, 1, 2}, {0, 1}})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Backward)
    ->ArgsProduct({{1024}, {64, 128}, {1, 2}})
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Exp)->DenseRange(0, 2)->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
