// peak.cpp — see peak.hpp. Inline assembly needs no -m flags; the path is sdpa::active_isa().
// On x86-64 the meters are the inline-assembly loops below; elsewhere the scalar path's meter
// and the read are plain C++ (the portable block at the end of this namespace), and on aarch64
// the neon and sve paths' meters are inline assembly too (fma_neon, fma_sve).
#include "common/peak.hpp"

#include "common/per_isa.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <omp.h>

#include <algorithm>
#include <new>
#include <string>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace sdpa::peak {
namespace {

constexpr int kChains = 12;  // ≥ FMA latency × FMA ports on current x86 cores

#if defined(__x86_64__)

// `iters` iterations of kChains independent FMAs on ymm (8 floats) registers.
void fma_avx2(std::int64_t iters) {
  asm volatile(
      "vxorps %%ymm0, %%ymm0, %%ymm0\n\t"
      "vmovaps %%ymm0, %%ymm1\n\tvmovaps %%ymm0, %%ymm2\n\tvmovaps %%ymm0, %%ymm3\n\t"
      "vmovaps %%ymm0, %%ymm4\n\tvmovaps %%ymm0, %%ymm5\n\tvmovaps %%ymm0, %%ymm6\n\t"
      "vmovaps %%ymm0, %%ymm7\n\tvmovaps %%ymm0, %%ymm8\n\tvmovaps %%ymm0, %%ymm9\n\t"
      "vmovaps %%ymm0, %%ymm10\n\tvmovaps %%ymm0, %%ymm11\n\t"
      "vmovaps %%ymm0, %%ymm12\n\tvmovaps %%ymm0, %%ymm13\n\t"
      "1:\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm0\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm1\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm2\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm3\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm4\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm5\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm6\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm7\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm8\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm9\n\t"
      "vfmadd231ps %%ymm12, %%ymm13, %%ymm10\n\tvfmadd231ps %%ymm12, %%ymm13, %%ymm11\n\t"
      "dec %0\n\tjnz 1b\n\t"
      "vzeroupper\n\t"
      : "+r"(iters)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "cc");
}

// zmm0..zmm13 zeroed: the chains, and the operands (zeros: no denormal or overflow slows them).
#define SDPA_ZERO_ZMM0_TO_13                                                       \
  "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"                                              \
  "vmovaps %%zmm0, %%zmm1\n\tvmovaps %%zmm0, %%zmm2\n\tvmovaps %%zmm0, %%zmm3\n\t" \
  "vmovaps %%zmm0, %%zmm4\n\tvmovaps %%zmm0, %%zmm5\n\tvmovaps %%zmm0, %%zmm6\n\t" \
  "vmovaps %%zmm0, %%zmm7\n\tvmovaps %%zmm0, %%zmm8\n\tvmovaps %%zmm0, %%zmm9\n\t" \
  "vmovaps %%zmm0, %%zmm10\n\tvmovaps %%zmm0, %%zmm11\n\t"                         \
  "vmovaps %%zmm0, %%zmm12\n\tvmovaps %%zmm0, %%zmm13\n\t"

// The loop both zmm meters run: zmm0..13 zeroed, then `iters` iterations of kChains
// independent `op zmm12, zmm13, zmmN` (N = 0..11), the chains never merged or spilled.
#define SDPA_ZMM_CHAINS(op, iters)                                                                                    \
  asm volatile(SDPA_ZERO_ZMM0_TO_13 "1:\n\t" op " %%zmm12, %%zmm13, %%zmm0\n\t" op " %%zmm12, %%zmm13, %%zmm1\n\t" op \
                                    " %%zmm12, %%zmm13, %%zmm2\n\t" op " %%zmm12, %%zmm13, %%zmm3\n\t" op             \
                                    " %%zmm12, %%zmm13, %%zmm4\n\t" op " %%zmm12, %%zmm13, %%zmm5\n\t" op             \
                                    " %%zmm12, %%zmm13, %%zmm6\n\t" op " %%zmm12, %%zmm13, %%zmm7\n\t" op             \
                                    " %%zmm12, %%zmm13, %%zmm8\n\t" op " %%zmm12, %%zmm13, %%zmm9\n\t" op             \
                                    " %%zmm12, %%zmm13, %%zmm10\n\t" op                                               \
                                    " %%zmm12, %%zmm13, %%zmm11\n\t"                                                  \
                                    "dec %0\n\tjnz 1b\n\t"                                                            \
                                    "vzeroupper\n\t"                                                                  \
               : "+r"(iters)                                                                                          \
               :                                                                                                      \
               : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",    \
                 "xmm12", "xmm13", "cc")

// The same as fma_avx2 on zmm (16 floats) registers.
void fma_avx512(std::int64_t iters) { SDPA_ZMM_CHAINS("vfmadd231ps", iters); }

// kChains independent `vdpbf16ps` chains on zmm registers (AVX512_BF16): each adds, in
// every one of 16 fp32 lanes, the products of two bf16 pairs.
void dot_bf16_avx512(std::int64_t iters) { SDPA_ZMM_CHAINS("vdpbf16ps", iters); }

// The portable build's arithmetic (the scalar path: no -m flags, so SSE2, x86-64's
// baseline, and no FMA): kChains independent chains on xmm (4 floats) registers, half
// multiplies and half adds, which run on separate ports on current x86 cores.
void mul_add_sse(std::int64_t iters) {
  asm volatile(
      "xorps %%xmm0, %%xmm0\n\t"
      "movaps %%xmm0, %%xmm1\n\tmovaps %%xmm0, %%xmm2\n\tmovaps %%xmm0, %%xmm3\n\t"
      "movaps %%xmm0, %%xmm4\n\tmovaps %%xmm0, %%xmm5\n\tmovaps %%xmm0, %%xmm6\n\t"
      "movaps %%xmm0, %%xmm7\n\tmovaps %%xmm0, %%xmm8\n\tmovaps %%xmm0, %%xmm9\n\t"
      "movaps %%xmm0, %%xmm10\n\tmovaps %%xmm0, %%xmm11\n\t"
      "movaps %%xmm0, %%xmm12\n\tmovaps %%xmm0, %%xmm13\n\t"
      "1:\n\t"
      "mulps %%xmm12, %%xmm0\n\taddps %%xmm13, %%xmm1\n\t"
      "mulps %%xmm12, %%xmm2\n\taddps %%xmm13, %%xmm3\n\t"
      "mulps %%xmm12, %%xmm4\n\taddps %%xmm13, %%xmm5\n\t"
      "mulps %%xmm12, %%xmm6\n\taddps %%xmm13, %%xmm7\n\t"
      "mulps %%xmm12, %%xmm8\n\taddps %%xmm13, %%xmm9\n\t"
      "mulps %%xmm12, %%xmm10\n\taddps %%xmm13, %%xmm11\n\t"
      "dec %0\n\tjnz 1b\n\t"
      : "+r"(iters)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "cc");
}

// Sum of n floats at any alignment with four 8-wide accumulators (enough loads in flight
// to be bound by memory, not by the add latency), the tail scalar.
__attribute__((target("avx2"))) float sum_avx2(const float* x, std::int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
  for (; i < n; ++i) s += x[i];
  return s;
}

bool read_meter_runs() { return __builtin_cpu_supports("avx2"); }
float sum_floats(const float* x, std::int64_t n) { return sum_avx2(x, n); }

#else  // not x86-64: the scalar path's meter and the read in plain C++

// kChains independent scalar FMA chains (fmadd on aarch64), on operands read through a
// volatile so the compiler cannot fold the loop; counted as 2 FLOPs each.
void fma_scalar(std::int64_t iters) {
  volatile float m_in = 1.0f, b_in = 0.0f;
  const float m = m_in, b = b_in;
  float acc[kChains] = {};
  for (std::int64_t i = 0; i < iters; ++i)
    for (float& a : acc) a = __builtin_fmaf(a, m, b);
  volatile float keep = acc[0];
  (void)keep;
}

#if defined(__aarch64__)
// The neon path's meter: kChains independent `fmla` chains on 4-float registers v0..v11,
// operands v12 and v13 (zeros: no denormal or overflow slows them).
void fma_neon(std::int64_t iters) {
  asm volatile(
      "movi v0.4s, #0\n\tmovi v1.4s, #0\n\tmovi v2.4s, #0\n\tmovi v3.4s, #0\n\t"
      "movi v4.4s, #0\n\tmovi v5.4s, #0\n\tmovi v6.4s, #0\n\tmovi v7.4s, #0\n\t"
      "movi v8.4s, #0\n\tmovi v9.4s, #0\n\tmovi v10.4s, #0\n\tmovi v11.4s, #0\n\t"
      "movi v12.4s, #0\n\tmovi v13.4s, #0\n\t"
      "1:\n\t"
      "fmla v0.4s, v12.4s, v13.4s\n\tfmla v1.4s, v12.4s, v13.4s\n\tfmla v2.4s, v12.4s, v13.4s\n\t"
      "fmla v3.4s, v12.4s, v13.4s\n\tfmla v4.4s, v12.4s, v13.4s\n\tfmla v5.4s, v12.4s, v13.4s\n\t"
      "fmla v6.4s, v12.4s, v13.4s\n\tfmla v7.4s, v12.4s, v13.4s\n\tfmla v8.4s, v12.4s, v13.4s\n\t"
      "fmla v9.4s, v12.4s, v13.4s\n\tfmla v10.4s, v12.4s, v13.4s\n\tfmla v11.4s, v12.4s, v13.4s\n\t"
      "subs %0, %0, #1\n\tb.ne 1b\n\t"
      : "+r"(iters)
      :
      : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "cc");
}

// The sve path's meter: the same chains on SVE's z0..z11 under an all-true predicate, at the
// CPU's vector length (the assembler is told SVE exists; only a CPU with SVE runs it).
void fma_sve(std::int64_t iters) {
  asm volatile(
      ".arch_extension sve\n\t"
      "ptrue p0.s\n\t"
      "mov z0.s, #0\n\tmov z1.s, #0\n\tmov z2.s, #0\n\tmov z3.s, #0\n\t"
      "mov z4.s, #0\n\tmov z5.s, #0\n\tmov z6.s, #0\n\tmov z7.s, #0\n\t"
      "mov z8.s, #0\n\tmov z9.s, #0\n\tmov z10.s, #0\n\tmov z11.s, #0\n\t"
      "mov z12.s, #0\n\tmov z13.s, #0\n\t"
      "1:\n\t"
      "fmla z0.s, p0/m, z12.s, z13.s\n\tfmla z1.s, p0/m, z12.s, z13.s\n\tfmla z2.s, p0/m, z12.s, z13.s\n\t"
      "fmla z3.s, p0/m, z12.s, z13.s\n\tfmla z4.s, p0/m, z12.s, z13.s\n\tfmla z5.s, p0/m, z12.s, z13.s\n\t"
      "fmla z6.s, p0/m, z12.s, z13.s\n\tfmla z7.s, p0/m, z12.s, z13.s\n\tfmla z8.s, p0/m, z12.s, z13.s\n\t"
      "fmla z9.s, p0/m, z12.s, z13.s\n\tfmla z10.s, p0/m, z12.s, z13.s\n\tfmla z11.s, p0/m, z12.s, z13.s\n\t"
      "subs %0, %0, #1\n\tb.ne 1b\n\t"
      : "+r"(iters)
      :
      : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "p0", "cc");
}
#endif

// Sum of n floats with 32 independent accumulators, which the compiler may keep in vector
// registers (no reassociation is asked of it).
float sum_floats(const float* x, std::int64_t n) {
  float acc[32] = {};
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 32; ++j) acc[j] += x[i + j];
  float s = 0.0f;
  for (float a : acc) s += a;
  for (; i < n; ++i) s += x[i];
  return s;
}

bool read_meter_runs() { return true; }

#endif

}  // namespace

