// alloc_watch.hpp — the largest single operator new request made while armed, so a
// test can show that a hostile header led to no large allocation. The replacement
// operators live in alloc_watch.cpp, a file of their own (defined beside the callers,
// GCC inlines them and flags the malloc/free pairing as a mismatch).
#pragma once

#include <cstddef>

namespace sdpa::io::test {

void watch_allocations(bool on);   // arming also resets the record
std::size_t largest_allocation();  // since the last arming

}  // namespace sdpa::io::test
