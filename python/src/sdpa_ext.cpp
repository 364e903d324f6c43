// sdpa_ext.cpp — the Python extension module sdpa._ext (nanobind).
//
// Deliberately thin: every array argument is a CPU float32 (or uint8 keep-mask; q, k, v,
// out, dout and the gradients of forward/backward may also be float16 or bfloat16, one
// dtype per call) ndarray of fixed rank, taken with .noconvert(), so nanobind never makes a copy to
// satisfy a constraint — an argument that does not fit is refused, and the friendly,
// argument-naming checks live in python/sdpa/_core.py, which calls this module. The
// arrays' own strides (in elements) become the views' strides: a transposed buffer
// reaches the kernel as the same pointer. The GIL is released while the kernel runs.
// sdpa::Error becomes sdpa.Error, a subclass of ValueError, with the library's message.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bench/check.hpp"
#include "lab/registry.hpp"
#include "nn/sweep.hpp"
#include "nn/train.hpp"
#include "sdpa/sdpa.hpp"

namespace nb = nanobind;

namespace {

using cpu = nb::device::cpu;
using In4 = nb::ndarray<const float, nb::ndim<4>, cpu>;
using In3 = nb::ndarray<const float, nb::ndim<3>, cpu>;
using Out4 = nb::ndarray<float, nb::ndim<4>, cpu>;
using Out3 = nb::ndarray<float, nb::ndim<3>, cpu>;
using Keep4 = nb::ndarray<const std::uint8_t, nb::ndim<4>, cpu>;
using In1 = nb::ndarray<const float, nb::ndim<1>, cpu>;  // sinks (Hq)
using Out1 = nb::ndarray<float, nb::ndim<1>, cpu>;       // dsinks (Hq)
// float32, float16 or bfloat16 (checked by dtype_of): inputs read-only (a broadcast view is), outputs not.
using AnyIn4 = nb::ndarray<nb::ro, nb::ndim<4>, cpu>;
using AnyOut4 = nb::ndarray<nb::ndim<4>, cpu>;
using AnyIn3 = nb::ndarray<nb::ro, nb::ndim<3>, cpu>;
using AnyOut3 = nb::ndarray<nb::ndim<3>, cpu>;

// The ndarray as a view: same pointer, same shape, same element strides.
template <class T, std::size_t R, class A>
sdpa::View<T, R> view_of(const A& a) {
  sdpa::View<T, R> v;
  v.data = static_cast<T*>(a.data());
  for (std::size_t d = 0; d < R; ++d) {
    v.shape[d] = static_cast<std::int64_t>(a.shape(d));
    v.stride[d] = a.stride(d);
  }
  return v;
}

sdpa::Causal parse_causal(const std::string& s) {
  if (s.empty() || s == "none") return sdpa::Causal::none;
  if (s == "top-left") return sdpa::Causal::top_left;
  if (s == "bottom-right") return sdpa::Causal::bottom_right;
  throw sdpa::Error("causal: expected None, 'top-left' or 'bottom-right', got '" + s + "'");
}

sdpa::Kernel parse_kernel(const std::string& s) {
  if (s == "fast") return sdpa::Kernel::fast;
  if (s == "reference") return sdpa::Kernel::reference;
  throw sdpa::Error("kernel: expected 'fast' or 'reference', got '" + s + "'");
}

// Options from the keyword arguments every entry point shares. The mask views point
// into arrays the caller keeps alive for the duration of the call.
sdpa::Options options(std::optional<double> scale, std::optional<double> softcap, const std::string& causal,
                      std::int64_t window_left, std::int64_t window_right, const In4& mask, const Keep4& keep,
                      const In1& sinks, int threads, const std::string& kernel, sdpa::Dropout dropout = {},
                      const Out1& dsinks = {}) {
  sdpa::Options opt;
  opt.scale = scale;
  opt.softcap = softcap;
  opt.causal = parse_causal(causal);
  opt.window = {window_left, window_right};
  if (mask.is_valid()) opt.mask = view_of<const float, 4>(mask);
  if (keep.is_valid()) opt.keep = view_of<const std::uint8_t, 4>(keep);
  if (sinks.is_valid()) opt.sinks = view_of<const float, 1>(sinks);
  if (dsinks.is_valid()) opt.dsinks = view_of<float, 1>(dsinks);
  opt.threads = threads;
  opt.kernel = parse_kernel(kernel);
  opt.dropout = dropout;
  return opt;
}

// The one dtype of a call's tensors (named in order, the first sets it): float32, float16 or
// bfloat16 (DLPack's codes), else sdpa.Error naming the argument.
struct Named {
  const char* name;
  nb::dlpack::dtype dtype;
};
sdpa::Dtype dtype_of(std::initializer_list<Named> named) {
  const auto of = [](const nb::dlpack::dtype d) -> std::optional<sdpa::Dtype> {
    if (d == nb::dtype<float>()) return sdpa::Dtype::f32;
    if (d.lanes == 1 && d.bits == 16 && d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float))
      return sdpa::Dtype::fp16;
    if (d.lanes == 1 && d.bits == 16 && d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bfloat))
      return sdpa::Dtype::bf16;
    return std::nullopt;
  };
  std::optional<sdpa::Dtype> first;
  for (const auto& [name, dtype] : named) {
    const auto t = of(dtype);
    if (!t) throw sdpa::Error(std::string(name) + ": dtype not supported (float32, float16 or bfloat16)");
    if (first && *t != *first)
      throw sdpa::Error(std::string(name) + ": dtype " + sdpa::dtype_name(*t) + " differs from " +
                        named.begin()->name + "'s " + sdpa::dtype_name(*first));
    first = t;
  }
  return *first;
}

