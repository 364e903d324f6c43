// validate.cpp — every argument check, in one place.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <omp.h>

#include "attention/problem.hpp"

namespace sdpa::detail {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw Error(msg); }

// A view of any element type reduced to what the checks need.
struct Desc {
  const char* name;
  const void* data;
  std::array<i64, 4> shape{1, 1, 1, 1};
  std::array<i64, 4> stride{0, 0, 0, 0};
  int rank;
  i64 itemsize;
  const char* dims;  // letters naming the dimensions, for messages
};

template <class T, std::size_t R>
Desc desc(const char* name, const View<T, R>& v, const char* dims) {
  Desc d{name, static_cast<const void*>(v.data), {}, {}, static_cast<int>(R), sizeof(T), dims};
  for (std::size_t i = 0; i < R; ++i) {
    d.shape[i] = v.shape[i];
    d.stride[i] = v.stride[i];
  }
  return d;
}

std::string shape_of(const Desc& d) {
  std::string s = "[";
  for (int i = 0; i < d.rank; ++i) s += (i ? ", " : "") + std::to_string(d.shape[i]);
  return s + "]";
}
std::string strides_of(const Desc& d) {
  std::string s = "[";
  for (int i = 0; i < d.rank; ++i) s += (i ? ", " : "") + std::to_string(d.stride[i]);
  return s + "]";
}

// Byte range [lo, hi) a view touches; checks that the arithmetic cannot overflow.
struct Range {
  std::intptr_t lo, hi;
};

Range byte_range(const Desc& d) {
  i64 lo = 0, hi = 0;  // in elements, relative to data
  for (int i = 0; i < d.rank; ++i) {
    i64 span = 0;
    if (__builtin_mul_overflow(d.shape[i] - 1, d.stride[i], &span))
      fail(std::string(d.name) + ": shape " + shape_of(d) + " with strides " + strides_of(d) +
           " overflows the address space");
    i64* side = span < 0 ? &lo : &hi;
    if (__builtin_add_overflow(*side, span, side))
      fail(std::string(d.name) + ": shape " + shape_of(d) + " with strides " + strides_of(d) +
           " overflows the address space");
  }
  i64 lo_b = 0, hi_b = 0;
  if (__builtin_mul_overflow(lo, d.itemsize, &lo_b) || __builtin_add_overflow(hi, 1, &hi) ||
      __builtin_mul_overflow(hi, d.itemsize, &hi_b))
    fail(std::string(d.name) + ": byte size of shape " + shape_of(d) + " overflows");
  const auto base = reinterpret_cast<std::intptr_t>(d.data);
  std::intptr_t r_lo = 0, r_hi = 0;
  if (__builtin_add_overflow(base, static_cast<std::intptr_t>(lo_b), &r_lo) ||
      __builtin_add_overflow(base, static_cast<std::intptr_t>(hi_b), &r_hi))
    fail(std::string(d.name) + ": shape " + shape_of(d) + " with strides " + strides_of(d) +
         " runs past the end of the address space");
  return {r_lo, r_hi};
}

void check_present(const Desc& d) {
  check_dims(d.name, d.shape.data(), d.rank, d.dims);
  // Total element count must fit too.
  i64 n = 1;
  for (int i = 0; i < d.rank; ++i)
    if (__builtin_mul_overflow(n, d.shape[i], &n))
      fail(std::string(d.name) + ": element count of shape " + shape_of(d) + " overflows");
  if (d.data == nullptr) fail(std::string(d.name) + ": data pointer is null (shape " + shape_of(d) + ")");
  byte_range(d);
}

void check_shape(const Desc& d, const std::array<i64, 4>& want, const std::string& why) {
  for (int i = 0; i < d.rank; ++i)
    if (d.shape[i] != want[i]) {
      std::string w = "[";
      for (int j = 0; j < d.rank; ++j) w += (j ? ", " : "") + std::to_string(want[j]);
      fail(std::string(d.name) + ": shape " + shape_of(d) + " should be " + w + "]" + why);
    }
}

