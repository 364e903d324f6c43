// util.hpp — buffers, random inputs and the error rule shared by the kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/engine16.hpp"
#include "attention/fast.hpp"
#include "common/tolerance.hpp"
#include "sdpa/sdpa.hpp"

namespace sdpa::test {

using i64 = std::int64_t;
using tolerance::kEps32;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// An owning 4-D buffer. Stored as [d0, d1, d2, d3] row-major, or — when bnhd is set
// for a (B, H, N, D) tensor — as [B, N, H, D] and viewed through strides.
template <class T>
struct Buf {
  std::vector<T> data;
  std::array<i64, 4> shape{};
  bool bnhd = false;

  Buf() = default;
  Buf(std::array<i64, 4> s, bool bnhd_layout = false) : shape(s), bnhd(bnhd_layout) {
    data.assign(static_cast<std::size_t>(s[0] * s[1] * s[2] * s[3]), T(0));
  }
  View4<T> view() {
    return bnhd ? from_bnhd(data.data(), shape[0], shape[2], shape[1], shape[3]) : contiguous(data.data(), shape);
  }
  View4<const T> cview() const {
    auto* p = data.data();
    return bnhd ? from_bnhd(p, shape[0], shape[2], shape[1], shape[3]) : contiguous(p, shape);
  }
  T& at(i64 a, i64 b, i64 c, i64 d) { return view()(a, b, c, d); }
  template <class U>
  Buf<U> cast() const {
    Buf<U> o(shape, bnhd);
    for (std::size_t x = 0; x < data.size(); ++x) o.data[x] = static_cast<U>(data[x]);
    return o;
  }
};

// (B, H, N) log-sum-exp buffer.
template <class T>
struct Buf3 {
  std::vector<T> data;
  std::array<i64, 3> shape{};
  Buf3() = default;
  explicit Buf3(std::array<i64, 3> s) : shape(s) { data.assign(static_cast<std::size_t>(s[0] * s[1] * s[2]), T(0)); }
  View3<T> view() { return contiguous(data.data(), shape); }
  View3<const T> cview() const { return contiguous(data.data(), shape); }
};

inline void fill_normal(std::vector<float>& v, std::mt19937_64& rng, double stddev = 1.0) {
  std::normal_distribution<double> n(0.0, stddev);
  for (auto& x : v) x = static_cast<float>(n(rng));
}

using tolerance::floors;
using tolerance::judge;
using tolerance::max_abs;
using tolerance::max_abs_err;
using tolerance::max_row_norm;

#define SDPA_EXPECT_WITHIN(what, v)                                                                           \
  EXPECT_LE((v).fast, (v).bound) << what << ": fast error " << (v).fast << ", naive fp32 error " << (v).naive \
                                 << ", bound " << (v).bound

// The tolerance rule for a kernel computing in a 16-bit dtype, FlashAttention's: its error
// against the fp64 reference at most twice that of the naive implementation in the same dtype
// (sdpa::reference::forward_naive / backward_naive), plus the floor of fp32 arithmetic and of
// storing the outputs in the dtype (tolerance::with_output_rounding). q, k, v, dout hold values
// of the dtype (round_to); the yardstick computes the gold and the naive results once, and
// judges any number of candidates. Shapes: q (B, Hq, Nq, Dk), k (B, Hkv, Nk, Dk), v and dout alike.
struct DtypeYardstick {
  Buf<double> out64, dq64, dk64, dv64;
  Buf3<double> lse64;
  Buf<float> outn, dqn, dkn, dvn;
  Buf3<float> lsen;
  tolerance::Floors fl{};
  // With Options::sinks: ∂L/∂sinks, (Hq), gold and naive, and its floor (below).
  std::vector<float> dsinks64, dsinksn;
  double dsinks_floor = 0.0;

