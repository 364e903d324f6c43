// fast_sve.inl — the attention kernel and the bulk bf16/fp16 conversions compiled for the sve
// path at one vector length: included by fast_sve256.cpp and fast_sve512.cpp after they set
// SDPA_SVE_BITS (common/sve_width.hpp), each compiled with its -msve-vector-bits.
#include "attention/convert.hpp"
#include "attention/quantize.hpp"
#include "attention/isa_sve.hpp"  // kIsa, Vec and the features of this path

namespace sdpa::detail::SDPA_SVE_NAMESPACE {
#include "attention/kernel/kernel.inl"

struct HalfVec {  // convert_kernel.inl's vector: half_sve.hpp's loads and stores, whole vectors
  static constexpr i64 kLanes = Vec::W;
  static void widen(const bf16* src, float* dst) { Vec::store(dst, load_bf16(all_lanes(), src)); }
  static void widen(const fp16* src, float* dst) { Vec::store(dst, load_fp16(all_lanes(), src)); }
  static void narrow(const float* src, bf16* dst) { store_bf16(dst, Vec::load(src)); }
  static void narrow(const float* src, fp16* dst) { store_fp16(dst, Vec::load(src)); }
  static constexpr auto quantize_row = &quantize_row_neon;  // every SVE CPU has NEON: its encoder
};

#include "attention/convert_kernel.inl"
}  // namespace sdpa::detail::SDPA_SVE_NAMESPACE

namespace sdpa::detail {
const FastKernels& SDPA_SVE_NAMED(fast_kernels)() { return SDPA_SVE_NAMESPACE::table(); }
const ConvertKernels& SDPA_SVE_NAMED(convert_kernels)() { return SDPA_SVE_NAMESPACE::convert_table(); }
}  // namespace sdpa::detail
