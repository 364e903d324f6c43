// tolerance.hpp — how a fast fp32 result is judged against the fp64 reference.
// Shared by the tests (tests/kernel) and `sdpa check` (apps/sdpa), header-only.
//
// The project's rule (docs/contract.md, "Numerical tolerance"): the fast error is at most
// twice the naive fp32 implementation's error, plus a floor. The floor is the error no fp32 kernel can avoid, from first
// principles; the naive error alone is one sample of rounding noise and can vanish by
// structure (with one visible key, the naive dP - delta cancels exactly, so dq = 0).
//
//   smax  >= max |s_ij| = |β|·max‖q_i‖·max‖k_j‖ (Cauchy–Schwarz), capped by the soft-cap,
//            plus max|mask|. Rounding s once costs a relative eps·smax in every p_ij.
//   dpmax >= max |dP_ij| = max‖dout_i‖·max‖v_j‖; dP - delta cancels terms that large.
//   floors (8 roundings' worth):
//     out  8 eps max|v| (1 + smax)             lse  8 eps (max|lse| + smax)
//     dq   8 eps |β| dpmax max|k| (1 + smax)   dk   8 eps |β| dpmax max|q| (1 + smax)
//     dv   8 eps max|dv| (1 + smax)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace sdpa::tolerance {

inline constexpr double kEps32 = 1.0 / (1 << 24);  // unit roundoff of float32

/// Max |a - b| where both are finite; a NaN or infinity must match in kind, else +inf.
template <class A, class B>
double max_abs_err(const std::vector<A>& a, const std::vector<B>& b) {
  double e = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
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

/// Max |x| over finite elements.
template <class T>
double max_abs(const std::vector<T>& a) {
  double m = 0;
  for (auto x : a)
    if (std::isfinite(static_cast<double>(x))) m = std::max(m, std::abs(static_cast<double>(x)));
  return m;
}

/// Max Euclidean norm of the length-d rows of a buffer whose last dimension is d.
template <class T>
double max_row_norm(const std::vector<T>& x, std::int64_t d) {
  double m = 0;
  const auto n = static_cast<std::size_t>(d);
  for (std::size_t r = 0; r + n <= x.size(); r += n) {
    double s = 0;
    for (std::size_t e = 0; e < n; ++e) s += static_cast<double>(x[r + e]) * static_cast<double>(x[r + e]);
    m = std::max(m, std::sqrt(s));
  }
  return m;
}

struct Floors {
  double out, lse, dq, dk, dv;
};

/// Floors for one problem. beta = |β|; softcap <= 0 means none; mask_max = max|finite mask|.
template <class T>
Floors floors(const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v, const std::vector<T>& dout,
              std::int64_t Dk, std::int64_t Dv, double beta, double softcap, double mask_max, double lse_max,
              double dv_max) {
  double smax = beta * max_row_norm(q, Dk) * max_row_norm(k, Dk);
  if (softcap > 0) smax = std::min(smax, softcap);
  smax += mask_max;
  const double dpmax = max_row_norm(dout, Dv) * max_row_norm(v, Dv);
  const double c = 8.0 * kEps32 * (1.0 + smax);
  return {c * max_abs(v), 8.0 * kEps32 * (lse_max + smax), c * beta * dpmax * max_abs(k), c * beta * dpmax * max_abs(q),
          c * dv_max};
}

/// Floors for a kernel that stores its outputs in a 16-bit type of unit roundoff u (bf16 2^-8,
/// fp16 2^-11) and computes in fp32: the fp32 floors plus what storing each output costs at
/// least, u·max|output| (half an ulp, relative). lse stays fp32. The rounding of P before P·V
/// is not in the floor: a kernel need not do it (the naive one does, and the rule's 2× covers it).
inline Floors with_output_rounding(Floors f, double u, double out_max, double dq_max, double dk_max, double dv_max) {
  return {f.out + u * out_max, f.lse, f.dq + u * dq_max, f.dk + u * dk_max, f.dv + u * dv_max};
}

/// The floor of ∂L/∂sink_h = −Σ_{b,i} p_sink,bhi Δ_bhi (p_sink = exp(sink_h − lse_bhi), Δ = dout·out),
/// max over heads, for out off by at most err_out an element and lse by err_lse: out moves Δ by
/// ‖dout‖₁·err_out, lse moves p_sink by a relative err_lse (to first order). out(b, h, i, e),
/// lse(b, h, i), dout(b, h, i, e) and sink(h) read the fp64 answer, the inputs and the sinks.
template <class Out, class Lse, class Dout, class Sink>
double sink_grad_floor(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t Dv, Out out, Lse lse, Dout dout,
                       Sink sink, double err_out, double err_lse) {
  double worst = 0.0;
  for (std::int64_t h = 0; h < H; ++h) {
    double bound = 0.0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < N; ++i) {
        double delta = 0.0, dout_l1 = 0.0;
        for (std::int64_t e = 0; e < Dv; ++e) {
          delta += static_cast<double>(out(b, h, i, e)) * static_cast<double>(dout(b, h, i, e));
          dout_l1 += std::abs(static_cast<double>(dout(b, h, i, e)));
        }
        const double p_sink = std::exp(static_cast<double>(sink(h)) - static_cast<double>(lse(b, h, i)));
        bound += p_sink * (dout_l1 * err_out + std::abs(delta) * err_lse);
      }
    worst = std::max(worst, bound);
  }
  return worst;
}

struct Verdict {
  double fast, naive, bound;
  bool ok() const { return fast <= bound; }
};

/// The rule: fast error <= 2 naive error + floor.
template <class F, class N, class G>
Verdict judge(const std::vector<F>& fast, const std::vector<N>& naive, const std::vector<G>& gold, double floor) {
  const double ef = max_abs_err(fast, gold), en = max_abs_err(naive, gold);
  return {ef, en, 2.0 * en + floor};
}

}  // namespace sdpa::tolerance
