// common.hpp — what the sdpa subcommands share: loading .npy tensors as attention
// views, parsing option values, timing and memory figures.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "io/npy.hpp"
#include "sdpa/sdpa.hpp"

namespace CLI {
class App;
}

namespace sdpa::cli {

using i64 = std::int64_t;

/// The --isa option's help: the values parse_isa takes (sdpa/dispatch.hpp).
inline const char* const kIsaHelp = isa_choices();

/// `run` with the training library's parameter names turned into this command's flags: an
/// sdpa::Error whose message starts with a parameter as the library and Python name it
/// (d_model, budget_s) is rethrown starting with the flag of `app` that sets it (--d-model,
/// --budget): `aliases` maps the names whose flag is not "--" + the name with '-' for '_'.
std::function<int()> with_flag_names(const CLI::App* app, std::function<int()> run,
                                     std::map<std::string, std::string> aliases = {});

/// The attention shape options `check` and `bench` share: --batch --heads --kv-heads
/// --seq --kv-seq --dim --dim-v (0 for the last of a pair means "same as the first").
struct ShapeOptions {
  i64 batch = 1, heads = 8, kv_heads = 0, seq = 1024, kv_seq = 0, dim = 64, dim_v = 0;
  struct Sizes {
    i64 B, Hq, Hkv, Nq, Nk, Dk, Dv;
  };
  void add_to(CLI::App& c);
  /// The sizes with the defaults applied; throws sdpa::Error naming the option for a size
  /// below 1 or --kv-heads not dividing --heads.
  Sizes resolve() const;
};

/// A tensor read from a .npy file, promoted to rank 4 ([N,D] -> [1,1,N,D]): float32 (from a
/// float32 or float64 file), or float16 kept as it is.
struct Tensor {
  std::string name;  // the option it came from, for messages
  io::DType dtype;   // what the file held
  std::vector<i64> file_shape;
  std::array<i64, 4> shape;  // rank-4 shape
  std::vector<float> data;   // contiguous float32 (empty for a float16 file)
  std::vector<fp16> half;    // contiguous float16 (only for a float16 file)

  View4<const float> view() const { return contiguous(data.data(), shape); }
  View4<const fp16> half_view() const { return contiguous(half.data(), shape); }
};

/// Throws sdpa::Error naming t's option when its file's dtype is not --q's.
void require_dtype_of(const Tensor& t, const Tensor& q);

/// Reads a float32/float64 array (and float16 where `allow_f16`) of rank 2, 3 or 4 with no
/// zero-size dimension.
Tensor load_tensor(const std::string& path, const std::string& name, bool allow_f16 = false);

/// A --sinks file: a 1-D float32 or float64 array of one logit per query head, read as float32
/// (the library's type); the library checks its length and values.
std::vector<float> load_sinks(const std::string& path);
/// An int32 or int64 array of the given rank, as int32 (an int64 element that does not fit is an
/// error naming it); `shape` receives the file's shape.
std::vector<std::int32_t> load_int32(const std::string& path, const std::string& name, std::size_t rank,
                                     std::vector<i64>& shape);

/// A mask file: float -> additive mask, bool/uint8 -> keep-mask; rank <= 4, broadcast
/// NumPy-style (right-aligned) to [B, Hq, Nq, Nk] by giving size-1 dimensions stride 0.
struct Mask {
  bool keep = false;
  std::size_t file_rank = 0;  // the file's own rank, before promotion to 4
  std::array<i64, 4> shape{1, 1, 1, 1};
  std::vector<float> additive;
  std::vector<std::uint8_t> keep_bits;
};
Mask load_mask(const std::string& path);
/// Points opt.mask (additive) or opt.keep (boolean) at m's data; m must outlive opt's use.
void use_mask(const Mask& m, Options& opt);

/// The .npy bytes of float32 data, stored as `dtype` (f32 or f64) ...
std::vector<unsigned char> npy_bytes(const std::vector<float>& data, const std::vector<i64>& shape, io::DType dtype);
/// ... and of float16 data ('<f2').
std::vector<unsigned char> npy_bytes(const std::vector<fp16>& data, const std::vector<i64>& shape);

// The tensors of a file in the element type the library is called with: float32 (from float32
// or float64 files) or float16; and the .npy bytes of a result in the dtype the outputs keep.
template <class T>
View4<const T> view_of(const Tensor& t) {
  if constexpr (std::is_same_v<T, fp16>)
    return t.half_view();
  else
    return t.view();
}
template <class T>
std::vector<unsigned char> out_bytes(const std::vector<T>& x, const std::vector<i64>& shape, io::DType dtype) {
  if constexpr (std::is_same_v<T, fp16>)
    return npy_bytes(x, shape);
  else
    return npy_bytes(x, shape, dtype);
}

Causal parse_causal(const std::string& s);  // none | top-left | bottom-right
Window parse_window(const std::string& s);  // "L,R", -1 = unbounded

double seconds_since(double t0);
double now_seconds();
bool stderr_is_terminal();

/// An output directory for a report (`sdpa lab report`, `sdpa sweep`): created if missing,
/// checked writable at once (before the long work, not after), and removed again at scope
/// exit if this run created it and wrote nothing into it. Throws sdpa::Error naming --out.
class ReportDir {
 public:
  explicit ReportDir(std::string path);
  ~ReportDir();
  ReportDir(const ReportDir&) = delete;
  ReportDir& operator=(const ReportDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool created_ = false;
};

/// The Python that draws the report pages: $SDPA_PYTHON, else Debian's /usr/bin/python3
/// (python3-matplotlib).
std::string plot_python();

/// Runs `python script args...` (an argument vector, no shell) and returns what it printed
/// on stdout (a report page); throws sdpa::Error naming `what` if it cannot start, fails or
/// prints nothing.
std::vector<unsigned char> run_plot_script(const std::string& what, const std::string& python,
                                           const std::string& script, const std::vector<std::string>& args);

}  // namespace sdpa::cli
