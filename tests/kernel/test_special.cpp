// test_special.cpp — empty rows, NaN propagation, determinism across thread counts,
// and the reference backward against fp64 finite differences.
#include <cstring>

#include "util.hpp"

namespace sdpa::test {
namespace {

// Whether row i of head (b, h) of a (B, H, N, D) buffer holds a NaN.
bool row_has_nan(Buf<float>& x, i64 b, i64 h, i64 i) {
  for (i64 d = 0; d < x.shape[3]; ++d)
    if (std::isnan(x.at(b, h, i, d))) return true;
  return false;
}

bool all_finite(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float f) { return std::isfinite(f); });
}

// ---- empty rows -------------------------------------------------------------------------
class EmptyRows : public VariantTest {};

TEST_P(EmptyRows, BottomRightCausalWithMoreQueriesThanKeys) {
  // Nq = 100 > Nk = 40, bottom-right: query i sees keys j <= i - 60, so rows 0..59 see nothing.
  Problem4 P(1, 2, 1, 100, 40, 16, 8, 1);
  Options o;
  o.isa = GetParam().isa;
  o.causal = Causal::bottom_right;
  P.run(o);
  for (i64 h = 0; h < 2; ++h)
    for (i64 i = 0; i < 100; ++i) {
      const float lse = P.lse.view()(0, h, i);
      if (i < 60) {
        EXPECT_EQ(lse, -kInf) << "row " << i;
        for (i64 e = 0; e < 8; ++e) EXPECT_EQ(P.out.at(0, h, i, e), 0.0f);
        for (i64 d = 0; d < 16; ++d) EXPECT_EQ(P.dq.at(0, h, i, d), 0.0f);
      } else {
        EXPECT_TRUE(std::isfinite(lse)) << "row " << i;
      }
    }
  EXPECT_TRUE(all_finite(P.out.data) && all_finite(P.dq.data) && all_finite(P.dk.data) && all_finite(P.dv.data));
}

TEST_P(EmptyRows, KeepMaskRowAllFalseAndAdditiveMinusInf) {
  Problem4 P(2, 2, 2, 70, 90, 8, 8, 2);
  Buf<std::uint8_t> keep({1, 1, 70, 90});
  std::fill(keep.data.begin(), keep.data.end(), 1);
  for (i64 j = 0; j < 90; ++j) keep.at(0, 0, 5, j) = 0;  // row 5: nothing kept
  Buf<float> mask({2, 1, 1, 90});                        // batch 1: every key at -inf
  for (i64 j = 0; j < 90; ++j) mask.at(1, 0, 0, j) = -kInf;
  Options o;
  o.isa = GetParam().isa;
  o.keep = keep.cview();
  o.mask = mask.cview();
  P.run(o);
  for (i64 h = 0; h < 2; ++h) {
    EXPECT_EQ(P.lse.view()(0, h, 5), -kInf);
    EXPECT_TRUE(std::isfinite(P.lse.view()(0, h, 4)));
    for (i64 i = 0; i < 70; ++i) EXPECT_EQ(P.lse.view()(1, h, i), -kInf);
  }
  for (i64 j = 0; j < 90; ++j)
    for (i64 d = 0; d < 8; ++d) {
      EXPECT_EQ(P.dk.at(1, 0, j, d), 0.0f);
      EXPECT_EQ(P.dv.at(1, 1, j, d), 0.0f);
    }
  EXPECT_TRUE(all_finite(P.out.data) && all_finite(P.dq.data) && all_finite(P.dk.data) && all_finite(P.dv.data));
}

TEST_P(EmptyRows, WindowThatSeesNothing) {
  // Window (0, 0) around the top-left diagonal with Nk < Nq: rows i >= Nk have no key.
  Problem4 P(1, 1, 1, 50, 30, 4, 4, 3);
  Options o;
  o.isa = GetParam().isa;
  o.causal = Causal::top_left;
  o.window = {0, 0};
  P.run(o);
  for (i64 i = 0; i < 50; ++i) {
    if (i >= 30) {
      EXPECT_EQ(P.lse.view()(0, 0, i), -kInf);
    } else {  // exactly one key: out = v_i
      for (i64 e = 0; e < 4; ++e) EXPECT_FLOAT_EQ(P.out.at(0, 0, i, e), P.v.at(0, 0, i, e));
    }
  }
  EXPECT_TRUE(all_finite(P.dq.data) && all_finite(P.dk.data));
}

