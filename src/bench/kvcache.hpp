// kvcache.hpp — the KV-cache rows of `sdpa bench --suite kvcache`: one decoding step (one query
// per sequence, Hq = 32, Hkv = 8, D = 128) over a cache of Nk keys, contiguous or paged (blocks of
// 16 or 64 positions, scattered; each head's rows back to back, or tokens before heads), in fp32,
// bf16, int8 or fp8 e4m3 (sdpa::forward_kvcache), timed alternately with a plain read of the bytes
// that layout must read (codes and scales for the 8-bit formats): decoding is a read of the cache,
// so its time is judged as a fraction of that read (and its FLOPs against the FMA peak: a cache
// whose elements are widened to fp32 runs the fp32 cache's FMAs). A paged sequence is also timed
// alternately with the same sequence in a contiguous cache, so that what the blocks cost is one
// ratio under one load. And a chunk of prefill (64 queries, bottom-right causal: 256 query lanes
// per kv head, the tiled loop, or the 16-bit engine's for bf16 queries) over the same caches, where
// the 8-bit formats' codes are widened a key tile at a time: its time beside the float caches', with
// fp32 queries and with bf16 ones.
#pragma once

#include <string>
#include <vector>

#include "bench/flops.hpp"
#include "bench/timer.hpp"

namespace sdpa::bench {

/// A cache's element format in a row: a float dtype or an 8-bit code.
enum class KvFormat { f32, bf16, int8, fp8_e4m3 };
const char* kv_format_name(KvFormat f);  // "float32", "bfloat16", "int8", "fp8_e4m3"

struct KvCacheRow {
  i64 Nk = 4096, Hq = 32, Hkv = 8, D = 128;
  i64 Nq = 1;     // queries per sequence: 1, a decoding step; more, a chunk of prefill (bottom-right causal)
  i64 block = 0;  // positions per block of a paged cache; 0: contiguous
  KvFormat format = KvFormat::f32;
  // An 8-bit cache's queries (and output) in bf16, as a bf16 model's; else fp32. A float cache's
  // queries are in its own dtype.
  bool bf16_queries = false;
  // Memory order of a block's (or the contiguous cache's) positions and heads: (Hkv, rows, D), each
  // head's rows back to back, as vLLM's CPU cache keeps them; or (rows, Hkv, D), FlashAttention's
  // order, where one head's consecutive rows lie Hkv·D elements apart. Either is the same
  // (…, rows, Hkv, D) view (strides), which forward_kvcache reads as it is.
  bool heads_major = true;
  // A batch of sequences of these lengths in one call (a paged cache: their blocks scattered over
  // one pool), Nk their sum; empty: one sequence of Nk keys.
  std::vector<i64> lengths;
  i64 batch() const { return lengths.empty() ? 1 : static_cast<i64>(lengths.size()); }
  int threads = 1;
  Timing sdpa, read;  // the call, and a plain read of the bytes it must read, alternating
  // A batch (lengths): the call again, alternating with the same sequences as one call each (their
  // rows of the block table), as a server that does not batch them would run them.
  Timing together, apart;
  // A paged sequence (block > 0, one sequence): the call again, alternating with the same sequence's
  // call over a contiguous cache of the same format and order, built beside it.
  Timing paged, contiguous;
  double bytes = 0;   // K and V (codes and scales) of the Nk keys
  // The call's FLOPs by flops.hpp's count (every query head's products over the keys its causal
  // mask keeps), and the fp32 FMA peak on `threads` threads measured in the same run: decoding
  // over an 8-bit or bf16 cache widens each element to fp32 and runs the fp32 FMAs of an fp32
  // cache, so the peak bounds how far fewer bytes can take it.
  double flops = 0;
  double peak_gflops = 0;

  double gbytes_per_s() const;       // bytes / the call's median
  double read_gbytes_per_s() const;  // bytes / the read's median
  double fraction_of_read() const;   // the call's bytes per second over the read's
  double gflops() const;             // flops / the call's median
  double fraction_of_peak() const;   // gflops over peak_gflops (0: not measured)
  double tokens_per_s() const;       // batch() · Nq / the call's median: the queries it answered
  double batching_speedup() const;   // apart's median over together's (0: not a batch)
  double over_contiguous() const;    // paged's median over contiguous's (0: not a paged sequence)
  const char* queries_name() const;  // the queries' dtype: "bfloat16" (bf16_queries, a bf16 cache) or "float32"
  /// "kvcache int8 paged16", "kvcache float32 contiguous", "kvcache int8 contiguous chunk",
  /// "kvcache int8 paged16 chunk bf16-q", …
  std::string pass_name() const;
  /// "B=1 H=32/8 Nq=1 Nk=4096 D=128", "B=64 H=32/8 Nq=1 Nk=16..32768 D=128"
  std::string label() const;
};

/// The suite: Nk ∈ {4096, 32768} × {contiguous, paged 16, paged 64} × {fp32, bf16, int8, fp8}, heads
/// major; the contiguous rows at 32768 tokens major; a batch of 64 sequences of 16 to 32768 keys
/// (mixed_lengths) in blocks of 64, each format; and a chunk of 64 queries over 4096 keys,
/// contiguous and in blocks of 16, each format, and the 8-bit formats' again with bf16 queries.
std::vector<KvCacheRow> default_kvcache(int threads);
/// 64 lengths from 16 to 32768, log-spaced, multiples of 16 (about 287 thousand keys in all).
std::vector<i64> mixed_lengths();
/// Times `row`; fills sdpa, read, bytes and flops (and together and apart for a batch, paged and contiguous
/// for a paged sequence).
void run_kvcache(KvCacheRow& row, const TimerRule& rule, Isa isa);

}  // namespace sdpa::bench
