// test_varlen.cpp — packed variable-length batches against the reference run on each
// sequence alone, the offsets' errors, and the same bits for any thread count.
#include <cstring>

#include "util.hpp"

namespace sdpa::test {
namespace {

// A packed batch: q (Tq, Hq, Dk), k (Tk, Hkv, Dk), v (Tk, Hkv, Dv), dout (Tq, Hq, Dv).
struct Packed {
  std::vector<i64> Lq, Lk;  // per sequence
  i64 Hq = 4, Hkv = 2, Dk = 16, Dv = 24;
  std::vector<std::int32_t> cq{0}, ck{0};
  std::vector<float> q, k, v, dout;
  i64 Tq() const { return cq.back(); }
  i64 Tk() const { return ck.back(); }

  Packed(std::vector<i64> lq, std::vector<i64> lk, std::uint64_t seed) : Lq(std::move(lq)), Lk(std::move(lk)) {
    for (std::size_t s = 0; s < Lq.size(); ++s) {
      cq.push_back(cq.back() + static_cast<std::int32_t>(Lq[s]));
      ck.push_back(ck.back() + static_cast<std::int32_t>(Lk[s]));
    }
    std::mt19937_64 rng(seed);
    q.resize(static_cast<std::size_t>(Tq() * Hq * Dk)), k.resize(static_cast<std::size_t>(Tk() * Hkv * Dk));
    v.resize(static_cast<std::size_t>(Tk() * Hkv * Dv)), dout.resize(static_cast<std::size_t>(Tq() * Hq * Dv));
    for (auto* x : {&q, &k, &v, &dout}) fill_normal(*x, rng);
  }
  View3<const float> qv() const { return contiguous(q.data(), {Tq(), Hq, Dk}); }
  View3<const float> kv() const { return contiguous(k.data(), {Tk(), Hkv, Dk}); }
  View3<const float> vv() const { return contiguous(v.data(), {Tk(), Hkv, Dv}); }
  View3<const float> dov() const { return contiguous(dout.data(), {Tq(), Hq, Dv}); }
  SeqOffsets cuq() const { return View<const std::int32_t, 1>{cq.data(), {static_cast<i64>(cq.size())}, {1}}; }
  SeqOffsets cuk() const { return View<const std::int32_t, 1>{ck.data(), {static_cast<i64>(ck.size())}, {1}}; }
};

// x rounded to H, element by element.
template <class H>
std::vector<H> narrowed(const std::vector<float>& x) {
  std::vector<H> h;
  for (float e : x) h.push_back(H(e));
  return h;
}

template <class H>
struct Result {
  std::vector<H> out, dq, dk, dv;
  std::vector<float> lse;
};

// The packed forward (then backward) of q, k, v, dout in element type H, laid out as p says;
// every output starts NaN, so each element must be written.
template <class H>
Result<H> run_varlen(const Packed& p, const std::vector<H>& q, const std::vector<H>& k, const std::vector<H>& v,
                     const std::vector<H>& dout, const Options& opt, bool with_backward = true) {
  const auto v3 = [](auto* data, i64 T, i64 Hh, i64 D) { return contiguous(data, {T, Hh, D}); };
  Result<H> r;
  r.out.assign(static_cast<std::size_t>(p.Tq() * p.Hq * p.Dv), H(kNaN));
  r.lse.assign(static_cast<std::size_t>(p.Hq * p.Tq()), kNaN);
  forward_varlen(v3(q.data(), p.Tq(), p.Hq, p.Dk), v3(k.data(), p.Tk(), p.Hkv, p.Dk), v3(v.data(), p.Tk(), p.Hkv, p.Dv),
                 p.cuq(), p.cuk(), v3(r.out.data(), p.Tq(), p.Hq, p.Dv), contiguous(r.lse.data(), {p.Hq, p.Tq()}), opt);
  if (!with_backward) return r;
  r.dq.assign(q.size(), H(kNaN)), r.dk.assign(k.size(), H(kNaN)), r.dv.assign(v.size(), H(kNaN));
  backward_varlen(v3(q.data(), p.Tq(), p.Hq, p.Dk), v3(k.data(), p.Tk(), p.Hkv, p.Dk), v3(v.data(), p.Tk(), p.Hkv, p.Dv),
                  p.cuq(), p.cuk(), v3(static_cast<const H*>(r.out.data()), p.Tq(), p.Hq, p.Dv),
                  contiguous<const float>(r.lse.data(), {p.Hq, p.Tq()}), v3(dout.data(), p.Tq(), p.Hq, p.Dv),
                  v3(r.dq.data(), p.Tq(), p.Hq, p.Dk), v3(r.dk.data(), p.Tk(), p.Hkv, p.Dk),
                  v3(r.dv.data(), p.Tk(), p.Hkv, p.Dv), opt);
  return r;
}
// p's own fp32 tensors.
Result<float> run_varlen(const Packed& p, const Options& opt, bool with_backward = true) {
  return run_varlen<float>(p, p.q, p.k, p.v, p.dout, opt, with_backward);
}

// The reference in precision T on each sequence alone, as a (1, H, L, D) problem copied out of
// the packed tensors, its results copied back into packed buffers. A sequence without keys
// gets the contract's empty rows (out 0, lse -inf, zero gradients). With dropout, sequence s
// draws batch s's mask (Dropout::batch0 = s), as it would padded into a (batch, H, L, D) call.
template <class T>
struct PerSequence {
  std::vector<T> out, lse, dq, dk, dv;
  PerSequence(const Packed& p, const Options& opt) {
    out.assign(static_cast<std::size_t>(p.Tq() * p.Hq * p.Dv), T(0));
    lse.assign(static_cast<std::size_t>(p.Hq * p.Tq()), -std::numeric_limits<T>::infinity());
    dq.assign(p.q.size(), T(0)), dk.assign(p.k.size(), T(0)), dv.assign(p.v.size(), T(0));
    for (std::size_t s = 0; s < p.Lq.size(); ++s) {
      const i64 Lq = p.Lq[s], Lk = p.Lk[s], q0 = p.cq[s], k0 = p.ck[s];
      if (Lq == 0 || Lk == 0) continue;
      // (T, H, D) rows [r0, r0 + L) <-> a contiguous (1, H, L, D) buffer.
      const auto take = [](const std::vector<float>& x, i64 r0, i64 L, i64 H, i64 D) {
        Buf<T> b({1, H, L, D});
        for (i64 h = 0; h < H; ++h)
          for (i64 i = 0; i < L; ++i)
            for (i64 d = 0; d < D; ++d) b.at(0, h, i, d) = static_cast<T>(x[static_cast<std::size_t>(((r0 + i) * H + h) * D + d)]);
        return b;
      };
      const auto put = [](Buf<T>& b, std::vector<T>& x, i64 r0) {
        const auto [one, H, L, D] = b.shape;
        for (i64 h = 0; h < H; ++h)
          for (i64 i = 0; i < L; ++i)
            for (i64 d = 0; d < D; ++d) x[static_cast<std::size_t>(((r0 + i) * H + h) * D + d)] = b.at(0, h, i, d);
      };
      Buf<T> q = take(p.q, q0, Lq, p.Hq, p.Dk), k = take(p.k, k0, Lk, p.Hkv, p.Dk), v = take(p.v, k0, Lk, p.Hkv, p.Dv),
             dout = take(p.dout, q0, Lq, p.Hq, p.Dv);
      Buf<T> o({1, p.Hq, Lq, p.Dv}), gq(q.shape), gk(k.shape), gv(v.shape);
      Buf3<T> l({1, p.Hq, Lq});
      Options o_s = opt;
      o_s.dropout.batch0 += static_cast<i64>(s);
      reference::forward<T, double>(q.cview(), k.cview(), v.cview(), o.view(), l.view(), o_s);
      reference::backward<T, double>(q.cview(), k.cview(), v.cview(), o.cview(), l.cview(), dout.cview(), gq.view(),
                                     gk.view(), gv.view(), o_s);
      put(o, out, q0), put(gq, dq, q0), put(gk, dk, k0), put(gv, dv, k0);
      for (i64 h = 0; h < p.Hq; ++h)
        for (i64 i = 0; i < Lq; ++i) lse[static_cast<std::size_t>(h * p.Tq() + q0 + i)] = l.data[static_cast<std::size_t>(h * Lq + i)];
    }
  }
};

struct VarlenCase {
  std::string name;
  Options opt;
};

std::vector<VarlenCase> varlen_cases() {
  std::vector<VarlenCase> c(7);
  c[0].name = "plain";
  c[1].name = "causal_top_left", c[1].opt.causal = Causal::top_left;
  c[2].name = "causal_bottom_right", c[2].opt.causal = Causal::bottom_right;
  c[3].name = "window", c[3].opt.window = {5, 3};
  c[4].name = "causal_window_softcap", c[4].opt.causal = Causal::bottom_right, c[4].opt.window = {9, -1},
  c[4].opt.softcap = 2.0;
  c[5].name = "scale", c[5].opt.scale = 0.7;
  c[6].name = "dropout_causal", c[6].opt.causal = Causal::bottom_right, c[6].opt.dropout = {0.3, 77, 1};
  return c;
}

// Lengths with every shape of sequence: short, empty queries, no keys, Lq < Lk (a KV cache),
// Lq > Lk, one query row (decoding), and long enough to use several tiles.
const std::vector<i64> kLq{5, 0, 70, 3, 1, 33, 130};
const std::vector<i64> kLk{7, 3, 70, 0, 90, 20, 150};

// Judged as the fixed-length kernel is (tests/kernel/test_grid.cpp): the error against the fp64
// reference at most twice the naive fp32 reference's, plus the fp32 floor, every sequence alone.
TEST(Varlen, MatchesTheReferenceOnEachSequence) {
  for (const auto& vc : varlen_cases()) {
    SCOPED_TRACE(vc.name);
    const Packed p(kLq, kLk, std::hash<std::string>{}(vc.name));
    const PerSequence<double> gold(p, vc.opt);
    const PerSequence<float> naive(p, vc.opt);
    const double beta = std::abs(resolve_scale(vc.opt, p.Dk));
    auto fl = floors(p.q, p.k, p.v, p.dout, p.Dk, p.Dv, beta, vc.opt.softcap.value_or(0.0), 0.0, max_abs(gold.lse),
                     max_abs(gold.dv));
    const double keep_scale = vc.opt.dropout.keep_scale();  // kept weights grow by 1/(1 - p) (test_grid.cpp)
    fl.out *= keep_scale, fl.dq *= keep_scale, fl.dk *= keep_scale;
    for (const KernelVariant& kv : kernel_variants()) {
      SCOPED_TRACE(kv.name);
      const KernelScope scope(kv);
      Options o = vc.opt;
      o.isa = kv.isa;
      const Result<float> r = run_varlen(p, o);
      SDPA_EXPECT_WITHIN("out", judge(r.out, naive.out, gold.out, fl.out));
      SDPA_EXPECT_WITHIN("lse", judge(r.lse, naive.lse, gold.lse, fl.lse));
      SDPA_EXPECT_WITHIN("dq", judge(r.dq, naive.dq, gold.dq, fl.dq));
      SDPA_EXPECT_WITHIN("dk", judge(r.dk, naive.dk, gold.dk, fl.dk));
      SDPA_EXPECT_WITHIN("dv", judge(r.dv, naive.dv, gold.dv, fl.dv));
    }
  }
}

TEST(Varlen, SameBitsForAnyThreadCountAndOffsetDtype) {
  const Packed p(kLq, kLk, 3);
  Options o;
  o.causal = Causal::bottom_right;
  o.threads = 1;
  const Result<float> one = run_varlen(p, o);
  for (int t : {2, 3, 7}) {
    o.threads = t;
    const Result<float> r = run_varlen(p, o);
    EXPECT_EQ(r.out, one.out) << t << " threads";
    EXPECT_EQ(r.dq, one.dq) << t << " threads";
    EXPECT_EQ(r.dk, one.dk) << t << " threads";
    EXPECT_EQ(r.dv, one.dv) << t << " threads";
  }
  // int64 offsets: the same call.
  const std::vector<std::int64_t> cq(p.cq.begin(), p.cq.end()), ck(p.ck.begin(), p.ck.end());
  std::vector<float> out(one.out.size()), lse(one.lse.size());
  forward_varlen(p.qv(), p.kv(), p.vv(), View<const std::int64_t, 1>{cq.data(), {static_cast<i64>(cq.size())}, {1}},
                 View<const std::int64_t, 1>{ck.data(), {static_cast<i64>(ck.size())}, {1}},
                 contiguous(out.data(), {p.Tq(), p.Hq, p.Dv}), contiguous(lse.data(), {p.Hq, p.Tq()}), o);
  EXPECT_EQ(out, one.out);
}

// A wrong offsets array: an error naming it, and nothing written.
TEST(Varlen, BadOffsetsAreRefusedBeforeAnythingIsWritten) {
  const Packed p({4, 6}, {5, 5}, 9);
  const auto expect_refused = [&](std::vector<std::int32_t> cq, std::vector<std::int32_t> ck, const std::string& what,
                                  Options opt = {}) {
    std::vector<float> out(static_cast<std::size_t>(p.Tq() * p.Hq * p.Dv), 7.0f), lse(static_cast<std::size_t>(p.Hq * p.Tq()), 7.0f);
    try {
      forward_varlen(p.qv(), p.kv(), p.vv(), View<const std::int32_t, 1>{cq.data(), {static_cast<i64>(cq.size())}, {1}},
                     View<const std::int32_t, 1>{ck.data(), {static_cast<i64>(ck.size())}, {1}},
                     contiguous(out.data(), {p.Tq(), p.Hq, p.Dv}), contiguous(lse.data(), {p.Hq, p.Tq()}), opt);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    for (float x : out) ASSERT_EQ(x, 7.0f) << "out written for " << what;
    for (float x : lse) ASSERT_EQ(x, 7.0f) << "lse written for " << what;
  };
  expect_refused({0, 6, 4}, {0, 5, 10}, "cu_seqlens_q: offsets must not decrease");
  expect_refused({0, 4, 11}, {0, 5, 10}, "cu_seqlens_q: must end at q's 10 rows, got 11");
  expect_refused({0, 4, 10}, {0, 5, 9}, "cu_seqlens_k: must end at k's 10 rows, got 9");
  expect_refused({-1, 4, 10}, {0, 5, 10}, "cu_seqlens_q: must start at 0");
  expect_refused({0, 4, 10}, {0, 2, 5, 10}, "cu_seqlens_k: length 4 differs from cu_seqlens_q's 3");
  expect_refused({0}, {0}, "cu_seqlens_q: length 1 is too short");
  // Explicit masks are the packed batch's, (1, Hq|1, Tq|1, Tk|1): anything else names the mask.
  std::vector<float> mask(static_cast<std::size_t>(2 * p.Hq * p.Tq() * p.Tk()), 0.0f);
  std::vector<std::uint8_t> keep(mask.size(), 1);
  const auto with_mask = [&](std::array<i64, 4> shape) {
    Options o;
    o.mask = contiguous<const float>(mask.data(), shape);
    return o;
  };
  const auto with_keep = [&](std::array<i64, 4> shape) {
    Options o;
    o.keep = contiguous<const std::uint8_t>(keep.data(), shape);
    return o;
  };
  const std::vector<std::int32_t> cq{0, 4, 10}, ck{0, 5, 10};
  expect_refused(cq, ck, "mask: shape [1, 1, 10, 9] does not broadcast to the packed batch's [1, Hq, Tq, Tk]",
                 with_mask({1, 1, 10, 9}));
  expect_refused(cq, ck, "mask: shape [1, 1, 4, 10] does not broadcast", with_mask({1, 1, 4, 10}));  // one sequence's rows
  expect_refused(cq, ck, "mask: shape [2, 1, 10, 10] does not broadcast", with_mask({2, 1, 10, 10}));
  expect_refused(cq, ck, "keep: shape [1, 3, 1, 10] does not broadcast", with_keep({1, 3, 1, 10}));
  expect_refused(cq, ck, "keep: data pointer is null", [] {
    Options o;
    o.keep = View4<const std::uint8_t>{nullptr, {1, 1, 1, 10}, {0, 0, 0, 1}};
    return o;
  }());
}

// Explicit masks on a packed batch (docs/contract.md, "Packed variable-length batches"): the
// packed (1, Hq|1, Tq|1, Tk|1) mask, sequence s reading rows cq[s].. and columns ck[s].. of
// it, must give bit for bit what the fixed-length kernel gives on each sequence alone with its
// own block of the mask copied out (the fixed-length kernel's masks are judged against the
// reference in test_grid.cpp). In fp32 and bf16, for 1, 2 and 7 threads, with GQA (Hq 4,
// Hkv 2) and the sequence shapes of kLq/kLk. The entries of a full mask outside every
// sequence's block are NaN: a wrong cut (columns from the query offsets, say) reads one, or
// reads another sequence's block, and the bits differ.
struct PackedMaskCase {
  std::string name;
  std::array<i64, 4> mask_shape{}, keep_shape{};  // {0, …}: none
  Options opt;
};

std::vector<PackedMaskCase> packed_mask_cases(const Packed& p) {
  const i64 Hq = p.Hq, Tq = p.Tq(), Tk = p.Tk();
  std::vector<PackedMaskCase> c(6);
  c[0].name = "keep_per_key_causal", c[0].keep_shape = {1, 1, 1, Tk}, c[0].opt.causal = Causal::bottom_right;
  c[1].name = "additive_per_key", c[1].mask_shape = {1, 1, 1, Tk};
  c[2].name = "additive_per_query_and_key", c[2].mask_shape = {1, 1, Tq, Tk}, c[2].opt.causal = Causal::top_left;
  c[3].name = "additive_full_with_heads_dropout", c[3].mask_shape = {1, Hq, Tq, Tk},
  c[3].opt.causal = Causal::bottom_right, c[3].opt.dropout = {0.25, 5, 2};
  c[4].name = "keep_full_with_heads_window", c[4].keep_shape = {1, Hq, Tq, Tk}, c[4].opt.window = {6, 2};
  c[5].name = "keep_per_head_key_and_additive_per_query", c[5].keep_shape = {1, Hq, 1, Tk},
  c[5].mask_shape = {1, 1, Tq, 1};
  return c;
}

template <class H>
void check_packed_masks() {
  const Packed p(kLq, kLk, 11);
  const i64 Tq = p.Tq(), Tk = p.Tk();
  const std::vector<H> q = narrowed<H>(p.q), k = narrowed<H>(p.k), v = narrowed<H>(p.v), dout = narrowed<H>(p.dout);
  const auto same_bits = [](const H* a, const H* b, std::size_t n) {  // memcmp takes no null, even for n = 0
    return n == 0 || std::memcmp(a, b, n * sizeof(H)) == 0;
  };
  // Rows [r0, r0 + L) of a packed (T, Hh, D) buffer as a (1, Hh, L, D) view.
  const auto rows = [](auto* data, i64 r0, i64 L, i64 Hh, i64 D) {
    return View4<std::remove_pointer_t<decltype(data)>>{data + r0 * Hh * D, {1, Hh, L, D}, {0, D, Hh * D, 1}};
  };
  const auto v3 = [](auto* data, i64 T, i64 Hh, i64 D) { return contiguous(data, {T, Hh, D}); };
  // The sequence a packed query row (key row) belongs to, to fill off-block entries.
  std::vector<i64> seq_of_q(static_cast<std::size_t>(Tq)), seq_of_k(static_cast<std::size_t>(Tk));
  for (std::size_t s = 0; s < p.Lq.size(); ++s) {
    for (i64 i = p.cq[s]; i < p.cq[s + 1]; ++i) seq_of_q[static_cast<std::size_t>(i)] = static_cast<i64>(s);
    for (i64 j = p.ck[s]; j < p.ck[s + 1]; ++j) seq_of_k[static_cast<std::size_t>(j)] = static_cast<i64>(s);
  }
  for (const PackedMaskCase& mc : packed_mask_cases(p)) {
    SCOPED_TRACE(mc.name);
    std::mt19937_64 rng(std::hash<std::string>{}(mc.name));
    // The packed masks: additive N(0, 1) with a tenth -inf; keep with a quarter dropped.
    Buf<float> mask;
    Buf<std::uint8_t> keep;
    std::bernoulli_distribution tenth(0.1), quarter(0.25);
    std::normal_distribution<float> normal;
    if (mc.mask_shape[0] != 0) {
      mask = Buf<float>(mc.mask_shape);
      const auto& s = mc.mask_shape;
      for (i64 h = 0; h < s[1]; ++h)
        for (i64 i = 0; i < s[2]; ++i)
          for (i64 j = 0; j < s[3]; ++j) {
            const bool off_block = s[2] == Tq && s[3] == Tk &&
                                   seq_of_q[static_cast<std::size_t>(i)] != seq_of_k[static_cast<std::size_t>(j)];
            mask.at(0, h, i, j) = off_block ? kNaN : tenth(rng) ? -kInf : normal(rng);
          }
    }
    if (mc.keep_shape[0] != 0) {
      keep = Buf<std::uint8_t>(mc.keep_shape);
      for (auto& x : keep.data) x = quarter(rng) ? 0 : 1;
    }
    Options o = mc.opt;
    if (!mask.data.empty()) o.mask = mask.cview();
    if (!keep.data.empty()) o.keep = keep.cview();
    const auto run = [&](int threads) {
      Options ot = o;
      ot.threads = threads;
      return run_varlen<H>(p, q, k, v, dout, ot);
    };
    const Result<H> packed = run(2);
    for (std::size_t s = 0; s < p.Lq.size(); ++s) {
      SCOPED_TRACE("sequence " + std::to_string(s));
      const i64 Lq = p.Lq[s], Lk = p.Lk[s], q0 = p.cq[s], k0 = p.ck[s];
      std::vector<H> out(static_cast<std::size_t>(Lq * p.Hq * p.Dv), H(0.0f)),
          dq(static_cast<std::size_t>(Lq * p.Hq * p.Dk), H(0.0f)), dk(static_cast<std::size_t>(Lk * p.Hkv * p.Dk), H(0.0f)),
          dv(static_cast<std::size_t>(Lk * p.Hkv * p.Dv), H(0.0f));
      std::vector<float> lse(static_cast<std::size_t>(p.Hq * Lq), -kInf);
      if (Lq > 0 && Lk > 0) {
        // The sequence's own block of each mask, copied out: a broadcast dimension stays 1.
        const auto block = [&](const auto& m) {
          using M = std::remove_cvref_t<decltype(m.data[0])>;
          const auto& ms = m.shape;
          Buf<M> b({1, ms[1], ms[2] == 1 ? 1 : Lq, ms[3] == 1 ? 1 : Lk});
          for (i64 h = 0; h < b.shape[1]; ++h)
            for (i64 i = 0; i < b.shape[2]; ++i)
              for (i64 j = 0; j < b.shape[3]; ++j)
                b.at(0, h, i, j) = m.cview()(0, h, ms[2] == 1 ? 0 : q0 + i, ms[3] == 1 ? 0 : k0 + j);
          return b;
        };
        Buf<float> mask_s;
        Buf<std::uint8_t> keep_s;
        Options os = mc.opt;
        os.dropout.batch0 += static_cast<i64>(s);
        if (!mask.data.empty()) mask_s = block(mask), os.mask = mask_s.cview();
        if (!keep.data.empty()) keep_s = block(keep), os.keep = keep_s.cview();
        forward(rows(q.data(), q0, Lq, p.Hq, p.Dk), rows(k.data(), k0, Lk, p.Hkv, p.Dk), rows(v.data(), k0, Lk, p.Hkv, p.Dv),
                rows(out.data(), 0, Lq, p.Hq, p.Dv), contiguous(lse.data(), {1, p.Hq, Lq}), os);
        backward(rows(q.data(), q0, Lq, p.Hq, p.Dk), rows(k.data(), k0, Lk, p.Hkv, p.Dk),
                 rows(v.data(), k0, Lk, p.Hkv, p.Dv), rows(static_cast<const H*>(out.data()), 0, Lq, p.Hq, p.Dv),
                 contiguous<const float>(lse.data(), {1, p.Hq, Lq}), rows(dout.data(), q0, Lq, p.Hq, p.Dv),
                 rows(dq.data(), 0, Lq, p.Hq, p.Dk), rows(dk.data(), 0, Lk, p.Hkv, p.Dk), rows(dv.data(), 0, Lk, p.Hkv, p.Dv),
                 os);
      }
      EXPECT_TRUE(same_bits(packed.out.data() + q0 * p.Hq * p.Dv, out.data(), out.size())) << "out";
      EXPECT_TRUE(same_bits(packed.dq.data() + q0 * p.Hq * p.Dk, dq.data(), dq.size())) << "dq";
      EXPECT_TRUE(same_bits(packed.dk.data() + k0 * p.Hkv * p.Dk, dk.data(), dk.size())) << "dk";
      EXPECT_TRUE(same_bits(packed.dv.data() + k0 * p.Hkv * p.Dv, dv.data(), dv.size())) << "dv";
      for (i64 h = 0; h < p.Hq; ++h)
        for (i64 i = 0; i < Lq; ++i)
          EXPECT_EQ(packed.lse[static_cast<std::size_t>(h * Tq + q0 + i)], lse[static_cast<std::size_t>(h * Lq + i)]);
    }
    for (int threads : {1, 7}) {
      const Result<H> again = run(threads);
      EXPECT_TRUE(same_bits(packed.out.data(), again.out.data(), packed.out.size()) &&
                  same_bits(packed.dq.data(), again.dq.data(), packed.dq.size()) &&
                  same_bits(packed.dk.data(), again.dk.data(), packed.dk.size()) &&
                  same_bits(packed.dv.data(), again.dv.data(), packed.dv.size()))
          << threads << " threads";
    }
  }
}

TEST(Varlen, MasksAreTheFixedLengthCallOnEachSequencesBlockFp32) { check_packed_masks<float>(); }
TEST(Varlen, MasksAreTheFixedLengthCallOnEachSequencesBlockBf16) { check_packed_masks<bf16>(); }


// bf16 and fp16 through the same packed entry points: each sequence is one sdpa::forward /
// backward call in the dtype, so the packed result must be bit for bit the fixed-length
// kernel's on each sequence alone (that kernel is judged by FlashAttention's rule in
// test_dtypes.cpp), for any thread count; a sequence without keys gets out 0, lse -inf and
// zero gradients. Causal bottom-right with dropout: masks, alignment and the Philox batch
// index all per sequence.
template <class H>
void check_half_varlen() {
  const Packed p(kLq, kLk, 5);
  const std::vector<H> q = narrowed<H>(p.q), k = narrowed<H>(p.k), v = narrowed<H>(p.v), dout = narrowed<H>(p.dout);
  for (const KernelVariant& kv : kernel_variants()) {
    SCOPED_TRACE(kv.name);
    const KernelScope scope(kv);
    Options o;
    o.isa = kv.isa, o.causal = Causal::bottom_right, o.dropout = {0.2, 91, 4};
    const auto run = [&](int threads) {
      Options ot = o;
      ot.threads = threads;
      return run_varlen<H>(p, q, k, v, dout, ot);
    };
    const Result<H> packed = run(2);
    // Rows [r0, r0 + L) of a packed (T, Hh, D) buffer as a (1, Hh, L, D) view: no copy.
    const auto rows = [](auto* data, i64 r0, i64 L, i64 Hh, i64 D) {
      return View4<std::remove_pointer_t<decltype(data)>>{data + r0 * Hh * D, {1, Hh, L, D}, {0, D, Hh * D, 1}};
    };
    const auto bits = [](H x) { return x.bits; };
    for (std::size_t s = 0; s < p.Lq.size(); ++s) {
      SCOPED_TRACE("sequence " + std::to_string(s));
      const i64 Lq = p.Lq[s], Lk = p.Lk[s], q0 = p.cq[s], k0 = p.ck[s];
      std::vector<H> out(static_cast<std::size_t>(Lq * p.Hq * p.Dv)), dq(static_cast<std::size_t>(Lq * p.Hq * p.Dk)),
          dk(static_cast<std::size_t>(Lk * p.Hkv * p.Dk)), dv(static_cast<std::size_t>(Lk * p.Hkv * p.Dv));
      std::vector<float> lse(static_cast<std::size_t>(p.Hq * Lq));
      if (Lq > 0 && Lk > 0) {
        Options os = o;
        os.dropout.batch0 += static_cast<i64>(s);
        forward(rows(q.data(), q0, Lq, p.Hq, p.Dk), rows(k.data(), k0, Lk, p.Hkv, p.Dk), rows(v.data(), k0, Lk, p.Hkv, p.Dv),
                rows(out.data(), 0, Lq, p.Hq, p.Dv), contiguous(lse.data(), {1, p.Hq, Lq}), os);
        backward(rows(q.data(), q0, Lq, p.Hq, p.Dk), rows(k.data(), k0, Lk, p.Hkv, p.Dk),
                 rows(v.data(), k0, Lk, p.Hkv, p.Dv), rows(static_cast<const H*>(out.data()), 0, Lq, p.Hq, p.Dv),
                 contiguous<const float>(lse.data(), {1, p.Hq, Lq}), rows(dout.data(), q0, Lq, p.Hq, p.Dv),
                 rows(dq.data(), 0, Lq, p.Hq, p.Dk), rows(dk.data(), 0, Lk, p.Hkv, p.Dk), rows(dv.data(), 0, Lk, p.Hkv, p.Dv), os);
      } else {  // the contract's empty rows
        std::fill(out.begin(), out.end(), H(0.0f)), std::fill(dq.begin(), dq.end(), H(0.0f));
        std::fill(dk.begin(), dk.end(), H(0.0f)), std::fill(dv.begin(), dv.end(), H(0.0f));
        std::fill(lse.begin(), lse.end(), Lq > 0 ? -kInf : 0.0f);
      }
      const auto same = [&](const std::vector<H>& whole, i64 r0, i64 Hh, i64 D, const std::vector<H>& alone) {
        for (std::size_t e = 0; e < alone.size(); ++e)
          if (bits(whole[static_cast<std::size_t>(r0 * Hh * D) + e]) != bits(alone[e])) return false;
        return true;
      };
      EXPECT_TRUE(same(packed.out, q0, p.Hq, p.Dv, out)) << "out";
      EXPECT_TRUE(same(packed.dq, q0, p.Hq, p.Dk, dq)) << "dq";
      EXPECT_TRUE(same(packed.dk, k0, p.Hkv, p.Dk, dk)) << "dk";
      EXPECT_TRUE(same(packed.dv, k0, p.Hkv, p.Dv, dv)) << "dv";
      for (i64 h = 0; h < p.Hq; ++h)
        for (i64 i = 0; i < Lq; ++i)
          EXPECT_EQ(packed.lse[static_cast<std::size_t>(h * p.Tq() + q0 + i)], lse[static_cast<std::size_t>(h * Lq + i)]);
    }
    for (int threads : {1, 7}) {
      const Result<H> again = run(threads);
      const auto same_all = [&](const std::vector<H>& a, const std::vector<H>& b) {
        return std::equal(a.begin(), a.end(), b.begin(), [&](H x, H y) { return bits(x) == bits(y); });
      };
      EXPECT_TRUE(same_all(packed.out, again.out) && same_all(packed.dq, again.dq) && same_all(packed.dk, again.dk) &&
                  same_all(packed.dv, again.dv))
          << threads << " threads";
    }
  }
}

TEST(Varlen, Bf16IsTheFixedLengthKernelOnEachSequence) { check_half_varlen<bf16>(); }
TEST(Varlen, Fp16IsTheFixedLengthKernelOnEachSequence) { check_half_varlen<fp16>(); }

}  // namespace
}  // namespace sdpa::test
