// varlen.cpp — packed variable-length batches: each sequence is a strided (1, H, L, D) view
// of the packed tensors, run through sdpa::forward / sdpa::backward. Nothing is padded, so
// the cost follows Σ Lq_s·Lk_s.
//
// Threads: a sequence whose own call has enough work items for every thread (wide) runs
// alone with all of them; the others (narrow: short sequences, decoding rows) run side by
// side, one thread each, longest first. Either way each output element is written by one
// call, and forward/backward give the same bits for any thread count, so varlen does too.
#include <algorithm>
#include <exception>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "attention/fast.hpp"
#include "attention/plan.hpp"
#include "attention/problem.hpp"
#include "attention/sequences.hpp"

namespace sdpa {
namespace {

using detail::i64;

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

// One sequence: its query rows [q0, q0 + Lq) and key rows [k0, k0 + Lk).
struct Seq {
  i64 q0, Lq, k0, Lk;
};

// Checks the offsets (length batch + 1, both the same length, from 0, non-decreasing, ending
// at Tq and Tk) and returns the sequences.
std::vector<Seq> sequences(const SeqOffsets& cq, const SeqOffsets& ck, i64 Tq, i64 Tk) {
  const auto check = [](const SeqOffsets& c, const char* name, const char* tensor, i64 total) {
    if (c.i32.data == nullptr && c.i64.data == nullptr)
      fail(std::string(name) + ": data pointer is null (shape [" + std::to_string(c.size()) + "])");
    if (c.size() < 2)
      fail(std::string(name) + ": length " + std::to_string(c.size()) +
           " is too short; it holds batch + 1 offsets, batch >= 1");
    if (c[0] != 0) fail(std::string(name) + ": must start at 0, got " + std::to_string(c[0]));
    for (i64 s = 1; s < c.size(); ++s)
      if (c[s] < c[s - 1])
        fail(std::string(name) + ": offsets must not decrease, but [" + std::to_string(s - 1) + "] = " +
             std::to_string(c[s - 1]) + " > [" + std::to_string(s) + "] = " + std::to_string(c[s]));
    if (c[c.size() - 1] != total)
      fail(std::string(name) + ": must end at " + tensor + "'s " + std::to_string(total) + " rows, got " +
           std::to_string(c[c.size() - 1]));
  };
  check(cq, "cu_seqlens_q", "q", Tq);
  check(ck, "cu_seqlens_k", "k", Tk);
  if (ck.size() != cq.size())
    fail("cu_seqlens_k: length " + std::to_string(ck.size()) + " differs from cu_seqlens_q's " +
         std::to_string(cq.size()) + "; both hold batch + 1 offsets");
  std::vector<Seq> seqs;
  for (i64 s = 0; s + 1 < cq.size(); ++s) seqs.push_back({cq[s], cq[s + 1] - cq[s], ck[s], ck[s + 1] - ck[s]});
  return seqs;
}

// The packed (T, H, D) tensor as one (1, H, T, D) view: what validate_forward/backward check,
// and what each sequence's rows are cut from.
template <class T>
View4<T> as_bhnd(const View3<T>& x) {
  return {x.data, {1, x.shape[1], x.shape[0], x.shape[2]}, {0, x.stride[1], x.stride[0], x.stride[2]}};
}
template <class T>
View4<T> rows(const View3<T>& x, i64 r0, i64 n) {
  View4<T> v = as_bhnd(x);
  v.data += r0 * x.stride[0];
  v.shape[2] = n;
  return v;
}
// lse (Hq, Tq) as (1, Hq, Tq), and the columns of one sequence.
template <class T>
View3<T> lse_rows(const View<T, 2>& x, i64 r0, i64 n) {
  return {x.data + r0 * x.stride[1], {1, x.shape[0], n}, {0, x.stride[0], x.stride[1]}};
}

// A packed call's explicit mask: (1, Hq|1, Tq|1, Tk|1), each sequence reading its own rows and
// columns of it (cut_mask). Said here in the packed call's own terms; validate_forward then
// checks the rest (null data, aliasing) on the packed call seen as one sequence.
template <class M>
void check_packed_mask(const char* name, const View4<M>& m, i64 Hq, i64 Tq, i64 Tk) {
  if (m.empty()) return;
  const std::array<i64, 4> full{1, Hq, Tq, Tk};
  for (int d = 0; d < 4; ++d)
    if (m.shape[d] != 1 && m.shape[d] != full[d])
      fail(std::string(name) + ": shape " + shape_str(m.shape) +
           " does not broadcast to the packed batch's [1, Hq, Tq, Tk] = " + shape_str(full) + " (dimension " +
           std::to_string(d) + " must be 1 or " + std::to_string(full[d]) +
           "); sequence s reads rows cu_seqlens_q[s].. and columns cu_seqlens_k[s].. of it");
}

// Sequence s's options: the call's, with its share of the threads, its dropout batch (it draws
// batch s's mask, as when padded) and its own rows and columns of the packed masks.
// Sequence s's call: its threads, dropout batch, mask blocks, and plan slot (plans[s] where the
// batch's call records one, else none).
Options sequence_options(const Options& opt, const Seq& sq, std::size_t s, int threads, i64 Tq, i64 Tk,
                         std::vector<Plan>& plans) {
  Options o = opt;
  o.threads = threads;
  o.plan = plans.empty() ? nullptr : &plans[s];
  o.dropout.batch0 += static_cast<i64>(s);
  o.mask = detail::cut_mask(opt.mask, Tq, Tk, sq.q0, sq.Lq, sq.k0, sq.Lk, "mask");
  o.keep = detail::cut_mask(opt.keep, Tq, Tk, sq.q0, sq.Lq, sq.k0, sq.Lk, "keep");
  return o;
}

i64 tiles(i64 n, i64 tile) { return (n + tile - 1) / tile; }

// Both passes are written once for the element type T of q, k, v, out and the gradients
// (float, bf16, fp16: each sequence is one sdpa::forward / backward call in T, which
// converts on load); lse stays fp32. The public overloads below only pick T.
template <class T>
void forward_varlen_as(View3<const T> q, View3<const T> k, View3<const T> v, SeqOffsets cu_seqlens_q,
                       SeqOffsets cu_seqlens_k, View3<T> out, View<float, 2> lse, const Options& opt) {
  detail::check_dims("q", q.shape, "THD");
  detail::check_dims("k", k.shape, "THD");
  detail::check_dims("v", v.shape, "THD");
  detail::check_dims("out", out.shape, "THD");
  check_packed_mask("mask", opt.mask, q.shape[1], q.shape[0], k.shape[0]);
  check_packed_mask("keep", opt.keep, q.shape[1], q.shape[0], k.shape[0]);
  const std::vector<Seq> seqs = sequences(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0]);
  // Every shape, option and aliasing check, once, on the packed tensors seen as one sequence.
  const bool want_lse = !lse.empty() || lse.shape != std::array<i64, 2>{0, 0};
  const View3<float> lse_all = want_lse ? lse_rows(lse, 0, lse.shape[1]) : View3<float>{};
  if (want_lse && (lse.shape[0] != q.shape[1] || lse.shape[1] != q.shape[0]))
    fail("lse: shape " + shape_str(lse.shape) + " should be [Hq, Tq] = [" + std::to_string(q.shape[1]) + ", " +
         std::to_string(q.shape[0]) + "]");
  const detail::Problem all = detail::validate_forward<T>(as_bhnd(q), as_bhnd(k), as_bhnd(v), as_bhnd(out), lse_all, opt);