// The backward's one dtype: q, k, v, out, dout, dq, dk, dv (dense (B, H, N, D) or packed (T, H, D)).
template <class In, class Out>
sdpa::Dtype backward_dtype_of(const In& q, const In& k, const In& v, const In& out, const In& dout, const Out& dq,
                              const Out& dk, const Out& dv) {
  return dtype_of({{"q", q.dtype()},
                   {"k", k.dtype()},
                   {"v", v.dtype()},
                   {"out", out.dtype()},
                   {"dout", dout.dtype()},
                   {"dq", dq.dtype()},
                   {"dk", dk.dtype()},
                   {"dv", dv.dtype()}});
}

// Calls f with a value of the element type of dtype t: the one dtype dispatch of the bindings.
template <class F>
void with_element_type(sdpa::Dtype t, F f) {
  switch (t) {
    case sdpa::Dtype::bf16: return f(sdpa::bf16{});
    case sdpa::Dtype::fp16: return f(sdpa::fp16{});
    default: return f(float{});
  }
}

// sdpa::Plan as a dict (sdpa.explain): the field names of the C++ struct.
nb::dict plan_dict(const sdpa::Plan& p) {
  nb::dict d;
  d["call"] = p.call;
  d["kernel"] = p.kernel == sdpa::Kernel::reference ? "reference" : "fast";
  d["dtype"] = sdpa::dtype_name(p.dtype);
  d["isa"] = sdpa::isa_name(p.isa);
  d["engine"] = sdpa::engine_name(p.engine);
  d["why"] = p.why;
  d["threads"] = p.threads;
  d["sequences"] = p.sequences;
  d["kv_splits"] = p.kv_splits;
  d["heads_per_item"] = p.heads_per_item;
  d["decoding_items"] = p.decoding_items;
  d["few_lane_items"] = p.few_lane_items;
  d["tiled_items"] = p.tiled_items;
  d["engine_items"] = p.engine_items;
  d["one_pass"] = p.one_pass;
  d["backward_items"] = p.backward_items;
  d["strided_copies"] = p.strided_copies;
  d["packed_operands"] = p.packed_operands;
  d["paged_sequences"] = p.paged_sequences;
  d["quantized_sequences"] = p.quantized_sequences;
  d["summary"] = p.summary();
  return d;
}

// dropout_p, dropout_seed, dropout_offset: sdpa::Dropout (the library checks p). explain: return
// the call's sdpa::Plan as a dict (else None).
nb::object forward(AnyIn4 q, AnyIn4 k, AnyIn4 v, AnyOut4 out, Out3 lse, std::optional<double> scale,
                   std::optional<double> softcap, const std::string& causal, std::int64_t window_left,
                   std::int64_t window_right, In4 mask, Keep4 keep, In1 sinks, int threads, const std::string& kernel,
                   double dropout_p, std::uint64_t dropout_seed, std::uint64_t dropout_offset, bool explain) {
  sdpa::Options opt = options(scale, softcap, causal, window_left, window_right, mask, keep, sinks, threads, kernel,
                              {dropout_p, dropout_seed, dropout_offset});
  sdpa::Plan plan;
  if (explain) opt.plan = &plan;
  const sdpa::Dtype t = dtype_of({{"q", q.dtype()}, {"k", k.dtype()}, {"v", v.dtype()}, {"out", out.dtype()}});
  const auto lse_view = lse.is_valid() ? view_of<float, 3>(lse) : sdpa::View3<float>{};
  {
    nb::gil_scoped_release unlocked;
    with_element_type(t, [&](auto element) {
      using T = decltype(element);
      sdpa::forward(view_of<const T, 4>(q), view_of<const T, 4>(k), view_of<const T, 4>(v), view_of<T, 4>(out),
                    lse_view, opt);
    });
  }
  return explain ? nb::object(plan_dict(plan)) : nb::none();
}

nb::object backward(AnyIn4 q, AnyIn4 k, AnyIn4 v, AnyIn4 out, In3 lse, AnyIn4 dout, AnyOut4 dq, AnyOut4 dk, AnyOut4 dv,
                    std::optional<double> scale, std::optional<double> softcap, const std::string& causal,
                    std::int64_t window_left, std::int64_t window_right, In4 mask, Keep4 keep, In1 sinks, int threads,
                    const std::string& kernel, double dropout_p, std::uint64_t dropout_seed,
                    std::uint64_t dropout_offset, Out1 dsinks, bool explain) {
  sdpa::Options opt = options(scale, softcap, causal, window_left, window_right, mask, keep, sinks, threads, kernel,
                              {dropout_p, dropout_seed, dropout_offset}, dsinks);
  sdpa::Plan plan;
  if (explain) opt.plan = &plan;
  const sdpa::Dtype t = backward_dtype_of(q, k, v, out, dout, dq, dk, dv);
  {
    nb::gil_scoped_release unlocked;
    with_element_type(t, [&](auto element) {
      using T = decltype(element);
      sdpa::backward(view_of<const T, 4>(q), view_of<const T, 4>(k), view_of<const T, 4>(v), view_of<const T, 4>(out),
                     view_of<const float, 3>(lse), view_of<const T, 4>(dout), view_of<T, 4>(dq), view_of<T, 4>(dk),
                     view_of<T, 4>(dv), opt);
    });
  }
  return explain ? nb::object(plan_dict(plan)) : nb::none();
}

// Packed variable-length batches: q (Tq, Hq, Dk), k (Tk, Hkv, Dk), v (Tk, Hkv, Dv), out
// (Tq, Hq, Dv), lse (Hq, Tq); offsets int32 or int64 (one overload each, no conversion).
using Lse2 = nb::ndarray<float, nb::ndim<2>, cpu>;
using LseIn2 = nb::ndarray<const float, nb::ndim<2>, cpu>;
template <class I>
using Offsets = nb::ndarray<const I, nb::ndim<1>, cpu>;

