// fast_neon.cpp — the attention kernel compiled for the neon path (aarch64; no -m flags:
// AdvSIMD is in every ARMv8-A core).
#include "attention/isa_neon.hpp"  // kIsa, Vec and the features of this path

namespace sdpa::detail::neon {
#include "attention/kernel/kernel.inl"
}  // namespace sdpa::detail::neon

namespace sdpa::detail {
const FastKernels& fast_kernels_neon() { return neon::table(); }
}  // namespace sdpa::detail