  std::vector<i64> items(seqs.size());
  std::vector<double> cost(seqs.size());
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    items[s] = all.Hkv * tiles(all.group * seqs[s].Lq, detail::kTileRows);
    cost[s] = static_cast<double>(seqs[s].Lq) * static_cast<double>(seqs[s].Lk) * static_cast<double>(all.Hq);
  }
  detail::PlanRecord record(opt, "forward_varlen", dtype_of<T>());
  std::vector<Plan> plans(record.get() != nullptr ? seqs.size() : 0);
  detail::run_sequences(seqs.size(), items, cost, detail::resolve_threads(opt), [&](std::size_t s, int threads) {
    const detail::PlanLogPause one_line_per_batch;
    const Seq& sq = seqs[s];
    if (sq.Lq == 0) return;
    const View4<T> o = rows(out, sq.q0, sq.Lq);
    const View3<float> l = want_lse ? lse_rows(lse, sq.q0, sq.Lq) : View3<float>{};
    if (sq.Lk == 0) {  // no key to see: the contract's empty row
      for (i64 h = 0; h < all.Hq; ++h)
        for (i64 i = 0; i < sq.Lq; ++i) {
          for (i64 e = 0; e < all.Dv; ++e) o(0, h, i, e) = T(0.0f);
          if (want_lse) l(0, h, i) = -std::numeric_limits<float>::infinity();
        }
      return;
    }
    forward(rows(q, sq.q0, sq.Lq), rows(k, sq.k0, sq.Lk), rows(v, sq.k0, sq.Lk), o, l,
            sequence_options(opt, sq, s, threads, all.Nq, all.Nk, plans));
  });
  if (Plan* plan = record.get()) {
    plan->sequences = 0;
    for (const Plan& sequence : plans) detail::merge_plan(*plan, sequence);
  }
  record.finish();
}