template <class I>
void forward_varlen(AnyIn3 q, AnyIn3 k, AnyIn3 v, Offsets<I> cu_q, Offsets<I> cu_k, AnyOut3 out, Lse2 lse,
                    std::optional<double> scale, std::optional<double> softcap, const std::string& causal,
                    std::int64_t window_left, std::int64_t window_right, In4 mask, Keep4 keep, In1 sinks, int threads,
                    const std::string& kernel, double dropout_p, std::uint64_t dropout_seed,
                    std::uint64_t dropout_offset) {
  const sdpa::Options opt = options(scale, softcap, causal, window_left, window_right, mask, keep, sinks, threads,
                                    kernel, {dropout_p, dropout_seed, dropout_offset});
  const sdpa::Dtype t = dtype_of({{"q", q.dtype()}, {"k", k.dtype()}, {"v", v.dtype()}, {"out", out.dtype()}});
  nb::gil_scoped_release unlocked;
  with_element_type(t, [&](auto element) {
    using T = decltype(element);
    sdpa::forward_varlen(view_of<const T, 3>(q), view_of<const T, 3>(k), view_of<const T, 3>(v),
                         view_of<const I, 1>(cu_q), view_of<const I, 1>(cu_k), view_of<T, 3>(out),
                         view_of<float, 2>(lse), opt);
  });
}

template <class I>
void backward_varlen(AnyIn3 q, AnyIn3 k, AnyIn3 v, Offsets<I> cu_q, Offsets<I> cu_k, AnyIn3 out, LseIn2 lse,
                     AnyIn3 dout, AnyOut3 dq, AnyOut3 dk, AnyOut3 dv, std::optional<double> scale,
                     std::optional<double> softcap, const std::string& causal, std::int64_t window_left,
                     std::int64_t window_right, In4 mask, Keep4 keep, In1 sinks, int threads, const std::string& kernel,
                     double dropout_p, std::uint64_t dropout_seed, std::uint64_t dropout_offset, Out1 dsinks) {
  const sdpa::Options opt = options(scale, softcap, causal, window_left, window_right, mask, keep, sinks, threads,
                                    kernel, {dropout_p, dropout_seed, dropout_offset}, dsinks);
  const sdpa::Dtype t = backward_dtype_of(q, k, v, out, dout, dq, dk, dv);
  nb::gil_scoped_release unlocked;
  with_element_type(t, [&](auto element) {
    using T = decltype(element);
    sdpa::backward_varlen(view_of<const T, 3>(q), view_of<const T, 3>(k), view_of<const T, 3>(v),
                          view_of<const I, 1>(cu_q), view_of<const I, 1>(cu_k), view_of<const T, 3>(out),
                          view_of<const float, 2>(lse), view_of<const T, 3>(dout), view_of<T, 3>(dq),
                          view_of<T, 3>(dk), view_of<T, 3>(dv), opt);
  });
}

template <class I>
void def_varlen(nb::module_& m) {
  m.def("forward_varlen", &forward_varlen<I>, nb::arg("q").noconvert(), nb::arg("k").noconvert(),
        nb::arg("v").noconvert(), nb::arg("cu_seqlens_q").noconvert(), nb::arg("cu_seqlens_k").noconvert(),
        nb::arg("out").noconvert(), nb::arg("lse").noconvert(), nb::arg("scale").none(), nb::arg("softcap").none(),
        nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("mask").noconvert().none(),
        nb::arg("keep").noconvert().none(), nb::arg("sinks").noconvert().none(), nb::arg("threads"), nb::arg("kernel"),
        nb::arg("dropout_p") = 0.0, nb::arg("dropout_seed") = 0, nb::arg("dropout_offset") = 0,
        "sdpa::forward_varlen into preallocated out (Tq, Hq, Dv) and lse (Hq, Tq).");
  m.def("backward_varlen", &backward_varlen<I>, nb::arg("q").noconvert(), nb::arg("k").noconvert(),
        nb::arg("v").noconvert(), nb::arg("cu_seqlens_q").noconvert(), nb::arg("cu_seqlens_k").noconvert(),
        nb::arg("out").noconvert(), nb::arg("lse").noconvert(), nb::arg("dout").noconvert(), nb::arg("dq").noconvert(),
        nb::arg("dk").noconvert(), nb::arg("dv").noconvert(), nb::arg("scale").none(), nb::arg("softcap").none(),
        nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("mask").noconvert().none(),
        nb::arg("keep").noconvert().none(), nb::arg("sinks").noconvert().none(), nb::arg("threads"), nb::arg("kernel"),
        nb::arg("dropout_p") = 0.0, nb::arg("dropout_seed") = 0, nb::arg("dropout_offset") = 0,
        nb::arg("dsinks").noconvert().none() = nb::none(),
        "sdpa::backward_varlen into preallocated dq, dk, dv (and dsinks, with sinks).");
}

// What the module sees of an array: (address, shape, element strides). The tests use
// it to show that a strided view arrives as the caller's own memory.
using Int1 = nb::ndarray<const std::int32_t, nb::ndim<1>, cpu>;  // cache_seqlens (B)
using Int2 = nb::ndarray<const std::int32_t, nb::ndim<2>, cpu>;  // block_table (B, max_blocks)

// Whether a cache call brings new tokens: k and v both, or neither (else an error naming the missing one).
bool new_tokens(const AnyIn4& k_new, const AnyIn4& v_new) {
  if (k_new.is_valid() != v_new.is_valid())
    throw sdpa::Error(std::string(k_new.is_valid() ? "v" : "k") + ": missing; new keys and values come together");
  return k_new.is_valid();
}

