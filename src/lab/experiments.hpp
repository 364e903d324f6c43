// experiments.hpp — each claim of the seed documents as a function returning a table.
// Every score, softmax and gradient comes from the library (sdpa::forward/backward),
// never from a second formula written beside it (see probe.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "lab/stats.hpp"
#include "lab/table.hpp"

namespace sdpa::lab {

struct Common {
  std::uint64_t seed = 1;
  std::int64_t samples = 0;  // 0: the experiment's default
  int threads = 0;
};

/// Claim 1: Var(q·k) = d_k for independent zero-mean unit-variance entries; 1 after /√d_k.
Table variance(const Common& c, const std::vector<Dist>& dists, std::int64_t max_dk);
/// Claim 1 (seed 003): dividing scores by c divides their variance by c².
Table scaling(const Common& c);
/// Claim 2 (seed 000): Var(XY) = (σx²+μx²)(σy²+μy²) − μx²μy², so Var(q·k) = d_k·that.
Table general_formula(const Common& c);
/// Claim 3 (seeds 000/001): A (1111×111) · B (111×1111): variance ≈ 111, ≈ 1 after /√111.
Table matrix(const Common& c);
/// Claim 4 (seeds 000/001): the 2×2 experiment that printed 1.6.
Table puzzle(const Common& c);
/// Claim 5 (seeds 002/003): the softmax numbers the seeds quote, from the library.
Table softmax_numbers();
/// Claim 6: saturation of unscaled attention against d_k, and of any attention against N.
Table saturation(const Common& c);
/// Claim 7: which gradients vanish without scaling — w.r.t. the logits, q·k and q.
Table gradients(const Common& c);
/// Claim 8 (seed 002's question): 1/sqrt(d_k) against 1, 1/d_k, 1/log d_k and cosine similarity.
Table alternatives(const Common& c);
/// Claim 9 (seeds 001/002/004): projections, Xavier initialisation, LayerNorm, and where it fails.
Table projections(const Common& c);

}  // namespace sdpa::lab
