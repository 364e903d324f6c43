// fuzz_npy.cpp — libFuzzer target for the .npy parser.
//
// Every input must either parse or throw sdpa::Error (anything else — a crash, a
// sanitizer report, another exception, an allocation over -malloc_limit_mb — is a
// finding). A parsed array must be consistent with its shape and must come back
// unchanged through serialize_npy and parse_npy.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "io/npy.hpp"
#include "sdpa/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sdpa::io;
  NpyArray a;
  try {
    a = parse_npy(data, size, "fuzz");
  } catch (const sdpa::Error&) {
    return 0;
  }
  if (a.shape.size() > kMaxDims) std::abort();
  std::uint64_t n = 1;
  for (const auto d : a.shape) {
    if (d < 0) std::abort();
    n *= static_cast<std::uint64_t>(d);
  }
  if (a.numel() != static_cast<std::int64_t>(n) || a.bytes.size() != n * itemsize(a.dtype)) std::abort();
  if (a.bytes.size() > size) std::abort();

  const std::vector<unsigned char> file = serialize_npy(a.dtype, a.shape, a.bytes.data());
  if (file.size() < a.bytes.size() || (file.size() - a.bytes.size()) % 64 != 0) std::abort();
  const NpyArray b = parse_npy(file.data(), file.size(), "round trip");  // must not throw
  if (b.dtype != a.dtype || b.shape != a.shape || b.bytes != a.bytes) std::abort();
  return 0;
}
