// convert_avx512.cpp — bulk bf16/fp16 conversion for the avx512 path: convert_kernel.inl on
// the 16-lane helpers of half_avx512.hpp, compiled with the ISA's flags (src/CMakeLists.txt).
#include <immintrin.h>

#include "attention/convert.hpp"

namespace sdpa::detail::avx512 {
#include "attention/half_avx512.hpp"

struct HalfVec {
  static constexpr i64 kLanes = 16;
  static void widen(const bf16* src, float* dst) { _mm512_storeu_ps(dst, load16_bf16(src)); }
  static void widen(const fp16* src, float* dst) { _mm512_storeu_ps(dst, load16_fp16(src)); }
  static void narrow(const float* src, bf16* dst) { store16_bf16(dst, _mm512_loadu_ps(src)); }
  static void narrow(const float* src, fp16* dst) { store16_fp16(dst, _mm512_loadu_ps(src)); }
};

#include "attention/convert_kernel.inl"
}  // namespace sdpa::detail::avx512

namespace sdpa::detail {
const ConvertKernels& convert_kernels_avx512() { return avx512::convert_table(); }
}  // namespace sdpa::detail
