// test_half.cpp — sdpa::bf16 and sdpa::fp16 against references derived from the formats'
// definitions, over all 65536 bit patterns, and against F16C's conversions (a second,
// hardware oracle for fp16); the bulk conversions of every runnable ISA against the scalar.
#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention/convert.hpp"
#include "sdpa/half.hpp"
#include "util.hpp"

namespace sdpa::test {
namespace {

// Value of a 16-bit pattern from the definition: (-1)^s · 2^(e - bias) · (1 + f / 2^fbits) for
// a normal, 2^(1 - bias) · f / 2^fbits for a subnormal, inf or NaN for the top exponent.
double decode(std::uint16_t h, int ebits, int fbits) {
  const int bias = (1 << (ebits - 1)) - 1, emax = (1 << ebits) - 1;
  const int s = h >> 15, e = (h >> fbits) & emax, f = h & ((1 << fbits) - 1);
  double mag;
  if (e == emax)
    mag = f ? std::nan("") : INFINITY;
  else if (e == 0)
    mag = std::ldexp(static_cast<double>(f), 1 - bias - fbits);
  else
    mag = std::ldexp(static_cast<double>((1 << fbits) + f), e - bias - fbits);
  return s ? -mag : mag;
}
double decode_bf16(std::uint16_t h) { return decode(h, 8, 7); }
double decode_fp16(std::uint16_t h) { return decode(h, 5, 10); }

std::uint32_t bits_of(float x) { return std::bit_cast<std::uint32_t>(x); }

// NaNs: bf16 -> float is a shift and keeps the bits; fp16 -> float makes them quiet, as F16C does.
template <class H>
void check_widening(double (*ref)(std::uint16_t)) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    const float got = static_cast<float>(H::from_bits(h));
    const double want = ref(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << b;
      ASSERT_EQ(std::signbit(got), (b >> 15) != 0) << std::hex << b;
      if constexpr (std::is_same_v<H, bf16>)
        ASSERT_EQ(bits_of(got), b << 16) << std::hex << b;
      else
        ASSERT_TRUE(bits_of(got) & 0x400000u) << "NaN not quiet: " << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << b;
      ASSERT_EQ(std::signbit(got), (b >> 15) != 0) << std::hex << b;  // -0 stays -0
    }
  }
}

TEST(Half, Bf16WidensExactlyForAllPatterns) { check_widening<bf16>(decode_bf16); }
TEST(Half, Fp16WidensExactlyForAllPatterns) { check_widening<fp16>(decode_fp16); }

// Rounding to nearest even is fixed by where it changes its mind: for every pair of adjacent
// finite values a < b of the type (same sign), a itself, the float just below their
// midpoint, the float just above it, and the midpoint itself (to the one whose last bit is
// 0). Together with monotonicity that pins down the result of every float. The pair above
// the largest finite value is (max, inf) with the midpoint max + ulp/2 (IEEE's overflow rule).
template <class H>
void check_rounding(double (*ref)(std::uint16_t)) {
  for (std::uint32_t b = 0; b < 0x8000u; ++b) {
    const double a_val = ref(static_cast<std::uint16_t>(b));
    if (!std::isfinite(a_val)) break;
    for (const std::uint32_t sign : {0u, 0x8000u}) {
      const auto lo = static_cast<std::uint16_t>(b | sign), hi = static_cast<std::uint16_t>((b + 1) | sign);
      const double sgn = sign ? -1.0 : 1.0;
      const double a = sgn * a_val;
      double next = ref(static_cast<std::uint16_t>(b + 1));
      // The step above the largest finite value, as if the exponent went on.
      if (std::isinf(next)) next = a_val + (a_val - ref(static_cast<std::uint16_t>(b - 1)));
      const float mid = static_cast<float>(sgn * (a_val + next) / 2);  // exact: one bit more than H
      ASSERT_EQ(static_cast<double>(mid), sgn * (a_val + next) / 2);
      const float below = std::nextafter(mid, 0.0f), above = std::nextafter(mid, static_cast<float>(sgn * INFINITY));
      ASSERT_EQ(H(static_cast<float>(a)).bits, lo) << std::hex << b;
      ASSERT_EQ(H(below).bits, lo) << "just below the midpoint above " << std::hex << lo;
      ASSERT_EQ(H(above).bits, hi) << "just above the midpoint above " << std::hex << lo;
      ASSERT_EQ(H(mid).bits, (lo & 1) ? hi : lo) << "tie above " << std::hex << lo << " goes to even";
    }
  }
}

