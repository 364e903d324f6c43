// nn/linear_sve512.cpp — the projections' GEMM and GELU for SVE at 512 bits (linear_sve.inl;
// compiled with -msve-vector-bits=512).
#define SDPA_SVE_BITS 512
#include "nn/linear_sve.inl"
