// timer.hpp — the one timing rule of every sdpa benchmark (`sdpa bench`, `sdpa check`,
// the micro-benchmarks) and of the PyTorch timing script, which receives the same
// TimerRule in its request and implements the same loop (bench/torch_sdpa.py).
//
// The rule (docs/performance.md, "Method"): `warmup_runs` untimed calls; then timed
// calls, one at a time, until at least `min_runs` have run and the timed calls add up to
// at least `min_seconds`, or `max_runs` have run, whichever comes first — but never fewer
// than `min_runs`. The figure is the median of the timed calls (the mean of the two
// middle ones for an even count). Short calls thus get many runs and a stable median, long
// ones no more than `min_runs`.
//
// Comparisons time two functions alternately (a, b, a, b, …; each warmed up first), so
// both medians cover the same seconds of a shared machine; the pair stops when both have
// `min_runs` runs and their timed calls add up to 2 × `min_seconds`, or at `max_runs`.
#pragma once

#include <functional>
#include <utility>
#include <vector>

namespace sdpa::bench {

struct TimerRule {
  int warmup_runs = 1;       // untimed calls first (page faults, caches, thread pools)
  int min_runs = 5;          // timed calls at least
  double min_seconds = 0.3;  // timed seconds at least (per function timed), unless max_runs stops first
  int max_runs = 200;        // timed calls at most, unless min_runs asks for more

  /// Throws sdpa::Error naming the field when a value is out of range.
  void validate() const;
};

struct Timing {
  double median_seconds = 0;  // 0: not measured
  int runs = 0;               // timed calls the median is over
};

/// The median of v (the mean of the two middle values for an even count); 0 when empty.
double median(std::vector<double> v);

/// Times fn by the rule.
Timing time_median(const TimerRule& rule, const std::function<void()>& fn);

/// Times fa and fb alternately by the rule (see above).
std::pair<Timing, Timing> time_alternating(const TimerRule& rule, const std::function<void()>& fa,
                                           const std::function<void()>& fb);

/// Seconds on a steady clock since an arbitrary origin.
double now_seconds();

}  // namespace sdpa::bench
