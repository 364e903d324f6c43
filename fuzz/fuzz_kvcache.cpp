// fuzz_kvcache.cpp — libFuzzer target for attention over a KV cache (sdpa/kvcache.hpp): the
// input chooses the shapes (zero and negative included), contiguous or paged, float or 8-bit,
// the cache lengths and block table entries (in and out of range), the scales' shapes, new
// tokens (finite or not) and the options; every buffer is allocated at exactly the size its
// view declares, so AddressSanitizer reports any read or write outside it.
//
// A call must either throw sdpa::Error with the caches (codes and scales) byte for byte as they
// were, or succeed with a finite output (finite inputs, finite codes); a NaN among the new tokens
// of an 8-bit cache must be refused. Anything else — a crash, a sanitizer report, another
// exception, a refused call that wrote — is a finding.
#include <fuzzer/FuzzedDataProvider.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "sdpa/error.hpp"
#include "sdpa/kvcache.hpp"

namespace {

using i64 = std::int64_t;

// An allocation of exactly n elements (n = 0: a non-null zero-size block that no access may touch).
template <class T>
struct Buffer {
  std::unique_ptr<T[]> data;
  std::size_t n = 0;
  explicit Buffer(i64 count)
      : data(new T[count > 0 ? static_cast<std::size_t>(count) : 0]),
        n(count > 0 ? static_cast<std::size_t>(count) : 0) {}
  std::vector<unsigned char> bytes() const {
    const auto* p = reinterpret_cast<const unsigned char*>(data.get());
    return {p, p + n * sizeof(T)};
  }
};

i64 product(std::initializer_list<i64> dims) {
  i64 n = 1;
  for (const i64 d : dims) n *= d > 0 ? d : 0;
  return n;
}

template <class T, std::size_t R>
sdpa::View<T, R> view(T* data, std::array<i64, R> shape) {
  sdpa::View<T, R> v{data, shape, {}};
  i64 stride = 1;
  for (std::size_t d = R; d-- > 0;) v.stride[d] = stride, stride *= shape[d] > 0 ? shape[d] : 1;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const bool quantized = in.ConsumeBool(), paged = in.ConsumeBool(), with_new = in.ConsumeBool();
  const i64 B = in.ConsumeIntegralInRange<i64>(-1, 3), Nq = in.ConsumeIntegralInRange<i64>(-1, 4);
  const i64 Hkv = in.ConsumeIntegralInRange<i64>(0, 3),
            Hq = Hkv * in.ConsumeIntegralInRange<i64>(0, 3) + (in.ConsumeBool() ? 1 : 0);
  const i64 Dk = in.ConsumeIntegralInRange<i64>(-1, 24), Dv = in.ConsumeIntegralInRange<i64>(0, 24);
  const i64 rows = in.ConsumeIntegralInRange<i64>(-1, 40);  // block_size (paged) or Nmax (contiguous)
  const i64 outer = paged ? in.ConsumeIntegralInRange<i64>(0, 8) : B + in.ConsumeIntegralInRange<i64>(-1, 1);
  const i64 max_blocks = in.ConsumeIntegralInRange<i64>(0, 6), Nnew = in.ConsumeIntegralInRange<i64>(0, 3);

  // cache_seqlens: B entries, or now and then one more (a wrong shape the checks must refuse)
  const i64 seqlens_len = B + (in.ConsumeIntegralInRange<int>(0, 7) == 0 ? 1 : 0);
  std::vector<std::int32_t> seqlens(static_cast<std::size_t>(seqlens_len > 0 ? seqlens_len : 0));
  for (auto& n : seqlens)
    n = in.ConsumeBool() ? in.ConsumeIntegral<std::int32_t>() : in.ConsumeIntegralInRange<std::int32_t>(-1, 60);
  std::vector<std::int32_t> table(static_cast<std::size_t>(product({B, max_blocks})));
  for (auto& e : table) e = in.ConsumeIntegralInRange<std::int32_t>(-1, static_cast<std::int32_t>(outer));

  sdpa::Options opt;
  opt.threads = in.ConsumeIntegralInRange<int>(1, 2);
  opt.isa = in.ConsumeBool() ? sdpa::Isa::scalar : sdpa::Isa::automatic;
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 1: opt.causal = sdpa::Causal::bottom_right; break;
    case 2: opt.causal = sdpa::Causal::top_left; break;
    default: break;
  }
  if (in.ConsumeBool()) opt.window = {in.ConsumeIntegralInRange<i64>(-1, 8), in.ConsumeIntegralInRange<i64>(-1, 8)};
  if (in.ConsumeBool()) opt.softcap = in.ConsumeFloatingPointInRange<double>(-1.0, 30.0);
  const bool poison = in.ConsumeIntegralInRange<int>(0, 7) == 0;  // a NaN among the new tokens
  const int scale_delta = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegralInRange<int>(-1, 1) : 0;

