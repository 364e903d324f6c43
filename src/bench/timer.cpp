// timer.cpp — see timer.hpp.
#include "bench/timer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "sdpa/error.hpp"

namespace sdpa::bench {
namespace {

// The rule's loop over `fns` called in turn: each round calls every function once.
std::vector<Timing> time_rounds(const TimerRule& rule, const std::vector<const std::function<void()>*>& fns) {
  rule.validate();
  for (int w = 0; w < rule.warmup_runs; ++w)
    for (const auto* f : fns) (*f)();
  std::vector<std::vector<double>> times(fns.size());
  double total = 0;
  const double enough = rule.min_seconds * double(fns.size());
  for (int run = 1;; ++run) {
    for (std::size_t i = 0; i < fns.size(); ++i) {
      const double t0 = now_seconds();
      (*fns[i])();
      const double t = now_seconds() - t0;
      times[i].push_back(t);
      total += t;
    }
    if (run >= rule.min_runs && (total >= enough || run >= rule.max_runs)) break;
  }
  std::vector<Timing> out;
  for (auto& t : times) out.push_back({median(t), static_cast<int>(t.size())});
  return out;
}

}  // namespace

void TimerRule::validate() const {
  // Named by field; the command line (with_flag_names) and Python (sdpa.check) say their own names.
  if (warmup_runs < 0) throw Error("warmup_runs: must be >= 0, got " + std::to_string(warmup_runs));
  if (min_runs < 1) throw Error("min_runs: must be >= 1, got " + std::to_string(min_runs));
  if (!(min_seconds >= 0) || !std::isfinite(min_seconds))
    throw Error("min_seconds: must be finite and >= 0, got " + std::to_string(min_seconds));
  if (max_runs < 1) throw Error("max_runs: must be >= 1, got " + std::to_string(max_runs));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Timing time_median(const TimerRule& rule, const std::function<void()>& fn) { return time_rounds(rule, {&fn})[0]; }

std::pair<Timing, Timing> time_alternating(const TimerRule& rule, const std::function<void()>& fa,
                                           const std::function<void()>& fb) {
  const auto t = time_rounds(rule, {&fa, &fb});
  return {t[0], t[1]};
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace sdpa::bench
