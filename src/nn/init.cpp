// nn/init.cpp — parsing initialisation names.
#include "nn/init.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace sdpa::nn {

std::string Init::name() const {
  if (xavier) return "xavier";
  char buf[64];
  std::snprintf(buf, sizeof buf, "normal:%g", sigma);
  return buf;
}

Init parse_init(const std::string& s, const std::string& what) {
  if (s == "xavier") return {};
  if (s.rfind("normal:", 0) == 0) {
    const std::string v = s.substr(7);
    char* end = nullptr;
    const double sigma = std::strtod(v.c_str(), &end);
    if (!v.empty() && *end == '\0' && std::isfinite(sigma) && sigma > 0) return {false, sigma};
  }
  throw Error(what + ": '" + s + "' is not xavier or normal:<sigma> (sigma > 0)");
}

}  // namespace sdpa::nn
