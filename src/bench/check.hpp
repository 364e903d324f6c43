// check.hpp — `sdpa check`, the main job, as a library function: attention forward and
// backward on seeded random inputs, timed by the one rule (timer.hpp) against the FMA peak
// measured in the same run (peaks.hpp), and judged against the fp64 reference by the
// project's tolerance rule (common/tolerance.hpp). The CLI parses flags and prints.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/flops.hpp"
#include "bench/timer.hpp"
#include "common/tolerance.hpp"
#include "sdpa/attention.hpp"

namespace sdpa::bench {

struct CheckConfig {
  Shape shape{1, 8, 8, 1024, 1024, 64, 64};  // (B, Hq, Hkv, Nq, Nk, Dk, Dv)
  Causal causal = Causal::none;
  Isa isa = Isa::automatic;
  int threads = 0;  // 0: all
  TimerRule rule;
  std::uint64_t seed = 1;  // inputs: independent standard normal entries from one mt19937_64
  bool backward = true;
  std::function<void(const std::string&)> progress;  // told what runs now, for a long check
};

struct CheckRow {
  std::string tensor;  // out, lse, dq, dk, dv
  tolerance::Verdict verdict;
};

struct CheckResult {
  CheckConfig config;
  Isa isa = Isa::scalar;  // the ISA that ran
  int threads = 0;        // resolved
  Timing forward, backward;
  double forward_gflops = 0, backward_gflops = 0;
  double peak_gflops = 0;  // fp32 FMA, these threads, the larger of before and after
  std::string peak_isa;
  double peak_rss_mib = 0;           // before the reference ran
  double score_matrix_fp32_gib = 0;  // what one Nq × Nk fp32 score matrix would take
  std::vector<CheckRow> rows;
  std::string note;  // what was not checked, and why (large shapes)
  bool pass = false;
  double fraction_of_peak(double gflops) const { return peak_gflops > 0 ? gflops / peak_gflops : 0.0; }
};

/// Runs the check. Throws sdpa::Error for a bad configuration (the timer rule, an ISA this
/// CPU lacks: named as the fields of CheckConfig).
CheckResult check(const CheckConfig& config);

/// The result as `sdpa check --format json` prints it, and as its table.
nlohmann::ordered_json to_json(const CheckResult& r);
std::string to_text(const CheckResult& r);

}  // namespace sdpa::bench
