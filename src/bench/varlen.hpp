// varlen.hpp — the packed-versus-padded row of `sdpa bench --suite default`: one batch of
// sequences of mixed lengths, run packed (sdpa::forward_varlen, cost Σ L_s²) and padded to
// the longest (sdpa::forward on (B, H, Lmax, D) with a key-padding keep-mask, cost B·Lmax²),
// timed alternately by the TimerRule so the ratio covers the same seconds of the machine.
#pragma once

#include <string>
#include <vector>

#include "bench/flops.hpp"
#include "bench/timer.hpp"

namespace sdpa::bench {

struct VarlenRow {
  std::vector<i64> lengths;  // one per sequence (Lq = Lk)
  i64 H = 8, D = 64;
  int threads = 1;
  Dtype dtype = Dtype::f32;  // of q, k, v and out, packed and padded alike
  Timing packed, padded;
  double packed_flops = 0, padded_flops = 0;  // 4·H·D·Σ L² and 4·H·D·B·Lmax² (non-causal)
  double peak_gflops = 0;                     // FMA peak for `threads`, measured in the same run

  double speedup() const;        // padded median over packed median
  double ideal_speedup() const;  // padded FLOPs over packed FLOPs
  double packed_gflops() const;
  /// "varlen fwd", "varlen fwd bf16", "varlen fwd fp16" (the suite's pass names)
  std::string pass_name() const;
  /// "H=8 D=64 L=2048,1024,…"
  std::string label() const;
};

/// The suite's batch: lengths 2048, 1024, 512, 512, 256, 128, 64, 32 (H = 8, D = 64).
VarlenRow default_varlen(int threads, Dtype dtype = Dtype::f32);
/// Lengths from "2048,1024,512": positive integers, comma-separated; throws sdpa::Error
/// naming `what` otherwise.
std::vector<i64> parse_lengths(const std::string& text, const char* what);
/// Times both ways of running `row`'s batch; fills packed and padded.
void run_varlen(VarlenRow& row, const TimerRule& rule, Isa isa);

}  // namespace sdpa::bench
