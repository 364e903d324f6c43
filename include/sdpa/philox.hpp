// sdpa/philox.hpp — the counter-based generator behind attention dropout.
//
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel Random Numbers: As Easy as 1, 2, 3",
// SC'11; the Random123 library): a 128-bit counter and a 64-bit key go through ten rounds of
// two 32×32→64-bit multiplications (the high halves xored with the other words and the key,
// the low halves kept), the key bumped by the Weyl constants between rounds. Being a pure
// function of (counter, key), a mask bit can be regenerated anywhere — in the backward, in
// any thread, in any tile order — so the mask is never stored and the bits never depend on
// the thread count. Checked against Random123's published known-answer vectors
// (tests/kernel/test_dropout.cpp).
//
// The rounds and the dropout decision are written once, as templates over a word type
// (`Ops`): the reference kernel and the public `Dropout::keep` instantiate them on one
// 32-bit word (PhiloxScalar), the fast kernel on each ISA's vector of 32-bit lanes, one
// block per lane (src/attention/simd_*.hpp, `Words`) — so both decide every position by the
// same code. An `Ops` gives: Word, Mask, set1(uint32) -> Word, bxor(Word, Word),
// mulhilo(uint32 m, Word x, Word& hi, Word& lo) (the 64-bit products m·x split),
// halves(Word x, Word& lo, Word& hi) (x's low and high 16 bits, each zero-extended), and
// at_least(Word, uint32 t) -> Mask (word >= t, unsigned). The templates call nothing else, so
// a kernel compiled for one ISA instantiates its own copy and shares no inline code.
#pragma once

#include <array>
#include <cstdint>

namespace sdpa {

using Philox4x32Counter = std::array<std::uint32_t, 4>;
using Philox4x32Key = std::array<std::uint32_t, 2>;

/// Four words of a Philox block, of any word type.
template <class Ops>
struct PhiloxWords {
  typename Ops::Word w[4];
};

/// The ten rounds on a counter of any word type, the key (k0, k1) the same for every lane.
template <class Ops>
constexpr PhiloxWords<Ops> philox4x32_10_rounds(PhiloxWords<Ops> ctr, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // the multipliers of the paper
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // golden ratio, sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += kWeyl0, k1 += kWeyl1;
    typename Ops::Word hi0{}, lo0{}, hi1{}, lo1{};
    Ops::mulhilo(kMul0, ctr.w[0], hi0, lo0);
    Ops::mulhilo(kMul1, ctr.w[2], hi1, lo1);
    ctr = {{Ops::bxor(Ops::bxor(hi1, ctr.w[1]), Ops::set1(k0)), lo1,
            Ops::bxor(Ops::bxor(hi0, ctr.w[3]), Ops::set1(k1)), lo0}};
  }
  return ctr;
}

/// The word type of one block: plain 32-bit arithmetic.
struct PhiloxScalar {
  using Word = std::uint32_t;
  using Mask = bool;
  static constexpr Word set1(std::uint32_t x) { return x; }
  static constexpr Word bxor(Word a, Word b) { return a ^ b; }
  static constexpr void mulhilo(std::uint32_t m, Word x, Word& hi, Word& lo) {
    const std::uint64_t prod = std::uint64_t{m} * x;
    hi = static_cast<Word>(prod >> 32), lo = static_cast<Word>(prod);
  }
  static constexpr void halves(Word x, Word& lo, Word& hi) { lo = x & 0xFFFFu, hi = x >> 16; }
  static constexpr Mask at_least(Word x, std::uint32_t t) { return x >= t; }
};

/// One Philox4x32-10 block: 128 random bits for a counter and a key.
constexpr Philox4x32Counter philox4x32_10(Philox4x32Counter ctr, Philox4x32Key key) {
  const PhiloxWords<PhiloxScalar> out = philox4x32_10_rounds<PhiloxScalar>({{ctr[0], ctr[1], ctr[2], ctr[3]}}, key[0], key[1]);
  return {out.w[0], out.w[1], out.w[2], out.w[3]};
}

/// What a dropout mask depends on besides the position, in the form Philox takes it
/// (Dropout::stream): the key, the counter's last word and the threshold.
struct DropoutStream {
  std::uint32_t key0 = 0, key1 = 0;  // seed low 32 bits; seed high 32 bits + offset high 32 bits
  std::uint32_t counter3 = 0;        // offset low 32 bits
  std::uint32_t threshold = 0;       // 16-bit halves below it are dropped: round(p·2^16)
};

/// Eight keep decisions (a plain array, not std::array: its operator[] would be an inline
/// function shared by the ISA objects).
template <class Ops>
struct DropoutKeep8 {
  typename Ops::Mask keep[8];
};