// An output written by several threads must not have two indices on one element.
void check_no_self_overlap(const Desc& d) {
  std::vector<std::pair<i64, i64>> dims;  // (|stride|, size) for dims of size > 1
  for (int i = 0; i < d.rank; ++i)
    if (d.shape[i] > 1) dims.push_back({d.stride[i] < 0 ? -d.stride[i] : d.stride[i], d.shape[i]});
  std::sort(dims.begin(), dims.end());
  i64 extent = 1;  // elements spanned by the inner dimensions
  for (auto [s, n] : dims) {
    if (s < extent)
      fail(std::string(d.name) + ": strides " + strides_of(d) + " make elements of shape " + shape_of(d) +
           " overlap; an output needs one element per index");
    extent = s * (n - 1) + extent;
  }
}

void check_disjoint(const Desc& out, const Desc& other) {
  const Range a = byte_range(out), b = byte_range(other);
  if (a.lo < b.hi && b.lo < a.hi)
    fail(std::string(out.name) + " (shape " + shape_of(out) + ") aliases " + other.name + " (shape " + shape_of(other) +
         "); outputs must not share memory with inputs or other outputs");
}

template <class T>
void check_mask(const char* name, View4<const T>& m, const Problem& p) {
  if (m.empty()) {
    for (auto s : m.shape)
      if (s != 0) fail(std::string(name) + ": data pointer is null (shape " + shape_str(m.shape) + ")");
    return;
  }
  const std::array<i64, 4> full{p.B, p.Hq, p.Nq, p.Nk};
  Desc d = desc(name, m, "BHQK");
  for (int i = 0; i < 4; ++i)
    if (m.shape[i] != 1 && m.shape[i] != full[i])
      fail(std::string(name) + ": shape " + shape_of(d) + " does not broadcast to [B, Hq, Nq, Nk] = " +
           shape_str(full) + " (dimension " + std::to_string(i) + " must be 1 or " + std::to_string(full[i]) + ")");
  check_present(d);
  for (int i = 0; i < 4; ++i)
    if (m.shape[i] == 1) m.stride[i] = 0;
  m.shape = full;
}

// The call's place in a longer sequence (Dropout::batch0, row0, key0): >= 0, and with
// dropout every position it draws must fit its 32-bit counter word (philox.hpp), else two
// positions would share a block — refused rather than wrapped.
void check_dropout_positions(const Dropout& d, const Problem& p) {
  const std::pair<const char*, i64> starts[] = {{"batch0", d.batch0}, {"row0", d.row0}, {"key0", d.key0}};
  for (const auto& [name, start] : starts)
    if (start < 0) fail(std::string("dropout: ") + name + " must be >= 0, got " + std::to_string(start));
  if (!(d.p > 0.0)) return;
  constexpr i64 kWord = i64{1} << 32;  // each counter word: row, batch·head and key / 8
  auto fits = [](i64 start, i64 count, i64 limit) { return start <= limit && count <= limit - start; };
  if (!fits(d.batch0, p.B, kWord / std::max<i64>(p.Hq, 1)))
    fail("dropout: (batch0 + B)·Hq must be <= 2^32 (the counter's batch-head word), got batch0 " +
         std::to_string(d.batch0) + ", B " + std::to_string(p.B) + ", Hq " + std::to_string(p.Hq));
  if (!fits(d.row0, p.Nq, kWord))
    fail("dropout: row0 + Nq must be <= 2^32 (the counter's query word), got row0 " + std::to_string(d.row0) +
         ", Nq " + std::to_string(p.Nq));
  if (!fits(d.key0, p.Nk, 8 * kWord))
    fail("dropout: key0 + Nk must be <= 2^35 (the counter's key-octet word), got key0 " + std::to_string(d.key0) +
         ", Nk " + std::to_string(p.Nk));
}

