// npy.hpp — reading and writing NumPy .npy files (format versions 1.0, 2.0, 3.0).
//
// Accepted descr strings, exactly: '<f2' (float16), '<f4' (float32), '<f8' (float64), '<i4' (int32),
// '<i8' (int64), '|b1' (bool) and '|u1' (uint8); both of the last two read as DType::u8
// and are written back as '|u1'. Native-order '=f4'/'=f8' are refused: NumPy itself never writes '=', and a
// file's meaning must not depend on the machine that wrote it. Also refused, each
// with an sdpa::Error naming the file: Fortran order, every other dtype (including
// big-endian '>f4' and structured dtypes), a bad magic string or version, a header
// that is not the dict NumPy writes (missing, duplicate or unknown keys, malformed
// literals, no final '\n'), negative dimensions, shapes whose sizes overflow, a
// header length running past the end, and data shorter or longer than the shape.
//
// Error messages are one line: "<what>: <problem>", e.g.
//   "q.npy: dtype '<c8' is not supported (float16 '<f2', float32 '<f4', ...)".
//
// The parser never allocates more than the input's own size (the data length is
// checked against the shape before anything is copied) and never reads outside it;
// fuzz/fuzz_npy.cpp exercises it under ASan/UBSan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sdpa::io {

enum class DType { f32, f64, u8, i32, i64, f16 };  // i32, i64: the offsets of packed batches; f16: IEEE binary16

/// Bytes per element: 4, 8, 1, 4, 8, 2.
std::size_t itemsize(DType t);
/// "float32", "float64", "bool/uint8", "int32", "int64", "float16".
const char* dtype_name(DType t);

/// Most dimensions a shape may have (NumPy 2's own limit).
inline constexpr std::size_t kMaxDims = 64;

struct NpyArray {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;   // C order; () is a scalar
  std::vector<unsigned char> bytes;  // little-endian element data, numel * itemsize

  /// Product of the dimensions (1 for a scalar). For a parsed array, the product of
  /// any subset of its non-zero dimensions fits in int64, and so does the byte count.
  std::int64_t numel() const;

  // Typed access; throws sdpa::Error on a dtype mismatch.
  const float* f32() const;
  const double* f64() const;
  const unsigned char* u8() const;
  const std::int32_t* i32() const;
  const std::int64_t* i64() const;
  const std::uint16_t* f16() const;  // the binary16 bits
  float* f32();
  double* f64();
  unsigned char* u8();
};

/// Parses a whole .npy file held in memory. `what` names it in error messages.
NpyArray parse_npy(const unsigned char* data, std::size_t size, const std::string& what);

/// Reads and parses a file (a regular file, or a pipe such as /dev/stdin).
NpyArray read_npy(const std::string& path);

/// The bytes of a .npy file: version 1.0 (2.0 if the header would not fit in 65535
/// bytes), header padded with spaces and ended by '\n' so that the data starts at a
/// multiple of 64 bytes, as NumPy does. `data` holds numel(shape) * itemsize(dtype)
/// bytes (may be null when that is 0). Throws sdpa::Error for a negative dimension,
/// more than kMaxDims dimensions, or a size that overflows.
std::vector<unsigned char> serialize_npy(DType dtype, const std::vector<std::int64_t>& shape, const void* data);

}  // namespace sdpa::io
