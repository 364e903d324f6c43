// npy.cpp — a small, strict .npy parser and writer.
//
// File layout: the magic "\x93NUMPY", a major and a minor version byte, the header
// length (2 bytes little-endian in version 1, 4 bytes in versions 2 and 3), the
// header, then the raw data. The header is a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and ended by '\n'. It is read by a tokenizer for the handful
// of Python literals that appear in it and a recursive-descent parser over those
// tokens; nothing is evaluated and nothing is allocated beyond the header's size.
#include "io/npy.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "sdpa/error.hpp"

namespace sdpa::io {
namespace {

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr std::size_t kAlign = 64;       // NumPy aligns the data to 64 bytes
constexpr std::size_t kMaxString = 256;  // longer strings cannot be a key or descr we know
constexpr std::uint64_t kMaxI64 = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

[[noreturn]] void fail(const std::string& what, const std::string& msg) { throw Error(what + ": " + msg); }

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ',';
  return s + ")";
}

// A character as it can be shown in a one-line message.
std::string show_char(unsigned char c) {
  if (c >= 0x20 && c < 0x7f && c != '\'') return std::string("'") + static_cast<char>(c) + "'";
  static const char* hex = "0123456789abcdef";
  return std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
}

// ---- tokenizer -------------------------------------------------------------------------

enum class Tok { lbrace, rbrace, lparen, rparen, lbracket, rbracket, colon, comma, string, integer, name, end };

struct Token {
  Tok kind = Tok::end;
  std::string text;        // string contents, or the name
  std::int64_t value = 0;  // integer value (may be negative)
};

const char* tok_name(Tok k) {
  switch (k) {
    case Tok::lbrace: return "'{'";
    case Tok::rbrace: return "'}'";
    case Tok::lparen: return "'('";
    case Tok::rparen: return "')'";
    case Tok::lbracket: return "'['";
    case Tok::rbracket: return "']'";
    case Tok::colon: return "':'";
    case Tok::comma: return "','";
    case Tok::string: return "a string";
    case Tok::integer: return "an integer";
    case Tok::name: return "a name";
    case Tok::end: return "the end of the header";
  }
  return "?";
}

class Lexer {
 public:
  Lexer(const unsigned char* p, std::size_t n, const std::string& what) : p_(p), end_(p + n), what_(what) {}

  Token next() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
    Token t;
    if (p_ == end_) return t;
    const unsigned char c = *p_;
    auto single = [&](Tok k) {  // a one-character token
      t.kind = k;
      ++p_;
      return t;
    };
    switch (c) {
      case '{': return single(Tok::lbrace);
      case '}': return single(Tok::rbrace);
      case '(': return single(Tok::lparen);
      case ')': return single(Tok::rparen);
      case '[': return single(Tok::lbracket);
      case ']': return single(Tok::rbracket);
      case ':': return single(Tok::colon);
      case ',': return single(Tok::comma);
      case '\'':
      case '"': return string_token(c);
      default: break;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return integer_token();
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_') return name_token();
    bad("unexpected " + show_char(c));
  }

  [[noreturn]] void bad(const std::string& msg) const { fail(what_, "malformed .npy header: " + msg); }
  [[noreturn]] void unsupported(const std::string& msg) const { fail(what_, msg); }

 private:
  const unsigned char* p_;
  const unsigned char* end_;
  const std::string& what_;

  static bool digit(unsigned char c) { return c >= '0' && c <= '9'; }

  Token string_token(unsigned char quote) {
    Token t;
    t.kind = Tok::string;
    ++p_;
    while (p_ < end_ && *p_ != quote) {
      if (*p_ == '\\') bad("escape sequences in strings are not supported");
      if (*p_ == '\n') bad("unterminated string");
      if (t.text.size() == kMaxString) bad("string longer than " + std::to_string(kMaxString) + " characters");
      t.text += static_cast<char>(*p_++);
    }
    if (p_ == end_) bad("unterminated string");
    ++p_;
    return t;
  }

  Token integer_token() {
    Token t;
    t.kind = Tok::integer;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    if (p_ == end_ || !digit(*p_)) bad("'-' not followed by digits");
    // "012" is octal in Python 2 and an error in Python 3; NumPy never writes it.
    if (*p_ == '0' && p_ + 1 < end_ && digit(p_[1])) bad("integer with a leading zero");
    std::int64_t v = 0;
    while (p_ < end_ && digit(*p_)) {
      const int d = *p_ - '0';
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, negative ? -d : d, &v))
        bad("integer does not fit in 64 bits");
      ++p_;
    }
    if (p_ < end_ && (*p_ == 'L' || *p_ == 'l')) ++p_;  // Python 2 long suffix, as old NumPy wrote it
    t.value = v;
    return t;
  }

  Token name_token() {
    Token t;
    t.kind = Tok::name;
    while (p_ < end_ && ((*p_ >= 'A' && *p_ <= 'Z') || (*p_ >= 'a' && *p_ <= 'z') || digit(*p_) || *p_ == '_')) {
      if (t.text.size() == kMaxString) bad("name longer than " + std::to_string(kMaxString) + " characters");
      t.text += static_cast<char>(*p_++);
    }
    return t;
  }
};

