// nn/model.cpp — the transformer of model.hpp: wiring the layers, forward and backward.
#include "nn/model.hpp"

#include <algorithm>
#include <cmath>

#include "nn/embedding.hpp"
#include "nn/gelu.hpp"
#include "nn/layernorm.hpp"
#include "nn/linear.hpp"
#include "nn/residual.hpp"

namespace sdpa::nn {

template <class T>
double std_of(const T* x, i64 n, i64 stride) {
  double m = 0;
  for (i64 i = 0; i < n; ++i) m += x[i * stride];
  m /= static_cast<double>(n);
  double v = 0;
  for (i64 i = 0; i < n; ++i) v += (x[i * stride] - m) * (x[i * stride] - m);
  return std::sqrt(v / static_cast<double>(n));
}
template double std_of<float>(const float*, i64, i64);
template double std_of<double>(const double*, i64, i64);

namespace {

// Std of the entries of columns [col, col+w) of a (rows, ld) matrix.
template <class T>
double block_std(const T* m, i64 rows, i64 ld, i64 col, i64 w) {
  double s = 0, s2 = 0;
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = col; c < col + w; ++c) s += m[r * ld + c];
  const double n = static_cast<double>(rows * w), mean = s / n;
  for (i64 r = 0; r < rows; ++r)
    for (i64 c = col; c < col + w; ++c) s2 += (m[r * ld + c] - mean) * (m[r * ld + c] - mean);
  return std::sqrt(s2 / n);
}

template <class T>
double norm_of(const std::vector<T>& g, i64 R, i64 ld, i64 col, i64 w) {
  double s = 0;
  for (i64 r = 0; r < R; ++r)
    for (i64 c = col; c < col + w; ++c) s += static_cast<double>(g[r * ld + c]) * g[r * ld + c];
  return std::sqrt(s);
}

constexpr i64 kStatSeqs = 4;  // sequences of the batch the per-head statistics look at

}  // namespace

template <class T>
Model<T>::Model(const ModelConfig& c) : cfg(c) {
  if (c.C <= 0 || c.H <= 0 || c.L <= 0 || c.C % c.H != 0)
    throw Error("model: d_model " + std::to_string(c.C) + " must be a positive multiple of heads " +
                std::to_string(c.H) + " (and layers >= 1)");
  const i64 C = c.C, V = c.vocab, L = c.L, H = c.H;
  i64 off = 0;
  auto take = [&](i64 n, bool decay) {
    const i64 o = off;
    off += n;
    layout.decay.resize(static_cast<std::size_t>(off), decay ? 1 : 0);
    return o;
  };
  layout.wte = take(V * C, true);
  layout.wpe = take(c.max_pos * C, true);
  for (i64 l = 0; l < L; ++l) {
    ParamLayout::Layer ly{};
    ly.ln1w = take(C, false);
    ly.ln1b = take(C, false);
    ly.wqkv = take(C * 3 * C, true);
    ly.bqkv = take(3 * C, false);
    ly.wo = take(C * C, true);
    ly.bo = take(C, false);
    ly.ln2w = take(C, false);
    ly.ln2b = take(C, false);
    ly.wfc = take(C * 4 * C, true);
    ly.bfc = take(4 * C, false);
    ly.wproj = take(4 * C * C, true);
    ly.bproj = take(C, false);
    layout.layers.push_back(ly);
  }
  layout.lnfw = take(C, false);
  layout.lnfb = take(C, false);
  layout.wlm = take(C * V, true);
  layout.theta = take(L * H, false);
  layout.total = off;
  params.assign(static_cast<std::size_t>(off), T(0));
  grads.assign(static_cast<std::size_t>(off), T(0));
  score_ema.assign(static_cast<std::size_t>(L * H), 0.0);
  beta.assign(static_cast<std::size_t>(L * H), 0.0);

  Rng rng = stream(c.seed, 1);
  T* p = params.data();
  for (i64 i = 0; i < (V + c.max_pos) * C; ++i) p[layout.wte + i] = static_cast<T>(0.02 * rng.normal());
  for (const auto& ly : layout.layers) {
    for (i64 part = 0; part < 3; ++part) init_matrix(p + ly.wqkv + part * C, C, C, 3 * C, c.init, rng);
    init_matrix(p + ly.wo, C, C, C, c.init, rng);
    init_matrix(p + ly.wfc, C, 4 * C, 4 * C, c.init, rng);
    init_matrix(p + ly.wproj, 4 * C, C, C, c.init, rng);
    std::fill(p + ly.ln1w, p + ly.ln1w + C, T(1));
    std::fill(p + ly.ln2w, p + ly.ln2w + C, T(1));
  }
  std::fill(p + layout.lnfw, p + layout.lnfw + C, T(1));
  init_matrix(p + layout.wlm, C, V, V, c.init, rng);
  for (i64 i = 0; i < L * H; ++i) p[layout.theta + i] = static_cast<T>(c.policy.theta_init(c.D()));
}

