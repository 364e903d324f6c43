// test_dispatch.cpp — the selection rule (sdpa/dispatch.hpp) as a table: every CPU kind the
// project meets, under the environment variables that steer it, -> the ISA and the 16-bit
// engine. select_dispatch() is pure, so each row runs on any machine: no CPU kind's face of
// the rule is first seen in CI on that CPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sdpa/dispatch.hpp"
#include "sdpa/error.hpp"

namespace sdpa::test {
namespace {

// The CPU kinds: what each one's CPUID (and Linux, for AMX; on aarch64 its hwcaps and SVE's
// vector length) reports.
//                              avx2   avx512 bf16   amx    amd    neon   sve_bits arm_bf16
constexpr CpuFeatures kOld{false, false, false, false, false};           // SSE only
constexpr CpuFeatures kZen3{true, false, false, false, true};            // AVX2 + FMA
constexpr CpuFeatures kSkylakeX{true, true, false, false, false};        // AVX-512, no BF16
constexpr CpuFeatures kZen4{true, true, true, false, true};              // AVX-512 + BF16, AMD
constexpr CpuFeatures kCooperLake{true, true, true, false, false};       // AVX-512 + BF16, Intel, no AMX
constexpr CpuFeatures kSapphireRapids{true, true, true, true, false};    // AVX-512 + AMX-BF16
constexpr CpuFeatures kSapphireNoTiles{true, true, true, false, false};  // the same, Linux refused the tiles
constexpr CpuFeatures kNeoverseN1{false, false, false, false, false, true};       // aarch64, no SVE (Graviton2, Ampere)
constexpr CpuFeatures kNeoverseV1{false, false, false, false,
                                  false, true,  256,   true};  // SVE at 256 bits, BF16 (Graviton3)
constexpr CpuFeatures kNeoverseV2{false, false, false, false,
                                  false, true,  128,   true};  // SVE at 128, BF16 (Grace, Graviton4, Axion)
constexpr CpuFeatures kA64fx{false, false, false, false, false, true, 512};     // SVE at 512 bits (Fugaku)
constexpr CpuFeatures kSve1024{false, false, false, false, false, true, 1024};  // a length no build has

struct Row {
  const char* cpu_name;
  CpuFeatures cpu;
  DispatchSettings env;  // SDPA_ISA, SDPA_AMX, SDPA_BF16_DOT
  Isa isa;
  Engine16 engine;
};

const std::vector<Row>& table() {
  using E = Engine16;
  static const std::vector<Row> rows = {
      // No variables: the widest ISA; the engine by the CPU (and the vendor for vdpbf16ps).
      {"old", kOld, {}, Isa::scalar, E::widened},
      {"zen3", kZen3, {}, Isa::avx2, E::widened},
      {"skylake-x", kSkylakeX, {}, Isa::avx512, E::widened},
      {"zen4", kZen4, {}, Isa::avx512, E::dot},
      {"cooper-lake", kCooperLake, {}, Isa::avx512, E::widened},
      {"sapphire-rapids", kSapphireRapids, {}, Isa::avx512, E::amx},
      {"sapphire-no-tiles", kSapphireNoTiles, {}, Isa::avx512, E::widened},
      // "auto" is the same as unset.
      {"zen4", kZen4, {"auto", "auto", "auto"}, Isa::avx512, E::dot},
      {"sapphire-rapids", kSapphireRapids, {"automatic", "auto", "auto"}, Isa::avx512, E::amx},
      // SDPA_AMX=0: AMX off; the dot engine only where the vendor rule or SDPA_BF16_DOT=1 says.
      {"sapphire-rapids", kSapphireRapids, {"", "0", ""}, Isa::avx512, E::widened},
      {"sapphire-rapids", kSapphireRapids, {"", "0", "1"}, Isa::avx512, E::dot},
      {"sapphire-rapids", kSapphireRapids, {"", "0", "0"}, Isa::avx512, E::widened},
      {"sapphire-rapids", kSapphireRapids, {"", "1", "1"}, Isa::avx512, E::amx},  // AMX first
      {"zen4", kZen4, {"", "0", ""}, Isa::avx512, E::dot},                        // no AMX to turn off
      // SDPA_BF16_DOT: 1 wherever the CPU has AVX512_BF16, 0 never.
      {"zen4", kZen4, {"", "", "0"}, Isa::avx512, E::widened},
      {"zen4", kZen4, {"", "", "1"}, Isa::avx512, E::dot},
      {"cooper-lake", kCooperLake, {"", "", "1"}, Isa::avx512, E::dot},
      {"sapphire-no-tiles", kSapphireNoTiles, {"", "", "1"}, Isa::avx512, E::dot},
      {"skylake-x", kSkylakeX, {"", "", "1"}, Isa::avx512, E::widened},  // no AVX512_BF16
      {"zen3", kZen3, {"", "1", "1"}, Isa::avx2, E::widened},
      {"sapphire-rapids", kSapphireRapids, {"", "", "0"}, Isa::avx512, E::amx},  // 0 is the dot engine's only
      // SDPA_ISA picks a narrower path; the engine (the avx512 path's) is unchanged, and a
      // call on avx2 or scalar widens (engine_for).
      {"sapphire-rapids", kSapphireRapids, {"avx2", "", ""}, Isa::avx2, E::amx},
      {"zen4", kZen4, {"scalar", "", ""}, Isa::scalar, E::dot},
      {"zen3", kZen3, {"scalar", "", ""}, Isa::scalar, E::widened},
      {"zen4", kZen4, {"avx512", "", ""}, Isa::avx512, E::dot},
      // aarch64: SVE where its length has a build (256, 512 bits), else NEON; the neon path's
      // 16-bit products on BFDOT only with BF16 and SDPA_BF16_DOT=1 (SDPA_AMX ignored), and
      // like the avx512 path's engine that is the neon path's whichever ISA runs.
      {"neoverse-n1", kNeoverseN1, {}, Isa::neon, E::widened},
      {"neoverse-n1", kNeoverseN1, {"", "1", "1"}, Isa::neon, E::widened},  // no BF16
      {"neoverse-n1", kNeoverseN1, {"scalar", "", ""}, Isa::scalar, E::widened},
      {"neoverse-v1", kNeoverseV1, {}, Isa::sve, E::widened},
      {"neoverse-v1", kNeoverseV1, {"neon", "", ""}, Isa::neon, E::widened},
      {"neoverse-v1", kNeoverseV1, {"neon", "", "1"}, Isa::neon, E::dot},
      {"neoverse-v1", kNeoverseV1, {"", "1", "1"}, Isa::sve, E::dot},  // a call on sve widens (engine_for)
      {"a64fx", kA64fx, {}, Isa::sve, E::widened},
      {"a64fx", kA64fx, {"", "", "1"}, Isa::sve, E::widened},   // no BF16
      {"neoverse-v2", kNeoverseV2, {}, Isa::neon, E::widened},  // 128-bit SVE is no wider than NEON
      {"neoverse-v2", kNeoverseV2, {"", "", "1"}, Isa::neon, E::dot},
      {"neoverse-v2", kNeoverseV2, {"", "", "0"}, Isa::neon, E::widened},
      {"sve1024", kSve1024, {}, Isa::neon, E::widened},
  };
  return rows;
}

std::string settings_text(const DispatchSettings& s) {
  return "SDPA_ISA='" + s.isa + "' SDPA_AMX='" + s.amx + "' SDPA_BF16_DOT='" + s.bf16_dot + "'";
}

TEST(Dispatch, SelectionTable) {
  for (const Row& r : table()) {
    SCOPED_TRACE(std::string(r.cpu_name) + ", " + settings_text(r.env));
    const Dispatch d = select_dispatch(r.cpu, r.env);
    EXPECT_STREQ(isa_name(d.isa), isa_name(r.isa));
    EXPECT_STREQ(engine_name(d.engine), engine_name(r.engine));
    EXPECT_FALSE(d.isa_reason.empty());
    EXPECT_FALSE(d.engine_reason.empty());
  }
}

// Each CPU kind reaches each engine it can run: the table covers every face of the rule.
TEST(Dispatch, TableCoversEveryEngineAndIsa) {
  bool seen_isa[6] = {}, seen_engine[3] = {};
  for (const Row& r : table()) {
    seen_isa[static_cast<int>(r.isa)] = true;
    seen_engine[static_cast<int>(r.engine)] = true;
  }
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon, Isa::sve})
    EXPECT_TRUE(seen_isa[static_cast<int>(isa)]) << isa_name(isa);
  for (Engine16 e : {Engine16::widened, Engine16::amx, Engine16::dot})
    EXPECT_TRUE(seen_engine[static_cast<int>(e)]) << engine_name(e);
}

