// fast_scalar.cpp — the attention kernel compiled for the scalar path (flags: src/CMakeLists.txt).
#include "attention/isa_scalar.hpp"  // kIsa, Vec and the features of this path

namespace sdpa::detail::scalar {
#include "attention/kernel/kernel.inl"
}  // namespace sdpa::detail::scalar

namespace sdpa::detail {
const FastKernels& fast_kernels_scalar() { return scalar::table(); }
}  // namespace sdpa::detail
