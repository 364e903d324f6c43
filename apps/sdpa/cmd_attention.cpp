// cmd_attention.cpp — `sdpa attention`: attention (and its backward) on .npy files.
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "common.hpp"
#include "io/atomic_file.hpp"
#include "ring.hpp"

namespace sdpa::cli {
namespace {

struct Args {
  std::string q, k, v, out, lse, mask;
  std::optional<double> scale, softcap;
  std::string causal = "none", window, kernel = "fast", isa = "auto";
  int threads = 0;
  std::string grad_out, dq, dk, dv;
  bool ring = false;  // under mpirun: ring attention over the ranks (cmd_ring.cpp)
  std::string layout = "zigzag";
};

// out/grad shapes keep the file's rank: the leading dims of `like`, last two given.
std::vector<i64> file_shape(const Tensor& like, i64 n, i64 d) {
  std::vector<i64> s(like.file_shape.begin(), like.file_shape.end() - 2);
  s.push_back(n);
  s.push_back(d);
  return s;
}

Options options_of(const Args& a) {
  Options opt;
  opt.scale = a.scale;
  opt.softcap = a.softcap;
  opt.causal = parse_causal(a.causal);
  if (!a.window.empty()) opt.window = parse_window(a.window);
  opt.threads = a.threads;
  opt.isa = parse_isa(a.isa.c_str(), "--isa");
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
  if (a.ring) {
    if (!a.mask.empty()) throw Error("--mask: not supported with --ring (use --causal and --window)");
    return run_ring_attention({a.q, a.k, a.v, a.out, a.lse, a.grad_out, a.dq, a.dk, a.dv, a.layout}, options_of(a));
  }
  const Tensor q = load_tensor(a.q, "--q"), k = load_tensor(a.k, "--k"), v = load_tensor(a.v, "--v");
  for (const Tensor* t : {&k, &v}) {
    if (t->dtype != q.dtype)
      throw Error(t->name + ": dtype " + io::dtype_name(t->dtype) + " differs from --q's " + io::dtype_name(q.dtype));
    if (t->file_shape.size() != q.file_shape.size())
      throw Error(t->name + ": rank " + std::to_string(t->file_shape.size()) + " differs from --q's " +
                  std::to_string(q.file_shape.size()));
  }
  Options opt = options_of(a);
  Mask mask;
  if (!a.mask.empty()) {
    mask = load_mask(a.mask);  // rank promoted to 4; the library broadcasts size-1 dimensions
    if (mask.keep)
      opt.keep = contiguous<const std::uint8_t>(mask.keep_bits.data(), mask.shape);
    else
      opt.mask = contiguous<const float>(mask.additive.data(), mask.shape);
  }

  const i64 B = q.shape[0], Hq = q.shape[1], Nq = q.shape[2], Dv = v.shape[3];
  std::vector<float> out(static_cast<std::size_t>(B * Hq * Nq * Dv)), lse(static_cast<std::size_t>(B * Hq * Nq));
  const auto out_view = contiguous(out.data(), {B, Hq, Nq, Dv});
  const auto lse_view = contiguous(lse.data(), {B, Hq, Nq});
  forward(q.view(), k.view(), v.view(), out_view, lse_view, opt);

  io::OutputSet files;  // nothing lands unless everything succeeds
  files.add(a.out, npy_bytes(out, file_shape(q, Nq, Dv), q.dtype));
  if (!a.lse.empty()) {
    std::vector<i64> s(q.file_shape.begin(), q.file_shape.end() - 1);
    files.add(a.lse, npy_bytes(lse, s, q.dtype));
  }
  if (want_backward) {
    const Tensor dout = load_tensor(a.grad_out, "--grad-out");
    if (dout.dtype != q.dtype) throw Error("--grad-out: dtype differs from --q's");
    if (dout.shape != std::array<i64, 4>{B, Hq, Nq, Dv})
      throw Error("--grad-out: shape must equal the output's, " + shape_str(std::array<i64, 4>{B, Hq, Nq, Dv}) +
                  " (promoted to rank 4), got " + shape_str(dout.shape));
    std::vector<float> dq(q.data.size()), dk(k.data.size()), dv(v.data.size());
    backward(q.view(), k.view(), v.view(), out_view, lse_view, dout.view(), contiguous(dq.data(), q.shape),
             contiguous(dk.data(), k.shape), contiguous(dv.data(), v.shape), opt);
    files.add(a.dq, npy_bytes(dq, q.file_shape, q.dtype));
    files.add(a.dk, npy_bytes(dk, k.file_shape, q.dtype));
    files.add(a.dv, npy_bytes(dv, v.file_shape, q.dtype));
  }
  files.commit();
  return 0;
}

}  // namespace

Command add_attention(CLI::App& parent) {
  auto a = std::make_shared<Args>();
  CLI::App* c = parent.add_subcommand(
      "attention",
      "Attention on .npy files: out = softmax(β·q·kᵀ + mask)·v, optionally with the backward pass.\n"
      "Arrays: float32 or float64, shape [B,H,N,D], [H,N,D] or [N,D]; outputs keep the inputs' dtype and rank.\n"
      "float64 inputs are computed in float32 by the fast kernel (the reference kernel accumulates in fp64).");
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
  c->add_option("--mask", a->mask, "Mask .npy broadcastable to [B,Hq,Nq,Nk]: float = additive, bool = keep");
  c->add_option("--threads", a->threads, "Threads (0 = all)")->capture_default_str();
  c->add_option("--kernel", a->kernel, "fast | reference")->capture_default_str();
  c->add_option("--isa", a->isa, "auto | scalar | avx2 | avx512 (fast kernel)")->capture_default_str();
  c->add_option("--grad-out", a->grad_out, "Backward: gradient of the loss w.r.t. out");
  c->add_option("--dq", a->dq, "Backward: write dq here");
  c->add_option("--dk", a->dk, "Backward: write dk here");
  c->add_option("--dv", a->dv, "Backward: write dv here");
  c->add_flag("--ring", a->ring,
              "Under mpirun: ring attention, each rank holding a shard of the sequence; rank 0 writes the outputs");
  c->add_option("--layout", a->layout, "With --ring: contiguous | zigzag (causal balance)")->capture_default_str();
  return {c, [a] { return run(*a); }};
}

}  // namespace sdpa::cli
