// test_npy.cpp — the .npy reader/writer and the all-or-nothing output set.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "io/atomic_file.hpp"
#include "io/npy.hpp"
#include "sdpa/error.hpp"

namespace sdpa::io {
namespace {

using Bytes = std::vector<unsigned char>;

// A .npy file with a hand-written header: version, header text (padded + '\n' added), data.
Bytes make_file(int major, std::string header, std::size_t data_bytes, bool pad = true) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  if (pad)
    while ((prefix + header.size() + 1) % 64) header += ' ';
  header += '\n';
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major), 0};
  const std::size_t n = header.size();
  b.push_back(n & 0xff);
  b.push_back((n >> 8) & 0xff);
  if (major != 1) {
    b.push_back((n >> 16) & 0xff);
    b.push_back((n >> 24) & 0xff);
  }
  b.insert(b.end(), header.begin(), header.end());
  for (std::size_t i = 0; i < data_bytes; ++i) b.push_back(static_cast<unsigned char>(i));
  return b;
}

NpyArray parse(const Bytes& b) { return parse_npy(b.data(), b.size(), "test.npy"); }

// Expects sdpa::Error whose message contains every fragment and names the file.
void expect_reject(const Bytes& b, std::initializer_list<const char*> fragments) {
  try {
    parse(b);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("test.npy"), std::string::npos) << m;
    for (auto f : fragments) EXPECT_NE(m.find(f), std::string::npos) << "'" << f << "' not in: " << m;
  }
}

TEST(Npy, RoundTripAllDtypesAndRanks) {
  for (DType t : {DType::f32, DType::f64, DType::u8})
    for (const std::vector<std::int64_t>& shape : std::vector<std::vector<std::int64_t>>{
             {}, {5}, {2, 3}, {2, 3, 4}, {1, 2, 3, 4}, {3, 0}}) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      Bytes data(static_cast<std::size_t>(n) * itemsize(t));
      for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 1);
      const Bytes file = serialize_npy(t, shape, data.data());
      EXPECT_EQ((file.size() - data.size()) % 64, 0u) << "data must start 64-byte aligned";
      const NpyArray a = parse(file);
      EXPECT_EQ(a.dtype, t);
      EXPECT_EQ(a.shape, shape);
      EXPECT_EQ(a.bytes, data);
    }
}

TEST(Npy, ReadsVersions1_2_3AndNumpyStyles) {
  auto a = parse(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24));
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{2, 3}));
  auto b = parse(make_file(2, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", 32));
  EXPECT_EQ(b.dtype, DType::f64);
  auto c = parse(make_file(3, "{\"descr\": \"|b1\", \"fortran_order\": False, \"shape\": (3,)}", 3));
  EXPECT_EQ(c.dtype, DType::u8);
  auto d = parse(make_file(1, "{'shape': (2L, 2L), 'fortran_order': False, 'descr': '<f4'}", 16));  // old NumPy
  EXPECT_EQ(d.numel(), 4);
  auto e = parse(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4));
  EXPECT_EQ(e.numel(), 1);
}

TEST(Npy, RejectsWhatItCannotRepresent) {
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24), {"Fortran"});
  expect_reject(make_file(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8), {"big-endian"});
  for (const char* dt : {"<f2", "<i4", "<i8", "<c8", "|S3", "<U1", "O"})
    expect_reject(make_file(1, std::string("{'descr': '") + dt + "', 'fortran_order': False, 'shape': (1,), }", 8),
                  {"not supported", dt});
  expect_reject(make_file(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4),
                {"malformed"});
}

TEST(Npy, RejectsMalformedHeaders) {
  Bytes bad_magic = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
  bad_magic[1] = 'X';
  expect_reject(bad_magic, {"magic"});
  Bytes bad_version = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
  bad_version[6] = 4;
  expect_reject(bad_version, {"version 4.0"});
  expect_reject(make_file(1, "['descr', '<f4']", 4), {"not a dict"});
  expect_reject(make_file(1, "{'descr': '<f4', 'shape': (1,), }", 4), {"must have"});
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", 4),
                {"unexpected key 'extra'"});
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", 4), {"negative"});
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 4), {"shape"});
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4), }", 16), {"trailing comma"});
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }", 4), {"True or False"});
  expect_reject(make_file(1, "{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }", 4), {"malformed"});
  Bytes no_newline = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
  no_newline[no_newline.size() - 5] = ' ';
  expect_reject(no_newline, {"newline"});
  expect_reject(Bytes{0x93, 'N', 'U'}, {"magic"});
}