// ---- NaN propagation --------------------------------------------------------------------
class NaNs : public VariantTest {};

TEST_P(NaNs, QueryRowReachesOnlyItsRow) {
  Problem4 P(1, 1, 1, 100, 100, 16, 16, 4);
  P.q.at(0, 0, 37, 3) = kNaN;
  Options o;
  o.isa = GetParam().isa;
  P.run(o);
  for (i64 i = 0; i < 100; ++i) {
    const bool hit = i == 37;
    EXPECT_EQ(std::isnan(P.lse.view()(0, 0, i)), hit) << i;
    EXPECT_EQ(row_has_nan(P.out, 0, 0, i), hit) << i;
    EXPECT_EQ(row_has_nan(P.dq, 0, 0, i), hit) << i;
  }
  // every key is seen by row 37, so dk, dv are NaN everywhere: not asserted further.
}

TEST_P(NaNs, KeyAndValueReachOnlyRowsThatSeeThem) {
  // Causal top-left: key 50 is seen by rows >= 50 only. NaN in k_50 and, separately, v_50.
  for (int which = 0; which < 2; ++which) {
    Problem4 P(1, 1, 1, 100, 100, 16, 16, 5);
    (which == 0 ? P.k : P.v).at(0, 0, 50, 2) = kNaN;
    Options o;
    o.isa = GetParam().isa;
    o.causal = Causal::top_left;
    P.run(o);
    for (i64 i = 0; i < 100; ++i) {
      const bool hit = i >= 50;
      EXPECT_EQ(row_has_nan(P.out, 0, 0, i), hit) << "which " << which << " row " << i;
      EXPECT_EQ(row_has_nan(P.dq, 0, 0, i), hit) << "which " << which << " row " << i;
    }
  }
}

TEST_P(NaNs, Bf16KeyAndValueReachOnlyRowsThatSeeThem) {
  // As above, in bf16 at Dk = Dv = 64 (the AMX loop on its variant: K rows read in place).
  // Rows 0..49 give key 50 the weight 0, which must not meet v_50's NaN: the AMX P·V
  // cannot skip a zero weight, so its key tile takes the product that does.
  for (int which = 0; which < 2; ++which) {
    Problem4 P(1, 1, 1, 100, 128, 64, 64, 5);
    (which == 0 ? P.k : P.v).at(0, 0, 50, 2) = kNaN;
    const Buf<bf16> q = P.q.cast<bf16>(), k = P.k.cast<bf16>(), v = P.v.cast<bf16>();
    Buf<bf16> out(P.out.shape);
    Options o;
    o.isa = GetParam().isa;
    o.causal = Causal::top_left;
    forward(q.cview(), k.cview(), v.cview(), out.view(), P.lse.view(), o);
    Buf<float> out_f = out.cast<float>();
    for (i64 i = 0; i < 100; ++i) EXPECT_EQ(row_has_nan(out_f, 0, 0, i), i >= 50) << "which " << which << " row " << i;
  }
}

