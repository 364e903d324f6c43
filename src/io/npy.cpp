// npy.cpp — a small, strict .npy parser and writer.
//
// File layout: "\x93NUMPY", major, minor, header length (2 bytes little-endian for
// version 1, 4 bytes for versions 2 and 3), then the header — a Python dict literal
// such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with
// spaces and ending in '\n' — then the raw data.
#include "io/npy.hpp"

#include <climits>
#include <cstring>
#include <utility>
#include <fstream>
#include <iterator>

#include "sdpa/error.hpp"

namespace sdpa::io {
namespace {

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

[[noreturn]] void fail(const std::string& what, const std::string& msg) { throw Error(what + ": " + msg); }

// The subset of Python literal syntax a .npy header uses.
class HeaderParser {
 public:
  HeaderParser(const char* p, std::size_t n, const std::string& what) : p_(p), end_(p + n), what_(what) {}

  struct Fields {
    std::string descr;
    bool fortran = false;
    std::vector<std::int64_t> shape;
  };

  Fields parse() {
    Fields f;
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    expect('{', "the header is not a dict");
    for (;;) {
      skip_ws();
      if (peek() == '}') break;
      const std::string key = string_literal();
      skip_ws();
      expect(':', "expected ':' after key '" + key + "'");
      skip_ws();
      if (key == "descr") {
        if (have_descr) bad("duplicate key 'descr'");
        f.descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_fortran) bad("duplicate key 'fortran_order'");
        f.fortran = boolean();
        have_fortran = true;
      } else if (key == "shape") {
        if (have_shape) bad("duplicate key 'shape'");
        f.shape = tuple();
        have_shape = true;
      } else {
        bad("unexpected key '" + key + "' in the header");
      }
      skip_ws();
      if (peek() == ',') {
        ++p_;
        continue;
      }
      if (peek() == '}') break;
      bad("expected ',' or '}' in the header dict");
    }
    ++p_;  // '}'
    skip_ws();
    if (p_ != end_) bad("unexpected text after the header dict");
    if (!have_descr || !have_fortran || !have_shape)
      bad("the header dict must have 'descr', 'fortran_order' and 'shape'");
    return f;
  }

 private:
  const char* p_;
  const char* end_;
  const std::string& what_;

  [[noreturn]] void bad(const std::string& msg) const { fail(what_, "malformed .npy header: " + msg); }
  char peek() const { return p_ < end_ ? *p_ : '\0'; }
  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  void expect(char c, const std::string& msg) {
    if (peek() != c) bad(msg);
    ++p_;
  }
  std::string string_literal() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string");
    ++p_;
    std::string s;
    while (p_ < end_ && *p_ != q) {
      if (*p_ == '\\') bad("escapes in strings are not supported");
      s += *p_++;
      if (s.size() > 64) bad("string too long");
    }
    if (p_ >= end_) bad("unterminated string");
    ++p_;
    return s;
  }
  bool boolean() {
    if (end_ - p_ >= 4 && std::memcmp(p_, "True", 4) == 0) {
      p_ += 4;
      return true;
    }
    if (end_ - p_ >= 5 && std::memcmp(p_, "False", 5) == 0) {
      p_ += 5;
      return false;
    }
    bad("expected True or False for 'fortran_order'");
  }
  std::int64_t integer() {
    if (peek() == '-') bad("negative dimension in 'shape'");
    if (peek() < '0' || peek() > '9') bad("expected an integer in 'shape'");
    std::int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p_ - '0', &v))
        bad("dimension in 'shape' overflows 64 bits");
      ++p_;
    }
    if (peek() == 'L') ++p_;  // Python 2 long suffix, as old NumPy wrote it
    return v;
  }
  std::vector<std::int64_t> tuple() {
    expect('(', "'shape' must be a tuple");
    std::vector<std::int64_t> dims;
    bool trailing_comma = false;
    skip_ws();
    if (peek() == ')') {
      ++p_;
      return dims;
    }
    for (;;) {
      skip_ws();
      dims.push_back(integer());
      trailing_comma = false;
      if (dims.size() > 32) bad("'shape' has more than 32 dimensions");
      skip_ws();
      if (peek() == ',') {
        ++p_;
        trailing_comma = true;
        skip_ws();
        if (peek() == ')') break;
        continue;
      }
      if (peek() == ')') break;
      bad("expected ',' or ')' in 'shape'");
    }
    // "(5)" is an int in parentheses in Python, not a tuple; NumPy writes "(5,)".
    if (dims.size() == 1 && !trailing_comma) bad("a one-dimensional 'shape' needs a trailing comma, as in (5,)");
    ++p_;  // ')'
    return dims;
  }
};

DType parse_descr(const std::string& d, const std::string& what) {
  if (d == "<f4") return DType::f32;
  if (d == "<f8") return DType::f64;
  if (d == "|b1" || d == "|u1") return DType::u8;  // '=' (native) is never written by NumPy for these
  if (d == ">f4" || d == ">f8") fail(what, "big-endian data ('" + d + "') is not supported; use little-endian");
  fail(what, "dtype '" + d + "' is not supported (float32 '<f4', float64 '<f8', bool '|b1', uint8 '|u1')");
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "") + (i + 1 < shape.size() ? " " : "");
  return s + ")";
}

}  // namespace

