// sdpa/reference.hpp — the readable oracle.
//
// Materialises the (Nq, Nk) score matrix of one head at a time and accumulates
// in `Acc`. With T = float, Acc = double it is the fp64 reference the fast
// kernel is judged against; with T = Acc = float it is the *naive* fp32
// implementation whose error sets the tolerance (DESIGN.md, tests/).
// Same contract and validation as sdpa::forward / sdpa::backward.
#pragma once

#include "sdpa/attention.hpp"

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

}  // namespace sdpa::reference
