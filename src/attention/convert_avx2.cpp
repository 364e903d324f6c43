// convert_avx2.cpp — bulk bf16/fp16 conversion with the avx2 helpers of half_avx2.hpp
// (8 lanes, the tail in scalar code), compiled with the ISA's flags (src/CMakeLists.txt).
#include <immintrin.h>

#include "attention/convert.hpp"

namespace sdpa::detail::avx2 {
#include "attention/half_avx2.hpp"

namespace {
constexpr i64 kLanes = 8;

void bf16_to_float(const bf16* src, float* dst, i64 n) {
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm256_storeu_ps(dst + i, load8_bf16(src + i));
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
void fp16_to_float(const fp16* src, float* dst, i64 n) {
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm256_storeu_ps(dst + i, load8_fp16(src + i));
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
void float_to_bf16(const float* src, bf16* dst, i64 n) {
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes) store8_bf16(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = bf16(src[i]);
}
void float_to_fp16(const float* src, fp16* dst, i64 n) {
  i64 i = 0;
  for (; i + kLanes <= n; i += kLanes) store8_fp16(dst + i, _mm256_loadu_ps(src + i));
  for (; i < n; ++i) dst[i] = fp16(src[i]);
}
}  // namespace

const ConvertKernels& convert_table() {
  static constexpr ConvertKernels k{bf16_to_float, fp16_to_float, float_to_bf16, float_to_fp16};
  return k;
}
}  // namespace sdpa::detail::avx2

namespace sdpa::detail {
const ConvertKernels& convert_kernels_avx2() { return avx2::convert_table(); }
}  // namespace sdpa::detail
