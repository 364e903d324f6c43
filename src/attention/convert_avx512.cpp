// convert_avx512.cpp — bulk bf16/fp16 conversion for the avx512 path: convert_kernel.inl on
// the 16-lane helpers of half_avx512.hpp, and the 8-bit KV encoder, compiled with the ISA's
// flags (src/CMakeLists.txt).
#include <cstdint>

#include "attention/convert.hpp"
#include "attention/quantize.hpp"
#include "common/avx512_intrinsics.hpp"

namespace sdpa::detail::avx512 {
#include "attention/half_avx512.hpp"

namespace {

constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// Eight codes of x[0..8) / scale as int32, the scalar encode_row's arithmetic in double lanes:
// the quotient in double (its rounding never moves a value across a tie: x and scale have 24-bit
// significands, so a quotient off a tie is off it by far more than a double's ulp), clamped, then
// int8's nearest integer, or e4m3's: |v| · 2^(3−E) rounded to an integer q in [8, 16] (E =
// max(floor(log2 |v|), −6): the subnormals' steps of 2^-9 at E = −6), whose code is (E + 6) · 8 + q
// (q = 16 carries into the exponent by itself), signed where not 0.
template <KvQuant Q>
__m256i codes8(const float* x, __m512d scale, __m512d top) {
  __m512d v = _mm512_div_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x)), scale);
  v = _mm512_min_pd(_mm512_max_pd(v, _mm512_sub_pd(_mm512_setzero_pd(), top)), top);
  if constexpr (Q == KvQuant::int8) {
    return _mm512_cvt_roundpd_epi32(v, kNearest);
  } else {
    const __m512d a = _mm512_abs_pd(v);
    const __m512d e = _mm512_max_pd(_mm512_getexp_pd(a), _mm512_set1_pd(-6.0));  // getexp(0) = −inf
    const __m256i q = _mm512_cvt_roundpd_epi32(_mm512_scalef_pd(a, _mm512_sub_pd(_mm512_set1_pd(3.0), e)), kNearest);
    const __m256i exponent = _mm512_cvt_roundpd_epi32(e, kNearest);
    const __m256i code = _mm256_add_epi32(_mm256_slli_epi32(_mm256_add_epi32(exponent, _mm256_set1_epi32(6)), 3), q);
    const __mmask8 negative = _mm512_cmp_pd_mask(v, _mm512_setzero_pd(), _CMP_LT_OQ);
    return _mm256_mask_or_epi32(code, negative & _mm256_test_epi32_mask(code, code), code, _mm256_set1_epi32(0x80));
  }
}

template <KvQuant Q>
i64 encode16s(const float* x, i64 n, float scale, std::uint8_t* codes) {
  const __m512d s = _mm512_set1_pd(scale), top = _mm512_set1_pd(code_max(Q));
  i64 i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i both =
        _mm512_inserti64x4(_mm512_castsi256_si512(codes8<Q>(x + i, s, top)), codes8<Q>(x + i + 8, s, top), 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi32_epi8(both));  // low bytes: the codes
  }
  return i;
}

float quantize_row16(KvQuant q, const float* x, i64 n, std::uint8_t* codes) {
  const auto vector_max = [&](i64& i) {
    __m512 most = _mm512_setzero_ps();
    for (i = 0; i + 16 <= n; i += 16) most = _mm512_max_ps(most, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    return _mm512_reduce_max_ps(most);
  };
  return quantize_row_with(q, x, n, codes, vector_max, [&](auto format, float scale) {
    return encode16s<decltype(format)::value>(x, n, scale, codes);
  });
}

}  // namespace

struct HalfVec {
  static constexpr i64 kLanes = 16;
  static void widen(const bf16* src, float* dst) { _mm512_storeu_ps(dst, load16_bf16(src)); }
  static void widen(const fp16* src, float* dst) { _mm512_storeu_ps(dst, load16_fp16(src)); }
  static void narrow(const float* src, bf16* dst) { store16_bf16(dst, _mm512_loadu_ps(src)); }
  static void narrow(const float* src, fp16* dst) { store16_fp16(dst, _mm512_loadu_ps(src)); }
  static constexpr auto quantize_row = &quantize_row16;
};

#include "attention/convert_kernel.inl"
}  // namespace sdpa::detail::avx512

namespace sdpa::detail {
const ConvertKernels& convert_kernels_avx512() { return avx512::convert_table(); }
}  // namespace sdpa::detail
