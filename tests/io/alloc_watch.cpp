// alloc_watch.cpp — replaces the global operator new/delete for the io test binary.
#include "alloc_watch.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> g_on{false};
std::atomic<std::size_t> g_largest{0};
}  // namespace

namespace sdpa::io::test {
void watch_allocations(bool on) {
  if (on) g_largest = 0;
  g_on = on;
}
std::size_t largest_allocation() { return g_largest.load(); }
}  // namespace sdpa::io::test

void* operator new(std::size_t n) {
  if (g_on.load(std::memory_order_relaxed)) {
    std::size_t prev = g_largest.load(std::memory_order_relaxed);
    while (n > prev && !g_largest.compare_exchange_weak(prev, n)) {
    }
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
