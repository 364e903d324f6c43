// fast_avx2.cpp — the tiled kernel compiled for the avx2 path (flags: src/CMakeLists.txt).
// decode_avx2.hpp comes first, as in fast_avx512.cpp: it puts the AVX2 `Vec`, the shared
// helpers and the fused decoding loop into the namespace the tile loops are added to.
#include "attention/decode_avx2.hpp"

namespace sdpa::detail::avx2 {
#define SDPA_FUSED_DECODE 1  // forward_item sends decoding items to decode::forward
#include "attention/fast_kernel.inl"
#undef SDPA_FUSED_DECODE
}  // namespace sdpa::detail::avx2

namespace sdpa::detail {
const FastKernels& fast_kernels_avx2() { return avx2::table(); }
}  // namespace sdpa::detail