// ---- parser ----------------------------------------------------------------------------

struct Header {
  std::string descr;
  bool fortran = false;
  std::vector<std::int64_t> shape;
};

class HeaderParser {
 public:
  HeaderParser(const unsigned char* p, std::size_t n, const std::string& what) : lex_(p, n, what) { advance(); }

  Header parse() {
    Header h;
    bool have_descr = false, have_fortran = false, have_shape = false;
    if (tok_.kind != Tok::lbrace)
      lex_.bad("the header is not a dict (it starts with " + std::string(tok_name(tok_.kind)) + ")");
    advance();
    while (tok_.kind != Tok::rbrace) {
      if (tok_.kind != Tok::string)
        lex_.bad("expected a quoted key in the header dict, found " + std::string(tok_name(tok_.kind)));
      const std::string key = tok_.text;
      advance();
      expect(Tok::colon, "after key '" + key + "'");
      if (key == "descr") {
        once(have_descr, key);
        h.descr = descr();
      } else if (key == "fortran_order") {
        once(have_fortran, key);
        h.fortran = boolean();
      } else if (key == "shape") {
        once(have_shape, key);
        h.shape = tuple();
      } else {
        lex_.bad("unknown key '" + key + "' (only 'descr', 'fortran_order' and 'shape' are allowed)");
      }
      if (tok_.kind == Tok::comma) {
        advance();
      } else if (tok_.kind != Tok::rbrace) {
        lex_.bad("expected ',' or '}' in the header dict, found " + std::string(tok_name(tok_.kind)));
      }
    }
    advance();
    if (tok_.kind != Tok::end) lex_.bad("unexpected " + std::string(tok_name(tok_.kind)) + " after the header dict");
    std::string missing;
    for (const auto& [have, key] :
         {std::pair{have_descr, "'descr'"}, {have_fortran, "'fortran_order'"}, {have_shape, "'shape'"}})
      if (!have) missing += (missing.empty() ? "" : ", ") + std::string(key);
    if (!missing.empty()) lex_.bad("missing key " + missing);
    return h;
  }

 private:
  Lexer lex_;
  Token tok_;

  void advance() { tok_ = lex_.next(); }
  void expect(Tok k, const std::string& where) {
    if (tok_.kind != k)
      lex_.bad("expected " + std::string(tok_name(k)) + " " + where + ", found " + tok_name(tok_.kind));
    advance();
  }
  void once(bool& seen, const std::string& key) {
    if (seen) lex_.bad("duplicate key '" + key + "'");
    seen = true;
  }

  std::string descr() {
    if (tok_.kind == Tok::lbracket)
      lex_.unsupported("structured (record) dtypes are not supported ('descr' is a list)");
    if (tok_.kind != Tok::string) lex_.bad("'descr' must be a string, found " + std::string(tok_name(tok_.kind)));
    std::string d = std::move(tok_.text);
    advance();
    return d;
  }

  bool boolean() {
    if (tok_.kind == Tok::name && (tok_.text == "True" || tok_.text == "False")) {
      const bool v = tok_.text == "True";
      advance();
      return v;
    }
    lex_.bad("'fortran_order' must be True or False");
  }

  std::vector<std::int64_t> tuple() {
    expect(Tok::lparen, "for 'shape' (it must be a tuple)");
    std::vector<std::int64_t> dims;
    bool trailing_comma = false;
    while (tok_.kind != Tok::rparen) {
      if (tok_.kind != Tok::integer)
        lex_.bad("expected an integer in 'shape', found " + std::string(tok_name(tok_.kind)));
      if (tok_.value < 0) lex_.bad("negative dimension " + std::to_string(tok_.value) + " in 'shape'");
      if (dims.size() == kMaxDims) lex_.bad("'shape' has more than " + std::to_string(kMaxDims) + " dimensions");
      dims.push_back(tok_.value);
      advance();
      trailing_comma = tok_.kind == Tok::comma;
      if (trailing_comma) {
        advance();
      } else if (tok_.kind != Tok::rparen) {
        lex_.bad("expected ',' or ')' in 'shape', found " + std::string(tok_name(tok_.kind)));
      }
    }
    advance();
    // "(5)" is a parenthesised int in Python, not a tuple; NumPy writes "(5,)".
    if (dims.size() == 1 && !trailing_comma) lex_.bad("'shape' (n) is not a tuple; a 1-D shape is written (n,)");
    return dims;
  }
};

