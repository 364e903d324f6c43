// fast_avx2.cpp — the attention kernel compiled for the avx2 path (flags: src/CMakeLists.txt).
#include "attention/isa_avx2.hpp"  // kIsa, Vec and the features of this path

namespace sdpa::detail::avx2 {
#include "attention/kernel/kernel.inl"
}  // namespace sdpa::detail::avx2

namespace sdpa::detail {
const FastKernels& fast_kernels_avx2() { return avx2::table(); }
}  // namespace sdpa::detail
