// util.hpp — buffers, random inputs and the error rule shared by the kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sdpa/sdpa.hpp"

namespace sdpa::test {

using i64 = std::int64_t;
constexpr double kEps32 = 1.0 / (1 << 24);  // unit roundoff of float32
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// An owning 4-D buffer. Stored as [d0, d1, d2, d3] row-major, or — when bnhd is set
// for a (B, H, N, D) tensor — as [B, N, H, D] and viewed through strides.
template <class T>
struct Buf {
  std::vector<T> data;
  std::array<i64, 4> shape{};
  bool bnhd = false;

  Buf() = default;
  Buf(std::array<i64, 4> s, bool bnhd_layout = false) : shape(s), bnhd(bnhd_layout) {
    data.assign(static_cast<std::size_t>(s[0] * s[1] * s[2] * s[3]), T(0));
  }
  View4<T> view() {
    return bnhd ? from_bnhd(data.data(), shape[0], shape[2], shape[1], shape[3]) : contiguous(data.data(), shape);
  }
  View4<const T> cview() const {
    auto* p = data.data();
    return bnhd ? from_bnhd(p, shape[0], shape[2], shape[1], shape[3]) : contiguous(p, shape);
  }
  T& at(i64 a, i64 b, i64 c, i64 d) { return view()(a, b, c, d); }
  template <class U>
  Buf<U> cast() const {
    Buf<U> o(shape, bnhd);
    for (std::size_t x = 0; x < data.size(); ++x) o.data[x] = static_cast<U>(data[x]);
    return o;
  }
};

// (B, H, N) log-sum-exp buffer.
template <class T>
struct Buf3 {
  std::vector<T> data;
  std::array<i64, 3> shape{};
  Buf3() = default;
  explicit Buf3(std::array<i64, 3> s) : shape(s) { data.assign(static_cast<std::size_t>(s[0] * s[1] * s[2]), T(0)); }
  View3<T> view() { return contiguous(data.data(), shape); }
  View3<const T> cview() const { return contiguous(data.data(), shape); }
};

inline void fill_normal(std::vector<float>& v, std::mt19937_64& rng, double stddev = 1.0) {
  std::normal_distribution<double> n(0.0, stddev);
  for (auto& x : v) x = static_cast<float>(n(rng));
}

// Max |a - b| over elements where both are finite; non-finite values must match
// exactly in kind (NaN with NaN, +inf with +inf), else the error is infinite.
template <class A, class B>
double max_abs_err(const std::vector<A>& a, const std::vector<B>& b) {
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return std::numeric_limits<double>::infinity();
      continue;
    }
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    e = std::max(e, std::abs(x - y));
  }
  return e;
}

template <class T>
double max_abs(const std::vector<T>& a) {
  double m = 0;
  for (auto x : a)
    if (std::isfinite(static_cast<double>(x))) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

// DESIGN.md's rule: the fast fp32 kernel's error against the fp64 reference is at
// most twice the naive fp32 implementation's error, plus a floor. The floor is the
// error no fp32 kernel can avoid, from first principles (see Floors): the naive error
// is one sample of rounding noise and can vanish by structure — with a single visible
// key, dP - delta cancels exactly in the naive code, so its dq is exactly 0.
struct Verdict {
  double fast, naive, bound;
};
template <class F, class N, class G>
Verdict judge(const std::vector<F>& fast, const std::vector<N>& naive, const std::vector<G>& gold, double floor) {
  const double ef = max_abs_err(fast, gold), en = max_abs_err(naive, gold);
  return {ef, en, 2.0 * en + floor};
}

// Magnitudes the floors are built from (all computed from the inputs):
//   smax  >= max |s_ij|: |β|·max‖q_i‖·max‖k_j‖ (Cauchy–Schwarz), capped by the soft-cap, plus max|mask|.
//         Rounding s once costs eps·smax in the exponent, so relative eps·smax in every p_ij.
//   dpmax >= max |dP_ij| = max‖dout_i‖·max‖v_j‖; dP - delta cancels terms of that size.
// Floors (8 roundings' worth):
//   out  8 eps max|v| (1 + smax)          lse  8 eps (max|lse| + smax)
//   dq   8 eps |β| dpmax max|k| (1 + smax) dk   8 eps |β| dpmax max|q| (1 + smax)
//   dv   8 eps max|dv| (1 + smax)
struct Floors {
  double out, lse, dq, dk, dv;
};

template <class T>
double max_row_norm(const std::vector<T>& x, std::int64_t d) {
  double m = 0;
  for (std::size_t r = 0; r + static_cast<std::size_t>(d) <= x.size(); r += static_cast<std::size_t>(d)) {
    double s = 0;
    for (std::int64_t e = 0; e < d; ++e) s += static_cast<double>(x[r + e]) * static_cast<double>(x[r + e]);
    m = std::max(m, std::sqrt(s));
  }
  return m;
}

#define SDPA_EXPECT_WITHIN(what, v)                                                                   \
  EXPECT_LE((v).fast, (v).bound) << what << ": fast error " << (v).fast << ", naive fp32 error " \
                                 << (v).naive << ", bound " << (v).bound

// ISAs this CPU can run (scalar always).
inline std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

}  // namespace sdpa::test
