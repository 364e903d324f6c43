// fast_avx512.cpp — the tiled kernel compiled for the avx512 path (flags: src/CMakeLists.txt).
// GCC 12 flags the _mm512_undefined_* operands inside its own AVX-512 headers as
// -Wuninitialized wherever a reduction is inlined (GCC bug 105593): silenced for the header only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#include <cstddef>
#include <type_traits>  // std::integral_constant (decode_avx512.inl)

#include "attention/fast.hpp"

namespace sdpa::detail::avx512 {
#define SDPA_FUSED_DECODE 1  // decode_avx512.inl: the decoding forward of this ISA
#include "attention/simd_avx512.hpp"
#include "attention/fast_kernel.inl"
#undef SDPA_FUSED_DECODE
}  // namespace sdpa::detail::avx512

namespace sdpa::detail {
const FastKernels& fast_kernels_avx512() { return avx512::table(); }
}  // namespace sdpa::detail
