// timer_options.hpp — the timing rule's options `sdpa bench` and `sdpa check` share
// (bench::TimerRule, src/bench/timer.hpp: the one rule, stated in docs/performance.md).
#pragma once

#include <CLI/CLI.hpp>

#include "bench/timer.hpp"

namespace sdpa::cli {

/// --repeat (the rule's minimum runs), --min-seconds, --max-runs.
inline void add_timer_options(CLI::App& c, bench::TimerRule& rule) {
  c.add_option("--repeat", rule.min_runs, "At least this many timed runs after a warm-up (the median is reported)")
      ->capture_default_str();
  c.add_option("--min-seconds", rule.min_seconds, "More runs until they add up to this many seconds")
      ->capture_default_str();
  c.add_option("--max-runs", rule.max_runs, "At most this many runs for --min-seconds (--repeat still holds)")
      ->capture_default_str();
}

}  // namespace sdpa::cli
