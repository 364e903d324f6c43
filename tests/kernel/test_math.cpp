// test_math.cpp — the kernel's vector exp and tanh on every runnable ISA, against
// the fp64 functions: relative error in units of fp32 roundoff, and the edge cases
// the online softmax relies on (exp(-inf) = 0 exactly, NaN stays NaN).
#include "util.hpp"

namespace sdpa::test {
namespace {

std::vector<float> apply(void (*f)(const float*, float*, i64), std::vector<float> x) {
  while (x.size() % detail::kPad) x.push_back(0.0f);
  std::vector<float> y(x.size());
  f(x.data(), y.data(), static_cast<i64>(x.size()));
  return y;
}

class VectorMath : public VariantTest {};

TEST_P(VectorMath, ExpWithinFewUlpsOverTheNormalRange) {
  std::vector<float> x;
  for (double t = -87.3; t <= 88.7; t += 0.0137) x.push_back(static_cast<float>(t));
  for (float t : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.3465f, -0.3467f}) x.push_back(t);
  const auto y = apply(GetParam().kernels().exp, x);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(y[i] - want) / want / kEps32);
  }
  // Range reduction + degree-7 Taylor: about 2 units of roundoff; 4 leaves room for the FMA order.
  EXPECT_LE(worst, 4.0) << "worst relative error, in units of 2^-24";
}

TEST_P(VectorMath, ExpEdgeCases) {
  const auto y = apply(GetParam().kernels().exp, {-kInf, -1000.0f, -90.0f, 89.0f, 1000.0f, kInf, kNaN});
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_LT(y[2], 1e-38f);  // below FLT_MIN: 0 or the libm denormal
  EXPECT_EQ(y[3], kInf);
  EXPECT_EQ(y[4], kInf);
  EXPECT_EQ(y[5], kInf);
  EXPECT_TRUE(std::isnan(y[6]));
}

// Below -87.33 the SIMD exp gives exactly 0, and nothing it returns is subnormal: its low
// clamp keeps every lane's 2^n scaling normal (simd_math.inl says why that matters for
// speed). Just above, the usual few units of roundoff.
TEST_P(VectorMath, ExpNearTheBottomOfTheRangeIsZeroOrNormal) {
  if (GetParam().isa == Isa::scalar) GTEST_SKIP() << "the scalar path is libm's expf, subnormals and all";
  std::vector<float> x;
  for (float t = -88.0f; t <= -87.0f; t += 1.0f / 4096) x.push_back(t);
  for (float t : {-87.3365447f, std::nextafter(-87.33f, -88.0f), -87.33f}) x.push_back(t);
  const auto y = apply(GetParam().kernels().exp, x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] < -87.33f) {
      EXPECT_EQ(y[i], 0.0f) << "x = " << x[i];
      continue;
    }
    EXPECT_GE(y[i], std::numeric_limits<float>::min()) << "x = " << x[i];
    const double want = std::exp(static_cast<double>(x[i]));
    EXPECT_LE(std::abs(y[i] - want) / want / kEps32, 4.0) << "x = " << x[i];
  }
}

TEST_P(VectorMath, TanhRelativeErrorIncludingTinyArguments) {
  std::vector<float> x;
  for (double t = -12; t <= 12; t += 0.00731) x.push_back(static_cast<float>(t));
  for (double t = 1e-8; t < 1; t *= 1.37) x.push_back(static_cast<float>(t)), x.push_back(-static_cast<float>(t));
  const auto y = apply(GetParam().kernels().tanh, x);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::tanh(static_cast<double>(x[i]));
    if (want == 0) continue;
    worst = std::max(worst, std::abs(y[i] - want) / std::abs(want) / kEps32);
  }
  EXPECT_LE(worst, 8.0) << "worst relative error, in units of 2^-24";
}

TEST_P(VectorMath, TanhEdgeCases) {
  const auto y = apply(GetParam().kernels().tanh, {kInf, -kInf, 0.0f, -0.0f, 100.0f, kNaN});
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -1.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_TRUE(std::signbit(y[3]));
  EXPECT_EQ(y[4], 1.0f);
  EXPECT_TRUE(std::isnan(y[5]));
}

INSTANTIATE_TEST_SUITE_P(Isa, VectorMath, ::testing::ValuesIn(kernel_variants()), variant_id);

}  // namespace
}  // namespace sdpa::test