template <class T>
void backward_varlen_as(View3<const T> q, View3<const T> k, View3<const T> v, SeqOffsets cu_seqlens_q,
                        SeqOffsets cu_seqlens_k, View3<const T> out, View<const float, 2> lse, View3<const T> dout,
                        View3<T> dq, View3<T> dk, View3<T> dv, const Options& opt) {
  detail::check_dims("q", q.shape, "THD");
  detail::check_dims("k", k.shape, "THD");
  detail::check_dims("v", v.shape, "THD");
  detail::check_dims("out", out.shape, "THD");
  detail::check_dims("dout", dout.shape, "THD");
  detail::check_dims("dq", dq.shape, "THD");
  detail::check_dims("dk", dk.shape, "THD");
  detail::check_dims("dv", dv.shape, "THD");
  check_packed_mask("mask", opt.mask, q.shape[1], q.shape[0], k.shape[0]);
  check_packed_mask("keep", opt.keep, q.shape[1], q.shape[0], k.shape[0]);
  const std::vector<Seq> seqs = sequences(cu_seqlens_q, cu_seqlens_k, q.shape[0], k.shape[0]);
  if (lse.shape[0] != q.shape[1] || lse.shape[1] != q.shape[0])
    fail("lse: shape " + shape_str(lse.shape) + " should be [Hq, Tq] = [" + std::to_string(q.shape[1]) + ", " +
         std::to_string(q.shape[0]) + "]");
  const detail::Problem all = detail::validate_backward<T>(
      as_bhnd(q), as_bhnd(k), as_bhnd(v), as_bhnd(out), lse_rows(lse, 0, lse.shape[1]), as_bhnd(dout), as_bhnd(dq),
      as_bhnd(dk), as_bhnd(dv), opt);

  std::vector<i64> items(seqs.size());
  std::vector<double> cost(seqs.size());
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    // The backward's two passes: key tiles per kv head (dk, dv), query tiles per head (dq).
    items[s] = std::min(all.Hkv * tiles(seqs[s].Lk, detail::kTileCols), all.Hq * tiles(seqs[s].Lq, detail::kTileRows));
    cost[s] = static_cast<double>(seqs[s].Lq) * static_cast<double>(seqs[s].Lk) * static_cast<double>(all.Hq);
  }
  detail::PlanRecord record(opt, "backward_varlen", dtype_of<T>());
  std::vector<Plan> plans(record.get() != nullptr ? seqs.size() : 0);
  // With sinks: each sequence's ∂L/∂sinks in its own row, summed in sequence order after.
  const i64 hq = all.Hq;
  std::vector<float> seq_dsinks(opt.dsinks.empty() ? 0 : seqs.size() * static_cast<std::size_t>(hq), 0.0f);
  detail::run_sequences(seqs.size(), items, cost, detail::resolve_threads(opt), [&](std::size_t s, int threads) {
    const detail::PlanLogPause one_line_per_batch;
    const Seq& sq = seqs[s];
    // A sequence with no keys puts its rows' weight on the sink with out 0: Δ = 0, no gradient.
    if (sq.Lq == 0 || sq.Lk == 0) {  // nothing attended: zero gradients for whichever rows exist
      const auto zero = [](const View4<T>& g) {
        for (i64 h = 0; h < g.shape[1]; ++h)
          for (i64 i = 0; i < g.shape[2]; ++i)
            for (i64 e = 0; e < g.shape[3]; ++e) g(0, h, i, e) = T(0.0f);
      };
      zero(rows(dq, sq.q0, sq.Lq));
      zero(rows(dk, sq.k0, sq.Lk));
      zero(rows(dv, sq.k0, sq.Lk));
      return;
    }
    Options o = sequence_options(opt, sq, s, threads, all.Nq, all.Nk, plans);
    if (!opt.dsinks.empty()) o.dsinks = {seq_dsinks.data() + s * static_cast<std::size_t>(hq), {hq}, {1}};
    backward(rows(q, sq.q0, sq.Lq), rows(k, sq.k0, sq.Lk), rows(v, sq.k0, sq.Lk), rows(out, sq.q0, sq.Lq),
             lse_rows(lse, sq.q0, sq.Lq), rows(dout, sq.q0, sq.Lq), rows(dq, sq.q0, sq.Lq), rows(dk, sq.k0, sq.Lk),
             rows(dv, sq.k0, sq.Lk), o);
  });
  for (i64 h = 0; h < hq && !opt.dsinks.empty(); ++h) {
    double acc = 0.0;
    for (std::size_t s = 0; s < seqs.size(); ++s)
      acc += seq_dsinks[s * static_cast<std::size_t>(hq) + static_cast<std::size_t>(h)];
    opt.dsinks.data[h * opt.dsinks.stride[0]] = static_cast<float>(acc);
  }
  if (Plan* plan = record.get()) {
    plan->sequences = 0;
    for (const Plan& sequence : plans) detail::merge_plan(*plan, sequence);
  }
  record.finish();
}

}  // namespace

