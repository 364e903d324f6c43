// nn/key_scales.cpp — see key_scales.hpp.
#include "nn/key_scales.hpp"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/core.h>

#include "nn/sample.hpp"
#include "nn/tasks.hpp"
#include "sdpa/reference.hpp"

namespace sdpa::nn {
namespace {

std::size_t idx(i64 i) { return static_cast<std::size_t>(i); }

// x (rows, cols), row stride ldx, quantized row by row by the library and dequantized into
// out (rows, cols), unit stride.
void round_trip_rows(const float* x, i64 rows, i64 cols, i64 ldx, KvQuant quant, float* out) {
  std::vector<float> packed(idx(rows * cols)), scales(idx(rows));
  std::vector<std::uint8_t> codes(idx(rows * cols));
  for (i64 r = 0; r < rows; ++r) std::copy_n(x + r * ldx, cols, packed.data() + r * cols);
  quantize_kv(contiguous<const float>(packed.data(), {1, rows, 1, cols}), quant,
              contiguous(codes.data(), {1, rows, 1, cols}), contiguous(scales.data(), {1, 1, rows}));
  dequantize_kv(contiguous<const std::uint8_t>(codes.data(), {1, rows, 1, cols}),
                contiguous<const float>(scales.data(), {1, 1, rows}), quant, contiguous(out, {1, rows, 1, cols}));
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  const std::size_t n = x.size();
  return n == 0 ? 0.0 : n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// ‖a − b‖ / ‖b‖ over n values.
double relative_error(const float* a, const float* b, i64 n) {
  double e = 0, r = 0;
  for (i64 i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    e += d * d;
    r += static_cast<double>(b[i]) * b[i];
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

// One head's q, k, v over all contexts, each (B, T, D) contiguous.
struct HeadInputs {
  i64 B, T, D;
  double beta;
  std::vector<float> q, k, v;
};

// The head's causal attention (fp64 reference, β) with keys `keys` (B, T, D): (B, T, D).
std::vector<float> attend(const HeadInputs& in, const float* keys) {
  std::vector<float> out(idx(in.B * in.T * in.D));
  Options opt;
  opt.scale = in.beta;
  opt.causal = Causal::top_left;
  const std::array<i64, 4> shape{in.B, 1, in.T, in.D};
  reference::forward<float, double>(contiguous<const float>(in.q.data(), shape), contiguous<const float>(keys, shape),
                                    contiguous<const float>(in.v.data(), shape), contiguous(out.data(), shape),
                                    View3<float>{}, opt);
  return out;
}

// rms of β·q_i·(a_j − b_j) over the causal pairs j ≤ i of every context (b null: of β·q_i·a_j).
double causal_score_rms(const HeadInputs& in, const float* a, const float* b) {
  double sum = 0, pairs = 0;
  for (i64 s = 0; s < in.B; ++s)
    for (i64 i = 0; i < in.T; ++i) {
      const float* q = in.q.data() + (s * in.T + i) * in.D;
      for (i64 j = 0; j <= i; ++j) {
        const i64 row = (s * in.T + j) * in.D;
        double dot = 0;
        for (i64 d = 0; d < in.D; ++d)
          dot += static_cast<double>(q[d]) * (static_cast<double>(a[row + d]) - (b ? b[row + d] : 0.0f));
        sum += in.beta * dot * in.beta * dot;
        pairs += 1;
      }
    }
  return std::sqrt(sum / pairs);
}

KeyScalesHead describe(const HeadInputs& in, i64 layer, i64 head) {
  KeyScalesHead h{layer, head, in.beta, causal_score_rms(in, in.k.data(), nullptr), 0, 0};
  const i64 rows = in.B * in.T;
  std::vector<double> channel_ms(idx(in.D), 0.0), row_max(idx(rows), 0.0);
  for (i64 r = 0; r < rows; ++r)
    for (i64 d = 0; d < in.D; ++d) {
      const double x = in.k[idx(r * in.D + d)];
      channel_ms[idx(d)] += x * x / static_cast<double>(rows);
      row_max[idx(r)] = std::max(row_max[idx(r)], std::abs(x));
    }
  const double channel_median = median(channel_ms);
  h.channel_spread =
      channel_median > 0 ? std::sqrt(*std::max_element(channel_ms.begin(), channel_ms.end()) / channel_median) : 0.0;
  const double row_median = median(row_max);
  h.row_spread = row_median > 0 ? *std::max_element(row_max.begin(), row_max.end()) / row_median : 0.0;
  return h;
}

}  // namespace

void dequantized_per_position(const float* keys, i64 N, i64 D, i64 ldk, KvQuant quant, float* out) {
  if (N <= 0 || D <= 0) return;
  round_trip_rows(keys, N, D, ldk, quant, out);
}

void dequantized_per_channel(const float* keys, i64 N, i64 D, i64 ldk, i64 group, KvQuant quant, float* out) {
  if (group < 1) throw Error("group: must be >= 1, got " + std::to_string(group));
  std::vector<float> block, block_out;
  for (i64 g0 = 0; g0 < N; g0 += group) {
    const i64 n = std::min(group, N - g0);
    // the group transposed: one row per channel, so the library's per-row scale is per channel
    block.resize(idx(D * n));
    block_out.resize(idx(D * n));
    for (i64 r = 0; r < n; ++r)
      for (i64 d = 0; d < D; ++d) block[idx(d * n + r)] = keys[(g0 + r) * ldk + d];
    round_trip_rows(block.data(), D, n, n, quant, block_out.data());
    for (i64 r = 0; r < n; ++r)
      for (i64 d = 0; d < D; ++d) out[(g0 + r) * D + d] = block_out[idx(d * n + r)];
  }
}

KeyScalesResult key_scales(const Checkpoint& checkpoint, const KeyScalesConfig& c) {
  if (c.contexts < 1) throw Error("contexts: must be >= 1, got " + std::to_string(c.contexts));
  if (c.threads < 0) throw Error("threads: must be >= 0, got " + std::to_string(c.threads));
  if (c.groups.empty()) throw Error("groups: give at least one group size");
  for (i64 g : c.groups)
    if (g < 1) throw Error("groups: every group size must be >= 1, got " + std::to_string(g));
  if (c.set != "validation" && c.set != "test") throw Error("set: must be 'validation' or 'test', got '" + c.set + "'");

  TextModel tm = load_text_model(checkpoint);
  Model<float>& model = tm.model;
  const i64 T = model.cfg.max_pos, L = model.cfg.L, H = model.cfg.H, D = model.cfg.D();
  const Task task = parse_task("text", T, c.corpus);
  const std::string hash = fmt::format("{:016x}", task.corpus->hash);
  if (hash != tm.corpus_hash)
    throw Error("corpus: " + task.corpus->source + " has hash " + hash +
                ", the checkpoint was trained on a text of hash " + tm.corpus_hash + " (pass that text with --corpus)");
  model.cfg.threads = c.threads > 0 ? c.threads : omp_get_max_threads();

  const Batch batch = task.held_out(c.set, c.contexts);
  model.forward(batch.tokens.data(), batch.targets.data(), nullptr, batch.B, batch.T, false);

  std::vector<i64> groups;  // capped at the context, each once, ascending
  for (i64 g : c.groups) groups.push_back(std::min(g, T));
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());

  KeyScalesResult r{L, H, D, T, batch.B, {}, {}};
  const i64 rows = batch.B * T;
  std::vector<float> keys_hat(idx(rows * D));
  for (i64 l = 0; l < L; ++l) {
    const auto src = model.attention_inputs(l);
    for (i64 h = 0; h < H; ++h) {
      HeadInputs in{batch.B,
                    T,
                    D,
                    model.beta[idx(l * H + h)],
                    std::vector<float>(idx(rows * D)),
                    std::vector<float>(idx(rows * D)),
                    std::vector<float>(idx(rows * D))};
      for (i64 row = 0; row < rows; ++row) {
        std::copy_n(src.q + row * src.qk_stride + h * D, D, in.q.data() + row * D);
        std::copy_n(src.k + row * src.qk_stride + h * D, D, in.k.data() + row * D);
        std::copy_n(src.v + row * src.v_stride + h * D, D, in.v.data() + row * D);
      }
      r.head_stats.push_back(describe(in, l, h));
      const std::vector<float> out = attend(in, in.k.data());
      for (const KvQuant quant : {KvQuant::int8, KvQuant::fp8_e4m3}) {
        auto measure = [&](const std::string& scales, double scale_bytes) {
          const std::vector<float> out_hat = attend(in, keys_hat.data());
          r.rows.push_back({l, h, kv_quant_name(quant), scales, scale_bytes,
                            relative_error(keys_hat.data(), in.k.data(), rows * D),
                            causal_score_rms(in, keys_hat.data(), in.k.data()),
                            relative_error(out_hat.data(), out.data(), rows * D)});
        };
        dequantized_per_position(in.k.data(), rows, D, D, quant, keys_hat.data());
        measure("position", 4.0);
        for (i64 g : groups) {
          for (i64 s = 0; s < batch.B; ++s)  // groups never straddle two contexts
            dequantized_per_channel(in.k.data() + s * T * D, T, D, D, g, quant, keys_hat.data() + s * T * D);
          measure("channel/" + std::to_string(g), 4.0 * static_cast<double>(D) / static_cast<double>(g));
        }
      }
    }
  }
  return r;
}

nlohmann::ordered_json to_json(const KeyScalesResult& r, const std::string& set) {
  nlohmann::ordered_json doc{{"layers", r.layers},
                             {"heads", r.heads},
                             {"d_head", r.d_head},
                             {"seq", r.seq},
                             {"contexts", r.contexts},
                             {"set", set},
                             {"head_stats", nlohmann::ordered_json::array()},
                             {"rows", nlohmann::ordered_json::array()}};
  for (const KeyScalesHead& h : r.head_stats)
    doc["head_stats"].push_back({{"layer", h.layer},
                                 {"head", h.head},
                                 {"beta", h.beta},
                                 {"score_rms", h.score_rms},
                                 {"channel_spread", h.channel_spread},
                                 {"row_spread", h.row_spread}});
  for (const KeyScalesRow& row : r.rows)
    doc["rows"].push_back({{"layer", row.layer},
                           {"head", row.head},
                           {"format", row.format},
                           {"scales", row.scales},
                           {"scale_bytes", row.scale_bytes},
                           {"key_error", row.key_error},
                           {"score_error", row.score_error},
                           {"out_error", row.out_error}});
  return doc;
}

std::string key_scales_table(const KeyScalesResult& r) {
  std::string s = fmt::format(
      "keys of {} layers × {} heads (d_head {}), {} held-out contexts of {} positions\n\n"
      "{:>5} {:>4} {:>7} {:>9} {:>14} {:>10}\n",
      r.layers, r.heads, r.d_head, r.contexts, r.seq, "layer", "head", "beta", "score rms", "channel spread",
      "row spread");
  for (const KeyScalesHead& h : r.head_stats)
    s += fmt::format("{:>5} {:>4} {:>7.4f} {:>9.3f} {:>14.2f} {:>10.2f}\n", h.layer, h.head, h.beta, h.score_rms,
                     h.channel_spread, h.row_spread);

  // the schemes in the order the rows list them
  std::vector<std::pair<std::string, std::string>> schemes;
  for (const KeyScalesRow& row : r.rows)
    if (std::find(schemes.begin(), schemes.end(), std::make_pair(row.format, row.scales)) == schemes.end())
      schemes.emplace_back(row.format, row.scales);

  s += fmt::format("\nmeans over each layer's heads\n{:>5} {:>9} {:>11} {:>12} {:>10} {:>12} {:>10}\n", "layer",
                   "format", "scales", "scale B/key", "key err", "score err", "out err");
  for (i64 l = 0; l < r.layers; ++l)
    for (const auto& [format, scales] : schemes) {
      double key = 0, score = 0, out = 0, bytes = 0, n = 0;
      for (const KeyScalesRow& row : r.rows)
        if (row.layer == l && row.format == format && row.scales == scales) {
          key += row.key_error, score += row.score_error, out += row.out_error, bytes = row.scale_bytes, n += 1;
        }
      s += fmt::format("{:>5} {:>9} {:>11} {:>12.2f} {:>10.3e} {:>12.3e} {:>10.3e}\n", l, format, scales, bytes,
                       key / n, score / n, out / n);
    }

  s += fmt::format("\nall heads against per-position scales (4 B/key)\n{:>9} {:>11} {:>12} {:>24} {:>16}\n", "format",
                   "scales", "scale B/key", "out err ÷ position (geo)", "heads it wins");
  for (const auto& [format, scales] : schemes) {
    if (scales == "position") continue;
    double log_sum = 0, n = 0, wins = 0, bytes = 0;
    for (const KeyScalesRow& row : r.rows) {
      if (row.format != format || row.scales != scales) continue;
      bytes = row.scale_bytes;
      for (const KeyScalesRow& base : r.rows)
        if (base.layer == row.layer && base.head == row.head && base.format == format && base.scales == "position") {
          log_sum += std::log(row.out_error / base.out_error);
          wins += row.out_error < base.out_error;
          n += 1;
        }
    }
    s += fmt::format("{:>9} {:>11} {:>12.2f} {:>24.3f} {:>10.0f} of {:<3.0f}\n", format, scales, bytes,
                     std::exp(log_sum / n), wins, n);
  }
  return s;
}

}  // namespace sdpa::nn
