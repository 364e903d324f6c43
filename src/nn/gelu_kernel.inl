// nn/gelu_kernel.inl — the MLP's GELU (tanh form, nn/gelu.hpp) in fp32, written once over
// the attention kernel's `Vec` (attention/simd_<isa>.hpp: load, fma, tanh, …), which
// linear_<isa>.cpp includes inside its own namespace first; compiled for avx2 and avx512
// (the scalar path keeps gelu.hpp's template: its Vec::fma would be a libm call).
//
// libm's expf is not vectorised, and GELU over the (B·T, 4C) hidden layer was a fifth of a
// training step; Vec::tanh does W elements at once. Every element goes through the same
// vector operations — a last partial vector is padded in a buffer — so an element's bits
// depend neither on its position nor on how the caller split the array between threads.

// u = a(x + b x³) = x(a + a·b·x²)
[[gnu::always_inline]] inline Vec::R gelu_arg(Vec::R x) {
  const Vec::R x2 = Vec::mul(x, x);
  return Vec::mul(x, Vec::fma(Vec::set1(static_cast<float>(kGeluA * kGeluB)), x2, Vec::set1(static_cast<float>(kGeluA))));
}

[[gnu::always_inline]] inline Vec::R gelu_forward_vec(Vec::R x) {
  const Vec::R half_x = Vec::mul(Vec::set1(0.5f), x);
  return Vec::fma(half_x, Vec::tanh(gelu_arg(x)), half_x);  // ½x(1 + tanh u)
}

// dL/dx = dout·(½(1 + tanh u) + ½x(1 − tanh² u)·a(1 + 3b x²))
[[gnu::always_inline]] inline Vec::R gelu_backward_vec(Vec::R dout, Vec::R x) {
  const Vec::R th = Vec::tanh(gelu_arg(x)), half = Vec::set1(0.5f), one = Vec::set1(1.0f);
  const Vec::R du = Vec::fma(Vec::set1(static_cast<float>(3.0 * kGeluA * kGeluB)), Vec::mul(x, x),
                             Vec::set1(static_cast<float>(kGeluA)));
  const Vec::R sech2 = Vec::fnma(th, th, one);  // 1 − tanh² u
  const Vec::R d = Vec::fma(Vec::mul(Vec::mul(half, x), sech2), du, Vec::mul(half, Vec::add(one, th)));
  return Vec::mul(dout, d);
}

// out, x (n)
void gelu_forward_f32(float* out, const float* x, i64 n) {
  constexpr i64 W = Vec::W;
  i64 i = 0;
  for (; i + W <= n; i += W) Vec::store(out + i, gelu_forward_vec(Vec::load(x + i)));
  if (i < n) {
    alignas(64) float xb[W] = {}, ob[W];
    for (i64 j = i; j < n; ++j) xb[j - i] = x[j];
    Vec::store(ob, gelu_forward_vec(Vec::load(xb)));
    for (i64 j = i; j < n; ++j) out[j] = ob[j - i];
  }
}

// dx, dout, x (n); dx is written (=)
void gelu_backward_f32(float* dx, const float* dout, const float* x, i64 n) {
  constexpr i64 W = Vec::W;
  i64 i = 0;
  for (; i + W <= n; i += W) Vec::store(dx + i, gelu_backward_vec(Vec::load(dout + i), Vec::load(x + i)));
  if (i < n) {
    alignas(64) float db[W] = {}, xb[W] = {}, ob[W];
    for (i64 j = i; j < n; ++j) db[j - i] = dout[j], xb[j - i] = x[j];
    Vec::store(ob, gelu_backward_vec(Vec::load(db), Vec::load(xb)));
    for (i64 j = i; j < n; ++j) dx[j] = ob[j - i];
  }
}
