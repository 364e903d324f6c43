// cmd_bench.cpp — `sdpa bench`: the fast kernel timed against this machine's measured
// peaks and, in the same run on the same shapes, against a plain BLAS implementation
// and PyTorch's CPU scaled_dot_product_attention.
//
// FLOPs follow FlashAttention's convention (../shared/DESIGN.md): forward
// 2·(Dk + Dv)·B·Hq·Nq·Nk (= 4·B·H·N²·D when Dk = Dv), halved for causal when Nq = Nk;
// backward 2.5 × forward. Decoding rows (Nq ≤ 16) are bound by reading K and V once:
// bytes = 4·B·Hkv·Nk·(Dk + Dv), judged against two reads measured now: a plain read of
// those same K and V bytes, timed alternately with the kernel (the medians compared), and
// the best pass of a 1 GiB read before and after all rows. On a shared host the bandwidth
// comes and goes by the second; only the first sees the same seconds as the kernel.
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/core.h>

#include "bench/blas_attention.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "common/peak.hpp"

namespace sdpa::cli {
namespace {

struct Shape {
  i64 B = 1, Hq = 8, Hkv = 8, Nq = 1024, Nk = 1024, Dk = 64, Dv = 64;
  bool causal = false;    // top-left (PyTorch's is_causal); Nq = Nk in the suite
  bool backward = false;  // this row times the backward pass
  int threads = 0;
};

struct Result {
  Shape s;
  double seconds = 0, gflops = 0, peak = 0, bw_gbs = 0, bytes = 0;
  double read_seconds = 0;  // decoding: median plain read of the same K and V, alternating with the kernel
  double blas_seconds = 0, torch_seconds = 0;  // 0: not measured
  std::string blas_note, torch_note;
};

bool decoding(const Shape& s) { return s.Nq <= 16; }

double flops(const Shape& s) {
  double f = 2.0 * double(s.Dk + s.Dv) * double(s.B * s.Hq) * double(s.Nq) * double(s.Nk);
  if (s.causal && s.Nq == s.Nk) f /= 2;
  return s.backward ? 2.5 * f : f;
}

// GB/s of the plain read of the row's K and V (decoding rows; 0 when not measured).
double read_rate(const Result& r) { return r.read_seconds > 0 ? r.bytes / r.read_seconds / 1e9 : 0.0; }

std::string label(const Shape& s) {
  std::string l = fmt::format("B={} H={}", s.B, s.Hq);
  if (s.Hkv != s.Hq) l += fmt::format("/{}", s.Hkv);
  l += s.Nq == s.Nk ? fmt::format(" N={}", s.Nq) : fmt::format(" Nq={} Nk={}", s.Nq, s.Nk);
  l += s.Dk == s.Dv ? fmt::format(" D={}", s.Dk) : fmt::format(" Dk={} Dv={}", s.Dk, s.Dv);
  return l;
}
std::string pass(const Shape& s) {
  if (decoding(s)) return "decode";
  return std::string(s.causal ? "causal " : "") + (s.backward ? "bwd" : "fwd");
}

// Two functions run alternately (a, b, a, b, ...) after one warm-up of each, so their
// medians cover the same seconds of a shared machine: at least `repeat` runs, more for
// short ones (up to `budget` seconds of timed work, at most 200 runs).
template <class A, class B>
std::pair<double, double> time_alternating(A&& fa, B&& fb, int repeat, double budget = 0.6) {
  double t0 = now_seconds();
  fa();
  fb();
  const double warm = seconds_since(t0);
  int runs = repeat;
  if (warm > 0 && warm * runs < budget) runs = static_cast<int>(std::min(200.0, std::ceil(budget / warm)));
  std::vector<double> ta, tb;
  for (int r = 0; r < runs; ++r) {
    t0 = now_seconds();
    fa();
    ta.push_back(seconds_since(t0));
    t0 = now_seconds();
    fb();
    tb.push_back(seconds_since(t0));
  }
  return {median(ta), median(tb)};
}

// One function's median the same way (up to 0.3 s of timed work), so a millisecond kernel
// gets a stable median.
template <class F>
double time_median(F&& fn, int repeat) {
  return time_alternating(
             fn, [] {}, repeat, 0.3)
      .first;
}

struct Buffers {
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  explicit Buffers(const Shape& s) {
    std::mt19937_64 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto make = [&](i64 n, bool random) {
      std::vector<float> x(static_cast<std::size_t>(n));
      if (random)
        for (auto& e : x) e = normal(rng);
      return x;
    };
    q = make(s.B * s.Hq * s.Nq * s.Dk, true), k = make(s.B * s.Hkv * s.Nk * s.Dk, true);
    v = make(s.B * s.Hkv * s.Nk * s.Dv, true), out = make(s.B * s.Hq * s.Nq * s.Dv, false);
    lse = make(s.B * s.Hq * s.Nq, false);
    if (s.backward) {
      dout = make(s.B * s.Hq * s.Nq * s.Dv, true), dq = make(s.B * s.Hq * s.Nq * s.Dk, false);
      dk = make(s.B * s.Hkv * s.Nk * s.Dk, false), dv = make(s.B * s.Hkv * s.Nk * s.Dv, false);
    }
  }
  double mib() const {
    std::size_t n = 0;
    for (auto* x : {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv}) n += x->size();
    return double(n) * 4.0 / (1024.0 * 1024.0);
  }
};

void run_fast(Result& r, Buffers& x, int repeat, Isa isa) {
  const Shape& s = r.s;
  Options opt;
  opt.causal = s.causal ? Causal::top_left : Causal::none;
  opt.threads = s.threads;
  opt.isa = isa;
  const auto Q = contiguous<const float>(x.q.data(), {s.B, s.Hq, s.Nq, s.Dk});
  const auto K = contiguous<const float>(x.k.data(), {s.B, s.Hkv, s.Nk, s.Dk});
  const auto V = contiguous<const float>(x.v.data(), {s.B, s.Hkv, s.Nk, s.Dv});
  const auto O = contiguous(x.out.data(), {s.B, s.Hq, s.Nq, s.Dv});
  const auto L = contiguous(x.lse.data(), {s.B, s.Hq, s.Nq});
  forward(Q, K, V, O, L, opt);
  if (decoding(s) && !s.backward) {
    const peak::Span kv[2] = {{x.k.data(), static_cast<i64>(x.k.size())}, {x.v.data(), static_cast<i64>(x.v.size())}};
    std::tie(r.seconds, r.read_seconds) =
        time_alternating([&] { forward(Q, K, V, O, L, opt); }, [&] { peak::read_seconds(kv, 2, s.threads); }, repeat);
  } else if (!s.backward) {
    r.seconds = time_median([&] { forward(Q, K, V, O, L, opt); }, repeat);
  } else {
    const auto dO = contiguous<const float>(x.dout.data(), {s.B, s.Hq, s.Nq, s.Dv});
    const auto dQ = contiguous(x.dq.data(), {s.B, s.Hq, s.Nq, s.Dk});
    const auto dK = contiguous(x.dk.data(), {s.B, s.Hkv, s.Nk, s.Dk});
    const auto dV = contiguous(x.dv.data(), {s.B, s.Hkv, s.Nk, s.Dv});
    r.seconds = time_median([&] { backward(Q, K, V, O, L, dO, dQ, dK, dV, opt); }, repeat);
  }
  r.gflops = flops(s) / r.seconds / 1e9;
  r.bytes = 4.0 * double(s.B * s.Hkv * s.Nk * (s.Dk + s.Dv));
}

// The BLAS baseline materialises Nq × Nk scores per thread (twice for the backward).
constexpr double kBlasMaxBytes = 4.0 * 1024 * 1024 * 1024;

void run_blas(Result& r, Buffers& x, int repeat, int threads) {
  const Shape& s = r.s;
  const double need = 4.0 * double(s.Nq) * double(s.Nk) * threads * (s.backward ? 2 : 1);
  if (need > kBlasMaxBytes) {
    r.blas_note = fmt::format("skipped: would materialise {:.1f} GiB of scores", need / (1 << 30));
    return;
  }
  bench::BlasShape b{s.B, s.Hq, s.Hkv, s.Nq, s.Nk, s.Dk, s.Dv, s.causal, 1.0 / std::sqrt(double(s.Dk))};
  std::vector<float> out(x.out.size()), lse(x.lse.size());
  if (!s.backward) {
    r.blas_seconds = time_median(
        [&] { bench::blas_forward(b, x.q.data(), x.k.data(), x.v.data(), out.data(), lse.data(), threads); }, repeat);
  } else {
    bench::blas_forward(b, x.q.data(), x.k.data(), x.v.data(), out.data(), lse.data(), threads);
    std::vector<float> dq(x.dq.size()), dk(x.dk.size()), dv(x.dv.size());
    r.blas_seconds = time_median(
        [&] {
          bench::blas_backward(b, x.q.data(), x.k.data(), x.v.data(), out.data(), lse.data(), x.dout.data(), dq.data(),
                               dk.data(), dv.data(), threads);
        },
        repeat);
  }
}

// The Python that runs bench/torch_sdpa.py: $SDPA_TORCH_PYTHON, else the repository's
// .venv (what scripts/test.sh builds), else python3 on PATH.
std::string torch_python() {
  if (const char* p = std::getenv("SDPA_TORCH_PYTHON"); p && *p) return p;
  const std::string venv = std::string(SDPA_SOURCE_DIR) + "/.venv/bin/python";
  if (std::FILE* f = std::fopen(venv.c_str(), "r")) {
    std::fclose(f);
    return venv;
  }
  return "python3";
}

// Runs these rows (all with the same thread count) through PyTorch in one subprocess;
// fills torch_seconds or torch_note and returns the line that says which torch ran.
std::string run_torch(std::vector<Result>& results, int repeat) {
  const std::string py = torch_python();
  std::string req = "{\"rows\": [";
  const int threads = results.empty() ? 1 : results[0].s.threads;  // the caller groups rows by threads
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Shape& s = results[i].s;
    req += fmt::format(
        "{}{{\"B\": {}, \"Hq\": {}, \"Hkv\": {}, \"Nq\": {}, \"Nk\": {}, \"Dk\": {}, \"Dv\": {}, "
        "\"causal\": {}, \"backward\": {}, \"repeat\": {}}}",
        i ? ", " : "", s.B, s.Hq, s.Hkv, s.Nq, s.Nk, s.Dk, s.Dv, s.causal ? "true" : "false",
        s.backward ? "true" : "false", repeat);
  }
  req += fmt::format("], \"threads\": {}}}", threads);
  // The request goes through a temporary file: popen gives one direction only.
  char path[] = "/tmp/sdpa-bench-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "not measured: cannot create a temporary file";
  std::FILE* f = fdopen(fd, "w");
  std::fputs(req.c_str(), f);
  std::fclose(f);
  const std::string cmd = fmt::format("'{}' '{}/bench/torch_sdpa.py' < '{}' 2>&1", py, SDPA_SOURCE_DIR, path);
  std::string reply;
  if (std::FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) reply.append(buf, n);
    pclose(p);
  }
  std::remove(path);
  // A tiny reader for the reply's fixed shape: {"torch": "...", "rows": [{"forward": x, "backward": y|null}...]}
  const auto err = reply.find("\"error\"");
  if (reply.find("\"rows\"") == std::string::npos || err != std::string::npos) {
    std::string why = reply;
    if (err != std::string::npos) {
      const auto a = reply.find('"', reply.find(':', err) + 1), b = reply.rfind('"');
      why = reply.substr(a + 1, b > a ? b - a - 1 : 0);
    }
    while (!why.empty() && (why.back() == '\n' || why.back() == '}')) why.pop_back();
    if (why.size() > 160) why = why.substr(0, 160) + "...";
    for (auto& r : results) r.torch_note = "PyTorch not available";
    return fmt::format("PyTorch: not available with {} ({})", py, why);
  }
  std::string version = "?";
  if (auto t = reply.find("\"torch\": \""); t != std::string::npos) {
    t += 10;
    version = reply.substr(t, reply.find('"', t) - t);
  }
  std::size_t pos = reply.find("\"rows\"");
  for (auto& r : results) {
    const auto key = r.s.backward ? std::string("\"backward\": ") : std::string("\"forward\": ");
    const auto fpos = reply.find("\"forward\": ", pos);
    const auto kpos = reply.find(key, fpos);
    if (fpos == std::string::npos || kpos == std::string::npos) break;
    r.torch_seconds = std::strtod(reply.c_str() + kpos + key.size(), nullptr);
    pos = reply.find('}', kpos);
  }
  return fmt::format("PyTorch {} (torch.nn.functional.scaled_dot_product_attention, CPU, via {})", version, py);
}

