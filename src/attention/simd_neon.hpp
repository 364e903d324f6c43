// simd_neon.hpp — 4 floats per register, aarch64's AdvSIMD (NEON), 32 vector registers.
// Included inside namespace sdpa::detail::neon (see fast_neon.cpp) after <arm_neon.h>.
// AdvSIMD is part of every ARMv8-A application core, so the file needs no -m flags; the
// comparisons keep the x86 paths' NaN rules (maxps returns its second operand when either is
// NaN), which NEON's fmax (NaN if either) and fmaxnm (the number) do not, so they are written
// as a compare and a select.
struct Vec {
  using R = float32x4_t;
  static constexpr int W = 4;
  // The tiled kernel's GEMM block: 5 rows × 4 vectors = 20 accumulators, + 4 B vectors + 5 A
  // elements of 32 registers. GCC loads a row's A element as one float (ldr s) and multiplies
  // by its lane (fmla v.4s, v.4s, v.s[0]), and it loads all of them ahead of the FMAs, so
  // 6 × 4 (24 + 4 + 6 = 34) spilled two accumulators per k; 5 × 4 issues 20 FMAs against 7
  // loads (two ldp of B, five of A) and spills none (docs/performance.md, "The Arm micro-kernels").
  static constexpr int MR = 5;
  static constexpr int NV = 4;
  static R zero() { return vdupq_n_f32(0.0f); }
  static R set1(float x) { return vdupq_n_f32(x); }
  static R load(const float* p) { return vld1q_f32(p); }
  static void store(float* p, R x) { vst1q_f32(p, x); }
  static R add(R a, R b) { return vaddq_f32(a, b); }
  static R sub(R a, R b) { return vsubq_f32(a, b); }
  static R mul(R a, R b) { return vmulq_f32(a, b); }
  static R div(R a, R b) { return vdivq_f32(a, b); }
  static R fma(R a, R b, R c) { return vfmaq_f32(c, a, b); }  // a·b + c, one rounding (fmla)
  // One float, fused as the vector form is (fmadd): a GEMM's column tail (nn/linear_kernel.inl).
  static float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
  static R fnma(R a, R b, R c) { return vfmsq_f32(c, a, b); }  // c - a·b (fmls)
  static R max_ignore_nan(R x, R acc) { return vbslq_f32(vcgtq_f32(x, acc), x, acc); }
  static R max_keep_nan(R c, R x) { return vbslq_f32(vcgtq_f32(c, x), c, x); }
  static R min_keep_nan(R c, R x) { return vbslq_f32(vcltq_f32(c, x), c, x); }
  static R zero_where_zero(R p, R x) {
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(x), vceqq_f32(p, zero())));
  }
  static R select_lt(R x, R c, R a, R b) { return vbslq_f32(vcltq_f32(x, c), a, b); }
  static R select_gt(R x, R c, R a, R b) { return vbslq_f32(vcgtq_f32(x, c), a, b); }
  static R round_nearest(R x) { return vrndnq_f32(x); }  // ties to even, as x86's rounding mode 0
  static R abs(R x) { return vabsq_f32(x); }
  static R copysign(R mag, R sign) { return vbslq_f32(vdupq_n_u32(0x80000000u), sign, mag); }
  // p·2^n for integral n in [-126, 128]: 2^n built in the exponent field, as 2^(n-1)·2
  // when n > 0 so the field never overflows (simd_avx2.hpp's construction).
  static R scale_pow2(R p, R n) {
    const int32x4_t ni = vcvtnq_s32_f32(n);
    const uint32x4_t pos = vcgtq_s32(ni, vdupq_n_s32(0));
    const int32x4_t e = vaddq_s32(vaddq_s32(ni, vreinterpretq_s32_u32(pos)), vdupq_n_s32(127));
    const R res = mul(p, vreinterpretq_f32_s32(vshlq_n_s32(e, 23)));
    return vbslq_f32(pos, add(res, res), res);
  }
  // The same for n <= 0 (exp_nonpositive's): no overflow to guard.
  static R scale_pow2_nonpositive(R p, R n) {
    const int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
    return mul(p, vreinterpretq_f32_s32(vshlq_n_s32(e, 23)));
  }
  static R exp(R x);              // simd_math.inl
  static R exp_nonpositive(R x);  // simd_math.inl: exp for x <= 0 or NaN only
  static R tanh(R x);             // simd_math.inl
  static float hsum(R x) { return vaddvq_f32(x); }
};
// 4 lanes of 32-bit words: dropout's Philox (sdpa/philox.hpp's `Ops`), one block per lane.
struct Words {
  using Word = uint32x4_t;
  using Mask = uint32x4_t;  // all ones where kept
  static Word set1(std::uint32_t x) { return vdupq_n_u32(x); }
  static Word load(const std::uint32_t* p) { return vld1q_u32(p); }
  static Word bxor(Word a, Word b) { return veorq_u32(a, b); }
  // m·x as 64-bit products, two lanes per umull; the high words are the odd 32-bit halves.
  static void mulhilo(std::uint32_t m, Word x, Word& hi, Word& lo) {
    lo = vmulq_n_u32(x, m);
    const uint64x2_t p01 = vmull_n_u32(vget_low_u32(x), m), p23 = vmull_high_n_u32(x, m);
    hi = vuzp2q_u32(vreinterpretq_u32_u64(p01), vreinterpretq_u32_u64(p23));
  }
  static void halves(Word x, Word& lo, Word& hi) { lo = vandq_u32(x, vdupq_n_u32(0xFFFFu)), hi = vshrq_n_u32(x, 16); }
  static Mask at_least(Word x, std::uint32_t t) { return vcgeq_u32(x, set1(t)); }
  static float32x4_t select(Mask keep, float32x4_t x) {  // x where kept, else 0
    return vreinterpretq_f32_u32(vandq_u32(keep, vreinterpretq_u32_f32(x)));
  }
};
#include "attention/simd_math.inl"