double read_seconds(const Span* spans, int count, int threads) {
  if (!read_meter_runs()) return 0.0;
  threads = std::max(1, threads);
  float total = 0.0f;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    for (int s = 0; s < count; ++s) {
      const std::int64_t lo = spans[s].n * t / nt, hi = spans[s].n * (t + 1) / nt;
      total += sum_floats(spans[s].data + lo, hi - lo);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float keep = total;  // the sums must be computed
  (void)keep;
  return seconds;
}

double read_bandwidth_gbs(int threads, double bytes) {
  if (!read_meter_runs()) return 0.0;
  threads = std::max(1, threads);
  const std::int64_t per = static_cast<std::int64_t>(bytes / sizeof(float)) / threads / 32 * 32;
  const std::size_t n = static_cast<std::size_t>(per * threads);
  float* buf = static_cast<float*>(::operator new (n * sizeof(float), std::align_val_t{64}));
  std::vector<float> sink(static_cast<std::size_t>(threads));
  double best = 0.0;
  for (int pass = 0; pass < 6; ++pass) {
    std::vector<std::thread> pool;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        float* part = buf + static_cast<std::size_t>(i) * static_cast<std::size_t>(per);
        if (pass == 0)  // first touch by the thread that reads it; counts as no pass
          for (std::int64_t j = 0; j < per; ++j) part[j] = 1.0f;
        sink[static_cast<std::size_t>(i)] += sum_floats(part, per);
      });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pass > 0) best = std::max(best, static_cast<double>(n * sizeof(float)) / s / 1e9);
  }
  ::operator delete (buf, std::align_val_t{64});
  volatile float keep = sink[0];  // the sums must be computed
  (void)keep;
  return best;
}

