// fast_avx512.cpp — the attention kernel compiled for the avx512 path (flags: src/CMakeLists.txt).
#include "attention/isa_avx512.hpp"  // kIsa, Vec and the features of this path

namespace sdpa::detail::avx512 {
#include "attention/kernel/kernel.inl"
}  // namespace sdpa::detail::avx512

namespace sdpa::detail {
const FastKernels& fast_kernels_avx512() { return avx512::table(); }
const FastKernels& fast_kernels_avx512_amx() { return avx512::table_on<Engine16::amx>(); }
const FastKernels& fast_kernels_avx512_dot() { return avx512::table_on<Engine16::dot>(); }
}  // namespace sdpa::detail
