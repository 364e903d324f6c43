// fast_sve512.cpp — the attention kernel and the 16-bit conversions for SVE at 512 bits
// (fast_sve.inl; compiled with -msve-vector-bits=512).
#define SDPA_SVE_BITS 512
#include "attention/fast_sve.inl"