std::size_t itemsize(DType t) { return t == DType::f32 ? 4 : t == DType::f64 ? 8 : 1; }
const char* dtype_name(DType t) { return t == DType::f32 ? "float32" : t == DType::f64 ? "float64" : "bool/uint8"; }

std::int64_t NpyArray::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}
const float* NpyArray::f32() const {
  if (dtype != DType::f32) throw Error(std::string("expected float32 data, got ") + dtype_name(dtype));
  return reinterpret_cast<const float*>(bytes.data());
}
const double* NpyArray::f64() const {
  if (dtype != DType::f64) throw Error(std::string("expected float64 data, got ") + dtype_name(dtype));
  return reinterpret_cast<const double*>(bytes.data());
}
const unsigned char* NpyArray::u8() const {
  if (dtype != DType::u8) throw Error(std::string("expected bool/uint8 data, got ") + dtype_name(dtype));
  return bytes.data();
}
float* NpyArray::f32() { return const_cast<float*>(std::as_const(*this).f32()); }
double* NpyArray::f64() { return const_cast<double*>(std::as_const(*this).f64()); }

NpyArray parse_npy(const unsigned char* data, std::size_t size, const std::string& what) {
  if (size < 10 || std::memcmp(data, kMagic, 6) != 0) fail(what, "not a .npy file (bad magic string)");
  const int major = data[6], minor = data[7];
  if (!((major == 1 || major == 2 || major == 3) && minor == 0))
    fail(what, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
  std::size_t header_len = 0, prefix = 0;
  if (major == 1) {
    header_len = static_cast<std::size_t>(data[8]) | static_cast<std::size_t>(data[9]) << 8;
    prefix = 10;
  } else {
    if (size < 12) fail(what, "truncated .npy header");
    header_len = static_cast<std::size_t>(data[8]) | static_cast<std::size_t>(data[9]) << 8 |
                 static_cast<std::size_t>(data[10]) << 16 | static_cast<std::size_t>(data[11]) << 24;
    prefix = 12;
  }
  if (header_len > size - prefix)
    fail(what, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");
  const char* header = reinterpret_cast<const char*>(data + prefix);
  if (header_len == 0 || header[header_len - 1] != '\n') fail(what, "malformed .npy header: it must end with a newline");
  HeaderParser parser(header, header_len, what);
  const auto fields = parser.parse();
  if (fields.fortran) fail(what, "Fortran-order arrays are not supported; save a C-order array (np.ascontiguousarray)");

  NpyArray a;
  a.dtype = parse_descr(fields.descr, what);
  a.shape = fields.shape;
  std::uint64_t numel = 1, nbytes = 0;
  for (auto d : a.shape)
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel))
      fail(what, "shape " + shape_text(a.shape) + " has more elements than 64 bits can count");
  if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(itemsize(a.dtype)), &nbytes) || numel > INT64_MAX)
    fail(what, "shape " + shape_text(a.shape) + " is too large");
  const std::size_t have = size - prefix - header_len;
  if (nbytes != have)
    fail(what, "shape " + shape_text(a.shape) + " of " + dtype_name(a.dtype) + " needs " + std::to_string(nbytes) +
                   " data bytes but the file has " + std::to_string(have));
  a.bytes.assign(data + prefix + header_len, data + size);  // size checked above: no giant allocation
  return a;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open for reading");
  std::vector<unsigned char> buf((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail(path, "read error");
  return parse_npy(buf.data(), buf.size(), path);
}

std::vector<unsigned char> serialize_npy(DType dtype, const std::vector<std::int64_t>& shape, const void* data) {
  const char* descr = dtype == DType::f32 ? "<f4" : dtype == DType::f64 ? "<f8" : "|u1";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  std::uint64_t numel = 1;
  for (auto d : shape) {
    if (d < 0) throw Error("serialize_npy: negative dimension in shape " + shape_text(shape));
    numel *= static_cast<std::uint64_t>(d);
  }
  const std::size_t nbytes = numel * itemsize(dtype);
  int major = 1;
  std::size_t prefix = 10;
  std::size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  if (total - prefix > 65535) {
    major = 2;
    prefix = 12;
    total = (prefix + header.size() + 1 + 63) / 64 * 64;
  }
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';
  std::vector<unsigned char> out(kMagic, kMagic + 6);
  out.reserve(total + nbytes);
  out.push_back(static_cast<unsigned char>(major));
  out.push_back(0);
  const std::size_t hl = header.size();
  out.push_back(static_cast<unsigned char>(hl & 0xff));
  out.push_back(static_cast<unsigned char>((hl >> 8) & 0xff));
  if (major == 2) {
    out.push_back(static_cast<unsigned char>((hl >> 16) & 0xff));
    out.push_back(static_cast<unsigned char>((hl >> 24) & 0xff));
  }
  out.insert(out.end(), header.begin(), header.end());
  const auto* d = static_cast<const unsigned char*>(data);
  if (nbytes) out.insert(out.end(), d, d + nbytes);
  return out;
}

}  // namespace sdpa::io
