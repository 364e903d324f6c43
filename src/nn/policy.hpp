// nn/policy.hpp — temperature policies: how each attention head's β is chosen.
//
//   inv_sqrt_dk       β = 1/√d_k                              (Vaswani et al. 2017)
//   none              β = 1
//   inv_dk            β = 1/d_k                               (μP, Yang et al. 2022)
//   fixed:<b>         β = b
//   learned           β = exp(θ_h), θ_h trained, θ_h(0) = ln(1/√d_k)
//   qk_norm           q, k normalised per head, β = exp(θ_h) trained, θ_h(0) = ln √d_k
//   log_n             query i scaled by ln n_i (n_i = keys it sees, ≥ 2): β_i = ln(n_i)/√d_k
//   adaptive          the seed note's rule, recomputed before every step from measured σ:
//                       β_h = 1/√((d_x σ_X² σ_Wq,h²)(d_x σ_X² σ_Wk,h²)·d_k)
//   adaptive_scores   β_h = 1/ŝ_h, ŝ_h an exponential moving average (0.9) of the measured
//                     std of the raw scores q·k of the batch
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "nn/attention.hpp"

namespace sdpa::nn {

enum class PolicyKind { inv_sqrt_dk, none, inv_dk, fixed, learned, qk_norm, log_n, adaptive, adaptive_scores };

struct Policy {
  PolicyKind kind = PolicyKind::inv_sqrt_dk;
  double value = 0;  // β for fixed
  std::string name() const;
  bool has_theta() const { return kind == PolicyKind::learned || kind == PolicyKind::qk_norm; }
  QkTransform transform() const {
    return kind == PolicyKind::qk_norm ? QkTransform::normalize
           : kind == PolicyKind::log_n ? QkTransform::log_n
                                       : QkTransform::plain;
  }
  /// Initial log-temperature θ for has_theta() policies.
  double theta_init(i64 dk) const {
    return kind == PolicyKind::qk_norm ? 0.5 * std::log(static_cast<double>(dk))
                                       : -0.5 * std::log(static_cast<double>(dk));
  }
};

/// Parses a policy name (as listed above); throws sdpa::Error naming `what`.
Policy parse_policy(const std::string& s, const std::string& what = "policy");
/// All policy names the default sweep runs.
std::vector<std::string> default_policies();

/// The seed note's rule: 1/√((d_x σ_X² σ_Wq²)(d_x σ_X² σ_Wk²)·d_k).
inline double adaptive_beta(double d_x, double sigma_x, double sigma_wq, double sigma_wk, double d_k) {
  const double vq = d_x * sigma_x * sigma_x * sigma_wq * sigma_wq;
  const double vk = d_x * sigma_x * sigma_x * sigma_wk * sigma_wk;
  return 1.0 / std::sqrt(vq * vk * d_k);
}

/// Smoothing of adaptive_scores: ŝ ← kEma·ŝ + (1 − kEma)·std (first step: ŝ = std).
inline constexpr double kScoreEma = 0.9;

}  // namespace sdpa::nn
