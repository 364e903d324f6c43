// npy_tool.cpp — fixtures for the CLI tests without NumPy:
//   npy_tool make PATH f32|f64|f16|bool SEED D0 ...    seeded standard-normal data (bool: ~70% true;
//                                                      f16: the f32 values rounded to float16)
//   npy_tool offsets PATH i32|i64 V0 [V1 ...]          a 1-D int array of the given values
//   npy_tool info PATH                                 prints "float32 [2, 3]"
//   npy_tool maxdiff A B                               prints max |a - b| (as float64)
//   npy_tool table PATH COLS V0 V1 ...                 an int32 [n / COLS, COLS] array (a block table)
//   npy_tool fill PATH VALUE D0 ...                    a float32 array of one value
//   npy_tool transpose12 IN OUT                        float32 [A, B, C, D] -> [A, C, B, D]
//   npy_tool dequant CODES SCALES OUT                  int8 codes [A, R, H, D] (uint8 bytes) times scales
//                                                      [A, H, R] -> float32 [A, R, H, D]
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "io/atomic_file.hpp"
#include "io/npy.hpp"
#include "sdpa/error.hpp"
#include "sdpa/half.hpp"

using namespace sdpa::io;

static std::vector<double> as_f64(const NpyArray& a) {
  std::vector<double> out(static_cast<std::size_t>(a.numel()));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = a.dtype == DType::f32   ? a.f32()[i]
             : a.dtype == DType::f64 ? a.f64()[i]
             : a.dtype == DType::f16 ? static_cast<float>(sdpa::fp16::from_bits(a.f16()[i]))
                                     : a.u8()[i];
  return out;
}

int main(int argc, char** argv) try {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "make" && argc >= 6) {
    const std::string type = argv[3];
    std::mt19937_64 rng(std::stoull(argv[4]));
    std::vector<std::int64_t> shape;
    for (int i = 5; i < argc; ++i) shape.push_back(std::stoll(argv[i]));
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    std::normal_distribution<double> normal;
    std::vector<float> f(n);
    std::vector<double> d(n);
    std::vector<unsigned char> b(n);
    for (std::int64_t i = 0; i < n; ++i) d[i] = normal(rng), f[i] = static_cast<float>(d[i]), b[i] = d[i] > -0.5;
    if (type == "f32")
      write_npy_atomic(argv[2], DType::f32, shape, f.data());
    else if (type == "f64")
      write_npy_atomic(argv[2], DType::f64, shape, d.data());
    else if (type == "bool")
      write_npy_atomic(argv[2], DType::u8, shape, b.data());
    else if (type == "f16") {
      std::vector<sdpa::fp16> h(n);
      for (std::int64_t i = 0; i < n; ++i) h[i] = sdpa::fp16(f[i]);
      write_npy_atomic(argv[2], DType::f16, shape, h.data());
    }
    else
      return 2;
    return 0;
  }
  if (mode == "offsets" && argc >= 5) {
    const std::string type = argv[3];
    std::vector<std::int64_t> v64;
    for (int i = 4; i < argc; ++i) v64.push_back(std::stoll(argv[i]));
    std::vector<std::int32_t> v32(v64.begin(), v64.end());
    const std::vector<std::int64_t> shape{static_cast<std::int64_t>(v64.size())};
    if (type == "i32")
      write_npy_atomic(argv[2], DType::i32, shape, v32.data());
    else if (type == "i64")
      write_npy_atomic(argv[2], DType::i64, shape, v64.data());
    else
      return 2;
    return 0;
  }
  if (mode == "info" && argc == 3) {
    const NpyArray a = read_npy(argv[2]);
    std::string s = "[";
    for (std::size_t i = 0; i < a.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(a.shape[i]);
    std::printf("%s %s]\n", a.dtype == DType::u8 ? "uint8" : dtype_name(a.dtype), s.c_str());
    return 0;
  }
  if (mode == "maxdiff" && argc == 4) {
    const auto a = as_f64(read_npy(argv[2])), b = as_f64(read_npy(argv[3]));
    if (a.size() != b.size()) return std::printf("size mismatch\n"), 1;
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::fmax(m, std::fabs(a[i] - b[i]));
    std::printf("%.3e\n", m);
    return 0;
  }
  if (mode == "table" && argc >= 5) {
    std::vector<std::int32_t> v;
    for (int i = 4; i < argc; ++i) v.push_back(std::stoi(argv[i]));
    const std::int64_t cols = std::stoll(argv[3]);
    if (cols <= 0 || static_cast<std::int64_t>(v.size()) % cols) return 2;
    write_npy_atomic(argv[2], DType::i32, {static_cast<std::int64_t>(v.size()) / cols, cols}, v.data());
    return 0;
  }
  if (mode == "fill" && argc >= 5) {
    std::vector<std::int64_t> shape;
    for (int i = 4; i < argc; ++i) shape.push_back(std::stoll(argv[i]));
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    const std::vector<float> f(static_cast<std::size_t>(n), std::stof(argv[3]));
    write_npy_atomic(argv[2], DType::f32, shape, f.data());
    return 0;
  }
  if (mode == "transpose12" && argc == 4) {
    const NpyArray a = read_npy(argv[2]);
    if (a.shape.size() != 4) return std::fprintf(stderr, "transpose12: rank 4 only\n"), 2;
    const auto x = as_f64(a);
    const auto [A, B, C, D] = std::array<std::int64_t, 4>{a.shape[0], a.shape[1], a.shape[2], a.shape[3]};
    std::vector<float> y(x.size());
    for (std::int64_t i = 0; i < A; ++i)
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t c = 0; c < C; ++c)
          for (std::int64_t d = 0; d < D; ++d)
            y[static_cast<std::size_t>(((i * C + c) * B + b) * D + d)] =
                static_cast<float>(x[static_cast<std::size_t>(((i * B + b) * C + c) * D + d)]);
    write_npy_atomic(argv[3], DType::f32, {A, C, B, D}, y.data());
    return 0;
  }
  if (mode == "dequant" && argc == 5) {
    const NpyArray codes = read_npy(argv[2]), scales = read_npy(argv[3]);
    if (codes.shape.size() != 4 || scales.shape.size() != 3) return std::fprintf(stderr, "dequant: ranks 4 and 3\n"), 2;
    const auto [A, R, H, D] =
        std::array<std::int64_t, 4>{codes.shape[0], codes.shape[1], codes.shape[2], codes.shape[3]};
    std::vector<float> y(static_cast<std::size_t>(A * R * H * D));
    for (std::int64_t a = 0; a < A; ++a)
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < D; ++d) {
            const auto i = static_cast<std::size_t>(((a * R + r) * H + h) * D + d);
            y[i] = static_cast<float>(static_cast<std::int8_t>(codes.u8()[i])) *
                   scales.f32()[static_cast<std::size_t>((a * H + h) * R + r)];
          }
    write_npy_atomic(argv[4], DType::f32, codes.shape, y.data());
    return 0;
  }
  std::fprintf(stderr, "usage: npy_tool make PATH f32|f64|f16|bool SEED DIMS... | info PATH | maxdiff A B\n");
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "npy_tool: %s\n", e.what());
  return 1;
}
