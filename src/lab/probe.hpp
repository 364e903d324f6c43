// probe.hpp — reading scores and softmax rows out of the library's own kernel.
//   scores: B = n pairs, one query and one key each: lse_b = log exp(s_b) = β·q_b·k_b.
//   softmax: one query q = [1], keys k_j = [z_j] (Dk = 1), values v = I: out = softmax(β·z).
#pragma once

#include <cstdint>
#include <vector>

namespace sdpa::lab {

/// β·(q_b·k_b) for n pairs of d-vectors stored row after row; beta < 0 ... any finite β.
std::vector<double> scores(const std::vector<float>& q, const std::vector<float>& k, std::int64_t n, std::int64_t d,
                           double beta, int threads = 0);
/// softmax(β·z) through sdpa::forward.
std::vector<double> softmax(const std::vector<double>& z, double beta = 1.0);

}  // namespace sdpa::lab
