// cmd_bench.cpp — `sdpa bench`: parses the flags, runs bench::run_suite (src/bench/suite.hpp:
// the fast kernel against this machine's measured peaks, a plain BLAS implementation and
// PyTorch's CPU SDPA, all timed by one rule, FLOPs counted by one function) and prints
// its rows as a table or JSON.
#include <algorithm>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench/blas_attention.hpp"
#include "bench/suite.hpp"
#include "commands.hpp"
#include "ring.hpp"
#include "common.hpp"
#include "timer_options.hpp"

namespace sdpa::cli {
namespace {

struct Args {
  ShapeOptions shape;
  bench::TimerRule rule;
  bool causal = false, backward = false, no_torch = false, no_blas = false;
  std::string dtype = "float32";
  int threads = 0;
  double dropout = 0.0;
  std::string mask = "none";  // none | padding (bench::ExplicitMask)
  std::string suite, format = "table", isa = "auto";
  std::string varlen;         // lengths "2048,1024,…": one packed-versus-padded row instead of a shape
  bool varlen_given = false;  // --varlen on the command line, even as '' (refused, not taken as unset)
  bool ring = false;          // under mpirun (cmd_ring.cpp)
  std::string layout = "zigzag";
  // The options of one shape given on the command line (with_flag_names' callback): a suite or
  // --varlen that has no use for one refuses it rather than ignore it.
  std::set<std::string> given;
  bool was_given(const char* name) const { return given.count(name) > 0; }
  // The first of `names` given, or null.
  const char* first_given(std::initializer_list<const char*> names) const {
    for (const char* n : names)
      if (was_given(n)) return n;
    return nullptr;
  }
};

// The options that shape one row, which a suite or --varlen may have no use for.
constexpr const char* kRowOptions[] = {"--batch", "--heads",  "--kv-heads", "--seq",     "--kv-seq", "--dim",
                                       "--dim-v", "--causal", "--backward", "--dropout", "--dtype",  "--layout"};

// Throws for the first of `names` given: "<name>: not with <what>".
void refuse_given(const Args& a, std::initializer_list<const char*> names, const std::string& what) {
  if (const char* n = a.first_given(names)) throw Error(std::string(n) + ": not with " + what);
}

nlohmann::ordered_json json_row(const bench::SuiteResult& res, const bench::Row& r) {
  const auto& s = r.c.shape;
  const bool dec = bench::decoding(r.c);
  auto frac = [](double x, double of) { return of > 0 ? x / of : 0.0; };
  auto or_null = [](double x) { return x > 0 ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr); };
  nlohmann::ordered_json row{{"pass", bench::pass_name(r.c)}};
  row.update(bench::shape_json(s));
  row.update(nlohmann::ordered_json{{"causal", r.c.causal != Causal::none},
          {"backward", r.c.pass == bench::Pass::backward},
          {"mask", bench::mask_name(r.c.mask)},
          {"key_padding", r.c.mask == bench::ExplicitMask::padding ? nlohmann::ordered_json(bench::key_padding(r.c))
                                                                   : nlohmann::ordered_json(nullptr)},
          {"dtype", dtype_name(r.c.dtype)},
          {"threads", r.c.threads},
          {"isa", isa_name(res.isa)},
          // Whether this row ran on AMX-BF16 tiles: bf16 and fp16 (split) forwards and
          // backwards, but not decoding, which reads K and V once and never takes the tiled loop.
          {"amx_bf16", r.c.dtype != Dtype::f32 && !dec && amx_bf16_active(res.isa)},
          // ... and whether it ran on AVX512_BF16 dot products (bf16 only: fp16 widens there).
          {"bf16_dot", r.c.dtype == Dtype::bf16 && !dec && bf16_dot_active(res.isa)},
          {"seconds_median", r.sdpa.median_seconds},
          {"runs", r.sdpa.runs},
          {"gflops", r.gflops()},
          {"peak_gflops", r.peak_gflops},
          {"peak_isa", res.peaks.fma_isa},
          {"bf16_dot_peak_gflops", or_null(r.c.dtype == Dtype::bf16 ? res.peaks.bf16_dot(r.c.threads) : 0.0)},
          {"peak_cores_worth", res.peaks.cores_worth(r.c.threads)},
          {"shared_host", res.peaks.shared_host(r.c.threads)},
          {"probe_gflops", r.probe_gflops},
          {"host_busy", r.host_busy()},
          {"fraction_of_peak", frac(r.gflops(), r.peak_gflops)},
          {"decoding", dec},
          {"gbytes_per_s", r.gbytes_per_s()},
          {"bandwidth_gbs", r.bandwidth_gbs},
          {"fraction_of_bandwidth", dec ? frac(r.gbytes_per_s(), r.bandwidth_gbs) : 0.0},
          {"read_gbs", r.read_gbytes_per_s()},
          {"fraction_of_read", frac(r.gbytes_per_s(), r.read_gbytes_per_s())},
          {"blas_seconds_median", or_null(r.blas.median_seconds)},
          {"speedup_vs_blas", or_null(r.speedup_vs_blas())},
          {"torch_seconds_median", or_null(r.torch.median_seconds)},
          {"torch_runs", r.torch.runs > 0 ? nlohmann::ordered_json(r.torch.runs) : nlohmann::ordered_json(nullptr)},
          {"speedup_vs_torch", or_null(r.speedup_vs_torch())},
          {"dropout_p", r.c.dropout},
          {"undropped_seconds_median", or_null(r.undropped.median_seconds)},
          {"dropout_cost", or_null(r.dropout_cost())}});
  return row;
}

// A packed-versus-padded row: its own fields (lengths, both medians), "pass" telling it apart.
nlohmann::ordered_json json_row(const bench::SuiteResult& res, const bench::VarlenRow& v) {
  return {{"pass", v.pass_name()},
          {"lengths", v.lengths},
          {"heads", v.H},
          {"dim", v.D},
          {"causal", false},
          {"dtype", dtype_name(v.dtype)},
          {"threads", v.threads},
          {"isa", isa_name(res.isa)},
          {"seconds_median", v.packed.median_seconds},
          {"runs", v.packed.runs},
          {"gflops", v.packed_gflops()},
          {"peak_gflops", v.peak_gflops},
          {"fraction_of_peak", v.peak_gflops > 0 ? v.packed_gflops() / v.peak_gflops : 0.0},
          {"padded_seconds_median", v.padded.median_seconds},
          {"padded_runs", v.padded.runs},
          {"speedup_vs_padded", v.speedup()},
          {"flops_ratio_padded", v.ideal_speedup()}};
}

// A KV-cache row: the call's median against a plain read of the same bytes, alternating.
nlohmann::ordered_json json_row(const bench::SuiteResult& res, const bench::KvCacheRow& r) {
  auto or_null = [](double x) { return x > 0 ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr); };
  return {{"pass", r.pass_name()},
          {"batch", r.batch()},
          {"heads", r.Hq},
          {"kv_heads", r.Hkv},
          {"seq_q", r.Nq},
          {"seq_k", r.Nk},  // the keys of all the sequences
          {"seq_k_each", r.lengths.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.lengths)},
          {"dim", r.D},
          {"format", bench::kv_format_name(r.format)},
          {"queries", r.queries_name()},
          {"block_size", r.block > 0 ? nlohmann::ordered_json(r.block) : nlohmann::ordered_json(nullptr)},
          {"heads_major", r.heads_major},
          {"threads", r.threads},
          {"isa", isa_name(res.isa)},
          {"seconds_median", r.sdpa.median_seconds},
          {"runs", r.sdpa.runs},
          {"bytes", r.bytes},
          {"gbytes_per_s", r.gbytes_per_s()},
          {"read_seconds_median", r.read.median_seconds},
          {"read_gbs", r.read_gbytes_per_s()},
          {"fraction_of_read", r.fraction_of_read()},
          {"flops", r.flops},
          {"gflops", r.gflops()},
          {"peak_gflops", or_null(r.peak_gflops)},
          {"fraction_of_peak", or_null(r.fraction_of_peak())},
          {"tokens_per_s", r.tokens_per_s()},
          {"one_at_a_time_seconds_median", r.apart.median_seconds},
          {"speedup_vs_one_at_a_time", r.batching_speedup()},
          // a paged sequence's call alternated with the same sequence's over a contiguous cache
          {"paged_seconds_median", or_null(r.paged.median_seconds)},
          {"contiguous_seconds_median", or_null(r.contiguous.median_seconds)},
          {"time_over_contiguous", or_null(r.over_contiguous())}};
}

