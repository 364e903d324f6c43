// test_npy.cpp — the .npy reader and writer: round trips, the three format versions,
// and every way a file is refused.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "alloc_watch.hpp"
#include "io/npy.hpp"
#include "sdpa/error.hpp"
#include "test_util.hpp"

namespace sdpa::io {
namespace {

using test::expect_error;
using Bytes = std::vector<unsigned char>;
using Shape = std::vector<std::int64_t>;

// A .npy file with a hand-written header: version, header text (padded to 64 and
// given its '\n' unless raw), then data_bytes bytes of data.
Bytes make_file(int major, std::string header, std::size_t data_bytes, bool raw = false) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  if (!raw) {
    while ((prefix + header.size() + 1) % 64) header += ' ';
    header += '\n';
  }
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  const std::size_t n = header.size();
  for (std::size_t i = 0; i < prefix - 8; ++i) b.push_back(static_cast<unsigned char>(n >> (8 * i)));
  b.insert(b.end(), header.begin(), header.end());
  for (std::size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<unsigned char>(i * 13 + 5));
  return b;
}

std::string hdr(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

NpyArray parse(const Bytes& b) { return parse_npy(b.data(), b.size(), "test.npy"); }

// Expects parse() to throw an sdpa::Error naming test.npy and mentioning each fragment.
void reject(const Bytes& b, std::initializer_list<std::string> fragments) {
  std::vector<std::string> all(fragments);
  all.push_back("test.npy: ");
  try {
    parse(b);
    ADD_FAILURE() << "accepted a file that should be refused";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("test.npy: ", 0), 0u) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    for (const auto& f : all) EXPECT_NE(m.find(f), std::string::npos) << "'" << f << "' not in: " << m;
  }
}

// ---- writing and reading back ---------------------------------------------------------

TEST(Npy, RoundTripEveryDtypeAndRank) {
  const std::vector<Shape> shapes = {{}, {5}, {2, 3}, {2, 3, 4}, {1, 2, 3, 4}, {3, 0}, {0}, {2, 1, 1, 1, 3}};
  for (DType t : {DType::f32, DType::f64, DType::u8, DType::f16})
    for (const Shape& shape : shapes) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      Bytes data(static_cast<std::size_t>(n) * itemsize(t));
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 1);
      const Bytes file = serialize_npy(t, shape, data.data());
      ASSERT_GE(file.size(), 64u + data.size());
      EXPECT_EQ(file[6], 1) << "version 1.0";
      const std::size_t data_at = file.size() - data.size();
      EXPECT_EQ(data_at % 64, 0u) << "data must start 64-byte aligned";
      EXPECT_EQ(file[data_at - 1], '\n');
      const NpyArray a = parse(file);
      EXPECT_EQ(a.dtype, t);
      EXPECT_EQ(a.shape, shape);
      EXPECT_EQ(a.numel(), n);
      EXPECT_EQ(a.bytes, data);
    }
}

TEST(Npy, WritesExactlyWhatNumpyWrites) {
  // np.save of np.zeros((2, 3), np.float32): 10-byte prefix, 118-byte header.
  const float zeros[6] = {};
  const Bytes file = serialize_npy(DType::f32, {2, 3}, zeros);
  std::string expect_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  expect_header.append(118 - 1 - expect_header.size(), ' ');
  expect_header += '\n';
  ASSERT_EQ(file.size(), 152u);
  EXPECT_EQ(Bytes(file.begin(), file.begin() + 10), (Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0}));
  EXPECT_EQ(std::string(file.begin() + 10, file.begin() + 128), expect_header);
  // A 1-D shape keeps its comma, a scalar is ().
  const double one = 1.0;
  const Bytes scalar = serialize_npy(DType::f64, {}, &one);
  EXPECT_NE(std::string(scalar.begin(), scalar.end()).find("'shape': (), }"), std::string::npos);
  const unsigned char mask[3] = {1, 0, 1};
  const Bytes m = serialize_npy(DType::u8, {3}, mask);
  EXPECT_NE(std::string(m.begin(), m.end()).find("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }"),
            std::string::npos);
}