  const std::array<i64, 4> q_shape{B, Nq, Hq, Dk}, out_shape{B, Nq, Hq, Dv};
  const std::array<i64, 4> k_shape{outer, rows, Hkv, Dk}, v_shape{outer, rows, Hkv, Dv};
  Buffer<float> q(product({B, Nq, Hq, Dk})), out(product({B, Nq, Hq, Dv})), lse(product({B, Hq, Nq}));
  Buffer<float> k_new(product({B, Nnew, Hkv, Dk})), v_new(product({B, Nnew, Hkv, Dv}));
  for (std::size_t i = 0; i < q.n; ++i) q.data[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < k_new.n; ++i) k_new.data[i] = std::cos(0.11f * static_cast<float>(i));
  for (std::size_t i = 0; i < v_new.n; ++i) v_new.data[i] = std::sin(0.23f * static_cast<float>(i));
  if (poison && k_new.n > 0) k_new.data[k_new.n / 2] = std::nanf("");
  const auto new_k = with_new ? view<const float, 4>(k_new.data.get(), {B, Nnew, Hkv, Dk}) : sdpa::View4<const float>{};
  const auto new_v = with_new ? view<const float, 4>(v_new.data.get(), {B, Nnew, Hkv, Dv}) : sdpa::View4<const float>{};
  const sdpa::View<const std::int32_t, 2> table_view =
      paged ? sdpa::View<const std::int32_t, 2>{table.data(), {B, max_blocks}, {max_blocks, 1}}
            : sdpa::View<const std::int32_t, 2>{};
  const sdpa::View<const std::int32_t, 1> lens{seqlens.data(), {seqlens_len}, {1}};

  // One call: refused (true) with the cache's bytes (snapshot()) unchanged, or run (false).
  const auto attend = [&](const auto& cache, const auto& snapshot) {
    const auto before = snapshot();
    try {
      sdpa::forward_kvcache(view<const float, 4>(q.data.get(), q_shape), cache, new_k, new_v,
                            view<float, 4>(out.data.get(), out_shape), view<float, 3>(lse.data.get(), {B, Hq, Nq}),
                            opt);
    } catch (const sdpa::Error&) {
      if (snapshot() != before) std::abort();  // a refused call wrote the cache
      return true;
    }
    return false;
  };
  bool refused = false;
  if (!quantized) {
    Buffer<float> kc(product({outer, rows, Hkv, Dk})), vc(product({outer, rows, Hkv, Dv}));
    for (std::size_t i = 0; i < kc.n; ++i) kc.data[i] = std::cos(0.05f * static_cast<float>(i));
    for (std::size_t i = 0; i < vc.n; ++i) vc.data[i] = std::sin(0.07f * static_cast<float>(i));
    const sdpa::KvCache<float> cache{view<float, 4>(kc.data.get(), k_shape), view<float, 4>(vc.data.get(), v_shape),
                                     table_view, lens};
    refused = attend(cache, [&] { return std::array{kc.bytes(), vc.bytes()}; });
  } else {
    const sdpa::KvQuant quant = in.ConsumeBool() ? sdpa::KvQuant::int8 : sdpa::KvQuant::fp8_e4m3;
    Buffer<std::uint8_t> kc(product({outer, rows, Hkv, Dk})), vc(product({outer, rows, Hkv, Dv}));
    // Codes 0..99: finite in both formats (e4m3's NaN codes are 0x7F and 0xFF).
    for (std::size_t i = 0; i < kc.n; ++i) kc.data[i] = static_cast<std::uint8_t>(i % 100);
    for (std::size_t i = 0; i < vc.n; ++i) vc.data[i] = static_cast<std::uint8_t>((i * 7) % 100);
    const std::array<i64, 3> s_shape{outer, Hkv, rows + scale_delta};
    Buffer<float> ks(product({outer, Hkv, rows + scale_delta})), vs(ks.n);
    for (std::size_t i = 0; i < ks.n; ++i) ks.data[i] = 0.01f * static_cast<float>(i % 13), vs.data[i] = 0.02f;
    const sdpa::QuantizedKvCache cache{quant,
                                       view<std::uint8_t, 4>(kc.data.get(), k_shape),
                                       view<std::uint8_t, 4>(vc.data.get(), v_shape),
                                       view<float, 3>(ks.data.get(), s_shape),
                                       view<float, 3>(vs.data.get(), s_shape),
                                       table_view,
                                       lens};
    refused = attend(cache, [&] { return std::array{kc.bytes(), vc.bytes(), ks.bytes(), vs.bytes()}; });
  }
  const bool nan_in = poison && with_new && k_new.n > 0;
  if (quantized && nan_in && !refused) std::abort();  // a NaN written into an 8-bit cache as a finite code
  if (!refused && !nan_in)                            // (a float cache stores a NaN as it is, and attends to it)
    for (std::size_t i = 0; i < out.n; ++i)
      if (!std::isfinite(out.data[i])) std::abort();  // finite inputs, finite codes: a finite output
  return 0;
}
