// sdpa/kvcache.hpp — attention over a KV cache, for decoding and chunked prefill: the new
// tokens' keys and values written into the cache in place, then each sequence's queries
// attending to its cached keys (FlashAttention's flash_attn_with_kvcache, in sdpa's terms).
//
// Shapes (the layout serving engines keep: tokens before heads):
//   q        (B, Nq, Hq, Dk)                         out  (B, Nq, Hq, Dv)      lse (B, Hq, Nq) fp32
//   contiguous cache:  k (B, Nmax, Hkv, Dk)          v (B, Nmax, Hkv, Dv)
//   paged cache:       k (blocks, block_size, Hkv, Dk)  v (blocks, block_size, Hkv, Dv)
//                      block_table (B, max_blocks) int32: position p of sequence b is row
//                      p % block_size of block block_table[b, p / block_size]
//   seqlens  (B) int32: the tokens sequence b holds before the call
//   k_new    (B, Nnew, Hkv, Dk), v_new (B, Nnew, Hkv, Dv): optional; written at positions
//            seqlens[b] .. seqlens[b] + Nnew - 1 of sequence b, which then holds
//            L_b = seqlens[b] + Nnew keys (L_b = seqlens[b] without them)
//
// Sequence b's queries attend to its L_b keys exactly as sdpa::forward would to a
// (1, Hkv, L_b, D) tensor holding them, with the call's options: with Causal::bottom_right
// the queries are the sequence's last Nq positions (query i sees keys j <= i + L_b - Nq);
// Causal::top_left is refused (it would put the queries at the start of a sequence whose
// keys they follow). Windows, soft-cap, sinks, scale, threads and the ISA as in
// sdpa::forward; explicit masks and dropout are refused (a cache call is inference). A
// sequence with L_b = 0 gets out = 0 and lse = −∞ (the sink's logit where sinks are set).
//
// Every argument is checked before anything is written: a block table entry outside the
// cache's blocks, a sequence that would outgrow the cache, two sequences writing one cache
// row, wrong shapes — each throws sdpa::Error naming the argument, and then the cache is
// unchanged. Only the rows a call writes or reads are touched.
//
// A quantized cache (QuantizedKvCache) holds one byte per element and one fp32 scale per
// (position, kv head) for K and for V: the element is code × scale. New tokens are quantized
// on the way in (a NaN or infinity in them is refused: it has no code), and the kernel reads
// the codes where they lie, never a float copy of the cache: the fused decoding loop converts
// them in registers, the tiled loop (longer chunks) a key tile at a time. The attention is the
// float attention of the dequantized cache, to fp32 accuracy. How far that is from the float cache's attention is
// bounded by the quantization step (docs/contract.md, "Quantized KV caches").
#pragma once

#include <cstdint>
#include <string>

#include "sdpa/attention.hpp"

namespace sdpa {

/// A KV cache in element type T (float, bf16, fp16): contiguous when block_table is empty, else
/// paged. See the file comment for the shapes.
template <class T>
struct KvCache {
  View4<T> k{};
  View4<T> v{};
  View<const std::int32_t, 2> block_table{};
  View<const std::int32_t, 1> seqlens{};
};

/// The element format of a quantized cache: int8 (symmetric, code in [-127, 127], scale =
/// max|x| / 127 over the row) or fp8 e4m3 (the OCP "e4m3fn" byte: 4 exponent bits, 3 mantissa
/// bits, finite codes up to ±448, scale = max|x| / 448), rounded to nearest, ties to even.
enum class KvQuant { int8, fp8_e4m3 };

/// The name of a format ("int8", "fp8_e4m3").
const char* kv_quant_name(KvQuant q);
/// The format of a name kv_quant_name gives; anything else throws sdpa::Error naming `what`.
KvQuant parse_kv_quant(const std::string& name, const char* what = "format");

/// A KV cache stored in 8 bits: codes laid out as KvCache's k and v (contiguous (B, Nmax, Hkv, D)
/// or paged (blocks, block_size, Hkv, D) with a block table), and one scale per position and kv
/// head, (B, Hkv, Nmax) or (blocks, Hkv, block_size), unit stride along the positions.
struct QuantizedKvCache {
  KvQuant quant = KvQuant::int8;
  View4<std::uint8_t> k{};
  View4<std::uint8_t> v{};
  View3<float> k_scale{};
  View3<float> v_scale{};
  View<const std::int32_t, 2> block_table{};
  View<const std::int32_t, 1> seqlens{};
};

/// Quantizes x (A, R, H, D) row by row (one row: the D elements of one (a, r, h)) into codes
/// (A, R, H, D) and scales (A, H, R): the layout of a cache's rows and their scales. A NaN or
/// infinity in x throws sdpa::Error before anything is written. An all-zero row gets scale 0.
/// bf16 and fp16 rows get the codes of their (exact) float values, without a float copy of x.
void quantize_kv(View4<const float> x, KvQuant quant, View4<std::uint8_t> codes, View3<float> scales);
void quantize_kv(View4<const bf16> x, KvQuant quant, View4<std::uint8_t> codes, View3<float> scales);
void quantize_kv(View4<const fp16> x, KvQuant quant, View4<std::uint8_t> codes, View3<float> scales);
/// code × scale, the values a quantized cache's attention reads: x (A, R, H, D) from codes
/// (A, R, H, D) and scales (A, H, R).
void dequantize_kv(View4<const std::uint8_t> codes, View3<const float> scales, KvQuant quant, View4<float> x);

/// Appends k_new, v_new (when non-empty) into the cache, then writes out (and lse when
/// non-empty). The same bits for any thread count.
void forward_kvcache(View4<const float> q, const KvCache<float>& cache, View4<const float> k_new,
                     View4<const float> v_new, View4<float> out, View3<float> lse, const Options& opt = {});
void forward_kvcache(View4<const bf16> q, const KvCache<bf16>& cache, View4<const bf16> k_new, View4<const bf16> v_new,
                     View4<bf16> out, View3<float> lse, const Options& opt = {});
void forward_kvcache(View4<const fp16> q, const KvCache<fp16>& cache, View4<const fp16> k_new, View4<const fp16> v_new,
                     View4<fp16> out, View3<float> lse, const Options& opt = {});

/// The same over a quantized cache: k_new and v_new are quantized into it (their rows' scales
/// set), then each sequence's queries attend to the dequantized keys and values.
void forward_kvcache(View4<const float> q, const QuantizedKvCache& cache, View4<const float> k_new,
                     View4<const float> v_new, View4<float> out, View3<float> lse, const Options& opt = {});
void forward_kvcache(View4<const bf16> q, const QuantizedKvCache& cache, View4<const bf16> k_new,
                     View4<const bf16> v_new, View4<bf16> out, View3<float> lse, const Options& opt = {});
void forward_kvcache(View4<const fp16> q, const QuantizedKvCache& cache, View4<const fp16> k_new,
                     View4<const fp16> v_new, View4<fp16> out, View3<float> lse, const Options& opt = {});

}  // namespace sdpa
