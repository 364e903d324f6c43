// suite.cpp — see suite.hpp.
#include "bench/suite.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include <fmt/core.h>

#include "bench/blas_attention.hpp"
#include "bench/normals.hpp"
#include "bench/torch.hpp"
#include "common/peak.hpp"
#include "sdpa/error.hpp"

namespace sdpa::bench {
namespace {

// The BLAS baseline materialises Nq × Nk scores per thread (twice for the backward);
// above this it is skipped rather than run out of memory.
constexpr double kBlasMaxBytes = 4.0 * 1024 * 1024 * 1024;

// Each probe around a row (Row::probe_gflops): peak::measure's best of three windows of about
// a quarter of this, ~50 ms in all, twice a row: a few seconds over the default suite.
constexpr double kProbeSeconds = 0.03;

// A row's tensors: inputs standard normal from one seeded generator, outputs zero; the
// keep mask (B, 1, Nq, Nk) of a padding row, its causal mask folded in (Case::mask).
struct Buffers {
  std::vector<float> q, k, v, out, lse, dout, dq, dk, dv;
  std::vector<std::uint8_t> keep;
  explicit Buffers(const Case& c) {
    const Shape& s = c.shape;
    Normals normals(1);
    auto make = [&](i64 n, bool random) {
      return random ? normals.take(n) : std::vector<float>(static_cast<std::size_t>(n));
    };
    q = make(s.B * s.Hq * s.Nq * s.Dk, true), k = make(s.B * s.Hkv * s.Nk * s.Dk, true);
    v = make(s.B * s.Hkv * s.Nk * s.Dv, true), out = make(s.B * s.Hq * s.Nq * s.Dv, false);
    lse = make(s.B * s.Hq * s.Nq, false);
    if (c.pass == Pass::backward) {
      dout = make(s.B * s.Hq * s.Nq * s.Dv, true), dq = make(s.B * s.Hq * s.Nq * s.Dk, false);
      dk = make(s.B * s.Hkv * s.Nk * s.Dk, false), dv = make(s.B * s.Hkv * s.Nk * s.Dv, false);
    }
    if (c.mask == ExplicitMask::padding) {
      // Row i sees key j iff j ≥ the item's padding and j ≤ i + offset (causal: 0 top-left,
      // Nk − Nq bottom-right); PyTorch's request carries the same padding (torch.cpp).
      const i64 offset = c.causal == Causal::bottom_right ? s.Nk - s.Nq : 0;
      keep.assign(static_cast<std::size_t>(s.B * s.Nq * s.Nk), 0);
      const std::vector<i64> pads = key_padding(c);
      for (i64 b = 0; b < s.B; ++b)
        for (i64 i = 0; i < s.Nq; ++i) {
          const i64 last = c.causal == Causal::none ? s.Nk - 1 : std::min(s.Nk - 1, i + offset);
          std::uint8_t* row = keep.data() + (b * s.Nq + i) * s.Nk;
          for (i64 j = pads[static_cast<std::size_t>(b)]; j <= last; ++j) row[j] = 1;
        }
    }
  }
  double mib() const {
    std::size_t n = 0;
    for (auto* x : {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv}) n += x->size();
    return (double(n) * 4.0 + double(keep.size())) / (1024.0 * 1024.0);
  }
};

template <class T>
void run_fast_as(Row& r, Buffers& x, const TimerRule& rule, Isa isa) {
  const Shape& s = r.c.shape;
  Options opt;
  opt.causal = r.c.mask == ExplicitMask::none ? r.c.causal : Causal::none;  // else the keep mask holds it
  if (r.c.mask != ExplicitMask::none) opt.keep = contiguous<const std::uint8_t>(x.keep.data(), {s.B, 1, s.Nq, s.Nk});
  opt.threads = r.c.threads;
  opt.isa = isa;
  Options undropped = opt;
  opt.dropout = {r.c.dropout, 1, 0};
  // q, k, v, out, dout, dq, dk, dv in T: x's own buffers for fp32, else copies rounded to T
  // (made once, before any timing).
  std::vector<float>* f32[8] = {&x.q, &x.k, &x.v, &x.out, &x.dout, &x.dq, &x.dk, &x.dv};
  std::vector<T> rounded[8];
  std::vector<T>* t[8];
  for (int i = 0; i < 8; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      t[i] = f32[i];
    } else {
      rounded[i].reserve(f32[i]->size());
      for (float e : *f32[i]) rounded[i].push_back(T(e));
      t[i] = &rounded[i];
    }
  }
  const auto Q = contiguous<const T>(t[0]->data(), {s.B, s.Hq, s.Nq, s.Dk});
  const auto K = contiguous<const T>(t[1]->data(), {s.B, s.Hkv, s.Nk, s.Dk});
  const auto V = contiguous<const T>(t[2]->data(), {s.B, s.Hkv, s.Nk, s.Dv});
  const auto O = contiguous(t[3]->data(), {s.B, s.Hq, s.Nq, s.Dv});
  const auto L = contiguous(x.lse.data(), {s.B, s.Hq, s.Nq});
  auto fwd = [&] { forward(Q, K, V, O, L, opt); };
  if (r.c.pass == Pass::backward) {
    fwd();  // the backward's inputs O and L
    const auto dO = contiguous<const T>(t[4]->data(), {s.B, s.Hq, s.Nq, s.Dv});
    const auto dQ = contiguous(t[5]->data(), {s.B, s.Hq, s.Nq, s.Dk});
    const auto dK = contiguous(t[6]->data(), {s.B, s.Hkv, s.Nk, s.Dk});
    const auto dV = contiguous(t[7]->data(), {s.B, s.Hkv, s.Nk, s.Dv});
    auto bwd = [&](const Options& o) {
      return [&, o] { backward(Q, K, V, View4<const T>(O), View3<const float>(L), dO, dQ, dK, dV, o); };
    };
    if (r.c.dropout > 0)
      std::tie(r.sdpa, r.undropped) = time_alternating(rule, bwd(opt), bwd(undropped));
    else
      r.sdpa = time_median(rule, bwd(opt));
  } else if (decoding(r.c)) {
    // The plain read of the same K and V bytes (a 16-bit buffer read as half as many floats).
    const auto floats = [](const std::vector<T>& b) { return static_cast<i64>(b.size() * sizeof(T) / sizeof(float)); };
    const peak::Span kv[2] = {{reinterpret_cast<const float*>(t[1]->data()), floats(*t[1])},
                              {reinterpret_cast<const float*>(t[2]->data()), floats(*t[2])}};
    std::tie(r.sdpa, r.read) = time_alternating(rule, fwd, [&] { peak::read_seconds(kv, 2, r.c.threads); });
  } else if (r.c.dropout > 0) {
    std::tie(r.sdpa, r.undropped) = time_alternating(rule, fwd, [&] { forward(Q, K, V, O, L, undropped); });
  } else {
    r.sdpa = time_median(rule, fwd);
  }
}

void run_fast(Row& r, Buffers& x, const TimerRule& rule, Isa isa) {
  switch (r.c.dtype) {
    case Dtype::bf16: return run_fast_as<bf16>(r, x, rule, isa);
    case Dtype::fp16: return run_fast_as<fp16>(r, x, rule, isa);
    default: return run_fast_as<float>(r, x, rule, isa);
  }
}

void run_blas(Row& r, Buffers& x, const TimerRule& rule) {
  const Shape& s = r.c.shape;
  const int threads = r.c.threads;
  const bool bwd = r.c.pass == Pass::backward;
  const double need = 4.0 * double(s.Nq) * double(s.Nk) * threads * (bwd ? 2 : 1);
  if (!blas_available()) {
    r.blas_note = "not built: no BLAS was found when sdpa was configured";
    return;
  }
  if (r.c.dtype != Dtype::f32) {
    r.blas_note = "skipped: the BLAS baseline is fp32 only";
    return;
  }
  if (need > kBlasMaxBytes) {
    r.blas_note = fmt::format("skipped: would materialise {:.1f} GiB of scores", need / (1 << 30));
    return;
  }
  if (r.c.causal == Causal::bottom_right) {
    r.blas_note = "skipped: the BLAS baseline has no bottom-right causal mask";
    return;
  }
  if (r.c.dropout > 0) {
    r.blas_note = "skipped: the BLAS baseline has no dropout";
    return;
  }
  if (r.c.mask != ExplicitMask::none) {
    r.blas_note = "skipped: the BLAS baseline has no explicit mask";
    return;
  }
  const BlasShape b{
      s.B, s.Hq, s.Hkv, s.Nq, s.Nk, s.Dk, s.Dv, r.c.causal == Causal::top_left, 1.0 / std::sqrt(double(s.Dk))};
  std::vector<float> out(x.out.size()), lse(x.lse.size());
  auto fwd = [&] { blas_forward(b, x.q.data(), x.k.data(), x.v.data(), out.data(), lse.data(), threads); };
  if (!bwd) {
    r.blas = time_median(rule, fwd);
    return;
  }
  fwd();
  std::vector<float> dq(x.dq.size()), dk(x.dk.size()), dv(x.dv.size());
  r.blas = time_median(rule, [&] {
    blas_backward(b, x.q.data(), x.k.data(), x.v.data(), out.data(), lse.data(), x.dout.data(), dq.data(), dk.data(),
                  dv.data(), threads);
  });
}

double over(double num, double den) { return num > 0 && den > 0 ? num / den : 0.0; }

}  // namespace