TEST(Npy, ReadsVersions1_2And3) {
  const NpyArray a = parse(make_file(1, hdr("<f4", "(2, 3)"), 24));
  EXPECT_EQ(a.dtype, DType::f32);
  EXPECT_EQ(a.shape, (Shape{2, 3}));
  const NpyArray b = parse(make_file(2, hdr("<f8", "(4,)"), 32));
  EXPECT_EQ(b.dtype, DType::f64);
  EXPECT_EQ(b.shape, (Shape{4}));
  const NpyArray c = parse(make_file(3, hdr("|b1", "(3,)"), 3));
  EXPECT_EQ(c.dtype, DType::u8);
  EXPECT_EQ(c.bytes.size(), 3u);
  // int32 and int64 (offsets of packed batches), read and written back.
  const NpyArray i4 = parse(make_file(1, hdr("<i4", "(3,)"), 12));
  EXPECT_EQ(i4.dtype, DType::i32);
  const std::int64_t offs[3] = {0, 5, -7};
  const NpyArray i8 = parse(serialize_npy(DType::i64, {3}, offs));
  EXPECT_EQ(i8.dtype, DType::i64);
  EXPECT_EQ(i8.i64()[2], -7);
  EXPECT_THROW(i8.i32(), Error);
  // Version 2 with a header longer than 65535 bytes (all padding): the 4-byte length.
  std::string big = hdr("|u1", "(1, 2, 1)");
  big.append(70000, ' ');
  const NpyArray d = parse(make_file(2, big, 2));
  EXPECT_EQ(d.shape, (Shape{1, 2, 1}));
  EXPECT_EQ(d.bytes, (Bytes{5, 18}));
}

TEST(Npy, ReadsTheHeaderStylesNumpyHasWritten) {
  // Double quotes, any key order, no trailing comma, no padding at all.
  EXPECT_EQ(parse(make_file(3, "{\"shape\": (3,), \"descr\": \"|u1\", \"fortran_order\": False}", 3, false)).numel(),
            3);
  EXPECT_EQ(parse(make_file(1, "{'descr':'<f4','fortran_order':False,'shape':(2,2)}\n", 16, true)).numel(), 4);
  // Python 2 longs, as old NumPy wrote them.
  EXPECT_EQ(parse(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L), }", 16)).numel(), 4);
  // A scalar is one element; a zero-size dimension is allowed here (callers refuse it).
  EXPECT_EQ(parse(make_file(1, hdr("<f8", "()"), 8)).numel(), 1);
  const NpyArray z = parse(make_file(1, hdr("<f4", "(0, 5)"), 0));
  EXPECT_EQ(z.numel(), 0);
  EXPECT_TRUE(z.bytes.empty());
  // Tabs, CRs and spaces inside the dict and the tuple.
  EXPECT_EQ(
      parse(make_file(1, "{ 'descr' :\t'<f4' ,\r 'fortran_order' : False , 'shape' : ( 3 , 1 , ) , }", 12)).numel(), 3);
}

TEST(Npy, TypedAccessorsCheckTheDtype) {
  const float x[2] = {1.5f, -2.0f};
  NpyArray a = parse(serialize_npy(DType::f32, {2}, x));
  EXPECT_EQ(a.f32()[1], -2.0f);
  a.f32()[0] = 3.0f;
  EXPECT_EQ(std::as_const(a).f32()[0], 3.0f);
  expect_error([&] { a.f64(); }, {"expected float64", "got float32"});
  expect_error([&] { a.u8(); }, {"expected bool/uint8"});
  const unsigned char m[1] = {1};
  NpyArray b = parse(serialize_npy(DType::u8, {1}, m));
  b.u8()[0] = 0;
  EXPECT_EQ(b.bytes[0], 0);
  expect_error([&] { std::as_const(b).f32(); }, {"expected float32"});
}

// ---- refused: what the library cannot represent ---------------------------------------

TEST(Npy, RefusesFortranOrder) { reject(make_file(1, hdr("<f4", "(2, 3)", "True"), 24), {"Fortran"}); }

TEST(Npy, RefusesBigEndianAndNativeOrder) {
  reject(make_file(1, hdr(">f4", "(2,)"), 8), {"big-endian", "'>f4'"});
  reject(make_file(1, hdr(">f8", "(2,)"), 16), {"big-endian", "'>f8'"});
  reject(make_file(1, hdr("=f4", "(2,)"), 8), {"native-order", "'=f4'"});
  reject(make_file(1, hdr("=f8", "(2,)"), 16), {"native-order", "'=f8'"});
  reject(make_file(1, hdr("=f2", "(2,)"), 4), {"native-order", "'=f2'"});
  reject(make_file(1, hdr(">f2", "(2,)"), 4), {"big-endian", "'>f2'"});
}

