// test_errors.cpp — every bad input gives sdpa::Error whose message names the argument
// (and the shapes, where shapes are the problem), for both kernels.
#include "util.hpp"

namespace sdpa::test {
namespace {

// A valid problem that each test breaks in one way.
struct Call {
  Buf<float> q{{1, 4, 8, 16}}, k{{1, 2, 10, 16}}, v{{1, 2, 10, 12}}, out{{1, 4, 8, 12}};
  Buf3<float> lse{{1, 4, 8}};
  Buf<float> dout{{1, 4, 8, 12}}, dq{{1, 4, 8, 16}}, dk{{1, 2, 10, 16}}, dv{{1, 2, 10, 12}};
  View4<const float> Q = q.cview(), K = k.cview(), V = v.cview(), dO = dout.cview();
  View4<float> O = out.view(), dQ = dq.view(), dK = dk.view(), dV = dv.view();
  View3<float> L = lse.view();
  Options opt;

  void fwd(Kernel kern = Kernel::fast) {
    Options o = opt;
    o.kernel = kern;
    forward(Q, K, V, O, L, o);
  }
  void bwd(Kernel kern = Kernel::fast) {
    Options o = opt;
    o.kernel = kern;
    backward(Q, K, V, O, L, dO, dQ, dK, dV, o);
  }
};

// Runs f for both kernels; each must throw sdpa::Error mentioning every fragment.
template <class F>
void expect_error(F f, std::vector<std::string> fragments) {
  for (Kernel kern : {Kernel::fast, Kernel::reference}) {
    try {
      f(kern);
      ADD_FAILURE() << "no error (kernel " << (kern == Kernel::fast ? "fast" : "reference") << ")";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      for (const auto& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << "'" << f << "' not in: " << msg;
    }
  }
}

TEST(Errors, ValidSetupPasses) {
  Call s;
  EXPECT_NO_THROW(s.fwd());
  EXPECT_NO_THROW(s.bwd());
}

// One broken call per line: a table clang-format would unfold into hundreds of lines.
// clang-format off
TEST(Errors, MismatchedShapes) {
  expect_error([](Kernel kn) { Call s; s.K.shape[3] = 15; s.fwd(kn); }, {"k", "head dim", "[1, 2, 10, 15]"});
  expect_error([](Kernel kn) { Call s; s.K.shape[0] = 2; s.fwd(kn); }, {"k", "batch"});
  expect_error([](Kernel kn) { Call s; s.V.shape[2] = 9; s.fwd(kn); }, {"v", "[1, 2, 9, 12]", "[1, 2, 10, 12]"});
  expect_error([](Kernel kn) { Call s; s.O.shape[3] = 16; s.fwd(kn); }, {"out", "[1, 4, 8, 16]", "[1, 4, 8, 12]"});
  expect_error([](Kernel kn) { Call s; s.L.shape[2] = 7; s.fwd(kn); }, {"lse", "[1, 4, 7]"});
  expect_error([](Kernel kn) { Call s; s.dQ.shape[2] = 7; s.bwd(kn); }, {"dq", "[1, 4, 7, 16]"});
  expect_error([](Kernel kn) { Call s; s.dO.shape[3] = 11; s.bwd(kn); }, {"dout", "[1, 4, 8, 11]"});
  expect_error([](Kernel kn) { Call s; s.dV.shape[1] = 4; s.bwd(kn); }, {"dv", "[1, 4, 10, 12]"});
}

TEST(Errors, ZeroOrNegativeDims) {
  for (int d = 0; d < 4; ++d)
    for (i64 bad : {0, -3}) {
      expect_error([&](Kernel kn) { Call s; s.Q.shape[d] = bad; s.fwd(kn); },
                   {"q", "dimension " + std::to_string(d), std::to_string(bad), ">= 1"});
      expect_error([&](Kernel kn) { Call s; s.V.shape[d] = bad; s.fwd(kn); }, {"v", std::to_string(bad)});
    }
}

TEST(Errors, HeadsNotAMultiple) {
  Buf<float> k3({1, 3, 10, 16}), v3({1, 3, 10, 12});
  expect_error([&](Kernel kn) { Call s; s.K = k3.cview(); s.V = v3.cview(); s.fwd(kn); },
               {"Hq = 4", "Hkv = 3", "q [1, 4, 8, 16]"});
}

TEST(Errors, NonFiniteScaleAndBadOptions) {
  for (double bad : {double(kInf), -double(kInf), double(kNaN)})
    expect_error([&](Kernel kn) { Call s; s.opt.scale = bad; s.fwd(kn); }, {"scale", "finite"});
  for (double bad : {0.0, -1.0, double(kInf)})
    expect_error([&](Kernel kn) { Call s; s.opt.softcap = bad; s.fwd(kn); }, {"softcap"});
  expect_error([](Kernel kn) { Call s; s.opt.window = {-2, 0}; s.fwd(kn); }, {"window"});
  expect_error([](Kernel kn) { Call s; s.opt.threads = -1; s.fwd(kn); }, {"threads"});
}

TEST(Errors, OutputAliasesInput) {
  // out written over q's memory (same shape as v's rows would allow); lse inside out; dq over dk.
  Buf<float> big({1, 4, 8, 16});
  expect_error([&](Kernel kn) { Call s; s.Q = big.cview(); s.O = contiguous(big.data.data(), {1, 4, 8, 12}); s.fwd(kn); },
               {"out", "aliases", "q"});
  expect_error([&](Kernel kn) { Call s; s.L = contiguous(s.out.data.data() + 3, std::array<i64, 3>{1, 4, 8}); s.fwd(kn); },
               {"aliases", "lse", "out"});
  Buf<float> shared({1, 4, 8, 16});
  expect_error([&](Kernel kn) { Call s; s.dQ = shared.view(); s.dK = contiguous(shared.data.data(), {1, 2, 10, 16}); s.bwd(kn); },
               {"aliases", "dk", "dq"});
  expect_error([&](Kernel kn) { Call s; s.dV = contiguous(const_cast<float*>(s.dout.data.data()), {1, 2, 10, 12}); s.bwd(kn); },
               {"dv", "aliases", "dout"});
}

TEST(Errors, OutputWithOverlappingStrides) {
  expect_error([](Kernel kn) { Call s; s.O.stride[2] = 0; s.fwd(kn); }, {"out", "overlap"});
  expect_error([](Kernel kn) { Call s; s.dQ.stride = {0, 16, 8, 1}; s.bwd(kn); }, {"dq", "overlap"});
}

TEST(Errors, SizesWhoseByteCountOverflows) {
  expect_error([](Kernel kn) { Call s; s.Q.shape = {1, 4, i64(1) << 40, i64(1) << 40}; s.fwd(kn); }, {"q", "overflow"});
  expect_error([](Kernel kn) { Call s; s.K.stride[2] = i64(1) << 62; s.fwd(kn); }, {"k", "overflow"});
  expect_error([](Kernel kn) { Call s; s.Q.shape[3] = i64(1) << 62; s.Q.stride = {1, 1, 1, 1}; s.fwd(kn); },
               {"q", "overflow"});
}

TEST(Errors, NullData) {
  expect_error([](Kernel kn) { Call s; s.Q.data = nullptr; s.fwd(kn); }, {"q", "null", "[1, 4, 8, 16]"});
  expect_error([](Kernel kn) { Call s; s.O.data = nullptr; s.fwd(kn); }, {"out", "null"});
  expect_error([](Kernel kn) { Call s; s.L.data = nullptr; s.fwd(kn); }, {"lse", "null"});
  expect_error([](Kernel kn) { Call s; s.dO.data = nullptr; s.bwd(kn); }, {"dout", "null"});
  expect_error([](Kernel kn) { Call s; s.opt.mask = {nullptr, {1, 1, 8, 10}, {0, 0, 10, 1}}; s.fwd(kn); },
               {"mask", "null"});
}

TEST(Errors, MaskThatDoesNotBroadcast) {
  Buf<float> m({1, 1, 8, 9});
  expect_error([&](Kernel kn) { Call s; s.opt.mask = m.cview(); s.fwd(kn); },
               {"mask", "[1, 1, 8, 9]", "[1, 4, 8, 10]"});
  Buf<std::uint8_t> kp({1, 2, 8, 10});  // 2 heads: neither 1 nor Hq = 4
  expect_error([&](Kernel kn) { Call s; s.opt.keep = kp.cview(); s.fwd(kn); }, {"keep", "[1, 2, 8, 10]"});
}

TEST(Errors, LseIsOptionalInForward) {
  Call s;
  s.L = View3<float>{};
  EXPECT_NO_THROW(s.fwd());
}

TEST(Errors, ForcedIsaTheCpuLacks) {
  if (isa_supported(Isa::avx512)) GTEST_SKIP() << "this CPU runs AVX-512; nothing to refuse";
  Call s;
  s.opt.isa = Isa::avx512;
  try {
    s.fwd();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("avx512"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_isa("sse9"), Error);
  EXPECT_EQ(parse_isa("avx2"), Isa::avx2);
  EXPECT_EQ(parse_isa("neon"), Isa::neon);
  EXPECT_EQ(parse_isa("sve"), Isa::sve);
}

}  // namespace
}  // namespace sdpa::test

namespace sdpa::test {
namespace {

// Run by ctest with SDPA_ISA set (tests/kernel/CMakeLists.txt): the variable picks the path.
TEST(Isa, EnvironmentVariableForcesPath) {
  const char* env = std::getenv("SDPA_ISA");
  if (env == nullptr) GTEST_SKIP() << "SDPA_ISA not set; ctest sets it for this test";
  EXPECT_STREQ(isa_name(active_isa()), env);
}

// clang-format on

// Whether one bf16 forward through the public API (no test seam: the table the environment
// chose), 100 query rows and keys of D = 64, ran tiled items on `engine`, by the call's plan.
bool default_bf16_forward_reaches(Engine16 engine) {
  Buf<bf16> q({1, 1, 100, 64}), k({1, 1, 100, 64}), v({1, 1, 100, 64}), out({1, 1, 100, 64});
  std::mt19937_64 rng(3);
  for (auto* b : {&q, &k, &v}) {
    std::vector<float> x(b->data.size());
    fill_normal(x, rng);
    for (std::size_t e = 0; e < x.size(); ++e) b->data[e] = bf16(x[e]);
  }
  Buf3<float> lse({1, 1, 100});
  Plan plan;
  Options o;
  o.plan = &plan;
  forward(q.cview(), k.cview(), v.cview(), out.view(), lse.view(), o);
  return plan.engine == engine && plan.engine_items > 0;
}

// SDPA_AMX: sdpa::forward on bf16 (no test seam) takes the AMX loop where the CPU and Linux
// allow it, unless SDPA_AMX=0; ctest runs this test both ways (kernel.env.SDPA_AMX_0).
TEST(Isa, AmxEnvironmentVariable) {
  if (!cpu_features().amx_bf16) GTEST_SKIP() << "no AMX-BF16 on this CPU (or Linux refused it): bf16 is widened";
  if (active_isa() != Isa::avx512) GTEST_SKIP() << "SDPA_ISA chose " << isa_name(active_isa()) << ", not avx512";
  const char* env = std::getenv("SDPA_AMX");
  const bool off = env != nullptr && std::string(env) == "0";
  EXPECT_EQ(amx_bf16_active(), !off);
  EXPECT_FALSE(amx_bf16_active(Isa::avx2));
  EXPECT_EQ(default_bf16_forward_reaches(Engine16::amx), !off);
}

// SDPA_BF16_DOT: where AMX is not active (no AMX, or SDPA_AMX=0), sdpa::forward on bf16 takes
// the vdpbf16ps engine where the CPU has AVX512_BF16 and is AMD's, or SDPA_BF16_DOT=1; never
// with SDPA_BF16_DOT=0. ctest runs this test as it finds the environment and with SDPA_AMX=0
// and SDPA_BF16_DOT=1, 0 and auto (kernel.env.SDPA_BF16_DOT_*).
TEST(Isa, Bf16DotEnvironmentVariable) {
  if (!cpu_features().avx512_bf16) GTEST_SKIP() << "no AVX512_BF16 on this CPU: bf16 is widened or on AMX";
  if (active_isa() != Isa::avx512) GTEST_SKIP() << "SDPA_ISA chose " << isa_name(active_isa()) << ", not avx512";
  const char* env = std::getenv("SDPA_BF16_DOT");
  const std::string want = env != nullptr ? env : "";
  const bool expected = !amx_bf16_active() && want != "0" && (want == "1" || cpu_features().amd);
  EXPECT_EQ(bf16_dot_active(), expected);
  EXPECT_FALSE(bf16_dot_active(Isa::avx2));
  EXPECT_EQ(default_bf16_forward_reaches(Engine16::dot), expected);
}

// aarch64: sdpa::forward on bf16 takes BFDOT where the CPU has BF16, the neon path runs and
// SDPA_BF16_DOT=1; never otherwise (ctest runs it with SDPA_BF16_DOT=1, 0 and auto).
TEST(Isa, ArmBf16DotEnvironmentVariable) {
  if (!cpu_features().arm_bf16) GTEST_SKIP() << "no aarch64 BF16 on this CPU";
  if (active_isa() != Isa::neon) GTEST_SKIP() << "SDPA_ISA chose " << isa_name(active_isa()) << ", not neon";
  const char* env = std::getenv("SDPA_BF16_DOT");
  const bool expected = env != nullptr && std::string(env) == "1";
  EXPECT_EQ(bf16_dot_active(), expected);
  EXPECT_FALSE(bf16_dot_active(Isa::scalar));
  EXPECT_EQ(default_bf16_forward_reaches(Engine16::dot), expected);
}

}  // namespace
}  // namespace sdpa::test