TEST(Half, Bf16RoundsToNearestEvenAtEveryBoundary) { check_rounding<bf16>(decode_bf16); }
TEST(Half, Fp16RoundsToNearestEvenAtEveryBoundary) { check_rounding<fp16>(decode_fp16); }

TEST(Half, SpecialValues) {
  const float inf = INFINITY;
  EXPECT_EQ(bf16(inf).bits, 0x7F80u);
  EXPECT_EQ(bf16(-inf).bits, 0xFF80u);
  EXPECT_EQ(bf16(std::numeric_limits<float>::max()).bits, 0x7F80u);  // rounds up past bf16's max
  EXPECT_EQ(fp16(65504.0f).bits, 0x7BFFu);
  EXPECT_EQ(fp16(65519.99f).bits, 0x7BFFu);
  EXPECT_EQ(fp16(65520.0f).bits, 0x7C00u);  // the tie between max and 2^16 goes to inf (even)
  EXPECT_EQ(fp16(-1e9f).bits, 0xFC00u);
  EXPECT_EQ(fp16(std::ldexp(1.0f, -24)).bits, 0x0001u);  // smallest subnormal
  EXPECT_EQ(fp16(std::ldexp(1.0f, -25)).bits, 0x0000u);  // tie with 0 goes to 0
  EXPECT_EQ(fp16(std::ldexp(1.5f, -25)).bits, 0x0001u);
  EXPECT_EQ(fp16(-0.0f).bits, 0x8000u);
  EXPECT_EQ(bf16(std::numeric_limits<float>::denorm_min()).bits, 0x0000u);
  EXPECT_EQ(bf16(std::ldexp(1.0f, -133)).bits, 0x0001u);  // bf16's smallest subnormal is fp32's 2^-133
  for (const float nan : {std::nanf(""), -std::nanf(""), std::bit_cast<float>(0x7F800001u)}) {
    EXPECT_TRUE(std::isnan(static_cast<float>(bf16(nan))));
    EXPECT_TRUE(std::isnan(static_cast<float>(fp16(nan))));
    EXPECT_EQ(std::signbit(static_cast<float>(fp16(nan))), std::signbit(nan));
  }
  EXPECT_EQ(unit_roundoff(Dtype::bf16), 1.0 / 256);
  EXPECT_EQ(unit_roundoff(Dtype::fp16), 1.0 / 2048);
  EXPECT_EQ(round_to(Dtype::fp16, 1.0f + 1.0f / 4096), 1.0f);
}

#if defined(__x86_64__)
// F16C: the CPU's own conversions, a second oracle for fp16.
__attribute__((target("f16c"))) float f16c_widen(std::uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
__attribute__((target("f16c"))) std::uint16_t f16c_round(float x) {
  return static_cast<std::uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0));
}

TEST(Half, Fp16MatchesF16cBitForBit) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "this CPU has no F16C";
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto h = static_cast<std::uint16_t>(b);
    ASSERT_EQ(bits_of(static_cast<float>(fp16::from_bits(h))), bits_of(f16c_widen(h))) << std::hex << b;
  }
  // Every 8191st float pattern (just under fp16's spacing of 2^13 fp32 patterns, so the
  // samples drift across every position between two fp16 values) and four neighbours of
  // each, among them the ties (low 13 bits 0x1000): 2.6 M floats.
  for (std::uint64_t u = 0; u < (1ull << 32); u += 8191) {
    for (const std::uint32_t d : {0u, 1u, 0xFFFu, 0x1000u, 0x1001u}) {
      const float x = std::bit_cast<float>(static_cast<std::uint32_t>(u + d));
      ASSERT_EQ(fp16(x).bits, f16c_round(x)) << std::hex << bits_of(x);
    }
  }
}
#endif

