// basic.cpp — attention from C++ with sdpa: a [B, H, N, D] buffer, then the same
// data kept as [B, N, H, D] (as most models store it) passed without a copy.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <sdpa/sdpa.hpp>

int main() {
  const std::int64_t B = 1, H = 2, N = 16, D = 8;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<float> q(B * H * N * D), k(q.size()), v(q.size()), out(q.size()), lse(B * H * N);
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = normal(rng);

  sdpa::Options opt;
  opt.causal = sdpa::Causal::top_left;  // β defaults to 1/sqrt(D); set opt.scale for another temperature
  sdpa::forward(sdpa::contiguous<const float>(q.data(), {B, H, N, D}),
                sdpa::contiguous<const float>(k.data(), {B, H, N, D}),
                sdpa::contiguous<const float>(v.data(), {B, H, N, D}), sdpa::contiguous(out.data(), {B, H, N, D}),
                sdpa::contiguous(lse.data(), {B, H, N}), opt);

  // The same tensors stored [B, N, H, D]: only the strides change.
  std::vector<float> qt(q.size()), kt(q.size()), vt(q.size()), out_t(q.size());
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t d = 0; d < D; ++d) {
        const auto bhnd = (h * N + n) * D + d, bnhd = (n * H + h) * D + d;
        qt[bnhd] = q[bhnd], kt[bnhd] = k[bhnd], vt[bnhd] = v[bhnd];
      }
  sdpa::forward(
      sdpa::from_bnhd<const float>(qt.data(), B, N, H, D), sdpa::from_bnhd<const float>(kt.data(), B, N, H, D),
      sdpa::from_bnhd<const float>(vt.data(), B, N, H, D), sdpa::from_bnhd(out_t.data(), B, N, H, D), {}, opt);

  // Against the readable reference, accumulating in fp64.
  std::vector<float> ref(q.size());
  sdpa::reference::forward<float, double>(
      sdpa::contiguous<const float>(q.data(), {B, H, N, D}), sdpa::contiguous<const float>(k.data(), {B, H, N, D}),
      sdpa::contiguous<const float>(v.data(), {B, H, N, D}), sdpa::contiguous(ref.data(), {B, H, N, D}), {}, opt);
  double checksum = 0, diff = 0, layout_diff = 0;
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t d = 0; d < D; ++d) {
        const auto bhnd = (h * N + n) * D + d, bnhd = (n * H + h) * D + d;
        checksum += out[bhnd];
        diff = std::fmax(diff, std::fabs(out[bhnd] - ref[bhnd]));
        layout_diff = std::fmax(layout_diff, std::fabs(out[bhnd] - out_t[bnhd]));
      }
  std::printf("sdpa %s: checksum %.6f, max |fast - reference| = %.2e, max |[B,H,N,D] - [B,N,H,D]| = %.2e\n",
              SDPA_VERSION_STRING, checksum, diff, layout_diff);
  return diff < 1e-5 && layout_diff == 0 ? 0 : 1;
}
