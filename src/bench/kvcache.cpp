// kvcache.cpp — see kvcache.hpp.
#include "bench/kvcache.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>

#include <fmt/core.h>

#include "common/peak.hpp"
#include "sdpa/kvcache.hpp"

namespace sdpa::bench {
namespace {

// A block-scattered table: sequence 0's blocks in a seeded random order over the cache's, so a
// paged row reads its blocks where a serving engine's allocator would have left them.
std::vector<std::int32_t> scattered_table(i64 blocks) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(blocks));
  std::iota(t.begin(), t.end(), 0);
  std::mt19937_64 rng(7);
  std::shuffle(t.begin(), t.end(), rng);
  return t;
}

// The cache's (outer, rows, Hkv, D) view of a buffer laid out heads before rows, (outer, Hkv, rows, D),
// as vLLM's CPU cache keeps its blocks (KvCacheRow::heads_major), or as the view itself.
template <class X>
View4<X> cache_view(X* data, i64 outer, i64 rows, i64 Hkv, i64 D, bool heads_major) {
  if (!heads_major) return contiguous(data, {outer, rows, Hkv, D});
  return {data, {outer, rows, Hkv, D}, {Hkv * rows * D, D, rows * D, 1}};
}

// The plain read of a buffer of `bytes` (read as floats; a multiple of 4 bytes).
peak::Span span_of(const void* data, std::size_t bytes) {
  return {static_cast<const float*>(data), static_cast<i64>(bytes / sizeof(float))};
}

template <class T>
void run_float(KvCacheRow& r, const TimerRule& rule, Options opt) {
  const i64 rows = r.block > 0 ? r.block : r.Nk, outer = r.Nk / rows;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<T> q(static_cast<std::size_t>(r.Hq * r.D)), k(static_cast<std::size_t>(r.Nk * r.Hkv * r.D)), v(k.size()),
      out(q.size());
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = T(normal(rng));
  const std::vector<std::int32_t> table = scattered_table(outer);
  const std::int32_t held = static_cast<std::int32_t>(r.Nk);
  KvCache<T> cache;
  cache.k = cache_view(k.data(), outer, rows, r.Hkv, r.D, r.heads_major);
  cache.v = cache_view(v.data(), outer, rows, r.Hkv, r.D, r.heads_major);
  cache.seqlens = {&held, {1}, {1}};
  if (r.block > 0) cache.block_table = contiguous(table.data(), {1, outer});
  const auto call = [&] {
    forward_kvcache(contiguous<const T>(q.data(), {1, 1, r.Hq, r.D}), cache, {}, {},
                    contiguous(out.data(), {1, 1, r.Hq, r.D}), {}, opt);
  };
  r.bytes = 2.0 * static_cast<double>(k.size() * sizeof(T));
  const peak::Span spans[2] = {span_of(k.data(), k.size() * sizeof(T)), span_of(v.data(), v.size() * sizeof(T))};
  std::tie(r.sdpa, r.read) = time_alternating(rule, call, [&] { peak::read_seconds(spans, 2, r.threads); });
}