std::vector<Shape> default_suite(int threads) {
  std::vector<Shape> rows;
  for (bool causal : {false, true})
    for (i64 n : {1024, 4096})
      for (i64 d : {64, 128}) rows.push_back({1, 8, 8, n, n, d, d, causal, false, threads});
  for (i64 n : {1024, 4096})
    for (i64 d : {64, 128}) rows.push_back({1, 8, 8, n, n, d, d, false, true, threads});
  for (i64 nk : {4096, 32768}) rows.push_back({1, 32, 8, 1, nk, 128, 128, false, false, threads});
  for (i64 n : {1024, 4096}) rows.push_back({1, 8, 8, n, n, 64, 64, false, false, 1});  // per-core efficiency
  return rows;
}

struct Args {
  ShapeOptions shape;
  bool causal = false, backward = false, no_torch = false, no_blas = false;
  int threads = 0, repeat = 5;
  std::string suite, format = "table", isa = "auto";
};

int run(const Args& a) {
  if (a.format != "table" && a.format != "json")
    throw Error("--format: expected table or json, got '" + a.format + "'");
  if (a.repeat < 1) throw Error("--repeat: must be >= 1, got " + std::to_string(a.repeat));
  if (a.threads < 0) throw Error("--threads: must be >= 0, got " + std::to_string(a.threads));
  const Isa isa = parse_isa(a.isa.c_str(), "--isa");
  if (isa != Isa::automatic && !isa_supported(isa))
    throw Error(std::string("--isa: this CPU cannot run the ") + isa_name(isa) + " kernel");
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = a.threads > 0 ? a.threads : all;
  std::vector<Shape> shapes;
  if (!a.suite.empty()) {
    if (a.suite != "default") throw Error("--suite: the only suite is 'default', got '" + a.suite + "'");
    shapes = default_suite(threads);
  } else {
    const auto z = a.shape.resolve();
    const Shape s{z.B, z.Hq, z.Hkv, z.Nq, z.Nk, z.Dk, z.Dv, a.causal, a.backward, threads};
    shapes.push_back(s);
  }
  const bool tty = stderr_is_terminal();
  auto say = [&](const std::string& m) {
    if (tty) fmt::print(stderr, "\r\033[Ksdpa bench: {}", m);
  };

  // This machine's peaks, measured now, for every thread count in use.
  std::map<int, double> peak, bandwidth;
  const char* peak_isa = "";
  for (const auto& s : shapes) {
    if (!peak.count(s.threads)) {
      say(fmt::format("measuring the FMA peak ({} threads)", s.threads));
      const auto pk = peak::measure(s.threads);
      peak[s.threads] = pk.gflops, peak_isa = pk.isa;
    }
    if (decoding(s) && !bandwidth.count(s.threads)) {
      say(fmt::format("measuring the read bandwidth ({} threads)", s.threads));
      bandwidth[s.threads] = peak::read_bandwidth_gbs(s.threads);
    }
  }

  std::vector<Result> results;
  std::string torch_line = "PyTorch: not run (--no-torch)";
  double rss_fast = 0, tensors_mib = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    Result r;
    r.s = shapes[i];
    say(fmt::format("{}/{} sdpa {} {}", i + 1, shapes.size(), pass(r.s), label(r.s)));
    Buffers x(r.s);
    tensors_mib = std::max(tensors_mib, x.mib());
    run_fast(r, x, a.repeat, isa);
    r.peak = peak[r.s.threads];
    if (decoding(r.s)) r.bw_gbs = bandwidth[r.s.threads];
    rss_fast = std::max(rss_fast, peak_rss_mib());  // before the BLAS baseline materialises scores
    if (a.no_blas) {
      r.blas_note = "not run (--no-blas)";
    } else {
      say(fmt::format("{}/{} BLAS {} {}", i + 1, shapes.size(), pass(r.s), label(r.s)));
      run_blas(r, x, a.repeat, r.s.threads);
    }
    // PyTorch right after ours, one subprocess per row: each ratio is then measured over
    // the same minute of this shared machine, not minutes apart.
    if (!a.no_torch) {
      say(fmt::format("{}/{} PyTorch {} {}", i + 1, shapes.size(), pass(r.s), label(r.s)));
      std::vector<Result> one{r};
      torch_line = run_torch(one, a.repeat);
      r = one[0];
    }
    results.push_back(r);
  }
  if (tty) fmt::print(stderr, "\r\033[K");
  // The peaks again after the runs: on a shared machine a neighbour can depress one
  // measurement; the larger of the two is the machine's capability, and fractions of it
  // err on the side of understating the kernel.
  for (auto& [t, gf] : peak) {
    say(fmt::format("measuring the FMA peak again ({} threads)", t));
    gf = std::max(gf, peak::measure(t).gflops);
  }
  for (auto& [t, bw] : bandwidth) {
    say(fmt::format("measuring the read bandwidth again ({} threads)", t));
    bw = std::max(bw, peak::read_bandwidth_gbs(t));
  }
  for (auto& r : results) {
    r.peak = peak[r.s.threads];
    if (decoding(r.s)) r.bw_gbs = bandwidth[r.s.threads];
  }
  if (tty) fmt::print(stderr, "\r\033[K");

  auto frac = [](double x, double of) { return of > 0 ? x / of : 0.0; };
  auto ratio = [](double other, double ours) { return other > 0 && ours > 0 ? other / ours : 0.0; };
  if (a.format == "json") {
    fmt::print("[");
    for (std::size_t i = 0; i < results.size(); ++i) {
      const auto& r = results[i];
      const double gbs = r.bytes / r.seconds / 1e9, read_gbs = read_rate(r);
      fmt::print(
          "{}\n {{\"batch\": {}, \"heads\": {}, \"kv_heads\": {}, \"seq\": {}, \"kv_seq\": {}, \"dim\": {}, "
          "\"dim_v\": {}, \"causal\": {}, \"backward\": {}, \"threads\": {}, \"isa\": \"{}\", "
          "\"seconds_median\": {:.6g}, \"gflops\": {:.5g}, \"peak_gflops\": {:.5g}, \"peak_isa\": \"{}\", "
          "\"fraction_of_peak\": {:.4f}, \"decoding\": {}, \"gbytes_per_s\": {:.5g}, \"bandwidth_gbs\": {:.5g}, "
          "\"fraction_of_bandwidth\": {:.4f}, \"read_gbs\": {:.5g}, \"fraction_of_read\": {:.4f}, "
          "\"blas_seconds_median\": {}, \"speedup_vs_blas\": {}, "
          "\"torch_seconds_median\": {}, \"speedup_vs_torch\": {}}}",
          i ? "," : "", r.s.B, r.s.Hq, r.s.Hkv, r.s.Nq, r.s.Nk, r.s.Dk, r.s.Dv, r.s.causal, r.s.backward, r.s.threads,
          isa_name(isa == Isa::automatic ? active_isa() : isa), r.seconds, r.gflops, r.peak, peak_isa,
          frac(r.gflops, r.peak), decoding(r.s), gbs, r.bw_gbs, decoding(r.s) ? frac(gbs, r.bw_gbs) : 0.0, read_gbs,
          frac(gbs, read_gbs), r.blas_seconds > 0 ? fmt::format("{:.6g}", r.blas_seconds) : "null",
          r.blas_seconds > 0 ? fmt::format("{:.4g}", ratio(r.blas_seconds, r.seconds)) : "null",
          r.torch_seconds > 0 ? fmt::format("{:.6g}", r.torch_seconds) : "null",
          r.torch_seconds > 0 ? fmt::format("{:.4g}", ratio(r.torch_seconds, r.seconds)) : "null");
    }
    fmt::print("\n]\n");
    return 0;
  }
  fmt::print(
      "sdpa bench: fp32, isa {}, median of >= {} runs after a warm-up; peaks measured in this run "
      "(before and after the timings, the larger kept)\n",
      isa_name(isa == Isa::automatic ? active_isa() : isa), a.repeat);
  for (auto [t, gf] : peak)
    fmt::print("  FMA peak   {:7.1f} GFLOP/s on {} thread{} ({})\n", gf, t, t > 1 ? "s" : "", peak_isa);
  for (auto [t, bw] : bandwidth)
    fmt::print("  read bw    {:7.1f} GB/s on {} thread{} (1 GiB, best pass)\n", bw, t, t > 1 ? "s" : "");
  fmt::print("  BLAS       {} (matmul, softmax, matmul; scores materialised)\n",
             a.no_blas ? "not run" : bench::blas_name());
  fmt::print("  {}\n\n", torch_line);
  fmt::print("{:<9} {:<28} {:>3} {:>10} {:>9} {:>7} {:>7} {:>7} {:>9} {:>9}\n", "pass", "shape", "thr", "median ms",
             "GFLOP/s", "% peak", "% read", "% bw", "x torch", "x BLAS");
  auto pct = [](bool on, double x) { return on ? fmt::format("{:.1f}%", 100 * x) : std::string("-"); };
  for (const auto& r : results) {
    const double gbs = r.bytes / r.seconds / 1e9;
    fmt::print("{:<9} {:<28} {:>3} {:>10.3f} {:>9.1f} {:>6.1f}% {:>7} {:>7} {:>9} {:>9}\n", pass(r.s), label(r.s),
               r.s.threads, 1e3 * r.seconds, r.gflops, 100 * frac(r.gflops, r.peak),
               pct(decoding(r.s), frac(gbs, read_rate(r))), pct(decoding(r.s), frac(gbs, r.bw_gbs)),
               r.torch_seconds > 0 ? fmt::format("{:.2f}", ratio(r.torch_seconds, r.seconds)) : std::string("-"),
               r.blas_seconds > 0 ? fmt::format("{:.2f}", ratio(r.blas_seconds, r.seconds)) : std::string("-"));
  }
  fmt::print(
      "\n'x torch', 'x BLAS': their median time over ours (above 1: sdpa is faster). Decoding rows: the K and V\n"
      "bytes read once per call over the time, against a plain read of the same bytes timed alternately\n"
      "with the kernel ('% read', medians of both) and against the best 1 GiB read above ('% bw').\n");
  for (const auto& r : results)
    if (!r.blas_note.empty() && r.blas_seconds == 0) fmt::print("BLAS {} {}: {}\n", pass(r.s), label(r.s), r.blas_note);
  if (shapes.size() == 1)
    fmt::print(
        "peak RSS of the sdpa runs: {:.1f} MiB; its tensors (inputs, outputs{}): {:.1f} MiB; difference "
        "{:.1f} MiB\n",
        rss_fast, shapes[0].backward ? ", gradients" : "", tensors_mib, rss_fast - tensors_mib);
  return 0;
}

}  // namespace

