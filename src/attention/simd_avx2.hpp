// simd_avx2.hpp — 8 floats per register, AVX2 + FMA.
// Included inside namespace sdpa::detail::avx2 (see fast_avx2.cpp).
struct Vec {
  using R = __m256;
  static constexpr int W = 8;
  static constexpr int MR = 4;  // 4 rows x 2 vectors = 8 accumulators of 16 registers
  static constexpr int NV = 2;
  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float x) { return _mm256_set1_ps(x); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R x) { _mm256_storeu_ps(p, x); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  // maxps returns its second operand when either is NaN: a NaN in x leaves acc alone.
  static R max_ignore_nan(R x, R acc) { return _mm256_max_ps(x, acc); }
  static R zero_where_zero(R p, R x) { return _mm256_andnot_ps(_mm256_cmp_ps(p, zero(), _CMP_EQ_OQ), x); }

  // e^x. x = n ln2 + r with |r| <= ln2/2; e^r by its Taylor series to degree 7
  // (truncation < 2e-9 relative); 2^n assembled in the exponent field, split as
  // 2^(n-1)·2 for n > 0 so the field never overflows. x < ln(FLT_MIN) (and -inf)
  // gives 0, x > ln(FLT_MAX) gives +inf, NaN stays NaN.
  static R exp(R x) {
    const R lo = set1(-87.3365447f), hi = set1(88.7228391f);
    R xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));  // NaN is the second operand: kept
    const R n = _mm256_round_ps(mul(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm256_fnmadd_ps(n, set1(0.693359375f), xc);  // ln2 in two parts: exact high, small low
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    R p = set1(1.0f / 5040.0f);
    p = fma(p, r, set1(1.0f / 720.0f));
    p = fma(p, r, set1(1.0f / 120.0f));
    p = fma(p, r, set1(1.0f / 24.0f));
    p = fma(p, r, set1(1.0f / 6.0f));
    p = fma(p, r, set1(0.5f));
    p = fma(p, r, set1(1.0f));
    p = fma(p, r, set1(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i pos = _mm256_cmpgt_epi32(ni, _mm256_setzero_si256());
    const __m256i e = _mm256_add_epi32(_mm256_add_epi32(ni, pos), _mm256_set1_epi32(127));
    R res = mul(p, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
    res = _mm256_blendv_ps(res, add(res, res), _mm256_castsi256_ps(pos));
    res = _mm256_blendv_ps(res, zero(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    res = _mm256_blendv_ps(res, set1(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    return res;
  }

  // tanh x = sign(x)·t(|x|). For |x| < 0.625, t = m/(m+2) with m = e^{2|x|} - 1 by
  // its Taylor series to degree 11 (no cancellation near 0); above, t = 1 - 2/(e^{2|x|}+1).
  static R tanh(R x) {
    const R sign = _mm256_and_ps(x, set1(-0.0f));
    const R ax = _mm256_andnot_ps(set1(-0.0f), x);
    const R y = add(ax, ax);
    R u = set1(1.0f);
    for (int k = 11; k >= 2; --k) u = fma(mul(y, set1(1.0f / static_cast<float>(k))), u, set1(1.0f));
    const R m = mul(y, u);
    const R small = _mm256_div_ps(m, add(m, set1(2.0f)));
    const R large = sub(set1(1.0f), _mm256_div_ps(set1(2.0f), add(exp(y), set1(1.0f))));
    const R t = _mm256_blendv_ps(large, small, _mm256_cmp_ps(ax, set1(0.625f), _CMP_LT_OQ));
    return _mm256_or_ps(t, sign);
  }

  static float hmax(R x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static float hsum(R x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};