void print_json(const bench::SuiteResult& res) {
  std::vector<nlohmann::ordered_json> rows;
  for (const auto& r : res.rows) rows.push_back(json_row(res, r));
  for (const auto& v : res.varlen) rows.push_back(json_row(res, v));
  for (const auto& r : res.kvcache) rows.push_back(json_row(res, r));
  fmt::print("[");  // one row per line
  for (std::size_t i = 0; i < rows.size(); ++i) fmt::print("{}\n {}", i ? "," : "", rows[i].dump());
  fmt::print("\n]\n");
}

void print_table(const Args& a, const bench::SuiteResult& res) {
  const auto& rule = a.rule;
  fmt::print(
      "sdpa bench: fp32 (bf16/fp16 where the pass says so), isa {}{}, medians after {} warm-up of >= {} runs adding "
      "up to >= {} s (at most {} runs); peaks "
      "measured in this run (before and after the timings, the larger kept)\n",
      isa_name(res.isa),
      amx_bf16_active(res.isa)   ? " (bf16 and fp16 on AMX-BF16 tiles; SDPA_AMX=0: off)"
      : bf16_dot_active(res.isa) ? " (bf16 on AVX512_BF16 dot products; SDPA_BF16_DOT=0: widened)"
                                 : "",
      rule.warmup_runs, rule.min_runs, rule.min_seconds, std::max(rule.max_runs, rule.min_runs));
  for (auto [t, gf] : res.peaks.fma_gflops)
    fmt::print("  FMA peak   {:7.1f} GFLOP/s on {} thread{} ({}){}\n", gf, t, t > 1 ? "s" : "", res.peaks.fma_isa,
               t > 1 ? fmt::format(", {:.2f} cores' worth", res.peaks.cores_worth(t)) : "");
  for (auto [t, gf] : res.peaks.fma_gflops)
    if (res.peaks.shared_host(t))
      fmt::print(
          "  SHARED HOST: {} threads measure {:.2f} cores' worth of FMA peak (below {:.0f}% of {}): they share cores "
          "with other work, so their rows' '% peak' flatters and their ratios are noisy; the one-thread rows carry "
          "the headline.\n",
          t, res.peaks.cores_worth(t), 100 * bench::Peaks::kSharedHostShare, t);
  for (auto [t, gf] : res.peaks.bf16_dot_gflops)
    fmt::print(
        "  BF16 dot   {:7.1f} GFLOP/s on {} thread{} (vdpbf16ps, 2 bf16 products per fp32 lane; bf16 rows' "
        "'% peak' stays the fp32 FMA's)\n",
        gf, t, t > 1 ? "s" : "");
  for (auto [t, bw] : res.peaks.read_gbs)
    fmt::print("  read bw    {:7.1f} GB/s on {} thread{} (1 GiB, best pass)\n", bw, t, t > 1 ? "s" : "");
  fmt::print("  BLAS       {} (matmul, softmax, matmul; scores materialised)\n",
             a.no_blas ? "not run" : bench::blas_name());
  fmt::print("  {}\n\n", res.torch_about);
  fmt::print("{:<17} {:<28} {:>3} {:>10} {:>9} {:>7} {:>7} {:>7} {:>9} {:>9} {:>6}\n", "pass", "shape", "thr",
             "median ms", "GFLOP/s", "% peak", "% read", "% bw", "x torch", "x BLAS", "probe");
  auto pct = [](bool on, double x, double of) {
    return on && of > 0 ? fmt::format("{:.1f}%", 100 * x / of) : std::string("-");
  };
  auto times = [](double x) { return x > 0 ? fmt::format("{:.2f}", x) : std::string("-"); };
  // One-thread rows first: a core's peak is unambiguous, so they carry the headline.
  std::vector<const bench::Row*> order;
  for (const auto& r : res.rows) order.push_back(&r);
  std::stable_partition(order.begin(), order.end(), [](const bench::Row* r) { return r->c.threads == 1; });
  int busy_rows = 0;
  for (const bench::Row* row : order) {
    const auto& r = *row;
    const bool dec = bench::decoding(r.c);
    fmt::print("{:<17} {:<28} {:>3} {:>10.3f} {:>9.1f} {:>6.1f}% {:>7} {:>7} {:>9} {:>9} {:>6}{}\n",
               bench::pass_name(r.c), bench::label(r.c.shape), r.c.threads, 1e3 * r.sdpa.median_seconds, r.gflops(),
               r.peak_gflops > 0 ? 100 * r.gflops() / r.peak_gflops : 0.0,
               pct(dec, r.gbytes_per_s(), r.read_gbytes_per_s()), pct(dec, r.gbytes_per_s(), r.bandwidth_gbs),
               times(r.speedup_vs_torch()), times(r.speedup_vs_blas()), pct(true, r.probe_gflops, r.peak_gflops),
               r.host_busy() ? " BUSY" : "");
    busy_rows += r.host_busy() ? 1 : 0;
  }
  fmt::print(
      "\n'x torch', 'x BLAS': their median time over ours (above 1: sdpa is faster), all timed by the rule above.\n"
      "Decoding rows: the K and V bytes read once per call over the time, against a plain read of the same bytes\n"
      "timed alternately with the kernel ('% read', medians of both) and against the best 1 GiB read above ('% "
      "bw').\n'probe': a short FMA loop on the row's threads before and after its sdpa timing and after PyTorch's, "
      "the slowest, as a share of the peak.\n");
  if (std::any_of(res.rows.begin(), res.rows.end(),
                  [](const bench::Row& r) { return r.c.mask != bench::ExplicitMask::none; }))
    fmt::print(
        "'padded' rows: one bool keep mask (B, 1, Nq, Nk), the causal mask and item b's first b·Nk/(2B) keys hidden, "
        "passed to sdpa and to PyTorch (attn_mask) alike; GFLOP/s counts the pairs the mask keeps.\n");
  if (busy_rows > 0)
    fmt::print(
        "HOST BUSY: {} row{} marked BUSY had {} probe below {:.0f}% of the peak: other work shared the cores while "
        "{} timed, so {} times, '% peak' and ratios are not this machine's; run {} again on a quiet host.\n",
        busy_rows, busy_rows > 1 ? "s" : "", busy_rows > 1 ? "their" : "its", 100 * bench::Row::kBusyShare,
        busy_rows > 1 ? "they were" : "it was", busy_rows > 1 ? "their" : "its", busy_rows > 1 ? "them" : "it");
  for (const auto& r : res.rows)
    if (r.dropout_cost() > 0)
      fmt::print(
          "\ndropout {} {} ({} threads): {:.3f} ms against {:.3f} ms at p=0: x{:.2f} the time; medians of {} and {} "
          "alternating runs\n",
          bench::pass_name(r.c), bench::label(r.c.shape), r.c.threads, 1e3 * r.sdpa.median_seconds,
          1e3 * r.undropped.median_seconds, r.dropout_cost(), r.sdpa.runs, r.undropped.runs);
  for (const auto& v : res.varlen)
    fmt::print(
        "\n{} {} ({} threads): packed {:.3f} ms ({:.1f} GFLOP/s, {:.1f}% peak), padded to the longest {:.3f} ms: "
        "x{:.2f} (FLOPs ratio x{:.2f}); medians of {} and {} alternating runs\n",
        v.pass_name(), v.label(), v.threads, 1e3 * v.packed.median_seconds, v.packed_gflops(),
        v.peak_gflops > 0 ? 100 * v.packed_gflops() / v.peak_gflops : 0.0, 1e3 * v.padded.median_seconds, v.speedup(),
        v.ideal_speedup(), v.packed.runs, v.padded.runs);
  if (!res.kvcache.empty()) {
    // Each format's tokens/s against bf16's at the same length and layout (the 8-bit formats read
    // about half its bytes).
    const auto bf16_of = [&](const bench::KvCacheRow& r) {
      for (const auto& o : res.kvcache)
        if (o.format == bench::KvFormat::bf16 && o.Nk == r.Nk && o.Nq == r.Nq && o.block == r.block &&
            o.heads_major == r.heads_major && o.lengths == r.lengths)
          return o.tokens_per_s();
      return 0.0;
    };
    fmt::print("\n{:<40} {:<28} {:>10} {:>10} {:>9} {:>9} {:>10} {:>9} {:>12}\n", "KV cache (decoding step; chunk)",
               "shape", "ms", "GB/s", "% read", "% peak", "tokens/s", "x bf16", "/ contiguous");
    for (const auto& r : res.kvcache) {
      const double b = bf16_of(r);
      fmt::print("{:<40} {:<28} {:>10.3f} {:>10.1f} {:>8.1f}% {:>8.1f}% {:>10.1f} {:>9} {:>12}\n", r.pass_name(),
                 r.label(), 1e3 * r.sdpa.median_seconds, r.gbytes_per_s(), 100 * r.fraction_of_read(),
                 100 * r.fraction_of_peak(), r.tokens_per_s(),
                 b > 0 ? fmt::format("x{:.2f}", r.tokens_per_s() / b) : std::string("-"),
                 r.over_contiguous() > 0 ? fmt::format("{:.3f}", r.over_contiguous()) : std::string("-"));
    }
    fmt::print(
        "% read: the call's bytes per second over a plain read of the same bytes (codes and scales for int8 and "
        "fp8), medians of alternating runs, {} threads; % peak: the call's FLOPs (every query head's products, "
        "QK^T and PV) per second over the fp32 FMA peak on as many threads measured in this run, which an 8-bit "
        "or bf16 cache's widened elements also run on in a decoding step (a chunk with bf16 queries runs on the 16-bit "
        "engine where the CPU has one, whose products are denser, and may read above 100 %); tokens/s: queries "
        "answered (a chunk: 64 a sequence, "
        "bottom-right causal); / contiguous: a paged sequence's time over the same sequence's in a contiguous "
        "cache of the same format and order, medians of alternating runs\n",
        res.kvcache.front().threads);
    for (const auto& r : res.kvcache)
      if (r.batch() > 1)
        fmt::print("{} {}: one call {:.3f} ms, one call per sequence {:.3f} ms: x{:.2f} (alternating)\n", r.pass_name(),
                   r.label(), 1e3 * r.together.median_seconds, 1e3 * r.apart.median_seconds, r.batching_speedup());
  }
  for (const auto& r : res.rows)
    if (!r.blas_note.empty() && r.blas.median_seconds == 0)
      fmt::print("BLAS {} {}: {}\n", bench::pass_name(r.c), bench::label(r.c.shape), r.blas_note);
  if (res.rows.size() == 1)
    fmt::print(
        "peak RSS of the sdpa runs: {:.1f} MiB; its tensors (inputs, outputs{}): {:.1f} MiB; difference "
        "{:.1f} MiB\n",
        res.rss_sdpa_mib, res.rows[0].c.pass == bench::Pass::backward ? ", gradients" : "", res.tensors_mib,
        res.rss_sdpa_mib - res.tensors_mib);
}