bool decoding(const Case& c) { return c.pass == Pass::forward && is_decoding(c.shape); }

std::vector<i64> key_padding(const Case& c) {
  std::vector<i64> pads;
  if (c.mask == ExplicitMask::padding)
    for (i64 b = 0; b < c.shape.B; ++b) pads.push_back(padded_keys(c.shape, b));
  return pads;
}

std::vector<Case> default_suite(int threads) {
  std::vector<Case> rows;
  auto square = [](i64 n, i64 d) { return Shape{1, 8, 8, n, n, d, d}; };
  for (Causal causal : {Causal::none, Causal::top_left})
    for (i64 n : {1024, 4096})
      for (i64 d : {64, 128}) rows.push_back({square(n, d), causal, Pass::forward, threads});
  for (i64 n : {1024, 4096})
    for (i64 d : {64, 128}) rows.push_back({square(n, d), Causal::none, Pass::backward, threads});
  for (i64 nk : {4096, 32768}) rows.push_back({Shape{1, 32, 8, 1, nk, 128, 128}, Causal::none, Pass::forward, threads});
  for (i64 n : {1024, 4096}) rows.push_back({square(n, 64), Causal::none, Pass::forward, 1});  // per-core efficiency
  for (Pass pass : {Pass::forward, Pass::backward})
    rows.push_back({square(1024, 64), Causal::none, pass, threads, Dtype::f32, 0.1});
  for (Pass pass : {Pass::forward, Pass::backward})  // a padded batch as transformers passes it
    rows.push_back(
        {Shape{4, 8, 8, 1024, 1024, 64, 64}, Causal::top_left, pass, threads, Dtype::f32, 0.0, ExplicitMask::padding});
  for (Dtype t : {Dtype::bf16, Dtype::fp16}) {  // 16-bit rows, against PyTorch in the same dtype
    for (Pass pass : {Pass::forward, Pass::backward})
      for (i64 n : {1024, 4096}) rows.push_back({square(n, 64), Causal::none, pass, threads, t});
    rows.push_back({Shape{1, 32, 8, 1, 32768, 128, 128}, Causal::none, Pass::forward, threads, t});
  }
  return rows;
}

