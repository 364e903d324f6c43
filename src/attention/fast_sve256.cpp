// fast_sve256.cpp — the attention kernel and the 16-bit conversions for SVE at 256 bits
// (fast_sve.inl; compiled with -msve-vector-bits=256).
#define SDPA_SVE_BITS 256
#include "attention/fast_sve.inl"