void run_codes(KvCacheRow& r, const TimerRule& rule, Options opt) {
  const i64 rows = r.block > 0 ? r.block : r.Nk, outer = r.Nk / rows;
  const KvQuant quant = r.format == KvFormat::int8 ? KvQuant::int8 : KvQuant::fp8_e4m3;
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(static_cast<std::size_t>(r.Hq * r.D)), x(static_cast<std::size_t>(r.Nk * r.Hkv * r.D)),
      out(q.size());
  for (auto& e : q) e = normal(rng);
  std::vector<std::uint8_t> k(x.size()), v(x.size());
  std::vector<float> ks(static_cast<std::size_t>(r.Nk * r.Hkv)), vs(ks.size());
  for (auto [codes, scales] : {std::pair{&k, &ks}, std::pair{&v, &vs}}) {
    for (auto& e : x) e = normal(rng);
    quantize_kv(contiguous<const float>(x.data(), {outer, rows, r.Hkv, r.D}), quant,
                cache_view(codes->data(), outer, rows, r.Hkv, r.D, r.heads_major),
                contiguous(scales->data(), {outer, r.Hkv, rows}));
  }
  const std::vector<std::int32_t> table = scattered_table(outer);
  const std::int32_t held = static_cast<std::int32_t>(r.Nk);
  QuantizedKvCache cache;
  cache.quant = quant;
  cache.k = cache_view(k.data(), outer, rows, r.Hkv, r.D, r.heads_major);
  cache.v = cache_view(v.data(), outer, rows, r.Hkv, r.D, r.heads_major);
  cache.k_scale = contiguous(ks.data(), {outer, r.Hkv, rows});
  cache.v_scale = contiguous(vs.data(), {outer, r.Hkv, rows});
  cache.seqlens = {&held, {1}, {1}};
  if (r.block > 0) cache.block_table = contiguous(table.data(), {1, outer});
  const auto call = [&] {
    forward_kvcache(contiguous<const float>(q.data(), {1, 1, r.Hq, r.D}), cache, {}, {},
                    contiguous(out.data(), {1, 1, r.Hq, r.D}), {}, opt);
  };
  r.bytes = static_cast<double>(2 * k.size() + 2 * ks.size() * sizeof(float));
  const peak::Span spans[4] = {span_of(k.data(), k.size()), span_of(v.data(), v.size()),
                               span_of(ks.data(), ks.size() * sizeof(float)),
                               span_of(vs.data(), vs.size() * sizeof(float))};
  std::tie(r.sdpa, r.read) = time_alternating(rule, call, [&] { peak::read_seconds(spans, 4, r.threads); });
}

}  // namespace

const char* kv_format_name(KvFormat f) {
  switch (f) {
    case KvFormat::f32: return "float32";
    case KvFormat::bf16: return "bfloat16";
    case KvFormat::int8: return "int8";
    case KvFormat::fp8_e4m3: return "fp8_e4m3";
  }
  return "?";
}

double KvCacheRow::gbytes_per_s() const { return sdpa.median_seconds > 0 ? bytes / sdpa.median_seconds / 1e9 : 0.0; }
double KvCacheRow::read_gbytes_per_s() const {
  return read.median_seconds > 0 ? bytes / read.median_seconds / 1e9 : 0.0;
}
double KvCacheRow::fraction_of_read() const {
  return sdpa.median_seconds > 0 && read.median_seconds > 0 ? read.median_seconds / sdpa.median_seconds : 0.0;
}
double KvCacheRow::tokens_per_s() const { return sdpa.median_seconds > 0 ? 1.0 / sdpa.median_seconds : 0.0; }

std::string KvCacheRow::pass_name() const {
  return fmt::format("kvcache {} {}{}", kv_format_name(format),
                     block > 0 ? fmt::format("paged{}", block) : std::string("contiguous"),
                     heads_major ? "" : " tokens-major");
}
std::string KvCacheRow::label() const { return fmt::format("B=1 H={}/{} Nq=1 Nk={} D={}", Hq, Hkv, Nk, D); }

std::vector<KvCacheRow> default_kvcache(int threads) {
  std::vector<KvCacheRow> rows;
  for (i64 nk : {4096, 32768})
    for (i64 block : {0, 16, 64})
      for (KvFormat f : {KvFormat::f32, KvFormat::bf16, KvFormat::int8, KvFormat::fp8_e4m3}) {
        KvCacheRow r;
        r.Nk = nk, r.block = block, r.format = f, r.threads = threads;
        rows.push_back(r);
      }
  // FlashAttention's order, one head's rows Hkv·D apart: what the layout costs a decoding step.
  for (KvFormat f : {KvFormat::f32, KvFormat::bf16, KvFormat::int8, KvFormat::fp8_e4m3}) {
    KvCacheRow r;
    r.Nk = 32768, r.format = f, r.heads_major = false, r.threads = threads;
    rows.push_back(r);
  }
  return rows;
}

void run_kvcache(KvCacheRow& r, const TimerRule& rule, Isa isa) {
  Options opt;
  opt.threads = r.threads;
  opt.isa = isa;
  switch (r.format) {
    case KvFormat::f32: return run_float<float>(r, rule, opt);
    case KvFormat::bf16: return run_float<bf16>(r, rule, opt);
    default: return run_codes(r, rule, opt);
  }
}

}  // namespace sdpa::bench
