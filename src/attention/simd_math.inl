// simd_math.inl — exp and tanh written once over a Vec's primitives; included by
// the SIMD Vec headers inside their ISA namespace (the scalar path uses libm).
//
// exp: x = n·ln2 + r with |r| <= ln2/2; e^r by its Taylor series to degree 7
// (truncation < 2e-9 relative); then r scaled by 2^n. x < -87.33, -inf included, gives
// exactly 0 (the online softmax relies on exp(-inf) = 0); x > ln(FLT_MAX) gives +inf;
// NaN stays NaN (the clamps keep a NaN in their second operand). The low clamp sits just
// above ln(FLT_MIN) = -87.3365 so that no lane's 2^n scaling is ever subnormal: at
// ln(FLT_MIN) itself r rounds to just below 0 and p·2^-126 is subnormal, and on Intel
// a subnormal result from vscalefps or vmulps costs a microcode assist (~230 cycles a
// vector, measured on a Xeon) even though the lane is then replaced by 0, and every
// masked score (-inf) is such a lane (a causal forward at N 1024 runs 1.18-1.28x faster
// without it: docs/performance.md, "Causal forward"). The price: x in
// [ln(FLT_MIN), -87.33), whose exp is below 1.2e-38, gives 0.
// NONPOSITIVE: for x <= 0 (or NaN) only, as the online softmax's arguments are: the upper
// clamp and 2^n's n > 0 case drop out (a fifth of the instructions), the bits stay those
// of the general exp.
template <bool NONPOSITIVE>
inline Vec::R math_exp(Vec::R x) {
  using V = Vec;
  const V::R lo = V::set1(-87.33f), hi = V::set1(88.7228391f);
  const V::R xc = NONPOSITIVE ? V::max_keep_nan(lo, x) : V::min_keep_nan(hi, V::max_keep_nan(lo, x));
  const V::R n = V::round_nearest(V::mul(xc, V::set1(1.44269504088896341f)));
  V::R r = V::fnma(n, V::set1(0.693359375f), xc);  // ln2 in two parts: an exact high part, a small low one
  r = V::fnma(n, V::set1(-2.12194440e-4f), r);
  V::R p = V::set1(1.0f / 5040.0f);
  for (float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
    p = V::fma(p, r, V::set1(c));
  V::R res = NONPOSITIVE ? V::scale_pow2_nonpositive(p, n) : V::scale_pow2(p, n);
  res = V::select_lt(x, lo, V::zero(), res);
  return NONPOSITIVE ? res : V::select_gt(x, hi, V::set1(__builtin_inff()), res);
}

// tanh x = sign(x)·t(|x|). For |x| < 0.625, t = m/(m+2) with m = e^{2|x|} - 1 from its
// Taylor series to degree 11 (no cancellation near 0); above, t = 1 - 2/(e^{2|x|} + 1).
inline Vec::R math_tanh(Vec::R x) {
  using V = Vec;
  const V::R ax = V::abs(x), y = V::add(ax, ax), one = V::set1(1.0f), two = V::set1(2.0f);
  V::R u = one;
  for (int k = 11; k >= 2; --k) u = V::fma(V::mul(y, V::set1(1.0f / static_cast<float>(k))), u, one);
  const V::R m = V::mul(y, u);
  const V::R small = V::div(m, V::add(m, two));
  const V::R large = V::sub(one, V::div(two, V::add(math_exp<false>(y), one)));
  return V::copysign(V::select_lt(ax, V::set1(0.625f), small, large), x);
}

inline Vec::R Vec::exp(R x) { return math_exp<false>(x); }
inline Vec::R Vec::exp_nonpositive(R x) { return math_exp<true>(x); }
inline Vec::R Vec::tanh(R x) { return math_tanh(x); }
