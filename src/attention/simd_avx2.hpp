// simd_avx2.hpp — 8 floats per register, AVX2 + FMA.
// Included inside namespace sdpa::detail::avx2 (see fast_avx2.cpp).
struct Vec {
  using R = __m256;
  static constexpr int W = 8;
  static constexpr int MR = 6;  // 6 rows x 2 vectors = 12 accumulators, + 2 B vectors + 1 broadcast of 16 registers
  static constexpr int NV = 2;
  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float x) { return _mm256_set1_ps(x); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }    // a·b + c
  // One float, fused as the vector form is (vfmadd…ss): a GEMM's column tail (nn/linear_kernel.inl).
  static float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
  static R fnma(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }  // c - a·b
  // maxps/minps return their second operand when either is NaN.
  static R max_ignore_nan(R x, R acc) { return _mm256_max_ps(x, acc); }
  static R max_keep_nan(R c, R x) { return _mm256_max_ps(c, x); }
  static R min_keep_nan(R c, R x) { return _mm256_min_ps(c, x); }
  static R zero_where_zero(R p, R x) { return _mm256_andnot_ps(_mm256_cmp_ps(p, zero(), _CMP_EQ_OQ), x); }
  static R select_lt(R x, R c, R a, R b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, c, _CMP_LT_OQ)); }
  static R select_gt(R x, R c, R a, R b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, c, _CMP_GT_OQ)); }
  static R round_nearest(R x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static R abs(R x) { return _mm256_andnot_ps(set1(-0.0f), x); }
  static R copysign(R mag, R sign) { return _mm256_or_ps(abs(mag), _mm256_and_ps(sign, set1(-0.0f))); }
  // p·2^n for integral n in [-126, 128]: 2^n built in the exponent field, as 2^(n-1)·2
  // when n > 0 so the field never overflows.
  static R scale_pow2(R p, R n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i pos = _mm256_cmpgt_epi32(ni, _mm256_setzero_si256());
    const __m256i e = _mm256_add_epi32(_mm256_add_epi32(ni, pos), _mm256_set1_epi32(127));
    const R res = mul(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
    return _mm256_blendv_ps(res, add(res, res), _mm256_castsi256_ps(pos));
  }
  // The same for n <= 0 (exp_nonpositive's): no overflow to guard.
  static R scale_pow2_nonpositive(R p, R n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return mul(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
  }
  static R exp(R x);              // simd_math.inl
  static R exp_nonpositive(R x);  // simd_math.inl: exp for x <= 0 or NaN only
  static R tanh(R x);  // simd_math.inl
  static float hsum(R x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};
// 8 lanes of 32-bit words: dropout's Philox (sdpa/philox.hpp's `Ops`), one block per lane.
struct Words {
  using Word = __m256i;
  using Mask = __m256;  // all ones where kept
  static Word set1(std::uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
  static Word load(const std::uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static Word bxor(Word a, Word b) { return _mm256_xor_si256(a, b); }
  // m·x as 64-bit products: the low halves by one multiply, the high halves of the even and
  // of the odd lanes by two 32×32→64 multiplies (vpmuludq reads the even lanes only).
  static void mulhilo(std::uint32_t m, Word x, Word& hi, Word& lo) {
    const Word mv = set1(m);
    lo = _mm256_mullo_epi32(x, mv);
    const Word even = _mm256_mul_epu32(x, mv), odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), mv);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  }
  static void halves(Word x, Word& lo, Word& hi) {
    lo = _mm256_and_si256(x, set1(0xFFFFu)), hi = _mm256_srli_epi32(x, 16);
  }
  // x >= t unsigned: max(x, t) == x (AVX2 has no unsigned compare).
  static Mask at_least(Word x, std::uint32_t t) {
    return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_max_epu32(x, set1(t)), x));
  }
  static __m256 select(Mask keep, __m256 x) { return _mm256_and_ps(keep, x); }  // x where kept, else 0
};
#include "attention/simd_math.inl"
