// cmd_decode.cpp — `sdpa decode`: attention over a KV cache held in .npy files (sdpa/kvcache.hpp),
// FlashAttention's flash_attn_with_kvcache from the command line. The cache is float32, float16
// or 8-bit codes with their scales; new tokens (--k, --v) are appended and the updated cache
// files are written back, all files or none.
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "common.hpp"
#include "io/atomic_file.hpp"
#include "io/npy.hpp"
#include "sdpa/kvcache.hpp"

namespace sdpa::cli {
namespace {

struct Args {
  std::string q, k_cache, v_cache, cache_seqlens, block_table, k, v, out, lse, sinks;
  std::string kv_quant, k_scale, v_scale;
  std::optional<double> scale, softcap;
  bool causal = false;
  std::string window, isa = "auto";
  int threads = 0;
};

// A rank-4 float tensor in q's dtype: the layout (B|blocks, N, H, D) the cache calls take as is.
Tensor load_rank4(const std::string& path, const std::string& name, const Tensor* like) {
  Tensor t = load_tensor(path, name, true);
  if (t.file_shape.size() != 4)
    throw Error(name + " (" + path + "): expected a rank-4 array, got rank " + std::to_string(t.file_shape.size()));
  if (like) require_dtype_of(t, *like);
  return t;
}

// 8-bit codes (uint8, rank 4) or their scales (float32, rank 3), read as they are.
io::NpyArray load_codes(const std::string& path, const std::string& name) {
  io::NpyArray a = io::read_npy(path);
  if (a.dtype != io::DType::u8 || a.shape.size() != 4)
    throw Error(name + " (" + path + "): a quantized cache is a rank-4 uint8 array of codes, got " +
                io::dtype_name(a.dtype) + " of rank " + std::to_string(a.shape.size()));
  return a;
}
struct Scales {
  std::vector<float> data;
  std::vector<i64> shape;
};
Scales load_scales(const std::string& path, const std::string& name) {
  if (path.empty()) throw Error(name + ": a quantized cache (--kv-quant) needs its scales");
  const io::NpyArray a = io::read_npy(path);
  if (a.dtype != io::DType::f32 || a.shape.size() != 3)
    throw Error(name + " (" + path + "): expected a rank-3 float32 array (B|blocks, Hkv, Nmax|block_size), got " +
                io::dtype_name(a.dtype) + " of rank " + std::to_string(a.shape.size()));
  return {std::vector<float>(a.f32(), a.f32() + a.numel()), a.shape};
}

// A loaded tensor's data as the cache the call writes into (float32 or float16).
template <class T>
View4<T> mutable_view(Tensor& t) {
  if constexpr (std::is_same_v<T, fp16>)
    return contiguous(t.half.data(), t.shape);
  else
    return contiguous(t.data.data(), t.shape);
}
template <class T>
const std::vector<T>& data_of(const Tensor& t) {
  if constexpr (std::is_same_v<T, fp16>)
    return t.half;
  else
    return t.data;
}

template <class T>
int run_typed(const Args& a, const Tensor& q, const Options& opt) {
  std::vector<i64> seqlens_shape, table_shape;
  const std::vector<std::int32_t> seqlens = load_int32(a.cache_seqlens, "--cache-seqlens", 1, seqlens_shape);
  const std::vector<std::int32_t> table =
      a.block_table.empty() ? std::vector<std::int32_t>{} : load_int32(a.block_table, "--block-table", 2, table_shape);
  const View<const std::int32_t, 1> seqlens_view{seqlens.data(), {seqlens_shape[0]}, {1}};
  const View<const std::int32_t, 2> table_view =
      table.empty() ? View<const std::int32_t, 2>{}
                    : View<const std::int32_t, 2>{table.data(), {table_shape[0], table_shape[1]}, {table_shape[1], 1}};
  const bool append = !a.k.empty();
  std::optional<Tensor> k_new, v_new;
  if (append) k_new = load_rank4(a.k, "--k", &q), v_new = load_rank4(a.v, "--v", &q);

  const i64 B = q.shape[0], Nq = q.shape[1], Hq = q.shape[2];
  io::OutputSet files;  // nothing lands unless everything succeeds
  std::vector<float> lse(static_cast<std::size_t>(B * Hq * Nq));
  const auto lse_view = contiguous(lse.data(), {B, Hq, Nq});
  const auto write_results = [&](const std::vector<T>& out, i64 Dv) {
    files.add(a.out, out_bytes(out, {B, Nq, Hq, Dv}, io::DType::f32));
    if (!a.lse.empty()) files.add(a.lse, npy_bytes(lse, {B, Hq, Nq}, io::DType::f32));
  };
  const View4<const T> kn = k_new ? view_of<T>(*k_new) : View4<const T>{},
                       vn = v_new ? view_of<T>(*v_new) : View4<const T>{};

  if (a.kv_quant.empty()) {
    Tensor kc = load_rank4(a.k_cache, "--k-cache", &q), vc = load_rank4(a.v_cache, "--v-cache", &q);
    const i64 Dv = vc.shape[3];
    std::vector<T> out(static_cast<std::size_t>(B * Nq * Hq * Dv));
    KvCache<T> cache{mutable_view<T>(kc), mutable_view<T>(vc), table_view, seqlens_view};
    forward_kvcache(view_of<T>(q), cache, kn, vn, contiguous(out.data(), {B, Nq, Hq, Dv}), lse_view, opt);
    write_results(out, Dv);
    if (append) {
      files.add(a.k_cache, out_bytes(data_of<T>(kc), kc.file_shape, io::DType::f32));
      files.add(a.v_cache, out_bytes(data_of<T>(vc), vc.file_shape, io::DType::f32));
    }
  } else {
    io::NpyArray kc = load_codes(a.k_cache, "--k-cache"), vc = load_codes(a.v_cache, "--v-cache");
    Scales ks = load_scales(a.k_scale, "--k-scale"), vs = load_scales(a.v_scale, "--v-scale");
    const auto codes = [](io::NpyArray& x) {
      return contiguous(x.bytes.data(), {x.shape[0], x.shape[1], x.shape[2], x.shape[3]});
    };
    const auto scales = [](Scales& x) { return contiguous(x.data.data(), {x.shape[0], x.shape[1], x.shape[2]}); };
    QuantizedKvCache cache{parse_kv_quant(a.kv_quant, "--kv-quant"),
                           codes(kc),
                           codes(vc),
                           scales(ks),
                           scales(vs),
                           table_view,
                           seqlens_view};
    const i64 Dv = vc.shape[3];
    std::vector<T> out(static_cast<std::size_t>(B * Nq * Hq * Dv));
    forward_kvcache(view_of<T>(q), cache, kn, vn, contiguous(out.data(), {B, Nq, Hq, Dv}), lse_view, opt);
    write_results(out, Dv);
    if (append) {
      files.add(a.k_cache, io::serialize_npy(io::DType::u8, kc.shape, kc.bytes.data()));
      files.add(a.v_cache, io::serialize_npy(io::DType::u8, vc.shape, vc.bytes.data()));
      files.add(a.k_scale, npy_bytes(ks.data, ks.shape, io::DType::f32));
      files.add(a.v_scale, npy_bytes(vs.data, vs.shape, io::DType::f32));
    }
  }
  files.commit();
  return 0;
}

int run(const Args& a) {
  if (a.k.empty() != a.v.empty()) throw Error("--k and --v go together: give both to append new tokens, or neither");
  if (a.kv_quant.empty() && (!a.k_scale.empty() || !a.v_scale.empty()))
    throw Error("--k-scale/--v-scale: the scales of a quantized cache; give --kv-quant int8|fp8_e4m3 with them");
  const Tensor q = load_tensor(a.q, "--q", true);
  if (q.file_shape.size() != 4)
    throw Error("--q (" + a.q + "): expected a rank-4 [B, Nq, Hq, D] array, got rank " +
                std::to_string(q.file_shape.size()));
  if (q.dtype == io::DType::f64)
    throw Error(
        "--q: float64 is not taken by sdpa decode (the cache is rewritten in the queries' dtype): use "
        "float32 or float16");
  Options opt;
  opt.scale = a.scale;
  opt.softcap = a.softcap;
  opt.causal = a.causal ? Causal::bottom_right : Causal::none;
  if (!a.window.empty()) opt.window = parse_window(a.window);
  opt.threads = a.threads;
  opt.isa = parse_isa(a.isa.c_str(), "--isa");
  const std::vector<float> sinks = a.sinks.empty() ? std::vector<float>{} : load_sinks(a.sinks);
  if (!a.sinks.empty()) opt.sinks = {sinks.data(), {static_cast<i64>(sinks.size())}, {1}};
  if (q.dtype == io::DType::f16) return run_typed<fp16>(a, q, opt);
  return run_typed<float>(a, q, opt);
}

}  // namespace

Command add_decode(CLI::App& parent) {
  auto a = std::make_shared<Args>();
  CLI::App* c = parent.add_subcommand(
      "decode",
      "Attention over a KV cache in .npy files (decoding and chunked prefill), as FlashAttention's\n"
      "flash_attn_with_kvcache: each sequence's queries attend to its cache_seqlens[b] cached keys, after --k/--v\n"
      "(new tokens) are appended at that position; the updated cache files are then written back. Arrays are\n"
      "tokens before heads: q [B,Nq,Hq,D], out [B,Nq,Hq,Dv], lse [B,Hq,Nq] float32. The cache is float32 or\n"
      "float16 (q's dtype) or, with --kv-quant, uint8 codes with float32 scales (sdpa.quantize_kv writes them).");
  c->add_option("--q", a->q, "Queries [B,Nq,Hq,Dk], float32 or float16")->required();
  c->add_option("--k-cache", a->k_cache, "Key cache [B,Nmax,Hkv,Dk], or paged [blocks,block_size,Hkv,Dk]")->required();
  c->add_option("--v-cache", a->v_cache, "Value cache [B,Nmax,Hkv,Dv], or paged [blocks,block_size,Hkv,Dv]")
      ->required();
  c->add_option("--cache-seqlens", a->cache_seqlens, "int32/int64 [B]: the tokens each sequence holds before the call")
      ->required();
  c->add_option("--block-table", a->block_table,
                "Paged cache: int32/int64 [B,max_blocks], position p of sequence b in row p % block_size of block "
                "table[b, p / block_size]");
  c->add_option("--k", a->k, "New keys [B,Nnew,Hkv,Dk] to append (q's dtype); the cache files are rewritten");
  c->add_option("--v", a->v, "New values [B,Nnew,Hkv,Dv] to append, with --k");
  c->add_option("--out", a->out, "Output file [B,Nq,Hq,Dv], q's dtype")->required();
  c->add_option("--lse", a->lse, "Also write the log-sum-exp [B,Hq,Nq] (float32)");
  c->add_option("--kv-quant", a->kv_quant, "The cache is 8-bit codes: int8 | fp8_e4m3");
  c->add_option("--k-scale", a->k_scale, "With --kv-quant: float32 key scales [B|blocks,Hkv,Nmax|block_size]");
  c->add_option("--v-scale", a->v_scale, "With --kv-quant: float32 value scales, shaped as --k-scale");
  c->add_flag("--causal", a->causal, "The queries are each sequence's last Nq positions (bottom-right causal)");
  c->add_option("--window", a->window, "Sliding window L,R around the diagonal; -1 = unbounded");
  c->add_option("--softcap", a->softcap, "Soft-cap c: scores become c·tanh(s/c)");
  c->add_option("--scale", a->scale, "Temperature β (default 1/sqrt(Dk))");
  c->add_option("--sinks", a->sinks, "Attention sinks: a 1-D .npy of Hq logits, one per query head");
  c->add_option("--threads", a->threads, "Threads (0 = all)")->capture_default_str();
  c->add_option("--isa", a->isa, kIsaHelp)->capture_default_str();
  return {c, [a] { return run(*a); }};
}

}  // namespace sdpa::cli
