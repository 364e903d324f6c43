// stats.cpp — see stats.hpp.
#include "lab/stats.hpp"

#include <cmath>

#include "sdpa/error.hpp"

namespace sdpa::lab {

Estimate mean_of(const std::vector<double>& x) {
  const double n = static_cast<double>(x.size());
  double m = 0;
  for (double v : x) m += v;
  m /= n;
  double ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  return {m, n > 1 ? std::sqrt(ss / (n - 1) / n) : 0.0};
}

Estimate variance_of(const std::vector<double>& x) {
  const double n = static_cast<double>(x.size());
  double m = 0;
  for (double v : x) m += v;
  m /= n;
  double m2 = 0, m4 = 0;
  for (double v : x) {
    const double d = (v - m) * (v - m);
    m2 += d;
    m4 += d * d;
  }
  const double s2 = m2 / (n - 1);
  m4 /= n;
  const double var_s2 = (m4 - (n - 3) / (n - 1) * s2 * s2) / n;
  return {s2, std::sqrt(std::max(var_s2, 0.0))};
}

double population_variance(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m += v;
  m /= static_cast<double>(x.size());
  double ss = 0;
  for (double v : x) ss += (v - m) * (v - m);
  return ss / static_cast<double>(x.size());
}

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::gaussian: return "gaussian";
    case Dist::uniform: return "uniform";
    case Dist::rademacher: return "rademacher";
    case Dist::student_t5: return "student_t5";
  }
  return "?";
}

Dist parse_dist(const std::string& s) {
  for (Dist d : {Dist::gaussian, Dist::uniform, Dist::rademacher, Dist::student_t5})
    if (s == dist_name(d)) return d;
  throw Error("--dist: expected gaussian, uniform, rademacher or student_t5, got '" + s + "'");
}

double fourth_moment(Dist d) {
  switch (d) {
    case Dist::gaussian: return 3.0;
    case Dist::uniform: return 9.0 / 5.0;  // (√3)^4 / 5
    case Dist::rademacher: return 1.0;
    case Dist::student_t5: return 9.0;  // t5: E t⁴ = 3ν²/((ν−2)(ν−4)) = 25; scaled by (3/5)² -> 9
  }
  return 0;
}

double Sampler::operator()() {
  switch (dist_) {
    case Dist::gaussian: return normal_(rng_);
    case Dist::uniform: return uniform_(rng_);
    case Dist::rademacher: return (rng_() >> 63) ? 1.0 : -1.0;
    case Dist::student_t5: return t5_(rng_) * 0.7745966692414834;  // √(3/5): unit variance
  }
  return 0;
}

}  // namespace sdpa::lab
