// peaks.cpp — see peaks.hpp.
#include "bench/peaks.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <thread>

#include "common/peak.hpp"

namespace sdpa::bench {

void Peaks::measure_fma(int threads) {
  const peak::Result r = peak::measure(threads, 0.2, isa);
  double& kept = fma_gflops[threads];
  kept = std::max(kept, r.gflops);
  fma_isa = r.isa;
}

void Peaks::measure_read(int threads) {
  double& kept = read_gbs[threads];
  kept = std::max(kept, peak::read_bandwidth_gbs(threads));
}

void Peaks::measure_bf16_dot(int threads) {
  double& kept = bf16_dot_gflops[threads];
  kept = std::max(kept, peak::measure_bf16_dot(threads, 0.2).gflops);
}

double Peaks::fma(int threads) const {
  const auto it = fma_gflops.find(threads);
  return it == fma_gflops.end() ? 0.0 : it->second;
}

double Peaks::read(int threads) const {
  const auto it = read_gbs.find(threads);
  return it == read_gbs.end() ? 0.0 : it->second;
}

double Peaks::bf16_dot(int threads) const {
  const auto it = bf16_dot_gflops.find(threads);
  return it == bf16_dot_gflops.end() ? 0.0 : it->second;
}

double Peaks::cores_worth(int threads) const {
  const double one = fma(1), all = fma(threads);
  return one > 0 && all > 0 ? all / one : 0.0;
}

bool Peaks::shared_host(int threads) const {
  const double worth = cores_worth(threads);
  return threads > 1 && worth > 0 && worth < kSharedHostShare * threads;
}

int resolve_threads(int requested) {
  return requested > 0 ? requested : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

}  // namespace sdpa::bench
