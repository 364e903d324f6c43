// nn/linear_sve256.cpp — the projections' GEMM and GELU for SVE at 256 bits (linear_sve.inl;
// compiled with -msve-vector-bits=256).
#define SDPA_SVE_BITS 256
#include "nn/linear_sve.inl"
