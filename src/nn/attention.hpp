// nn/attention.hpp — the attention core of a multi-head attention layer: per-head
// β, an optional transform of q and k, then the library's sdpa::forward/backward
// (causal, top-left). The projections around it (W_q, W_k, W_v from one fused
// linear, W_o after it) are nn/linear.hpp; the model wires them (nn/model.cpp).
//
//   qkv (B, T, 3C): columns [0,C) q, [C,2C) k, [2C,3C) v, head h at h·D within each
//   out (B, T, C): heads concatenated        lse (B, H, T)
//
// Transforms of q and k (what the temperature policy asks for):
//   plain:      q' = q, k' = k                     s_ij = β_h · q_i·k_j
//   normalize:  q' = q/‖q‖, k' = k/‖k‖ (per head)  s_ij = β_h · cos(q_i, k_j)     (qk_norm)
//   log_n:      q'_i = ln(max(i+1, 2)) · q_i        s_ij = β_h · ln(n_i) · q_i·k_j  (n_i keys seen)
// With β_h = exp(θ_h) (learned, qk_norm) the layer also returns dθ_h: since
// dq'_i = β Σ_j dS_ij k'_j, Σ_i q'_i·dq'_i = β Σ_ij dS_ij q'_i·k'_j = β dL/dβ = dL/dθ.
#pragma once

#include <algorithm>
#include <vector>

#include "nn/common.hpp"
#include "sdpa/attention.hpp"
#include "sdpa/reference.hpp"

namespace sdpa::nn {

enum class QkTransform { plain, normalize, log_n };

struct AttnDims {
  i64 B, T, C, H;
  i64 D() const { return C / H; }
};

namespace detail {
inline void core_forward(View4<const float> q, View4<const float> k, View4<const float> v, View4<float> o,
                         View3<float> l, const Options& opt) {
  sdpa::forward(q, k, v, o, l, opt);
}
inline void core_forward(View4<const double> q, View4<const double> k, View4<const double> v, View4<double> o,
                         View3<double> l, const Options& opt) {
  sdpa::reference::forward<double, double>(q, k, v, o, l, opt);
}
inline void core_backward(View4<const float> q, View4<const float> k, View4<const float> v, View4<const float> o,
                          View3<const float> l, View4<const float> d, View4<float> dq, View4<float> dk, View4<float> dv,
                          const Options& opt) {
  sdpa::backward(q, k, v, o, l, d, dq, dk, dv, opt);
}
inline void core_backward(View4<const double> q, View4<const double> k, View4<const double> v, View4<const double> o,
                          View3<const double> l, View4<const double> d, View4<double> dq, View4<double> dk,
                          View4<double> dv, const Options& opt) {
  sdpa::reference::backward<double, double>(q, k, v, o, l, d, dq, dk, dv, opt);
}
/// Heads [h, h + n) of a (B, T, W) row buffer whose head columns start at `col`: a
/// (B, n, T, D) view.
template <class T>
View4<T> heads(T* base, const AttnDims& s, i64 width, i64 col, i64 h, i64 n) {
  return {base + col + h * s.D(), {s.B, n, s.T, s.D()}, {s.T * width, s.D(), width, 1}};
}
template <class T>
View3<T> lse_heads(T* lse, const AttnDims& s, i64 h, i64 n) {
  return {lse + h * s.T, {s.B, n, s.T}, {s.H * s.T, s.T, 1}};
}
/// Calls f(h, n) for each run [h, h + n) of consecutive heads with the same β: one
/// library call per run instead of per head (one β, e.g. 1/√d_k, is one call), which
/// gives the library B·n items to spread over its threads. A head's result does not
/// depend on which other heads share its call.
template <class F>
void for_each_beta_run(const double* beta, i64 H, F&& f) {
  for (i64 h = 0; h < H;) {
    i64 n = 1;
    while (h + n < H && beta[h + n] == beta[h]) ++n;
    f(h, n);
    h += n;
  }
}
}  // namespace detail

/// Scale of query i under log_n.
inline double log_n_factor(i64 i) { return std::log(static_cast<double>(std::max<i64>(i + 1, 2))); }

/// The buffers one attention layer keeps between forward and backward.
template <class T>
struct AttnSaved {
  std::vector<T> qk;     // (B, T, 2C) q', k' when the transform is not plain
  std::vector<T> norms;  // (B, T, 2H) ‖q‖, ‖k‖ per head (normalize)
  std::vector<T> lse;    // (B, H, T)
};

/// The library options of one head: its β, causal top-left, the threads.
inline Options head_options(double beta, int threads) {
  Options opt;
  opt.scale = beta;
  opt.causal = Causal::top_left;
  opt.threads = threads;
  return opt;
}

/// out = concat_h softmax(β_h q'_h k'_hᵀ, causal) v_h
///   out (B, T, C)   qkv (B, T, 3C)   beta (H)
template <class T>
void attention_forward(T* out, AttnSaved<T>& sv, const T* qkv, const double* beta, QkTransform tr, const AttnDims& s,
                       int threads) {
  const i64 B = s.B, Tn = s.T, C = s.C, H = s.H, D = s.D();
  sv.lse.assign(static_cast<std::size_t>(B * H * Tn), T(0));
  const T* qk_src = qkv;  // where q' and k' live
  i64 qk_width = 3 * C;
  if (tr != QkTransform::plain) {
    sv.qk.assign(static_cast<std::size_t>(B * Tn * 2 * C), T(0));
    if (tr == QkTransform::normalize) sv.norms.assign(static_cast<std::size_t>(B * Tn * 2 * H), T(0));
    split(B * Tn, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r) {
        const i64 t = r % Tn;
        for (i64 part = 0; part < 2; ++part)
          for (i64 h = 0; h < H; ++h) {
            const T* x = qkv + r * 3 * C + part * C + h * D;
            T* y = sv.qk.data() + r * 2 * C + part * C + h * D;
            T f = 1;
            if (tr == QkTransform::normalize) {
              T n2 = 0;
              for (i64 d = 0; d < D; ++d) n2 += x[d] * x[d];
              const T n = std::sqrt(n2);
              sv.norms[static_cast<std::size_t>(r * 2 * H + part * H + h)] = n;
              f = n > T(0) ? T(1) / n : T(0);
            } else if (part == 0) {
              f = static_cast<T>(log_n_factor(t));
            }
            for (i64 d = 0; d < D; ++d) y[d] = x[d] * f;
          }
      }
    });
    qk_src = sv.qk.data();
    qk_width = 2 * C;
  }
  detail::for_each_beta_run(beta, H, [&](i64 h, i64 n) {
    detail::core_forward(detail::heads<const T>(qk_src, s, qk_width, 0, h, n),
                         detail::heads<const T>(qk_src, s, qk_width, C, h, n),
                         detail::heads<const T>(qkv, s, 3 * C, 2 * C, h, n), detail::heads<T>(out, s, C, 0, h, n),
                         detail::lse_heads<T>(sv.lse.data(), s, h, n), head_options(beta[h], threads));
  });
}