// sdpa::forward_kvcache: the new tokens (k_new, v_new; None: none) appended into k_cache, v_cache
// in place, out (B, Nq, Hq, Dv) and lse (B, Hq, Nq) written; block_table None: a contiguous cache.
nb::object forward_kvcache(AnyIn4 q, AnyOut4 k_cache, AnyOut4 v_cache, Int1 cache_seqlens, Int2 block_table,
                           AnyIn4 k_new, AnyIn4 v_new, AnyOut4 out, Out3 lse, std::optional<double> scale,
                           std::optional<double> softcap, const std::string& causal, std::int64_t window_left,
                           std::int64_t window_right, In1 sinks, int threads, const std::string& kernel, bool explain) {
  sdpa::Options opt = options(scale, softcap, causal, window_left, window_right, {}, {}, sinks, threads, kernel);
  sdpa::Plan plan;
  if (explain) opt.plan = &plan;
  const bool with_new = new_tokens(k_new, v_new);
  const sdpa::Dtype t =
      with_new
          ? dtype_of({{"q", q.dtype()},
                      {"k_cache", k_cache.dtype()},
                      {"v_cache", v_cache.dtype()},
                      {"out", out.dtype()},
                      {"k", k_new.dtype()},
                      {"v", v_new.dtype()}})
          : dtype_of(
                {{"q", q.dtype()}, {"k_cache", k_cache.dtype()}, {"v_cache", v_cache.dtype()}, {"out", out.dtype()}});
  const auto lse_view = lse.is_valid() ? view_of<float, 3>(lse) : sdpa::View3<float>{};
  {
    nb::gil_scoped_release unlocked;
    with_element_type(t, [&](auto element) {
      using T = decltype(element);
      sdpa::KvCache<T> cache;
      cache.k = view_of<T, 4>(k_cache);
      cache.v = view_of<T, 4>(v_cache);
      cache.seqlens = view_of<const std::int32_t, 1>(cache_seqlens);
      if (block_table.is_valid()) cache.block_table = view_of<const std::int32_t, 2>(block_table);
      sdpa::forward_kvcache(
          view_of<const T, 4>(q), cache, with_new ? view_of<const T, 4>(k_new) : sdpa::View4<const T>{},
          with_new ? view_of<const T, 4>(v_new) : sdpa::View4<const T>{}, view_of<T, 4>(out), lse_view, opt);
    });
  }
  return explain ? nb::object(plan_dict(plan)) : nb::none();
}

// ---- quantized KV caches ----------------------------------------------------------

using Codes4 = nb::ndarray<std::uint8_t, nb::ndim<4>, cpu>;  // int8 or e4m3 bytes
using CodesIn4 = nb::ndarray<const std::uint8_t, nb::ndim<4>, cpu>;

sdpa::KvQuant kv_quant_of(const std::string& format) { return sdpa::parse_kv_quant(format, "format"); }

// x float32, bfloat16 or float16: a 16-bit x is read as it is (no float32 copy).
void quantize_kv(AnyIn4 x, Codes4 codes, Out3 scales, const std::string& format) {
  const sdpa::KvQuant q = kv_quant_of(format);
  const sdpa::Dtype t = dtype_of({{"x", x.dtype()}});
  nb::gil_scoped_release unlocked;
  with_element_type(t, [&](auto element) {
    using T = decltype(element);
    sdpa::quantize_kv(view_of<const T, 4>(x), q, view_of<std::uint8_t, 4>(codes), view_of<float, 3>(scales));
  });
}

void dequantize_kv(CodesIn4 codes, In3 scales, const std::string& format, Out4 x) {
  const sdpa::KvQuant q = kv_quant_of(format);
  nb::gil_scoped_release unlocked;
  sdpa::dequantize_kv(view_of<const std::uint8_t, 4>(codes), view_of<const float, 3>(scales), q, view_of<float, 4>(x));
}

// sdpa::forward_kvcache over a quantized cache: k_codes, v_codes and their scales written in place
// (the new tokens quantized into them), out (and lse) written.
nb::object forward_kvcache_quantized(AnyIn4 q, Codes4 k_codes, Codes4 v_codes, Out3 k_scale, Out3 v_scale,
                                     const std::string& format, Int1 cache_seqlens, Int2 block_table, AnyIn4 k_new,
                                     AnyIn4 v_new, AnyOut4 out, Out3 lse, std::optional<double> scale,
                                     std::optional<double> softcap, const std::string& causal, std::int64_t window_left,
                                     std::int64_t window_right, In1 sinks, int threads, const std::string& kernel,
                                     bool explain) {
  sdpa::Options opt = options(scale, softcap, causal, window_left, window_right, {}, {}, sinks, threads, kernel);
  sdpa::Plan plan;
  if (explain) opt.plan = &plan;
  const bool with_new = new_tokens(k_new, v_new);
  const sdpa::Dtype t =
      with_new ? dtype_of({{"q", q.dtype()}, {"out", out.dtype()}, {"k", k_new.dtype()}, {"v", v_new.dtype()}})
               : dtype_of({{"q", q.dtype()}, {"out", out.dtype()}});
  sdpa::QuantizedKvCache cache;
  cache.quant = kv_quant_of(format);
  cache.k = view_of<std::uint8_t, 4>(k_codes);
  cache.v = view_of<std::uint8_t, 4>(v_codes);
  cache.k_scale = view_of<float, 3>(k_scale);
  cache.v_scale = view_of<float, 3>(v_scale);
  cache.seqlens = view_of<const std::int32_t, 1>(cache_seqlens);
  if (block_table.is_valid()) cache.block_table = view_of<const std::int32_t, 2>(block_table);
  const auto lse_view = lse.is_valid() ? view_of<float, 3>(lse) : sdpa::View3<float>{};
  {
    nb::gil_scoped_release unlocked;
    with_element_type(t, [&](auto element) {
      using T = decltype(element);
      sdpa::forward_kvcache(
          view_of<const T, 4>(q), cache, with_new ? view_of<const T, 4>(k_new) : sdpa::View4<const T>{},
          with_new ? view_of<const T, 4>(v_new) : sdpa::View4<const T>{}, view_of<T, 4>(out), lse_view, opt);
    });
  }
  return explain ? nb::object(plan_dict(plan)) : nb::none();
}

