// nn/sample.cpp — see sample.hpp.
#include "nn/sample.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "nn/text.hpp"

namespace sdpa::nn {
namespace {

// The identity's "key=value;..." fields (TrainConfig::identity).
std::map<std::string, std::string> identity_fields(const std::string& identity) {
  std::map<std::string, std::string> f;
  std::size_t at = 0;
  while (at < identity.size()) {
    const std::size_t end = std::min(identity.find(';', at), identity.size());
    const std::string kv = identity.substr(at, end - at);
    const std::size_t eq = kv.find('=');
    if (eq != std::string::npos) f[kv.substr(0, eq)] = kv.substr(eq + 1);
    at = end + 1;
  }
  return f;
}

i64 integer_field(const std::map<std::string, std::string>& f, const std::string& key) {
  const auto it = f.find(key);
  if (it == f.end()) throw Error("resume: the checkpoint's identity has no '" + key + "'");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    throw Error("resume: the checkpoint's '" + key + "' is not an integer: " + it->second);
  }
}

}  // namespace

TextModel load_text_model(const Checkpoint& ck) {
  const auto f = identity_fields(ck.identity);
  if (!f.count("task") || f.at("task") != "text" || !f.count("alphabet") || !f.count("corpus"))
    throw Error("resume: not a text-task checkpoint (task " + (f.count("task") ? f.at("task") : "?") +
                "); only checkpoints of the text task hold a text model");
  std::vector<char32_t> alphabet = alphabet_from_hex(f.at("alphabet"), "resume");
  ModelConfig mc;
  mc.vocab = static_cast<i64>(alphabet.size());
  mc.max_pos = integer_field(f, "seq");
  mc.C = integer_field(f, "d_model");
  mc.H = integer_field(f, "heads");
  mc.L = integer_field(f, "layers");
  mc.policy = parse_policy(f.count("policy") ? f.at("policy") : "", "resume");
  mc.seed = static_cast<std::uint64_t>(integer_field(f, "seed"));
  TextModel tm{Model<float>(mc), std::move(alphabet), f.at("corpus")};
  Model<float>& model = tm.model;
  if (ck.params.size() != model.params.size() || ck.score_ema.size() != model.score_ema.size())
    throw Error("resume: the checkpoint holds " + std::to_string(ck.params.size()) +
                " parameters, its identity describes a model of " + std::to_string(model.params.size()));
  model.params = ck.params;
  model.score_ema = ck.score_ema;
  return tm;
}

std::string sample(const Checkpoint& ck, const SampleConfig& s) {
  if (s.tokens < 0) throw Error("tokens: must be >= 0, got " + std::to_string(s.tokens));
  if (!(s.temperature >= 0) || !std::isfinite(s.temperature)) throw Error("temperature: must be a finite value >= 0");
  TextModel tm = load_text_model(ck);
  const std::vector<char32_t>& alphabet = tm.alphabet;
  Model<float>& model = tm.model;
  const ModelConfig& mc = model.cfg;
  const std::u32string prompt = decode_utf8(s.prompt, "prompt");
  if (prompt.empty()) throw Error("prompt: must hold at least one character");
  std::vector<int> text;
  for (char32_t ch : prompt) {
    const auto it = std::lower_bound(alphabet.begin(), alphabet.end(), ch);
    if (it == alphabet.end() || *it != ch)
      throw Error("prompt: the character '" + encode_utf8(std::u32string(1, ch)) + "' is not in the corpus's alphabet");
    text.push_back(static_cast<int>(it - alphabet.begin()));
  }

  Rng rng = stream(s.seed, 7);
  const i64 V = mc.vocab;
  for (i64 k = 0; k < s.tokens; ++k) {
    const i64 T = std::min<i64>(static_cast<i64>(text.size()), mc.max_pos);
    const std::vector<int> targets(static_cast<std::size_t>(T), -1);
    model.forward(text.data() + text.size() - T, targets.data(), nullptr, 1, T, false);
    const float* logits = model.logits().data() + (T - 1) * V;  // the last position's
    int next = static_cast<int>(std::max_element(logits, logits + V) - logits);
    if (s.temperature > 0) {
      // p_j ∝ exp((l_j − max l) / temperature), drawn by inverting the cumulative sum
      std::vector<double> p(static_cast<std::size_t>(V));
      double z = 0;
      for (i64 j = 0; j < V; ++j)
        z += p[static_cast<std::size_t>(j)] = std::exp((logits[j] - logits[next]) / s.temperature);
      double u = rng.uniform() * z;
      for (i64 j = 0; j < V; ++j) {
        u -= p[static_cast<std::size_t>(j)];
        if (u < 0 || j == V - 1) {
          next = static_cast<int>(j);
          break;
        }
      }
    }
    text.push_back(next);
  }
  std::u32string out;
  for (int t : text) out.push_back(alphabet[static_cast<std::size_t>(t)]);
  return encode_utf8(out);
}

}  // namespace sdpa::nn
