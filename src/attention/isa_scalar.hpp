// isa_scalar.hpp — the scalar path's layer under the attention kernel (kernel/kernel.inl):
// `kIsa` and the one-float `Vec` (simd_scalar.hpp), in sdpa::detail::scalar. No fused decoding
// loop and no 16-bit engine: decoding items take forward_few_lanes, 16-bit operands widen.
// Included by fast_scalar.cpp only, which is compiled with no -m flags.
#pragma once

#include "attention/fast.hpp"

namespace sdpa::detail::scalar {

constexpr Isa kIsa = Isa::scalar;  // the converters of 16-bit tensors (kernel/common.inl)
#include "attention/simd_scalar.hpp"

}  // namespace sdpa::detail::scalar