nb::tuple inspect(nb::ndarray<const float, cpu> a) {
  nb::list shape, strides;
  for (std::size_t d = 0; d < a.ndim(); ++d) {
    shape.append(a.shape(d));
    strides.append(a.stride(d));
  }
  return nb::make_tuple(reinterpret_cast<std::uintptr_t>(a.data()), nb::tuple(shape), nb::tuple(strides));
}

// ---- the lab ----------------------------------------------------------------------

// Each experiment of the registry as a dict: name, heading, seeds, help, claim, takes_dists.
nb::list lab_experiments() {
  nb::list out;
  for (const auto& e : sdpa::lab::experiments()) {
    nb::dict d;
    d["name"] = std::string(e.name);
    d["heading"] = std::string(e.heading);
    d["seeds"] = std::string(e.seeds);
    d["help"] = std::string(e.help);
    d["claim"] = std::string(e.claim);
    d["takes_dists"] = e.takes_dists;
    out.append(d);
  }
  return out;
}

// (name, title, columns, rows, verdict); each row a list of float, int or str; verdict a
// dict with the keys of the table's JSON: verdict, outcome, expected, measured, tolerance.
sdpa::lab::Settings lab_settings(std::uint64_t seed, std::int64_t samples, int threads,
                                 const std::vector<std::string>& dists, std::int64_t max_dk) {
  sdpa::lab::Settings s;  // checked by the lab library (lab::check) before it runs
  s.seed = seed;
  s.samples = samples;
  s.threads = threads;
  s.dists.clear();
  for (const auto& d : dists) s.dists.push_back(sdpa::lab::parse_dist(d));
  s.max_dk = max_dk;
  return s;
}

nb::tuple lab_run(const std::string& name, std::uint64_t seed, std::int64_t samples, int threads,
                  const std::vector<std::string>& dists, std::int64_t max_dk) {
  const sdpa::lab::Settings s = lab_settings(seed, samples, threads, dists, max_dk);
  const auto& experiment = sdpa::lab::find_experiment(name);
  sdpa::lab::Table t;
  {
    nb::gil_scoped_release unlocked;
    t = sdpa::lab::run(experiment, s);
  }
  nb::list rows;
  for (const auto& r : t.rows) {
    nb::list row;
    for (const auto& cell : r) {
      if (const auto* d = std::get_if<double>(&cell))
        row.append(nb::float_(*d));
      else if (const auto* i = std::get_if<std::int64_t>(&cell))
        row.append(nb::int_(*i));
      else
        row.append(nb::str(std::get<std::string>(cell).c_str()));
    }
    rows.append(row);
  }
  nb::list columns;
  for (const auto& col : t.columns) columns.append(nb::str(col.c_str()));
  nb::dict verdict;
  verdict["verdict"] = t.verdict.text();
  verdict["outcome"] = std::string(sdpa::lab::outcome_name(t.verdict.outcome));
  verdict["expected"] = t.verdict.expected;
  verdict["measured"] = t.verdict.measured;
  verdict["tolerance"] = t.verdict.tolerance;
  return nb::make_tuple(nb::str(t.name.c_str()), nb::str(t.title.c_str()), columns, rows, verdict);
}

// Trains one model (docs/training.md): each logged step and the summary as the JSON
// objects `sdpa train` prints (one serialiser, nn::to_json; python/sdpa/train.py parses).
std::pair<std::vector<std::string>, std::string> train_run(const sdpa::nn::TrainConfig& cfg) {
  nb::gil_scoped_release unlocked;
  std::vector<std::string> log;
  sdpa::nn::TrainHooks hooks;
  hooks.on_log = [&](const sdpa::nn::StepRecord& r) { log.push_back(sdpa::nn::to_json(r, cfg.heads).dump()); };
  const auto summary = sdpa::nn::train(cfg, hooks);
  return {log, sdpa::nn::to_json(summary).dump()};
}

// Runs a sweep (nn::sweep); returns sweep.json's text, which `sdpa sweep` writes.
std::string train_sweep(const sdpa::nn::SweepSpec& spec) {
  nb::gil_scoped_release unlocked;
  return sdpa::nn::to_json(sdpa::nn::sweep(spec)).dump();
}

// ---- blockwise attention: the building blocks of sdpa.distributed's ring ---------------

// The block's options: `causal` etc. describe the whole sequence (nq queries, nk keys),
// the block holds queries [q0, q0 + q.shape[2]) and keys [k0, k0 + k.shape[2]); dropout is
// the whole sequence's, drawn at the block's positions (block_options).
sdpa::Options block_opts(const In4& q, const In4& k, std::int64_t q0, std::int64_t k0, std::int64_t nq, std::int64_t nk,
                         std::optional<double> scale, std::optional<double> softcap, const std::string& causal,
                         std::int64_t window_left, std::int64_t window_right, int threads, double dropout_p,
                         std::uint64_t dropout_seed, std::uint64_t dropout_offset) {
  const sdpa::Options whole = options(scale, softcap, causal, window_left, window_right, In4(), Keep4(), In1(), threads,
                                      "fast", {dropout_p, dropout_seed, dropout_offset});
  const sdpa::BlockPos pos{q0, k0, static_cast<std::int64_t>(q.shape(2)), static_cast<std::int64_t>(k.shape(2)),
                           nq, nk};
  if (!sdpa::block_visible(whole, pos)) return {};
  sdpa::Options o = sdpa::block_options(whole, pos);
  o.threads = threads;
  return o;
}

// Returns whether the block has a visible pair; only then are out and lse written.
bool forward_block(In4 q, In4 k, In4 v, Out4 out, Out3 lse, std::int64_t q0, std::int64_t k0, std::int64_t nq,
                   std::int64_t nk, std::optional<double> scale, std::optional<double> softcap,
                   const std::string& causal, std::int64_t window_left, std::int64_t window_right, int threads,
                   double dropout_p, std::uint64_t dropout_seed, std::uint64_t dropout_offset) {
  const sdpa::Options o = block_opts(q, k, q0, k0, nq, nk, scale, softcap, causal, window_left, window_right, threads,
                                     dropout_p, dropout_seed, dropout_offset);
  if (!o.diagonal) return false;  // block_options always sets it; an invisible block does not
  nb::gil_scoped_release unlocked;
  sdpa::forward(view_of<const float, 4>(q), view_of<const float, 4>(k), view_of<const float, 4>(v),
                view_of<float, 4>(out), view_of<float, 3>(lse), o);
  return true;
}

