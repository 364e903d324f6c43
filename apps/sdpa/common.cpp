// common.cpp — see common.hpp.
#include "common.hpp"

#include "io/atomic_file.hpp"
#include "io/subprocess.hpp"

#include <CLI/CLI.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace sdpa::cli {

std::function<int()> with_flag_names(const CLI::App* app, std::function<int()> run,
                                     std::map<std::string, std::string> aliases) {
  return [app, run = std::move(run), aliases = std::move(aliases)] {
    try {
      return run();
    } catch (const Error& e) {
      const std::string msg = e.what();
      std::size_t n = 0;  // the leading parameter name: [a-z_]+ before ':' or ' '
      while (n < msg.size() && (std::islower(static_cast<unsigned char>(msg[n])) != 0 || msg[n] == '_')) ++n;
      if (n == 0 || n == msg.size() || (msg[n] != ':' && msg[n] != ' ')) throw;
      const std::string name = msg.substr(0, n);
      std::string flag;
      if (const auto a = aliases.find(name); a != aliases.end()) {
        flag = a->second;
      } else {
        flag = "--" + name;
        std::replace(flag.begin(), flag.end(), '_', '-');
      }
      if (app->get_option_no_throw(flag) == nullptr) throw;
      throw Error(flag + msg.substr(n));
    }
  };
}
namespace {

std::string shape_text(const std::vector<i64>& s) {
  std::string t = "[";
  for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

Tensor load_tensor(const std::string& path, const std::string& name, bool allow_f16) {
  io::NpyArray a = io::read_npy(path);
  Tensor t;
  t.name = name;
  t.dtype = a.dtype;
  t.file_shape = a.shape;
  const bool f16 = a.dtype == io::DType::f16 && allow_f16;
  if (a.dtype != io::DType::f32 && a.dtype != io::DType::f64 && !f16)
    throw Error(name + " (" + path + "): expected float32 or float64" + (allow_f16 ? " or float16" : "") +
                " data, got " + io::dtype_name(a.dtype));
  if (a.shape.size() < 2 || a.shape.size() > 4)
    throw Error(name + " (" + path + "): expected a [N, D], [H, N, D] or [B, H, N, D] array, got shape " +
                shape_text(a.shape));
  for (auto d : a.shape)
    if (d == 0) throw Error(name + " (" + path + "): shape " + shape_text(a.shape) + " has a zero-size dimension");
  t.shape = {1, 1, 1, 1};
  std::copy(a.shape.begin(), a.shape.end(), t.shape.begin() + static_cast<long>(4 - a.shape.size()));
  const auto n = static_cast<std::size_t>(a.numel());
  if (f16) {
    t.half.resize(n);
    std::memcpy(t.half.data(), a.f16(), n * sizeof(fp16));
    return t;
  }
  t.data.resize(n);
  if (a.dtype == io::DType::f32) {
    std::memcpy(t.data.data(), a.f32(), n * sizeof(float));
  } else {
    const double* d = a.f64();
    for (std::size_t i = 0; i < n; ++i) t.data[i] = static_cast<float>(d[i]);
  }
  return t;
}

void use_mask(const Mask& m, Options& opt) {
  if (m.keep)
    opt.keep = contiguous<const std::uint8_t>(m.keep_bits.data(), m.shape);
  else
    opt.mask = contiguous<const float>(m.additive.data(), m.shape);
}

void require_dtype_of(const Tensor& t, const Tensor& q) {
  if (t.dtype != q.dtype)
    throw Error(t.name + ": dtype " + io::dtype_name(t.dtype) + " differs from --q's " + io::dtype_name(q.dtype));
}

std::vector<float> load_sinks(const std::string& path) {
  const io::NpyArray a = io::read_npy(path);
  if (a.shape.size() != 1)
    throw Error("--sinks (" + path + "): expected a 1-D array of Hq logits, got rank " +
                std::to_string(a.shape.size()));
  const auto n = static_cast<std::size_t>(a.numel());
  if (a.dtype == io::DType::f32) return std::vector<float>(a.f32(), a.f32() + n);
  if (a.dtype == io::DType::f64) {
    std::vector<float> s(n);
    for (std::size_t h = 0; h < n; ++h) s[h] = static_cast<float>(a.f64()[h]);
    return s;
  }
  throw Error("--sinks (" + path + "): expected float32 or float64 logits, got " + io::dtype_name(a.dtype));
}

std::vector<std::int32_t> load_int32(const std::string& path, const std::string& name, std::size_t rank,
                                     std::vector<i64>& shape) {
  const io::NpyArray a = io::read_npy(path);
  if (a.shape.size() != rank)
    throw Error(name + " (" + path + "): expected a rank-" + std::to_string(rank) + " array, got rank " +
                std::to_string(a.shape.size()));
  shape = a.shape;
  const auto n = static_cast<std::size_t>(a.numel());
  if (a.dtype == io::DType::i32) return std::vector<std::int32_t>(a.i32(), a.i32() + n);
  if (a.dtype != io::DType::i64)
    throw Error(name + " (" + path + "): expected int32 or int64, got " + io::dtype_name(a.dtype));
  std::vector<std::int32_t> r(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t x = a.i64()[i];
    if (x < INT32_MIN || x > INT32_MAX)
      throw Error(name + " (" + path + "): element " + std::to_string(i) + " = " + std::to_string(x) +
                  " does not fit in int32");
    r[i] = static_cast<std::int32_t>(x);
  }
  return r;
}

Mask load_mask(const std::string& path) {
  io::NpyArray a = io::read_npy(path);
  if (a.shape.size() > 4) throw Error("mask (" + path + "): rank " + std::to_string(a.shape.size()) + " > 4");
  for (auto d : a.shape)
    if (d == 0) throw Error("mask (" + path + "): shape " + shape_text(a.shape) + " has a zero-size dimension");
  if (a.dtype != io::DType::u8 && a.dtype != io::DType::f32 && a.dtype != io::DType::f64)
    throw Error("mask (" + path + "): expected bool, uint8, float32 or float64 data, got " + io::dtype_name(a.dtype));
  Mask m;
  m.file_rank = a.shape.size();
  std::copy(a.shape.begin(), a.shape.end(), m.shape.begin() + static_cast<long>(4 - a.shape.size()));
  const auto n = static_cast<std::size_t>(a.numel());
  if (a.dtype == io::DType::u8) {
    m.keep = true;
    m.keep_bits.assign(a.u8(), a.u8() + n);
  } else if (a.dtype == io::DType::f32) {
    m.additive.assign(a.f32(), a.f32() + n);
  } else {
    m.additive.resize(n);
    for (std::size_t i = 0; i < n; ++i) m.additive[i] = static_cast<float>(a.f64()[i]);
  }
  return m;
}

std::vector<unsigned char> npy_bytes(const std::vector<float>& data, const std::vector<i64>& shape, io::DType dtype) {
  if (dtype == io::DType::f32) return io::serialize_npy(io::DType::f32, shape, data.data());
  std::vector<double> d(data.begin(), data.end());
  return io::serialize_npy(io::DType::f64, shape, d.data());
}

std::vector<unsigned char> npy_bytes(const std::vector<fp16>& data, const std::vector<i64>& shape) {
  return io::serialize_npy(io::DType::f16, shape, data.data());
}

Causal parse_causal(const std::string& s) {
  if (s == "none") return Causal::none;
  if (s == "top-left") return Causal::top_left;
  if (s == "bottom-right") return Causal::bottom_right;
  throw Error("--causal: expected none, top-left or bottom-right, got '" + s + "'");
}

Window parse_window(const std::string& s) {
  const auto comma = s.find(',');
  try {
    if (comma == std::string::npos) throw std::invalid_argument("no comma");
    std::size_t used = 0;
    const long long l = std::stoll(s.substr(0, comma), &used);
    if (used != comma) throw std::invalid_argument("trailing text");
    const std::string rest = s.substr(comma + 1);
    const long long r = std::stoll(rest, &used);
    if (used != rest.size()) throw std::invalid_argument("trailing text");
    return {l, r};
  } catch (const std::exception&) {
    throw Error("--window: expected L,R (two integers, -1 for unbounded), got '" + s + "'");
  }
}

void ShapeOptions::add_to(CLI::App& c) {
  c.add_option("--batch", batch, "B")->capture_default_str();
  c.add_option("--heads", heads, "Query heads Hq")->capture_default_str();
  c.add_option("--kv-heads", kv_heads, "Key/value heads Hkv (default: Hq)");
  c.add_option("--seq", seq, "Query length Nq")->capture_default_str();
  c.add_option("--kv-seq", kv_seq, "Key length Nk (default: Nq)");
  c.add_option("--dim", dim, "Head dim Dk")->capture_default_str();
  c.add_option("--dim-v", dim_v, "Value dim Dv (default: Dk)");
}

ShapeOptions::Sizes ShapeOptions::resolve() const {
  const Sizes s{batch, heads, kv_heads ? kv_heads : heads, seq, kv_seq ? kv_seq : seq, dim, dim_v ? dim_v : dim};
  for (auto [v, n] : {std::pair{s.B, "--batch"},
                      {s.Hq, "--heads"},
                      {s.Hkv, "--kv-heads"},
                      {s.Nq, "--seq"},
                      {s.Nk, "--kv-seq"},
                      {s.Dk, "--dim"},
                      {s.Dv, "--dim-v"}})
    if (v <= 0) throw Error(std::string(n) + ": must be >= 1, got " + std::to_string(v));
  if (s.Hq % s.Hkv != 0)
    throw Error("--kv-heads: must divide --heads, got Hq = " + std::to_string(s.Hq) +
                ", Hkv = " + std::to_string(s.Hkv));
  return s;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double seconds_since(double t0) { return now_seconds() - t0; }

bool stderr_is_terminal() { return ::isatty(STDERR_FILENO) == 1; }

ReportDir::ReportDir(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw Error("--out: give a directory for the report");
  std::error_code ec;
  created_ = std::filesystem::create_directory(path_, ec);
  if (ec) throw Error("--out: cannot create directory '" + path_ + "': " + ec.message());
  if (!std::filesystem::is_directory(path_)) throw Error("--out: '" + path_ + "' is not a directory");
  io::OutputSet probe;  // fail now, not after the work, if the directory is not writable
  probe.add(path_ + "/index.html", {});
}

ReportDir::~ReportDir() {
  std::error_code ec;
  if (created_ && std::filesystem::is_empty(path_, ec)) std::filesystem::remove(path_, ec);
}

std::string plot_python() {
  const char* env = std::getenv("SDPA_PYTHON");
  return env && *env ? env : "/usr/bin/python3";
}

std::vector<unsigned char> run_plot_script(const std::string& what, const std::string& python,
                                           const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv{python, script};
  argv.insert(argv.end(), args.begin(), args.end());
  io::ProcessResult r;
  try {
    r = io::run_process(argv);
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
  if (r.exit_code != 0 || r.out.empty())
    throw Error(what + ": the plotting script failed (" + python + " " + script + ", exit status " +
                std::to_string(r.exit_code) + "; its own message is above; is python3-matplotlib installed?)");
  return std::move(r.out);
}

}  // namespace sdpa::cli