/// Inverts the forward: dqkv (B, T, 3C) is written (=); dtheta (H) += dL/dθ_h when
/// non-null (β_h = exp(θ_h)).
template <class T>
void attention_backward(T* dqkv, T* dtheta, const T* dout, const T* out, const AttnSaved<T>& sv, const T* qkv,
                        const double* beta, QkTransform tr, const AttnDims& s, int threads) {
  const i64 B = s.B, Tn = s.T, C = s.C, H = s.H, D = s.D();
  const i64 R = B * Tn;
  thread_local std::vector<T> g;  // dq', dk', dv: separate, as sdpa requires; kept between calls
  g.resize(static_cast<std::size_t>(3 * R * C));
  T* dq = g.data();
  T* dk = dq + R * C;
  T* dv = dk + R * C;
  const T* qk_src = tr == QkTransform::plain ? qkv : sv.qk.data();
  const i64 qk_width = tr == QkTransform::plain ? 3 * C : 2 * C;
  detail::for_each_beta_run(beta, H, [&](i64 h, i64 n) {
    detail::core_backward(
        detail::heads<const T>(qk_src, s, qk_width, 0, h, n), detail::heads<const T>(qk_src, s, qk_width, C, h, n),
        detail::heads<const T>(qkv, s, 3 * C, 2 * C, h, n), detail::heads<const T>(out, s, C, 0, h, n),
        detail::lse_heads<const T>(sv.lse.data(), s, h, n), detail::heads<const T>(dout, s, C, 0, h, n),
        detail::heads<T>(dq, s, C, 0, h, n), detail::heads<T>(dk, s, C, 0, h, n), detail::heads<T>(dv, s, C, 0, h, n),
        head_options(beta[h], threads));
  });
  // dL/dθ_h = Σ_i q'_i · dq'_i (see the top of this file)
  if (dtheta)
    for (i64 r = 0; r < R; ++r)
      for (i64 h = 0; h < H; ++h) {
        T acc = 0;
        for (i64 d = 0; d < D; ++d) acc += qk_src[r * qk_width + h * D + d] * dq[r * C + h * D + d];
        dtheta[h] += acc;
      }
  split(R, [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const i64 t = r % Tn;
      T* dst = dqkv + r * 3 * C;
      for (i64 part = 0; part < 2; ++part) {
        const T* gp = (part == 0 ? dq : dk) + r * C;
        for (i64 h = 0; h < H; ++h) {
          const T* gy = gp + h * D;
          T* gx = dst + part * C + h * D;
          if (tr == QkTransform::normalize) {
            // inverts y = x/‖x‖: dx = (dy − y (y·dy)) / ‖x‖
            const T* y = sv.qk.data() + r * 2 * C + part * C + h * D;
            const T n = sv.norms[static_cast<std::size_t>(r * 2 * H + part * H + h)];
            T ydy = 0;
            for (i64 d = 0; d < D; ++d) ydy += y[d] * gy[d];
            const T inv = n > T(0) ? T(1) / n : T(0);
            for (i64 d = 0; d < D; ++d) gx[d] = (gy[d] - y[d] * ydy) * inv;
          } else {
            const T f = (tr == QkTransform::log_n && part == 0) ? static_cast<T>(log_n_factor(t)) : T(1);
            for (i64 d = 0; d < D; ++d) gx[d] = gy[d] * f;
          }
        }
      }
      std::copy(dv + r * C, dv + (r + 1) * C, dst + 2 * C);
    }
  });
}

}  // namespace sdpa::nn