TEST(Npy, RejectsLengthsThatLie) {
  // Header length past the end of the file.
  Bytes b = make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
  b[8] = 0xff, b[9] = 0x7f;
  expect_reject(b, {"runs past the end"});
  Bytes v2 = make_file(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", 4);
  v2[11] = 0x7f;  // a 2 GiB header in a tiny file
  expect_reject(v2, {"runs past the end"});
  // Data shorter, and longer, than the shape says.
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20), {"needs 24", "has 20"});
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28), {"needs 24", "has 28"});
}

TEST(Npy, HostileShapesFailWithoutAllocating) {
  // 2^62 x 4 elements: the element count overflows 64 bits.
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", 8),
                {"64 bits"});
  // 2^61 x 2 float64: the count fits, the byte count (2^65) does not.
  expect_reject(make_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952, 2), }", 8),
                {"too large"});
  expect_reject(make_file(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8),
                {"overflows"});
  // A huge but representable shape with tiny data: a length mismatch, not a 1 TB allocation.
  expect_reject(make_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (262144, 1048576), }", 8),
                {"needs 1099511627776"});
}

// ---- OutputSet ----------------------------------------------------------------------------
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/sdpa_io_test.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    for (const auto& f : files()) ::unlink((path + "/" + f).c_str());
    ::rmdir(path.c_str());
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(path.c_str())) {
      while (dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) out.push_back(e->d_name);
      ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

TEST(OutputSet, CommitWritesEveryFile) {
  TempDir dir;
  const float x[3] = {1, 2, 3};
  {
    OutputSet out;
    out.add(dir.path + "/a.npy", serialize_npy(DType::f32, {3}, x));
    out.add(dir.path + "/b.npy", serialize_npy(DType::f32, {1, 3}, x));
    EXPECT_EQ(dir.files().size(), 2u);  // two temporaries, no target yet
    for (const auto& f : dir.files()) EXPECT_NE(f.find(".tmp."), std::string::npos) << f;
    out.commit();
  }
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"a.npy", "b.npy"}));
  const NpyArray a = read_npy(dir.path + "/a.npy");
  EXPECT_EQ(std::memcmp(a.f32(), x, sizeof x), 0);
}

TEST(OutputSet, NoCommitLeavesNothing) {
  TempDir dir;
  const float x[1] = {1};
  try {
    OutputSet out;
    out.add(dir.path + "/a.npy", serialize_npy(DType::f32, {1}, x));
    throw std::runtime_error("a later step failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(dir.files().empty());
}

TEST(OutputSet, ExistingFileUntouchedUntilCommit) {
  TempDir dir;
  const std::string target = dir.path + "/keep.npy";
  std::ofstream(target) << "old";
  {
    OutputSet out;
    out.add(target, Bytes{1, 2, 3});
  }  // no commit
  std::ifstream f(target);
  std::string s;
  f >> s;
  EXPECT_EQ(s, "old");
}

TEST(OutputSet, ErrorsNameThePath) {
  OutputSet out;
  try {
    out.add("/nonexistent_dir_for_sdpa/x.npy", Bytes{1});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent_dir_for_sdpa/x.npy"), std::string::npos) << e.what();
  }
  TempDir dir;
  OutputSet twice;
  twice.add(dir.path + "/a.npy", Bytes{1});
  EXPECT_THROW(twice.add(dir.path + "/a.npy", Bytes{1}), Error);
  EXPECT_THROW(twice.add(dir.path + "/", Bytes{1}), Error);
}

TEST(Npy, ReadErrorsNameThePath) {
  try {
    read_npy("/nonexistent_dir_for_sdpa/q.npy");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent_dir_for_sdpa/q.npy"), std::string::npos);
  }
}

}  // namespace
}  // namespace sdpa::io