void check_options(const Options& opt, Problem& p) {
  p.scale = resolve_scale(opt, p.Dk);
  if (opt.softcap) {
    if (!std::isfinite(*opt.softcap) || *opt.softcap <= 0)
      fail("softcap: must be a finite value > 0, got " + std::to_string(*opt.softcap));
    p.softcap = *opt.softcap;
    p.has_softcap = true;
  }
  if (opt.window.left < -1 || opt.window.right < -1)
    fail("window: left and right must be >= 0, or -1 for unbounded; got (" + std::to_string(opt.window.left) + ", " +
         std::to_string(opt.window.right) + ")");
  if (opt.threads < 0) fail("threads: must be >= 0 (0 = all available), got " + std::to_string(opt.threads));
  p.causal = opt.causal != Causal::none;
  p.diag_offset = opt.causal == Causal::top_left ? 0 : p.Nk - p.Nq;
  if (opt.diagonal) {
    constexpr i64 kMaxDiagonal = i64{1} << 62;  // keeps i + diagonal ± window inside int64
    if (*opt.diagonal > kMaxDiagonal || *opt.diagonal < -kMaxDiagonal)
      fail("diagonal: |diagonal| must be <= 2^62, got " + std::to_string(*opt.diagonal));
    p.diag_offset = *opt.diagonal;
  }
  p.window_left = opt.window.left;
  p.window_right = opt.window.right;
  p.mask = opt.mask;
  p.keep = opt.keep;
  check_mask("mask", p.mask, p);
  check_mask("keep", p.keep, p);
  if (!(opt.dropout.p >= 0.0 && opt.dropout.p < 1.0))
    fail("dropout: p must be in [0, 1), got " + std::to_string(opt.dropout.p));
  check_dropout_positions(opt.dropout, p);
  p.dropout = opt.dropout;
  p.has_dropout = opt.dropout.p > 0.0;
  p.dropout_stream = opt.dropout.stream();
  p.dropout_scale = static_cast<float>(opt.dropout.keep_scale());
  check_sinks(opt, p);
  if (opt.kernel == Kernel::fast && opt.isa != Isa::automatic && !isa_supported(opt.isa))
    fail(std::string("isa: this CPU cannot run the ") + isa_name(opt.isa) + " kernel");
}

template <class T>
Problem common(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const Options& opt,
               std::vector<Desc>& inputs) {
  const Desc dq = desc("q", q, "BHND"), dk = desc("k", k, "BHND"), dv = desc("v", v, "BHND");
  check_present(dq);
  check_present(dk);
  check_present(dv);
  Problem p;
  p.B = q.shape[0];
  p.Hq = q.shape[1];
  p.Nq = q.shape[2];
  p.Dk = q.shape[3];
  p.Hkv = k.shape[1];
  p.Nk = k.shape[2];
  p.Dv = v.shape[3];
  const std::string ctx = " (q " + shape_of(dq) + ", k " + shape_of(dk) + ", v " + shape_of(dv) + ")";
  if (k.shape[0] != p.B)
    fail("k: batch " + std::to_string(k.shape[0]) + " differs from q's " + std::to_string(p.B) + ctx);
  if (k.shape[3] != p.Dk)
    fail("k: head dim " + std::to_string(k.shape[3]) + " differs from q's " + std::to_string(p.Dk) + ctx);
  check_shape(dv, {p.B, p.Hkv, p.Nk, p.Dv}, ": v must match k in batch, heads and keys" + ctx);
  if (p.Hq % p.Hkv != 0)
    fail("k: query heads Hq = " + std::to_string(p.Hq) +
         " is not a multiple of kv heads Hkv = " + std::to_string(p.Hkv) + ctx);
  p.group = p.Hq / p.Hkv;
  if constexpr (sizeof(T) == 2) p.dtype = dtype_of<T>();
  check_options(opt, p);
  inputs = {dq, dk, dv};
  if (!p.mask.empty()) inputs.push_back(desc("mask", opt.mask, "BHQK"));
  if (!p.keep.empty()) inputs.push_back(desc("keep", opt.keep, "BHQK"));
  return p;
}

}  // namespace

