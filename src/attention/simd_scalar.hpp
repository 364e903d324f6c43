// simd_scalar.hpp — the portable path: a "vector" of one float.
// Included inside namespace sdpa::detail::scalar (see fast_scalar.cpp).
struct Vec {
  using R = float;
  static constexpr int W = 1;   // floats per register
  static constexpr int MR = 4;  // gemm register block: rows
  static constexpr int NV = 4;  // gemm register block: vectors per row
  static R zero() { return 0.0f; }
  static R set1(float x) { return x; }
  static R load(const float* p) { return *p; }
  static void store(float* p, R x) { *p = x; }
  static R add(R a, R b) { return a + b; }
  static R sub(R a, R b) { return a - b; }
  static R mul(R a, R b) { return a * b; }
  // a·b + c as a multiply and an add (two roundings). This file gets no -mfma (it is the
  // path for CPUs without it), so __builtin_fmaf compiled to a call to libm's fmaf per
  // term, and the call clobbers every xmm register, so the GEMM's register block went
  // through the stack around each one: 12-13x slower (docs/performance.md). IEEE multiply
  // and add give the same bits on every x86-64 CPU and thread count, as fmaf did, and on
  // aarch64, whose build keeps GCC from fusing them (-ffp-contract=off, ../../CMakeLists.txt).
  static R fma(R a, R b, R c) { return a * b + c; }
  static R max_ignore_nan(R x, R acc) { return x > acc ? x : acc; }
  static R zero_where_zero(R p, R x) { return p == 0.0f ? 0.0f : x; }
  static R select_gt(R x, R c, R a, R b) { return x > c ? a : b; }
  static R exp(R x) { return __builtin_expf(x); }
  static R exp_nonpositive(R x) { return __builtin_expf(x); }
  static R tanh(R x) { return __builtin_tanhf(x); }
  static float hsum(R x) { return x; }
};
// One 32-bit word: dropout's Philox (sdpa/philox.hpp's `Ops`), one block.
struct Words {
  using Word = std::uint32_t;
  using Mask = bool;
  static Word set1(std::uint32_t x) { return x; }
  static Word load(const std::uint32_t* p) { return *p; }
  static Word bxor(Word a, Word b) { return a ^ b; }
  static void mulhilo(std::uint32_t m, Word x, Word& hi, Word& lo) {
    const std::uint64_t prod = static_cast<std::uint64_t>(m) * x;
    hi = static_cast<Word>(prod >> 32), lo = static_cast<Word>(prod);
  }
  static void halves(Word x, Word& lo, Word& hi) { lo = x & 0xFFFFu, hi = x >> 16; }
  static Mask at_least(Word x, std::uint32_t t) { return x >= t; }
  static float select(Mask keep, float x) { return keep ? x : 0.0f; }
};