std::string label(const Shape& s) {
  std::string l = fmt::format("B={} H={}", s.B, s.Hq);
  if (s.Hkv != s.Hq) l += fmt::format("/{}", s.Hkv);
  l += s.Nq == s.Nk ? fmt::format(" N={}", s.Nq) : fmt::format(" Nq={} Nk={}", s.Nq, s.Nk);
  l += s.Dk == s.Dv ? fmt::format(" D={}", s.Dk) : fmt::format(" Dk={} Dv={}", s.Dk, s.Dv);
  return l;
}

std::string pass_name(const Case& c) {
  const std::string dtype = c.dtype == Dtype::bf16 ? " bf16" : c.dtype == Dtype::fp16 ? " fp16" : "";
  const char* padded = c.mask == ExplicitMask::padding ? " padded" : "";
  if (decoding(c)) return "decode" + dtype + padded;
  const char* mask = c.causal == Causal::top_left ? "causal " : c.causal == Causal::bottom_right ? "causal-br " : "";
  const std::string dropout = c.dropout > 0 ? fmt::format(" p={:g}", c.dropout) : "";
  return std::string(mask) + (c.pass == Pass::backward ? "bwd" : "fwd") + dtype + dropout + padded;
}

double Row::gflops() const { return over(flops(c.shape, c.causal, c.pass, c.mask), sdpa.median_seconds) / 1e9; }
double Row::gbytes_per_s() const { return over(kv_bytes(c.shape, c.dtype), sdpa.median_seconds) / 1e9; }
double Row::read_gbytes_per_s() const { return over(kv_bytes(c.shape, c.dtype), read.median_seconds) / 1e9; }
double Row::speedup_vs_blas() const { return over(blas.median_seconds, sdpa.median_seconds); }
double Row::speedup_vs_torch() const { return over(torch.median_seconds, sdpa.median_seconds); }
double Row::dropout_cost() const { return over(sdpa.median_seconds, undropped.median_seconds); }
bool Row::host_busy() const { return probe_gflops > 0 && peak_gflops > 0 && probe_gflops < kBusyShare * peak_gflops; }

