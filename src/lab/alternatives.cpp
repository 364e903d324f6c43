// alternatives.cpp — claim 8, seed 002's question: why 1/sqrt(d_k) and not another
// temperature? Score std and attention entropy at initialisation (standard normal q, k;
// N = 64 keys) for β = 1, 1/sqrt(d_k), 1/d_k (μP), 1/ln d_k, and cosine similarity
// τ·cos(q, k) with τ = 10 (q and k normalised to unit length, then β = τ).
#include <cmath>
#include <string>

#include "lab/common_draw.hpp"
#include "lab/experiments.hpp"
#include "lab/probe.hpp"

namespace sdpa::lab {

Table alternatives(const Common& c) {
  Table t{"alternatives",
          "score std and attention entropy at initialisation against d_k for several temperatures (N = 64; "
          "uniform entropy ln 64 = 4.16)",
          {"policy", "d_k", "beta", "score_std", "score_std_lo", "score_std_hi", "entropy", "entropy_lo", "entropy_hi",
           "max_weight"},
          {}};
  const std::int64_t T = c.samples ? c.samples : 300, N = 64;
  constexpr double tau = 10.0;
  std::uint64_t stream = 0;
  for (std::int64_t d : {2, 8, 32, 128, 512, 2048}) {
    std::mt19937_64 rng(c.seed * 69069u + stream++);
    auto q = gaussian(rng, T * d), k = gaussian(rng, T * N * d);
    struct Policy {
      const char* name;
      double beta;
      bool cosine;
    };
    const double dd = double(d);
    for (const Policy& p :
         {Policy{"1", 1.0, false}, Policy{"1/sqrt(d_k)", 1 / std::sqrt(dd), false}, Policy{"1/d_k", 1 / dd, false},
          Policy{"1/ln(d_k)", 1 / std::log(dd), false}, Policy{"cosine, tau=10", tau, true}}) {
      std::vector<float> qq = q, kk = k;
      if (p.cosine)
        for (auto* x : {&qq, &kk})
          for (std::size_t r = 0; r < x->size(); r += static_cast<std::size_t>(d)) {
            double s = 0;
            for (std::int64_t e = 0; e < d; ++e) s += double((*x)[r + e]) * (*x)[r + e];
            const float inv = static_cast<float>(1 / std::sqrt(s));
            for (std::int64_t e = 0; e < d; ++e) (*x)[r + e] *= inv;
          }
      const auto s = scores_all(qq, kk, T, N, d, p.beta, c.threads);
      std::vector<double> stds;  // per problem: the spread of its N scores
      for (std::int64_t tr = 0; tr < T; ++tr)
        stds.push_back(std::sqrt(variance_of(std::vector<double>(s.begin() + tr * N, s.begin() + (tr + 1) * N)).value));
      std::vector<double> maxw, ent;
      max_and_entropy(weights(qq, kk, T, N, d, p.beta, c.threads), T, N, maxw, ent);
      const Estimate sd = mean_of(stds), h = mean_of(ent);
      t.add({p.name, d, p.beta, sd.value, sd.lo(), sd.hi(), h.value, h.lo(), h.hi(), mean_of(maxw).value});
    }
  }
  return t;
}

}  // namespace sdpa::lab
