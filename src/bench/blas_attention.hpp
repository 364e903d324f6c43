// blas_attention.hpp — the plain BLAS attention `sdpa bench` compares against:
// per (batch, head) S = β Q Kᵀ (materialised, Nq × Nk), row softmax, O = P V, and the
// backward from the same matrices. What one writes first with a BLAS at hand; the
// baseline the tiled kernel has to beat. Contiguous [B, H, N, D] buffers, no masks
// but top-left causal, Hq % Hkv == 0. Heads are spread over OpenMP threads, each
// calling a single-threaded sgemm (OpenBLAS's own threads are turned off).
#pragma once

#include <cstdint>

namespace sdpa::bench {

struct BlasShape {
  std::int64_t B = 1, Hq = 1, Hkv = 1, Nq = 1, Nk = 1, Dk = 1, Dv = 1;
  bool causal = false;  // top-left
  double scale = 1.0;
};

/// Whether this build has the baseline (OpenBLAS is optional: without it, blas_none.cpp
/// stands in and the suite marks the column "not built"), and what was linked.
bool blas_available();
const char* blas_name();

/// out (B,Hq,Nq,Dv), lse (B,Hq,Nq). Scratch: threads × Nq × Nk floats.
void blas_forward(const BlasShape& s, const float* q, const float* k, const float* v, float* out, float* lse,
                  int threads);

/// dq (B,Hq,Nq,Dk), dk (B,Hkv,Nk,Dk), dv (B,Hkv,Nk,Dv). Recomputes P from q, k and lse.
/// Query heads sharing a kv head are done by one thread in order (no atomics).
void blas_backward(const BlasShape& s, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, int threads);

}  // namespace sdpa::bench