SuiteResult run_suite(const SuiteOptions& o) {
  o.rule.validate();
  if (o.isa != Isa::automatic && !isa_supported(o.isa))
    throw Error(std::string("--isa: this CPU cannot run the ") + isa_name(o.isa) + " kernel");
  auto say = [&](const std::string& m) {
    if (o.progress) o.progress(m);
  };
  SuiteResult res;
  res.isa = o.isa == Isa::automatic ? active_isa() : o.isa;
  res.peaks.isa = res.isa;  // the peak of the ISA the rows run, also when --isa differs from SDPA_ISA
  res.torch_about = o.torch ? "PyTorch: not run (no rows)" : "PyTorch: not run (--no-torch)";

  // This machine's peaks, measured now for every thread count in use, and again after;
  // the one-thread FMA peak always, so a shared host shows (Peaks::shared_host).
  say("measuring the FMA peak (1 thread)");
  res.peaks.measure_fma(1);
  for (const Case& c : o.cases) {
    if (!res.peaks.fma_gflops.count(c.threads)) {
      say(fmt::format("measuring the FMA peak ({} threads)", c.threads));
      res.peaks.measure_fma(c.threads);
    }
    // bf16 rows: what vdpbf16ps could give, beside the fp32 FMA peak they are measured against
    if (c.dtype == Dtype::bf16 && peak::bf16_dot_supported() && !res.peaks.bf16_dot_gflops.count(c.threads)) {
      say(fmt::format("measuring the bf16 dot-product peak ({} threads)", c.threads));
      res.peaks.measure_bf16_dot(c.threads);
    }
    if (decoding(c) && !res.peaks.read_gbs.count(c.threads)) {
      say(fmt::format("measuring the read bandwidth ({} threads)", c.threads));
      res.peaks.measure_read(c.threads);
    }
  }
  std::vector<int> row_threads;  // the varlen and KV-cache rows' thread counts: their FMA peaks
  for (const VarlenRow& v : o.varlen) row_threads.push_back(v.threads);
  for (const KvCacheRow& r : o.kvcache) row_threads.push_back(r.threads);
  for (int t : row_threads)
    if (!res.peaks.fma_gflops.count(t)) {
      say(fmt::format("measuring the FMA peak ({} threads)", t));
      res.peaks.measure_fma(t);
    }

  const std::size_t n = o.cases.size();
  for (std::size_t i = 0; i < n; ++i) {
    Row r;
    r.c = o.cases[i];
    const std::string what = fmt::format("{} {}", pass_name(r.c), label(r.c.shape));
    say(fmt::format("{}/{} sdpa {}", i + 1, n, what));
    Buffers x(r.c);
    res.tensors_mib = std::max(res.tensors_mib, x.mib());
    const double probe_before = peak::measure(r.c.threads, kProbeSeconds, res.isa).gflops;
    run_fast(r, x, o.rule, o.isa);
    r.probe_gflops = std::min(probe_before, peak::measure(r.c.threads, kProbeSeconds, res.isa).gflops);
    res.rss_sdpa_mib = std::max(res.rss_sdpa_mib, peak_rss_mib());  // before the BLAS baseline materialises scores
    if (o.blas) {  // not asked for: no note per row (the table's header says so once)
      say(fmt::format("{}/{} BLAS {}", i + 1, n, what));
      run_blas(r, x, o.rule);
    }
    // PyTorch right after ours, one subprocess per row: each ratio is then measured over
    // the same minute of this shared machine, not minutes apart.
    if (o.torch) {
      say(fmt::format("{}/{} PyTorch {}", i + 1, n, what));
      const TorchTimings t = time_torch({r.c}, o.rule);
      res.torch_about = t.about;
      if (t.ok) r.torch = t.timings[0];
      if (t.ok) r.probe_gflops = std::min(r.probe_gflops, peak::measure(r.c.threads, kProbeSeconds, res.isa).gflops);
    }
    res.rows.push_back(std::move(r));
  }

  for (VarlenRow v : o.varlen) {
    say(fmt::format("{}: {} sequences packed against padded", v.pass_name(), v.lengths.size()));
    run_varlen(v, o.rule, o.isa);
    res.varlen.push_back(std::move(v));
  }
  for (std::size_t i = 0; i < o.kvcache.size(); ++i) {
    KvCacheRow r = o.kvcache[i];
    say(fmt::format("{}/{} {} {}", i + 1, o.kvcache.size(), r.pass_name(), r.label()));
    run_kvcache(r, o.rule, o.isa);
    res.kvcache.push_back(std::move(r));
  }

  std::vector<int> fma_threads, read_threads;
  for (const auto& kv : res.peaks.fma_gflops) fma_threads.push_back(kv.first);
  for (const auto& kv : res.peaks.read_gbs) read_threads.push_back(kv.first);
  for (int t : fma_threads) {
    say(fmt::format("measuring the FMA peak again ({} threads)", t));
    res.peaks.measure_fma(t);
  }
  for (int t : read_threads) {
    say(fmt::format("measuring the read bandwidth again ({} threads)", t));
    res.peaks.measure_read(t);
  }
  for (Row& r : res.rows) {
    r.peak_gflops = res.peaks.fma(r.c.threads);
    if (decoding(r.c)) r.bandwidth_gbs = res.peaks.read(r.c.threads);
  }
  for (VarlenRow& v : res.varlen) v.peak_gflops = res.peaks.fma(v.threads);
  for (KvCacheRow& r : res.kvcache) r.peak_gflops = res.peaks.fma(r.threads);
  return res;
}

}  // namespace sdpa::bench
