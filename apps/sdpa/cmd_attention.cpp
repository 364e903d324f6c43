// cmd_attention.cpp — `sdpa attention`: attention (and its backward) on .npy files.
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "commands.hpp"
#include "common.hpp"
#include "io/atomic_file.hpp"
#include "ring.hpp"
#include "io/npy.hpp"

namespace sdpa::cli {
namespace {

struct Args {
  std::string q, k, v, out, lse, mask;
  std::optional<double> scale, softcap;
  std::string causal = "none", window, kernel = "fast", isa = "auto";
  int threads = 0;
  double dropout = 0.0;
  std::uint64_t seed = 0, offset = 0;
  std::string grad_out, dq, dk, dv;
  bool ring = false;  // under mpirun: ring attention over the ranks (cmd_ring.cpp)
  std::string layout = "zigzag";
  std::string cu_seqlens_q, cu_seqlens_k;
  std::string sinks, dsinks;  // attention sinks: --sinks in, --dsinks the backward's gradient out
};

// --dsinks: the backward writes ∂L/∂sinks (Hq) into `grads` through the options it returns.
Options with_dsinks(const Args& a, Options opt, std::vector<float>& grads) {
  if (a.dsinks.empty()) return opt;
  grads.assign(static_cast<std::size_t>(opt.sinks.shape[0]), 0.0f);
  opt.dsinks = {grads.data(), {opt.sinks.shape[0]}, {1}};
  return opt;
}

// An offsets file (--cu-seqlens-q/k): a 1-D int32 or int64 array; the library checks its values.
std::vector<i64> load_offsets(const std::string& path, const std::string& name) {
  const io::NpyArray a = io::read_npy(path);
  if (a.shape.size() != 1)
    throw Error(name + " (" + path + "): expected a 1-D array of batch + 1 offsets, got rank " +
                std::to_string(a.shape.size()));
  const auto n = static_cast<std::size_t>(a.numel());
  if (a.dtype == io::DType::i32) return std::vector<i64>(a.i32(), a.i32() + n);
  if (a.dtype == io::DType::i64) return std::vector<i64>(a.i64(), a.i64() + n);
  throw Error(name + " (" + path + "): expected int32 or int64 offsets, got " + io::dtype_name(a.dtype));
}

// Packed sequences: q (Tq, Hq, Dk), k (Tk, Hkv, Dk), v (Tk, Hkv, Dv) files, read as [1, T, H, D];
// out (Tq, Hq, Dv), lse (Hq, Tq), gradients like their inputs, in the inputs' dtype (lse float32
// for float16 inputs, as in run_dense). A --mask is the packed batch's, rank 3
// [Hq|1, Tq|1, Tk|1]; the library cuts each sequence's block from it.
template <class T>
int run_varlen(const Args& a, const Tensor& q, const Tensor& k, const Tensor& v, Options opt, bool want_backward) {
  if (a.cu_seqlens_q.empty() || a.cu_seqlens_k.empty())
    throw Error("--cu-seqlens-q and --cu-seqlens-k go together: give both for packed sequences");
  Mask mask;
  if (!a.mask.empty()) {
    mask = load_mask(a.mask);
    if (mask.file_rank != 3)
      throw Error("--mask (" + a.mask + "): packed sequences take a rank-3 [Hq|1, Tq|1, Tk|1] mask, got rank " +
                  std::to_string(mask.file_rank));
    use_mask(mask, opt);  // promoted to (1, Hq|1, Tq|1, Tk|1), the library's packed mask
  }
  for (const Tensor* t : {&q, &k, &v})
    if (t->file_shape.size() != 3)
      throw Error(t->name + ": packed sequences need a rank-3 [T, H, D] array, got rank " +
                  std::to_string(t->file_shape.size()));
  const std::vector<i64> cq = load_offsets(a.cu_seqlens_q, "--cu-seqlens-q"),
                         ck = load_offsets(a.cu_seqlens_k, "--cu-seqlens-k");
  const auto packed = [](const Tensor& t) {
    const View4<const T> x = view_of<T>(t);  // [1, T, H, D]
    return contiguous(x.data, {t.shape[1], t.shape[2], t.shape[3]});
  };
  const auto offsets = [](const std::vector<i64>& c) {
    return SeqOffsets(View<const i64, 1>{c.data(), {static_cast<i64>(c.size())}, {1}});
  };
  const i64 Tq = q.shape[1], Hq = q.shape[2], Dv = v.shape[3];
  std::vector<T> out(static_cast<std::size_t>(Tq * Hq * Dv));
  std::vector<float> lse(static_cast<std::size_t>(Hq * Tq));
  const auto out_view = contiguous(out.data(), {Tq, Hq, Dv});
  const auto lse_view = contiguous(lse.data(), {Hq, Tq});
  forward_varlen(packed(q), packed(k), packed(v), offsets(cq), offsets(ck), out_view, lse_view, opt);
  io::OutputSet files;  // nothing lands unless everything succeeds
  files.add(a.out, out_bytes(out, {Tq, Hq, Dv}, q.dtype));
  if (!a.lse.empty())
    files.add(a.lse, npy_bytes(lse, {Hq, Tq}, q.dtype == io::DType::f16 ? io::DType::f32 : q.dtype));
  if (want_backward) {
    const Tensor dout = load_tensor(a.grad_out, "--grad-out", true);
    require_dtype_of(dout, q);
    if (dout.file_shape != std::vector<i64>{Tq, Hq, Dv})
      throw Error("--grad-out: shape must equal the output's, " + shape_str(std::array<i64, 3>{Tq, Hq, Dv}));
    const auto numel = [](const Tensor& t) { return static_cast<std::size_t>(t.shape[1] * t.shape[2] * t.shape[3]); };
    std::vector<T> dq(numel(q)), dk(numel(k)), dv(numel(v));
    std::vector<float> dsinks;
    backward_varlen(packed(q), packed(k), packed(v), offsets(cq), offsets(ck), View3<const T>(out_view), lse_view,
                    packed(dout), contiguous(dq.data(), {Tq, Hq, q.shape[3]}),
                    contiguous(dk.data(), {k.shape[1], k.shape[2], k.shape[3]}),
                    contiguous(dv.data(), {v.shape[1], v.shape[2], v.shape[3]}), with_dsinks(a, opt, dsinks));
    if (!a.dsinks.empty()) files.add(a.dsinks, npy_bytes(dsinks, {Hq}, io::DType::f32));
    files.add(a.dq, out_bytes(dq, q.file_shape, q.dtype));
    files.add(a.dk, out_bytes(dk, k.file_shape, q.dtype));
    files.add(a.dv, out_bytes(dv, v.file_shape, q.dtype));
  }
  files.commit();
  return 0;
}

// out/grad shapes keep the file's rank: the leading dims of `like`, last two given.
std::vector<i64> file_shape(const Tensor& like, i64 n, i64 d) {
  std::vector<i64> s(like.file_shape.begin(), like.file_shape.end() - 2);
  s.push_back(n);
  s.push_back(d);
  return s;
}

// [B, H, N, D] tensors (rank 2 to 4 files): out and the gradients in the inputs' dtype; lse in
// the inputs' dtype too, except float32 for float16 inputs (the library's lse is fp32).
template <class T>
int run_dense(const Args& a, const Tensor& q, const Tensor& k, const Tensor& v, const Options& opt,
              bool want_backward) {
  const i64 B = q.shape[0], Hq = q.shape[1], Nq = q.shape[2], Dv = v.shape[3];
  std::vector<T> out(static_cast<std::size_t>(B * Hq * Nq * Dv));
  std::vector<float> lse(static_cast<std::size_t>(B * Hq * Nq));
  const auto out_view = contiguous(out.data(), {B, Hq, Nq, Dv});
  const auto lse_view = contiguous(lse.data(), {B, Hq, Nq});
  forward(view_of<T>(q), view_of<T>(k), view_of<T>(v), out_view, lse_view, opt);

  io::OutputSet files;  // nothing lands unless everything succeeds
  files.add(a.out, out_bytes(out, file_shape(q, Nq, Dv), q.dtype));
  if (!a.lse.empty()) {
    std::vector<i64> s(q.file_shape.begin(), q.file_shape.end() - 1);
    files.add(a.lse, npy_bytes(lse, s, q.dtype == io::DType::f16 ? io::DType::f32 : q.dtype));
  }
  if (want_backward) {
    const Tensor dout = load_tensor(a.grad_out, "--grad-out", true);
    require_dtype_of(dout, q);
    if (dout.shape != std::array<i64, 4>{B, Hq, Nq, Dv})
      throw Error("--grad-out: shape must equal the output's, " + shape_str(std::array<i64, 4>{B, Hq, Nq, Dv}) +
                  " (promoted to rank 4), got " + shape_str(dout.shape));
    const auto numel = [](const Tensor& t) { return static_cast<std::size_t>(t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3]); };
    std::vector<T> dq(numel(q)), dk(numel(k)), dv(numel(v));
    std::vector<float> dsinks;
    backward(view_of<T>(q), view_of<T>(k), view_of<T>(v), View4<const T>(out_view), View3<const float>(lse_view),
             view_of<T>(dout), contiguous(dq.data(), q.shape), contiguous(dk.data(), k.shape),
             contiguous(dv.data(), v.shape), with_dsinks(a, opt, dsinks));
    if (!a.dsinks.empty()) files.add(a.dsinks, npy_bytes(dsinks, {Hq}, io::DType::f32));
    files.add(a.dq, out_bytes(dq, q.file_shape, q.dtype));
    files.add(a.dk, out_bytes(dk, k.file_shape, q.dtype));
    files.add(a.dv, out_bytes(dv, v.file_shape, q.dtype));
  }
  files.commit();
  return 0;
}

Options options_of(const Args& a) {
  Options opt;
  opt.scale = a.scale;
  opt.softcap = a.softcap;
  opt.causal = parse_causal(a.causal);
  if (!a.window.empty()) opt.window = parse_window(a.window);
  opt.threads = a.threads;
  opt.isa = parse_isa(a.isa.c_str(), "--isa");
  if (!(a.dropout >= 0.0 && a.dropout < 1.0)) throw Error("--dropout: must be in [0, 1), got " + std::to_string(a.dropout));
  opt.dropout = {a.dropout, a.seed, a.offset};
  if (a.kernel == "reference")
    opt.kernel = Kernel::reference;
  else if (a.kernel != "fast")
    throw Error("--kernel: expected fast or reference, got '" + a.kernel + "'");
  return opt;
}

int run(const Args& a) {
  const bool want_backward = !a.grad_out.empty() || !a.dq.empty() || !a.dk.empty() || !a.dv.empty();
  if (want_backward && (a.grad_out.empty() || a.dq.empty() || a.dk.empty() || a.dv.empty()))
    throw Error("--grad-out, --dq, --dk and --dv go together: give all four for the backward pass");
  if (!a.dsinks.empty() && (a.sinks.empty() || !want_backward))
    throw Error(
        "--dsinks: the backward's gradient of --sinks; give --sinks and the backward (--grad-out, --dq, --dk, "
        "--dv) with it");
  if (a.ring) {
    if (!a.cu_seqlens_q.empty() || !a.cu_seqlens_k.empty())
      throw Error("--cu-seqlens-q/--cu-seqlens-k: not supported with --ring (packed sequences run on one process)");
    return run_ring_attention({a.q, a.k, a.v, a.out, a.lse, a.grad_out, a.dq, a.dk, a.dv, a.mask, a.layout,
                               a.sinks.empty() ? std::vector<float>{} : load_sinks(a.sinks), a.dsinks},
                              options_of(a));
  }
  const Tensor q = load_tensor(a.q, "--q", true), k = load_tensor(a.k, "--k", true), v = load_tensor(a.v, "--v", true);
  for (const Tensor* t : {&k, &v}) {
    require_dtype_of(*t, q);
    if (t->file_shape.size() != q.file_shape.size())
      throw Error(t->name + ": rank " + std::to_string(t->file_shape.size()) + " differs from --q's " +
                  std::to_string(q.file_shape.size()));
  }
  Options opt = options_of(a);
  const std::vector<float> sinks = a.sinks.empty() ? std::vector<float>{} : load_sinks(a.sinks);
  if (!a.sinks.empty()) opt.sinks = {sinks.data(), {static_cast<i64>(sinks.size())}, {1}};
  if (!a.cu_seqlens_q.empty() || !a.cu_seqlens_k.empty()) {
    if (q.dtype == io::DType::f16) return run_varlen<fp16>(a, q, k, v, opt, want_backward);
    return run_varlen<float>(a, q, k, v, opt, want_backward);
  }
  Mask mask;
  if (!a.mask.empty()) {
    mask = load_mask(a.mask);  // rank promoted to 4; the library broadcasts size-1 dimensions
    use_mask(mask, opt);
  }

  if (q.dtype == io::DType::f16) return run_dense<fp16>(a, q, k, v, opt, want_backward);
  return run_dense<float>(a, q, k, v, opt, want_backward);
}

}  // namespace

