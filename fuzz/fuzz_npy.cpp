// fuzz_npy.cpp — libFuzzer target for the .npy parser. Any input must either parse or
// throw sdpa::Error; a parsed array must survive serialize -> parse unchanged.
#include <cstdint>
#include <cstdlib>

#include "io/npy.hpp"
#include "sdpa/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  sdpa::io::NpyArray a;
  try {
    a = sdpa::io::parse_npy(data, size, "fuzz");
  } catch (const sdpa::Error&) {
    return 0;
  }
  const auto bytes = sdpa::io::serialize_npy(a.dtype, a.shape, a.bytes.data());
  const auto b = sdpa::io::parse_npy(bytes.data(), bytes.size(), "round trip");
  if (b.dtype != a.dtype || b.shape != a.shape || b.bytes != a.bytes) std::abort();
  return 0;
}
