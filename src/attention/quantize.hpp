// quantize.hpp — the 8-bit KV formats (sdpa/kvcache.hpp, KvQuant) one row at a time: what
// quantize_kv and the KV cache's append write, and the values the kernel reads back.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "attention/problem.hpp"
#include "sdpa/kvcache.hpp"

namespace sdpa::detail {

/// The largest code magnitude: 127 (int8) or 448 (e4m3).
float code_max(KvQuant q);

/// The code of v (|v| <= code_max, finite), rounded to nearest, ties to even.
std::uint8_t encode(KvQuant q, double v);

/// A code's value (before its scale): exact.
inline float code_value(KvQuant q, std::uint8_t c) {
  return q == KvQuant::int8 ? static_cast<float>(static_cast<std::int8_t>(c)) : e4m3_value(c);
}

/// n finite floats x[i·stride] into codes[i·code_stride]; returns the row's scale, max|x| /
/// code_max (0 for an all-zero row, whose codes are 0). A contiguous row takes the ISA's vector
/// encoder (convert.hpp's ConvertKernels::quantize_row), which writes the same codes.
float quantize_row(KvQuant q, const float* x, i64 n, i64 stride, std::uint8_t* codes, i64 code_stride,
                   Isa isa = Isa::automatic);

/// The scalar encoder of a row whose scale is known: codes[i·code_stride] = the code of
/// x[i·stride] / scale (in double), clamped to ±code_max, rounded as encode() does. The vector
/// encoders' tails and their reference.
void encode_row(KvQuant q, const float* x, i64 n, i64 stride, float scale, std::uint8_t* codes, i64 code_stride);

/// quantize_row for a contiguous row, scalar: ConvertKernels::quantize_row where no vector one is.
float quantize_row_scalar(KvQuant q, const float* x, i64 n, std::uint8_t* codes);

/// An ISA's ConvertKernels::quantize_row from its vector pieces, with quantize_row_scalar's codes
/// and scale: vector_max(i) returns the max of |x| over a prefix whose length it writes to i (the
/// max is exact in any order), vector_codes(format, scale) encodes a prefix (format: a
/// std::integral_constant of the KvQuant) and returns its length; the rest as the scalar does.
template <class VectorMax, class VectorCodes>
float quantize_row_with(KvQuant q, const float* x, i64 n, std::uint8_t* codes, VectorMax vector_max,
                        VectorCodes vector_codes) {
  i64 i = 0;
  float absmax = vector_max(i);
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    absmax = a > absmax ? a : absmax;
  }
  const float scale = absmax / code_max(q);
  i64 done = 0;
  if (scale != 0.0f)
    done = q == KvQuant::int8 ? vector_codes(std::integral_constant<KvQuant, KvQuant::int8>{}, scale)
                              : vector_codes(std::integral_constant<KvQuant, KvQuant::fp8_e4m3>{}, scale);
  encode_row(q, x + done, n - done, 1, scale, codes + done, 1);
  return scale;
}

/// Refuses x ([A, R, H, D]) unless every value is finite, before anything is written: the error
/// names `name`'s first non-finite element, [a, r, h, d], and says that `holder` ("int8", "an
/// int8 cache") has no code for it. For float, bf16 and fp16.
template <class T>
void require_finite(const View4<const T>& x, const char* name, const std::string& holder);

/// KvCodes' kind for a format.
inline KvCodes::Kind codes_kind(KvQuant q) {
  return q == KvQuant::int8 ? KvCodes::Kind::int8 : KvCodes::Kind::fp8_e4m3;
}

}  // namespace sdpa::detail
