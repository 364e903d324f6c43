// plan.hpp — how a call records its sdpa::Plan (sdpa/attention.hpp) and when it prints it.
#pragma once

#include "sdpa/attention.hpp"

namespace sdpa::detail {

/// Whether SDPA_LOG=1 (read once per process; another value than 0, 1 or unset throws).
bool plan_logging();

/// A call's plan while it runs: the caller's (Options::plan), or the call's own when only
/// SDPA_LOG asks for it, or none. finish() prints it where SDPA_LOG=1 and no enclosing call
/// (varlen's sequences, PlanLogPause) prints its own.
class PlanRecord {
 public:
  PlanRecord(const Options& opt, const char* call, Dtype dtype);
  PlanRecord(const PlanRecord&) = delete;
  PlanRecord& operator=(const PlanRecord&) = delete;
  Plan* get() { return on_ ? &plan_ : nullptr; }
  void finish();

 private:
  Plan* target_;
  bool on_;
  Plan plan_;
};

/// While one lives on a thread, calls on that thread record their plan but do not print it:
/// varlen prints one line for the whole batch, not one per sequence.
class PlanLogPause {
 public:
  PlanLogPause();
  ~PlanLogPause();
  PlanLogPause(const PlanLogPause&) = delete;
  PlanLogPause& operator=(const PlanLogPause&) = delete;
};

/// A sequence's plan added into a varlen call's: counts summed, the most threads, the engine
/// that ran any products; one_pass only where every sequence's backward ran one pass.
void merge_plan(Plan& into, const Plan& sequence);

}  // namespace sdpa::detail
