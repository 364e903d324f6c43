// quantize.cpp — the 8-bit KV formats: int8 (symmetric) and fp8 e4m3 ("e4m3fn": no infinities,
// 0x7F and 0xFF NaN, never written), one fp32 scale per row; quantize_kv and dequantize_kv.
#include "attention/quantize.hpp"

#include "attention/convert.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

namespace sdpa {
namespace detail {

float code_max(KvQuant q) { return q == KvQuant::int8 ? 127.0f : 448.0f; }

namespace {

// v rounded to the nearest integer, ties to even, for |v| < 2^51 (the encoders round at most 512):
// adding 1.5 · 2^52 leaves the sum no fraction bits, so the adder rounds it in the default
// rounding mode, as std::nearbyint would. Here without a libm call: baseline x86-64 has no
// roundsd, and with nearbyint, frexp, ldexp, fmin and fmax called per element, quantizing a
// 4096-token chunk's K and V (4 heads of 64) took 9.2 ns an int8 element and 16.8 an e4m3 one;
// without them 3.1 and 7.3 (Zen 4, `sdpa.quantize_kv`; the same codes for every double up to 512).
inline double round_even(double v) {
  constexpr double kShift = 0x1.8p52;
  return (v + kShift) - kShift;
}

inline std::uint8_t encode_e4m3(double v) {
  const std::uint8_t sign = v < 0 ? 0x80 : 0;
  const double a = std::fabs(v);
  if (a == 0.0) return 0;
  // a = 1.f · 2^E with f the 52 fraction bits (a double subnormal reads as E = -1023: below 2^-6 too)
  const auto bits = std::bit_cast<std::uint64_t>(a);
  int E = static_cast<int>(bits >> 52) - 1023;
  if (E < -6) {  // below the smallest normal, 2^-6: subnormal steps of 2^-9 (8 steps round up to 2^-6's code)
    const auto m = static_cast<std::uint8_t>(round_even(a * 512.0));
    return m == 0 ? 0 : static_cast<std::uint8_t>(sign | m);  // zero as +0, whatever its sign
  }
  // The mantissa's 3 bits: f's top 3, rounded by its other 49 (0..8, ties to even)
  const std::uint64_t f = bits & ((std::uint64_t{1} << 52) - 1), rest = f & ((std::uint64_t{1} << 49) - 1);
  constexpr std::uint64_t kHalf = std::uint64_t{1} << 48;
  int m = static_cast<int>(f >> 49);
  m += static_cast<int>(rest > kHalf) | (static_cast<int>(rest == kHalf) & m & 1);  // no branch: random data
  if (m == 8) m = 0, ++E;
  if (E > 8 || (E == 8 && m > 6)) return static_cast<std::uint8_t>(sign | 0x7E);  // 448, the largest
  return static_cast<std::uint8_t>(sign | ((E + 7) << 3) | m);
}

inline std::uint8_t encode_int8(double v) {
  const double r = round_even(v);
  return static_cast<std::uint8_t>(static_cast<std::int8_t>(r > 127.0 ? 127.0 : r < -127.0 ? -127.0 : r));
}

}  // namespace

std::uint8_t encode(KvQuant q, double v) { return q == KvQuant::fp8_e4m3 ? encode_e4m3(v) : encode_int8(v); }

// The finite rows only (callers check): the comparisons below are fmax's and fmin's for them.
void encode_row(KvQuant q, const float* x, i64 n, float scale, std::uint8_t* codes, i64 code_stride) {
  const double hi = code_max(q);
  // The format chosen once a row, the encoder inlined into its loop (through the out-of-line
  // encode(), a call an element, the row took ~15 % longer).
  const auto encode_all = [&](auto encode_one) {
    for (i64 i = 0; i < n; ++i) {
      // x / scale in double, then clamped: absmax / scale may land a rounding above the largest code.
      double v = scale == 0.0f ? 0.0 : static_cast<double>(x[i]) / static_cast<double>(scale);
      v = v > hi ? hi : v < -hi ? -hi : v;
      codes[i * code_stride] = encode_one(v);
    }
  };
  if (q == KvQuant::fp8_e4m3)
    encode_all([](double v) { return encode_e4m3(v); });
  else
    encode_all([](double v) { return encode_int8(v); });
}

namespace {
// A contiguous row's scale and codes (at code_stride) by the scalar encoder.
float scalar_row(KvQuant q, const float* x, i64 n, std::uint8_t* codes, i64 code_stride) {
  const float scale = max_abs(x, 0, n, 0.0f) / code_max(q);
  encode_row(q, x, n, scale, codes, code_stride);
  return scale;
}
}  // namespace

float quantize_row_scalar(KvQuant q, const float* x, i64 n, std::uint8_t* codes) {
  return scalar_row(q, x, n, codes, 1);
}

namespace {
// x[i·stride] as n contiguous floats in row: exact for each T.
template <class T>
void widen_row(const T* x, i64 n, i64 stride, float* row, const ConvertKernels& convert) {
  if constexpr (std::is_same_v<T, bf16>)
    if (stride == 1) return convert.bf16_to_float(x, row, n);
  if constexpr (std::is_same_v<T, fp16>)
    if (stride == 1) return convert.fp16_to_float(x, row, n);
  for (i64 i = 0; i < n; ++i) row[i] = static_cast<float>(x[i * stride]);
}
}  // namespace

template <class T>
float quantize_row(KvQuant q, const T* x, i64 n, i64 stride, std::uint8_t* codes, i64 code_stride, float* row,
                   const ConvertKernels& convert) {
  const float* values = row;
  if constexpr (std::is_same_v<T, float>)
    if (stride == 1) values = x;
  if (values == row) widen_row(x, n, stride, row, convert);
  if (code_stride == 1) return convert.quantize_row(q, values, n, codes);
  return scalar_row(q, values, n, codes, code_stride);
}

template float quantize_row(KvQuant, const float*, i64, i64, std::uint8_t*, i64, float*, const ConvertKernels&);
template float quantize_row(KvQuant, const bf16*, i64, i64, std::uint8_t*, i64, float*, const ConvertKernels&);
template float quantize_row(KvQuant, const fp16*, i64, i64, std::uint8_t*, i64, float*, const ConvertKernels&);

namespace {
template <class T>
bool finite(T v) {
  return std::isfinite(static_cast<float>(v));
}

// Whether a row of n values at stride 1 is all finite (no exponent all ones: NaN or infinity),
// tested on the bits in loops that vectorize even in baseline x86-64: with `finite` and `&=` per
// element, sdpa.quantize_kv of float rows took 1.20 ns an element, with this 0.75, and of bf16
// rows 1.6 against 1.1 (Zen 4). A 16-bit row's largest magnitude is taken as int16 (pmaxsw is
// SSE2's; an OR of 16-bit compares did not vectorize).
template <class T>
bool all_finite(const T* row, i64 n) {
  if constexpr (std::is_same_v<T, float>) {
    std::uint32_t non_finite = 0;
    for (i64 i = 0; i < n; ++i)
      non_finite |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(row[i]) & 0x7F800000u) == 0x7F800000u);
    return non_finite == 0;
  } else {
    constexpr std::int16_t kExponent = std::is_same_v<T, bf16> ? 0x7F80 : 0x7C00;
    std::int16_t largest = 0;
    for (i64 i = 0; i < n; ++i) {
      const auto magnitude = static_cast<std::int16_t>(row[i].bits & 0x7FFF);
      largest = magnitude > largest ? magnitude : largest;
    }
    return largest < kExponent;
  }
}
}  // namespace

