// varlen.cpp — see varlen.hpp.
#include "bench/varlen.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>

#include "sdpa/attention.hpp"

namespace sdpa::bench {

double VarlenRow::speedup() const {
  return packed.median_seconds > 0 ? padded.median_seconds / packed.median_seconds : 0.0;
}
double VarlenRow::ideal_speedup() const { return packed_flops > 0 ? padded_flops / packed_flops : 0.0; }
double VarlenRow::packed_gflops() const {
  return packed.median_seconds > 0 ? packed_flops / packed.median_seconds / 1e9 : 0.0;
}

VarlenRow default_varlen(int threads) {
  VarlenRow r;
  r.lengths = {2048, 1024, 512, 512, 256, 128, 64, 32};
  r.threads = threads;
  return r;
}

void run_varlen(VarlenRow& r, const TimerRule& rule, Isa isa) {
  const i64 B = static_cast<i64>(r.lengths.size()), H = r.H, D = r.D;
  const i64 T = std::accumulate(r.lengths.begin(), r.lengths.end(), i64{0});
  const i64 Lmax = *std::max_element(r.lengths.begin(), r.lengths.end());
  std::vector<std::int64_t> cu{0};
  double sum_sq = 0;
  for (i64 L : r.lengths) cu.push_back(cu.back() + L), sum_sq += double(L) * double(L);
  r.packed_flops = 4.0 * double(H) * double(D) * sum_sq;  // QKᵀ and P·V, 2 FLOPs per multiply-add
  r.padded_flops = 4.0 * double(H) * double(D) * double(B) * double(Lmax) * double(Lmax);

  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> q(static_cast<std::size_t>(T * H * D)), k(q.size()), v(q.size()), out(q.size()),
      lse(static_cast<std::size_t>(H * T));
  for (auto* x : {&q, &k, &v})
    for (float& e : *x) e = normal(rng);
  // The padded batch (B, H, Lmax, D) holds the same numbers, zeros past each length, and a
  // (B, 1, 1, Lmax) keep-mask hiding the padding keys.
  std::vector<float> qp(static_cast<std::size_t>(B * H * Lmax * D)), kp(qp.size()), vp(qp.size()), outp(qp.size()),
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
  Options opt;
  opt.threads = r.threads;
  opt.isa = isa;
  const View<const std::int64_t, 1> offsets{cu.data(), {B + 1}, {1}};
  const auto packed = [&] {
    forward_varlen(contiguous<const float>(q.data(), {T, H, D}), contiguous<const float>(k.data(), {T, H, D}),
                   contiguous<const float>(v.data(), {T, H, D}), offsets, offsets, contiguous(out.data(), {T, H, D}),
                   contiguous(lse.data(), {H, T}), opt);
  };
  Options padded_opt = opt;
  padded_opt.keep = contiguous<const std::uint8_t>(keep.data(), {B, 1, 1, Lmax});
  const auto padded = [&] {
    forward(contiguous<const float>(qp.data(), {B, H, Lmax, D}), contiguous<const float>(kp.data(), {B, H, Lmax, D}),
            contiguous<const float>(vp.data(), {B, H, Lmax, D}), contiguous(outp.data(), {B, H, Lmax, D}),
            contiguous(lsep.data(), {B, H, Lmax}), padded_opt);
  };
  std::tie(r.packed, r.padded) = time_alternating(rule, packed, padded);
}

}  // namespace sdpa::bench