DType parse_descr(const std::string& d, const std::string& what) {
  if (d == "<f2") return DType::f16;
  if (d == "<f4") return DType::f32;
  if (d == "<f8") return DType::f64;
  if (d == "|b1" || d == "|u1") return DType::u8;
  if (d == "<i4") return DType::i32;
  if (d == "<i8") return DType::i64;
  if (!d.empty() && d[0] == '>')
    fail(what, "big-endian dtype '" + d + "' is not supported; save little-endian data (e.g. a.astype('<f4'))");
  if (d == "=f2" || d == "=f4" || d == "=f8")
    fail(what, "native-order dtype '" + d + "' is not supported; write the byte order explicitly ('<f4', '<f8')");
  fail(what, "dtype '" + d +
                 "' is not supported (float16 '<f2', float32 '<f4', float64 '<f8', bool '|b1', uint8 '|u1', int32 "
                 "'<i4', int64 '<i8')");
}

// Element count and byte count of a shape, or a message saying why they do not fit.
// Beyond the counts themselves, the product of the non-zero dimensions (times the
// item size) must fit in int64, so that callers may multiply any of them freely.
struct Sizes {
  std::uint64_t numel = 0, nbytes = 0;
};
bool shape_sizes(const std::vector<std::int64_t>& shape, std::size_t item, Sizes& out) {
  std::uint64_t nonzero = 1;
  bool empty = false;
  for (const auto d : shape) {
    if (d < 0) return false;
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(nonzero, static_cast<std::uint64_t>(d), &nonzero) || nonzero > kMaxI64) return false;
  }
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(nonzero, static_cast<std::uint64_t>(item), &bytes) || bytes > kMaxI64) return false;
  if (bytes > std::numeric_limits<std::size_t>::max()) return false;
  out.numel = empty ? 0 : nonzero;
  out.nbytes = empty ? 0 : bytes;
  return true;
}

}  // namespace

std::size_t itemsize(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::f64:
    case DType::i64: return 8;
    case DType::f16: return 2;
    default: return 1;
  }
}
const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::f16: return "float16";
    default: return "bool/uint8";
  }
}

