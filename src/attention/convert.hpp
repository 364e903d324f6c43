// convert.hpp — bulk bf16/fp16 <-> float conversion and the 8-bit KV encoder, one table per
// ISA (like fast.hpp), behind sdpa::to_float / sdpa::from_float and quantize.hpp's
// quantize_row. The per-ISA vector helpers themselves are in half_<isa>.hpp, for the kernel to
// include as it includes simd_<isa>.hpp.
#pragma once

#include "attention/problem.hpp"
#include "sdpa/half.hpp"
#include "sdpa/kvcache.hpp"

#include <cstdint>

namespace sdpa::detail {

struct ConvertKernels {
  void (*bf16_to_float)(const bf16* src, float* dst, i64 n);
  void (*fp16_to_float)(const fp16* src, float* dst, i64 n);
  void (*float_to_bf16)(const float* src, bf16* dst, i64 n);
  void (*float_to_fp16)(const float* src, fp16* dst, i64 n);
  // n contiguous finite floats to codes; returns the scale. The same codes and scale on every ISA
  // (quantize_row_scalar's): an ISA without a vector encoder holds that one.
  float (*quantize_row)(KvQuant q, const float* x, i64 n, std::uint8_t* codes);
};

const ConvertKernels& convert_kernels(Isa isa);  // scalar, avx2 or avx512

/// ConvertKernels::quantize_row of the neon and sve paths (convert_neon.cpp; aarch64 builds).
float quantize_row_neon(KvQuant q, const float* x, i64 n, std::uint8_t* codes);

/// vcvtneps2bf16 (AVX512_BF16): round to nearest even but subnormals in and out flushed to
/// zero. Compiled everywhere; runs only where avx512bf16_supported().
void float_to_bf16_avx512bf16(const float* src, bf16* dst, i64 n);
bool avx512bf16_supported();

}  // namespace sdpa::detail