/// The keep decisions of keys 8·key_octet + x (x = 0..7) of query row `row` of batch-head
/// `batch_head` = b·Hq + h: one Philox block, counter (key_octet, row, batch_head, offset
/// low); key x is decided by the low 16 bits of word x (x < 4) or the high 16 bits of word
/// x − 4, kept iff that half is at least the threshold. The one definition of the mask.
/// Eight decisions per block (not four 32-bit words) halve the generator's cost per score,
/// at the price of p quantised to 2^-16 (FlashAttention's dropout takes 16 per block, p
/// quantised to 1/256).
template <class Ops>
constexpr DropoutKeep8<Ops> dropout_keep8(const DropoutStream& s, typename Ops::Word key_octet, typename Ops::Word row,
                                          typename Ops::Word batch_head) {
  const PhiloxWords<Ops> bits =
      philox4x32_10_rounds<Ops>({{key_octet, row, batch_head, Ops::set1(s.counter3)}}, s.key0, s.key1);
  DropoutKeep8<Ops> k{};
  for (int w = 0; w < 4; ++w) {
    typename Ops::Word lo{}, hi{};
    Ops::halves(bits.w[w], lo, hi);
    k.keep[w] = Ops::at_least(lo, s.threshold);
    k.keep[4 + w] = Ops::at_least(hi, s.threshold);
  }
  return k;
}

/// Attention dropout, as PyTorch's dropout_p and FlashAttention's: each probability p_ij is
/// dropped with probability p and the kept ones scaled by 1/(1 - p); lse stays that of the
/// undropped scores. The mask is a function of (seed, offset) and the position alone — the
/// position in the whole sequence, I = row0 + i and J = key0 + j for the call's query i and key j:
///   key     = (seed low 32 bits, seed high 32 bits + offset high 32 bits)
///   counter = (J / 8, I, (batch0 + b)·Hq + h, offset low 32 bits)
///   half    = low 16 bits of word J % 8 of the block if J % 8 < 4, else the high 16 bits of word J % 8 − 4
///   keep iff half >= threshold,  threshold = round(p · 2^16)
/// so one block decides eight neighbouring keys, p is applied as threshold / 2^16 (within
/// 2^-17 of the p asked for), and a caller that advances the offset per call (as PyTorch's
/// generator does) gets a fresh mask each time. The counter words are 32 bits: a call with
/// dropout is refused unless row0 + Nq <= 2^32, key0 + Nk <= 2^35 and (batch0 + B)·Hq <= 2^32
/// (validation), so no two positions share a block.
struct Dropout {
  double p = 0.0;  // drop probability in [0, 1); 0 = no dropout
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  // The batch index of the call's first batch: a call holding batches [batch0, batch0 + B) of
  // a larger one draws their masks (forward_varlen runs sequence s with batch0 = s).
  std::int64_t batch0 = 0;
  // The position of the call's first query row and first key in a longer sequence: a call
  // holding queries [row0, row0 + Nq) and keys [key0, key0 + Nk) of it draws their part of
  // the sequence's mask (block_options sets them from a block's BlockPos, so attention cut
  // into blocks — ring attention — drops what the whole call would). Any values >= 0; key0
  // need not be a multiple of 4.
  std::int64_t row0 = 0, key0 = 0;

  /// 16-bit halves below this are dropped: p·2^16 rounded (at most 2^16: every half dropped).
  constexpr std::uint32_t threshold() const { return static_cast<std::uint32_t>(p * 65536.0 + 0.5); }
  /// The key, counter word and threshold of this call's mask.
  constexpr DropoutStream stream() const {
    return {static_cast<std::uint32_t>(seed),
            static_cast<std::uint32_t>(seed >> 32) + static_cast<std::uint32_t>(offset >> 32),
            static_cast<std::uint32_t>(offset), threshold()};
  }
  /// Whether p_ij of batch b, query head h (of Hq), query i and key j (all of this call)
  /// survives: the decision at the sequence's position (row0 + i, key0 + j).
  constexpr bool keep(std::int64_t b, std::int64_t h, std::int64_t Hq, std::int64_t i, std::int64_t j) const {
    const std::int64_t key = key0 + j;
    return dropout_keep8<PhiloxScalar>(stream(), static_cast<std::uint32_t>(key >> 3),
                                       static_cast<std::uint32_t>(row0 + i),
                                       static_cast<std::uint32_t>((batch0 + b) * Hq + h))
        .keep[key & 7];
  }
  /// 1/(1 - p): the scale of a kept probability.
  constexpr double keep_scale() const { return 1.0 / (1.0 - p); }
};

}  // namespace sdpa