TEST(Npy, RefusesOtherDtypes) {
  for (const char* dt : {">i4", "<u4", "|i1", "<u1", "<c8", "<c16", "|S3", "<U1", "|O", "<M8[ns]", "f4", ""})
    reject(make_file(1, hdr(dt, "(1,)"), 8), {"dtype '" + std::string(dt) + "' is not supported", "'<f4'"});
  reject(make_file(1, "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (1,), }", 8),
         {"structured"});
  reject(make_file(1, "{'descr': 4, 'fortran_order': False, 'shape': (1,), }", 8), {"'descr' must be a string"});
}

// ---- refused: malformed files ---------------------------------------------------------

TEST(Npy, RefusesBadMagicAndVersions) {
  Bytes b = make_file(1, hdr("<f4", "(1,)"), 4);
  b[1] = 'X';
  reject(b, {"bad magic"});
  b[1] = 'N';
  b[0] = 0x92;
  reject(b, {"bad magic"});
  reject(Bytes{'P', 'K', 3, 4}, {"bad magic"});
  reject(Bytes{}, {"empty"});
  reject(Bytes{0x93, 'N', 'U'}, {"truncated", "3 bytes"});
  reject(Bytes{0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 10, 0}, {"truncated", "10 bytes"});  // v2 needs 12
  for (auto [major, minor] : {std::pair{4, 0}, {0, 0}, {1, 1}, {2, 5}, {255, 255}}) {
    Bytes v = make_file(1, hdr("<f4", "(1,)"), 4);
    v[6] = static_cast<unsigned char>(major);
    v[7] = static_cast<unsigned char>(minor);
    reject(v, {"unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor)});
  }
}

TEST(Npy, RefusesAHeaderThatIsNotADict) {
  reject(make_file(1, "['descr', '<f4']", 4), {"not a dict"});
  reject(make_file(1, "'descr'", 4), {"not a dict"});
  reject(make_file(1, "", 4), {"not a dict", "end of the header"});
  reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", 4), {"expected ',' or '}'"});
  reject(make_file(1, hdr("<f4", "(1,)") + " {}", 4), {"after the header dict"});
  reject(make_file(1, "{descr: '<f4', 'fortran_order': False, 'shape': (1,)}", 4), {"quoted key"});
  reject(make_file(1, "{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", 4), {"expected ':'", "'descr'"});
  reject(make_file(1, "{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", 4), {"expected ',' or '}'"});
  reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), ; }", 4), {"unexpected ';'"});
  reject(make_file(1, "{'descr': '<f4\\x', 'fortran_order': False, 'shape': (1,)}", 4), {"escape"});
  reject(make_file(1, "{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}", 4), {"malformed .npy header"});
  reject(make_file(1, "{'descr': '<f4", 4), {"unterminated string"});
  reject(make_file(1, "{'" + std::string(300, 'k') + "': 1}", 4), {"longer than"});
  Bytes no_newline = make_file(1, hdr("<f4", "(1,)"), 4);
  no_newline[no_newline.size() - 5] = ' ';
  reject(no_newline, {"newline"});
  reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}\x01", 4), {"byte 0x01"});
}

TEST(Npy, RefusesMissingDuplicateAndUnknownKeys) {
  reject(make_file(1, "{'descr': '<f4', 'shape': (1,), }", 4), {"missing key 'fortran_order'"});
  reject(make_file(1, "{'fortran_order': False}", 4), {"missing key 'descr', 'shape'"});
  reject(make_file(1, "{}", 4), {"missing key 'descr', 'fortran_order', 'shape'"});
  reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", 4),
         {"unknown key 'extra'"});
  reject(make_file(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4),
         {"duplicate key 'descr'"});
  reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'shape': (1,)}", 4),
         {"duplicate key 'shape'"});
}

TEST(Npy, RefusesBadValues) {
  reject(make_file(1, hdr("<f4", "(1,)", "Maybe"), 4), {"'fortran_order' must be True or False"});
  reject(make_file(1, hdr("<f4", "(1,)", "0"), 4), {"'fortran_order' must be True or False"});
  reject(make_file(1, hdr("<f4", "(1,)", "'False'"), 4), {"'fortran_order' must be True or False"});
  reject(make_file(1, hdr("<f4", "(-2, 3)"), 4), {"negative dimension -2"});
  EXPECT_EQ(parse(make_file(1, hdr("<f4", "(-0,)"), 0)).shape, (Shape{0}));  // -0 is 0, as in Python
}

