// simd_avx512.hpp — 16 floats per register, AVX-512F/DQ.
// Included inside namespace sdpa::detail::avx512 (see fast_avx512.cpp).
struct Vec {
  using R = __m512;
  static constexpr int W = 16;
  static constexpr int MR = 4;  // 4 rows x 4 vectors = 16 accumulators of 32 registers
  static constexpr int NV = 4;
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float x) { return _mm512_set1_ps(x); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R x) { _mm512_storeu_ps(p, x); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R max_ignore_nan(R x, R acc) { return _mm512_max_ps(x, acc); }  // second operand on NaN
  static R zero_where_zero(R p, R x) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(p, zero(), _CMP_NEQ_UQ), x);
  }

  // e^x: same reduction as the AVX2 path (see simd_avx2.hpp); scalef applies 2^n
  // without exponent-field arithmetic.
  static R exp(R x) {
    const R lo = set1(-87.3365447f), hi = set1(88.7228391f);
    R xc = _mm512_min_ps(hi, _mm512_max_ps(lo, x));
    const R n = _mm512_roundscale_ps(mul(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm512_fnmadd_ps(n, set1(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    R p = set1(1.0f / 5040.0f);
    p = fma(p, r, set1(1.0f / 720.0f));
    p = fma(p, r, set1(1.0f / 120.0f));
    p = fma(p, r, set1(1.0f / 24.0f));
    p = fma(p, r, set1(1.0f / 6.0f));
    p = fma(p, r, set1(0.5f));
    p = fma(p, r, set1(1.0f));
    p = fma(p, r, set1(1.0f));
    R res = _mm512_scalef_ps(p, n);
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), zero());
    res = _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), set1(__builtin_inff()));
    return res;
  }

  static R tanh(R x) {
    const __m512i sign_bits = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    const __m512i xi = _mm512_castps_si512(x);
    const R ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bits, xi));
    const R y = add(ax, ax);
    R u = set1(1.0f);
    for (int k = 11; k >= 2; --k) u = fma(mul(y, set1(1.0f / static_cast<float>(k))), u, set1(1.0f));
    const R m = mul(y, u);
    const R small = _mm512_div_ps(m, add(m, set1(2.0f)));
    const R large = sub(set1(1.0f), _mm512_div_ps(set1(2.0f), add(exp(y), set1(1.0f))));
    const R t = _mm512_mask_mov_ps(large, _mm512_cmp_ps_mask(ax, set1(0.625f), _CMP_LT_OQ), small);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), _mm512_and_si512(xi, sign_bits)));
  }

  static float hmax(R x) { return _mm512_reduce_max_ps(x); }
  static float hsum(R x) { return _mm512_reduce_add_ps(x); }
};
