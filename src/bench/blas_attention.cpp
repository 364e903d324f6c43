// blas_attention.cpp — see blas_attention.hpp.
#include "bench/blas_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <cblas.h>
#include <omp.h>

extern "C" {
void openblas_set_num_threads(int);  // OpenBLAS: threads of its own
char* openblas_get_config(void);
}

namespace sdpa::bench {
namespace {

using i64 = std::int64_t;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// S = β Q Kᵀ (Nq × Nk), -inf above the top-left diagonal when causal.
void scores(const BlasShape& s, const float* q, const float* k, float* S) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(s.Nq), int(s.Nk), int(s.Dk), float(s.scale), q, int(s.Dk), k,
              int(s.Dk), 0.0f, S, int(s.Nk));
  if (s.causal)
    for (i64 i = 0; i < s.Nq; ++i)
      for (i64 j = i + 1; j < s.Nk; ++j) S[i * s.Nk + j] = kNegInf;
}

}  // namespace

bool blas_available() { return true; }

const char* blas_name() {
  static const char* name = openblas_get_config();
  return name;
}

void blas_forward(const BlasShape& s, const float* q, const float* k, const float* v, float* out, float* lse,
                  int threads) {
  openblas_set_num_threads(1);
  const i64 group = s.Hq / s.Hkv, heads = s.B * s.Hq;
  std::vector<float> scratch(static_cast<std::size_t>(threads * s.Nq * s.Nk));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (i64 bh = 0; bh < heads; ++bh) {
    const i64 b = bh / s.Hq, h = bh % s.Hq, g = b * s.Hkv + h / group;
    float* S = scratch.data() + omp_get_thread_num() * s.Nq * s.Nk;  // (Nq, Nk)
    scores(s, q + bh * s.Nq * s.Dk, k + g * s.Nk * s.Dk, S);
    for (i64 i = 0; i < s.Nq; ++i) {  // softmax, row by row
      float* r = S + i * s.Nk;
      float m = kNegInf;
      for (i64 j = 0; j < s.Nk; ++j) m = std::max(m, r[j]);
      float sum = 0.0f;
      for (i64 j = 0; j < s.Nk; ++j) sum += (r[j] = std::exp(r[j] - m));
      const float inv = 1.0f / sum;
      for (i64 j = 0; j < s.Nk; ++j) r[j] *= inv;
      lse[bh * s.Nq + i] = m + std::log(sum);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.Nq), int(s.Dv), int(s.Nk), 1.0f, S, int(s.Nk),
                v + g * s.Nk * s.Dv, int(s.Dv), 0.0f, out + bh * s.Nq * s.Dv, int(s.Dv));
  }
}

void blas_backward(const BlasShape& s, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, int threads) {
  openblas_set_num_threads(1);
  const i64 group = s.Hq / s.Hkv, kv_heads = s.B * s.Hkv, NN = s.Nq * s.Nk;
  std::vector<float> scratch(static_cast<std::size_t>(threads * (2 * NN + s.Nq)));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (i64 bg = 0; bg < kv_heads; ++bg) {
    float* P = scratch.data() + omp_get_thread_num() * (2 * NN + s.Nq);  // (Nq, Nk)
    float* dS = P + NN;                                                  // (Nq, Nk)
    float* delta = dS + NN;                                              // (Nq)
    const i64 b = bg / s.Hkv, g = bg % s.Hkv;
    const float* K = k + bg * s.Nk * s.Dk;
    const float* V = v + bg * s.Nk * s.Dv;
    for (i64 h = g * group; h < (g + 1) * group; ++h) {
      const i64 bh = b * s.Hq + h;
      const float *Q = q + bh * s.Nq * s.Dk, *O = out + bh * s.Nq * s.Dv, *dO = dout + bh * s.Nq * s.Dv;
      scores(s, Q, K, P);
      for (i64 i = 0; i < s.Nq; ++i) {  // P = exp(S - lse), delta = rowsum(dO ∘ O)
        const float L = lse[bh * s.Nq + i];
        for (i64 j = 0; j < s.Nk; ++j) P[i * s.Nk + j] = std::exp(P[i * s.Nk + j] - L);
        float d = 0.0f;
        for (i64 e = 0; e < s.Dv; ++e) d += dO[i * s.Dv + e] * O[i * s.Dv + e];
        delta[i] = d;
      }
      const float first = h == g * group ? 0.0f : 1.0f;  // = into dk, dv for the group's first head, then +=
      // dV (+)= Pᵀ dO
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(s.Nk), int(s.Dv), int(s.Nq), 1.0f, P, int(s.Nk), dO,
                  int(s.Dv), first, dv + bg * s.Nk * s.Dv, int(s.Dv));
      // dP = dO Vᵀ, then dS = P ∘ (dP − delta)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(s.Nq), int(s.Nk), int(s.Dv), 1.0f, dO, int(s.Dv), V,
                  int(s.Dv), 0.0f, dS, int(s.Nk));
      for (i64 i = 0; i < s.Nq; ++i)
        for (i64 j = 0; j < s.Nk; ++j) dS[i * s.Nk + j] = P[i * s.Nk + j] * (dS[i * s.Nk + j] - delta[i]);
      // dQ = β dS K, dK (+)= β dSᵀ Q
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.Nq), int(s.Dk), int(s.Nk), float(s.scale), dS,
                  int(s.Nk), K, int(s.Dk), 0.0f, dq + bh * s.Nq * s.Dk, int(s.Dk));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(s.Nk), int(s.Dk), int(s.Nq), float(s.scale), dS,
                  int(s.Nk), Q, int(s.Dk), first, dk + bg * s.Nk * s.Dk, int(s.Dk));
    }
  }
}

}  // namespace sdpa::bench
