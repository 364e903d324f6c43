// micro_kernels.cpp — Google Benchmark micro-benchmarks of the library's own code:
// the fast kernel's forward and backward on one thread (FLOP/s counters, FlashAttention's
// FLOP convention), and its vector exp on every ISA this CPU runs (elements/s).
// `sdpa bench` is the user-facing table; these isolate one piece at a time.
//
//   ./build/bench/sdpa_micro --benchmark_filter=Forward --benchmark_repetitions=5
#include <cmath>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "attention/fast.hpp"
#include "sdpa/sdpa.hpp"

namespace {

using i64 = std::int64_t;

std::vector<float> normal(i64 n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (auto& e : x) e = d(rng);
  return x;
}

sdpa::Isa isa_arg(int64_t a) { return a == 2 ? sdpa::Isa::avx512 : a == 1 ? sdpa::Isa::avx2 : sdpa::Isa::scalar; }

// args: N, D, isa (0 scalar, 1 avx2, 2 avx512), causal (0/1). One head, one thread.
void Forward(benchmark::State& st) {
  const i64 N = st.range(0), D = st.range(1);
  const sdpa::Isa isa = isa_arg(st.range(2));
  if (!sdpa::isa_supported(isa)) return st.SkipWithError("this CPU cannot run this ISA");
  auto q = normal(N * D, 1), k = normal(N * D, 2), v = normal(N * D, 3);
  std::vector<float> out(static_cast<std::size_t>(N * D)), lse(static_cast<std::size_t>(N));
  sdpa::Options opt;
  opt.threads = 1, opt.isa = isa, opt.causal = st.range(3) ? sdpa::Causal::top_left : sdpa::Causal::none;
  for (auto _ : st)
    sdpa::forward(sdpa::contiguous<const float>(q.data(), {1, 1, N, D}),
                  sdpa::contiguous<const float>(k.data(), {1, 1, N, D}),
                  sdpa::contiguous<const float>(v.data(), {1, 1, N, D}), sdpa::contiguous(out.data(), {1, 1, N, D}),
                  sdpa::contiguous(lse.data(), {1, 1, N}), opt);
  const double flops = 4.0 * double(N) * double(N) * double(D) / (st.range(3) ? 2 : 1);
  st.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void Backward(benchmark::State& st) {
  const i64 N = st.range(0), D = st.range(1);
  const sdpa::Isa isa = isa_arg(st.range(2));
  if (!sdpa::isa_supported(isa)) return st.SkipWithError("this CPU cannot run this ISA");
  auto q = normal(N * D, 1), k = normal(N * D, 2), v = normal(N * D, 3), dout = normal(N * D, 4);
  std::vector<float> out(q.size()), lse(static_cast<std::size_t>(N)), dq(q.size()), dk(q.size()), dv(q.size());
  sdpa::Options opt;
  opt.threads = 1, opt.isa = isa;
  auto view = [&](const std::vector<float>& x) { return sdpa::contiguous<const float>(x.data(), {1, 1, N, D}); };
  sdpa::forward(view(q), view(k), view(v), sdpa::contiguous(out.data(), {1, 1, N, D}),
                sdpa::contiguous(lse.data(), {1, 1, N}), opt);
  for (auto _ : st)
    sdpa::backward(view(q), view(k), view(v), view(out), sdpa::contiguous<const float>(lse.data(), {1, 1, N}),
                   view(dout), sdpa::contiguous(dq.data(), {1, 1, N, D}), sdpa::contiguous(dk.data(), {1, 1, N, D}),
                   sdpa::contiguous(dv.data(), {1, 1, N, D}), opt);
  st.counters["FLOP/s"] =
      benchmark::Counter(2.5 * 4.0 * double(N) * double(N) * double(D), benchmark::Counter::kIsIterationInvariantRate);
}

// The kernel's own vector exp (what the online softmax spends its non-FMA time on).
void Exp(benchmark::State& st) {
  const sdpa::Isa isa = isa_arg(st.range(0));
  if (!sdpa::isa_supported(isa)) return st.SkipWithError("this CPU cannot run this ISA");
  const auto& kern = isa == sdpa::Isa::avx512 ? sdpa::detail::fast_kernels_avx512()
                     : isa == sdpa::Isa::avx2 ? sdpa::detail::fast_kernels_avx2()
                                              : sdpa::detail::fast_kernels_scalar();
  auto x = normal(4096, 5);
  std::vector<float> y(x.size());
  for (auto _ : st) {
    kern.exp(x.data(), y.data(), static_cast<i64>(x.size()));
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(st.iterations() * static_cast<int64_t>(x.size()));
}

BENCHMARK(Forward)->ArgsProduct({{1024, 4096}, {64, 128}, {0, 1, 2}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(Backward)->ArgsProduct({{1024}, {64, 128}, {1, 2}})->Unit(benchmark::kMillisecond);
BENCHMARK(Exp)->DenseRange(0, 2);

}  // namespace

BENCHMARK_MAIN();
