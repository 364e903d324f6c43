// test_grid.cpp — the fast kernel against the fp64 reference, forward and backward,
// on every ISA this CPU can run, over shapes, layouts, GQA ratios and every mask kind.
#include <cstring>

#include "util.hpp"

namespace sdpa::test {
namespace {

enum class MaskKind {
  none,
  additive_full,
  additive_rows,
  padding,
  keep_full,
  keep_rows,
  additive_padding,
  causal_padding,       // Hugging Face's 4-d mask: (B, 1, Nq, Nk) keep, bottom-right causal ∧ left key padding
  causal_padding_holes  // the same with keys dropped inside some rows' ranges (rows not dense)
};

struct Case {
  std::string name;
  i64 B = 1, Hq = 2, Hkv = 2, Nq = 16, Nk = 16, Dk = 16, Dv = 16;
  Causal causal = Causal::none;
  Window window{};
  MaskKind mask = MaskKind::none;
  std::optional<double> scale, softcap;
  double q_std = 1.0;  // scales the logits
  bool bnhd = false;   // q/k/v/out/grads as [B, N, H, D] buffers
  bool backward = true;
  // Whether the forward must take the fused decoding loop (kernel/decode.inl) on each SIMD
  // ISA: at most kFewLanes lanes per kv head, unit-stride K and V rows, no explicit mask or
  // one whose every row is dense (a padding mask).
  bool fused_decode = false;
  double dropout = 0.0;  // p; the seed and offset are fixed (make_inputs)
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

struct Inputs {
  Buf<float> q, k, v, dout;
  Buf<float> mask;
  Buf<std::uint8_t> keep;
  Options opt;
};

Inputs make_inputs(const Case& c) {
  std::mt19937_64 rng(std::hash<std::string>{}(c.name));
  Inputs in;
  in.q = Buf<float>({c.B, c.Hq, c.Nq, c.Dk}, c.bnhd);
  in.k = Buf<float>({c.B, c.Hkv, c.Nk, c.Dk}, c.bnhd);
  in.v = Buf<float>({c.B, c.Hkv, c.Nk, c.Dv}, c.bnhd);
  in.dout = Buf<float>({c.B, c.Hq, c.Nq, c.Dv}, c.bnhd);
  fill_normal(in.q.data, rng, c.q_std);
  fill_normal(in.k.data, rng);
  fill_normal(in.v.data, rng);
  fill_normal(in.dout.data, rng);
  in.opt.causal = c.causal;
  in.opt.window = c.window;
  in.opt.scale = c.scale;
  in.opt.softcap = c.softcap;
  if (c.dropout > 0) in.opt.dropout = {c.dropout, 0x5eed0123456789abull, (std::uint64_t{3} << 32) | 17};
  std::uniform_real_distribution<double> u(0, 1);
  switch (c.mask) {
    case MaskKind::none: break;
    case MaskKind::additive_full:
    case MaskKind::additive_rows: {
      // rows: (1, 1, Nq, Nk) broadcast over batch and heads; full: (B, Hq, Nq, Nk)
      const bool full = c.mask == MaskKind::additive_full;
      in.mask = Buf<float>({full ? c.B : 1, full ? c.Hq : 1, c.Nq, c.Nk});
      fill_normal(in.mask.data, rng, 2.0);
      for (auto& x : in.mask.data)
        if (u(rng) < 0.2) x = -kInf;
      in.opt.mask = in.mask.cview();
      break;
    }
    case MaskKind::additive_padding: {  // (B, 1, 1, Nk): one bias per key, -inf for some
      in.mask = Buf<float>({c.B, 1, 1, c.Nk});
      fill_normal(in.mask.data, rng, 2.0);
      for (auto& x : in.mask.data)
        if (u(rng) < 0.2) x = -kInf;
      in.opt.mask = in.mask.cview();
      break;
    }
    case MaskKind::padding: {  // (B, 1, 1, Nk): per-batch key padding, as a keep-mask
      in.keep = Buf<std::uint8_t>({c.B, 1, 1, c.Nk});
      for (i64 b = 0; b < c.B; ++b)
        for (i64 j = 0; j < c.Nk; ++j) in.keep.at(b, 0, 0, j) = j < c.Nk - (b + 1) * c.Nk / (2 * c.B + 1);
      in.opt.keep = in.keep.cview();
      break;
    }
    case MaskKind::causal_padding:
    case MaskKind::causal_padding_holes: {
      // Batch b's first (b·Nk)/(2B + 1) keys padded away (none in batch 0): with Nq > Nk - pad
      // the first rows see no key. Holes: every third row loses 10 % of its keys.
      in.keep = Buf<std::uint8_t>({c.B, 1, c.Nq, c.Nk});
      for (i64 b = 0; b < c.B; ++b)
        for (i64 i = 0; i < c.Nq; ++i)
          for (i64 j = 0; j < c.Nk; ++j) {
            const bool hole = c.mask == MaskKind::causal_padding_holes && i % 3 == 0 && u(rng) < 0.1;
            in.keep.at(b, 0, i, j) = j >= b * c.Nk / (2 * c.B + 1) && j <= i + c.Nk - c.Nq && !hole;
          }
      in.opt.keep = in.keep.cview();
      break;
    }
    case MaskKind::keep_full:
    case MaskKind::keep_rows: {
      const bool full = c.mask == MaskKind::keep_full;
      in.keep = Buf<std::uint8_t>({full ? c.B : 1, full ? c.Hq : 1, c.Nq, c.Nk});
      for (auto& x : in.keep.data) x = u(rng) < 0.7;
      in.opt.keep = in.keep.cview();
      break;
    }
  }
  return in;
}

class Grid : public ::testing::TestWithParam<Case> {};

TEST_P(Grid, FastMatchesReference) {
  const Case& c = GetParam();
  Inputs in = make_inputs(c);
  const Options& opt = in.opt;

  // Gold: fp64 reference on fp64 copies of the inputs. Naive: fp32 reference.
  Buf<double> q64 = in.q.cast<double>(), k64 = in.k.cast<double>(), v64 = in.v.cast<double>(),
              do64 = in.dout.cast<double>();
  Buf<double> out64({c.B, c.Hq, c.Nq, c.Dv}, c.bnhd);
  Buf3<double> lse64({c.B, c.Hq, c.Nq});
  reference::forward<double, double>(q64.cview(), k64.cview(), v64.cview(), out64.view(), lse64.view(), opt);
  Buf<float> outn({c.B, c.Hq, c.Nq, c.Dv}, c.bnhd);
  Buf3<float> lsen({c.B, c.Hq, c.Nq});
  reference::forward<float, float>(in.q.cview(), in.k.cview(), in.v.cview(), outn.view(), lsen.view(), opt);

  Buf<double> dq64, dk64, dv64;
  Buf<float> dqn, dkn, dvn;
  if (c.backward) {
    dq64 = Buf<double>(in.q.shape, c.bnhd), dk64 = Buf<double>(in.k.shape, c.bnhd),
    dv64 = Buf<double>(in.v.shape, c.bnhd);
    reference::backward<double, double>(q64.cview(), k64.cview(), v64.cview(), out64.cview(), lse64.cview(),
                                        do64.cview(), dq64.view(), dk64.view(), dv64.view(), opt);
    dqn = Buf<float>(in.q.shape, c.bnhd), dkn = Buf<float>(in.k.shape, c.bnhd), dvn = Buf<float>(in.v.shape, c.bnhd);
    reference::backward<float, float>(in.q.cview(), in.k.cview(), in.v.cview(), outn.cview(), lsen.cview(),
                                      in.dout.cview(), dqn.view(), dkn.view(), dvn.view(), opt);
  }

  // Floors (src/common/tolerance.hpp): the error any fp32 kernel must make.
  const double beta = std::abs(resolve_scale(opt, c.Dk));
  auto fl = floors(in.q.data, in.k.data, in.v.data, in.dout.data, c.Dk, c.Dv, beta, c.softcap.value_or(0.0),
                   max_abs(in.mask.data), max_abs(lse64.data), max_abs(dv64.data));
  // Dropout: the fast kernel and the references drop the same p_ij (one generator,
  // sdpa/philox.hpp), so the rule stays the fp32 one; only the kept weights grow by
  // 1/(1 - p), and with them every term the floors of out, dq and dk bound (dv's is taken
  // from max|dv| itself, which already holds the factor).
  const double keep_scale = opt.dropout.keep_scale();
  fl.out *= keep_scale, fl.dq *= keep_scale, fl.dk *= keep_scale;

  for (const KernelVariant& kv : kernel_variants()) {
    SCOPED_TRACE(std::string("kernel ") + kv.name);
    const KernelScope scope(kv);
    Options o = opt;
    o.isa = kv.isa;
    Buf<float> out({c.B, c.Hq, c.Nq, c.Dv}, c.bnhd);
    Buf3<float> lse({c.B, c.Hq, c.Nq});
    std::fill(out.data.begin(), out.data.end(), kNaN);  // every element must be written
    std::fill(lse.data.begin(), lse.data.end(), kNaN);
    Plan plan;
    o.plan = &plan;
    forward(in.q.cview(), in.k.cview(), in.v.cview(), out.view(), lse.view(), o);
    o.plan = nullptr;
    if (c.fused_decode && kv.isa != Isa::scalar)
      EXPECT_GT(plan.decoding_items, 0) << "the decoding case did not reach the fused loop";
    if (c.mask == MaskKind::causal_padding_holes)
      EXPECT_EQ(plan.decoding_items, 0) << "a mask with holes reached the fused loop";
    SDPA_EXPECT_WITHIN("out", judge(out.data, outn.data, out64.data, fl.out));
    SDPA_EXPECT_WITHIN("lse", judge(lse.data, lsen.data, lse64.data, fl.lse));
    if (!c.backward) continue;
    Buf<float> dq(in.q.shape, c.bnhd), dk(in.k.shape, c.bnhd), dv(in.v.shape, c.bnhd);
    std::fill(dq.data.begin(), dq.data.end(), kNaN);
    std::fill(dk.data.begin(), dk.data.end(), kNaN);
    std::fill(dv.data.begin(), dv.data.end(), kNaN);
    backward(in.q.cview(), in.k.cview(), in.v.cview(), out.cview(), lse.cview(), in.dout.cview(), dq.view(), dk.view(),
             dv.view(), o);
    SDPA_EXPECT_WITHIN("dq", judge(dq.data, dqn.data, dq64.data, fl.dq));
    SDPA_EXPECT_WITHIN("dk", judge(dk.data, dkn.data, dk64.data, fl.dk));
    SDPA_EXPECT_WITHIN("dv", judge(dv.data, dvn.data, dv64.data, fl.dv));
  }
}

std::vector<Case> shape_grid() {
  std::vector<Case> cases;
  // N × D, square, non-causal and causal alternately; big N only with moderate D to keep the fp64 reference quick.
  int n_idx = 0;
  for (i64 n : {1, 2, 17, 127, 128, 129, 1000}) {
    for (i64 d : {1, 3, 16, 31, 64, 80, 128, 256}) {
      if (n == 1000 && d > 64 && d != 128) continue;
      Case c;
      c.Nq = c.Nk = n;
      c.Dk = c.Dv = d;
      c.Hq = c.Hkv = n >= 1000 ? 1 : 2;
      c.causal = (n_idx + d) % 2 ? Causal::top_left : Causal::none;
      c.backward = !(n == 1000 && d >= 128);
      c.name = "N" + std::to_string(n) + "_D" + std::to_string(d) + (c.causal == Causal::none ? "" : "_causal");
      cases.push_back(c);
    }
    ++n_idx;
  }
  return cases;
}

std::vector<Case> feature_grid() {
  std::vector<Case> cs;
  auto add = [&](std::string name, auto edit) {
    Case c;
    c.name = std::move(name);
    edit(c);
    cs.push_back(c);
  };
  // Nq != Nk both ways, both causal alignments.
  for (auto [nq, nk] : {std::pair<i64, i64>{7, 100}, {100, 7}, {65, 130}, {130, 65}, {1, 300}})
    for (Causal cz : {Causal::none, Causal::top_left, Causal::bottom_right}) {
      const std::string cn = cz == Causal::none ? "full" : cz == Causal::top_left ? "top_left" : "bottom_right";
      add("Nq" + std::to_string(nq) + "_Nk" + std::to_string(nk) + "_" + cn,
          [&](Case& c) { c.Nq = nq, c.Nk = nk, c.Dk = 24, c.Dv = 40, c.causal = cz; });
    }
  // GQA / MQA ratios 1, 2, 8.
  for (auto [hq, hkv] : {std::pair<i64, i64>{2, 2}, {4, 2}, {8, 1}, {16, 2}})
    add("gqa_Hq" + std::to_string(hq) + "_Hkv" + std::to_string(hkv), [&](Case& c) {
      c.B = 2, c.Hq = hq, c.Hkv = hkv, c.Nq = 70, c.Nk = 90, c.Dk = 32, c.Dv = 16, c.causal = Causal::bottom_right;
    });
  // Sliding windows, alone and with causal, crossing tile boundaries.
  for (auto [l, r] : {std::pair<i64, i64>{0, 0}, {5, 3}, {-1, 10}, {70, -1}, {63, 64}})
    for (Causal cz : {Causal::none, Causal::top_left, Causal::bottom_right})
      add("window_" + std::to_string(l) + "_" + std::to_string(r) + "_c" + std::to_string(int(cz)), [&](Case& c) {
        c.Nq = 150, c.Nk = 200, c.window = {l, r}, c.causal = cz;
      });
  // Explicit masks, broadcast and full, with and without causal.
  for (MaskKind mk :
       {MaskKind::additive_full, MaskKind::additive_rows, MaskKind::padding, MaskKind::keep_full, MaskKind::keep_rows,
        MaskKind::additive_padding, MaskKind::causal_padding, MaskKind::causal_padding_holes})
    for (Causal cz : {Causal::none, Causal::top_left})
      add("mask" + std::to_string(int(mk)) + "_c" + std::to_string(int(cz)),
          [&](Case& c) { c.B = 2, c.Nq = 80, c.Nk = 140, c.mask = mk, c.causal = cz; });
  // Key-padding masks (one bias per key: mask_tile's per-key path) on [B, N, H, D] buffers
  // whose rows are whole vectors but H·D floats apart (packed as GEMM operands, not read in
  // place), with GQA and a window.
  for (MaskKind mk : {MaskKind::padding, MaskKind::additive_padding})
    add("mask" + std::to_string(int(mk)) + "_bnhd_wide_rows", [&](Case& c) {
      c.B = 2, c.Hq = 4, c.Hkv = 2, c.Nq = 100, c.Nk = 170, c.Dk = c.Dv = 32, c.mask = mk, c.bnhd = true;
      c.causal = Causal::bottom_right, c.window = {60, -1};
    });
  // Temperatures: unscaled (β = 1), μP (1/Dk), a tiny one, a negative one.
  for (double beta : {1.0, 1.0 / 64, 1e-3, -0.3})
    add("scale_" + std::to_string(beta), [&](Case& c) { c.Nq = c.Nk = 100, c.Dk = c.Dv = 64, c.scale = beta; });
  // Soft-cap, with large logits so tanh saturates, and small so it is near-linear.
  for (double cap : {0.5, 5.0, 50.0})
    add("softcap_" + std::to_string(cap), [&](Case& c) {
      c.Nq = c.Nk = 90, c.Dk = c.Dv = 32, c.softcap = cap, c.q_std = 4.0, c.causal = Causal::top_left;
    });
  // Extreme logits: |s| up to ~1e4. No overflow, and the answer is still right.
  add("extreme_logits", [](Case& c) { c.Nq = c.Nk = 130, c.Dk = c.Dv = 16, c.scale = 1500.0, c.backward = true; });
  add("extreme_logits_causal",
      [](Case& c) { c.Nq = c.Nk = 130, c.Dk = c.Dv = 16, c.scale = -1500.0, c.causal = Causal::top_left; });
  // Decoding: few query rows, long key sequences, MQA/GQA. With fewer than 8 (b, kv head,
  // lane tile) items and Nk >= 4096 the forward splits the keys and merges by lse
  // (src/attention/api.cpp): uneven last split, masks that empty whole splits, NaN-free.
  // Padding masks (right: v2; left, with causal, as batched generation passes it: v3) have
  // dense rows, which the fused loop takes by narrowing each lane's key range; holes in
  // them (v4) send the item to the general loop.
  // 12 / 4 heads with 2 queries: 6 lanes a kv head, two groups of three where the ISA has them.
  for (auto [hq, hkv, nq, nk] :
       {std::array<i64, 4>{4, 1, 1, 5000}, {8, 2, 3, 9000}, {1, 1, 2, 4096}, {6, 3, 1, 12345}, {12, 4, 2, 5000}})
    for (int variant = 0; variant < 5; ++variant)
      add("decode_Hq" + std::to_string(hq) + "_Hkv" + std::to_string(hkv) + "_Nq" + std::to_string(nq) + "_Nk" +
              std::to_string(nk) + "_v" + std::to_string(variant),
          [&](Case& c) {
            c.Hq = hq, c.Hkv = hkv, c.Nq = nq, c.Nk = nk, c.Dk = 64, c.Dv = 48;
            if (variant == 1) c.causal = Causal::bottom_right, c.window = {2500, -1};  // early splits see nothing
            if (variant == 2) c.mask = MaskKind::padding, c.B = 2, c.bnhd = true;
            if (variant == 3) c.mask = MaskKind::causal_padding, c.B = 3;
            if (variant == 4) c.mask = MaskKind::causal_padding_holes, c.B = 2;
            // 12 lanes (Hq 8 / Hkv 2, Nq 3) take the tiled loop; a mask with holes, the general one.
            c.fused_decode = hq / hkv * nq <= 8 && c.mask != MaskKind::causal_padding_holes;
          });
  // The decoding loops take lanes in groups (few-lane scores: 4 on AVX-512, 2 on AVX2;
  // fused: 1, 2 or 4 lanes, or 3 for 3, 5 and 6 on AVX2): lane counts that leave each remainder, with head sizes that
  // are not a whole number of vectors on either ISA (the partial loads), a causal window
  // across tiles, and a soft-cap.
  for (i64 hq : {1, 2, 3, 5, 6, 7, 8})
    add("decode_lanes" + std::to_string(hq) + "_Dk36", [hq](Case& c) {
      c.Hq = hq, c.Hkv = 1, c.Nq = 1, c.Nk = 4500, c.Dk = 36, c.Dv = 44, c.fused_decode = true;
      if (hq == 7) c.causal = Causal::bottom_right, c.window = {100, -1};
      if (hq == 3) c.softcap = 5.0, c.q_std = 4.0;
    });
  // Dropout at p = 0.1 and 0.5 through every loop: the tiled forward, the few-lane one (and
  // split-KV), both backward schedules (B·Hkv items against the thread count, api.cpp), with
  // GQA, masks, windows, soft-cap, [B, N, H, D] strides, Nk not a multiple of 4 (a Philox
  // block's last keys past the end) and the keys past a 64-key tile.
  for (double p : {0.1, 0.5}) {
    const std::string ps = p == 0.1 ? "p10" : "p50";
    add("dropout_" + ps + "_plain", [p](Case& c) { c.Nq = 130, c.Nk = 131, c.Dk = c.Dv = 32, c.dropout = p; });
    add("dropout_" + ps + "_gqa_causal", [p](Case& c) {
      c.B = 2, c.Hq = 4, c.Hkv = 2, c.Nq = 70, c.Nk = 97, c.Dk = 24, c.Dv = 40, c.causal = Causal::bottom_right;
      c.dropout = p;
    });
    add("dropout_" + ps + "_window_softcap", [p](Case& c) {
      c.Hq = c.Hkv = 1;  // one item: the two-pass backward wherever there are 2 threads or more
      c.Nq = 150, c.Nk = 200, c.window = {40, 5}, c.causal = Causal::top_left, c.softcap = 5.0, c.dropout = p;
    });
    add("dropout_" + ps + "_mask", [p](Case& c) { c.B = 2, c.Nq = 80, c.Nk = 141, c.mask = MaskKind::keep_full, c.dropout = p; });
    add("dropout_" + ps + "_additive_bnhd", [p](Case& c) {
      c.B = 2, c.Hq = 4, c.Hkv = 1, c.Nq = 33, c.Nk = 66, c.mask = MaskKind::additive_rows, c.bnhd = true, c.dropout = p;
    });
    add("dropout_" + ps + "_decode_split", [p](Case& c) {
      c.Hq = 8, c.Hkv = 2, c.Nq = 1, c.Nk = 4500, c.Dk = 64, c.Dv = 48, c.dropout = p;
    });
  }
  // [B, N, H, D] buffers through strides, with GQA and a mask.
  add("bnhd_layout", [](Case& c) {
    c.B = 2, c.Hq = 4, c.Hkv = 2, c.Nq = 77, c.Nk = 99, c.Dk = 20, c.Dv = 36, c.bnhd = true, c.mask = MaskKind::padding;
  });
  add("bnhd_layout_causal",
      [](Case& c) { c.Hq = 3, c.Hkv = 1, c.Nq = c.Nk = 129, c.bnhd = true, c.causal = Causal::top_left; });
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Grid, ::testing::ValuesIn(shape_grid()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Features, Grid, ::testing::ValuesIn(feature_grid()), [](const auto& info) {
  std::string n = info.param.name;
  for (auto& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// Reports the AVX-512 path as skipped, visibly, on CPUs without it.
TEST(Isa, Avx512PathRunsHere) {
  if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "this CPU has no AVX-512: that path is compiled but not run here";
  SUCCEED();
}

// The W = 16 variant (util.hpp, kernel_variants) is what sdpa::forward runs while its scope
// lives, and only then: on a decoding call the fused loop sums each score's products in W
// partial sums, reduced together (kernel/decode.inl's score_block), so W = 16 and AVX2's
// W = 8 group the sums differently and some of the 8·1000 scores, hence outputs, differ in
// their last bits; ignoring the seam would give AVX2's bits.
#if SDPA_TEST_W16_ON_AVX2
constexpr bool kW16Built = true;
#else
constexpr bool kW16Built = false;
#endif

TEST(Isa, W16OnAvx2RunsThroughTheSeam) {
  if (!kW16Built) GTEST_SKIP() << "the W = 16 build is in the tests on x86-64 with SDPA_TEST_W16_ON_AVX2 on only";
  if (!isa_supported(Isa::avx2)) GTEST_SKIP() << "this CPU has no AVX2: the W = 16 build runs on AVX2";
  const KernelVariant w16 = kernel_variants().back();
  ASSERT_NE(w16.emulated, nullptr);
  Buf<float> q({1, 8, 1, 64}), k({1, 2, 1000, 64}), v({1, 2, 1000, 48});
  std::mt19937_64 rng(3);
  for (auto* x : {&q, &k, &v}) fill_normal(x->data, rng);
  Options o;
  o.isa = w16.isa;
  const auto run = [&] {
    Buf<float> out({1, 8, 1, 48});
    forward(q.cview(), k.cview(), v.cview(), out.view(), View3<float>{}, o);
    return out.data;
  };
  const std::vector<float> avx2_before = run();
  std::vector<float> emulated;
  {
    const KernelScope scope(w16);
    emulated = run();
  }
  const std::vector<float> avx2_after = run();
  const std::size_t bytes = avx2_before.size() * sizeof(float);
  EXPECT_EQ(std::memcmp(avx2_before.data(), avx2_after.data(), bytes), 0) << "the scope's table outlived it";
  EXPECT_NE(std::memcmp(avx2_before.data(), emulated.data(), bytes), 0) << "AVX2's bits: the W = 16 table did not run";
}

// Where no sum is split across vector lanes, W = 16 must give AVX2's bits exactly: the tiled
// loops (more than kFewLanes lanes per item) sum every GEMM element along its own chain, in
// one order whatever the register tile, and the softmax, exp, masks and dropout act lane by
// lane with the same operations (simd_w16_on_avx2.hpp). So a tail, lane or mask that the
// W = 16 logic got wrong shows as a changed bit, far below the tolerance rule's reach. (The
// few-lane and decoding loops sum a score's products in W partial sums: an item of at most
// kFewLanes lanes, such as the last lane tile of Hq / Hkv = 2, Nq = 100, is not compared here.
// The shapes below leave every item more lanes.)
template <class T>
std::vector<float> tiled_call_bits(const KernelVariant& kv, i64 B, i64 Hq, i64 Hkv, i64 Nq, i64 Nk, i64 Dk, i64 Dv,
                                   Options o, bool bias_mask, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const auto filled = [&](std::array<i64, 4> s) {
    std::vector<T> x(static_cast<std::size_t>(s[0] * s[1] * s[2] * s[3]));
    for (auto& e : x) e = T(normal(rng));
    return x;
  };
  const std::array<i64, 4> qs{B, Hq, Nq, Dk}, ks{B, Hkv, Nk, Dk}, vs{B, Hkv, Nk, Dv}, os{B, Hq, Nq, Dv};
  const std::vector<T> q = filled(qs), k = filled(ks), v = filled(vs), dout = filled(os);
  std::vector<float> mask_bias(static_cast<std::size_t>(Nq * Nk));
  for (auto& x : mask_bias) x = normal(rng);
  if (bias_mask) o.mask = contiguous<const float>(mask_bias.data(), {1, 1, Nq, Nk});  // one bias per (query, key)
  std::vector<T> out(dout.size()), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<float> lse(static_cast<std::size_t>(B * Hq * Nq));
  const KernelScope scope(kv);
  o.isa = kv.isa, o.threads = 2;
  const auto c = [](const std::vector<T>& x, const std::array<i64, 4>& s) { return contiguous(x.data(), s); };
  forward(c(q, qs), c(k, ks), c(v, vs), contiguous(out.data(), os), contiguous(lse.data(), {B, Hq, Nq}), o);
  backward(c(q, qs), c(k, ks), c(v, vs), c(out, os), contiguous<const float>(lse.data(), {B, Hq, Nq}), c(dout, os),
           contiguous(dq.data(), qs), contiguous(dk.data(), ks), contiguous(dv.data(), vs), o);
  std::vector<float> all = lse;
  for (const auto* x : {&out, &dq, &dk, &dv})
    for (const T& e : *x) all.push_back(static_cast<float>(e));
  return all;
}

TEST(Isa, W16OnAvx2GivesAvx2BitsOnTiledCalls) {
  if (!kW16Built) GTEST_SKIP() << "the W = 16 build is in the tests on x86-64 with SDPA_TEST_W16_ON_AVX2 on only";
  if (!isa_supported(Isa::avx2)) GTEST_SKIP() << "this CPU has no AVX2: the W = 16 build runs on AVX2";
  const std::vector<KernelVariant> kernels = kernel_variants();
  const KernelVariant w16 = kernels.back(), avx2 = kernels[1];
  ASSERT_EQ(avx2.isa, Isa::avx2);
  ASSERT_EQ(avx2.emulated, nullptr);
  Options gqa, drop, masked;
  gqa.causal = Causal::bottom_right, gqa.softcap = 20.0;
  drop.causal = Causal::top_left, drop.window = {40, 5}, drop.dropout = {0.3, 77, 5};
  masked.dropout = {0.1, 5, 0};
  const auto same = [&](const char* what, auto bits_of) {
    const std::vector<float> a = bits_of(avx2), b = bits_of(w16);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << ": W = 16 changed the bits";
  };
  same("fp32 GQA causal soft-cap",
       [&](const KernelVariant& kv) { return tiled_call_bits<float>(kv, 2, 4, 2, 90, 150, 40, 24, gqa, false, 1); });
  same("fp32 dropout window",
       [&](const KernelVariant& kv) { return tiled_call_bits<float>(kv, 1, 2, 2, 120, 131, 36, 36, drop, false, 2); });
  same("fp32 mask dropout",
       [&](const KernelVariant& kv) { return tiled_call_bits<float>(kv, 1, 2, 1, 80, 141, 80, 48, masked, true, 3); });
  same("bf16 GQA causal",
       [&](const KernelVariant& kv) { return tiled_call_bits<bf16>(kv, 1, 4, 2, 70, 97, 24, 40, gqa, false, 4); });
  same("fp16 dropout window",
       [&](const KernelVariant& kv) { return tiled_call_bits<fp16>(kv, 2, 2, 2, 33, 66, 17, 31, drop, false, 5); });
}

}  // namespace
}  // namespace sdpa::test
