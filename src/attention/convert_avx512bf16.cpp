// convert_avx512bf16.cpp — vcvtneps2bf16, the one AVX512_BF16 instruction this library has so
// far: compiled with -mavx512bf16 here, run only on CPUs that have it (Zen 4, Sapphire Rapids).
#include <immintrin.h>

#include <cstring>

#include "attention/convert.hpp"

namespace sdpa::detail {

void float_to_bf16_avx512bf16(const float* src, bf16* dst, i64 n) {
  i64 i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
    std::memcpy(dst + i, &h, sizeof h);
  }
  if (i < n) {  // the tail through a masked load: the same instruction for every element
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
    std::memcpy(dst + i, &h, static_cast<std::size_t>(n - i) * sizeof(bf16));
  }
}

}  // namespace sdpa::detail
