// npy.hpp — reading and writing NumPy .npy files (format versions 1.0, 2.0, 3.0).
//
// Accepted: little-endian float32 ('<f4'), float64 ('<f8'), bool ('|b1') and uint8
// ('|u1'), C order. Everything else — Fortran order, other dtypes, big-endian,
// malformed or hostile headers, a data length that disagrees with the shape — is an
// sdpa::Error naming the file. The parser never allocates more than the input's size
// and never reads outside it (fuzzed: fuzz/fuzz_npy.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sdpa::io {

enum class DType { f32, f64, u8 };

/// Bytes per element.
std::size_t itemsize(DType t);
/// "float32", "float64", "bool/uint8".
const char* dtype_name(DType t);

struct NpyArray {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;   // C order; () is a scalar
  std::vector<unsigned char> bytes;  // little-endian element data, numel * itemsize

  std::int64_t numel() const;
  // Typed access; throws sdpa::Error on a dtype mismatch.
  const float* f32() const;
  const double* f64() const;
  const unsigned char* u8() const;
  float* f32();
  double* f64();
};

/// Parses a whole .npy file held in memory. `what` names it in error messages.
NpyArray parse_npy(const unsigned char* data, std::size_t size, const std::string& what);
/// Reads and parses a file.
NpyArray read_npy(const std::string& path);
/// The bytes of a .npy file (version 1.0, or 2.0 when the header needs it),
/// header padded so the data starts at a multiple of 64 bytes.
std::vector<unsigned char> serialize_npy(DType dtype, const std::vector<std::int64_t>& shape, const void* data);

}  // namespace sdpa::io