Command add_attention(CLI::App& parent) {
  auto a = std::make_shared<Args>();
  CLI::App* c = parent.add_subcommand(
      "attention",
      "Attention on .npy files: out = softmax(β·q·kᵀ + mask)·v, optionally with the backward pass.\n"
      "Arrays: float16, float32 or float64 (one dtype for q, k, v and --grad-out), shape [B,H,N,D], [H,N,D] or\n"
      "[N,D]; outputs keep the inputs' dtype and rank (lse is float32 for float16 inputs). float64 inputs are\n"
      "computed in float32 by the fast kernel (the reference kernel accumulates in fp64); float16 ones are\n"
      "converted on load, accumulated in float32 and rounded once on store. NumPy has no bfloat16: use Python.");
  c->add_option("--q", a->q, "Queries [B,Hq,Nq,Dk]")->required();
  c->add_option("--k", a->k, "Keys [B,Hkv,Nk,Dk]")->required();
  c->add_option("--v", a->v, "Values [B,Hkv,Nk,Dv]")->required();
  c->add_option("--out", a->out, "Output file [B,Hq,Nq,Dv]")->required();
  c->add_option("--lse", a->lse, "Also write the log-sum-exp [B,Hq,Nq]");
  c->add_option("--scale", a->scale, "Temperature β (default 1/sqrt(Dk))");
  c->add_option("--causal", a->causal, "none | top-left (PyTorch is_causal) | bottom-right (KV cache)")
      ->capture_default_str();
  c->add_option("--window", a->window, "Sliding window L,R around the diagonal; -1 = unbounded");
  c->add_option("--softcap", a->softcap, "Soft-cap c: scores become c·tanh(s/c)");
  c->add_option("--mask", a->mask,
                "Mask .npy broadcastable to [B,Hq,Nq,Nk]: float = additive, bool = keep; with --cu-seqlens-q/k a "
                "rank-3 [Hq|1,Tq|1,Tk|1] mask of the packed batch, each sequence reading its own rows and columns");
  c->add_option("--sinks", a->sinks,
                "Attention sinks: a 1-D .npy of Hq logits, one per query head, each a key with no value in its "
                "rows' softmax (gpt-oss); -inf for none on a head");
  c->add_option("--dsinks", a->dsinks, "Backward with --sinks: write the gradient w.r.t. the sinks [Hq] here");
  c->add_option("--threads", a->threads, "Threads (0 = all)")->capture_default_str();
  c->add_option("--kernel", a->kernel, "fast | reference")->capture_default_str();
  c->add_option("--isa", a->isa, std::string(kIsaHelp) + " (fast kernel)")->capture_default_str();
  c->add_option("--dropout", a->dropout,
                "Attention dropout p in [0, 1): each probability dropped with probability p, the kept scaled by "
                "1/(1-p); the mask is a function of --seed, --offset and the position, so the backward regenerates it")
      ->capture_default_str();
  c->add_option("--seed", a->seed, "Dropout: the generator's seed (Philox key)")->capture_default_str();
  c->add_option("--offset", a->offset, "Dropout: the generator's offset (a fresh mask per value)")->capture_default_str();
  c->add_option("--grad-out", a->grad_out, "Backward: gradient of the loss w.r.t. out");
  c->add_option("--dq", a->dq, "Backward: write dq here");
  c->add_option("--dk", a->dk, "Backward: write dk here");
  c->add_option("--dv", a->dv, "Backward: write dv here");
  c->add_flag("--ring", a->ring,
              "Under mpirun: ring attention, each rank holding a shard of the sequence; rank 0 writes the outputs");
  c->add_option("--layout", a->layout, "With --ring: contiguous | zigzag (causal balance)")->capture_default_str();
  c->add_option("--cu-seqlens-q", a->cu_seqlens_q,
                "Packed sequences: int32/int64 .npy of batch+1 query offsets; q, k, v are then [T,H,D]");
  c->add_option("--cu-seqlens-k", a->cu_seqlens_k, "Packed sequences: int32/int64 .npy of batch+1 key offsets");
  return {c, [a] { return run(*a); }};
}

}  // namespace sdpa::cli
