// convert_avx512.cpp — bulk bf16/fp16 conversion with the avx512 helpers of half_avx512.hpp
// (16 lanes, the tail in scalar code), compiled with the ISA's flags (src/CMakeLists.txt).
#include <immintrin.h>

#include "attention/convert.hpp"

namespace sdpa::detail::avx512 {
#include "attention/half_avx512.hpp"

namespace {
constexpr i64 kLanes = 16;

void bf16_to_float(const bf16* src, float* dst, i64 n) {
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(dst + i, load16_bf16(src + i));
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
void fp16_to_float(const fp16* src, float* dst, i64 n) {
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(dst + i, load16_fp16(src + i));
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
void float_to_bf16(const float* src, bf16* dst, i64 n) {
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes) store16_bf16(dst + i, _mm512_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = bf16(src[i]);
}
void float_to_fp16(const float* src, fp16* dst, i64 n) {
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes) store16_fp16(dst + i, _mm512_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = fp16(src[i]);
}
}  // namespace

const ConvertKernels& convert_table() {
  static constexpr ConvertKernels k{bf16_to_float, fp16_to_float, float_to_bf16, float_to_fp16};
  return k;
}
}  // namespace sdpa::detail::avx512

namespace sdpa::detail {
const ConvertKernels& convert_kernels_avx512() { return avx512::convert_table(); }
}  // namespace sdpa::detail
