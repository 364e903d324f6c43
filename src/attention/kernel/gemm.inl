// gemm.inl — the fp32 GEMM of the tiled kernel, C (+)= A·B register-blocked on `Vec`, and
// its variant that skips zero weights where B may hold an inf or NaN.

// ---------------------------------------------------------------------------------------
// A GEMM's B operand, K rows of N floats: at one stride (StridedRows), or each row where a table
// of row pointers says (TableRows: a paged cache's V rows, read in place block by block). Row k's
// column n0 on is row(k) + n0 either way, so the loops below take either and do the same
// arithmetic in the same order.
struct StridedRows {
  const float* data;
  i64 ld;
  const float* row(i64 k) const { return data + k * ld; }
  StridedRows from_col(i64 n0) const { return {data + n0, ld}; }
};
struct TableRows {
  const float* const* rows;
  i64 col = 0;
  const float* row(i64 k) const { return rows[k] + col; }
  TableRows from_col(i64 n0) const { return {rows, col + n0}; }
};

// C (+)= A·B: C (M × N), A (M × K) with strides (ars, acs), B (K × N) rows (StridedRows:
// of ldb). N is a multiple of W. Register-blocked MR rows × NV vectors.
template <int MR, int NV, bool ACC, class BRows>
inline void gemm_block(i64 K, const float* A, i64 ars, i64 acs, BRows B, float* C, i64 ldc) {
  R acc[MR][NV];
  SDPA_UNROLL
  for (int r = 0; r < MR; ++r) {
    SDPA_UNROLL
    for (int v = 0; v < NV; ++v) acc[r][v] = ACC ? Vec::load(C + r * ldc + v * W) : Vec::zero();
  }
  for (i64 k = 0; k < K; ++k) {
    R bv[NV];
    SDPA_UNROLL
    for (int v = 0; v < NV; ++v) bv[v] = Vec::load(B.row(k) + v * W);
    SDPA_UNROLL
    for (int r = 0; r < MR; ++r) {
      const R a = Vec::set1(A[r * ars + k * acs]);
      SDPA_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = Vec::fma(a, bv[v], acc[r][v]);
    }
  }
  SDPA_UNROLL
  for (int r = 0; r < MR; ++r) {
    SDPA_UNROLL
    for (int v = 0; v < NV; ++v) Vec::store(C + r * ldc + v * W, acc[r][v]);
  }
}

template <int MR, bool ACC, class BRows>
inline void gemm_rows(i64 nv, i64 K, const float* A, i64 ars, i64 acs, BRows B, float* C, i64 ldc) {
  with_count<Vec::NV>(nv, [&](auto nvc) { gemm_block<MR, decltype(nvc)::value, ACC>(K, A, ars, acs, B, C, ldc); });
}

// SKIP_ZERO: terms with A = 0 are skipped, so a zero weight never multiplies an
// inf or NaN in B (used only when B holds a non-finite value).
template <bool ACC, bool SKIP_ZERO, class BRows>
void gemm_on(i64 M, i64 N, i64 K, const float* A, i64 ars, i64 acs, BRows B, float* C, i64 ldc) {
  if constexpr (SKIP_ZERO) {
    for (i64 m = 0; m < M; ++m) {
      float* c = C + m * ldc;
      if (!ACC)
        for (i64 n = 0; n < N; n += W) Vec::store(c + n, Vec::zero());
      for (i64 k = 0; k < K; ++k) {
        const float a = A[m * ars + k * acs];
        if (a == 0.0f) continue;
        const R av = Vec::set1(a);
        for (i64 n = 0; n < N; n += W) Vec::store(c + n, Vec::fma(av, Vec::load(B.row(k) + n), Vec::load(c + n)));
      }
    }
    return;
  }
  constexpr i64 MR = Vec::MR;
  for (i64 n0 = 0; n0 < N; n0 += Vec::NV * W) {
    const i64 nv = imin(Vec::NV, (N - n0) / W);
    i64 m0 = 0;
    for (; m0 + MR <= M; m0 += MR)
      gemm_rows<MR, ACC>(nv, K, A + m0 * ars, ars, acs, B.from_col(n0), C + m0 * ldc + n0, ldc);
    const float* a = A + m0 * ars;
    float* c = C + m0 * ldc + n0;
    with_count<MR - 1>(M - m0, [&](auto mr) {  // the rows left, fewer than a block's
      gemm_rows<decltype(mr)::value, ACC>(nv, K, a, ars, acs, B.from_col(n0), c, ldc);
    });
  }
}

