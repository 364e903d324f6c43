// nn/linear_kernel.inl — the fp32 GEMM under every projection, written once and
// compiled once per ISA: included inside namespace sdpa::nn::<isa> by linear_<isa>.cpp,
// which first includes the attention kernel's SIMD layer for that ISA and defines
//   Vec                  (attention/simd_<isa>.hpp) R, a register of Vec::W floats; zero,
//                        set1, load, store; fma(a, b, c) = a·b + c, on a register and on
//                        one float (one fused instruction where the ISA has FMA, a
//                        multiply and an add on the scalar path);
//   kTileRows, kTileVecs the register tile: rows × vectors of C, sized for the ISA's
//                        register file (accumulators + kTileVecs rows of B + a broadcast).
// Like the attention kernel (attention/kernel/), it uses only intrinsics and
// functions of its own namespace, so no inline code compiled for one ISA can be picked
// by the linker for another (ctest kernel.isa_objects_share_no_inline_code).
//
// C (+)= A·B, B row-major, A through two strides (its elements are only ever broadcast,
// so Aᵀ costs nothing: dW = xᵀ·dout reads x as it is). A tile of C stays in registers
// across a chunk of k; each k loads kTileVecs vectors of B's row k (from a packed copy of
// the panel, gemm_panels), broadcasts kTileRows elements of A's column k and issues
// kTileRows·kTileVecs madds. Columns past the last whole tile run in one-vector tiles,
// then the last < W columns one float at a time.
//
// Every element of C is its start value followed by one madd per k, k ascending, in
// whichever tile it falls (a full one, a remainder of fewer rows, a one-vector one or the
// column tail: all do the same operations on it). Rows are what the callers split
// between threads, so the bits do not depend on the thread count.

// Rows [m, m + MR) and columns [n0, n0 + NV·W) of C; B points at column n0 of its row 0.
template <int MR, int NV, GemmStart S>
[[gnu::always_inline]] inline void gemm_tile(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B,
                                             i64 ldb, const float* bias, i64 m, i64 n0, i64 K) {
  using R = Vec::R;
  constexpr int W = Vec::W;
  R acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) {
      if constexpr (S == GemmStart::zero)
        acc[i][v] = Vec::zero();
      else if constexpr (S == GemmStart::bias)
        acc[i][v] = Vec::load(bias + n0 + W * v);
      else
        acc[i][v] = Vec::load(C + (m + i) * ldc + n0 + W * v);
    }
  for (i64 k = 0; k < K; ++k) {
    R b[NV];
    for (int v = 0; v < NV; ++v) b[v] = Vec::load(B + k * ldb + W * v);
    for (int i = 0; i < MR; ++i) {
      const R a = Vec::set1(A[(m + i) * a_m + k * a_k]);
      for (int v = 0; v < NV; ++v) acc[i][v] = Vec::fma(a, b[v], acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) Vec::store(C + (m + i) * ldc + n0 + W * v, acc[i][v]);
}

// The last `left` (< kTileRows) rows from m, as one tile of exactly that height.
template <int MR, int NV, GemmStart S>
void gemm_rows_left(i64 left, float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb,
                    const float* bias, i64 m, i64 n0, i64 K) {
  if constexpr (MR > 0) {
    if (left == MR)
      gemm_tile<MR, NV, S>(C, ldc, A, a_m, a_k, B, ldb, bias, m, n0, K);
    else
      gemm_rows_left<MR - 1, NV, S>(left, C, ldc, A, a_m, a_k, B, ldb, bias, m, n0, K);
  }
}

// All M rows of the columns [n0, n0 + NV·W).
template <int NV, GemmStart S>
void gemm_column_block(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
                       i64 M, i64 n0, i64 K) {
  i64 m = 0;
  for (; m + kTileRows <= M; m += kTileRows) gemm_tile<kTileRows, NV, S>(C, ldc, A, a_m, a_k, B, ldb, bias, m, n0, K);
  gemm_rows_left<kTileRows - 1, NV, S>(M - m, C, ldc, A, a_m, a_k, B, ldb, bias, m, n0, K);
}

// Columns [n0, n0 + NV·W), K cut into chunks whose rows of B fit a 16 KiB panel, each
// chunk's panel copied once into contiguous memory (B's rows are N floats apart, which
// maps a panel read straight from B onto few L1 sets) and used by every row tile. After
// the first chunk C holds the partial sums exactly, so each element still gets its start
// value and then one madd per k in ascending order.
template <int NV, GemmStart S>
void gemm_panels(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias, i64 M,
                 i64 n0, i64 K) {
  constexpr i64 width = NV * Vec::W, chunk = 4096 / width;
  alignas(64) float panel[chunk * width];
  for (i64 k0 = 0; k0 < K; k0 += chunk) {
    const i64 kn = K - k0 < chunk ? K - k0 : chunk;
    for (i64 k = 0; k < kn; ++k)
      for (int v = 0; v < NV; ++v)
        Vec::store(panel + k * width + Vec::W * v, Vec::load(B + (k0 + k) * ldb + n0 + Vec::W * v));
    if (k0 == 0)
      gemm_column_block<NV, S>(C, ldc, A, a_m, a_k, panel, width, bias, M, n0, kn);
    else
      gemm_column_block<NV, GemmStart::accumulate>(C, ldc, A + k0 * a_k, a_m, a_k, panel, width, bias, M, n0, kn);
  }
}

template <GemmStart S>
void gemm_start(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias, i64 M,
                i64 K, i64 N) {
  constexpr i64 W = Vec::W;
  i64 n0 = 0;
  for (; n0 + kTileVecs * W <= N; n0 += kTileVecs * W)
    gemm_panels<kTileVecs, S>(C, ldc, A, a_m, a_k, B, ldb, bias, M, n0, K);
  for (; n0 + W <= N; n0 += W) gemm_panels<1, S>(C, ldc, A, a_m, a_k, B, ldb, bias, M, n0, K);
  for (i64 m = 0; m < M; ++m)
    for (i64 n = n0; n < N; ++n) {
      float s = S == GemmStart::zero ? 0.0f : S == GemmStart::bias ? bias[n] : C[m * ldc + n];
      for (i64 k = 0; k < K; ++k) s = Vec::fma(A[m * a_m + k * a_k], B[k * ldb + n], s);
      C[m * ldc + n] = s;
    }
}

// The GemmF32 of this ISA (see nn/linear.hpp).
void gemm(float* C, i64 ldc, const float* A, i64 a_m, i64 a_k, const float* B, i64 ldb, const float* bias,
          GemmStart start, i64 M, i64 K, i64 N) {
  switch (start) {
    case GemmStart::zero: gemm_start<GemmStart::zero>(C, ldc, A, a_m, a_k, B, ldb, bias, M, K, N); break;
    case GemmStart::bias: gemm_start<GemmStart::bias>(C, ldc, A, a_m, a_k, B, ldb, bias, M, K, N); break;
    case GemmStart::accumulate: gemm_start<GemmStart::accumulate>(C, ldc, A, a_m, a_k, B, ldb, bias, M, K, N); break;
  }
}
