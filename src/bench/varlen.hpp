// varlen.hpp — the packed-versus-padded row of `sdpa bench --suite default`: one batch of
// sequences of mixed lengths, run packed (sdpa::forward_varlen, cost Σ L_s²) and padded to
// the longest (sdpa::forward on (B, H, Lmax, D) with a key-padding keep-mask, cost B·Lmax²),
// timed alternately by the TimerRule so the ratio covers the same seconds of the machine.
#pragma once

#include <vector>

#include "bench/flops.hpp"
#include "bench/timer.hpp"

namespace sdpa::bench {

struct VarlenRow {
  std::vector<i64> lengths;  // one per sequence (Lq = Lk)
  i64 H = 8, D = 64;
  int threads = 1;
  Timing packed, padded;
  double packed_flops = 0, padded_flops = 0;  // 4·H·D·Σ L² and 4·H·D·B·Lmax² (non-causal)

  double speedup() const;        // padded median over packed median
  double ideal_speedup() const;  // padded FLOPs over packed FLOPs
  double packed_gflops() const;
};

/// The suite's batch: lengths 2048, 1024, 512, 512, 256, 128, 64, 32 (H = 8, D = 64).
VarlenRow default_varlen(int threads);
/// Times both ways of running `row`'s batch; fills packed and padded.
void run_varlen(VarlenRow& row, const TimerRule& rule, Isa isa);

}  // namespace sdpa::bench
