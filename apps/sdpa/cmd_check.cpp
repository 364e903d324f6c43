// cmd_check.cpp — `sdpa check`: the main job (bench::check, src/bench/check.hpp): flags in,
// the result printed as a table or JSON.
#include <memory>
#include <string>

#include <fmt/core.h>

#include "bench/check.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "timer_options.hpp"

namespace sdpa::cli {
namespace {

struct Args {
  ShapeOptions shape;
  std::string causal = "none", isa = "auto", format = "table";
  int threads = 0;
  bench::TimerRule rule;
  std::uint64_t seed = 1;
  bool backward = true;
};

int run(const Args& a) {
  const auto [B, Hq, Hkv, Nq, Nk, Dk, Dv] = a.shape.resolve();
  if (a.format != "table" && a.format != "json")
    throw Error("--format: expected table or json, got '" + a.format + "'");
  bench::CheckConfig c;
  c.shape = {B, Hq, Hkv, Nq, Nk, Dk, Dv};
  c.causal = parse_causal(a.causal);
  c.isa = parse_isa(a.isa.c_str(), "--isa");
  if (!isa_supported(c.isa == Isa::automatic ? active_isa() : c.isa))
    throw Error(std::string("--isa: this CPU cannot run the ") + isa_name(c.isa) + " kernel");
  c.threads = a.threads;
  c.rule = a.rule;
  c.seed = a.seed;
  c.backward = a.backward;
  const bool tty = stderr_is_terminal();
  c.progress = [tty](const std::string& s) {
    if (tty) fmt::print(stderr, "\r\033[Ksdpa check: {}", s);
  };
  const bench::CheckResult r = bench::check(c);
  if (tty) fmt::print(stderr, "\r\033[K");
  fmt::print("{}", a.format == "json" ? bench::to_json(r).dump() + "\n" : bench::to_text(r));
  return r.pass ? 0 : 1;
}

}  // namespace

Command add_check(CLI::App& parent) {
  auto a = std::make_shared<Args>();
  CLI::App* c = parent.add_subcommand(
      "check",
      "The main job: attention forward and backward on seeded random inputs (standard normal, mt19937_64), "
      "timed (median after a warm-up), and checked against the fp64 reference.");
  a->shape.add_to(*c);
  c->add_option("--causal", a->causal, "none | top-left | bottom-right")->capture_default_str();
  c->add_option("--threads", a->threads, "Threads (0 = all)")->capture_default_str();
  c->add_option("--seed", a->seed, "Random seed")->capture_default_str();
  add_timer_options(*c, a->rule);
  c->add_flag("--backward,!--no-backward", a->backward, "Also time and check the backward pass (default on)");
  c->add_option("--isa", a->isa, kIsaHelp)->capture_default_str();
  c->add_option("--format", a->format, "table | json")->capture_default_str();
  return {c, with_flag_names(c, [a] { return run(*a); }, {{"min_runs", "--repeat"}})};
}

}  // namespace sdpa::cli