std::int64_t NpyArray::numel() const {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

namespace {
void check_dtype(DType have, DType want) {
  if (have != want)
    throw Error(std::string(".npy array: expected ") + dtype_name(want) + " data, got " + dtype_name(have));
}
}  // namespace

const float* NpyArray::f32() const {
  check_dtype(dtype, DType::f32);
  return reinterpret_cast<const float*>(bytes.data());
}
const double* NpyArray::f64() const {
  check_dtype(dtype, DType::f64);
  return reinterpret_cast<const double*>(bytes.data());
}
const unsigned char* NpyArray::u8() const {
  check_dtype(dtype, DType::u8);
  return bytes.data();
}
const std::int32_t* NpyArray::i32() const {
  check_dtype(dtype, DType::i32);
  return reinterpret_cast<const std::int32_t*>(bytes.data());
}
const std::int64_t* NpyArray::i64() const {
  check_dtype(dtype, DType::i64);
  return reinterpret_cast<const std::int64_t*>(bytes.data());
}
const std::uint16_t* NpyArray::f16() const {
  check_dtype(dtype, DType::f16);
  return reinterpret_cast<const std::uint16_t*>(bytes.data());
}
float* NpyArray::f32() { return const_cast<float*>(std::as_const(*this).f32()); }
double* NpyArray::f64() { return const_cast<double*>(std::as_const(*this).f64()); }
unsigned char* NpyArray::u8() { return const_cast<unsigned char*>(std::as_const(*this).u8()); }

NpyArray parse_npy(const unsigned char* data, std::size_t size, const std::string& what) {
  if (size == 0) fail(what, "not a .npy file (it is empty)");
  if (!data) fail(what, "no data");
  if (std::memcmp(data, kMagic, size < 6 ? size : 6) != 0) fail(what, "not a .npy file (bad magic string)");
  if (size < 8) fail(what, "truncated .npy file (" + std::to_string(size) + " bytes)");
  const int major = data[6], minor = data[7];
  if (major < 1 || major > 3 || minor != 0)
    fail(what, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " (1.0, 2.0 and 3.0 are read)");
  const std::size_t prefix = major == 1 ? 10 : 12;
  if (size < prefix) fail(what, "truncated .npy file (" + std::to_string(size) + " bytes)");
  std::size_t header_len = 0;
  for (std::size_t i = prefix; i-- > 8;) header_len = header_len << 8 | data[i];
  if (header_len > size - prefix)
    fail(what, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes)");
  const unsigned char* header = data + prefix;
  if (header_len == 0 || header[header_len - 1] != '\n')
    fail(what, "malformed .npy header: it does not end with a newline");

  const Header h = HeaderParser(header, header_len, what).parse();
  if (h.fortran) fail(what, "Fortran-order arrays are not supported; save a C-order array (np.ascontiguousarray)");
  NpyArray a;
  a.dtype = parse_descr(h.descr, what);
  Sizes sz;
  if (!shape_sizes(h.shape, itemsize(a.dtype), sz))
    fail(what, "shape " + shape_text(h.shape) + " is too large: its sizes overflow 64 bits");

  // Only now, with the length the data really has in hand, is anything copied.
  const std::size_t have = size - prefix - header_len;
  if (have != sz.nbytes)
    fail(what, std::string(have < sz.nbytes ? "data is truncated" : "data is longer than the shape says") + ": shape " +
                   shape_text(h.shape) + " of " + dtype_name(a.dtype) + " needs " + std::to_string(sz.nbytes) +
                   " bytes, the file has " + std::to_string(have));
  a.shape = h.shape;
  a.bytes.assign(header + header_len, data + size);
  return a;
}

NpyArray read_npy(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open for reading: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory, not a .npy file");
  // A regular file's size is known (one byte more shows that it ended there); a
  // pipe is read in doubling chunks until it ends.
  std::vector<unsigned char> buf(S_ISREG(st.st_mode) ? static_cast<std::size_t>(st.st_size) + 1 : 65536);
  std::size_t used = 0;
  for (;;) {
    if (used == buf.size()) buf.resize(2 * used);
    const ssize_t n = ::read(fd, buf.data() + used, buf.size() - used);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, std::string("read error: ") + std::strerror(errno));
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  buf.resize(used);
  return parse_npy(buf.data(), buf.size(), path);
}

std::vector<unsigned char> serialize_npy(DType dtype, const std::vector<std::int64_t>& shape, const void* data) {
  const std::string name = "serialize_npy";
  if (shape.size() > kMaxDims)
    fail(name, "shape has " + std::to_string(shape.size()) + " dimensions, more than " + std::to_string(kMaxDims));
  for (const auto d : shape)
    if (d < 0) fail(name, "negative dimension in shape " + shape_text(shape));
  Sizes sz;
  if (!shape_sizes(shape, itemsize(dtype), sz)) fail(name, "shape " + shape_text(shape) + " is too large");
  if (sz.nbytes > 0 && data == nullptr) fail(name, "no data for shape " + shape_text(shape));

  const char* descr = dtype == DType::f32   ? "<f4"
                      : dtype == DType::f16 ? "<f2"
                      : dtype == DType::f64 ? "<f8"
                      : dtype == DType::i32 ? "<i4"
                      : dtype == DType::i64 ? "<i8"
                                            : "|u1";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape_text(shape) + ", }";
  // Pad with spaces so that magic + version + length field + header (with its '\n')
  // is a multiple of kAlign; version 2.0 only when the length needs 4 bytes.
  auto padded = [&](std::size_t prefix) {
    return (prefix + header.size() + 1 + kAlign - 1) / kAlign * kAlign - prefix;
  };
  int major = 1;
  std::size_t prefix = 10, header_len = padded(prefix);
  if (header_len > 0xffff) {
    major = 2;
    prefix = 12;
    header_len = padded(prefix);
  }
  header.append(header_len - header.size() - 1, ' ');
  header += '\n';

  // Sized once and filled in place (GCC 12 warns falsely about insert() after reserve()).
  std::vector<unsigned char> out(prefix + header_len + sz.nbytes);
  unsigned char* w = out.data();
  std::memcpy(w, kMagic, sizeof kMagic);
  w[6] = static_cast<unsigned char>(major);
  w[7] = 0;
  for (std::size_t i = 0; i < prefix - 8; ++i) w[8 + i] = static_cast<unsigned char>(header_len >> (8 * i));
  std::memcpy(w + prefix, header.data(), header_len);
  if (sz.nbytes) std::memcpy(w + prefix + header_len, data, sz.nbytes);
  return out;
}

}  // namespace sdpa::io
