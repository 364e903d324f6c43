// nn/model.hpp — a small pre-LN decoder-only transformer whose attention is the
// library's sdpa::forward/backward, with one temperature policy for every head.
//
//   x0 = wte[tok] + wpe[pos]                                     (B, T, C)
//   per layer l:  a = LN1(x);  qkv = a·W_qkv + b_qkv             (B, T, 3C)
//                 o = attention_β(qkv);  x = x + o·W_o + b_o
//                 m = LN2(x);  x = x + GELU(m·W_fc + b_fc)·W_proj + b_proj
//   logits = LN_f(x)·W_lm                                        (B, T, V)
//   loss = cross-entropy on the positions with a target
//
// Parameters, their gradients and AdamW's moments are each one contiguous arena;
// a ParamLayout gives every tensor's offset, so a checkpoint is four flat arrays.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nn/attention.hpp"
#include "nn/crossentropy.hpp"
#include "nn/init.hpp"
#include "nn/policy.hpp"

namespace sdpa::nn {

struct ModelConfig {
  i64 vocab = 66, max_pos = 32, C = 64, H = 4, L = 2;
  Policy policy{};
  Init init{};
  std::uint64_t seed = 1;
  int threads = 1;
  i64 D() const { return C / H; }
};

/// Offsets of every parameter tensor in the arena.
struct ParamLayout {
  struct Layer {
    i64 ln1w, ln1b, wqkv, bqkv, wo, bo, ln2w, ln2b, wfc, bfc, wproj, bproj;
  };
  i64 wte, wpe, lnfw, lnfb, wlm, theta;  // theta (L, H): log-temperatures
  std::vector<Layer> layers;
  i64 total = 0;
  std::vector<unsigned char> decay;  // (total) 1 for matrices AdamW decays
};

/// What one forward measured per layer (sigma_x, grad norms) and per head, row-major (L, H).
struct Stats {
  std::vector<double> beta, sigma_wq, sigma_wk, score_std, entropy, max_weight;  // (L, H)
  std::vector<double> sigma_x;                                                   // (L)
  std::vector<double> gq, gk, gv, go;  // (L) ‖dL/dq‖, ‖dL/dk‖, ‖dL/dv‖, ‖dL/do‖ (o: attention output)
};

template <class T>
class Model {
 public:
  explicit Model(const ModelConfig& cfg);

  ModelConfig cfg;
  ParamLayout layout;
  std::vector<T> params, grads;
  /// adaptive_scores' smoothed score std per (L, H); 0 = not measured yet.
  std::vector<double> score_ema;
  /// β used by the last forward, (L, H).
  std::vector<double> beta;
  /// When set, every head uses these β (L, H) instead of the policy's (the ensemble rule).
  std::optional<std::vector<double>> frozen_beta;

  /// Forward on one batch; returns the loss (mean over target positions).
  /// update_state: adaptive_scores folds this batch into its moving average (training).
  /// stats: also measure the per-head statistics (costs a little).
  CeResult forward(const int* tok, const int* tgt, const int* pos0, i64 B, i64 Tn, bool update_state,
                   Stats* stats = nullptr);
  /// Backward of the last forward: grads += dL/dparams (zero them first). Fills the
  /// gradient norms of stats when given.
  void backward(Stats* stats = nullptr);
  void zero_grad();
  /// The last forward's logits, (B, T, V): what sampling draws from.
  const std::vector<T>& logits() const { return logits_; }

  /// What layer l's attention read in the last forward: row r = b·T + t of q' (k', v) at
  /// q + r·qk_stride (k + r·qk_stride, v + r·v_stride), heads side by side (head h at h·D).
  /// q', k' are the transformed q and k where the policy transforms them (nn/attention.hpp).
  struct AttentionInputs {
    const T *q, *k, *v;
    i64 qk_stride, v_stride;
  };
  AttentionInputs attention_inputs(i64 l) const;

 private:
  struct LayerActs {
    std::vector<T> x, ln1, ln1_mean, ln1_rstd, qkv, att, x2, ln2, ln2_mean, ln2_rstd, fc, fcg;
    AttnSaved<T> saved;
    std::vector<double> beta;  // (H)
  };
  i64 B_ = 0, T_ = 0;
  std::vector<int> tok_, tgt_, pos0_;
  std::vector<LayerActs> acts_;
  std::vector<T> xf_, lnf_, lnf_mean_, lnf_rstd_, logits_, probs_;
  // Work buffers of forward and backward, kept between steps so that a step allocates nothing.
  std::vector<T> x_, tmp_;                                                          // (B, T, C)
  std::vector<T> dlogits_, dx_, dtmp_, dbranch_, dres_, datt_, dfc_, dfcg_, dqkv_;  // (B, T, V | C | 4C | 3C)
  i64 counted_ = 0;
  void compute_beta(i64 l, LayerActs& a, bool update_state, Stats* stats);
  void head_stats(i64 l, const LayerActs& a, Stats& st) const;
};

extern template class Model<float>;
extern template class Model<double>;

/// Population standard deviation of n values.
template <class T>
double std_of(const T* x, i64 n, i64 stride = 1);

}  // namespace sdpa::nn