template <class T>
void require_finite(const View4<const T>& x, const char* name, const std::string& holder) {
  const i64 D = x.shape[3], stride = x.stride[3];
  for (i64 a = 0; a < x.shape[0]; ++a)
    for (i64 r = 0; r < x.shape[1]; ++r)
      for (i64 h = 0; h < x.shape[2]; ++h) {
        const T* row = &x(a, r, h, 0);
        bool all = true;
        if (stride == 1)
          all = all_finite(row, D);
        else
          for (i64 d = 0; d < D; ++d) all &= finite(row[d * stride]);
        if (all) continue;
        for (i64 d = 0;; ++d)
          if (!finite(row[d * stride]))
            throw Error(std::string(name) + ": element [" + std::to_string(a) + ", " + std::to_string(r) + ", " +
                        std::to_string(h) + ", " + std::to_string(d) + "] is " +
                        std::to_string(static_cast<float>(row[d * stride])) + "; " + holder +
                        " has no code for a NaN or an infinity");
      }
}

template void require_finite(const View4<const float>&, const char*, const std::string&);
template void require_finite(const View4<const bf16>&, const char*, const std::string&);
template void require_finite(const View4<const fp16>&, const char*, const std::string&);

}  // namespace detail

const char* kv_quant_name(KvQuant q) { return q == KvQuant::int8 ? "int8" : "fp8_e4m3"; }