void forward_varlen(View3<const float> q, View3<const float> k, View3<const float> v, SeqOffsets cu_seqlens_q,
                    SeqOffsets cu_seqlens_k, View3<float> out, View<float, 2> lse, const Options& opt) {
  forward_varlen_as<float>(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, opt);
}
void forward_varlen(View3<const bf16> q, View3<const bf16> k, View3<const bf16> v, SeqOffsets cu_seqlens_q,
                    SeqOffsets cu_seqlens_k, View3<bf16> out, View<float, 2> lse, const Options& opt) {
  forward_varlen_as<bf16>(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, opt);
}
void forward_varlen(View3<const fp16> q, View3<const fp16> k, View3<const fp16> v, SeqOffsets cu_seqlens_q,
                    SeqOffsets cu_seqlens_k, View3<fp16> out, View<float, 2> lse, const Options& opt) {
  forward_varlen_as<fp16>(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, opt);
}

void backward_varlen(View3<const float> q, View3<const float> k, View3<const float> v, SeqOffsets cu_seqlens_q,
                     SeqOffsets cu_seqlens_k, View3<const float> out, View<const float, 2> lse, View3<const float> dout,
                     View3<float> dq, View3<float> dk, View3<float> dv, const Options& opt) {
  backward_varlen_as<float>(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, dout, dq, dk, dv, opt);
}
void backward_varlen(View3<const bf16> q, View3<const bf16> k, View3<const bf16> v, SeqOffsets cu_seqlens_q,
                     SeqOffsets cu_seqlens_k, View3<const bf16> out, View<const float, 2> lse, View3<const bf16> dout,
                     View3<bf16> dq, View3<bf16> dk, View3<bf16> dv, const Options& opt) {
  backward_varlen_as<bf16>(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, dout, dq, dk, dv, opt);
}
void backward_varlen(View3<const fp16> q, View3<const fp16> k, View3<const fp16> v, SeqOffsets cu_seqlens_q,
                     SeqOffsets cu_seqlens_k, View3<const fp16> out, View<const float, 2> lse, View3<const fp16> dout,
                     View3<fp16> dq, View3<fp16> dk, View3<fp16> dv, const Options& opt) {
  backward_varlen_as<fp16>(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, dout, dq, dk, dv, opt);
}

}  // namespace sdpa
