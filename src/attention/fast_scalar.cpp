// fast_scalar.cpp — the tiled kernel compiled for the scalar path (flags: src/CMakeLists.txt).
#include "attention/fast.hpp"

namespace sdpa::detail::scalar {
constexpr Isa kIsa = Isa::scalar;  // the converters of 16-bit tensors (kernel_common.inl)
#include "attention/simd_scalar.hpp"
#include "attention/kernel_common.inl"
#include "attention/fast_kernel.inl"
}  // namespace sdpa::detail::scalar

namespace sdpa::detail {
const FastKernels& fast_kernels_scalar() { return scalar::table(); }
}  // namespace sdpa::detail
