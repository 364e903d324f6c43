// nn/policy.cpp — parsing temperature policy names.
#include "nn/policy.hpp"

#include <cstdlib>

namespace sdpa::nn {

namespace {
struct Named {
  const char* name;
  PolicyKind kind;
};
constexpr Named kNames[] = {
    {"inv_sqrt_dk", PolicyKind::inv_sqrt_dk}, {"none", PolicyKind::none},
    {"inv_dk", PolicyKind::inv_dk},           {"learned", PolicyKind::learned},
    {"qk_norm", PolicyKind::qk_norm},         {"log_n", PolicyKind::log_n},
    {"adaptive", PolicyKind::adaptive},       {"adaptive_scores", PolicyKind::adaptive_scores},
};
}  // namespace

std::string Policy::name() const {
  if (kind == PolicyKind::fixed) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "fixed:%g", value);
    return buf;
  }
  for (const auto& n : kNames)
    if (n.kind == kind) return n.name;
  return "?";
}

Policy parse_policy(const std::string& s, const std::string& what) {
  for (const auto& n : kNames)
    if (s == n.name) return {n.kind, 0};
  if (s.rfind("fixed:", 0) == 0) {
    const std::string v = s.substr(6);
    char* end = nullptr;
    const double b = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || !std::isfinite(b) || b <= 0)
      throw Error(what + ": 'fixed:<beta>' needs a finite beta > 0, got '" + s + "'");
    return {PolicyKind::fixed, b};
  }
  std::string all;
  for (const auto& n : kNames) all += std::string(all.empty() ? "" : ", ") + n.name;
  throw Error(what + ": unknown policy '" + s + "' (one of " + all + ", fixed:<beta>)");
}

std::vector<std::string> default_policies() {
  return {"inv_sqrt_dk", "none", "inv_dk", "learned", "qk_norm", "log_n", "adaptive", "adaptive_scores"};
}

}  // namespace sdpa::nn