TEST(Npy, RefusesMalformedShapes) {
  reject(make_file(1, hdr("<f4", "(2 3)"), 24), {"expected ',' or ')' in 'shape'"});
  reject(make_file(1, hdr("<f4", "(4)"), 16), {"(n,)"});
  reject(make_file(1, hdr("<f4", "(2,,3)"), 24), {"expected an integer in 'shape'", "','"});
  reject(make_file(1, hdr("<f4", "(,)"), 4), {"expected an integer in 'shape'"});
  reject(make_file(1, hdr("<f4", "[2, 3]"), 24), {"'shape' (it must be a tuple)"});
  reject(make_file(1, hdr("<f4", "4"), 16), {"'shape' (it must be a tuple)"});
  reject(make_file(1, hdr("<f4", "(2.5,)"), 16), {"unexpected '.'"});
  reject(make_file(1, hdr("<f4", "(2, 'a')"), 8), {"expected an integer in 'shape'", "a string"});
  reject(make_file(1, hdr("<f4", "(2, (3,))"), 8), {"expected an integer in 'shape'"});
  reject(make_file(1, hdr("<f4", "(012,)"), 48), {"leading zero"});
  reject(make_file(1, hdr("<f4", "(-,)"), 4), {"'-' not followed by digits"});
  reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", 24), {"in 'shape'"});
  std::string dims = "(";
  for (int i = 0; i < 65; ++i) dims += "1, ";
  reject(make_file(1, hdr("<f4", dims + ")"), 4), {"more than 64 dimensions"});
  dims = "(";
  for (int i = 0; i < 64; ++i) dims += "1, ";
  EXPECT_EQ(parse(make_file(1, hdr("<f4", dims + ")"), 4)).shape.size(), 64u);
}

// ---- refused: lengths that lie --------------------------------------------------------

TEST(Npy, RefusesAHeaderLengthPastTheEnd) {
  Bytes b = make_file(1, hdr("<f4", "(1,)"), 4);
  b[8] = 0xff, b[9] = 0x7f;
  reject(b, {"header length 32767 runs past the end", std::to_string(b.size()) + " bytes"});
  Bytes v2 = make_file(2, hdr("<f4", "(1,)"), 4);
  v2[11] = 0xff;  // a 4 GiB header in a tiny file
  reject(v2, {"runs past the end"});
  Bytes v3 = make_file(3, hdr("<f4", "(1,)"), 0);
  v3[8] = static_cast<unsigned char>(v3[8] + 1);  // one byte more than there is
  reject(v3, {"runs past the end"});
  Bytes zero = make_file(1, hdr("<f4", "(1,)"), 4);
  zero[8] = 0, zero[9] = 0;
  reject(zero, {"newline"});
}

TEST(Npy, RefusesDataShorterOrLongerThanTheShape) {
  reject(make_file(1, hdr("<f4", "(2, 3)"), 20), {"truncated", "(2, 3)", "float32", "needs 24 bytes", "has 20"});
  reject(make_file(1, hdr("<f4", "(2, 3)"), 28), {"longer than the shape", "needs 24 bytes", "has 28"});
  reject(make_file(2, hdr("<f8", "()"), 0), {"truncated", "needs 8 bytes", "has 0"});
  reject(make_file(3, hdr("|b1", "(0,)"), 1), {"longer than the shape", "needs 0 bytes", "has 1"});
  reject(make_file(1, hdr("<f8", "(3,)"), 23), {"needs 24 bytes", "has 23"});
}

