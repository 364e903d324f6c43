// decode_avx512.hpp — the forward for items with few query lanes (decoding), AVX-512
// only: scores, online softmax and P·V fused per tile of keys, the lanes taken in groups
// of up to 4 that share every K and V load. forward_item (fast_kernel.inl) sends it the
// items `decode::applies` to; the other ISAs keep forward_few_lanes.
//
// Why a path of its own (docs/performance.md, "Decoding"): with 4 lanes the general loop
// padded them to a 16-lane tile, so the softmax ran 4× the exps it needed, each (key,
// lane) dot product ended in a full horizontal sum, and O went through a copy per tile
// for the non-finite check. Here a score block is 16 dot products reduced together into
// one vector (45 shuffles and adds instead of 16 reductions), the softmax runs on those
// vectors (no padding lanes), O is double-buffered (no copy), and the prefetches of the
// rows ahead are spread through the loops that read them (K's through the score loop, V's
// through the P·V loop) instead of issued as one burst.
//
// Layout of a score vector with NL lanes: element e = l·KB + c holds lane l, key c of a
// block of KB = 16 / NL keys. One, two or four lanes per group (three take four, the
// fourth a zero query whose results are dropped); up to two groups per item.
//
// A header of its own: it brings the AVX-512 `Vec` and the kernel's shared helpers
// (kernel_common.inl: visible keys, online softmax step, arena, finish_row) into
// sdpa::detail::avx512, where fast_avx512.cpp then includes the tile loops. Compiled
// only with the AVX-512 flags (src/CMakeLists.txt).
#pragma once

#include <type_traits>  // std::integral_constant: a chunk's vector count as a type

#include "attention/fast.hpp"
#include "common/avx512_intrinsics.hpp"

namespace sdpa::detail::avx512 {

constexpr Isa kIsa = Isa::avx512;  // the converters of 16-bit tensors (kernel_common.inl)
#include "attention/simd_avx512.hpp"
#include "attention/kernel_common.inl"

namespace decode {

// The few-lane loop's constants (kernel_common.inl), so both paths tune together.
constexpr i64 kKeys = kFewTileCols;  // keys per tile; split boundaries are multiples of it
// K and V rows are prefetched this many keys ahead, into L2: twice forward_few_lanes'
// distance, since each is issued while its own half of the tile runs (64 to 128 measured
// within noise of each other, docs/performance.md).
constexpr i64 kPrefetchKeys = 2 * kFewPrefetchKeys;
constexpr i64 kGroupLanes = 4;  // lanes sharing a score block
constexpr i64 kMaxGroups = kFewLanes / kGroupLanes;
static_assert(kKeys % 16 == 0 && kMaxGroups * kGroupLanes == kFewLanes);
// Split boundaries are multiples of kTileCols (api.cpp), so a tile never straddles one and
// the item's mask test need not look at the split (tile_needs_mask in item below).
static_assert(kTileCols % kKeys == 0);

// a[0..15] -> one vector whose element e is the sum of a[e]'s elements.
inline __m512 reduce16(const __m512* a) {
  __m512 t[8], u[4];
  for (int i = 0; i < 8; ++i)  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3]
    t[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i)  // per 128-bit lane: one partial sum of each of 4 sources
    u[i] =
        _mm512_add_ps(_mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0x44), _mm512_shuffle_ps(t[2 * i], t[2 * i + 1], 0xEE));
  const __m512 s0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 s1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(s0, s1, 0x88), _mm512_shuffle_f32x4(s0, s1, 0xDD));
}

// Max (or sum) over aligned groups of G consecutive elements, in every element of the group.
template <int G, bool MAX>
inline __m512 group_reduce(__m512 x) {
  auto op = [](__m512 a, __m512 b) { return MAX ? _mm512_max_ps(a, b) : _mm512_add_ps(a, b); };
  x = op(x, _mm512_permute_ps(x, 0xB1));
  x = op(x, _mm512_permute_ps(x, 0x4E));
  if constexpr (G >= 8) x = op(x, _mm512_shuffle_f32x4(x, x, 0xB1));
  if constexpr (G >= 16) x = op(x, _mm512_shuffle_f32x4(x, x, 0x4E));
  return x;
}

