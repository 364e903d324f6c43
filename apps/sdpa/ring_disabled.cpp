// ring_disabled.cpp — the --ring modes in an sdpa built without MPI: a clear refusal.
#include "ring.hpp"

namespace sdpa::cli {

int run_ring_attention(const RingFiles&, const Options&) {
  throw Error("--ring: this sdpa was built without MPI (Debian: libopenmpi-dev; then reconfigure)");
}
int run_ring_bench(const RingBenchArgs&) {
  throw Error("--ring: this sdpa was built without MPI (Debian: libopenmpi-dev; then reconfigure)");
}

int run_sweep_ranks(const std::function<int(const nn::SweepShare&)>&) {
  // Else each rank would train the whole grid and write the same files.
  throw Error(
      "sweep: started by mpirun, but this sdpa was built without MPI (Debian: libopenmpi-dev; then "
      "reconfigure); run it without mpirun");
}

}  // namespace sdpa::cli
