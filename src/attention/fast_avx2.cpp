// fast_avx2.cpp — the tiled kernel compiled for the avx2 path (flags: src/CMakeLists.txt).
#include <immintrin.h>

#include "attention/fast.hpp"

namespace sdpa::detail::avx2 {
constexpr Isa kIsa = Isa::avx2;  // the converters of 16-bit tensors (kernel_common.inl)
#include "attention/simd_avx2.hpp"
#include "attention/kernel_common.inl"
#include "attention/fast_kernel.inl"
}  // namespace sdpa::detail::avx2

namespace sdpa::detail {
const FastKernels& fast_kernels_avx2() { return avx2::table(); }
}  // namespace sdpa::detail
