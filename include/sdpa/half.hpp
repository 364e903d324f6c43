// sdpa/half.hpp — the library's 16-bit floats: bf16 and fp16, stored as their bits.
//
//   bf16  1 sign, 8 exponent (bias 127), 7 fraction bits: fp32's range, 8 significant bits
//   fp16  1 sign, 5 exponent (bias 15), 10 fraction bits (IEEE 754 binary16): max 65504,
//         subnormals down to 2^-24, 11 significant bits
//
// Conversions from float round to nearest, ties to even, exactly as IEEE 754 says:
// overflow goes to ±inf, results below the smallest normal become subnormals (fp16) or
// keep fp32's subnormals (bf16), NaN stays NaN (quiet, sign and top payload bits kept).
// Conversions to float are exact (a bf16 NaN keeps its bits; an fp16 NaN is made quiet). The same rounding is what the hardware does (F16C's
// vcvtps2ph with round-to-nearest, AVX512_BF16's vcvtneps2bf16 except that it flushes
// subnormals); tests/kernel/test_half.cpp checks every bit pattern.
//
// A View<const bf16, 4> is how a 16-bit tensor reaches the library; the arithmetic is
// always fp32 (convert on load, round on store).
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace sdpa {

/// Which element type a tensor holds.
enum class Dtype { f32, bf16, fp16 };

/// bfloat16: the top half of a float32.
struct bf16 {
  std::uint16_t bits;  // no initialiser: trivial, so arrays of it are plain memory

  static constexpr int kSignificandBits = 8;  // with the implicit bit; unit roundoff 2^-8
  bf16() = default;
  explicit constexpr bf16(float x) : bits(from_float(x)) {}
  explicit constexpr operator float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
  static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }

  // Round to nearest even: add 0x7FFF plus the lowest kept bit, then truncate. A carry out of
  // the fraction increments the exponent, which is right (up to +inf for the largest values).
  static constexpr std::uint16_t from_float(float x) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
    return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
};

/// IEEE 754 binary16.
struct fp16 {
  std::uint16_t bits;  // no initialiser: trivial, so arrays of it are plain memory

  static constexpr int kSignificandBits = 11;  // unit roundoff 2^-11
  fp16() = default;
  explicit constexpr fp16(float x) : bits(from_float(x)) {}
  explicit constexpr operator float() const { return to_float(bits); }
  static constexpr fp16 from_bits(std::uint16_t b) {
    fp16 h;
    h.bits = b;
    return h;
  }

  static constexpr float to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1Fu, frac = h & 0x3FFu;
    if (exp == 0x1F)  // inf, or NaN made quiet (bit 9 of the fraction is fp16's quiet bit)
      return std::bit_cast<float>(sign | 0x7F800000u | (frac ? (frac | 0x200u) << 13 : 0u));
    if (exp == 0) {  // zero or subnormal: frac · 2^-24, exact in float
      const float mag = static_cast<float>(frac) * (1.0f / 16777216.0f);
      return sign ? -mag : mag;
    }
    return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (frac << 13));  // rebias 15 -> 127
  }

  static constexpr std::uint16_t from_float(float x) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // quiet NaN
    if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520: rounds to inf
    if (a < 0x38800000u) {  // below 2^-14, fp16's smallest normal: a subnormal result, in units of 2^-24
      if (a <= 0x33000000u) return sign;  // <= 2^-25, half the smallest subnormal: ties go to 0 (even)
      const std::uint32_t e = a >> 23, m = (a & 0x7FFFFFu) | 0x800000u;  // value = m · 2^(e - 150)
      const std::uint32_t shift = 126u - e;                              // 14..24 for these inputs
      const std::uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
      std::uint32_t r = m >> shift;
      if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into the smallest normal: right
      return static_cast<std::uint16_t>(sign | r);
    }
    const std::uint32_t rebias = a - (112u << 23);  // exponent 127 -> 15
    return static_cast<std::uint16_t>(sign | ((rebias + 0xFFFu + ((rebias >> 13) & 1u)) >> 13));
  }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "16-bit floats are their bits");
static_assert(std::is_trivial_v<bf16> && std::is_trivial_v<fp16>);

/// The dtype of an element type.
template <class T>
constexpr Dtype dtype_of();
template <>
constexpr Dtype dtype_of<float>() {
  return Dtype::f32;
}
template <>
constexpr Dtype dtype_of<bf16>() {
  return Dtype::bf16;
}
template <>
constexpr Dtype dtype_of<fp16>() {
  return Dtype::fp16;
}

/// "float32", "bfloat16", "float16" (NumPy's and torch's names).
const char* dtype_name(Dtype t);

/// x rounded to the nearest value of dtype t (round to nearest even), as a float.
float round_to(Dtype t, float x);

/// Unit roundoff of dtype t: 2^-24, 2^-8, 2^-11.
double unit_roundoff(Dtype t);

/// Widen n 16-bit values to float, vectorised for the active ISA (F16C on AVX2).
void to_float(const bf16* src, float* dst, std::int64_t n);
void to_float(const fp16* src, float* dst, std::int64_t n);
/// Round n floats to a 16-bit type (nearest even), vectorised for the active ISA.
void from_float(const float* src, bf16* dst, std::int64_t n);
void from_float(const float* src, fp16* dst, std::int64_t n);

}  // namespace sdpa
