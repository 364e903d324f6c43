// check.cpp — see check.hpp.
#include "bench/check.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/core.h>

#include "bench/normals.hpp"
#include "bench/peaks.hpp"
#include "sdpa/reference.hpp"

namespace sdpa::bench {

namespace {

// The reference materialises Nq x Nk doubles per head; above this many it checks a
// strided subset of query rows instead.
constexpr i64 kMaxReferenceScores = i64(1) << 26;

struct Row {
  std::string tensor;
  tolerance::Verdict v;
};

const char* causal_name(Causal c) {
  return c == Causal::top_left ? "top-left" : c == Causal::bottom_right ? "bottom-right" : "none";
}

}  // namespace

CheckResult check(const CheckConfig& config) {
  const auto [B, Hq, Hkv, Nq, Nk, Dk, Dv] = config.shape;
  config.rule.validate();
  Options opt;
  opt.causal = config.causal;
  opt.threads = config.threads;
  opt.isa = config.isa;
  const Isa isa = opt.isa == Isa::automatic ? active_isa() : opt.isa;
  if (!isa_supported(isa)) throw Error(std::string("isa: this CPU cannot run the ") + isa_name(isa) + " kernel");
  const auto say = [&](const std::string& s) {
    if (config.progress) config.progress(s);
  };
  CheckResult res;
  res.config = config;
  res.isa = isa;

  // Inputs: independent standard normal entries from one seeded mt19937_64.
  say("generating inputs");
  Normals normals(config.seed);
  std::vector<float> q = normals.take(B * Hq * Nq * Dk), k = normals.take(B * Hkv * Nk * Dk),
                     v = normals.take(B * Hkv * Nk * Dv), dout = normals.take(B * Hq * Nq * Dv);
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
  const int threads = bench::resolve_threads(config.threads);
  say("measuring the FMA peak");
  bench::Peaks peaks;
  peaks.isa = isa;  // the peak of the ISA being checked, also when --isa differs from SDPA_ISA
  peaks.measure_fma(threads);
  say("timing the forward");
  const bench::Timing fwd = bench::time_median(config.rule, [&] { forward(Q, K, V, O, L, opt); });
  bench::Timing bwd;
  if (config.backward) {
    say("timing the backward");
    const auto dQ = contiguous(dq.data(), {B, Hq, Nq, Dk});
    const auto dK = contiguous(dk.data(), {B, Hkv, Nk, Dk});
    const auto dV = contiguous(dv.data(), {B, Hkv, Nk, Dv});
    bwd = bench::time_median(config.rule, [&] { backward(Q, K, V, O, L, dO, dQ, dK, dV, opt); });
  }
  say("measuring the FMA peak again");
  peaks.measure_fma(threads);
  const double peak_gflops = peaks.fma(threads);
  auto gflops = [&](bench::Pass pass, const bench::Timing& t) {
    return t.median_seconds > 0 ? bench::flops(shape, opt.causal, pass) / t.median_seconds / 1e9 : 0.0;
  };
  const double fwd_gf = gflops(bench::Pass::forward, fwd), bwd_gf = gflops(bench::Pass::backward, bwd);
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
  const bool check_fwd = note.rfind("not checked", 0) != 0, check_bwd = config.backward && stride == 1 && check_fwd;
  if (check_fwd) {
    say("checking against the fp64 reference");
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
      say("checking the backward against the fp64 reference");
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

  res.threads = threads;
  res.forward = fwd, res.backward = bwd;
  res.forward_gflops = fwd_gf, res.backward_gflops = bwd_gf;
  res.peak_gflops = peak_gflops;
  res.peak_isa = peaks.fma_isa;
  res.peak_rss_mib = rss;
  res.score_matrix_fp32_gib = scores_gib;
  for (const Row& r : rows) res.rows.push_back({r.tensor, r.v});
  res.note = note;
  res.pass = ok;
  return res;
}

nlohmann::ordered_json to_json(const CheckResult& r) {
  const auto& s = r.config.shape;
  nlohmann::ordered_json checks = nlohmann::ordered_json::array();
  for (const auto& row : r.rows)
    checks.push_back({{"tensor", row.tensor},
                      {"err_fast", row.verdict.fast},
                      {"err_naive_fp32", row.verdict.naive},
                      {"bound", row.verdict.bound},
                      {"pass", row.verdict.ok()}});
  nlohmann::ordered_json doc = shape_json(s);
  doc.update(nlohmann::ordered_json{
          {"causal", causal_name(r.config.causal)},
          {"isa", isa_name(r.isa)},
          {"threads", r.config.threads},
          {"forward_seconds_median", r.forward.median_seconds},
          {"forward_runs", r.forward.runs},
          {"forward_gflops", r.forward_gflops},
          {"backward_seconds_median", r.backward.median_seconds},
          {"backward_runs", r.backward.runs},
          {"backward_gflops", r.backward_gflops},
          {"peak_gflops", r.peak_gflops},
          {"peak_isa", r.peak_isa},
          {"fraction_of_peak_forward", r.fraction_of_peak(r.forward_gflops)},
          {"fraction_of_peak_backward", r.fraction_of_peak(r.backward_gflops)},
          {"peak_rss_mib", r.peak_rss_mib},
          {"score_matrix_fp32_gib", r.score_matrix_fp32_gib},
          {"checks", checks},
          {"note", r.note},
          {"pass", r.pass}});
  return doc;
}

std::string to_text(const CheckResult& r) {
  const auto& s = r.config.shape;
  std::string t = fmt::format("sdpa check: B={} Hq={} Hkv={} Nq={} Nk={} Dk={} Dv={} causal={} isa={} threads={}\n",
                              s.B, s.Hq, s.Hkv, s.Nq, s.Nk, s.Dk, s.Dv, causal_name(r.config.causal), isa_name(r.isa),
                              r.config.threads ? std::to_string(r.config.threads) : std::string("all"));
  t += fmt::format("  forward   median {:9.4f} s  {:7.1f} GFLOP/s  {:5.1f}% of peak  ({} runs after a warm-up)\n",
                   r.forward.median_seconds, r.forward_gflops, 100 * r.fraction_of_peak(r.forward_gflops),
                   r.forward.runs);
  if (r.config.backward)
    t += fmt::format(
        "  backward  median {:9.4f} s  {:7.1f} GFLOP/s  {:5.1f}% of peak  ({} runs; FLOPs counted as 2.5x forward)\n",
        r.backward.median_seconds, r.backward_gflops, 100 * r.fraction_of_peak(r.backward_gflops), r.backward.runs);
  t += fmt::format(
      "  peak      {:.1f} GFLOP/s fp32 FMA ({}, {} threads), measured in this run before and after "
      "the timings, the larger kept\n",
      r.peak_gflops, r.peak_isa, r.threads);
  t += fmt::format("  peak RSS  {:.1f} MiB   (one Nq x Nk fp32 score matrix would be {:.3g} GiB)\n", r.peak_rss_mib,
                   r.score_matrix_fp32_gib);
  if (!r.rows.empty()) {
    t += "  check against the fp64 reference: fast error <= 2 x naive-fp32 error + floor\n";
    t += fmt::format("    {:<6} {:>12} {:>12} {:>12}  {}\n", "tensor", "fast err", "naive err", "bound", "verdict");
    for (const auto& row : r.rows)
      t += fmt::format("    {:<6} {:>12.3e} {:>12.3e} {:>12.3e}  {}\n", row.tensor, row.verdict.fast, row.verdict.naive,
                       row.verdict.bound, row.verdict.ok() ? "PASS" : "FAIL");
  }
  if (!r.note.empty()) t += fmt::format("  note: {}\n", r.note);
  return t + (r.pass ? "OK\n" : "FAILED\n");
}

}  // namespace sdpa::bench
