// util.hpp — buffers, random inputs and the error rule shared by the kernel tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

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

// ISAs this CPU can run (scalar always).
inline std::vector<Isa> runnable_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

// The kernel table of one ISA, for tests that call the kernel's pieces directly.
inline const detail::FastKernels& fast_kernels(Isa isa) {
  switch (isa) {
    case Isa::avx512: return detail::fast_kernels_avx512();
    case Isa::avx2: return detail::fast_kernels_avx2();
    default: return detail::fast_kernels_scalar();
  }
}

}  // namespace sdpa::test

namespace sdpa {
// Readable names for ISA-parameterised tests in gtest and ctest output.
inline void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }
}  // namespace sdpa
