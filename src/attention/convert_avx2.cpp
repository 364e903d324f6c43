// convert_avx2.cpp — bulk bf16/fp16 conversion for the avx2 path: convert_kernel.inl on the
// 8-lane helpers of half_avx2.hpp, compiled with the ISA's flags (src/CMakeLists.txt).
#include <immintrin.h>

#include "attention/convert.hpp"

namespace sdpa::detail::avx2 {
#include "attention/half_avx2.hpp"

struct HalfVec {
  static constexpr i64 kLanes = 8;
  static void widen(const bf16* src, float* dst) { _mm256_storeu_ps(dst, load8_bf16(src)); }
  static void widen(const fp16* src, float* dst) { _mm256_storeu_ps(dst, load8_fp16(src)); }
  static void narrow(const float* src, bf16* dst) { store8_bf16(dst, _mm256_loadu_ps(src)); }
  static void narrow(const float* src, fp16* dst) { store8_fp16(dst, _mm256_loadu_ps(src)); }
};

#include "attention/convert_kernel.inl"
}  // namespace sdpa::detail::avx2

namespace sdpa::detail {
const ConvertKernels& convert_kernels_avx2() { return avx2::convert_table(); }
}  // namespace sdpa::detail