KvQuant parse_kv_quant(const std::string& name, const char* what) {
  for (const KvQuant q : {KvQuant::int8, KvQuant::fp8_e4m3})
    if (name == kv_quant_name(q)) return q;
  throw Error(std::string(what) + ": expected 'int8' or 'fp8_e4m3', got '" + name + "'");
}

namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

template <class T, class S>
void check_pair(const View4<T>& x, const char* xname, const View3<S>& scales, const char* sname) {
  detail::check_dims(xname, x.shape, "ARHD");
  if (x.data == nullptr) fail(std::string(xname) + ": data pointer is null");
  if (scales.data == nullptr) fail(std::string(sname) + ": data pointer is null");
  const std::array<std::int64_t, 3> want{x.shape[0], x.shape[2], x.shape[1]};
  if (scales.shape != want)
    fail(std::string(sname) + ": shape " + shape_str(scales.shape) + " should be " + shape_str(want) +
         " ([A, H, R] of " + xname + "'s [A, R, H, D]: one scale per row)");
}

}  // namespace

namespace {
template <class T>
void quantize_rows(const View4<const T>& x, KvQuant quant, const View4<std::uint8_t>& codes,
                   const View3<float>& scales) {
  check_pair(x, "x", scales, "scales");
  if (codes.data == nullptr) fail("codes: data pointer is null");
  if (codes.shape != x.shape) fail("codes: shape " + shape_str(codes.shape) + " should be x's " + shape_str(x.shape));
  detail::require_finite(x, "x", kv_quant_name(quant));  // before anything is written
  detail::RowBuffer row(x.shape[3]);
  const detail::ConvertKernels& convert = detail::convert_kernels(Isa::automatic);
  for (std::int64_t a = 0; a < x.shape[0]; ++a)
    for (std::int64_t r = 0; r < x.shape[1]; ++r)
      for (std::int64_t h = 0; h < x.shape[2]; ++h)
        scales(a, h, r) = detail::quantize_row(quant, &x(a, r, h, 0), x.shape[3], x.stride[3], &codes(a, r, h, 0),
                                               codes.stride[3], row.data(), convert);
}
}  // namespace

void quantize_kv(View4<const float> x, KvQuant quant, View4<std::uint8_t> codes, View3<float> scales) {
  quantize_rows(x, quant, codes, scales);
}
void quantize_kv(View4<const bf16> x, KvQuant quant, View4<std::uint8_t> codes, View3<float> scales) {
  quantize_rows(x, quant, codes, scales);
}
void quantize_kv(View4<const fp16> x, KvQuant quant, View4<std::uint8_t> codes, View3<float> scales) {
  quantize_rows(x, quant, codes, scales);
}

void dequantize_kv(View4<const std::uint8_t> codes, View3<const float> scales, KvQuant quant, View4<float> x) {
  check_pair(codes, "codes", scales, "scales");
  if (x.data == nullptr) fail("x: data pointer is null");
  if (x.shape != codes.shape) fail("x: shape " + shape_str(x.shape) + " should be codes' " + shape_str(codes.shape));
  for (std::int64_t a = 0; a < x.shape[0]; ++a)
    for (std::int64_t r = 0; r < x.shape[1]; ++r)
      for (std::int64_t h = 0; h < x.shape[2]; ++h)
        for (std::int64_t d = 0; d < x.shape[3]; ++d)
          x(a, r, h, d) = detail::code_value(quant, codes(a, r, h, d)) * scales(a, h, r);
}

}  // namespace sdpa