// Adds the block's gradients to dq, dk, dv; out and lse are the merged (whole-row) ones.
void backward_block(In4 q, In4 k, In4 v, In4 out, In3 lse, In4 dout, Out4 dq, Out4 dk, Out4 dv, std::int64_t q0,
                    std::int64_t k0, std::int64_t nq, std::int64_t nk, std::optional<double> scale,
                    std::optional<double> softcap, const std::string& causal, std::int64_t window_left,
                    std::int64_t window_right, int threads, double dropout_p, std::uint64_t dropout_seed,
                    std::uint64_t dropout_offset) {
  const sdpa::Options o = block_opts(q, k, q0, k0, nq, nk, scale, softcap, causal, window_left, window_right, threads,
                                     dropout_p, dropout_seed, dropout_offset);
  if (!o.diagonal) return;
  nb::gil_scoped_release unlocked;
  sdpa::backward_accumulate(view_of<const float, 4>(q), view_of<const float, 4>(k), view_of<const float, 4>(v),
                            view_of<const float, 4>(out), view_of<const float, 3>(lse), view_of<const float, 4>(dout),
                            view_of<float, 4>(dq), view_of<float, 4>(dk), view_of<float, 4>(dv), o);
}

void merge_partial(Out4 out, Out3 lse, In4 part_out, In3 part_lse, int threads) {
  nb::gil_scoped_release unlocked;
  sdpa::merge_partial(view_of<float, 4>(out), view_of<float, 3>(lse), view_of<const float, 4>(part_out),
                      view_of<const float, 3>(part_lse), threads);
}

// Each row's sink merged once into (out, lse) merged over every block (sdpa::merge_sinks).
void merge_sinks(Out4 out, Out3 lse, In1 sinks, int threads) {
  nb::gil_scoped_release unlocked;
  sdpa::merge_sinks(view_of<float, 4>(out), view_of<float, 3>(lse), view_of<const float, 1>(sinks), threads);
}

// This shard's share of ∂L/∂sinks, added to dsinks (sdpa::add_sink_grads).
void add_sink_grads(In4 out, In3 lse, In4 dout, In1 sinks, Out1 dsinks) {
  nb::gil_scoped_release unlocked;
  sdpa::add_sink_grads(view_of<const float, 4>(out), view_of<const float, 3>(lse), view_of<const float, 4>(dout),
                       view_of<const float, 1>(sinks), view_of<float, 1>(dsinks));
}

