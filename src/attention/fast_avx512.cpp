// fast_avx512.cpp — the tiled kernel compiled for the avx512 path (flags: src/CMakeLists.txt).
// decode_avx512.hpp comes first, so this file shows that it stands on its own; it also puts
// the AVX-512 `Vec` and kernel_common.inl into the namespace the tile loops are added to.
#include "attention/amx.hpp"
#include "attention/decode_avx512.hpp"

namespace sdpa::detail::avx512 {
#define SDPA_FUSED_DECODE 1  // forward_item sends decoding items to decode::forward
#define SDPA_AMX_BF16 1      // and table_on<E>(): the 16-bit tiled forward on AMX tiles or vdpbf16ps (amx.hpp)
#include "attention/fast_kernel.inl"
#undef SDPA_AMX_BF16
#undef SDPA_FUSED_DECODE
}  // namespace sdpa::detail::avx512

namespace sdpa::detail {
const FastKernels& fast_kernels_avx512() { return avx512::table(); }
const FastKernels& fast_kernels_avx512_amx() { return avx512::table_on<Engine16::amx>(); }
const FastKernels& fast_kernels_avx512_dot() { return avx512::table_on<Engine16::dot>(); }
}  // namespace sdpa::detail