// Bad values are errors that name the variable, whatever the CPU and the other variables.
TEST(Dispatch, BadValuesNameTheVariable) {
  struct Bad {
    DispatchSettings env;
    const char* names;
  };
  for (const CpuFeatures& cpu : {kOld, kZen3, kZen4, kSapphireRapids, kNeoverseN1, kNeoverseV1}) {
    for (const Bad& b : {Bad{{"mmx", "", ""}, "SDPA_ISA"}, Bad{{"", "yes", ""}, "SDPA_AMX"},
                         Bad{{"", "", "yes"}, "SDPA_BF16_DOT"}, Bad{{"scalar", "", "2"}, "SDPA_BF16_DOT"}}) {
      SCOPED_TRACE(settings_text(b.env));
      try {
        select_dispatch(cpu, b.env);
        ADD_FAILURE() << "accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(b.names), std::string::npos) << e.what();
      }
    }
  }
  // An ISA the CPU lacks.
  for (const auto& [cpu, isa] : {std::pair{kOld, "avx2"}, std::pair{kZen3, "avx512"}, std::pair{kZen3, "neon"},
                                 std::pair{kNeoverseN1, "avx2"}, std::pair{kZen4, "sve"}, std::pair{kNeoverseN1, "sve"},
                                 std::pair{kNeoverseV2, "sve"}, std::pair{kSve1024, "sve"}}) {
    try {
      select_dispatch(cpu, {isa, "", ""});
      ADD_FAILURE() << isa << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("cannot run the ") + isa), std::string::npos) << e.what();
    }
  }
}

