// plan.cpp — sdpa::Plan's summary, and the recording and printing of a call's plan (plan.hpp).
#include "attention/plan.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <algorithm>

namespace sdpa {

namespace {
thread_local int plan_log_pauses = 0;
}  // namespace

std::string Plan::summary() const {
  std::string s = call + " " + dtype_name(dtype) + ": ";
  if (kernel == Kernel::reference) return s + "reference kernel (fp64 accumulation over the materialised scores)";
  s += std::string(isa_name(isa)) + ", " + std::to_string(threads) + " thread" + (threads == 1 ? "" : "s");
  if (sequences != 1) s += ", " + std::to_string(sequences) + " sequences";
  if (dtype != Dtype::f32)
    s += std::string(", 16-bit products ") + (engine == Engine16::widened ? "widened to fp32" : "on the ") +
         (engine == Engine16::widened ? "" : std::string(engine_name(engine)) + " engine");
  if (call.rfind("forward", 0) == 0) {
    s += "; items: " + std::to_string(decoding_items) + " decoding, " + std::to_string(few_lane_items) + " few-lane, " +
         std::to_string(tiled_items) + " tiled, " + std::to_string(engine_items) + " on the engine";
    if (kv_splits > 1) s += "; split-KV x" + std::to_string(kv_splits);
    if (heads_per_item > 1) s += "; " + std::to_string(heads_per_item) + " kv heads an item";
  } else {
    s += std::string("; ") + (one_pass ? "one pass" : "two passes") + ", " + std::to_string(backward_items) +
         " items, " + std::to_string(engine_items) + " on the engine";
  }
  if (strided_copies > 0) s += "; " + std::to_string(strided_copies) + " strided inputs copied";
  if (packed_operands > 0) s += "; " + std::to_string(packed_operands) + " operands packed once";
  if (paged_sequences > 0) s += "; " + std::to_string(paged_sequences) + " paged sequences read in place";
  if (quantized_sequences > 0) s += "; " + std::to_string(quantized_sequences) + " quantized sequences read in place";
  return s + " (" + why + ")";
}

namespace detail {

bool plan_logging() {
  static const bool on = [] {
    const char* v = std::getenv("SDPA_LOG");
    const std::string want = v != nullptr ? v : "";
    if (want.empty() || want == "0") return false;
    if (want == "1") return true;
    throw Error("SDPA_LOG: expected 0 or 1, not '" + want + "'");
  }();
  return on;
}

PlanRecord::PlanRecord(const Options& opt, const char* call, Dtype dtype)
    : target_(opt.plan), on_(plan_logging() || opt.plan != nullptr) {  // SDPA_LOG checked before any output is written
  if (!on_) return;
  plan_.call = call;
  plan_.kernel = opt.kernel;
  plan_.dtype = dtype;
}

void PlanRecord::finish() {
  if (!on_) return;
  if (plan_logging() && plan_log_pauses == 0) std::fprintf(stderr, "sdpa: %s\n", plan_.summary().c_str());
  if (target_ != nullptr) *target_ = plan_;
}

PlanLogPause::PlanLogPause() { ++plan_log_pauses; }
PlanLogPause::~PlanLogPause() { --plan_log_pauses; }

void merge_plan(Plan& into, const Plan& seq) {
  if (seq.call.empty()) return;  // a sequence with no query or no key ran no kernel
  const bool first = into.sequences == 0;
  into.kernel = seq.kernel;
  into.isa = seq.isa;
  if (first || seq.engine != Engine16::widened) into.engine = seq.engine;
  if (first || into.why.empty()) into.why = seq.why;
  into.threads = std::max(into.threads, seq.threads);
  into.sequences += 1;
  into.kv_splits = std::max(into.kv_splits, seq.kv_splits);
  into.decoding_items += seq.decoding_items;
  into.few_lane_items += seq.few_lane_items;
  into.tiled_items += seq.tiled_items;
  into.engine_items += seq.engine_items;
  into.heads_per_item = std::max(into.heads_per_item, seq.heads_per_item);
  into.one_pass = (first || into.one_pass) && seq.one_pass;
  into.backward_items += seq.backward_items;
  into.strided_copies += seq.strided_copies;
  into.packed_operands += seq.packed_operands;
  into.paged_sequences += seq.paged_sequences;
  into.quantized_sequences += seq.quantized_sequences;
}

}  // namespace detail
}  // namespace sdpa