TEST(Npy, HostileShapesFailWithoutAllocating) {
  const std::vector<std::pair<Bytes, std::string>> cases = {
      // 2^62 x 4 elements: the element count overflows 64 bits.
      {make_file(1, hdr("<f4", "(4611686018427387904, 4)"), 8), "shape (4611686018427387904, 4) is too large"},
      // 2^61 x 2 float64: the count fits, the byte count (2^65) does not.
      {make_file(1, hdr("<f8", "(2305843009213693952, 2)"), 8), "too large"},
      // 2^62 float32: 2^64 bytes.
      {make_file(1, hdr("<f4", "(4611686018427387904,)"), 8), "too large"},
      // A zero does not excuse the other dimensions' product.
      {make_file(1, hdr("<f4", "(1099511627776, 1099511627776, 0)"), 0), "too large"},
      {make_file(1, hdr("<f8", "(99999999999999999999,)"), 8), "does not fit in 64 bits"},
      {make_file(1, hdr("<f8", "(-99999999999999999999,)"), 8), "does not fit in 64 bits"},
      // Huge but representable: a length mismatch, not a 4 TiB allocation.
      {make_file(1, hdr("<f4", "(1048576, 1048576)"), 8),
       "shape (1048576, 1048576) of float32 needs 4398046511104 bytes"},
      {make_file(2, hdr("<f8", "(1152921504606846975,)"), 16), "needs 9223372036854775800 bytes"},
  };
  {  // the watch itself sees a large request
    test::watch_allocations(true);
    std::vector<unsigned char> v(std::size_t{3} << 20);
    test::watch_allocations(false);
    ASSERT_EQ(v.back(), 0);
    ASSERT_GE(test::largest_allocation(), v.size());
  }
  for (const auto& [file, fragment] : cases) {
    test::watch_allocations(true);
    reject(file, {fragment});
    test::watch_allocations(false);
    EXPECT_LT(test::largest_allocation(), std::size_t{1} << 20)
        << "allocated " << test::largest_allocation() << " bytes for " << fragment;
  }
}

// ---- serialize_npy's own checks -------------------------------------------------------

TEST(Npy, SerializeRefusesBadShapes) {
  const float x[1] = {0};
  expect_error([&] { serialize_npy(DType::f32, {2, -1}, x); }, {"serialize_npy", "negative dimension", "(2, -1)"});
  expect_error([&] { serialize_npy(DType::f32, {4611686018427387904, 4}, x); }, {"serialize_npy", "too large"});
  expect_error([&] { serialize_npy(DType::f32, {3}, nullptr); }, {"serialize_npy", "no data"});
  expect_error([&] { serialize_npy(DType::u8, Shape(65, 1), x); }, {"65 dimensions"});
  EXPECT_NO_THROW(serialize_npy(DType::f32, {0, 3}, nullptr));
}

// ---- read_npy -------------------------------------------------------------------------

TEST(Npy, ReadNpyReadsFilesAndPipes) {
  test::TempDir dir;
  std::vector<float> x(300000);  // 1.2 MB: more than one read() chunk
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f;
  const Bytes file = serialize_npy(DType::f32, {300, 1000}, x.data());
  const std::string path = dir.path + "/x.npy";
  {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(file.data(), 1, file.size(), f), file.size());
    std::fclose(f);
  }
  const NpyArray a = read_npy(path);
  EXPECT_EQ(a.shape, (Shape{300, 1000}));
  EXPECT_EQ(std::memcmp(a.f32(), x.data(), x.size() * sizeof(float)), 0);

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread writer([&] {
    std::size_t done = 0;
    while (done < file.size()) {
      const ssize_t n = ::write(fds[1], file.data() + done, file.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    ::close(fds[1]);
  });
  const NpyArray p = read_npy("/dev/fd/" + std::to_string(fds[0]));
  writer.join();
  ::close(fds[0]);
  EXPECT_EQ(p.bytes, a.bytes);
}

TEST(Npy, ReadNpyErrorsNameThePath) {
  expect_error([] { read_npy("/nonexistent_dir_for_sdpa/q.npy"); },
               {"/nonexistent_dir_for_sdpa/q.npy: cannot open for reading", "No such file"});
  test::TempDir dir;
  expect_error([&] { read_npy(dir.path); }, {dir.path + ": is a directory"});
  const std::string empty = dir.path + "/empty.npy";
  std::fclose(std::fopen(empty.c_str(), "wb"));
  expect_error([&] { read_npy(empty); }, {empty + ": not a .npy file (it is empty)"});
  const std::string text = dir.path + "/notes.txt";
  FILE* f = std::fopen(text.c_str(), "wb");
  std::fputs("hello, world\n", f);
  std::fclose(f);
  expect_error([&] { read_npy(text); }, {text + ": not a .npy file (bad magic string)"});
}

}  // namespace
}  // namespace sdpa::io
