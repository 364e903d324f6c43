// fast_avx512.cpp — the tiled kernel compiled for the avx512 path (flags: src/CMakeLists.txt).
#include <immintrin.h>
#include <cstddef>

#include "attention/fast.hpp"

namespace sdpa::detail::avx512 {
#include "attention/simd_avx512.hpp"
#include "attention/fast_kernel.inl"
}  // namespace sdpa::detail::avx512

namespace sdpa::detail {
const FastKernels& fast_kernels_avx512() { return avx512::table(); }
}  // namespace sdpa::detail
