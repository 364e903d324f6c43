// test_timer.cpp — the one timer rule (src/bench/timer.hpp): warm-up calls untimed, at
// least min_runs, more until min_seconds, at most max_runs unless min_runs asks for more,
// the median; two functions alternate.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "bench/timer.hpp"
#include "sdpa/error.hpp"

namespace sdpa::bench {
namespace {

TEST(Timer, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
  EXPECT_EQ(median({}), 0.0);
}

TEST(Timer, NoMinimumTimeRunsExactlyTheMinimumRuns) {
  int calls = 0;
  const Timing t =
      time_median({/*warmup_runs=*/2, /*min_runs=*/5, /*min_seconds=*/0.0, /*max_runs=*/200}, [&] { ++calls; });
  EXPECT_EQ(t.runs, 5);
  EXPECT_EQ(calls, 7);  // two untimed warm-ups
}

TEST(Timer, MaximumRunsStopsTheMinimumTime) {
  int calls = 0;
  const Timing t = time_median({1, 2, 1e9, 7}, [&] { ++calls; });
  EXPECT_EQ(t.runs, 7);
  EXPECT_EQ(calls, 8);
}

TEST(Timer, MinimumRunsOutrankTheMaximum) {
  const Timing t = time_median({0, 9, 1e9, 3}, [] {});
  EXPECT_EQ(t.runs, 9);
}

TEST(Timer, MinimumTimeAddsRunsAndStopsWhenReached) {
  // Each call sleeps at least 2 ms, so 10 calls reach 20 ms: the rule must stop by then,
  // long before max_runs; and the median is at least the sleep.
  const Timing t = time_median({0, 1, 0.02, 1000}, [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
  EXPECT_GE(t.runs, 1);
  EXPECT_LE(t.runs, 10);
  EXPECT_GE(t.median_seconds, 0.002);
}

TEST(Timer, AlternatingInterleavesAfterWarmingBothUp) {
  std::string order;
  const auto [a, b] = time_alternating(
      {1, 3, 0.0, 200}, [&] { order += 'a'; }, [&] { order += 'b'; });
  EXPECT_EQ(order, "abababab");  // one warm-up round, three timed rounds
  EXPECT_EQ(a.runs, 3);
  EXPECT_EQ(b.runs, 3);
}

TEST(Timer, AlternatingCountsBothFunctionsTowardsTheMinimumTime) {
  // A pair needs 2 × min_seconds of their calls together: 2 ms + 2 ms per round against
  // 2 × 10 ms, so at most 5 rounds.
  auto nap = [] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
  const auto [a, b] = time_alternating({0, 1, 0.01, 1000}, nap, nap);
  EXPECT_LE(a.runs, 5);
  EXPECT_EQ(a.runs, b.runs);
}

TEST(Timer, InvalidRulesAreRefusedByName) {
  auto refuse = [](TimerRule r, const std::string& name) {
    try {
      r.validate();
      ADD_FAILURE() << "accepted a bad " << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  // By field: the CLI (with_flag_names) and Python (sdpa.check) say their own names (tests/cli, tests/python).
  refuse({-1, 5, 0.3, 200}, "warmup_runs: ");
  refuse({1, 0, 0.3, 200}, "min_runs: ");
  refuse({1, 5, -1.0, 200}, "min_seconds: ");
  refuse({1, 5, 0.3, 0}, "max_runs: ");
  EXPECT_THROW(time_median({1, 0, 0.3, 200}, [] {}), Error);
}

}  // namespace
}  // namespace sdpa::bench