// Keeps a loaded vector in a register: without it GCC folds the load into every FMA that
// uses the vector, and the loop becomes bound by the loads.
inline __m512 pin(__m512 x) {
  __asm__("" : "+v"(x));
  return x;
}

// One score block: KB keys (rows k[c]) × NL lanes (q rows of ldq floats, zero past Dk).
// pf_k: K rows to prefetch (null: none).
template <int NL>
inline __m512 score_block(const float* const* k, const float* q, i64 ldq, i64 Dk, const float* const* pf_k) {
  constexpr int KB = 16 / NL;
  __m512 a[16];
  SDPA_UNROLL
  for (auto& x : a) x = _mm512_setzero_ps();
  const i64 dfull = Dk / 16 * 16;
  auto step = [&](i64 d, __mmask16 m) {
    if (pf_k != nullptr) {
      SDPA_UNROLL
      for (int c = 0; c < KB; ++c) __builtin_prefetch(pf_k[c] + d, 0, 2);
    }
    __m512 qv[NL];
    SDPA_UNROLL
    for (int l = 0; l < NL; ++l) qv[l] = pin(_mm512_loadu_ps(q + l * ldq + d));
    SDPA_UNROLL
    for (int c = 0; c < KB; ++c) {
      const __m512 kv = pin(_mm512_maskz_loadu_ps(m, k[c] + d));
      SDPA_UNROLL
      for (int l = 0; l < NL; ++l) a[l * KB + c] = _mm512_fmadd_ps(kv, qv[l], a[l * KB + c]);
    }
  };
  for (i64 d = 0; d < dfull; d += 16) step(d, 0xFFFF);
  if (dfull < Dk) step(dfull, static_cast<__mmask16>((1u << (Dk - dfull)) - 1));
  return reduce16(a);
}

