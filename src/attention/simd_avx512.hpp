// simd_avx512.hpp — 16 floats per register, AVX-512F/DQ.
// Included inside namespace sdpa::detail::avx512 (see fast_avx512.cpp).
struct Vec {
  using R = __m512;
  static constexpr int W = 16;
  static constexpr int MR = 6;  // 6 rows x 4 vectors = 24 accumulators of 32 registers
  static constexpr int NV = 4;
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float x) { return _mm512_set1_ps(x); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R x) { _mm512_storeu_ps(p, x); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  // One float, fused as the vector form is (vfmadd…ss): a GEMM's column tail (nn/linear_kernel.inl).
  static float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
  static R fnma(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }
  static R max_ignore_nan(R x, R acc) { return _mm512_max_ps(x, acc); }  // second operand on NaN
  static R max_keep_nan(R c, R x) { return _mm512_max_ps(c, x); }
  static R min_keep_nan(R c, R x) { return _mm512_min_ps(c, x); }
  static R zero_where_zero(R p, R x) { return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p, zero(), _CMP_NEQ_UQ), x); }
  static R select_lt(R x, R c, R a, R b) { return _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(x, c, _CMP_LT_OQ), a); }
  static R select_gt(R x, R c, R a, R b) { return _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(x, c, _CMP_GT_OQ), a); }
  static R round_nearest(R x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static R abs(R x) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
  }
  static R copysign(R mag, R sign) {
    const __m512i s = _mm512_and_si512(_mm512_castps_si512(sign), _mm512_set1_epi32(static_cast<int>(0x80000000u)));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(abs(mag)), s));
  }
  static R scale_pow2(R p, R n) { return _mm512_scalef_ps(p, n); }  // exact for any integral n
  static R scale_pow2_nonpositive(R p, R n) { return scale_pow2(p, n); }
  static R exp(R x);                                                // simd_math.inl
  static R exp_nonpositive(R x);                                    // simd_math.inl: x <= 0 or NaN only
  static R tanh(R x);                                               // simd_math.inl
  static float hsum(R x) { return _mm512_reduce_add_ps(x); }
};
// 16 lanes of 32-bit words: dropout's Philox (sdpa/philox.hpp's `Ops`), one block per lane.
struct Words {
  using Word = __m512i;
  using Mask = __mmask16;
  static Word set1(std::uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
  static Word load(const std::uint32_t* p) { return _mm512_loadu_si512(p); }
  static Word bxor(Word a, Word b) { return _mm512_xor_si512(a, b); }
  // m·x as 64-bit products: the low halves by one multiply, the high halves of the even and
  // of the odd lanes by two 32×32→64 multiplies (vpmuludq reads the even lanes only).
  static void mulhilo(std::uint32_t m, Word x, Word& hi, Word& lo) {
    const Word mv = set1(m);
    lo = _mm512_mullo_epi32(x, mv);
    const Word even = _mm512_mul_epu32(x, mv), odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), mv);
    hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  }
  static void halves(Word x, Word& lo, Word& hi) {
    lo = _mm512_and_si512(x, set1(0xFFFFu)), hi = _mm512_srli_epi32(x, 16);
  }
  static Mask at_least(Word x, std::uint32_t t) { return _mm512_cmpge_epu32_mask(x, set1(t)); }
  static __m512 select(Mask keep, __m512 x) { return _mm512_maskz_mov_ps(keep, x); }  // x where kept, else 0
};
#include "attention/simd_math.inl"
