// reference.cpp — the oracle: one head at a time, the whole (Nq, Nk) score
// matrix in memory, accumulation in Acc. Written to be read, not to be fast.
//
// Per head (b, h), with kv head g = h / group:
//   x_ij = q_i · k_j                     raw dot product
//   s_ij = β x_ij                        the temperature
//   s_ij = c tanh(s_ij / c)              soft-cap, if any
//   s_ij = s_ij + mask_ij, or -inf where the key is masked
//   p_ij = exp(s_ij - lse_i)             lse_i = log Σ_j exp(s_ij)  (+ exp(sink_h) with a sink)
//   out_i = Σ_{j: p_ij != 0} p_ij v_j    a key of zero weight contributes nothing
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention/problem.hpp"
#include "sdpa/reference.hpp"

namespace sdpa::reference {
namespace {

using detail::i64;
using detail::Problem;

template <class Acc>
constexpr Acc neg_inf() {
  return -std::numeric_limits<Acc>::infinity();
}

// Head h's sink logit, or -inf where the call has none.
template <class Acc>
Acc sink_of(const Problem& p, i64 h) {
  return p.has_sinks ? static_cast<Acc>(p.sinks(h)) : neg_inf<Acc>();
}

// Scores of head (b, h) into S (Nq × Nk, row-major); also the soft-cap's tanh
// values into T when a soft-cap is set (needed by the backward).
template <class T, class Acc>
void scores(const Problem& p, const View4<const T>& q, const View4<const T>& k, i64 b, i64 h, std::vector<Acc>& S,
            std::vector<Acc>& Tanh) {
  const i64 g = h / p.group;
  const Acc beta = static_cast<Acc>(p.scale);
  const Acc cap = static_cast<Acc>(p.softcap);
  S.assign(static_cast<std::size_t>(p.Nq * p.Nk), Acc(0));
  Tanh.assign(p.has_softcap ? S.size() : 0, Acc(0));
  for (i64 i = 0; i < p.Nq; ++i) {
    for (i64 j = 0; j < p.Nk; ++j) {
      Acc x = 0;
      for (i64 d = 0; d < p.Dk; ++d) x += static_cast<Acc>(q(b, h, i, d)) * static_cast<Acc>(k(b, g, j, d));
      Acc s = beta * x;
      if (p.has_softcap) {
        const Acc t = std::tanh(s / cap);
        Tanh[i * p.Nk + j] = t;
        s = cap * t;
      }
      const float bias = p.explicit_bias(b, h, i, j);
      if (!p.visible(i, j) || bias == -std::numeric_limits<float>::infinity())
        s = neg_inf<Acc>();
      else
        s += static_cast<Acc>(bias);
      S[i * p.Nk + j] = s;
    }
  }
}

}  // namespace

template <class T, class Acc>
void forward(View4<const T> q, View4<const T> k, View4<const T> v, View4<T> out, View3<T> lse, const Options& opt) {
  const Problem p = detail::validate_forward<T>(q, k, v, out, lse, opt);
  std::vector<Acc> S, Tanh, o(static_cast<std::size_t>(p.Dv));
  for (i64 b = 0; b < p.B; ++b)
    for (i64 h = 0; h < p.Hq; ++h) {
      const i64 g = h / p.group;
      scores<T, Acc>(p, q, k, b, h, S, Tanh);
      for (i64 i = 0; i < p.Nq; ++i) {
        const Acc* s = &S[i * p.Nk];
        // Row maximum, ignoring NaN (a NaN score still reaches the output through p).
        const Acc sink = sink_of<Acc>(p, h);
        Acc m = sink;
        for (i64 j = 0; j < p.Nk; ++j)
          if (s[j] > m) m = s[j];
        const Acc shift = (m == neg_inf<Acc>()) ? Acc(0) : m;
        Acc l = std::exp(sink - shift);  // the sink's term (0 without one); it has no value
        std::fill(o.begin(), o.end(), Acc(0));
        const Acc keep_scale = static_cast<Acc>(p.dropout.keep_scale());
        for (i64 j = 0; j < p.Nk; ++j) {
          const Acc pij = std::exp(s[j] - shift);
          if (pij == Acc(0)) continue;
          l += pij;  // the normaliser is the undropped one
          if (p.has_dropout && !p.dropout.keep(b, h, p.Hq, i, j)) continue;
          const Acc w = p.has_dropout ? pij * keep_scale : pij;
          for (i64 e = 0; e < p.Dv; ++e) o[e] += w * static_cast<Acc>(v(b, g, j, e));
        }
        const bool empty_row = (l == Acc(0));  // no key and no sink
        for (i64 e = 0; e < p.Dv; ++e) out(b, h, i, e) = empty_row ? T(0) : static_cast<T>(o[e] / l);
        if (!lse.empty())
          lse(b, h, i) = empty_row ? static_cast<T>(neg_inf<Acc>()) : static_cast<T>(shift + std::log(l));
      }
    }
}

// Backward, with P recomputed from the given lse:
//   D_i   = Σ_e dout_ie out_ie
//   dP_ij = dout_i · v_j
//   dS_ij = p_ij (dP_ij - D_i)                    (0 where p_ij = 0)
//   dX_ij = dS_ij · β · (1 - tanh²)               chain through soft-cap and β; dX = ∂L/∂(q_i·k_j)
//   dq_i = Σ_j dX_ij k_j,  dk_j = Σ_i dX_ij q_i,  dv_j = Σ_i p_ij dout_i   (summed over the GQA group)
//   dsink_h = Σ_{b,i} p_sink,i (0 - D_i)          a sink is a key with no value: dP = 0
template <class T, class Acc>
void backward(View4<const T> q, View4<const T> k, View4<const T> v, View4<const T> out, View3<const T> lse,
              View4<const T> dout, View4<T> dq, View4<T> dk, View4<T> dv, const Options& opt) {
  const Problem p = detail::validate_backward<T>(q, k, v, out, lse, dout, dq, dk, dv, opt);
  const Acc beta = static_cast<Acc>(p.scale);
  std::vector<Acc> S, Tanh;
  std::vector<Acc> gq(static_cast<std::size_t>(p.Nq * p.Dk));
  std::vector<Acc> gk(static_cast<std::size_t>(p.Hkv * p.Nk * p.Dk)), gv(static_cast<std::size_t>(p.Hkv * p.Nk * p.Dv));
  std::vector<Acc> gsink(static_cast<std::size_t>(p.Hq), Acc(0));
  for (i64 b = 0; b < p.B; ++b) {
    std::fill(gk.begin(), gk.end(), Acc(0));
    std::fill(gv.begin(), gv.end(), Acc(0));
    for (i64 h = 0; h < p.Hq; ++h) {
      const i64 g = h / p.group;
      scores<T, Acc>(p, q, k, b, h, S, Tanh);
      std::fill(gq.begin(), gq.end(), Acc(0));
      for (i64 i = 0; i < p.Nq; ++i) {
        const Acc L = static_cast<Acc>(lse(b, h, i));
        Acc D = 0;
        for (i64 e = 0; e < p.Dv; ++e) D += static_cast<Acc>(dout(b, h, i, e)) * static_cast<Acc>(out(b, h, i, e));
        const Acc sink = sink_of<Acc>(p, h);
        if (sink != neg_inf<Acc>()) gsink[h] -= std::exp(sink - L) * D;
        for (i64 j = 0; j < p.Nk; ++j) {
          // An empty row (lse = -inf) has p = 0 everywhere.
          const Acc pij = (L == neg_inf<Acc>()) ? Acc(0) : std::exp(S[i * p.Nk + j] - L);
          if (pij == Acc(0)) continue;
          // With dropout, out uses p̃ = p·keep/(1 - p): dv takes p̃, and dP is seen through the
          // mask (dP·keep/(1 - p)); delta = dout·out = Σ_j p_ij (that masked dP) still holds.
          const Acc mask = p.has_dropout ? (p.dropout.keep(b, h, p.Hq, i, j) ? static_cast<Acc>(p.dropout.keep_scale()) : Acc(0)) : Acc(1);
          Acc dP = 0;
          for (i64 e = 0; e < p.Dv; ++e) dP += static_cast<Acc>(dout(b, h, i, e)) * static_cast<Acc>(v(b, g, j, e));
          dP *= mask;
          Acc dX = pij * (dP - D) * beta;
          if (p.has_softcap) {
            const Acc t = Tanh[i * p.Nk + j];
            dX *= (Acc(1) - t * t);
          }
          for (i64 d = 0; d < p.Dk; ++d) {
            gq[i * p.Dk + d] += dX * static_cast<Acc>(k(b, g, j, d));
            gk[(g * p.Nk + j) * p.Dk + d] += dX * static_cast<Acc>(q(b, h, i, d));
          }
          const Acc pv = pij * mask;
          if (pv != Acc(0))
            for (i64 e = 0; e < p.Dv; ++e) gv[(g * p.Nk + j) * p.Dv + e] += pv * static_cast<Acc>(dout(b, h, i, e));
        }
      }
      for (i64 i = 0; i < p.Nq; ++i)
        for (i64 d = 0; d < p.Dk; ++d) dq(b, h, i, d) = static_cast<T>(gq[i * p.Dk + d]);
    }
    for (i64 g = 0; g < p.Hkv; ++g)
      for (i64 j = 0; j < p.Nk; ++j) {
        for (i64 d = 0; d < p.Dk; ++d) dk(b, g, j, d) = static_cast<T>(gk[(g * p.Nk + j) * p.Dk + d]);
        for (i64 e = 0; e < p.Dv; ++e) dv(b, g, j, e) = static_cast<T>(gv[(g * p.Nk + j) * p.Dv + e]);
      }
  }
  if (!opt.dsinks.empty())
    for (i64 h = 0; h < p.Hq; ++h) opt.dsinks(h) = static_cast<float>(gsink[static_cast<std::size_t>(h)]);
}

// The naive 16-bit implementation: the same scores (fp32), then rounding where a 16-bit
// implementation stores a product's operand or result in its dtype.
void forward_naive(Dtype t, View4<const float> q, View4<const float> k, View4<const float> v, View4<float> out,
                   View3<float> lse, const Options& opt, NaiveScores stored) {
  const Problem p = detail::validate_forward<float>(q, k, v, out, lse, opt);
  std::vector<float> S, Tanh, o(static_cast<std::size_t>(p.Dv));
  for (i64 b = 0; b < p.B; ++b)
    for (i64 h = 0; h < p.Hq; ++h) {
      const i64 g = h / p.group;
      scores<float, float>(p, q, k, b, h, S, Tanh);
      if (stored == NaiveScores::dtype)
        for (float& x : S) x = round_to(t, x);  // -inf stays -inf
      for (i64 i = 0; i < p.Nq; ++i) {
        const float* s = &S[i * p.Nk];
        const float sink = sink_of<float>(p, h);
        float m = sink;
        for (i64 j = 0; j < p.Nk; ++j)
          if (s[j] > m) m = s[j];
        const float shift = (m == neg_inf<float>()) ? 0.0f : m;
        float l = std::exp(sink - shift);  // the sink's term (0 without one)
        for (i64 j = 0; j < p.Nk; ++j) l += std::exp(s[j] - shift);
        const bool empty_row = (l == 0.0f);
        std::fill(o.begin(), o.end(), 0.0f);
        for (i64 j = 0; j < p.Nk && !empty_row; ++j) {
          float pij = round_to(t, std::exp(s[j] - shift) / l);  // P in the dtype
          if (p.has_dropout) pij = p.dropout.keep(b, h, p.Hq, i, j) ? round_to(t, pij * static_cast<float>(p.dropout.keep_scale())) : 0.0f;
          if (pij == 0.0f) continue;
          for (i64 e = 0; e < p.Dv; ++e) o[e] += pij * v(b, g, j, e);
        }
        for (i64 e = 0; e < p.Dv; ++e) out(b, h, i, e) = round_to(t, o[e]);
        if (!lse.empty()) lse(b, h, i) = empty_row ? neg_inf<float>() : shift + std::log(l);
      }
    }
}

void backward_naive(Dtype t, View4<const float> q, View4<const float> k, View4<const float> v, View4<const float> out,
                    View3<const float> lse, View4<const float> dout, View4<float> dq, View4<float> dk, View4<float> dv,
                    const Options& opt) {
  const Problem p = detail::validate_backward<float>(q, k, v, out, lse, dout, dq, dk, dv, opt);
  const auto beta = static_cast<float>(p.scale);
  std::vector<float> S, Tanh;
  std::vector<float> gq(static_cast<std::size_t>(p.Nq * p.Dk));
  std::vector<float> gk(static_cast<std::size_t>(p.Hkv * p.Nk * p.Dk)), gv(static_cast<std::size_t>(p.Hkv * p.Nk * p.Dv));
  std::vector<float> gsink(static_cast<std::size_t>(p.Hq), 0.0f);
  for (i64 b = 0; b < p.B; ++b) {
    std::fill(gk.begin(), gk.end(), 0.0f);
    std::fill(gv.begin(), gv.end(), 0.0f);
    for (i64 h = 0; h < p.Hq; ++h) {
      const i64 g = h / p.group;
      scores<float, float>(p, q, k, b, h, S, Tanh);
      std::fill(gq.begin(), gq.end(), 0.0f);
      for (i64 i = 0; i < p.Nq; ++i) {
        const float L = lse(b, h, i);
        float D = 0;
        for (i64 e = 0; e < p.Dv; ++e) D += dout(b, h, i, e) * out(b, h, i, e);
        const float sink = sink_of<float>(p, h);
        if (sink != neg_inf<float>()) gsink[static_cast<std::size_t>(h)] -= std::exp(sink - L) * D;
        for (i64 j = 0; j < p.Nk; ++j) {
          const float pij = (L == neg_inf<float>()) ? 0.0f : round_to(t, std::exp(S[i * p.Nk + j] - L));
          if (pij == 0.0f) continue;
          const float mask = p.has_dropout ? (p.dropout.keep(b, h, p.Hq, i, j) ? static_cast<float>(p.dropout.keep_scale()) : 0.0f) : 1.0f;
          float dP = 0;
          for (i64 e = 0; e < p.Dv; ++e) dP += dout(b, h, i, e) * v(b, g, j, e);
          dP *= mask;
          float dX = pij * (dP - D) * beta;
          if (p.has_softcap) {
            const float th = Tanh[i * p.Nk + j];
            dX *= (1.0f - th * th);
          }
          dX = round_to(t, dX);  // dS, the operand of dq = dS·K and dk = dSᵀ·Q
          for (i64 d = 0; d < p.Dk; ++d) {
            gq[i * p.Dk + d] += dX * k(b, g, j, d);
            gk[(g * p.Nk + j) * p.Dk + d] += dX * q(b, h, i, d);
          }
          const float pv = round_to(t, pij * mask);  // P̃ = P·keep/(1 - p), the operand of dv = P̃ᵀ·dout
          if (pv != 0.0f)
            for (i64 e = 0; e < p.Dv; ++e) gv[(g * p.Nk + j) * p.Dv + e] += pv * dout(b, h, i, e);
        }
      }
      for (i64 i = 0; i < p.Nq; ++i)
        for (i64 d = 0; d < p.Dk; ++d) dq(b, h, i, d) = round_to(t, gq[i * p.Dk + d]);
    }
    for (i64 g = 0; g < p.Hkv; ++g)
      for (i64 j = 0; j < p.Nk; ++j) {
        for (i64 d = 0; d < p.Dk; ++d) dk(b, g, j, d) = round_to(t, gk[(g * p.Nk + j) * p.Dk + d]);
        for (i64 e = 0; e < p.Dv; ++e) dv(b, g, j, e) = round_to(t, gv[(g * p.Nk + j) * p.Dv + e]);
      }
  }
  if (!opt.dsinks.empty())
    for (i64 h = 0; h < p.Hq; ++h) opt.dsinks(h) = gsink[static_cast<std::size_t>(h)];
}

#define SDPA_REFERENCE_INSTANTIATE(T, Acc)                                                                           \
  template void forward<T, Acc>(View4<const T>, View4<const T>, View4<const T>, View4<T>, View3<T>, const Options&); \
  template void backward<T, Acc>(View4<const T>, View4<const T>, View4<const T>, View4<const T>, View3<const T>,     \
                                 View4<const T>, View4<T>, View4<T>, View4<T>, const Options&);
SDPA_REFERENCE_INSTANTIATE(float, double)
SDPA_REFERENCE_INSTANTIATE(double, double)
SDPA_REFERENCE_INSTANTIATE(float, float)
#undef SDPA_REFERENCE_INSTANTIATE

}  // namespace sdpa::reference