template <class T>
void Model<T>::zero_grad() {
  T* g = grads.data();
  split(layout.total, [&](i64 i0, i64 i1) { std::fill(g + i0, g + i1, T(0)); });
}

template <class T>
void Model<T>::compute_beta(i64 l, LayerActs& a, bool update_state, Stats* st) {
  const i64 C = cfg.C, H = cfg.H, D = cfg.D(), R = B_ * T_;
  const T* wqkv = params.data() + layout.layers[static_cast<std::size_t>(l)].wqkv;
  const PolicyKind k = cfg.policy.kind;
  const bool need_sigma = st || k == PolicyKind::adaptive;
  const bool need_scores = st || k == PolicyKind::adaptive_scores;
  const double sx = need_sigma ? std_of(a.ln1.data(), R * C) : 0.0;
  if (st) st->sigma_x[static_cast<std::size_t>(l)] = sx;
  a.beta.assign(static_cast<std::size_t>(H), 0.0);
  for (i64 h = 0; h < H; ++h) {
    const std::size_t lh = static_cast<std::size_t>(l * H + h);
    double swq = 0, swk = 0, sstd = 0;
    if (need_sigma) {
      swq = block_std(wqkv, C, 3 * C, h * D, D);
      swk = block_std(wqkv, C, 3 * C, C + h * D, D);
    }
    if (need_scores) {  // std of raw q_i·k_j over the causal pairs of the first sequences
      double s = 0, s2 = 0, n = 0;
      for (i64 b = 0; b < std::min(B_, kStatSeqs); ++b)
        for (i64 i = 0; i < T_; ++i)
          for (i64 j = 0; j <= i; ++j) {
            const T* q = a.qkv.data() + (b * T_ + i) * 3 * C + h * D;
            const T* kk = a.qkv.data() + (b * T_ + j) * 3 * C + C + h * D;
            double dot = 0;
            for (i64 d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * kk[d];
            s += dot;
            s2 += dot * dot;
            n += 1;
          }
      sstd = std::sqrt(std::max(0.0, s2 / n - (s / n) * (s / n)));
    }
    double b = 0;
    switch (k) {
      case PolicyKind::inv_sqrt_dk:
      case PolicyKind::log_n: b = 1.0 / std::sqrt(static_cast<double>(D)); break;
      case PolicyKind::none: b = 1.0; break;
      case PolicyKind::inv_dk: b = 1.0 / static_cast<double>(D); break;
      case PolicyKind::fixed: b = cfg.policy.value; break;
      case PolicyKind::learned:
      case PolicyKind::qk_norm:
        b = std::exp(static_cast<double>(params[static_cast<std::size_t>(layout.theta) + lh]));
        break;
      case PolicyKind::adaptive: b = adaptive_beta(static_cast<double>(C), sx, swq, swk, static_cast<double>(D)); break;
      case PolicyKind::adaptive_scores: {
        double& e = score_ema[lh];
        if (update_state) e = e == 0.0 ? sstd : kScoreEma * e + (1.0 - kScoreEma) * sstd;
        b = 1.0 / (e == 0.0 ? sstd : e);
        break;
      }
    }
    if (frozen_beta) b = (*frozen_beta)[lh];
    if (!std::isfinite(b) || b <= 0) b = 1.0 / std::sqrt(static_cast<double>(D));  // degenerate σ = 0
    a.beta[static_cast<std::size_t>(h)] = b;
    beta[lh] = b;
    if (st) {
      st->beta[lh] = b;
      st->sigma_wq[lh] = swq;
      st->sigma_wk[lh] = swk;
      st->score_std[lh] = sstd;
    }
  }
}

template <class T>
typename Model<T>::AttentionInputs Model<T>::attention_inputs(i64 l) const {
  if (l < 0 || l >= static_cast<i64>(acts_.size()) || acts_[static_cast<std::size_t>(l)].qkv.empty())
    throw Error("attention_inputs: no forward has run layer " + std::to_string(l));
  const LayerActs& a = acts_[static_cast<std::size_t>(l)];
  const i64 C = cfg.C;
  const bool plain = cfg.policy.transform() == QkTransform::plain;
  const T* qk = plain ? a.qkv.data() : a.saved.qk.data();
  return {qk, qk + C, a.qkv.data() + 2 * C, plain ? 3 * C : 2 * C, 3 * C};
}

template <class T>
void Model<T>::head_stats(i64 l, const LayerActs& a, Stats& st) const {
  const i64 H = cfg.H, D = cfg.D();
  const AttentionInputs in = attention_inputs(l);
  const i64 w = in.qk_stride;
  for (i64 h = 0; h < H; ++h) {
    double ent = 0, mx = 0, n = 0;
    for (i64 b = 0; b < std::min(B_, kStatSeqs); ++b)
      for (i64 i = 0; i < T_; ++i) {
        const T* q = in.q + (b * T_ + i) * w + h * D;
        const double lse = a.saved.lse[static_cast<std::size_t>((b * H + h) * T_ + i)];
        double e = 0, m = 0;
        for (i64 j = 0; j <= i; ++j) {
          const T* k = in.k + (b * T_ + j) * w + h * D;
          double dot = 0;
          for (i64 d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * k[d];
          const double logp = a.beta[static_cast<std::size_t>(h)] * dot - lse;
          const double p = std::exp(logp);
          if (p > 0) e -= p * logp;
          m = std::max(m, p);
        }
        ent += e;
        mx += m;
        n += 1;
      }
    st.entropy[static_cast<std::size_t>(l * H + h)] = ent / n;
    st.max_weight[static_cast<std::size_t>(l * H + h)] = mx / n;
  }
}

template <class T>
CeResult Model<T>::forward(const int* tok, const int* tgt, const int* pos0, i64 B, i64 Tn, bool update_state,
                           Stats* st) {
  const i64 C = cfg.C, H = cfg.H, L = cfg.L, V = cfg.vocab, R = B * Tn;
  for (i64 i = 0; i < R; ++i)
    if (tok[i] < 0 || tok[i] >= V) throw Error("model: token " + std::to_string(tok[i]) + " outside the vocabulary");
  for (i64 b = 0; b < B; ++b)
    if ((pos0 ? pos0[b] : 0) + Tn > cfg.max_pos)
      throw Error("model: sequence of " + std::to_string(Tn) + " tokens needs more than the " +
                  std::to_string(cfg.max_pos) + " learned positions");
  B_ = B;
  T_ = Tn;
  tok_.assign(tok, tok + R);
  tgt_.assign(tgt, tgt + R);
  if (pos0)
    pos0_.assign(pos0, pos0 + B);
  else
    pos0_.clear();
  if (st) {
    for (auto* v : {&st->beta, &st->sigma_wq, &st->sigma_wk, &st->score_std, &st->entropy, &st->max_weight})
      v->assign(static_cast<std::size_t>(L * H), 0.0);
    for (auto* v : {&st->sigma_x, &st->gq, &st->gk, &st->gv, &st->go}) v->assign(static_cast<std::size_t>(L), 0.0);
  }
  const T* p = params.data();
  const auto RC = static_cast<std::size_t>(R * C);
  acts_.resize(static_cast<std::size_t>(L));
  x_.resize(RC);
  tmp_.resize(RC);
  std::vector<T>& x = x_;
  std::vector<T>& tmp = tmp_;
  embedding_forward(x.data(), tok, pos0_.empty() ? nullptr : pos0_.data(), p + layout.wte, p + layout.wpe, B, Tn, C);
  const AttnDims dims{B, Tn, C, H};
  for (i64 l = 0; l < L; ++l) {
    const auto& ly = layout.layers[static_cast<std::size_t>(l)];
    LayerActs& a = acts_[static_cast<std::size_t>(l)];
    a.x = x;
    a.ln1.resize(RC);
    a.ln1_mean.resize(static_cast<std::size_t>(R));
    a.ln1_rstd.resize(static_cast<std::size_t>(R));
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x.data(), p + ly.ln1w, p + ly.ln1b, R, C);
    a.qkv.resize(3 * RC);
    linear_forward(a.qkv.data(), a.ln1.data(), p + ly.wqkv, p + ly.bqkv, R, C, 3 * C);
    compute_beta(l, a, update_state, st);
    a.att.resize(RC);
    attention_forward(a.att.data(), a.saved, a.qkv.data(), a.beta.data(), cfg.policy.transform(), dims, cfg.threads);
    if (st) head_stats(l, a, *st);
    linear_forward(tmp.data(), a.att.data(), p + ly.wo, p + ly.bo, R, C, C);
    a.x2.resize(RC);
    residual_forward(a.x2.data(), x.data(), tmp.data(), R * C);
    a.ln2.resize(RC);
    a.ln2_mean.resize(static_cast<std::size_t>(R));
    a.ln2_rstd.resize(static_cast<std::size_t>(R));
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.x2.data(), p + ly.ln2w, p + ly.ln2b, R, C);
    a.fc.resize(4 * RC);
    a.fcg.resize(4 * RC);
    linear_forward(a.fc.data(), a.ln2.data(), p + ly.wfc, p + ly.bfc, R, C, 4 * C);
    gelu_forward(a.fcg.data(), a.fc.data(), 4 * R * C);
    linear_forward(tmp.data(), a.fcg.data(), p + ly.wproj, p + ly.bproj, R, 4 * C, C);
    residual_forward(x.data(), a.x2.data(), tmp.data(), R * C);
  }
  xf_ = x;
  lnf_.resize(RC);
  lnf_mean_.resize(static_cast<std::size_t>(R));
  lnf_rstd_.resize(static_cast<std::size_t>(R));
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), xf_.data(), p + layout.lnfw, p + layout.lnfb, R,
                    C);
  logits_.resize(static_cast<std::size_t>(R * V));
  probs_.resize(static_cast<std::size_t>(R * V));
  linear_forward(logits_.data(), lnf_.data(), p + layout.wlm, static_cast<const T*>(nullptr), R, C, V);
  const CeResult res = crossentropy_forward(probs_.data(), logits_.data(), tgt, R, V);
  counted_ = res.counted;
  return res;
}