std::vector<std::pair<std::int64_t, std::int64_t>> shard_segments(std::int64_t n, int ranks, int rank,
                                                                  const std::string& layout) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const auto& s : sdpa::shard_segments(n, ranks, rank, sdpa::parse_shard_layout(layout)))
    out.emplace_back(s.start, s.len);
  return out;
}

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "sdpa's C++ core (internal: use the sdpa package, which checks arguments and allocates results)";
  m.attr("__version__") = SDPA_VERSION_STRING;
  nb::exception<sdpa::Error>(m, "Error", PyExc_ValueError);

  // Every array: noconvert (no silent copies). Optional ones accept None.
  m.def("forward", &forward, nb::arg("q").noconvert(), nb::arg("k").noconvert(), nb::arg("v").noconvert(),
        nb::arg("out").noconvert(), nb::arg("lse").noconvert().none(), nb::arg("scale").none(),
        nb::arg("softcap").none(), nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"),
        nb::arg("mask").noconvert().none(), nb::arg("keep").noconvert().none(), nb::arg("sinks").noconvert().none(),
        nb::arg("threads"), nb::arg("kernel"), nb::arg("dropout_p") = 0.0, nb::arg("dropout_seed") = 0,
        nb::arg("dropout_offset") = 0, nb::arg("explain") = false,
        "sdpa::forward into preallocated out (and lse, unless None); with explain, its sdpa::Plan as a dict.");
  m.def(
      "backward", &backward, nb::arg("q").noconvert(), nb::arg("k").noconvert(), nb::arg("v").noconvert(),
      nb::arg("out").noconvert(), nb::arg("lse").noconvert(), nb::arg("dout").noconvert(), nb::arg("dq").noconvert(),
      nb::arg("dk").noconvert(), nb::arg("dv").noconvert(), nb::arg("scale").none(), nb::arg("softcap").none(),
      nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"), nb::arg("mask").noconvert().none(),
      nb::arg("keep").noconvert().none(), nb::arg("sinks").noconvert().none(), nb::arg("threads"), nb::arg("kernel"),
      nb::arg("dropout_p") = 0.0, nb::arg("dropout_seed") = 0, nb::arg("dropout_offset") = 0,
      nb::arg("dsinks").noconvert().none() = nb::none(), nb::arg("explain") = false,
      "sdpa::backward into preallocated dq, dk, dv (and dsinks, with sinks); with explain, its sdpa::Plan as a dict.");
  def_varlen<std::int32_t>(m);  // the offsets' two dtypes: one overload each, tried in turn
  def_varlen<std::int64_t>(m);
  m.def("forward_kvcache", &forward_kvcache, nb::arg("q").noconvert(), nb::arg("k_cache").noconvert(),
        nb::arg("v_cache").noconvert(), nb::arg("cache_seqlens").noconvert(), nb::arg("block_table").noconvert().none(),
        nb::arg("k").noconvert().none(), nb::arg("v").noconvert().none(), nb::arg("out").noconvert(),
        nb::arg("lse").noconvert().none(), nb::arg("scale").none(), nb::arg("softcap").none(), nb::arg("causal"),
        nb::arg("window_left"), nb::arg("window_right"), nb::arg("sinks").noconvert().none(), nb::arg("threads"),
        nb::arg("kernel"), nb::arg("explain") = false,
        "sdpa::forward_kvcache: k, v (unless None) appended into the caches in place, then out (and lse) written.");
  m.def("quantize_kv", &quantize_kv, nb::arg("x").noconvert(), nb::arg("codes").noconvert(),
        nb::arg("scales").noconvert(), nb::arg("format"),
        "sdpa::quantize_kv: x (A, R, H, D) float32, bfloat16 or float16 into codes (A, R, H, D) uint8 and scales "
        "(A, H, R) float32.");
  m.def("dequantize_kv", &dequantize_kv, nb::arg("codes").noconvert(), nb::arg("scales").noconvert(), nb::arg("format"),
        nb::arg("x").noconvert(), "sdpa::dequantize_kv: code × scale into x (A, R, H, D) float32.");
  m.def("forward_kvcache_quantized", &forward_kvcache_quantized, nb::arg("q").noconvert(),
        nb::arg("k_codes").noconvert(), nb::arg("v_codes").noconvert(), nb::arg("k_scale").noconvert(),
        nb::arg("v_scale").noconvert(), nb::arg("format"), nb::arg("cache_seqlens").noconvert(),
        nb::arg("block_table").noconvert().none(), nb::arg("k").noconvert().none(), nb::arg("v").noconvert().none(),
        nb::arg("out").noconvert(), nb::arg("lse").noconvert().none(), nb::arg("scale").none(),
        nb::arg("softcap").none(), nb::arg("causal"), nb::arg("window_left"), nb::arg("window_right"),
        nb::arg("sinks").noconvert().none(), nb::arg("threads"), nb::arg("kernel"), nb::arg("explain") = false,
        "sdpa::forward_kvcache over a quantized cache (codes and scales written in place).");
  m.def("inspect", &inspect, nb::arg("a").noconvert(),
        "(address, shape, element strides) of a float32 CPU array as the module receives it.");
  m.def("forward_block", &forward_block, nb::arg("q").noconvert(), nb::arg("k").noconvert(), nb::arg("v").noconvert(),
        nb::arg("out").noconvert(), nb::arg("lse").noconvert(), nb::arg("q0"), nb::arg("k0"), nb::arg("nq"),
        nb::arg("nk"), nb::arg("scale").none(), nb::arg("softcap").none(), nb::arg("causal"), nb::arg("window_left"),
        nb::arg("window_right"), nb::arg("threads"), nb::arg("dropout_p") = 0.0, nb::arg("dropout_seed") = 0,
        nb::arg("dropout_offset") = 0,
        "Attention of one (query shard, key block) pair of a longer sequence (sdpa/blocks.hpp); False, writing "
        "nothing, when no pair of the block is visible.");
  m.def("backward_block", &backward_block, nb::arg("q").noconvert(), nb::arg("k").noconvert(), nb::arg("v").noconvert(),
        nb::arg("out").noconvert(), nb::arg("lse").noconvert(), nb::arg("dout").noconvert(), nb::arg("dq").noconvert(),
        nb::arg("dk").noconvert(), nb::arg("dv").noconvert(), nb::arg("q0"), nb::arg("k0"), nb::arg("nq"),
        nb::arg("nk"), nb::arg("scale").none(), nb::arg("softcap").none(), nb::arg("causal"), nb::arg("window_left"),
        nb::arg("window_right"), nb::arg("threads"), nb::arg("dropout_p") = 0.0, nb::arg("dropout_seed") = 0,
        nb::arg("dropout_offset") = 0,
        "Adds one block's dq, dk, dv (sdpa::backward_accumulate) given the merged out and lse.");
  m.def("merge_partial", &merge_partial, nb::arg("out").noconvert(), nb::arg("lse").noconvert(),
        nb::arg("part_out").noconvert(), nb::arg("part_lse").noconvert(), nb::arg("threads") = 0,
        "(out, lse) <- their lse-merge with (part_out, part_lse), in that order; threads as the library's "
        "(0: all available).");
  m.def("merge_sinks", &merge_sinks, nb::arg("out").noconvert(), nb::arg("lse").noconvert(),
        nb::arg("sinks").noconvert(), nb::arg("threads") = 0,
        "(out, lse) <- each row's sink merged in once, as a part with lse = sinks[h] and out = 0.");
  m.def("add_sink_grads", &add_sink_grads, nb::arg("out").noconvert(), nb::arg("lse").noconvert(),
        nb::arg("dout").noconvert(), nb::arg("sinks").noconvert(), nb::arg("dsinks").noconvert(),
        "dsinks += these rows' share of the gradient w.r.t. the sinks, given the merged out and lse.");
  m.def("shard_segments", &shard_segments, nb::arg("n"), nb::arg("ranks"), nb::arg("rank"), nb::arg("layout"),
        "[(start, length)] of a rank's shard of a length-n sequence: layout 'contiguous' or 'zigzag'.");

  m.def(
      "dispatch",
      [] {
        const sdpa::Dispatch& d = sdpa::active_dispatch();
        nb::dict r;
        r["isa"] = sdpa::isa_name(d.isa);
        r["engine"] = sdpa::engine_name(d.engine);
        r["isa_reason"] = d.isa_reason;
        r["engine_reason"] = d.engine_reason;
        return r;
      },
      "sdpa::active_dispatch() as a dict.");
  m.def(
      "active_isa", [] { return std::string(sdpa::isa_name(sdpa::active_isa())); },
      "The instruction set the fast kernel uses in this process.");
  m.def(
      "amx_bf16_active", [] { return sdpa::amx_bf16_active(); },
      "Whether bf16 forward calls in this process run their products on AMX-BF16 tiles.");
  m.def(
      "bf16_dot_active", [] { return sdpa::bf16_dot_active(); },
      "Whether bf16 calls in this process run their products on AVX512_BF16 dot products (no AMX).");
  m.def(
      "buffer_pool_bytes",
      [] {
        const sdpa::BufferPoolBytes b = sdpa::buffer_pool_bytes();
        nb::dict r;
        r["held"] = b.held;
        r["busy"] = b.busy;
        return r;
      },
      "sdpa::buffer_pool_bytes() as a dict: 'held' (all the blocks calls keep between calls), 'busy'.");
  m.def(
      "release_buffers",
      [] {
        nb::gil_scoped_release unlocked;  // waits on the pool's lock, which a running call may hold
        return sdpa::release_buffers();
      },
      "sdpa::release_buffers(): frees the kept blocks no running call holds; returns their bytes.");
  m.def(
      "isa_supported", [](const std::string& name) { return sdpa::isa_supported(sdpa::parse_isa(name.c_str())); },
      nb::arg("isa"), "Whether this CPU can run the named ISA's kernel.");

  m.def("lab_experiments", &lab_experiments,
        "The lab's registry: one dict per experiment (name, heading, seeds, help, claim, takes_dists).");
  m.def(
      "lab_report",
      [](std::uint64_t seed, std::int64_t samples, int threads) {
        sdpa::lab::Settings s;  // as `sdpa lab report` runs them: each experiment's defaults, or a draft at `samples`
        s.seed = seed;
        s.samples = samples;
        s.threads = threads;
        nb::gil_scoped_release unlocked;
        return sdpa::lab::report(s).dump();
      },
      nb::arg("seed"), nb::arg("samples"), nb::arg("threads"), "The lab report's document (lab.json) as JSON text.");
  m.def(
      "check",
      [](std::int64_t B, std::int64_t Hq, std::int64_t Hkv, std::int64_t Nq, std::int64_t Nk, std::int64_t Dk,
         std::int64_t Dv, const std::string& causal, const std::string& isa, int threads, std::uint64_t seed,
         bool backward, int min_runs, double min_seconds, int max_runs) {
        sdpa::bench::CheckConfig c;
        c.shape = {B, Hq, Hkv, Nq, Nk, Dk, Dv};
        c.causal = parse_causal(causal);
        c.isa = sdpa::parse_isa(isa.c_str(), "isa");
        c.threads = threads;
        c.seed = seed;
        c.backward = backward;
        c.rule.min_runs = min_runs, c.rule.min_seconds = min_seconds, c.rule.max_runs = max_runs;
        nb::gil_scoped_release unlocked;
        return sdpa::bench::to_json(sdpa::bench::check(c)).dump();
      },
      nb::arg("B"), nb::arg("Hq"), nb::arg("Hkv"), nb::arg("Nq"), nb::arg("Nk"), nb::arg("Dk"), nb::arg("Dv"),
      nb::arg("causal"), nb::arg("isa"), nb::arg("threads"), nb::arg("seed"), nb::arg("backward"), nb::arg("min_runs"),
      nb::arg("min_seconds"), nb::arg("max_runs"), "sdpa check (bench::check) as the JSON text of --format json.");
  m.def("lab_run", &lab_run, nb::arg("name"), nb::arg("seed"), nb::arg("samples"), nb::arg("threads"), nb::arg("dists"),
        nb::arg("max_dk"), "Runs one lab experiment: (name, title, columns, rows, verdict dict).");
  // The training lab's configuration: the defaults are the library's (nn::TrainConfig,
  // nn::SweepSpec::defaults()), so Python states none of its own.
  using sdpa::nn::SweepSpec;
  using sdpa::nn::TrainConfig;
  nb::class_<TrainConfig>(m, "TrainConfig")
      .def(nb::init<>())
      .def_rw("task", &TrainConfig::task)
      .def_rw("policy", &TrainConfig::policy)
      .def_rw("init", &TrainConfig::init)
      .def_rw("d_model", &TrainConfig::d_model)
      .def_rw("heads", &TrainConfig::heads)
      .def_rw("layers", &TrainConfig::layers)
      .def_rw("seq", &TrainConfig::seq)
      .def_rw("batch", &TrainConfig::batch)
      .def_rw("steps", &TrainConfig::steps)
      .def_rw("warmup", &TrainConfig::warmup)
      .def_rw("lr", &TrainConfig::lr)
      .def_rw("weight_decay", &TrainConfig::weight_decay)
      .def_rw("clip", &TrainConfig::clip)
      .def_rw("seed", &TrainConfig::seed)
      .def_rw("threads", &TrainConfig::threads)
      .def_rw("log_every", &TrainConfig::log_every)
      .def_rw("eval_size", &TrainConfig::eval_size)
      .def_rw("threshold", &TrainConfig::threshold)
      .def_rw("corpus", &TrainConfig::corpus);
  nb::class_<SweepSpec>(m, "SweepSpec")
      .def_static("defaults", &SweepSpec::defaults)
      .def_rw("base", &SweepSpec::base)
      .def_rw("policies", &SweepSpec::policies)
      .def_rw("seeds", &SweepSpec::seeds)
      .def_rw("d_heads", &SweepSpec::d_heads)
      .def_rw("widths", &SweepSpec::widths)
      .def_rw("inits", &SweepSpec::inits)
      .def_rw("lrs", &SweepSpec::lrs)
      .def_rw("store", &SweepSpec::store)
      .def_rw("budget_s", &SweepSpec::budget_s)
      .def_rw("ensemble", &SweepSpec::ensemble)
      .def_rw("jobs", &SweepSpec::jobs);
  m.def("train_run", &train_run, nb::arg("config"), "Trains one model: (JSON of each logged step, JSON summary).");
  m.def("train_sweep", &train_sweep, nb::arg("spec"), "Runs a sweep; returns sweep.json's text.");
}