// This process's dispatch is the rule applied to this CPU and this environment.
TEST(Dispatch, ActiveIsTheRuleOnThisCpu) {
  const Dispatch want = select_dispatch(cpu_features(), dispatch_settings_from_environment());
  EXPECT_EQ(active_dispatch().isa, want.isa);
  EXPECT_EQ(active_dispatch().engine, want.engine);
  EXPECT_EQ(active_isa(), want.isa);
#if defined(__aarch64__)
  const Isa engine_path = Isa::neon, other = Isa::avx512;
#else
  const Isa engine_path = Isa::avx512, other = Isa::neon;
#endif
  EXPECT_EQ(engine_for(engine_path), want.engine);
  EXPECT_EQ(engine_for(other), Engine16::widened);
  EXPECT_EQ(engine_for(Isa::avx2), Engine16::widened);
  EXPECT_EQ(engine_for(Isa::scalar), Engine16::widened);
  EXPECT_EQ(engine_for(Isa::sve), Engine16::widened);
  EXPECT_EQ(amx_bf16_active(engine_path), want.engine == Engine16::amx);
  EXPECT_EQ(bf16_dot_active(engine_path), want.engine == Engine16::dot);
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(!f.avx512 || f.avx2);  // each level includes the one below
  EXPECT_TRUE(!f.avx512_bf16 || f.avx512);
  EXPECT_TRUE(!f.amx_bf16 || f.avx512_bf16);
  EXPECT_TRUE(f.sve_bits == 0 || (f.neon && f.sve_bits % 128 == 0));  // SVE: AdvSIMD too, 128-bit granules
  EXPECT_TRUE(!f.arm_bf16 || f.neon);
}

}  // namespace
}  // namespace sdpa::test