  DtypeYardstick(Dtype t, const Buf<float>& q, const Buf<float>& k, const Buf<float>& v, const Buf<float>& dout,
                 const Options& opt) {
    const auto [B, Hq, Nq, Dk] = q.shape;
    const i64 Dv = v.shape[3];
    const Buf<double> q64 = q.cast<double>(), k64 = k.cast<double>(), v64 = v.cast<double>(), do64 = dout.cast<double>();
    out64 = Buf<double>({B, Hq, Nq, Dv}, q.bnhd), lse64 = Buf3<double>({B, Hq, Nq});
    reference::forward<double, double>(q64.cview(), k64.cview(), v64.cview(), out64.view(), lse64.view(), opt);
    dq64 = Buf<double>(q.shape, q.bnhd), dk64 = Buf<double>(k.shape, k.bnhd), dv64 = Buf<double>(v.shape, v.bnhd);
    Options with_dsinks = opt, with_dsinks_naive = opt;
    if (!opt.sinks.empty()) {
      dsinks64.assign(static_cast<std::size_t>(Hq), 0.0f), dsinksn.assign(static_cast<std::size_t>(Hq), 0.0f);
      with_dsinks.dsinks = {dsinks64.data(), {Hq}, {1}};
      with_dsinks_naive.dsinks = {dsinksn.data(), {Hq}, {1}};
    }
    reference::backward<double, double>(q64.cview(), k64.cview(), v64.cview(), out64.cview(), lse64.cview(),
                                        do64.cview(), dq64.view(), dk64.view(), dv64.view(), with_dsinks);
    outn = Buf<float>({B, Hq, Nq, Dv}, q.bnhd), lsen = Buf3<float>({B, Hq, Nq});
    reference::forward_naive(t, q.cview(), k.cview(), v.cview(), outn.view(), lsen.view(), opt);
    dqn = Buf<float>(q.shape, q.bnhd), dkn = Buf<float>(k.shape, k.bnhd), dvn = Buf<float>(v.shape, v.bnhd);
    reference::backward_naive(t, q.cview(), k.cview(), v.cview(), outn.cview(), lsen.cview(), dout.cview(), dqn.view(),
                              dkn.view(), dvn.view(), with_dsinks_naive);
    const double mask_max = opt.mask.empty() ? 0.0 : max_abs_mask(opt.mask);
    auto f32 = tolerance::floors(q.data, k.data, v.data, dout.data, Dk, Dv, std::abs(resolve_scale(opt, Dk)),
                                 opt.softcap.value_or(0.0), mask_max, max_abs(lse64.data), max_abs(dv64.data));
    // Dropout (as test_grid.cpp): the kept weights grow by 1/(1 - p), and with them every term
    // the floors of out, dq and dk bound (dv's is taken from max|dv|, which holds the factor).
    const double keep_scale = opt.dropout.keep_scale();
    f32.out *= keep_scale, f32.dq *= keep_scale, f32.dk *= keep_scale;
    fl = tolerance::with_output_rounding(f32, unit_roundoff(t), max_abs(out64.data), max_abs(dq64.data),
                                         max_abs(dk64.data), max_abs(dv64.data));
    // ∂L/∂sinks reads out (through Δ = dout·out) and lse (through p_sink): their floors carry over.
    if (!opt.sinks.empty())
      dsinks_floor = tolerance::sink_grad_floor(
          B, Hq, Nq, Dv, [&](i64 b, i64 h, i64 i, i64 e) { return out64.cview()(b, h, i, e); },
          [&](i64 b, i64 h, i64 i) { return lse64.cview()(b, h, i); },
          [&](i64 b, i64 h, i64 i, i64 e) { return dout.cview()(b, h, i, e); }, [&](i64 h) { return opt.sinks(h); },
          fl.out, fl.lse);
  }
  tolerance::Verdict out(const std::vector<float>& x) const { return judge(x, outn.data, out64.data, fl.out); }
  tolerance::Verdict lse(const std::vector<float>& x) const { return judge(x, lsen.data, lse64.data, fl.lse); }
  tolerance::Verdict dq(const std::vector<float>& x) const { return judge(x, dqn.data, dq64.data, fl.dq); }
  tolerance::Verdict dk(const std::vector<float>& x) const { return judge(x, dkn.data, dk64.data, fl.dk); }
  tolerance::Verdict dv(const std::vector<float>& x) const { return judge(x, dvn.data, dv64.data, fl.dv); }
  tolerance::Verdict dsinks(const std::vector<float>& x) const { return judge(x, dsinksn, dsinks64, dsinks_floor); }