int run(const Args& a) {
  if (a.format != "table" && a.format != "json")
    throw Error("--format: expected table or json, got '" + a.format + "'");
  a.rule.validate();
  if (a.threads < 0) throw Error("--threads: must be >= 0, got " + std::to_string(a.threads));
  if (!(a.dropout >= 0.0 && a.dropout < 1.0))
    throw Error("--dropout: must be in [0, 1), got " + std::to_string(a.dropout));
  const bench::ExplicitMask mask = bench::parse_explicit_mask(a.mask, "--mask");
  bench::SuiteOptions o;
  o.rule = a.rule;
  o.isa = parse_isa(a.isa.c_str(), "--isa");
  o.blas = !a.no_blas;
  o.torch = !a.no_torch;
  const int threads = bench::resolve_threads(a.threads);
  if (a.varlen_given && a.varlen.empty()) throw Error("--varlen: expected lengths L1,L2,..., got ''");
  if (!a.ring) refuse_given(a, {"--layout"}, "a run without --ring (it sets the ring's layout)");
  if (a.ring) {
    // The ring's table is fp32, one shape, no baselines: refuse what it would otherwise ignore.
    if (!a.suite.empty()) throw Error("--suite: not with --ring (give one shape)");
    if (a.varlen_given) throw Error("--varlen: not with --ring (give one shape)");
    if (mask != bench::ExplicitMask::none) throw Error("--mask: not with --ring");
    if (a.dtype != "float32") throw Error("--dtype: --ring times float32 only, got '" + a.dtype + "'");
    if (a.format != "table") throw Error("--format: --ring prints a table only");
    Options opt;
    opt.causal = a.causal ? Causal::top_left : Causal::none;
    opt.threads = a.threads;  // 0: OpenMP's default on each rank (OMP_NUM_THREADS)
    opt.isa = o.isa;
    // Seed 0 on every rank (the ring checks they agree); the mask is the one a single
    // process with the same seed draws, so the ring and one process do the same work.
    opt.dropout.p = a.dropout;
    return run_ring_bench({a.shape.resolve(), opt, a.layout, a.backward, a.rule.min_runs});
  }
  std::optional<Dtype> dtype;
  for (Dtype t : {Dtype::f32, Dtype::bf16, Dtype::fp16})
    if (a.dtype == dtype_name(t)) dtype = t;
  if (!dtype) throw Error("--dtype: expected float32, bfloat16 or float16, got '" + a.dtype + "'");
  if (a.suite == "kvcache") {
    if (mask != bench::ExplicitMask::none) throw Error("--mask: not with --suite");
    refuse_given(a, {"--batch", "--seq", "--causal", "--backward", "--dropout", "--dtype"},
                 "--suite kvcache (its rows: one decoding query and a 64-query causal chunk a sequence, every cache "
                 "format; --kv-seq, --varlen, --heads, --kv-heads, --dim choose the caches)");
    if (a.varlen_given && a.shape.kv_seq > 0) throw Error("--varlen: not with --kv-seq (give one or the other)");
    o.kvcache = bench::default_kvcache(threads);
    if (a.varlen_given) {  // the batch rows, of these lengths instead of the suite's
      const std::vector<i64> lengths = bench::parse_lengths(a.varlen, "--varlen");
      std::vector<bench::KvCacheRow> rows;
      for (bench::KvCacheRow r : o.kvcache)
        if (!r.lengths.empty()) {
          r.lengths = lengths;
          r.Nk = std::accumulate(lengths.begin(), lengths.end(), i64{0});
          rows.push_back(r);
        }
      o.kvcache = rows;
    }
    if (a.shape.kv_seq >
        0) {  // one cache length instead of the suite's (heads-major rows; the tokens-major rows are 32768's)
      std::vector<bench::KvCacheRow> rows;
      for (bench::KvCacheRow r : o.kvcache)
        if (r.heads_major && r.lengths.empty() && r.Nk == o.kvcache.front().Nk)
          r.Nk = a.shape.kv_seq, rows.push_back(r);
      o.kvcache = rows;
    }
    if (a.first_given({"--heads", "--kv-heads", "--dim", "--dim-v"})) {  // the suite's heads and head dim replaced
      const auto z = a.shape.resolve();
      if (z.Dv != z.Dk) throw Error("--dim-v: the kvcache suite's K and V share one head dim (--dim)");
      for (bench::KvCacheRow& r : o.kvcache) r.Hq = z.Hq, r.Hkv = z.Hkv, r.D = z.Dk;
    }
    o.blas = o.torch = false;  // the rows are sdpa against a plain read; no baseline takes a paged or 8-bit cache
  } else if (!a.suite.empty()) {
    if (a.suite != "default") throw Error("--suite: expected 'default' or 'kvcache', got '" + a.suite + "'");
    if (a.varlen_given) throw Error("--varlen: not with --suite (the suite has its own varlen rows)");
    if (mask != bench::ExplicitMask::none) throw Error("--mask: not with --suite (the suite has its own padded rows)");
    refuse_given(a,
                 {"--batch", "--heads", "--kv-heads", "--seq", "--kv-seq", "--dim", "--dim-v", "--causal", "--backward",
                  "--dropout", "--dtype"},
                 "--suite default (it has its own shapes, passes and dtypes; give one shape without --suite)");
    o.cases = bench::default_suite(threads);
    for (Dtype t : {Dtype::f32, Dtype::bf16, Dtype::fp16}) o.varlen.push_back(bench::default_varlen(threads, t));
  } else if (a.varlen_given) {
    if (a.causal || a.backward || a.dropout > 0 || mask != bench::ExplicitMask::none)
      throw Error("--varlen: the packed-versus-padded row is a non-causal forward without dropout or --mask");
    refuse_given(a, {"--batch", "--seq", "--kv-seq", "--kv-heads", "--dim-v"},
                 "--varlen (the lengths are the batch; --heads, --dim and --dtype set the rest)");
    const auto z = a.shape.resolve();
    bench::VarlenRow v = bench::default_varlen(threads, *dtype);
    v.lengths = bench::parse_lengths(a.varlen, "--varlen");
    v.H = z.Hq, v.D = z.Dk;
    o.varlen.push_back(v);
  } else {
    const auto z = a.shape.resolve();
    o.cases.push_back({{z.B, z.Hq, z.Hkv, z.Nq, z.Nk, z.Dk, z.Dv},
                       a.causal ? Causal::top_left : Causal::none,
                       a.backward ? bench::Pass::backward : bench::Pass::forward,
                       threads,
                       *dtype,
                       a.dropout,
                       mask});
  }
  const bool tty = stderr_is_terminal();
  if (tty) o.progress = [](const std::string& m) { fmt::print(stderr, "\r\033[Ksdpa bench: {}", m); };
  const bench::SuiteResult res = bench::run_suite(o);
  if (tty) fmt::print(stderr, "\r\033[K");
  if (a.format == "json")
    print_json(res);
  else
    print_table(a, res);
  return 0;
}

}  // namespace