template <class H>
void check_gradient_nans(Isa isa) {
  // A NaN in q row 37, k row 50, v row 50 or dout row 20, causal top-left: the 16-bit
  // backward's dq, dk, dv hold NaN in exactly the rows the fp32 backward's do, on the same
  // (widened) values. On the AMX variant a bf16 product whose B operand holds the NaN (Q for
  // dk, K for dq, dout for dv) must take the fp32 product that skips zero weights, and an
  // fp16 call with one the widening path (Problem::inputs_finite). Nq = 100 leaves a query
  // tile of 36 rows (dQ's last block short of 16); 1 thread takes the one pass, 2 the two.
  struct Hit {
    const char* name;
    int tensor;  // 0 q, 1 k, 2 v, 3 dout
    i64 row;
  };
  for (const Hit hit : {Hit{"q", 0, 37}, Hit{"k", 1, 50}, Hit{"v", 2, 50}, Hit{"dout", 3, 20}})
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(hit.name) + " threads " + std::to_string(threads));
      Problem4 P(1, 1, 1, 100, 128, 64, 64, 12);
      Buf<float>* x[4] = {&P.q, &P.k, &P.v, &P.dout};
      for (Buf<float>* b : x) b->data = b->template cast<H>().template cast<float>().data;  // values of H
      x[hit.tensor]->at(0, 0, hit.row, 5) = kNaN;
      Options o;
      o.isa = isa;
      o.causal = Causal::top_left;
      o.threads = threads;
      P.run(o);  // fp32
      const Buf<H> q = P.q.template cast<H>(), k = P.k.template cast<H>(), v = P.v.template cast<H>(),
                   dout = P.dout.template cast<H>();
      Buf<H> out(P.out.shape), dq(P.dq.shape), dk(P.dk.shape), dv(P.dv.shape);
      Buf3<float> lse(P.lse.shape);
      forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
      Plan backward_plan;
      o.plan = &backward_plan;
      backward(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(), dout.cview(), dq.view(), dk.view(),
               dv.view(), o);
      o.plan = nullptr;
      if (std::is_same_v<H, fp16>) {
        EXPECT_EQ(backward_plan.engine, Engine16::widened) << "fp16 with a NaN: widened";
        EXPECT_EQ(backward_plan.engine_items, 0);
      }
      Buf<float> dq_f = dq.template cast<float>(), dk_f = dk.template cast<float>(), dv_f = dv.template cast<float>();
      i64 dq_nan_rows = 0, dkv_nan_rows = 0;
      for (i64 i = 0; i < 100; ++i) {
        EXPECT_EQ(row_has_nan(dq_f, 0, 0, i), row_has_nan(P.dq, 0, 0, i)) << "dq " << i;
        dq_nan_rows += row_has_nan(P.dq, 0, 0, i);
      }
      for (i64 j = 0; j < 128; ++j) {
        EXPECT_EQ(row_has_nan(dk_f, 0, 0, j), row_has_nan(P.dk, 0, 0, j)) << "dk " << j;
        EXPECT_EQ(row_has_nan(dv_f, 0, 0, j), row_has_nan(P.dv, 0, 0, j)) << "dv " << j;
        dkv_nan_rows += row_has_nan(P.dk, 0, 0, j) + row_has_nan(P.dv, 0, 0, j);
      }
      // The NaN reached dk or dv, and some dq rows but not all (rows before it never see
      // it, but for a NaN in q or dout, which only its own row meets).
      EXPECT_GT(dkv_nan_rows, 0);
      EXPECT_GT(dq_nan_rows, 0);
      EXPECT_LT(dq_nan_rows, 100);
    }
}

TEST_P(NaNs, Bf16GradientsHaveTheNaNsOfTheFp32Path) { check_gradient_nans<bf16>(GetParam().isa); }
TEST_P(NaNs, Fp16GradientsHaveTheNaNsOfTheFp32Path) { check_gradient_nans<fp16>(GetParam().isa); }

TEST_P(NaNs, Fp16InfinitiesActAsOnTheFp32Path) {
  // fp16 inputs with +inf in q row 37 or k row 50 (causal top-left): a score ±inf. On the
  // AMX variant fp16 runs split into bf16 hi + lo, where inf's lo must be 0, not inf − inf:
  // the out rows hold NaN exactly where the fp32 path's do on the same values, and a score
  // of -inf hides its key there as it does widened.
  for (int which = 0; which < 2; ++which) {
    Problem4 P(1, 1, 1, 100, 128, 64, 64, 13);
    for (Buf<float>* b : {&P.q, &P.k, &P.v}) b->data = b->cast<fp16>().cast<float>().data;
    (which == 0 ? P.q.at(0, 0, 37, 2) : P.k.at(0, 0, 50, 2)) = kInf;
    Options o;
    o.isa = GetParam().isa;
    o.causal = Causal::top_left;
    forward(P.q.cview(), P.k.cview(), P.v.cview(), P.out.view(), P.lse.view(), o);
    const Buf<fp16> q = P.q.cast<fp16>(), k = P.k.cast<fp16>(), v = P.v.cast<fp16>();
    Buf<fp16> out(P.out.shape);
    Buf3<float> lse(P.lse.shape);
    forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
    Buf<float> out_f = out.cast<float>();
    i64 nan_rows = 0;
    for (i64 i = 0; i < 100; ++i) {
      EXPECT_EQ(row_has_nan(out_f, 0, 0, i), row_has_nan(P.out, 0, 0, i)) << "which " << which << " row " << i;
      nan_rows += row_has_nan(P.out, 0, 0, i);
    }
    EXPECT_LT(nan_rows, 100) << "which " << which;
  }
}

