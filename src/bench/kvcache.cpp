// kvcache.cpp — see kvcache.hpp.
#include "bench/kvcache.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <utility>

#include <fmt/core.h>

#include "bench/normals.hpp"
#include "common/peak.hpp"
#include "sdpa/kvcache.hpp"

namespace sdpa::bench {
namespace {

// Where a row's sequences lie: one contiguous sequence of Nk keys, or blocks of `rows` positions
// over one pool of `outer` blocks, each sequence's blocks in a seeded random order over the pool's,
// where a serving engine's allocator would have left them.
struct Pool {
  i64 rows = 0, outer = 0, max_blocks = 0;
  std::vector<std::int32_t> seqlens;  // (B)
  std::vector<std::int32_t> table;    // (B, max_blocks); empty: contiguous
};

Pool pool_of(const KvCacheRow& r) {
  Pool p;
  for (i64 L : r.lengths.empty() ? std::vector<i64>{r.Nk} : r.lengths)
    p.seqlens.push_back(static_cast<std::int32_t>(L));
  if (r.block == 0) {
    p.rows = r.Nk, p.outer = 1;
    return p;
  }
  p.rows = r.block;
  for (std::int32_t L : p.seqlens) {
    p.outer += (L + r.block - 1) / r.block;
    p.max_blocks = std::max<i64>(p.max_blocks, (L + r.block - 1) / r.block);
  }
  std::vector<std::int32_t> ids(static_cast<std::size_t>(p.outer));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(7);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.table.assign(p.seqlens.size() * static_cast<std::size_t>(p.max_blocks), 0);  // unused entries: unread
  std::size_t next = 0;
  for (std::size_t b = 0; b < p.seqlens.size(); ++b)
    for (i64 j = 0; j < (p.seqlens[b] + r.block - 1) / r.block; ++j)
      p.table[b * static_cast<std::size_t>(p.max_blocks) + static_cast<std::size_t>(j)] = ids[next++];
  return p;
}

// The cache's (outer, rows, Hkv, D) view of a buffer laid out heads before rows, (outer, Hkv, rows, D),
// as vLLM's CPU cache keeps its blocks (KvCacheRow::heads_major), or as the view itself.
template <class X>
View4<X> cache_view(X* data, i64 outer, i64 rows, i64 Hkv, i64 D, bool heads_major) {
  if (!heads_major) return contiguous(data, {outer, rows, Hkv, D});
  return {data, {outer, rows, Hkv, D}, {Hkv * rows * D, D, rows * D, 1}};
}

// The bytes of `data`, a pool of (outer, Hkv, rows, width) elements of `bytes` bytes each
// (heads major), that the sequences' keys occupy, as spans for the plain read (read as floats;
// each span a multiple of 4 bytes): a full block whole, a sequence's last one head by head; the
// whole buffer where every block is full. A tokens-major buffer is one sequence, contiguous: whole.
void add_spans(std::vector<peak::Span>& spans, const void* data, const Pool& p, i64 Hkv, i64 width, i64 bytes,
               bool heads_major) {
  const auto* base = static_cast<const unsigned char*>(data);
  const auto span = [&](i64 offset, i64 elements) {
    spans.push_back({reinterpret_cast<const float*>(base + offset * bytes), elements * bytes / 4});
  };
  i64 held = 0;
  for (std::int32_t L : p.seqlens) held += L;
  if (p.table.empty() || !heads_major || held == p.outer * p.rows) return span(0, p.outer * Hkv * p.rows * width);
  const i64 block = Hkv * p.rows * width;
  for (std::size_t b = 0; b < p.seqlens.size(); ++b)
    for (i64 j = 0, left = p.seqlens[b]; left > 0; ++j, left -= p.rows) {
      const i64 id = p.table[b * static_cast<std::size_t>(p.max_blocks) + static_cast<std::size_t>(j)];
      if (left >= p.rows)
        span(id * block, block);
      else
        for (i64 h = 0; h < Hkv; ++h) span(id * block + h * p.rows * width, left * width);
    }
}

template <class Cache>
void describe(Cache& cache, const Pool& p) {
  cache.seqlens = contiguous(p.seqlens.data(), {static_cast<i64>(p.seqlens.size())});
  if (!p.table.empty())
    cache.block_table = contiguous(p.table.data(), {static_cast<i64>(p.seqlens.size()), p.max_blocks});
}

// The batch's sequences as one call each: sequence b's query, its length and its row of the block table.
template <class Cache, class Q>
void one_at_a_time(const Cache& cache, const Pool& p, const Q* q, Q* out, i64 Hq, i64 D, const Options& opt) {
  for (std::size_t b = 0; b < p.seqlens.size(); ++b) {
    Cache one = cache;
    one.seqlens = contiguous(&p.seqlens[b], {1});
    one.block_table = contiguous(p.table.data() + b * static_cast<std::size_t>(p.max_blocks), {1, p.max_blocks});
    const i64 at = static_cast<i64>(b) * Hq * D;
    forward_kvcache(contiguous<const Q>(q + at, {1, 1, Hq, D}), one, {}, {}, contiguous(out + at, {1, 1, Hq, D}), {},
                    opt);
  }
}

// A row's cache in float elements T (fp32 or bf16), drawn and described, the call that decodes over
// it, the spans a plain read of its bytes reads, and the same sequences as one call each.
template <class T>
struct FloatSetup {
  Pool pool;
  i64 B;
  std::vector<T> q, k, v, out;
  KvCache<T> cache;
  std::vector<peak::Span> spans;
  double bytes;
  FloatSetup(const KvCacheRow& r) : pool(pool_of(r)), B(r.batch()) {
    Normals normals(1);
    q.resize(static_cast<std::size_t>(B * r.Nq * r.Hq * r.D)), out.resize(q.size());
    k.resize(static_cast<std::size_t>(pool.outer * pool.rows * r.Hkv * r.D)), v.resize(k.size());
    for (auto* x : {&q, &k, &v}) normals.fill(*x);
    cache.k = cache_view(k.data(), pool.outer, pool.rows, r.Hkv, r.D, r.heads_major);
    cache.v = cache_view(v.data(), pool.outer, pool.rows, r.Hkv, r.D, r.heads_major);
    describe(cache, pool);
    bytes = 2.0 * static_cast<double>(r.Nk * r.Hkv * r.D) * sizeof(T);
    for (const auto* x : {&k, &v}) add_spans(spans, x->data(), pool, r.Hkv, r.D, sizeof(T), r.heads_major);
  }
  void call(const KvCacheRow& r, const Options& opt) {
    forward_kvcache(contiguous<const T>(q.data(), {B, r.Nq, r.Hq, r.D}), cache, {}, {},
                    contiguous(out.data(), {B, r.Nq, r.Hq, r.D}), {}, opt);
  }
  void apart(const KvCacheRow& r, const Options& opt) {
    one_at_a_time(cache, pool, q.data(), out.data(), r.Hq, r.D, opt);
  }
};

// The same for an 8-bit cache: codes and their scales (quantize_kv of normal draws), queries in Q
// (fp32 or bf16).
template <class Q>
struct CodeSetup {
  Pool pool;
  i64 B;
  std::vector<Q> q, out;
  std::vector<std::uint8_t> k, v;
  std::vector<float> ks, vs;
  QuantizedKvCache cache;
  std::vector<peak::Span> spans;
  double bytes;
  CodeSetup(const KvCacheRow& r) : pool(pool_of(r)), B(r.batch()) {
    const i64 outer = pool.outer, rows = pool.rows;
    const KvQuant quant = r.format == KvFormat::int8 ? KvQuant::int8 : KvQuant::fp8_e4m3;
    Normals normals(1);
    q.resize(static_cast<std::size_t>(B * r.Nq * r.Hq * r.D)), out.resize(q.size());
    std::vector<float> x(static_cast<std::size_t>(outer * rows * r.Hkv * r.D));
    normals.fill(q);
    k.resize(x.size()), v.resize(x.size());
    ks.resize(static_cast<std::size_t>(outer * rows * r.Hkv)), vs.resize(ks.size());
    for (auto [codes, scales] : {std::pair{&k, &ks}, std::pair{&v, &vs}}) {
      normals.fill(x);
      quantize_kv(contiguous<const float>(x.data(), {outer, rows, r.Hkv, r.D}), quant,
                  cache_view(codes->data(), outer, rows, r.Hkv, r.D, r.heads_major),
                  contiguous(scales->data(), {outer, r.Hkv, rows}));
    }
    cache.quant = quant;
    cache.k = cache_view(k.data(), outer, rows, r.Hkv, r.D, r.heads_major);
    cache.v = cache_view(v.data(), outer, rows, r.Hkv, r.D, r.heads_major);
    cache.k_scale = contiguous(ks.data(), {outer, r.Hkv, rows});
    cache.v_scale = contiguous(vs.data(), {outer, r.Hkv, rows});
    describe(cache, pool);
    bytes = static_cast<double>(2 * r.Nk * r.Hkv * (r.D + static_cast<i64>(sizeof(float))));
    for (const auto* c : {&k, &v}) add_spans(spans, c->data(), pool, r.Hkv, r.D, 1, r.heads_major);
    for (const auto* c : {&ks, &vs}) add_spans(spans, c->data(), pool, r.Hkv, 1, sizeof(float), true);
  }
  void call(const KvCacheRow& r, const Options& opt) {
    forward_kvcache(contiguous<const Q>(q.data(), {B, r.Nq, r.Hq, r.D}), cache, {}, {},
                    contiguous(out.data(), {B, r.Nq, r.Hq, r.D}), {}, opt);
  }
  void apart(const KvCacheRow& r, const Options& opt) {
    one_at_a_time(cache, pool, q.data(), out.data(), r.Hq, r.D, opt);
  }
};

// Times the row: the call against a plain read of its bytes; a batch against its sequences one call
// each; a paged sequence against the same sequence in a contiguous cache (built beside it), each
// pair alternating, so that every ratio is of two medians taken under the same load.
template <class Setup>
void run_row(KvCacheRow& r, const TimerRule& rule, const Options& opt) {
  Setup s(r);
  r.bytes = s.bytes;
  r.flops = 0;
  for (std::int32_t L : s.pool.seqlens)
    r.flops += bench::flops({1, r.Hq, r.Hkv, r.Nq, L, r.D, r.D}, opt.causal, Pass::forward);
  std::tie(r.sdpa, r.read) = time_alternating(
      rule, [&] { s.call(r, opt); },
      [&] { peak::read_seconds(s.spans.data(), static_cast<int>(s.spans.size()), r.threads); });
  if (r.batch() > 1)
    std::tie(r.together, r.apart) = time_alternating(
        rule, [&] { s.call(r, opt); }, [&] { s.apart(r, opt); });
  if (r.block > 0 && r.batch() == 1) {
    KvCacheRow c = r;
    c.block = 0;
    Setup flat(c);
    std::tie(r.paged, r.contiguous) = time_alternating(
        rule, [&] { s.call(r, opt); }, [&] { flat.call(c, opt); });
  }
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
double KvCacheRow::gflops() const { return sdpa.median_seconds > 0 ? flops / sdpa.median_seconds / 1e9 : 0.0; }
double KvCacheRow::fraction_of_peak() const { return peak_gflops > 0 ? gflops() / peak_gflops : 0.0; }
double KvCacheRow::tokens_per_s() const {
  return sdpa.median_seconds > 0 ? static_cast<double>(batch() * Nq) / sdpa.median_seconds : 0.0;
}

double KvCacheRow::over_contiguous() const {
  return contiguous.median_seconds > 0 ? paged.median_seconds / contiguous.median_seconds : 0.0;
}

double KvCacheRow::batching_speedup() const {
  return together.median_seconds > 0 ? apart.median_seconds / together.median_seconds : 0.0;
}

std::vector<i64> mixed_lengths() {
  // 64 lengths log-spaced from 16 to 32768 (each 2^(11/63) times the last), multiples of 16.
  std::vector<i64> lengths;
  for (int b = 0; b < 64; ++b)
    lengths.push_back(std::max<i64>(16, std::llround(16.0 * std::exp2(11.0 * b / 63.0) / 16.0) * 16));
  return lengths;
}

const char* KvCacheRow::queries_name() const {
  return bf16_queries || format == KvFormat::bf16 ? "bfloat16" : "float32";
}

std::string KvCacheRow::pass_name() const {
  return fmt::format("kvcache {} {}{}{}{}", kv_format_name(format),
                     block > 0 ? fmt::format("paged{}", block) : std::string("contiguous"),
                     heads_major ? "" : " tokens-major", Nq > 1 ? " chunk" : "", bf16_queries ? " bf16-q" : "");
}
std::string KvCacheRow::label() const {
  if (lengths.empty()) return fmt::format("B=1 H={}/{} Nq={} Nk={} D={}", Hq, Hkv, Nq, Nk, D);
  const auto [lo, hi] = std::minmax_element(lengths.begin(), lengths.end());
  return fmt::format("B={} H={}/{} Nq={} Nk={}..{} D={}", lengths.size(), Hq, Hkv, Nq, *lo, *hi, D);
}

std::vector<KvCacheRow> default_kvcache(int threads) {
  constexpr KvFormat formats[] = {KvFormat::f32, KvFormat::bf16, KvFormat::int8, KvFormat::fp8_e4m3};  // every row's
  std::vector<KvCacheRow> rows;
  for (i64 nk : {4096, 32768})
    for (i64 block : {0, 16, 64})
      for (KvFormat f : formats) {
        KvCacheRow r;
        r.Nk = nk, r.block = block, r.format = f, r.threads = threads;
        rows.push_back(r);
      }
  // FlashAttention's order, one head's rows Hkv·D apart, contiguous and in its paged cache's
  // (num_blocks, 16, Hkv, D) blocks: what the layout costs a decoding step.
  for (i64 block : {0, 16})
    for (KvFormat f : formats) {
      KvCacheRow r;
      r.Nk = 32768, r.block = block, r.format = f, r.heads_major = false, r.threads = threads;
      rows.push_back(r);
    }
  // Many sequences of very different lengths in one call, their blocks in one pool.
  for (KvFormat f : formats) {
    KvCacheRow r;
    r.lengths = mixed_lengths(), r.block = 64, r.format = f, r.threads = threads;
    r.Nk = std::accumulate(r.lengths.begin(), r.lengths.end(), i64{0});
    rows.push_back(r);
  }
  // A chunk of prefill: the tiled loop, which widens an 8-bit cache's codes a key tile at a time,
  // or with bf16 queries (a bf16 model's) the 16-bit engine's where the CPU has one.
  // (format, bf16_queries) of each chunk row
  constexpr std::pair<KvFormat, bool> chunks[] = {{KvFormat::f32, false},  {KvFormat::bf16, false},
                                                  {KvFormat::int8, false}, {KvFormat::fp8_e4m3, false},
                                                  {KvFormat::int8, true},  {KvFormat::fp8_e4m3, true}};
  for (i64 block : {0, 16})
    for (const auto& [f, bf16_queries] : chunks) {
      KvCacheRow r;
      r.Nk = 4096, r.Nq = 64, r.block = block, r.format = f, r.bf16_queries = bf16_queries, r.threads = threads;
      rows.push_back(r);
    }
  return rows;
}

void run_kvcache(KvCacheRow& r, const TimerRule& rule, Isa isa) {
  Options opt;
  opt.threads = r.threads;
  opt.isa = isa;
  opt.causal = r.Nq > 1 ? Causal::bottom_right : Causal::none;  // a chunk: the last Nq positions
  switch (r.format) {
    case KvFormat::f32: return run_row<FloatSetup<float>>(r, rule, opt);
    case KvFormat::bf16: return run_row<FloatSetup<bf16>>(r, rule, opt);
    default: return r.bf16_queries ? run_row<CodeSetup<bf16>>(r, rule, opt) : run_row<CodeSetup<float>>(r, rule, opt);
  }
}

}  // namespace sdpa::bench