// On (NL rows of ldo) = alpha·Oo + P·V over CV vectors of the head dimension from column
// e0, keys [0, bc); the last vector loaded under `last`; pf: the V rows to prefetch, laid
// out as V (null: none). Returns the sum of O·0 over the chunk: NaN iff some output is not
// finite. (In registers, CV short chains: as a reference argument GCC kept it in memory,
// one load-FMA-store chain through all NL·CV outputs.)
template <int NL, int CV>
inline __m512 pv_chunk(const float* V, i64 ldv, i64 bc, const float* P, const float* al, const float* Oo, float* On,
                       i64 ldo, i64 e0, __mmask16 last, const float* pf) {
  constexpr int KB = 16 / NL;
  __m512 acc[NL][CV];
  SDPA_UNROLL
  for (int l = 0; l < NL; ++l) {
    const __m512 av = _mm512_set1_ps(al[l * KB]);
    SDPA_UNROLL
    for (int v = 0; v < CV; ++v) acc[l][v] = _mm512_mul_ps(_mm512_loadu_ps(Oo + l * ldo + e0 + v * 16), av);
  }
  for (i64 c = 0; c < bc; ++c) {
    const float* vr = V + c * ldv + e0;
    __m512 vv[CV];
    SDPA_UNROLL
    for (int v = 0; v < CV; ++v) vv[v] = pin(_mm512_maskz_loadu_ps(v == CV - 1 ? last : 0xFFFF, vr + v * 16));
    if (pf != nullptr) {
      SDPA_UNROLL
      for (int v = 0; v < CV; ++v) __builtin_prefetch(pf + c * ldv + e0 + v * 16, 0, 2);
    }
    const float* pc = P + (c / KB) * 16 + c % KB;
    SDPA_UNROLL
    for (int l = 0; l < NL; ++l) {
      const __m512 pv = _mm512_set1_ps(pc[l * KB]);
      SDPA_UNROLL
      for (int v = 0; v < CV; ++v) acc[l][v] = _mm512_fmadd_ps(pv, vv[v], acc[l][v]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
  __m512 chk[CV];
  SDPA_UNROLL
  for (int v = 0; v < CV; ++v) chk[v] = zero;
  SDPA_UNROLL
  for (int l = 0; l < NL; ++l) {
    SDPA_UNROLL
    for (int v = 0; v < CV; ++v) {
      _mm512_storeu_ps(On + l * ldo + e0 + v * 16, acc[l][v]);
      chk[v] = _mm512_fmadd_ps(acc[l][v], zero, chk[v]);
    }
  }
  SDPA_UNROLL
  for (int v = 1; v < CV; ++v) chk[0] = _mm512_add_ps(chk[0], chk[v]);
  return chk[0];
}

// The same with zero weights skipped, so a zero weight never multiplies an inf or NaN in V
// (what the general path computes when V is not finite). Rare: a tile whose fast result
// came out non-finite is redone with it.
template <int NL>
inline void pv_skip_zero(const float* V, i64 ldv, i64 bc, i64 Dv, const float* P, const float* al, const float* Oo,
                         float* On, i64 ldo) {
  constexpr int KB = 16 / NL;
  for (int l = 0; l < NL; ++l) {
    for (i64 e = 0; e < Dv; ++e) On[l * ldo + e] = Oo[l * ldo + e] * al[l * KB];
    for (i64 c = 0; c < bc; ++c) {
      const float w = P[(c / KB) * 16 + c % KB + l * KB];
      if (w == 0.0f) continue;
      for (i64 e = 0; e < Dv; ++e)
        On[l * ldo + e] = __builtin_fmaf(w, V[c * ldv + e], On[l * ldo + e]);  // as the FMAs above
    }
  }
}

// P·V for one lane group over the whole head dimension, CVMAX vectors at a time.
template <int NL>
inline void pv_tile(const float* V, i64 ldv, i64 bc, i64 Dv, const float* P, const float* al, const float* Oo,
                    float* On, i64 ldo, const float* pf) {
  constexpr int CVMAX = NL == 4 ? 4 : 8;  // 16 accumulators at most
  const i64 nvec = (Dv + 15) / 16;
  const __mmask16 tail = Dv % 16 == 0 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (Dv % 16)) - 1);
  __m512 chk = _mm512_setzero_ps();
  auto chunk = [&](auto cv, i64 e0, __mmask16 m) {  // cv: the vector count, as a type
    chk = _mm512_add_ps(chk, pv_chunk<NL, decltype(cv)::value>(V, ldv, bc, P, al, Oo, On, ldo, e0, m, pf));
  };
  i64 v0 = 0;
  for (; v0 + CVMAX <= nvec; v0 += CVMAX)
    chunk(std::integral_constant<int, CVMAX>{}, v0 * 16, v0 + CVMAX == nvec ? tail : 0xFFFF);
  const i64 e0 = v0 * 16;
  switch (nvec - v0) {  // the remaining vectors (fewer than CVMAX), the last under the tail mask
    case 1: chunk(std::integral_constant<int, 1>{}, e0, tail); break;
    case 2: chunk(std::integral_constant<int, 2>{}, e0, tail); break;
    case 3: chunk(std::integral_constant<int, 3>{}, e0, tail); break;
    case 4:
      if constexpr (CVMAX > 4) chunk(std::integral_constant<int, 4>{}, e0, tail);
      break;
    case 5:
      if constexpr (CVMAX > 5) chunk(std::integral_constant<int, 5>{}, e0, tail);
      break;
    case 6:
      if constexpr (CVMAX > 6) chunk(std::integral_constant<int, 6>{}, e0, tail);
      break;
    case 7:
      if constexpr (CVMAX > 7) chunk(std::integral_constant<int, 7>{}, e0, tail);
      break;
    default: break;
  }
  if (_mm512_cmp_ps_mask(chk, chk, _CMP_UNORD_Q) != 0) pv_skip_zero<NL>(V, ldv, bc, Dv, P, al, Oo, On, ldo);
}

// Whether an item takes this path: fp32 (16-bit K and V take forward_few_lanes, which
// converts them on load), few lanes, unit-stride K and V rows, no explicit mask.
inline bool applies(const Problem& p, const Tensors& t, i64 n) {
  return p.dtype == Dtype::f32 && n <= kFewLanes && t.k.stride[3] == 1 && t.v.stride[3] == 1 && !explicit_mask(p) && p.Nk < (i64{1} << 30);
}

// One item's buffers; `slots` is its lanes rounded up to whole groups (at most kFewLanes).
struct Scratch {
  float* Q;     // (slots, dkp)  queries as rows, zero past Dk and past the last lane
  float* O[2];  // (slots, dvp)  unnormalised output, double-buffered
  float* P;     // (slots, kKeys) probabilities, per group in score-vector layout
  static Scratch carve(const Problem& p, Arena& arena, i64 slots) {
    const i64 dkp = round_up(p.Dk, kPad), dvp = round_up(p.Dv, kPad);
    Scratch s;
    s.Q = arena.take(slots * dkp);
    s.O[0] = arena.take(slots * dvp);
    s.O[1] = arena.take(slots * dvp);
    s.P = arena.take(slots * kKeys);
    return s;
  }
};

// The item, its lanes in groups of NL. Writes out and lse (or the split's partial
// results), as the other forward loops do.
template <int NL>
void item(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes, WorkerScratch scratch) {
  constexpr int KB = 16 / NL;
  constexpr i64 blocks = kKeys / KB;
  const i64 b = it.b, g = it.g, n = lanes.n, Dk = p.Dk, Dv = p.Dv, dkp = round_up(Dk, kPad), dvp = round_up(Dv, kPad);
  const i64 groups = (n + NL - 1) / NL, slots = groups * NL;
  const auto s = carve_scratch<Scratch>(p, scratch, slots);
  float* const Q = s.Q;
  float* const P = s.P;
  float* const O[2] = {s.O[0], s.O[1]};
  alignas(64) float al[kMaxGroups][16];  // each group's rescale factors (score-vector layout)

  for (i64 x = 0; x < slots * dkp; ++x) Q[x] = 0.0f;
  for (i64 r = 0; r < n; ++r)
    for (i64 d = 0; d < Dk; ++d) Q[r * dkp + d] = t.q.data[off(t.q, b, lanes.h[r], lanes.i[r], d)];
  for (i64 x = 0; x < slots * dvp; ++x) O[0][x] = 0.0f;

  // Each lane's visible keys [lo, hi] within this item's split; padding slots copy lane 0.
  alignas(64) int lo_e[kMaxGroups][16], hi_e[kMaxGroups][16], c_e[16];
  for (i64 r = 0; r < slots; ++r) {
    const i64 i = lanes.i[r < n ? r : 0];
    const KeyRange keys = visible_keys(p, i, i, it.j_begin, it.j_end);
    for (int c = 0; c < KB; ++c) {
      lo_e[r / NL][(r % NL) * KB + c] = static_cast<int>(keys.first);
      hi_e[r / NL][(r % NL) * KB + c] = static_cast<int>(keys.last);
    }
  }
  const KeyRange keys = visible_keys(p, lanes.i_min, lanes.i_max, it.j_begin, it.j_end);
  const i64 first = keys.first, last = keys.last;
  for (int e = 0; e < 16; ++e) c_e[e] = e % KB;
  const __m512i cidx = _mm512_load_si512(c_e);

  const __m512 neg_inf = _mm512_set1_ps(kNegInf), zero = _mm512_setzero_ps();
  const __m512 beta = _mm512_set1_ps(static_cast<float>(p.scale));
  const __m512 cap = _mm512_set1_ps(static_cast<float>(p.softcap));
  const __m512 inv_cap = _mm512_set1_ps(static_cast<float>(1.0 / p.softcap));
  __m512 m[kMaxGroups], l[kMaxGroups];  // running max (per lane, in all its elements), partial sums
  for (i64 gi = 0; gi < groups; ++gi) m[gi] = neg_inf, l[gi] = zero;

  const float* Kb = t.k.data + off(t.k, b, g, 0, 0);
  const float* Vb = t.v.data + off(t.v, b, g, 0, 0);
  const i64 ldk = t.k.stride[2], ldv = t.v.stride[2];
  int cur = 0;
  for (i64 j0 = first / kKeys * kKeys; j0 <= last; j0 += kKeys) {
    const i64 bc = imin(kKeys, p.Nk - j0);
    // Only the lanes' ranges and Nk cut a tile (split boundaries do not: see kKeys).
    const bool mask = tile_needs_mask(p, lanes.i_min, lanes.i_max, j0, kKeys);
    for (i64 gi = 0; gi < groups; ++gi) {
      __m512 sc[blocks];  // the tile's score vectors
      for (i64 kb = 0; kb < blocks; ++kb) {
        const i64 jb = j0 + kb * KB;
        const float* kr[KB];
        const float* pk[KB] = {};
        for (int c = 0; c < KB; ++c) kr[c] = Kb + imin(jb + c, p.Nk - 1) * ldk;  // rows past Nk: masked below
        const bool pf = gi == 0 && jb + kPrefetchKeys + KB - 1 <= last;
        if (pf)
          for (int c = 0; c < KB; ++c) pk[c] = Kb + (jb + kPrefetchKeys + c) * ldk;
        __m512 x = _mm512_mul_ps(score_block<NL>(kr, Q + gi * NL * dkp, dkp, Dk, pf ? pk : nullptr), beta);
        if (p.has_softcap) x = _mm512_mul_ps(cap, Vec::tanh(_mm512_mul_ps(x, inv_cap)));
        if (mask) {
          const __m512i j = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(jb)), cidx);
          const __mmask16 out = _mm512_cmpgt_epi32_mask(_mm512_load_si512(lo_e[gi]), j) |
                                _mm512_cmpgt_epi32_mask(j, _mm512_load_si512(hi_e[gi]));
          x = _mm512_mask_mov_ps(x, out, neg_inf);
        }
        sc[kb] = x;
      }
      // Online softmax over the tile's score vectors, a lane's max taken over its KB keys.
      float* Pg = P + gi * NL * kKeys;
      const __m512 alpha = online_softmax_step(
          m[gi], l[gi], blocks, [&](i64 kb) { return sc[kb]; }, [](__m512 x) { return group_reduce<KB, true>(x); },
          [&](i64 kb, __m512 e) { _mm512_storeu_ps(Pg + kb * 16, e); });
      _mm512_store_ps(al[gi], alpha);
      const bool pf = gi == 0 && j0 + kKeys - 1 + kPrefetchKeys <= last;
      pv_tile<NL>(Vb + j0 * ldv, ldv, bc, Dv, Pg, al[gi], O[cur] + gi * NL * dvp, O[cur ^ 1] + gi * NL * dvp, dvp,
                  pf ? Vb + (j0 + kPrefetchKeys) * ldv : nullptr);
    }
    cur ^= 1;
  }

  alignas(64) float mf[kMaxGroups][16], lf[kMaxGroups][16];
  for (i64 gi = 0; gi < groups; ++gi) {
    _mm512_store_ps(mf[gi], m[gi]);
    _mm512_store_ps(lf[gi], group_reduce<KB, false>(l[gi]));
  }
  for (i64 r = 0; r < n; ++r)
    finish_row(p, t, it, b, lanes.h[r], lanes.i[r], r, mf[r / NL][(r % NL) * KB], lf[r / NL][(r % NL) * KB],
               O[cur] + r * dvp);
}

// Runs the item with the widest lane group its lane count fills.
inline void forward(const Problem& p, const Tensors& t, const ForwardItem& it, const ItemLanes& lanes,
                    WorkerScratch scratch) {
  if (lanes.n == 1) return item<1>(p, t, it, lanes, scratch);
  if (lanes.n == 2) return item<2>(p, t, it, lanes, scratch);
  item<4>(p, t, it, lanes, scratch);
}

}  // namespace decode
}  // namespace sdpa::detail::avx512