TEST_P(NaNs, DecodingValueReachesOnlyHeadsThatSeeIt) {
  // One query row per head, four heads on one kv head (the decoding path, few lanes):
  // v_50 holds NaN and a keep-mask hides key 50 from heads 0 and 2 only.
  Problem4 P(1, 4, 1, 1, 200, 32, 32, 7);
  P.v.at(0, 0, 50, 3) = kNaN;
  Buf<std::uint8_t> keep({1, 4, 1, 200});
  std::fill(keep.data.begin(), keep.data.end(), std::uint8_t{1});
  keep.at(0, 0, 0, 50) = keep.at(0, 2, 0, 50) = 0;
  Options o;
  o.isa = GetParam().isa;
  o.keep = keep.cview();
  forward(P.q.cview(), P.k.cview(), P.v.cview(), P.out.view(), P.lse.view(), o);
  for (i64 h = 0; h < 4; ++h) EXPECT_EQ(row_has_nan(P.out, 0, h, 0), h % 2 == 1) << "head " << h;
  EXPECT_TRUE(all_finite(P.lse.data));
}

TEST_P(NaNs, DecodingValueHiddenByCausalWindowChangesNothing) {
  // Two query rows per head (2, 4 and 8 lanes per kv head), bottom-right causal with a
  // window of 100: row 0 sees keys 98..198, row 1 sees 99..199. v_97 (NaN) is in a visited
  // key tile but hidden from both rows, v_199 (inf) is seen by row 1 only. Row 0 must come
  // out exactly as without them: a hidden key's zero weight never multiplies its value.
  for (i64 hq : {1, 2, 4}) {
    Problem4 P(1, hq, 1, 2, 200, 32, 40, 11);
    Options o;
    o.isa = GetParam().isa;
    o.causal = Causal::bottom_right;
    o.window = {100, -1};
    P.run(o);
    Buf<float> clean = P.out;
    P.v.at(0, 0, 97, 3) = kNaN;
    P.v.at(0, 0, 199, 5) = kInf;
    P.run(o);
    for (i64 h = 0; h < hq; ++h) {
      for (i64 e = 0; e < 40; ++e) EXPECT_EQ(P.out.at(0, h, 0, e), clean.at(0, h, 0, e)) << "hq " << hq << " h " << h;
      EXPECT_FALSE(std::isfinite(P.out.at(0, h, 1, 5))) << "hq " << hq << " h " << h;
    }
  }
}

TEST_P(NaNs, GradOutRowReachesOnlyKeysItSees) {
  // NaN in dout row 20 under top-left causal: dq row 20, and dk/dv of keys 0..20 only.
  Problem4 P(1, 1, 1, 100, 100, 16, 16, 6);
  P.dout.at(0, 0, 20, 1) = kNaN;
  Options o;
  o.isa = GetParam().isa;
  o.causal = Causal::top_left;
  P.run(o);
  EXPECT_TRUE(all_finite(P.out.data));
  for (i64 i = 0; i < 100; ++i) EXPECT_EQ(row_has_nan(P.dq, 0, 0, i), i == 20) << i;
  for (i64 j = 0; j < 100; ++j) {
    EXPECT_EQ(row_has_nan(P.dk, 0, 0, j), j <= 20) << j;
    EXPECT_EQ(row_has_nan(P.dv, 0, 0, j), j <= 20) << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, EmptyRows, ::testing::ValuesIn(kernel_variants()), variant_id);
INSTANTIATE_TEST_SUITE_P(Isa, NaNs, ::testing::ValuesIn(kernel_variants()), variant_id);

// ---- determinism ------------------------------------------------------------------------
class Determinism : public VariantTest {};

// Calls run(o) with 1, 2 and 7 threads (o: options with the ISA and thread count set) and
// checks that the floats it returns have the same bits each time.
template <class Run>
void expect_same_bits_for_1_2_7_threads(Isa isa, Run run) {
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2, 7}) {
    Options o;
    o.isa = isa;
    o.threads = threads;
    results.push_back(run(o));
  }
  for (std::size_t r = 1; r < results.size(); ++r) {
    ASSERT_EQ(results[r].size(), results[0].size());
    EXPECT_EQ(std::memcmp(results[r].data(), results[0].data(), results[0].size() * sizeof(float)), 0)
        << "thread count changed the bits";
  }
}

