// sdpa/reference.hpp — the readable oracle.
//
// Materialises the (Nq, Nk) score matrix of one head at a time and accumulates
// in `Acc`. With T = float, Acc = double it is the fp64 reference the fast
// kernel is judged against; with T = Acc = float it is the *naive* fp32
// implementation whose error sets the tolerance (docs/contract.md, "Numerical tolerance").
// Same contract and validation as sdpa::forward / sdpa::backward.
#pragma once

#include "sdpa/attention.hpp"
#include "sdpa/half.hpp"

namespace sdpa::reference {

template <class T, class Acc>
void forward(View4<const T> q, View4<const T> k, View4<const T> v, View4<T> out, View3<T> lse, const Options& opt = {});

template <class T, class Acc>
void backward(View4<const T> q, View4<const T> k, View4<const T> v, View4<const T> out, View3<const T> lse,
              View4<const T> dout, View4<T> dq, View4<T> dk, View4<T> dv, const Options& opt = {});

// Instantiated for <float, double>, <double, double> and <float, float>.
extern template void forward<float, double>(View4<const float>, View4<const float>, View4<const float>, View4<float>,
                                            View3<float>, const Options&);
extern template void forward<double, double>(View4<const double>, View4<const double>, View4<const double>,
                                             View4<double>, View3<double>, const Options&);
extern template void forward<float, float>(View4<const float>, View4<const float>, View4<const float>, View4<float>,
                                           View3<float>, const Options&);
extern template void backward<float, double>(View4<const float>, View4<const float>, View4<const float>,
                                             View4<const float>, View3<const float>, View4<const float>, View4<float>,
                                             View4<float>, View4<float>, const Options&);
extern template void backward<double, double>(View4<const double>, View4<const double>, View4<const double>,
                                              View4<const double>, View3<const double>, View4<const double>,
                                              View4<double>, View4<double>, View4<double>, const Options&);
extern template void backward<float, float>(View4<const float>, View4<const float>, View4<const float>,
                                            View4<const float>, View3<const float>, View4<const float>, View4<float>,
                                            View4<float>, View4<float>, const Options&);

/// The naive implementation in a 16-bit dtype: the yardstick of the tolerance rule for bf16 and
/// fp16 (FlashAttention's: a kernel's error against fp64 at most twice this one's, plus a floor).
/// q, k, v, dout hold values of dtype t, widened to float. Every product is accumulated in
/// fp32 from operands in t: scores and lse stay fp32, P = exp(s - lse) is rounded to t before
/// P·V, out is rounded to t. The backward likewise rounds the operands of its products (P and
/// dS = P∘(dP - delta)) and its outputs (dq, dk, dv) to t; dP and delta are fp32 sums.
/// With Dtype::f32 nothing is rounded. Same contract and validation as sdpa::forward/backward.
/// NaiveScores::dtype also stores the scores s = β·q·k in t before the softmax, as a plain
/// 16-bit `softmax(q @ k.T * scale) @ v` does (the lab's precision experiment compares both).
enum class NaiveScores { fp32, dtype };
void forward_naive(Dtype t, View4<const float> q, View4<const float> k, View4<const float> v, View4<float> out,
                   View3<float> lse, const Options& opt = {}, NaiveScores scores = NaiveScores::fp32);
void backward_naive(Dtype t, View4<const float> q, View4<const float> k, View4<const float> v, View4<const float> out,
                    View3<const float> lse, View4<const float> dout, View4<float> dq, View4<float> dk, View4<float> dv,
                    const Options& opt = {});

}  // namespace sdpa::reference
