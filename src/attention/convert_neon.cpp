// convert_neon.cpp — bulk bf16/fp16 conversion for the neon path: convert_kernel.inl on the
// 4-lane helpers of half_neon.hpp (aarch64 builds).
#include <arm_neon.h>

#include <cstdint>

#include "attention/convert.hpp"
#include "attention/quantize.hpp"

namespace sdpa::detail::neon {
#include "attention/half_neon.hpp"

struct HalfVec {
  static constexpr i64 kLanes = 4;
  static void widen(const bf16* src, float* dst) { vst1q_f32(dst, load4_bf16(src)); }
  static void widen(const fp16* src, float* dst) { vst1q_f32(dst, load4_fp16(src)); }
  static void narrow(const float* src, bf16* dst) { store4_bf16(dst, vld1q_f32(src)); }
  static void narrow(const float* src, fp16* dst) { store4_fp16(dst, vld1q_f32(src)); }
  static constexpr auto quantize_row = &quantize_row_scalar;  // no vector 8-bit encoder on Arm yet
};

#include "attention/convert_kernel.inl"
}  // namespace sdpa::detail::neon

namespace sdpa::detail {
const ConvertKernels& convert_kernels_neon() { return neon::convert_table(); }
}  // namespace sdpa::detail
