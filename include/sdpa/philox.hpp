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
#pragma once

#include <array>
#include <cstdint>

namespace sdpa {

using Philox4x32Counter = std::array<std::uint32_t, 4>;
using Philox4x32Key = std::array<std::uint32_t, 2>;

/// One Philox4x32-10 block: 128 random bits for a counter and a key.
constexpr Philox4x32Counter philox4x32_10(Philox4x32Counter ctr, Philox4x32Key key) {
  constexpr std::uint64_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // the multipliers of the paper
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // golden ratio, sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) key = {key[0] + kWeyl0, key[1] + kWeyl1};
    const std::uint64_t p0 = kMul0 * ctr[0], p1 = kMul1 * ctr[2];
    ctr = {static_cast<std::uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<std::uint32_t>(p1),
           static_cast<std::uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<std::uint32_t>(p0)};
  }
  return ctr;
}

/// Attention dropout, as PyTorch's dropout_p and FlashAttention's: each probability p_ij is
/// dropped with probability p and the kept ones scaled by 1/(1 - p); lse stays that of the
/// undropped scores. The mask is a function of (seed, offset) and the position alone:
///   key     = (seed low 32 bits, seed high 32 bits + offset high 32 bits)
///   counter = (j / 4, i, b·Hq + h, offset low 32 bits),  word j % 4 of the block
///   keep iff word >= threshold,  threshold = round(p · 2^32)
/// so one block decides four neighbouring keys, and a caller that advances the offset per
/// call (as PyTorch's generator does) gets a fresh mask each time.
struct Dropout {
  double p = 0.0;  // drop probability in [0, 1); 0 = no dropout
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;

  /// Words below this are dropped: p·2^32 rounded (p < 1 so it fits).
  constexpr std::uint32_t threshold() const {
    const double t = p * 4294967296.0 + 0.5;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(t);
  }
  /// Whether p_ij of batch b, query head h (of Hq) survives.
  constexpr bool keep(std::int64_t b, std::int64_t h, std::int64_t Hq, std::int64_t i, std::int64_t j) const {
    const auto bh = static_cast<std::uint32_t>(b * Hq + h);
    const Philox4x32Counter ctr{static_cast<std::uint32_t>(j >> 2), static_cast<std::uint32_t>(i), bh,
                                static_cast<std::uint32_t>(offset)};
    const Philox4x32Key key{static_cast<std::uint32_t>(seed),
                            static_cast<std::uint32_t>(seed >> 32) + static_cast<std::uint32_t>(offset >> 32)};
    return philox4x32_10(ctr, key)[static_cast<std::size_t>(j & 3)] >= threshold();
  }
  /// 1/(1 - p): the scale of a kept probability.
  constexpr double keep_scale() const { return 1.0 / (1.0 - p); }
};

}  // namespace sdpa
