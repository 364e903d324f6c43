// gold.hpp — one attention problem, its fp64 answer and the bound a blockwise (or ring)
// result must meet: the single-call rule of tests/kernel (2 × naive fp32 error + floor)
// plus the merge's terms (merge_tolerance.hpp). Shared by the block and the ring tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "merge_tolerance.hpp"
#include "sdpa/sdpa.hpp"

namespace sdpa::test {

using i64 = std::int64_t;

struct Case {
  std::string name;
  i64 B = 1, Hq = 4, Hkv = 2, Nq = 40, Nk = 40, Dk = 16, Dv = 8;
  Options opt{};
  // The whole sequence's explicit masks, which opt.mask / opt.keep view (shared by copies).
  std::shared_ptr<std::vector<float>> mask;
  std::shared_ptr<std::vector<std::uint8_t>> keep;
  double mask_max = 0;  // max |mask|
  std::shared_ptr<std::vector<float>> sinks;  // the logits opt.sinks views, (Hq)
};
// gtest prints a parameter in the test's listing (ctest -N): the case's name, not its bytes.
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct Data {
  std::vector<float> q, k, v, dout;  // contiguous (B, H, N, D)
};

inline Data make_data(const Case& c) {
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  std::normal_distribution<double> n(0.0, 1.0);
  auto fill = [&](i64 count) {
    std::vector<float> x(static_cast<std::size_t>(count));
    for (auto& e : x) e = static_cast<float>(n(rng));
    return x;
  };
  return {fill(c.B * c.Hq * c.Nq * c.Dk), fill(c.B * c.Hkv * c.Nk * c.Dk), fill(c.B * c.Hkv * c.Nk * c.Dv),
          fill(c.B * c.Hq * c.Nq * c.Dv)};
}

struct Result {
  std::vector<float> out, lse, dq, dk, dv;
  std::vector<float> dsinks;  // with sinks: ∂L/∂sinks (Hq)
};

struct Gold {
  std::vector<double> out, lse, dq, dk, dv, dsinks;
  double tol_out = 0, tol_lse = 0, tol_dq = 0, tol_dk = 0, tol_dv = 0, tol_dsinks = 0;
};

template <class T>
std::vector<double> widen(const std::vector<T>& x) {
  return {x.begin(), x.end()};
}

/// The fp64 answer and the bounds for a result merged from `parts` key blocks per row.
inline Gold make_gold(const Case& c, const Data& d, i64 parts) {
  const std::array<i64, 4> qs{c.B, c.Hq, c.Nq, c.Dk}, ks{c.B, c.Hkv, c.Nk, c.Dk}, vs{c.B, c.Hkv, c.Nk, c.Dv},
      os{c.B, c.Hq, c.Nq, c.Dv};
  const std::array<i64, 3> ls{c.B, c.Hq, c.Nq};
  const auto q64 = widen(d.q), k64 = widen(d.k), v64 = widen(d.v), do64 = widen(d.dout);
  Gold g;
  g.out.resize(d.dout.size()), g.lse.resize(static_cast<std::size_t>(c.B * c.Hq * c.Nq));
  g.dq.resize(d.q.size()), g.dk.resize(d.k.size()), g.dv.resize(d.v.size());
  reference::forward<double, double>(contiguous(q64.data(), qs), contiguous(k64.data(), ks), contiguous(v64.data(), vs),
                                     contiguous(g.out.data(), os), contiguous(g.lse.data(), ls), c.opt);
  // With sinks, ∂L/∂sinks too: the fp64 answer's (written as float) and the naive one's.
  std::vector<float> dsinks64, dsinks_naive;
  Options with_dsinks = c.opt, with_dsinks_naive = c.opt;
  if (!c.opt.sinks.empty()) {
    dsinks64.assign(static_cast<std::size_t>(c.Hq), 0.0f), dsinks_naive.assign(static_cast<std::size_t>(c.Hq), 0.0f);
    with_dsinks.dsinks = contiguous(dsinks64.data(), {c.Hq});
    with_dsinks_naive.dsinks = contiguous(dsinks_naive.data(), {c.Hq});
  }
  reference::backward<double, double>(contiguous(q64.data(), qs), contiguous(k64.data(), ks),
                                      contiguous(v64.data(), vs), contiguous<const double>(g.out.data(), os),
                                      contiguous<const double>(g.lse.data(), ls), contiguous(do64.data(), os),
                                      contiguous(g.dq.data(), qs), contiguous(g.dk.data(), ks),
                                      contiguous(g.dv.data(), vs), with_dsinks);
  g.dsinks = widen(dsinks64);
  // Naive fp32: one sample of the rounding noise an fp32 implementation makes.
  Result n{std::vector<float>(d.dout.size()), std::vector<float>(g.lse.size()), std::vector<float>(d.q.size()),
           std::vector<float>(d.k.size()), std::vector<float>(d.v.size())};
  reference::forward<float, float>(contiguous<const float>(d.q.data(), qs), contiguous<const float>(d.k.data(), ks),
                                   contiguous<const float>(d.v.data(), vs), contiguous(n.out.data(), os),
                                   contiguous(n.lse.data(), ls), c.opt);
  reference::backward<float, float>(contiguous<const float>(d.q.data(), qs), contiguous<const float>(d.k.data(), ks),
                                    contiguous<const float>(d.v.data(), vs), contiguous<const float>(n.out.data(), os),
                                    contiguous<const float>(n.lse.data(), ls),
                                    contiguous<const float>(d.dout.data(), os), contiguous(n.dq.data(), qs),
                                    contiguous(n.dk.data(), ks), contiguous(n.dv.data(), vs), with_dsinks_naive);
  // Column mass C = max_j Σ_{i, h of j's group} p_ij: the probabilities themselves, from the
  // fp64 reference with v = the identity (out_i = p_i·).
  std::vector<double> eye(static_cast<std::size_t>(c.B * c.Hkv * c.Nk * c.Nk), 0.0);
  for (i64 bg = 0; bg < c.B * c.Hkv; ++bg)
    for (i64 j = 0; j < c.Nk; ++j) eye[static_cast<std::size_t>((bg * c.Nk + j) * c.Nk + j)] = 1.0;
  std::vector<double> probs(static_cast<std::size_t>(c.B * c.Hq * c.Nq * c.Nk));
  reference::forward<double, double>(contiguous(q64.data(), qs), contiguous(k64.data(), ks),
                                     contiguous<const double>(eye.data(), {c.B, c.Hkv, c.Nk, c.Nk}),
                                     contiguous(probs.data(), {c.B, c.Hq, c.Nq, c.Nk}), View3<double>{}, c.opt);
  double mass = 0;
  const i64 group = c.Hq / c.Hkv;
  for (i64 b = 0; b < c.B; ++b)
    for (i64 gk = 0; gk < c.Hkv; ++gk)
      for (i64 j = 0; j < c.Nk; ++j) {
        double s = 0;
        for (i64 h = gk * group; h < (gk + 1) * group; ++h)
          for (i64 i = 0; i < c.Nq; ++i) s += probs[static_cast<std::size_t>(((b * c.Hq + h) * c.Nq + i) * c.Nk + j)];
        mass = std::max(mass, s);
      }
  const double beta = std::abs(resolve_scale(c.opt, c.Dk)), cap = c.opt.softcap.value_or(0.0);
  auto fl = tolerance::floors(d.q, d.k, d.v, d.dout, c.Dk, c.Dv, beta, cap, c.mask_max, tolerance::max_abs(g.lse),
                              tolerance::max_abs(g.dv));
  const double sink_max = c.opt.sinks.empty() ? -1.0 : tolerance::max_abs(*c.sinks);  // −inf: not finite, skipped
  auto ex = merge_extra(d.q, d.k, d.v, d.dout, c.Dk, c.Dv, c.Nk, beta, cap, parts, fl.lse, mass, c.mask_max, sink_max);
  // Dropout (the single-call rule of tests/kernel/test_grid.cpp): the kept weights grow by
  // 1/(1 - p), and with them every term the floors of out, dq and dk bound (dv's is taken
  // from max|dv|, which holds the factor). The merge's terms likewise, each once: a part's
  // |out| is at most max|v|/(1 - p); |dP_ij·M_ij| and |delta_i| = |dout_i·out_i| at most
  // dpmax/(1 - p), so |dS_ij| <= 2 p_ij dpmax/(1 - p) (dq, dk, with the undropped p_ij's
  // row and column sums); dv_j = Σ_i p_ij M_ij dout_i, the dropped column mass at most
  // C/(1 - p). lse is that of the undropped scores: unchanged.
  const double keep_scale = c.opt.dropout.keep_scale();
  fl.out *= keep_scale, fl.dq *= keep_scale, fl.dk *= keep_scale;
  ex.out *= keep_scale, ex.dq *= keep_scale, ex.dk *= keep_scale, ex.dv *= keep_scale;
  using tolerance::max_abs_err;
  g.tol_out = 2 * max_abs_err(n.out, g.out) + fl.out + ex.out;
  g.tol_lse = 2 * max_abs_err(n.lse, g.lse) + fl.lse + ex.lse;
  g.tol_dq = 2 * max_abs_err(n.dq, g.dq) + fl.dq + ex.dq;
  g.tol_dk = 2 * max_abs_err(n.dk, g.dk) + fl.dk + ex.dk;
  g.tol_dv = 2 * max_abs_err(n.dv, g.dv) + fl.dv + ex.dv;
  // ∂L/∂sinks reads the merged out and lse: their floors and merge terms carry over.
  if (!c.opt.sinks.empty()) {
    const auto out64 = contiguous<const double>(g.out.data(), os);
    const auto dout32 = contiguous<const float>(d.dout.data(), os);
    const auto lse64 = contiguous<const double>(g.lse.data(), ls);
    g.tol_dsinks = 2 * max_abs_err(dsinks_naive, g.dsinks) +
                   tolerance::sink_grad_floor(
                       c.B, c.Hq, c.Nq, c.Dv, [&](i64 b, i64 h, i64 i, i64 e) { return out64(b, h, i, e); },
                       [&](i64 b, i64 h, i64 i) { return lse64(b, h, i); },
                       [&](i64 b, i64 h, i64 i, i64 e) { return dout32(b, h, i, e); },
                       [&](i64 h) { return c.opt.sinks(h); }, fl.out + ex.out, fl.lse + ex.lse);
  }
  return g;
}

/// Each tensor of r within its bound; backward ones only when r has them. With `print`,
/// one line of error / bound per tensor (the figures for docs/scaling.md).
inline void expect_within(const Result& r, const Gold& g, bool print = false) {
  using tolerance::max_abs_err;
  if (print) {
    std::printf("  error/bound: out %.2e/%.2e lse %.2e/%.2e", max_abs_err(r.out, g.out), g.tol_out,
                max_abs_err(r.lse, g.lse), g.tol_lse);
    if (!r.dq.empty())
      std::printf(" dq %.2e/%.2e dk %.2e/%.2e dv %.2e/%.2e", max_abs_err(r.dq, g.dq), g.tol_dq, max_abs_err(r.dk, g.dk),
                  g.tol_dk, max_abs_err(r.dv, g.dv), g.tol_dv);
    std::printf("\n");
  }
  EXPECT_LE(max_abs_err(r.out, g.out), g.tol_out) << "out";
  EXPECT_LE(max_abs_err(r.lse, g.lse), g.tol_lse) << "lse";
  if (r.dq.empty()) return;
  EXPECT_LE(max_abs_err(r.dq, g.dq), g.tol_dq) << "dq";
  EXPECT_LE(max_abs_err(r.dk, g.dk), g.tol_dk) << "dk";
  EXPECT_LE(max_abs_err(r.dv, g.dv), g.tol_dv) << "dv";
  ASSERT_EQ(r.dsinks.size(), g.dsinks.size()) << "dsinks: computed exactly when the case has sinks";
  if (print && !r.dsinks.empty())
    std::printf("  dsinks error/bound %.2e/%.2e\n", max_abs_err(r.dsinks, g.dsinks), g.tol_dsinks);
  EXPECT_LE(max_abs_err(r.dsinks, g.dsinks), g.tol_dsinks) << "dsinks";
}

/// The cases both tests run: causal none / top-left / bottom-right with Nq <, =, > Nk,
/// GQA 4:2 and MQA 4:1, soft-cap, a window, a non-default β.
inline std::vector<Case> cases() {
  std::vector<Case> cs;
  auto add = [&](std::string name, i64 nq, i64 nk, Causal causal, i64 hkv = 2) {
    Case c;
    c.name = std::move(name), c.Nq = nq, c.Nk = nk, c.Hkv = hkv;
    c.opt.causal = causal;
    cs.push_back(c);
    return &cs.back();
  };
  add("full_square", 37, 37, Causal::none);
  add("top_left_square", 41, 41, Causal::top_left);
  add("bottom_right_square", 41, 41, Causal::bottom_right, 1);
  add("top_left_more_keys", 29, 47, Causal::top_left);
  add("bottom_right_more_keys", 29, 47, Causal::bottom_right);
  add("top_left_more_queries", 47, 29, Causal::top_left);
  add("bottom_right_more_queries", 47, 29, Causal::bottom_right);
  add("softcap_causal", 43, 43, Causal::top_left)->opt.softcap = 5.0;
  add("scale_window", 40, 40, Causal::none)->opt.scale = 0.7;
  cs.back().opt.window = {9, 4};
  add("batch2", 33, 33, Causal::bottom_right)->B = 2;
  // Explicit masks of the whole sequence, which block_options cuts to each block: an
  // additive mask per head (B broadcast), and a keep mask broadcast over B and the heads
  // under a causal mask (the diagonal kept, so that every row sees a key).
  {
    Case* c = add("float_mask", 37, 41, Causal::none);
    c->mask = std::make_shared<std::vector<float>>(static_cast<std::size_t>(c->Hq * 37 * 41));
    std::mt19937_64 rng(17);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (auto& x : *c->mask) x = u(rng);
    c->mask_max = 2.0;
    c->opt.mask = contiguous<const float>(c->mask->data(), {1, c->Hq, 37, 41});
  }
  {
    Case* c = add("keep_mask_causal", 41, 41, Causal::bottom_right);
    c->keep = std::make_shared<std::vector<std::uint8_t>>(41 * 41);
    for (i64 i = 0; i < 41; ++i)
      for (i64 j = 0; j < 41; ++j) (*c->keep)[static_cast<std::size_t>(i * 41 + j)] = i == j || (i * 7 + j * 3) % 5 != 0;
    c->opt.keep = contiguous<const std::uint8_t>(c->keep->data(), {1, 1, 41, 41});
  }
  // Dropout of the whole sequence, which every block draws at its own place in it
  // (block_options: Dropout::row0, key0); the cuts start blocks at keys that are not
  // multiples of 4, so a block's first key quad is shared with the block before.
  auto dropout = [](double p) { return Dropout{p, 0x5eed0123456789abull, (std::uint64_t{3} << 32) | 17}; };
  add("dropout_gqa", 37, 37, Causal::none)->opt.dropout = dropout(0.2);
  add("dropout_bottom_right_mqa", 29, 47, Causal::bottom_right, 1)->opt.dropout = dropout(0.5);
  // Attention sinks (one logit per query head, one head without: −inf), merged once per row
  // after every block: under a causal mask with more keys than queries, and under a window
  // with soft-cap and dropout (the sink never dropped).
  auto sinks = [](Case* c) {
    c->sinks = std::make_shared<std::vector<float>>(
        std::vector<float>{0.8f, -1.5f, 2.5f, -std::numeric_limits<float>::infinity()});
    c->opt.sinks = contiguous<const float>(c->sinks->data(), {c->Hq});
  };
  sinks(add("sinks_bottom_right_more_keys", 29, 47, Causal::bottom_right));
  {
    Case* c = add("sinks_window_softcap_dropout", 40, 40, Causal::none);
    sinks(c);
    c->opt.window = {9, 4}, c->opt.softcap = 5.0, c->opt.dropout = dropout(0.2);
  }
  return cs;
}

}  // namespace sdpa::test
