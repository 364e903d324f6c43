// torch.cpp — see torch.hpp.
#include "bench/torch.hpp"

#include <cstdlib>
#include <exception>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "io/data_file.hpp"
#include "io/subprocess.hpp"
#include "sdpa/error.hpp"

namespace sdpa::bench {
namespace {

using nlohmann::json;

json request(const std::vector<Case>& cases, const TimerRule& rule) {
  json rows = json::array();
  for (const Case& c : cases) {
    if (c.causal == Causal::bottom_right)
      throw Error("PyTorch's scaled_dot_product_attention has no bottom-right causal mask to compare with");
    const Shape& s = c.shape;
    rows.push_back({{"B", s.B},
                    {"Hq", s.Hq},
                    {"Hkv", s.Hkv},
                    {"Nq", s.Nq},
                    {"Nk", s.Nk},
                    {"Dk", s.Dk},
                    {"Dv", s.Dv},
                    {"causal", c.causal == Causal::top_left},
                    {"backward", c.pass == Pass::backward},
                    {"dtype", dtype_name(c.dtype)},
                    {"dropout_p", c.dropout},
                    {"key_padding", c.mask == ExplicitMask::padding ? json(key_padding(c)) : json(nullptr)}});
  }
  return {{"threads", cases.empty() ? 1 : cases[0].threads},
          {"rule",
           {{"warmup_runs", rule.warmup_runs},
            {"min_runs", rule.min_runs},
            {"min_seconds", rule.min_seconds},
            {"max_runs", rule.max_runs}}},
          {"rows", rows}};
}

std::string shorten(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.size() > 160 ? s.substr(0, 160) + "..." : s;
}

}  // namespace

std::string torch_python() {
  if (const char* p = std::getenv("SDPA_TORCH_PYTHON"); p && *p) return p;
  return "python3";
}

TorchTimings time_torch(const std::vector<Case>& cases, const TimerRule& rule) {
  TorchTimings r;
  const std::string py = torch_python();
  auto unavailable = [&](const std::string& why) {
    r.about = fmt::format("PyTorch: not available with {} ({})", py, shorten(why));
    return r;
  };
  const std::string req = request(cases, rule).dump();
  io::ProcessResult run;
  try {
    run = io::run_process({py, io::data_file("torch_sdpa.py")}, req);
  } catch (const Error& e) {
    return unavailable(e.what());
  }
  const std::string out(run.out.begin(), run.out.end());
  json reply;
  try {
    reply = json::parse(out);
  } catch (const json::exception&) {
    return unavailable(fmt::format("exit status {}, no JSON reply{}", run.exit_code,
                                   out.empty() ? "; its message, if any, is above" : ": " + out));
  }
  try {
    if (reply.contains("error")) return unavailable(reply.at("error").get<std::string>());
    const json& rows = reply.at("rows");
    if (rows.size() != cases.size())
      return unavailable(fmt::format("{} rows in the reply for {} asked", rows.size(), cases.size()));
    for (const json& row : rows)
      r.timings.push_back({row.at("median_seconds").get<double>(), row.at("runs").get<int>()});
    r.about = fmt::format("PyTorch {} (torch.nn.functional.scaled_dot_product_attention, CPU, via {})",
                          reply.at("torch").get<std::string>(), py);
  } catch (const json::exception& e) {
    r.timings.clear();
    return unavailable(std::string("malformed reply: ") + e.what());
  }
  r.ok = true;
  return r;
}

}  // namespace sdpa::bench