 private:
  static double max_abs_mask(const View4<const float>& m) {
    double mx = 0;
    for (i64 a = 0; a < m.shape[0]; ++a)
      for (i64 b = 0; b < m.shape[1]; ++b)
        for (i64 c = 0; c < m.shape[2]; ++c)
          for (i64 d = 0; d < m.shape[3]; ++d)
            if (std::isfinite(m(a, b, c, d))) mx = std::max(mx, std::abs(static_cast<double>(m(a, b, c, d))));
    return mx;
  }
};

/// Rounds every element to dtype t (inputs of a 16-bit kernel).
inline void round_all(std::vector<float>& x, Dtype t) {
  for (auto& e : x) e = round_to(t, e);
}

// ISAs this CPU can run (scalar always), or of them those SDPA_TEST_ISAS names (a list such
// as "sve" or "scalar,neon"): a run under QEMU at another SVE length need not repeat the paths
// the previous run tested (scripts/test.sh).
inline std::vector<Isa> runnable_isas() {
  const char* only = std::getenv("SDPA_TEST_ISAS");
  const std::string list = only != nullptr ? "," + std::string(only) + "," : "";
  std::vector<Isa> out;
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon, Isa::sve})
    if (isa_supported(i) && (list.empty() || list.find("," + std::string(isa_name(i)) + ",") != std::string::npos))
      out.push_back(i);
  return out;
}

using detail::fast_kernels;  // one ISA's table (attention/fast.hpp)

// A (B, Hq, Nq, Dk) / (B, Hkv, Nk, Dk|Dv) problem in fp32 with its outputs and gradients, inputs
// standard normal from `seed` (Buf::cast gives the same values in a 16-bit dtype).
struct Problem4 {
  i64 B, Hq, Hkv, Nq, Nk, Dk, Dv;
  Buf<float> q, k, v, dout, out, dq, dk, dv;
  Buf3<float> lse;
  Problem4(i64 b, i64 hq, i64 hkv, i64 nq, i64 nk, i64 dk_, i64 dv_, std::uint64_t seed)
      : B(b),
        Hq(hq),
        Hkv(hkv),
        Nq(nq),
        Nk(nk),
        Dk(dk_),
        Dv(dv_),
        q({b, hq, nq, dk_}),
        k({b, hkv, nk, dk_}),
        v({b, hkv, nk, dv_}),
        dout({b, hq, nq, dv_}),
        out({b, hq, nq, dv_}),
        dq({b, hq, nq, dk_}),
        dk({b, hkv, nk, dk_}),
        dv({b, hkv, nk, dv_}),
        lse({b, hq, nq}) {
    std::mt19937_64 rng(seed);
    fill_normal(q.data, rng);
    fill_normal(k.data, rng);
    fill_normal(v.data, rng);
    fill_normal(dout.data, rng);
  }
  void run(const Options& o) {
    forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
    backward(q.cview(), k.cview(), v.cview(), out.cview(), lse.cview(), dout.cview(), dq.view(), dk.view(), dv.view(),
             o);
  }
};

}  // namespace sdpa::test

namespace sdpa::detail {
// kernel/kernel.inl as the AVX-512 path compiles them (W = 16, its
// register tile, 16-bit masks), on pairs of AVX2 registers (fast_w16_on_avx2.cpp): built
// into the kernel tests only (where CMake's SDPA_TEST_W16_ON_AVX2 is on); needs AVX2.
const FastKernels& fast_kernels_w16_on_avx2();
const ConvertKernels& convert_kernels_w16_on_avx2();  // convert_kernel.inl at 16 lanes, likewise
}  // namespace sdpa::detail

