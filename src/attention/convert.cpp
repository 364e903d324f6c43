// convert.cpp — the scalar conversions, the dtype facts and the dispatch of the bulk ones.
#include "attention/convert.hpp"

#include "attention/quantize.hpp"
#include "common/per_isa.hpp"

#include <cmath>

namespace sdpa {
namespace detail {
namespace {

template <class H>
void widen(const H* src, float* dst, i64 n) {
  for (i64 i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
template <class H>
void narrow(const float* src, H* dst, i64 n) {
  for (i64 i = 0; i < n; ++i) dst[i] = H(src[i]);
}

constexpr ConvertKernels kScalar{widen<bf16>, widen<fp16>, narrow<bf16>, narrow<fp16>, quantize_row_scalar};

}  // namespace

const ConvertKernels& convert_kernels_avx2();
const ConvertKernels& convert_kernels_avx512();
const ConvertKernels& convert_kernels_neon();
const ConvertKernels& convert_kernels_sve256();  // fast_sve256.cpp
const ConvertKernels& convert_kernels_sve512();

const ConvertKernels& convert_kernels(Isa isa) {
  // Accessors, not their tables: an ISA's code runs only once that ISA is chosen.
  static const PerIsa<const ConvertKernels& (*)()> set{[]() -> const ConvertKernels& { return kScalar; },
                                                       SDPA_X86_ENTRY(convert_kernels_avx2),
                                                       SDPA_AVX512_ENTRY(convert_kernels_avx512),
                                                       SDPA_ARM_ENTRY(convert_kernels_neon),
                                                       SDPA_ARM_ENTRY(convert_kernels_sve256),
                                                       SDPA_ARM_ENTRY(convert_kernels_sve512)};
  return per_isa(set, isa, "convert_kernels")();
}

bool avx512bf16_supported() { return cpu_features().avx512_bf16; }

}  // namespace detail

const char* dtype_name(Dtype t) {
  switch (t) {
    case Dtype::bf16: return "bfloat16";
    case Dtype::fp16: return "float16";
    default: return "float32";
  }
}

float round_to(Dtype t, float x) {
  switch (t) {
    case Dtype::bf16: return static_cast<float>(bf16(x));
    case Dtype::fp16: return static_cast<float>(fp16(x));
    default: return x;
  }
}

double unit_roundoff(Dtype t) {
  switch (t) {
    case Dtype::bf16: return std::ldexp(1.0, -bf16::kSignificandBits);
    case Dtype::fp16: return std::ldexp(1.0, -fp16::kSignificandBits);
    default: return std::ldexp(1.0, -24);
  }
}

void to_float(const bf16* src, float* dst, std::int64_t n) { detail::convert_kernels(Isa::automatic).bf16_to_float(src, dst, n); }
void to_float(const fp16* src, float* dst, std::int64_t n) { detail::convert_kernels(Isa::automatic).fp16_to_float(src, dst, n); }
void from_float(const float* src, bf16* dst, std::int64_t n) { detail::convert_kernels(Isa::automatic).float_to_bf16(src, dst, n); }
void from_float(const float* src, fp16* dst, std::int64_t n) { detail::convert_kernels(Isa::automatic).float_to_fp16(src, dst, n); }

}  // namespace sdpa
