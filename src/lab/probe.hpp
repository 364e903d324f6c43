// probe.hpp — reading scores and softmax rows out of the library's own kernel.
//   scores: B = n pairs, one query and one key each: lse_b = log exp(s_b) = β·q_b·k_b.
//   softmax: one query q = [1], keys k_j = [z_j] (Dk = 1), values v = I: out = softmax(β·z).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace sdpa::lab {

/// β·(q_b·k_b) for n pairs of d-vectors stored row after row; beta < 0 ... any finite β.
std::vector<double> scores(const std::vector<float>& q, const std::vector<float>& k, std::int64_t n, std::int64_t d,
                           double beta, int threads = 0);
/// All logits s[t, j] = β q_t·k_tj for T problems of one query (T×d) and N keys (T×N×d):
/// one head per key, the query shared across heads (stride 0), lse = the score.
std::vector<double> scores_all(const std::vector<float>& q, const std::vector<float>& k, std::int64_t T, std::int64_t N,
                               std::int64_t d, double beta, int threads = 0);

/// softmax(β·z) through sdpa::forward.
std::vector<double> softmax(const std::vector<double>& z, double beta = 1.0);

/// Attention rows for T independent problems of one query and N keys of width d:
/// p[t, j] = softmax_j(β q_t·k_tj), from sdpa::forward with v = I. q: T×d, k: T×N×d.
/// With a finite sink σ (Options::sinks), the keys' weights exp(s_tj)/(e^σ + Σ_j exp(s_tj)):
/// a row sums to 1 − p_sink.
std::vector<double> weights(const std::vector<float>& q, const std::vector<float>& k, std::int64_t T, std::int64_t N,
                            std::int64_t d, double beta, int threads = 0,
                            double sink = -std::numeric_limits<double>::infinity());

/// Gradients of L = Σ_t g_t·out_t for the same problems with values v (T×N×dv), from
/// sdpa::backward: dq (T×d), and dlogits (T×N) = ∂L/∂s measured by a second backward in
/// which the logits themselves are the query and the keys are the identity.
struct Grads {
  std::vector<double> dq, dlogits;
};
Grads gradients(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                const std::vector<float>& g, std::int64_t T, std::int64_t N, std::int64_t d, std::int64_t dv,
                double beta, int threads = 0);

}  // namespace sdpa::lab