namespace sdpa::test {

// One kernel the tests run: each ISA this CPU runs, and where it runs AVX2 also the AVX-512
// path's kernel logic at W = 16 on AVX2 (docs/design.md, "The AVX-512 path's logic on AVX2"),
// whose calls take Options::isa = avx2 and the emulated table through the test seam
// (detail::set_kernels_for_tests) while a KernelScope lives.
struct KernelVariant {
  Isa isa;                                        // Options::isa of its calls
  const detail::FastKernels* emulated = nullptr;  // installed by KernelScope; null: the ISA's own table
  const char* name = "";                          // for traces
  const char* id = "";                            // for gtest's parameter names
  const detail::FastKernels& kernels() const { return emulated != nullptr ? *emulated : fast_kernels(isa); }
  // The engine of its 16-bit products.
  Engine16 engine() const { return kernels().engine; }
};

inline std::vector<KernelVariant> kernel_variants() {
  std::vector<KernelVariant> out;
  for (Isa isa : runnable_isas()) {
#if defined(__x86_64__) && !defined(SDPA_NO_AVX512)
    if (isa == Isa::avx512 && (cpu_features().amx_bf16 || cpu_features().avx512_bf16)) {
      // Every AVX-512 table this CPU runs, whatever SDPA_AMX and SDPA_BF16_DOT say: 16-bit
      // widened to fp32, on AMX tiles, and on vdpbf16ps (a CPU with AMX has AVX512_BF16 too).
      out.push_back({isa, &detail::fast_kernels_avx512(), "avx512", "avx512"});
      if (cpu_features().amx_bf16)
        out.push_back({isa, &detail::fast_kernels_avx512_amx(), "avx512 with AMX-BF16", "avx512_amx"});
      out.push_back({isa, &detail::fast_kernels_avx512_dot(), "avx512 with AVX512_BF16 dot products", "avx512_dot"});
      continue;
    }
#elif defined(__aarch64__)
    if (isa == Isa::neon && cpu_features().arm_bf16) {
      // Both neon tables, whatever SDPA_BF16_DOT says: widened, and bf16 on BFDOT.
      out.push_back({isa, &detail::fast_kernels_neon(), "neon", "neon"});
      out.push_back({isa, &detail::fast_kernels_neon_dot(), "neon with BFDOT", "neon_dot"});
      continue;
    }
#endif
    out.push_back({isa, nullptr, isa_name(isa), isa_name(isa)});
  }
#if defined(__x86_64__) && SDPA_TEST_W16_ON_AVX2
  if (isa_supported(Isa::avx2))
    out.push_back({Isa::avx2, &detail::fast_kernels_w16_on_avx2(), "avx512-shaped (W=16 on AVX2)", "w16_on_avx2"});
#endif
  return out;
}

// While it lives, sdpa::forward and sdpa::backward run the variant's table (calls with
// Options::isa = variant.isa; the seam overrides the ISA's own table for an emulated one).
class KernelScope {
 public:
  explicit KernelScope(const KernelVariant& v) { detail::set_kernels_for_tests(v.emulated); }
  ~KernelScope() { detail::set_kernels_for_tests(nullptr); }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;
};

// body(variant, options) for every kernel variant, in the variant's scope, the options `base` with
// the variant's ISA: the loop most kernel tests run their case in.
template <class Body>
void for_each_variant(const Options& base, Body body) {
  for (const KernelVariant& kv : kernel_variants()) {
    SCOPED_TRACE(kv.name);
    const KernelScope scope(kv);
    Options o = base;
    o.isa = kv.isa;
    body(kv, o);
  }
}

// Lowers the strided copies' memory cap and so the operand packings' (api.cpp, TightCopies and OperandPack) for one scope.
class CopyLimit {
 public:
  explicit CopyLimit(i64 bytes) : saved_(detail::strided_copy_limit_bytes()) {
    detail::set_strided_copy_limit_bytes(bytes);
  }
  ~CopyLimit() { detail::set_strided_copy_limit_bytes(saved_); }
  CopyLimit(const CopyLimit&) = delete;
  CopyLimit& operator=(const CopyLimit&) = delete;

 private:
  i64 saved_;
};

// A test parameterised by the kernel variant: the variant's scope for the test's body.
class VariantTest : public ::testing::TestWithParam<KernelVariant> {
 protected:
  void SetUp() override { detail::set_kernels_for_tests(GetParam().emulated); }
  void TearDown() override { detail::set_kernels_for_tests(nullptr); }
};
inline std::string variant_id(const ::testing::TestParamInfo<KernelVariant>& i) { return i.param.id; }
inline void PrintTo(const KernelVariant& v, std::ostream* os) { *os << v.name; }

}  // namespace sdpa::test

namespace sdpa {
// Readable names for ISA-parameterised tests in gtest and ctest output.
inline void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }
}  // namespace sdpa