void check_dims(const char* name, const i64* shape, int rank, const char* dims) {
  for (int i = 0; i < rank; ++i)
    if (shape[i] <= 0) {
      std::string s = "[";
      for (int j = 0; j < rank; ++j) s += (j ? ", " : "") + std::to_string(shape[j]);
      fail(std::string(name) + ": dimension " + std::to_string(i) + " (" + dims[i] + ") is " +
           std::to_string(shape[i]) + " in shape " + s + "]; every dimension must be >= 1");
    }
}

void check_sinks(const Options& opt, Problem& p) {
  if (opt.sinks.empty()) {
    if (!opt.dsinks.empty()) fail("dsinks: set without sinks (it receives the gradient of Options::sinks)");
    return;
  }
  const auto hq = std::to_string(p.Hq);
  if (opt.sinks.shape[0] != p.Hq)
    fail("sinks: shape [" + std::to_string(opt.sinks.shape[0]) + "] should be [Hq] = [" + hq +
         "], one logit per query head");
  for (i64 h = 0; h < p.Hq; ++h) {
    const float x = opt.sinks.data[h * opt.sinks.stride[0]];
    if (std::isnan(x) || x == std::numeric_limits<float>::infinity())
      fail("sinks: head " + std::to_string(h) + " is " + std::to_string(x) + "; each sink must be finite, or -inf " +
           "for no sink");
  }
  if (!opt.dsinks.empty() && opt.dsinks.shape[0] != p.Hq)
    fail("dsinks: shape [" + std::to_string(opt.dsinks.shape[0]) + "] should be [Hq] = [" + hq + "], as sinks");
  p.sinks = opt.sinks;
  p.has_sinks = true;
}

template <class T>
Problem validate_forward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v, const View4<T>& out,
                         const View3<LseOf<T>>& lse, const Options& opt) {
  std::vector<Desc> inputs;
  Problem p = common(q, k, v, opt, inputs);
  const std::string ctx = " (q " + shape_str(q.shape) + ", v " + shape_str(v.shape) + ")";
  std::vector<Desc> outputs{desc("out", out, "BHND")};
  check_present(outputs[0]);
  check_shape(outputs[0], {p.B, p.Hq, p.Nq, p.Dv}, " = [B, Hq, Nq, Dv]" + ctx);
  const bool want_lse = !lse.empty() || lse.shape != std::array<i64, 3>{0, 0, 0};
  if (want_lse) {
    outputs.push_back(desc("lse", lse, "BHN"));
    check_present(outputs[1]);
    check_shape(outputs[1], {p.B, p.Hq, p.Nq, 1}, " = [B, Hq, Nq]" + ctx);
  }
  for (auto& o : outputs) {
    check_no_self_overlap(o);
    for (auto& i : inputs) check_disjoint(o, i);
  }
  if (outputs.size() == 2) check_disjoint(outputs[0], outputs[1]);
  return p;
}

