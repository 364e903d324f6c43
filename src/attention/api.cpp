// api.cpp — sdpa::forward / sdpa::backward: validate, pick the kernel and ISA,
// spread tiles over threads.
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include <omp.h>

#include "attention/fast.hpp"
#include "attention/problem.hpp"
#include "sdpa/reference.hpp"

namespace sdpa {
namespace detail {
namespace {

const FastKernels& kernels_for(const Options& opt) {
  Isa isa = opt.isa == Isa::automatic ? active_isa() : opt.isa;
  switch (isa) {
    case Isa::avx512: return fast_kernels_avx512();
    case Isa::avx2: return fast_kernels_avx2();
    default: return fast_kernels_scalar();
  }
}

// One 64-byte-aligned scratch block per worker, allocated before the parallel
// region so no allocation failure can escape an OpenMP region.
class Scratch {
 public:
  Scratch(int workers, std::size_t floats_each) : each_((floats_each + 15) / 16 * 16) {
    const std::size_t bytes = each_ * sizeof(float) * static_cast<std::size_t>(workers);
    data_ = static_cast<float*>(::operator new(bytes, std::align_val_t{64}));
  }
  ~Scratch() { ::operator delete(data_, std::align_val_t{64}); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* worker(int w) const { return data_ + each_ * static_cast<std::size_t>(w); }

 private:
  std::size_t each_;
  float* data_ = nullptr;
};

i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

int workers_for(const Options& opt, i64 items) {
  const int t = resolve_threads(opt);
  return static_cast<int>(items < t ? items : t);
}

// Runs body(item, scratch) for item in [0, items) on `workers` threads. Each item is
// done entirely by one thread, so results do not depend on the thread count.
template <class Body>
void parallel_items(i64 items, int workers, const Scratch& scratch, Body body) {
#pragma omp parallel num_threads(workers)
  {
    float* s = scratch.worker(omp_get_thread_num());
#pragma omp for schedule(dynamic, 1)
    for (i64 it = 0; it < items; ++it) body(it, s);
  }
}

}  // namespace
}  // namespace detail

void forward(View4<const float> q, View4<const float> k, View4<const float> v, View4<float> out, View3<float> lse,
             const Options& opt) {
  if (opt.kernel == Kernel::reference) return reference::forward<float, double>(q, k, v, out, lse, opt);
  using namespace detail;
  const Problem p = validate_forward<float>(q, k, v, out, lse, opt);
  const FastKernels& kern = kernels_for(opt);
  Tensors t;
  t.q = q, t.k = k, t.v = v, t.out_w = out, t.lse_w = lse;

  const i64 tiles = ceil_div(p.Nq, kTileRows), items = p.B * p.Hq * tiles;
  const int workers = workers_for(opt, items);
  const Scratch scratch(workers, kern.forward_scratch(p));
  parallel_items(items, workers, scratch, [&](i64 it, float* s) {
    const i64 b = it / (p.Hq * tiles), h = it / tiles % p.Hq, i0 = it % tiles * kTileRows;
    kern.forward_tile(p, t, b, h, i0, s);
  });
}

void backward(View4<const float> q, View4<const float> k, View4<const float> v, View4<const float> out,
              View3<const float> lse, View4<const float> dout, View4<float> dq, View4<float> dk, View4<float> dv,
              const Options& opt) {
  if (opt.kernel == Kernel::reference)
    return reference::backward<float, double>(q, k, v, out, lse, dout, dq, dk, dv, opt);
  using namespace detail;
  const Problem p = validate_backward<float>(q, k, v, out, lse, dout, dq, dk, dv, opt);
  const FastKernels& kern = kernels_for(opt);
  Tensors t;
  t.q = q, t.k = k, t.v = v, t.out = out, t.lse_in = lse, t.dout = dout, t.dq = dq, t.dk = dk, t.dv = dv;

  // delta_i = Σ_e dout_ie out_ie, accumulated in double: O(B·Hq·Nq) memory.
  const i64 rows = p.B * p.Hq * p.Nq;
  std::vector<float> delta(static_cast<std::size_t>(rows));
  {
    const int workers = workers_for(opt, rows);
#pragma omp parallel for num_threads(workers) schedule(static)
    for (i64 row = 0; row < rows; ++row) {
      const i64 b = row / (p.Hq * p.Nq), h = row / p.Nq % p.Hq, i = row % p.Nq;
      double acc = 0.0;
      for (i64 e = 0; e < p.Dv; ++e)
        acc += static_cast<double>(dout(b, h, i, e)) * static_cast<double>(out(b, h, i, e));
      delta[static_cast<std::size_t>(row)] = static_cast<float>(acc);
    }
  }

  const i64 kv_tiles = ceil_div(p.Nk, kTileCols), q_tiles = ceil_div(p.Nq, kTileRows);
  const i64 items_a = p.B * p.Hkv * kv_tiles, items_b = p.B * p.Hq * q_tiles;
  const int workers = workers_for(opt, items_a > items_b ? items_a : items_b);
  const Scratch scratch(workers, kern.backward_scratch(p));
  parallel_items(items_a, workers, scratch, [&](i64 it, float* s) {  // dk, dv
    const i64 b = it / (p.Hkv * kv_tiles), g = it / kv_tiles % p.Hkv, j0 = it % kv_tiles * kTileCols;
    kern.backward_kv_tile(p, t, delta.data(), b, g, j0, s);
  });
  parallel_items(items_b, workers, scratch, [&](i64 it, float* s) {  // dq
    const i64 b = it / (p.Hq * q_tiles), h = it / q_tiles % p.Hq, i0 = it % q_tiles * kTileRows;
    kern.backward_q_tile(p, t, delta.data(), b, h, i0, s);
  });
}

}  // namespace sdpa
