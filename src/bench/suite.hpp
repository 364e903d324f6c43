// suite.hpp — `sdpa bench` as a library function: cases in, timed rows out. Each row
// times the fast kernel by the TimerRule (timer.hpp), counts FLOPs by flops.hpp, and
// sets it against this machine's peaks measured in the same run (peaks.hpp), a plain
// BLAS implementation (blas_attention.hpp) and PyTorch's CPU SDPA (torch.hpp), the
// competitors timed by the same rule right after ours, so each ratio covers the same
// minute of a shared machine.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/flops.hpp"
#include "bench/peaks.hpp"
#include "bench/kvcache.hpp"
#include "bench/timer.hpp"
#include "bench/varlen.hpp"

namespace sdpa::bench {

/// One row of a benchmark: a shape, its mask and pass, and the threads it runs on.
struct Case {
  Shape shape;
  Causal causal = Causal::none;  // none or top_left (PyTorch's is_causal) in the suite
  Pass pass = Pass::forward;
  int threads = 1;
  Dtype dtype = Dtype::f32;  // of q, k, v, out (and dout, dq, dk, dv); PyTorch runs the same
  double dropout = 0.0;      // attention dropout p (fixed seed); > 0: timed alternating with p = 0
  // padding: one keep mask (B, 1, Nq, Nk) = the causal mask above ∧ key padding (padded_keys),
  // passed to sdpa as Options::keep (Options::causal none: the mask holds it) and to PyTorch
  // as the same bool attn_mask — the call transformers makes for a padded batch.
  ExplicitMask mask = ExplicitMask::none;
};

/// Each batch item's padded keys (padded_keys) for a padding row; empty without one. What the
/// JSON row and PyTorch's request carry.
std::vector<i64> key_padding(const Case& c);

/// A decoding row: a forward with so few query rows that reading K and V bounds its time
/// (is_decoding); judged by bytes against a plain read of the same K and V.
bool decoding(const Case& c);

/// The standard table (`sdpa bench --suite default`): forward, causal forward and
/// backward at N ∈ {1024, 4096}, D ∈ {64, 128} (B = 1, H = 8); two decoding rows
/// (Hq = 32, Hkv = 8, Nq = 1, Nk ∈ {4096, 32768}, D = 128); two forward rows on one
/// thread for per-core efficiency; forward and backward at N = 1024, D = 64 with dropout
/// p = 0.1 (against p = 0 and PyTorch's dropout_p = 0.1); causal forward and backward of a
/// padded batch (B = 4, H = 8, N = 1024, D = 64, ExplicitMask::padding); and in bf16 and fp16 each, forward
/// and backward at N ∈ {1024, 4096}, D = 64, and the Nk = 32768 decoding row. `threads` for
/// all but the one-thread rows.
std::vector<Case> default_suite(int threads);

/// "B=1 H=8 N=1024 D=64", "B=1 H=32/8 Nq=1 Nk=4096 D=128", …
std::string label(const Shape& s);
/// "fwd", "bwd", "causal fwd", "causal bwd" or "decode", then " bf16" / " fp16" for 16-bit
/// rows, " p=0.1" with dropout and " padded" with a padding mask.
std::string pass_name(const Case& c);

struct Row {
  Case c;
  Timing sdpa;               // the fast kernel
  Timing read;               // decoding rows: a plain read of the same K and V, alternating with the kernel
  Timing undropped;          // dropout rows: the same call at p = 0, alternating with the kernel
  Timing blas, torch;        // median_seconds 0: not measured (torch: SuiteResult::torch_about says why)
  std::string blas_note;     // why the BLAS baseline skipped this row, when it was asked for
  double peak_gflops = 0;    // FMA peak for c.threads (the larger of before and after)
  double bandwidth_gbs = 0;  // decoding rows: best 1 GiB read for c.threads
  // A short FMA probe on c.threads right before this row's timing of sdpa, right after it,
  // and after PyTorch's when that ran: the slowest (0: not run). The run's peaks are measured
  // at its start and end and cannot see another process that takes the cores for a few rows
  // in between; a probe well below the peak says this row was timed while it did.
  double probe_gflops = 0;

  /// Whether the probe ran below kBusyShare of the peak: the row's time, '% peak' and
  /// ratios were taken on a host busy with other work (false when either is unmeasured).
  bool host_busy() const;
  static constexpr double kBusyShare = 0.85;

  double gflops() const;             // flops(...) / the median
  double gbytes_per_s() const;       // kv_bytes / the median
  double read_gbytes_per_s() const;  // kv_bytes / the plain read's median; 0 when not measured
  /// their median over ours (above 1: sdpa is faster); 0 when not measured
  double speedup_vs_blas() const;
  double speedup_vs_torch() const;
  /// dropout rows: our median over the same call's at p = 0 (what dropout costs); 0 otherwise
  double dropout_cost() const;
};

struct SuiteOptions {
  std::vector<Case> cases;
  TimerRule rule;
  Isa isa = Isa::automatic;
  bool blas = true, torch = true;
  std::function<void(const std::string&)> progress;  // what is running now; may be empty
  std::vector<VarlenRow> varlen;                     // packed-versus-padded rows (the default suite: one per dtype)
  std::vector<KvCacheRow> kvcache;                   // KV-cache decoding rows (`--suite kvcache`)
};

struct SuiteResult {
  std::vector<Row> rows;
  Peaks peaks;
  Isa isa = Isa::automatic;       // the kernel's instruction set that ran (resolved)
  std::string torch_about;        // which PyTorch ran, or why none did
  double rss_sdpa_mib = 0;        // peak RSS after the fast kernel's runs (before the BLAS baseline's)
  double tensors_mib = 0;         // the largest row's inputs, outputs and gradients
  std::vector<VarlenRow> varlen;  // SuiteOptions::varlen, timed
  std::vector<KvCacheRow> kvcache;  // SuiteOptions::kvcache, timed
};

/// Runs every case (see the top of this file). Throws sdpa::Error for an ISA this CPU lacks
/// or an invalid rule.
SuiteResult run_suite(const SuiteOptions& options);

}  // namespace sdpa::bench