template <class T>
Problem validate_backward(const View4<const T>& q, const View4<const T>& k, const View4<const T>& v,
                          const View4<const T>& out, const View3<const LseOf<T>>& lse, const View4<const T>& dout,
                          const View4<T>& dq, const View4<T>& dk, const View4<T>& dv, const Options& opt) {
  std::vector<Desc> inputs;
  Problem p = common(q, k, v, opt, inputs);
  const std::string ctx = " (q " + shape_str(q.shape) + ", k " + shape_str(k.shape) + ", v " + shape_str(v.shape) + ")";
  Desc d_out = desc("out", out, "BHND"), d_lse = desc("lse", lse, "BHN"), d_dout = desc("dout", dout, "BHND");
  for (Desc* d : {&d_out, &d_lse, &d_dout}) check_present(*d);
  check_shape(d_out, {p.B, p.Hq, p.Nq, p.Dv}, " = [B, Hq, Nq, Dv]" + ctx);
  check_shape(d_lse, {p.B, p.Hq, p.Nq, 1}, " = [B, Hq, Nq]" + ctx);
  check_shape(d_dout, {p.B, p.Hq, p.Nq, p.Dv}, " = [B, Hq, Nq, Dv]" + ctx);
  inputs.push_back(d_out);
  inputs.push_back(d_lse);
  inputs.push_back(d_dout);
  std::vector<Desc> outputs{desc("dq", dq, "BHND"), desc("dk", dk, "BHND"), desc("dv", dv, "BHND")};
  for (auto& o : outputs) check_present(o);
  check_shape(outputs[0], {p.B, p.Hq, p.Nq, p.Dk}, " = q's shape" + ctx);
  check_shape(outputs[1], {p.B, p.Hkv, p.Nk, p.Dk}, " = k's shape" + ctx);
  check_shape(outputs[2], {p.B, p.Hkv, p.Nk, p.Dv}, " = v's shape" + ctx);
  for (std::size_t a = 0; a < outputs.size(); ++a) {
    check_no_self_overlap(outputs[a]);
    for (auto& i : inputs) check_disjoint(outputs[a], i);
    for (std::size_t b = a + 1; b < outputs.size(); ++b) check_disjoint(outputs[a], outputs[b]);
  }
  return p;
}

template Problem validate_forward<float>(const View4<const float>&, const View4<const float>&,
                                         const View4<const float>&, const View4<float>&, const View3<float>&,
                                         const Options&);
template Problem validate_forward<double>(const View4<const double>&, const View4<const double>&,
                                          const View4<const double>&, const View4<double>&, const View3<double>&,
                                          const Options&);
template Problem validate_backward<float>(const View4<const float>&, const View4<const float>&,
                                          const View4<const float>&, const View4<const float>&,
                                          const View3<const float>&, const View4<const float>&, const View4<float>&,
                                          const View4<float>&, const View4<float>&, const Options&);
template Problem validate_backward<double>(const View4<const double>&, const View4<const double>&,
                                           const View4<const double>&, const View4<const double>&,
                                           const View3<const double>&, const View4<const double>&, const View4<double>&,
                                           const View4<double>&, const View4<double>&, const Options&);

#define SDPA_VALIDATE_INSTANTIATE_16(T)                                                                              \
  template Problem validate_forward<T>(const View4<const T>&, const View4<const T>&, const View4<const T>&,          \
                                       const View4<T>&, const View3<float>&, const Options&);                         \
  template Problem validate_backward<T>(const View4<const T>&, const View4<const T>&, const View4<const T>&,         \
                                        const View4<const T>&, const View3<const float>&, const View4<const T>&,      \
                                        const View4<T>&, const View4<T>&, const View4<T>&, const Options&);
SDPA_VALIDATE_INSTANTIATE_16(bf16)
SDPA_VALIDATE_INSTANTIATE_16(fp16)
#undef SDPA_VALIDATE_INSTANTIATE_16

double resolve_scale_impl(const Options& opt, i64 dk) {
  if (opt.scale) {
    if (!std::isfinite(*opt.scale)) fail("scale: must be finite, got " + std::to_string(*opt.scale));
    return *opt.scale;
  }
  if (dk <= 0) fail("scale: the default 1/sqrt(Dk) needs Dk >= 1, got Dk = " + std::to_string(dk));
  return 1.0 / std::sqrt(static_cast<double>(dk));
}

int resolve_threads(const Options& opt) { return opt.threads > 0 ? opt.threads : omp_get_max_threads(); }

}  // namespace sdpa::detail

namespace sdpa {
double resolve_scale(const Options& opt, std::int64_t dk) { return detail::resolve_scale_impl(opt, dk); }
}  // namespace sdpa
