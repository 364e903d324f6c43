// sequences.hpp — running a batch of independent sequences, each its own sdpa::forward or
// backward call: varlen's packed sequences and the KV cache's (kvcache.cpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

namespace sdpa::detail {

/// Runs body(s, threads) for each of the `count` sequences: those whose own call has enough
/// work items for every thread (items[s] >= threads) one after another with all of them, then
/// the others side by side, one thread each, the costliest first. Each output element is
/// written by one call and each call's bits do not depend on its thread count, so neither do
/// the batch's. An exception in a worker is caught and rethrown after the region (none may
/// leave an OpenMP region).
template <class Body>
void run_sequences(std::size_t count, const std::vector<std::int64_t>& items, const std::vector<double>& cost,
                   int threads, Body body) {
  std::vector<std::size_t> narrow;
  for (std::size_t s = 0; s < count; ++s) {
    if (items[s] >= threads)
      body(s, threads);
    else
      narrow.push_back(s);
  }
  std::stable_sort(narrow.begin(), narrow.end(), [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  std::exception_ptr error;
  const auto n = static_cast<std::int64_t>(narrow.size());
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (std::int64_t x = 0; x < n; ++x) {
    try {
      body(narrow[static_cast<std::size_t>(x)], 1);
    } catch (...) {
#pragma omp critical(sdpa_sequences_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace sdpa::detail
