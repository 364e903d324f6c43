// avx512_intrinsics.hpp — <immintrin.h> for the AVX-512 translation units.
//
// GCC 12 flags the _mm512_undefined_* operands inside its own AVX-512 headers as
// -Wuninitialized wherever a reduction is inlined (GCC bug 105593): silenced for the
// header only, here, once.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
