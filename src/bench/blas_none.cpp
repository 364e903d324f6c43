// blas_none.cpp — what stands in for blas_attention.cpp when CMake found no BLAS: the
// suite asks blas_available() first and never calls the baseline.
#include "bench/blas_attention.hpp"
#include "sdpa/error.hpp"

namespace sdpa::bench {

bool blas_available() { return false; }
const char* blas_name() { return "not built (no BLAS found at configure time; Debian: libopenblas-dev)"; }

void blas_forward(const BlasShape&, const float*, const float*, const float*, float*, float*, int) {
  throw Error("the BLAS baseline was not built (no BLAS found at configure time)");
}
void blas_backward(const BlasShape&, const float*, const float*, const float*, const float*, const float*, const float*,
                   float*, float*, float*, int) {
  throw Error("the BLAS baseline was not built (no BLAS found at configure time)");
}

}  // namespace sdpa::bench