template <class T>
void Model<T>::backward(Stats* st) {
  const i64 C = cfg.C, H = cfg.H, L = cfg.L, V = cfg.vocab, R = B_ * T_;
  const auto RC = static_cast<std::size_t>(R * C);
  const T* p = params.data();
  T* g = grads.data();
  for (auto* buf : {&dx_, &dtmp_, &dbranch_, &dres_, &datt_}) buf->resize(RC);
  dlogits_.resize(static_cast<std::size_t>(R * V));
  dfc_.resize(4 * RC);
  dfcg_.resize(4 * RC);
  dqkv_.resize(3 * RC);
  std::vector<T>&dlogits = dlogits_, &dx = dx_, &dtmp = dtmp_, &dbranch = dbranch_, &dres = dres_, &datt = datt_,
  &dfc = dfc_, &dfcg = dfcg_, &dqkv = dqkv_;
  crossentropy_backward(dlogits.data(), probs_.data(), tgt_.data(), R, V, counted_);
  linear_backward(dtmp.data(), g + layout.wlm, static_cast<T*>(nullptr), dlogits.data(), lnf_.data(), p + layout.wlm, R,
                  C, V);
  layernorm_backward(dx.data(), g + layout.lnfw, g + layout.lnfb, dtmp.data(), xf_.data(), p + layout.lnfw,
                     lnf_mean_.data(), lnf_rstd_.data(), R, C);
  const AttnDims dims{B_, T_, C, H};
  for (i64 l = L - 1; l >= 0; --l) {
    const auto& ly = layout.layers[static_cast<std::size_t>(l)];
    const LayerActs& a = acts_[static_cast<std::size_t>(l)];
    // x_out = x2 + mlp(x2): the residual sends dx to both (residual_backward's copies
    // skipped: the MLP branch reads dx itself, and dres = dx + the branch's dx2 below)
    linear_backward(dfcg.data(), g + ly.wproj, g + ly.bproj, dx.data(), a.fcg.data(), p + ly.wproj, R, 4 * C, C);
    gelu_backward(dfc.data(), dfcg.data(), a.fc.data(), 4 * R * C);
    linear_backward(dtmp.data(), g + ly.wfc, g + ly.bfc, dfc.data(), a.ln2.data(), p + ly.wfc, R, C, 4 * C);
    layernorm_backward(dbranch.data(), g + ly.ln2w, g + ly.ln2b, dtmp.data(), a.x2.data(), p + ly.ln2w,
                       a.ln2_mean.data(), a.ln2_rstd.data(), R, C);
    add_into(dres.data(), dx.data(), dbranch.data(), R * C);  // dL/dx2
    // x2 = x + att·W_o + b_o: both receive dres (dx = dres + the attention branch's below)
    linear_backward(datt.data(), g + ly.wo, g + ly.bo, dres.data(), a.att.data(), p + ly.wo, R, C, C);
    T* dtheta = cfg.policy.has_theta() && !frozen_beta ? g + layout.theta + l * H : nullptr;
    attention_backward(dqkv.data(), dtheta, datt.data(), a.att.data(), a.saved, a.qkv.data(), a.beta.data(),
                       cfg.policy.transform(), dims, cfg.threads);
    if (st) {
      st->gq[static_cast<std::size_t>(l)] = norm_of(dqkv, R, 3 * C, 0, C);
      st->gk[static_cast<std::size_t>(l)] = norm_of(dqkv, R, 3 * C, C, C);
      st->gv[static_cast<std::size_t>(l)] = norm_of(dqkv, R, 3 * C, 2 * C, C);
      st->go[static_cast<std::size_t>(l)] = norm_of(datt, R, C, 0, C);
    }
    linear_backward(dtmp.data(), g + ly.wqkv, g + ly.bqkv, dqkv.data(), a.ln1.data(), p + ly.wqkv, R, C, 3 * C);
    layernorm_backward(dbranch.data(), g + ly.ln1w, g + ly.ln1b, dtmp.data(), a.x.data(), p + ly.ln1w,
                       a.ln1_mean.data(), a.ln1_rstd.data(), R, C);
    add_into(dx.data(), dres.data(), dbranch.data(), R * C);
  }
  embedding_backward(g + layout.wte, g + layout.wpe, dx.data(), tok_.data(), pos0_.empty() ? nullptr : pos0_.data(), B_,
                     T_, C);
}

template class Model<float>;
template class Model<double>;

}  // namespace sdpa::nn
