// torch.hpp — PyTorch's CPU scaled_dot_product_attention timed by the same TimerRule as
// sdpa, in a subprocess: `python torch_sdpa.py` (bench/torch_sdpa.py, found by
// io::data_file) reads one JSON request on stdin and answers one JSON reply on stdout.
//
//   request: {"threads": T, "rule": {"warmup_runs", "min_runs", "min_seconds", "max_runs"},
//             "rows": [{"B", "Hq", "Hkv", "Nq", "Nk", "Dk", "Dv", "causal", "backward", "dtype", "dropout_p",
//                       "key_padding"}, …]}
//   reply:   {"torch": version, "rows": [{"median_seconds": s, "runs": n}, …]}
//            or {"error": "why"} when torch cannot be imported
//
// "causal" is PyTorch's is_causal (top-left); a backward row times torch.autograd.grad of
// a fresh forward, the forward outside the timer. "key_padding" (null when the row has no
// padding mask) holds each batch item's padded keys: the script then passes one bool
// attn_mask (B, 1, Nq, Nk), the causal mask ∧ those keys hidden, with is_causal False,
// the keep mask sdpa gets (Case::mask).
#pragma once

#include <string>
#include <vector>

#include "bench/suite.hpp"

namespace sdpa::bench {

/// The Python that runs the script: $SDPA_TORCH_PYTHON, else python3 on PATH (an active
/// virtual environment's, if any).
std::string torch_python();

struct TorchTimings {
  bool ok = false;
  std::string about;            // which torch ran, or why none could
  std::vector<Timing> timings;  // one per case when ok
};

/// Times these cases (all with the same thread count) through PyTorch in one subprocess.
/// Never throws for a missing or failing PyTorch: `about` says what went wrong.
/// Throws sdpa::Error for a case PyTorch cannot express (a bottom-right causal mask).
TorchTimings time_torch(const std::vector<Case>& cases, const TimerRule& rule);

}  // namespace sdpa::bench