TEST_P(Determinism, SameBitsFor1_2_7Threads) {
  // GQA, causal, a mask, odd sizes: enough tiles that 7 threads really split the work.
  // B·Hkv = 4 (batch, kv head) items: 1 and 2 threads take the one-pass backward, 7 the
  // two passes (api.cpp), so this also checks that both schedules give the same bits.
  expect_same_bits_for_1_2_7_threads(GetParam().isa, [](Options o) {
    Problem4 P(2, 4, 2, 300, 333, 40, 24, 7);
    o.causal = Causal::bottom_right;
    o.softcap = 20.0;
    P.run(o);
    std::vector<float> all;
    for (auto* b : {&P.out.data, &P.dq.data, &P.dk.data, &P.dv.data}) all.insert(all.end(), b->begin(), b->end());
    all.insert(all.end(), P.lse.data.begin(), P.lse.data.end());
    return all;
  });
}

TEST_P(Determinism, DecodingSameBitsFor1_2_7Threads) {
  // One query row per head, 4 heads per kv head (4 lanes: the fused decoding loop on the
  // SIMD ISAs), 2 kv heads: fewer than 8 items, so the keys are split and merged (api.cpp)
  // by the shape alone; a causal window so the splits see different key counts.
  expect_same_bits_for_1_2_7_threads(GetParam().isa, [](Options o) {
    Problem4 P(1, 8, 2, 1, 9000, 64, 48, 9);
    o.causal = Causal::bottom_right;
    o.window = {6000, -1};
    forward(P.q.cview(), P.k.cview(), P.v.cview(), P.out.view(), P.lse.view(), o);
    std::vector<float> all = P.out.data;
    all.insert(all.end(), P.lse.data.begin(), P.lse.data.end());
    return all;
  });
}

// An explicit mask pays for the structure it holds (attention/mask_rows.hpp): the kernel
// skips the key tiles no lane's mask row lets through and leaves the mask unread on tiles
// where every lane's row is dense. A mask equal to a structural one therefore runs the very
// operations of the structural call (the same tiles skipped, the same tiles masked), so the
// bits must be the same, in fp32 and bf16, for 1, 2 and 7 threads (both backward schedules:
// B·Hkv = 4 items), forward and backward. Widening bf16 to fp32 is exact, so comparing the
// widened results compares the bf16 bits.
template <class T>
std::vector<float> call_results(const Problem4& P, const Options& o) {
  const Buf<T> q = P.q.cast<T>(), k = P.k.cast<T>(), v = P.v.cast<T>(), dout = P.dout.cast<T>();
  Buf<T> out(P.out.shape), dq(P.dq.shape), dk(P.dk.shape), dv(P.dv.shape);
  Buf3<float> lse({P.B, P.Hq, P.Nq});
  forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
  backward(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(), dout.cview(), dq.view(), dk.view(), dv.view(), o);
  std::vector<float> all(lse.data.begin(), lse.data.end());
  for (const auto* b : {&out.data, &dq.data, &dk.data, &dv.data})
    for (const T& x : *b) all.push_back(static_cast<float>(x));
  return all;
}

