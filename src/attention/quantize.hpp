// quantize.hpp — the 8-bit KV formats (sdpa/kvcache.hpp, KvQuant) one row at a time: what
// quantize_kv and the KV cache's append write, and the values the kernel reads back.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "attention/convert.hpp"
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

/// n finite values x[i·stride] of T (float, bf16 or fp16) into codes[i·code_stride]; returns the
/// row's scale, max|x| / code_max (0 for an all-zero row, whose codes are 0). `row` holds n floats:
/// a row that is not contiguous float is widened into it first (exactly), so every row whose codes
/// are contiguous takes the ISA's vector encoder (`convert`, convert_kernels(isa) of the call,
/// chosen once for all its rows), which writes the scalar encoder's codes.
template <class T>
float quantize_row(KvQuant q, const T* x, i64 n, i64 stride, std::uint8_t* codes, i64 code_stride, float* row,
                   const ConvertKernels& convert);

/// quantize_row's `row`: n floats from a 64-byte boundary. (With the vector's own alignment, 16
/// bytes from malloc, sdpa.quantize_kv of bf16 rows of 64 took 1.0 or 0.7 ns an element from one
/// process to the next: the widened row stored and read across cache lines or not; Zen 4.)
class RowBuffer {
 public:
  explicit RowBuffer(i64 n) : storage_(static_cast<std::size_t>(n) + 16) {}
  float* data() {
    const auto at = reinterpret_cast<std::uintptr_t>(storage_.data());
    return reinterpret_cast<float*>((at + 63) & ~std::uintptr_t{63});
  }

 private:
  std::vector<float> storage_;
};

/// max(absmax, |x[i]|, …, |x[n-1]|): the scalar part of a row's max (exact in any order).
inline float max_abs(const float* x, i64 i, i64 n, float absmax) {
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    absmax = a > absmax ? a : absmax;
  }
  return absmax;
}

/// The scalar encoder of a row whose scale is known: codes[i·code_stride] = the code of
/// x[i] / scale (in double), clamped to ±code_max, rounded as encode() does. The vector
/// encoders' tails and their reference.
void encode_row(KvQuant q, const float* x, i64 n, float scale, std::uint8_t* codes, i64 code_stride);

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
  const float absmax = vector_max(i);
  const float scale = max_abs(x, i, n, absmax) / code_max(q);
  i64 done = 0;
  if (scale != 0.0f)
    done = q == KvQuant::int8 ? vector_codes(std::integral_constant<KvQuant, KvQuant::int8>{}, scale)
                              : vector_codes(std::integral_constant<KvQuant, KvQuant::fp8_e4m3>{}, scale);
  encode_row(q, x + done, n - done, scale, codes + done, 1);
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