namespace {
// GFLOP/s of `kernel` (flops_per_iter per iteration) on `threads` threads at once, over
// the slowest thread, best of three runs of about `seconds` after a calibration.
double best_gflops(void (*kernel)(std::int64_t), double flops_per_iter, int threads, double seconds) {
  auto timed = [&](std::int64_t iters) {
    std::vector<double> t(static_cast<std::size_t>(threads));
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        const auto t0 = std::chrono::steady_clock::now();
        kernel(iters);
        t[static_cast<std::size_t>(i)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      });
    for (auto& th : pool) th.join();
    return *std::max_element(t.begin(), t.end());
  };
  std::int64_t iters = 1 << 20;
  while (timed(iters) < seconds / 4) iters *= 2;  // calibrate (also warms the units up)
  double best = 0.0;
  for (int rep = 0; rep < 3; ++rep)
    best = std::max(best, flops_per_iter * double(iters) * threads / timed(iters) / 1e9);
  return best;
}
}  // namespace

Result measure(int threads, double seconds, Isa isa) {
  Result r;
  r.threads = std::max(1, threads);
  // The ISA the kernels run (SDPA_ISA or the best this CPU has), so a fraction of this
  // peak compares a kernel with what its own instructions can do.
  // The meter and its FLOPs per iteration: kChains instructions of W floats, an FMA counting 2,
  // a multiply or an add 1.
  struct Meter {
    void (*loop)(std::int64_t);
    double flops_per_iter;
  };
  // The scalar path's meter: x86-64's is SSE (every x86-64 core has it), the others' plain C++.
#if defined(__x86_64__)
  constexpr Meter kScalarMeter{mul_add_sse, kChains * 4 * 1.0};
#else
  constexpr Meter kScalarMeter{fma_scalar, kChains * 2.0};
#endif
  static const PerIsa<Meter> meters{kScalarMeter,
                                    SDPA_X86_ENTRY({fma_avx2, kChains * 8 * 2.0}),
                                    SDPA_X86_ENTRY({fma_avx512, kChains * 16 * 2.0}),
                                    SDPA_ARM_ENTRY({fma_neon, kChains * 4 * 2.0}),
                                    SDPA_ARM_ENTRY({fma_sve, kChains * 8 * 2.0}),
                                    SDPA_ARM_ENTRY({fma_sve, kChains * 16 * 2.0})};
  const Meter& meter = per_isa(meters, isa, "peak");
  r.isa = isa_name(isa == Isa::automatic ? active_isa() : isa);
  r.gflops = best_gflops(meter.loop, meter.flops_per_iter, r.threads, seconds);
  return r;
}

bool bf16_dot_supported() { return cpu_features().avx512_bf16; }

Result measure_bf16_dot(int threads, double seconds) {
  if (!bf16_dot_supported()) throw Error("peak: this CPU has no AVX512_BF16 (vdpbf16ps)");
  Result r;
  r.threads = std::max(1, threads);
  r.isa = "avx512bf16";
  // kChains instructions of 16 lanes, each lane two products and two adds: 4 FLOPs
#if defined(__x86_64__)
  r.gflops = best_gflops(dot_bf16_avx512, kChains * 16 * 4.0, r.threads, seconds);
#else
  (void)seconds;  // not reached: bf16_dot_supported() is false
#endif
  return r;
}

}  // namespace sdpa::peak