Command add_bench(CLI::App& parent) {
  auto a = std::make_shared<Args>();
  CLI::App* c = parent.add_subcommand(
      "bench",
      "Times the fast kernel (median after a warm-up) against this machine's FMA peak and read bandwidth, "
      "measured in the same run, and against a plain BLAS implementation and PyTorch's CPU SDPA on the same "
      "shapes, all timed by one rule (docs/performance.md).");
  a->shape.add_to(*c);
  c->add_flag("--causal", a->causal, "Top-left causal mask (PyTorch's is_causal)");
  c->add_flag("--backward", a->backward, "Time the backward pass instead of the forward");
  c->add_option("--mask", a->mask,
                "none | padding: one bool keep mask (B, 1, Nq, Nk) = the --causal mask and key padding (item b's "
                "first b·Nk/(2B) keys hidden: shares 0, 1/8, 1/4, 3/8 for B = 4), passed to sdpa and as PyTorch's "
                "attn_mask alike, as transformers does for a padded batch")
      ->capture_default_str();
  c->add_option("--dropout", a->dropout,
                "Attention dropout p in [0, 1): timed alternating with p = 0, PyTorch with the same dropout_p")
      ->capture_default_str();
  c->add_option("--dtype", a->dtype, "float32 | bfloat16 | float16 (q, k, v, out and gradients; PyTorch the same)")
      ->capture_default_str();
  c->add_option("--threads", a->threads, "Threads (0 = all)")->capture_default_str();
  add_timer_options(*c, a->rule);
  c->add_option("--suite", a->suite,
                "Run a standard table instead of one shape: default, or kvcache (decoding over contiguous and paged "
                "caches in fp32, bf16, int8 and fp8 against a plain read of their bytes, and a 64-query chunk of "
                "prefill over them, 32 / 8 heads of 128 unless --heads, --kv-heads, --dim say otherwise; with --kv-seq "
                "N its one-sequence rows at N keys, with --varlen L1,L2,… its batch rows over sequences of these "
                "lengths)");
  CLI::Option* varlen =
      c->add_option("--varlen", a->varlen,
                    "Lengths L1,L2,…: time one packed batch of these sequences (heads and dim from --heads, --dim) "
                    "against the same batch padded to the longest, instead of one shape (with --suite kvcache: "
                    "the cache's batch rows)");
  c->add_option("--isa", a->isa, kIsaHelp)->capture_default_str();
  c->add_flag("--no-torch", a->no_torch, "Skip the PyTorch comparison");
  c->add_flag("--no-blas", a->no_blas, "Skip the BLAS comparison");
  c->add_option("--format", a->format, "table | json")->capture_default_str();
  c->add_flag("--ring", a->ring,
              "Under mpirun: time ring attention per rank (compute, communication, how much is hidden) against one "
              "process; --repeat runs");
  c->add_option("--layout", a->layout, "With --ring: contiguous | zigzag")->capture_default_str();
  return {c, with_flag_names(c,
                             [a, varlen, c] {
                               a->varlen_given = varlen->count() > 0;
                               for (const char* o : kRowOptions)
                                 if (c->get_option(o)->count() > 0) a->given.insert(o);
                               return run(*a);
                             },
                             {{"min_runs", "--repeat"}})};
}

}  // namespace sdpa::cli