// Bulk conversions on each ISA, and at 16 lanes on AVX2 (odd lengths: vector body and scalar
// tail), equal the scalar.
TEST(Half, BulkConversionsMatchScalarOnEveryIsa) {
  std::vector<std::uint16_t> all(65536 + 13);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i * 40503u);  // odd: a permutation
  std::vector<float> floats;  // boundaries of both types and random values
  std::mt19937_64 rng(7);
  for (std::uint32_t b = 0; b < 65536; ++b) {
    floats.push_back(static_cast<float>(fp16::from_bits(static_cast<std::uint16_t>(b))) * 1.00048828125f);
    floats.push_back(std::bit_cast<float>((b << 16) | 0x8000u));  // bf16 ties
    floats.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  }
  std::vector<std::pair<std::string, const detail::ConvertKernels*>> tables;
  for (Isa isa : runnable_isas()) tables.emplace_back(isa_name(isa), &detail::convert_kernels(isa));
#if defined(__x86_64__) && SDPA_TEST_W16_ON_AVX2
  if (isa_supported(Isa::avx2))  // convert_kernel.inl at AVX-512's 16 lanes (util.hpp)
    tables.emplace_back("w16 on avx2", &detail::convert_kernels_w16_on_avx2());
#endif
  for (const auto& [name, table] : tables) {
    SCOPED_TRACE(name);
    const auto& k = *table;
    std::vector<float> wide(all.size());
    k.bf16_to_float(reinterpret_cast<const bf16*>(all.data()), wide.data(), static_cast<i64>(all.size()));
    for (std::size_t i = 0; i < all.size(); ++i)
      ASSERT_EQ(bits_of(wide[i]), bits_of(static_cast<float>(bf16::from_bits(all[i])))) << i;
    k.fp16_to_float(reinterpret_cast<const fp16*>(all.data()), wide.data(), static_cast<i64>(all.size()));
    for (std::size_t i = 0; i < all.size(); ++i)
      ASSERT_EQ(bits_of(wide[i]), bits_of(static_cast<float>(fp16::from_bits(all[i])))) << i;
    std::vector<bf16> b(floats.size());
    std::vector<fp16> f(floats.size());
    k.float_to_bf16(floats.data(), b.data(), static_cast<i64>(floats.size()));
    k.float_to_fp16(floats.data(), f.data(), static_cast<i64>(floats.size()));
    for (std::size_t i = 0; i < floats.size(); ++i) {
      ASSERT_EQ(b[i].bits, bf16(floats[i]).bits) << std::hex << bits_of(floats[i]);
      ASSERT_EQ(f[i].bits, fp16(floats[i]).bits) << std::hex << bits_of(floats[i]);
    }
  }
}

#if defined(__x86_64__) && !defined(SDPA_NO_AVX512)
// vcvtneps2bf16 agrees with bf16::from_float except that it flushes subnormals.
TEST(Half, Avx512Bf16InstructionRoundsLikeTheType) {
  if (!detail::avx512bf16_supported()) GTEST_SKIP() << "this CPU has no AVX512_BF16: compiled, not run here";
  std::vector<float> x(100003);
  std::mt19937_64 rng(11);
  for (auto& v : x) v = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
  std::vector<bf16> got(x.size());
  detail::float_to_bf16_avx512bf16(x.data(), got.data(), static_cast<i64>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(static_cast<float>(got[i])));
    } else if (std::fpclassify(x[i]) == FP_SUBNORMAL || std::fpclassify(static_cast<float>(bf16(x[i]))) == FP_SUBNORMAL) {
      EXPECT_EQ(static_cast<float>(got[i]), 0.0f);
    } else {
      EXPECT_EQ(got[i].bits, bf16(x[i]).bits) << std::hex << bits_of(x[i]);
    }
  }
}
#endif

}  // namespace
}  // namespace sdpa::test
