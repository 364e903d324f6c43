// fd.hpp — checking a backward pass against fp64 central finite differences.
//
// For a scalar loss f and an input element x_i, the central difference
//   D(h) = (f(x + h e_i) − f(x − h e_i)) / 2h
// has a truncation error ≈ f'''·h²/6 and a rounding error ≈ ε·|f|/h (ε = 2^-53).
// Neither f''' nor the rounding is known in advance, so the tolerance is measured:
//   truncation:  D(h) − D(2h) ≈ −3·(truncation error of D(h))  →  |D(h) − D(2h)|
//                (Richardson; counted once more as a safety factor of 3)
//   rounding:    8·ε·(|f(x+h)| + |f(x−h)| + 1)/h   (a few ulps of each evaluation)
// and the analytic gradient g_i must satisfy |g_i − D(h)| <= tol_i. An error in a
// backward pass larger than both — e.g. a 1e-6 slip, with h = 1e-4 — fails.
#pragma once

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace fd {

inline constexpr double kEps = 1.0 / 9007199254740992.0;  // 2^-53

struct Report {
  int checked = 0, failed = 0;
  double worst_ratio = 0;  // max |g − D| / tol
  std::string first_failure;
};

/// x: the inputs f reads (modified in place, restored); g: the analytic dL/dx.
inline Report check(std::vector<double>& x, const std::vector<double>& g, const std::function<double()>& f,
                    double h = 1e-4, int stride = 1) {
  Report r;
  for (std::size_t i = 0; i < x.size(); i += static_cast<std::size_t>(stride)) {
    const double x0 = x[i];
    auto diff = [&](double step, double& fmag) {
      x[i] = x0 + step;
      const double fp = f();
      x[i] = x0 - step;
      const double fm = f();
      x[i] = x0;
      fmag = std::abs(fp) + std::abs(fm);
      return (fp - fm) / (2 * step);
    };
    double mag1 = 0, mag2 = 0;
    const double d1 = diff(h, mag1), d2 = diff(2 * h, mag2);
    const double tol = std::abs(d1 - d2) + 8 * kEps * (mag1 + 1) / h;
    const double err = std::abs(g[i] - d1);
    r.checked++;
    r.worst_ratio = std::max(r.worst_ratio, err / tol);
    if (!(err <= tol)) {
      if (!r.failed)
        r.first_failure = "element " + std::to_string(i) + ": analytic " + std::to_string(g[i]) + ", numeric " +
                          std::to_string(d1) + ", tolerance " + std::to_string(tol);
      r.failed++;
    }
  }
  return r;
}

/// Deterministic pseudo-random values in [-scale, scale].
inline std::vector<double> randv(std::size_t n, unsigned seed, double scale = 1.0) {
  std::vector<double> v(n);
  unsigned long long s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (static_cast<double>(s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  return v;
}

}  // namespace fd

#define EXPECT_FD_OK(rep)                                                                          \
  do {                                                                                             \
    const auto& r_ = (rep);                                                                        \
    EXPECT_EQ(r_.failed, 0) << r_.failed << " of " << r_.checked << " fail; " << r_.first_failure; \
    EXPECT_GT(r_.checked, 0);                                                                      \
  } while (0)
