// varlen.cpp — see varlen.hpp.
#include "bench/varlen.hpp"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <type_traits>

#include <fmt/core.h>

#include "bench/normals.hpp"
#include "sdpa/attention.hpp"
#include "sdpa/error.hpp"

namespace sdpa::bench {

double VarlenRow::speedup() const {
  return packed.median_seconds > 0 ? padded.median_seconds / packed.median_seconds : 0.0;
}
double VarlenRow::ideal_speedup() const { return packed_flops > 0 ? padded_flops / packed_flops : 0.0; }
double VarlenRow::packed_gflops() const {
  return packed.median_seconds > 0 ? packed_flops / packed.median_seconds / 1e9 : 0.0;
}

std::string VarlenRow::pass_name() const {
  return dtype == Dtype::bf16 ? "varlen fwd bf16" : dtype == Dtype::fp16 ? "varlen fwd fp16" : "varlen fwd";
}

std::string VarlenRow::label() const {
  std::string l = fmt::format("H={} D={} L=", H, D);
  for (std::size_t s = 0; s < lengths.size(); ++s) {  // appended piecewise: "," + to_string trips g++ 12's -Wrestrict
    if (s) l += ',';
    l += std::to_string(lengths[s]);
  }
  return l;
}

VarlenRow default_varlen(int threads, Dtype dtype) {
  VarlenRow r;
  r.lengths = {2048, 1024, 512, 512, 256, 128, 64, 32};
  r.threads = threads;
  r.dtype = dtype;
  return r;
}

std::vector<i64> parse_lengths(const std::string& text, const char* what) {
  std::vector<i64> lengths;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    std::size_t used = 0;
    long long L = 0;
    try {
      L = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || L <= 0)
      throw Error(std::string(what) + ": expected positive lengths separated by commas, got '" + text + "'");
    lengths.push_back(L);
    at = end + 1;
  }
  return lengths;
}

namespace {

template <class T>
std::vector<T> as(const std::vector<float>& x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    std::vector<T> y;
    y.reserve(x.size());
    for (float e : x) y.push_back(T(e));
    return y;
  }
}

template <class T>
void run_varlen_as(VarlenRow& r, const TimerRule& rule, Isa isa) {
  const i64 B = static_cast<i64>(r.lengths.size()), H = r.H, D = r.D;
  const i64 tokens = std::accumulate(r.lengths.begin(), r.lengths.end(), i64{0});
  const i64 Lmax = *std::max_element(r.lengths.begin(), r.lengths.end());
  std::vector<std::int64_t> cu{0};
  double sum_sq = 0;
  for (i64 L : r.lengths) cu.push_back(cu.back() + L), sum_sq += double(L) * double(L);
  r.packed_flops = 4.0 * double(H) * double(D) * sum_sq;  // QKᵀ and P·V, 2 FLOPs per multiply-add
  r.padded_flops = 4.0 * double(H) * double(D) * double(B) * double(Lmax) * double(Lmax);

  Normals normals(1);
  std::vector<float> q(static_cast<std::size_t>(tokens * H * D)), k(q.size()), v(q.size()),
      lse(static_cast<std::size_t>(H * tokens));
  for (auto* x : {&q, &k, &v}) normals.fill(*x);
  // The padded batch (B, H, Lmax, D) holds the same numbers, zeros past each length, and a
  // (B, 1, 1, Lmax) keep-mask hiding the padding keys.
  std::vector<float> qp(static_cast<std::size_t>(B * H * Lmax * D)), kp(qp.size()), vp(qp.size()),
      lsep(static_cast<std::size_t>(B * H * Lmax));
  std::vector<std::uint8_t> keep(static_cast<std::size_t>(B * Lmax), 0);
  for (i64 s = 0; s < B; ++s)
    for (i64 i = 0; i < r.lengths[static_cast<std::size_t>(s)]; ++i) {
      keep[static_cast<std::size_t>(s * Lmax + i)] = 1;
      for (i64 h = 0; h < H; ++h)
        for (i64 d = 0; d < D; ++d) {
          const auto src = static_cast<std::size_t>(((cu[static_cast<std::size_t>(s)] + i) * H + h) * D + d);
          const auto dst = static_cast<std::size_t>(((s * H + h) * Lmax + i) * D + d);
          qp[dst] = q[src], kp[dst] = k[src], vp[dst] = v[src];
        }
    }
  // The row's dtype: both ways get the same rounded numbers (made before any timing).
  const std::vector<T> qt = as<T>(q), kt = as<T>(k), vt = as<T>(v), qpt = as<T>(qp), kpt = as<T>(kp), vpt = as<T>(vp);
  std::vector<T> outt(q.size()), outpt(qp.size());
  Options opt;
  opt.threads = r.threads;
  opt.isa = isa;
  const View<const std::int64_t, 1> offsets{cu.data(), {B + 1}, {1}};
  const auto packed = [&] {
    forward_varlen(contiguous<const T>(qt.data(), {tokens, H, D}), contiguous<const T>(kt.data(), {tokens, H, D}),
                   contiguous<const T>(vt.data(), {tokens, H, D}), offsets, offsets,
                   contiguous(outt.data(), {tokens, H, D}), contiguous(lse.data(), {H, tokens}), opt);
  };
  Options padded_opt = opt;
  padded_opt.keep = contiguous<const std::uint8_t>(keep.data(), {B, 1, 1, Lmax});
  const auto padded = [&] {
    forward(contiguous<const T>(qpt.data(), {B, H, Lmax, D}), contiguous<const T>(kpt.data(), {B, H, Lmax, D}),
            contiguous<const T>(vpt.data(), {B, H, Lmax, D}), contiguous(outpt.data(), {B, H, Lmax, D}),
            contiguous(lsep.data(), {B, H, Lmax}), padded_opt);
  };
  std::tie(r.packed, r.padded) = time_alternating(rule, packed, padded);
}

}  // namespace

void run_varlen(VarlenRow& r, const TimerRule& rule, Isa isa) {
  switch (r.dtype) {
    case Dtype::bf16: return run_varlen_as<bf16>(r, rule, isa);
    case Dtype::fp16: return run_varlen_as<fp16>(r, rule, isa);
    default: return run_varlen_as<float>(r, rule, isa);
  }
}

}  // namespace sdpa::bench