Command add_bench(CLI::App& parent) {
  auto a = std::make_shared<Args>();
  CLI::App* c = parent.add_subcommand(
      "bench",
      "Times the fast kernel (median after a warm-up) against this machine's FMA peak and read bandwidth, "
      "measured in the same run, and against a plain BLAS implementation and PyTorch's CPU SDPA on the same "
      "shapes.");
  a->shape.add_to(*c);
  c->add_flag("--causal", a->causal, "Top-left causal mask (PyTorch's is_causal)");
  c->add_flag("--backward", a->backward, "Time the backward pass instead of the forward");
  c->add_option("--threads", a->threads, "Threads (0 = all)")->capture_default_str();
  c->add_option("--repeat", a->repeat, "At least this many timed runs (the median is reported)")->capture_default_str();
  c->add_option("--suite", a->suite, "Run a standard table instead of one shape: default");
  c->add_option("--isa", a->isa, "auto | scalar | avx2 | avx512")->capture_default_str();
  c->add_flag("--no-torch", a->no_torch, "Skip the PyTorch comparison");
  c->add_flag("--no-blas", a->no_blas, "Skip the BLAS comparison");
  c->add_option("--format", a->format, "table | json")->capture_default_str();
  return {c, [a] { return run(*a); }};
}

}  // namespace sdpa::cli
