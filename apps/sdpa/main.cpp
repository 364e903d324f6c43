// main.cpp — the sdpa command line: subcommands, --version, one-line errors.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands.hpp"
#include "sdpa/sdpa.hpp"

int main(int argc, char** argv) {
  CLI::App app{"sdpa: exact scaled dot-product attention, softmax(Q·Kᵀ·β)·V, and the lab around it.", "sdpa"};
  bool version = false;
  app.add_flag("--version", version, "Print the version and the instruction set in use, then exit");
  app.require_subcommand(0, 1);

  std::vector<sdpa::cli::Command> commands{
      sdpa::cli::add_attention(app), sdpa::cli::add_decode(app), sdpa::cli::add_check(app),
      sdpa::cli::add_lab(app),       sdpa::cli::add_bench(app),  sdpa::cli::add_train(app),
      sdpa::cli::add_sweep(app),     sdpa::cli::add_sample(app), sdpa::cli::add_key_scales(app),
  };

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the parse error
    return code == 0 ? 0 : 2;
  }
  try {
    if (version) {
      fmt::print("sdpa {} (isa: {}{})\n", SDPA_VERSION_STRING, sdpa::isa_name(sdpa::active_isa()),
                 sdpa::amx_bf16_active()   ? ", bf16 and fp16 on AMX-BF16"
                 : sdpa::bf16_dot_active() ? ", bf16 on AVX512_BF16 dot products"
                                           : "");
      return 0;
    }
    for (auto& c : commands)
      if (c.app->parsed()) return c.run();
    fmt::print(stderr, "{}", app.help());
    return 2;
  } catch (const std::exception& e) {
    std::string msg = e.what();  // always one line, whatever the message holds
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    fmt::print(stderr, "sdpa: error: {}\n", msg);
    return 1;
  } catch (...) {
    fmt::print(stderr, "sdpa: error: unknown exception\n");
    return 1;
  }
}