TEST_P(Determinism, ExplicitMaskGivesTheBitsOfItsStructure) {
  const i64 B = 2, Hq = 4, Hkv = 2, N = 200, Nk = 230;
  const i64 pad[B] = {0, 37};  // keys left-padded away in batch 1 (not a tile boundary)
  // Each pair: the structural call and the explicit masks that say the same.
  struct Pair {
    std::string name;
    i64 nq;
    Options structural;
    Buf<std::uint8_t> keep;
    Buf<float> bias;
  };
  std::vector<Pair> pairs;
  auto visible = [](const Options& o, i64 nq, i64 nk, i64 i, i64 j) {  // docs/contract.md, "Masks"
    const i64 d = i + (o.causal == Causal::top_left ? 0 : nk - nq);
    if (o.causal != Causal::none && j > d) return false;
    if (o.window.left >= 0 && j < d - o.window.left) return false;
    return !(o.window.right >= 0 && j > d + o.window.right);
  };
  auto as_keep = [&](const Options& o, i64 nq, i64 b_dim) {  // (b_dim, 1, nq, Nk)
    Buf<std::uint8_t> keep({b_dim, 1, nq, Nk});
    for (i64 b = 0; b < b_dim; ++b)
      for (i64 i = 0; i < nq; ++i)
        for (i64 j = 0; j < Nk; ++j) keep.at(b, 0, i, j) = visible(o, nq, Nk, i, j) && (b_dim == 1 || j >= pad[b]);
    return keep;
  };
  {
    Pair c{"causal as a keep mask", N, {}, {}, {}};
    c.structural.causal = Causal::bottom_right;
    c.keep = as_keep(c.structural, N, 1);
    pairs.push_back(std::move(c));
  }
  {
    Pair c{"causal as an additive mask of 0 and -inf", N, {}, {}, {}};
    c.structural.causal = Causal::bottom_right;
    const Buf<std::uint8_t> keep = as_keep(c.structural, N, 1);
    c.bias = Buf<float>(keep.shape);
    for (std::size_t x = 0; x < keep.data.size(); ++x) c.bias.data[x] = keep.data[x] ? 0.0f : -kInf;
    pairs.push_back(std::move(c));
  }
  {
    Pair c{"a sliding window as a keep mask", N, {}, {}, {}};
    c.structural.window = {70, 9};
    c.keep = as_keep(c.structural, N, 1);
    pairs.push_back(std::move(c));
  }
  {
    // Hugging Face's 4-d mask (B, 1, Nq, Nk), causal ∧ key padding folded into one tensor,
    // against causal and a (B, 1, 1, Nk) keep mask. Rows i < 37 of batch 1 see no key.
    Pair c{"causal and left padding folded into a 4-d mask", Nk, {}, {}, {}};
    c.structural.causal = Causal::top_left;
    c.keep = as_keep(c.structural, Nk, B);
    pairs.push_back(std::move(c));
  }
  Buf<std::uint8_t> padding({B, 1, 1, Nk});
  for (i64 b = 0; b < B; ++b)
    for (i64 j = 0; j < Nk; ++j) padding.at(b, 0, 0, j) = j >= pad[b];

  for (Pair& c : pairs) {
    SCOPED_TRACE(c.name);
    const bool padded = c.keep.shape[0] == B;
    Problem4 P(B, Hq, Hkv, c.nq, Nk, 40, 24, 13);
    if (padded)  // NaN and inf in keys no row sees: they must reach nothing
      for (Buf<float>* x : {&P.k, &P.v}) x->at(1, 0, 30, 1) = kNaN, x->at(1, 1, 3, 0) = kInf;
    Options structural = c.structural;
    if (padded) structural.keep = padding.cview();
    Options masked;
    if (!c.keep.data.empty()) masked.keep = c.keep.cview();
    if (!c.bias.data.empty()) masked.mask = c.bias.cview();
    for (bool bf : {false, true}) {
      SCOPED_TRACE(bf ? "bf16" : "fp32");
      expect_same_bits_for_1_2_7_threads(GetParam().isa, [&](Options o) {
        Options s = structural, m = masked;
        s.isa = m.isa = o.isa, s.threads = m.threads = o.threads;
        const std::vector<float> want = bf ? call_results<bf16>(P, s) : call_results<float>(P, s);
        const std::vector<float> got = bf ? call_results<bf16>(P, m) : call_results<float>(P, m);
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
            << "the explicit mask changed the bits (threads " << o.threads << ")";
        if (padded) {  // lse, out, dq, dk, dv; rows of batch 1 before its padding see nothing
          const i64 lse_n = B * Hq * c.nq, out_n = lse_n * 24;
          for (std::size_t x = 0; x < got.size(); ++x) {
            const bool is_lse = static_cast<i64>(x) < lse_n;
            const i64 row = is_lse ? static_cast<i64>(x) : (static_cast<i64>(x) - lse_n) / 24;
            const bool empty = is_lse && row / (Hq * c.nq) == 1 && row % c.nq < pad[1];
            if (empty) {
              EXPECT_EQ(got[x], -kInf) << "lse of an empty row, at " << x;
            } else {
              EXPECT_TRUE(std::isfinite(got[x])) << "a masked-out NaN or inf leaked, at " << x;
            }
            if (!is_lse && static_cast<i64>(x) < lse_n + out_n && row / (Hq * c.nq) == 1 && row % c.nq < pad[1])
              EXPECT_EQ(got[x], 0.0f) << "out of an empty row, at " << x;
          }
        }
        return got;
      });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, Determinism, ::testing::ValuesIn(kernel_variants()), variant_id);

// ---- the reference backward against fp64 finite differences ------------------------------
// L = Σ out ∘ dout. Central differences with step h: truncation O(h²·L'''), rounding
// O(eps64·|L|/h); h = 1e-5 puts both near 1e-10, so 1e-7 relative is a safe margin.
struct FdCase {
  const char* name;
  i64 Hq, Hkv, Nq, Nk, Dk, Dv;
  Causal causal;
  std::optional<double> softcap;
  bool mask;
};
// gtest prints a parameter in the test's listing (ctest -N): the case's name, not its bytes.
void PrintTo(const FdCase& c, std::ostream* os) { *os << c.name; }

class FiniteDifferences : public ::testing::TestWithParam<FdCase> {};

TEST_P(FiniteDifferences, ReferenceBackwardMatches) {
  const FdCase& c = GetParam();
  std::mt19937_64 rng(11);
  std::normal_distribution<double> n(0, 1);
  auto make = [&](std::array<i64, 4> s) {
    Buf<double> b(s);
    for (auto& x : b.data) x = n(rng);
    return b;
  };
  Buf<double> q = make({1, c.Hq, c.Nq, c.Dk}), k = make({1, c.Hkv, c.Nk, c.Dk}), v = make({1, c.Hkv, c.Nk, c.Dv}),
              dout = make({1, c.Hq, c.Nq, c.Dv});
  Buf<float> mask({1, 1, c.Nq, c.Nk});
  for (auto& x : mask.data) x = static_cast<float>(n(rng));
  Options o;
  o.causal = c.causal;
  o.softcap = c.softcap;
  o.scale = 0.7;
  if (c.mask) o.mask = mask.cview();

  auto loss = [&]() {
    Buf<double> out({1, c.Hq, c.Nq, c.Dv});
    reference::forward<double, double>(q.cview(), k.cview(), v.cview(), out.view(), View3<double>{}, o);
    double l = 0;
    for (std::size_t x = 0; x < out.data.size(); ++x) l += out.data[x] * dout.data[x];
    return l;
  };
  Buf<double> out({1, c.Hq, c.Nq, c.Dv}), dq(q.shape), dk(k.shape), dv(v.shape);
  Buf3<double> lse({1, c.Hq, c.Nq});
  reference::forward<double, double>(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
  reference::backward<double, double>(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(), dout.cview(),
                                      dq.view(), dk.view(), dv.view(), o);
  const double h = 1e-5;
  for (auto [x, g, name] : {std::tuple{&q, &dq, "dq"}, {&k, &dk, "dk"}, {&v, &dv, "dv"}})
    for (std::size_t i = 0; i < x->data.size(); ++i) {
      const double keep = x->data[i];
      x->data[i] = keep + h;
      const double lp = loss();
      x->data[i] = keep - h;
      const double lm = loss();
      x->data[i] = keep;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(g->data[i], fd, 1e-7 * (1 + std::abs(fd))) << name << "[" << i << "]";
    }
}

INSTANTIATE_TEST_SUITE_P(Cases, FiniteDifferences,
                         ::testing::Values(FdCase{"plain", 1, 1, 4, 5, 3, 2, Causal::none, std::nullopt, false},
                                           FdCase{"gqa_causal", 4, 2, 5, 4, 3, 3, Causal::bottom_right, std::nullopt,
                                                  false},
                                           FdCase{"softcap_mask", 2, 1, 4, 6, 2, 3, Causal::top_left, 1.5, true}),
                         [](const auto& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace sdpa::test