// The same, B's rows at one stride ldb.
template <bool ACC, bool SKIP_ZERO>
void gemm(i64 M, i64 N, i64 K, const float* A, i64 ars, i64 acs, const float* B, i64 ldb, float* C, i64 ldc) {
  gemm_on<ACC, SKIP_ZERO>(M, N, K, A, ars, acs, StridedRows{B, ldb}, C, ldc);
}

// Whether every element of rows [0, n) (width D, row stride ld, unit stride along D) is
// finite: Σ x·0 is NaN as soon as one x is ±inf or NaN.
inline bool rows_finite(const float* x, i64 ld, i64 n, i64 D) {
  // Eight rows at a time, one accumulator each: one chain through all n·D/W FMAs would
  // be bound by the FMA latency (and cost as much as a decoding tile's arithmetic).
  const R z = Vec::zero();
  R a[8] = {z, z, z, z, z, z, z, z};
  const i64 d_vec = D / W * W;
  float tail = 0.0f;
  i64 c = 0;
  for (; c + 8 <= n; c += 8)
    for (i64 d = 0; d < d_vec; d += W)
      for (int u = 0; u < 8; ++u) a[u] = Vec::fma(Vec::load(x + (c + u) * ld + d), z, a[u]);
  for (; c < n; ++c)
    for (i64 d = 0; d < d_vec; d += W) a[0] = Vec::fma(Vec::load(x + c * ld + d), z, a[0]);
  for (i64 r = 0; r < n; ++r)
    for (i64 d = d_vec; d < D; ++d) tail += x[r * ld + d] * 0.0f;
  const R s = Vec::add(Vec::add(Vec::add(a[0], a[1]), Vec::add(a[2], a[3])),
                       Vec::add(Vec::add(a[4], a[5]), Vec::add(a[6], a[7])));
  return is_finite(Vec::hsum(s) + tail);
}

// What is known of a GEMM's B operand: all finite, not all finite, or not looked at.
enum class Finite { yes, no, unknown };

// C (M × N) += A·B without a zero weight in A ever multiplying an inf or NaN in B: a
// masked key's weight is 0, and 0·NaN = NaN would leak its value into rows that cannot
// see it. B finite: the register-blocked GEMM. B not finite: term by term, zero weights
// skipped. Unknown: the blocked GEMM, and only if C then holds a non-finite value (rare:
// a NaN or inf in B, or already in C) C is restored from C_saved (M × ldc floats of the
// caller's scratch) and redone term by term; that costs a copy of C instead of a scan of B.
template <class BRows>
inline void gemm_acc_skip_zero_on(Finite b_finite, i64 M, i64 N, i64 K, const float* A, i64 ars, i64 acs, BRows B,
                                  float* C, i64 ldc, float* C_saved) {
  if (b_finite == Finite::yes) return gemm_on<true, false>(M, N, K, A, ars, acs, B, C, ldc);
  if (b_finite == Finite::no) return gemm_on<true, true>(M, N, K, A, ars, acs, B, C, ldc);
  for (i64 x = 0; x < M * ldc; ++x) C_saved[x] = C[x];
  gemm_on<true, false>(M, N, K, A, ars, acs, B, C, ldc);
  if (rows_finite(C, ldc, M, N)) return;
  for (i64 x = 0; x < M * ldc; ++x) C[x] = C_saved[x];
  gemm_on<true, true>(M, N, K, A, ars, acs, B, C, ldc);
}
inline void gemm_acc_skip_zero(Finite b_finite, i64 M, i64 N, i64 K, const float* A, i64 ars, i64 acs, const float* B,
                               i64 ldb, float* C, i64 ldc, float* C_saved) {
  gemm_acc_skip_zero_on(b_finite, M, N, K, A, ars, acs, StridedRows{B, ldb}, C, ldc, C_saved);
}
