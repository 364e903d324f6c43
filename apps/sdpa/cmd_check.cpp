// cmd_check.cpp — `sdpa check`: the main job. Attention on generated inputs, timed by the
// benchmark library's rule (src/bench/: one timer, one FLOP count, the measured peak), and
// checked against the fp64 reference by the project's tolerance rule.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench/flops.hpp"
#include "bench/peaks.hpp"
#include "bench/timer.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "common/tolerance.hpp"
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

// The reference materialises Nq x Nk doubles per head; above this many it checks a
// strided subset of query rows instead.
constexpr i64 kMaxReferenceScores = i64(1) << 26;

struct Row {
  std::string tensor;
  tolerance::Verdict v;
};

class Progress {
 public:
  explicit Progress(bool on) : on_(on) {}
  void say(const std::string& s) const {
    if (on_) fmt::print(stderr, "\r\033[Ksdpa check: {}", s);
  }
  ~Progress() {
    if (on_) fmt::print(stderr, "\r\033[K");
  }

 private:
  bool on_;
};

int run(const Args& a) {
  const auto [B, Hq, Hkv, Nq, Nk, Dk, Dv] = a.shape.resolve();
  a.rule.validate();
  if (a.format != "table" && a.format != "json")
    throw Error("--format: expected table or json, got '" + a.format + "'");
  Options opt;
  opt.causal = parse_causal(a.causal);
  opt.threads = a.threads;
  opt.isa = parse_isa(a.isa.c_str(), "--isa");
  const Isa isa = opt.isa == Isa::automatic ? active_isa() : opt.isa;
  if (!isa_supported(isa)) throw Error(std::string("--isa: this CPU cannot run the ") + isa_name(isa) + " kernel");
  const Progress progress(stderr_is_terminal());

  // Inputs: independent standard normal entries from one seeded mt19937_64.
  progress.say("generating inputs");
  std::mt19937_64 rng(a.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto make = [&](i64 n) {
    std::vector<float> x(static_cast<std::size_t>(n));
    for (auto& e : x) e = normal(rng);
    return x;
  };
  std::vector<float> q = make(B * Hq * Nq * Dk), k = make(B * Hkv * Nk * Dk), v = make(B * Hkv * Nk * Dv),
                     dout = make(B * Hq * Nq * Dv);
  std::vector<float> out(dout.size()), lse(static_cast<std::size_t>(B * Hq * Nq)), dq(q.size()), dk(k.size()),
      dv(v.size());
  const auto Q = contiguous<const float>(q.data(), {B, Hq, Nq, Dk}),
             K = contiguous<const float>(k.data(), {B, Hkv, Nk, Dk}),
             V = contiguous<const float>(v.data(), {B, Hkv, Nk, Dv}),
             dO = contiguous<const float>(dout.data(), {B, Hq, Nq, Dv});
  const auto O = contiguous(out.data(), {B, Hq, Nq, Dv});
  const auto L = contiguous(lse.data(), {B, Hq, Nq});

  // Timing by the one rule (bench::TimerRule), FLOPs by the one count (bench::flops), the
  // FMA peak for as many threads as the kernel uses measured before and after, the larger kept.
  const bench::Shape shape{B, Hq, Hkv, Nq, Nk, Dk, Dv};
  const int threads = bench::resolve_threads(a.threads);
  progress.say("measuring the FMA peak");
  bench::Peaks peaks;
  peaks.isa = isa;  // the peak of the ISA being checked, also when --isa differs from SDPA_ISA
  peaks.measure_fma(threads);
  progress.say("timing the forward");
  const bench::Timing fwd = bench::time_median(a.rule, [&] { forward(Q, K, V, O, L, opt); });
  bench::Timing bwd;
  if (a.backward) {
    progress.say("timing the backward");
    const auto dQ = contiguous(dq.data(), {B, Hq, Nq, Dk});
    const auto dK = contiguous(dk.data(), {B, Hkv, Nk, Dk});
    const auto dV = contiguous(dv.data(), {B, Hkv, Nk, Dv});
    bwd = bench::time_median(a.rule, [&] { backward(Q, K, V, O, L, dO, dQ, dK, dV, opt); });
  }
  progress.say("measuring the FMA peak again");
  peaks.measure_fma(threads);
  const double peak_gflops = peaks.fma(threads);
  auto gflops = [&](bench::Pass pass, const bench::Timing& t) {
    return t.median_seconds > 0 ? bench::flops(shape, opt.causal, pass) / t.median_seconds / 1e9 : 0.0;
  };
  const double fwd_gf = gflops(bench::Pass::forward, fwd), bwd_gf = gflops(bench::Pass::backward, bwd);
  auto frac = [&](double gf) { return peak_gflops > 0 ? gf / peak_gflops : 0.0; };
  const double rss = bench::peak_rss_mib();  // before the reference, which materialises scores

  // Check against the fp64 reference (and the naive fp32 one that sets the tolerance).
  std::vector<Row> rows;
  std::string note;
  i64 stride = 1;
  if (Nq * Nk > kMaxReferenceScores) {
    if (opt.causal == Causal::none) {
      stride = (Nq * Nk + kMaxReferenceScores - 1) / kMaxReferenceScores;
      note = fmt::format("forward checked on every {}th query row ({} of {}); backward not checked at this size",
                         stride, (Nq + stride - 1) / stride, Nq);
    } else {
      note =
          "not checked: the reference needs the full score matrix, too large here, and a causal mask "
          "cannot be checked on a subset of rows";
    }
  }
  const bool check_fwd = note.rfind("not checked", 0) != 0, check_bwd = a.backward && stride == 1 && check_fwd;
  if (check_fwd) {
    progress.say("checking against the fp64 reference");
    const i64 nq = (Nq + stride - 1) / stride;
    auto rows_of = [&](const float* p, i64 D) {  // the checked query rows, as a view
      return View4<const float>{p, {B, Hq, nq, D}, {Hq * Nq * D, Nq * D, stride * D, 1}};
    };
    std::vector<double> q64(static_cast<std::size_t>(B * Hq * nq * Dk)), k64(k.begin(), k.end()),
        v64(v.begin(), v.end());
    {
      const auto qs = rows_of(q.data(), Dk);
      std::size_t x = 0;
      for (i64 b = 0; b < B; ++b)
        for (i64 h = 0; h < Hq; ++h)
          for (i64 i = 0; i < nq; ++i)
            for (i64 d = 0; d < Dk; ++d) q64[x++] = qs(b, h, i, d);
    }
    std::vector<double> out64(static_cast<std::size_t>(B * Hq * nq * Dv)), lse64(static_cast<std::size_t>(B * Hq * nq));
    std::vector<float> outn(out64.size()), lsen(lse64.size()), out_s(out64.size()), lse_s(lse64.size());
    const auto Q64 = contiguous<const double>(q64.data(), {B, Hq, nq, Dk});
    reference::forward<double, double>(Q64, contiguous<const double>(k64.data(), {B, Hkv, Nk, Dk}),
                                       contiguous<const double>(v64.data(), {B, Hkv, Nk, Dv}),
                                       contiguous(out64.data(), {B, Hq, nq, Dv}), contiguous(lse64.data(), {B, Hq, nq}),
                                       opt);
    reference::forward<float, float>(rows_of(q.data(), Dk), K, V, contiguous(outn.data(), {B, Hq, nq, Dv}),
                                     contiguous(lsen.data(), {B, Hq, nq}), opt);
    {  // the fast results for the same rows
      const auto os = rows_of(out.data(), Dv);
      std::size_t x = 0, y = 0;
      for (i64 b = 0; b < B; ++b)
        for (i64 h = 0; h < Hq; ++h)
          for (i64 i = 0; i < nq; ++i) {
            lse_s[y++] = lse[static_cast<std::size_t>((b * Hq + h) * Nq + i * stride)];
            for (i64 e = 0; e < Dv; ++e) out_s[x++] = os(b, h, i, e);
          }
    }
    std::vector<double> dq64, dk64, dv64;
    if (check_bwd) {
      progress.say("checking the backward against the fp64 reference");
      std::vector<double> do64(dout.begin(), dout.end());
      dq64.resize(q.size()), dk64.resize(k.size()), dv64.resize(v.size());
      reference::backward<double, double>(
          Q64, contiguous<const double>(k64.data(), {B, Hkv, Nk, Dk}),
          contiguous<const double>(v64.data(), {B, Hkv, Nk, Dv}),
          contiguous<const double>(out64.data(), {B, Hq, Nq, Dv}), contiguous<const double>(lse64.data(), {B, Hq, Nq}),
          contiguous<const double>(do64.data(), {B, Hq, Nq, Dv}), contiguous(dq64.data(), {B, Hq, Nq, Dk}),
          contiguous(dk64.data(), {B, Hkv, Nk, Dk}), contiguous(dv64.data(), {B, Hkv, Nk, Dv}), opt);
    }
    const auto fl = tolerance::floors(q, k, v, dout, Dk, Dv, std::abs(resolve_scale(opt, Dk)), 0.0, 0.0,
                                      tolerance::max_abs(lse64), tolerance::max_abs(dv64));
    rows.push_back({"out", tolerance::judge(out_s, outn, out64, fl.out)});
    rows.push_back({"lse", tolerance::judge(lse_s, lsen, lse64, fl.lse)});
    if (check_bwd) {
      std::vector<float> dqn(q.size()), dkn(k.size()), dvn(v.size());
      reference::backward<float, float>(
          Q, K, V, contiguous<const float>(outn.data(), {B, Hq, Nq, Dv}),
          contiguous<const float>(lsen.data(), {B, Hq, Nq}), dO, contiguous(dqn.data(), {B, Hq, Nq, Dk}),
          contiguous(dkn.data(), {B, Hkv, Nk, Dk}), contiguous(dvn.data(), {B, Hkv, Nk, Dv}), opt);
      rows.push_back({"dq", tolerance::judge(dq, dqn, dq64, fl.dq)});
      rows.push_back({"dk", tolerance::judge(dk, dkn, dk64, fl.dk)});
      rows.push_back({"dv", tolerance::judge(dv, dvn, dv64, fl.dv)});
    }
  }
  bool ok = true;
  for (const auto& r : rows) ok = ok && r.v.ok();
  const double scores_gib = 4.0 * double(Nq) * double(Nk) / (1024.0 * 1024.0 * 1024.0);

  if (a.format == "json") {
    nlohmann::ordered_json checks = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      checks.push_back({{"tensor", r.tensor},
                        {"err_fast", r.v.fast},
                        {"err_naive_fp32", r.v.naive},
                        {"bound", r.v.bound},
                        {"pass", r.v.ok()}});
    const nlohmann::ordered_json doc = {{"batch", B},
                                        {"heads", Hq},
                                        {"kv_heads", Hkv},
                                        {"seq", Nq},
                                        {"kv_seq", Nk},
                                        {"dim", Dk},
                                        {"dim_v", Dv},
                                        {"causal", a.causal},
                                        {"isa", isa_name(isa)},
                                        {"threads", a.threads},
                                        {"forward_seconds_median", fwd.median_seconds},
                                        {"forward_runs", fwd.runs},
                                        {"forward_gflops", fwd_gf},
                                        {"backward_seconds_median", bwd.median_seconds},
                                        {"backward_runs", bwd.runs},
                                        {"backward_gflops", bwd_gf},
                                        {"peak_gflops", peak_gflops},
                                        {"peak_isa", peaks.fma_isa},
                                        {"fraction_of_peak_forward", frac(fwd_gf)},
                                        {"fraction_of_peak_backward", frac(bwd_gf)},
                                        {"peak_rss_mib", rss},
                                        {"score_matrix_fp32_gib", scores_gib},
                                        {"checks", checks},
                                        {"note", note},
                                        {"pass", ok}};
    fmt::print("{}\n", doc.dump());
  } else {
    fmt::print("sdpa check: B={} Hq={} Hkv={} Nq={} Nk={} Dk={} Dv={} causal={} isa={} threads={}\n", B, Hq, Hkv, Nq,
               Nk, Dk, Dv, a.causal, isa_name(isa), a.threads ? std::to_string(a.threads) : std::string("all"));
    fmt::print("  forward   median {:9.4f} s  {:7.1f} GFLOP/s  {:5.1f}% of peak  ({} runs after a warm-up)\n",
               fwd.median_seconds, fwd_gf, 100 * frac(fwd_gf), fwd.runs);
    if (a.backward)
      fmt::print(
          "  backward  median {:9.4f} s  {:7.1f} GFLOP/s  {:5.1f}% of peak  ({} runs; FLOPs counted as 2.5x forward)\n",
          bwd.median_seconds, bwd_gf, 100 * frac(bwd_gf), bwd.runs);
    fmt::print(
        "  peak      {:.1f} GFLOP/s fp32 FMA ({}, {} threads), measured in this run before and after "
        "the timings, the larger kept\n",
        peak_gflops, peaks.fma_isa, threads);
    fmt::print("  peak RSS  {:.1f} MiB   (one Nq x Nk fp32 score matrix would be {:.3g} GiB)\n", rss, scores_gib);
    if (!rows.empty()) {
      fmt::print("  check against the fp64 reference: fast error <= 2 x naive-fp32 error + floor\n");
      fmt::print("    {:<6} {:>12} {:>12} {:>12}  {}\n", "tensor", "fast err", "naive err", "bound", "verdict");
      for (const auto& r : rows)
        fmt::print("    {:<6} {:>12.3e} {:>12.3e} {:>12.3e}  {}\n", r.tensor, r.v.fast, r.v.naive, r.v.bound,
                   r.v.ok() ? "PASS" : "FAIL");
    }
    if (!note.empty()) fmt::print("  note: {}\n", note);
    fmt::print("{}\n", ok ? "OK" : "FAILED");
  }
  return ok ? 0 : 1;
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
  c->add_option("--isa", a->isa, "auto | scalar | avx2 | avx512")->capture_default_str();
  c->add_option("--format", a->format, "table | json")->capture_default_str();
  return {c, [a] { return run(*a); }};
}

}  // namespace sdpa::cli
