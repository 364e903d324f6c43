// fast_neon.cpp — the attention kernel compiled for the neon path (aarch64; no -m flags:
// AdvSIMD is in every ARMv8-A core), widened and with the BFDOT engine (engine16_neon.cpp,
// the one file with BF16 instructions).
#include "attention/isa_neon.hpp"  // kIsa, Vec and the features of this path

namespace sdpa::detail::neon {
#include "attention/kernel/kernel.inl"
}  // namespace sdpa::detail::neon

namespace sdpa::detail {
const FastKernels& fast_kernels_neon() { return neon::table(); }
const FastKernels& fast_kernels_neon_dot() { return neon::table_on<Engine16::dot>(); }
}  // namespace sdpa::detail
