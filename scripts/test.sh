#!/usr/bin/env bash
# test.sh — set up, then run every test: the Release build's ctest suite, the same
# suite built with AddressSanitizer + UndefinedBehaviorSanitizer, the kernel tests built for
# aarch64 and run under QEMU, a fuzz smoke of the .npy parser and of attention over a KV cache,
# then the Python package built with pip and its pytest suite. Exits non-zero on any failure.
# Prints each stage's elapsed seconds.
# SDPA_JOBS limits build and ctest parallelism (default: all cores); FUZZ_SECONDS the
# fuzz smoke's length per target in CI (default 30); SDPA_PY_TORCH=0 skips installing PyTorch for the
# Python tests (see scripts/python_test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${SDPA_JOBS:-$(nproc)}
start=$SECONDS
stage_name="" stage_start=$SECONDS
end_stage() {
  [ -n "$stage_name" ] && echo "=== $stage_name: done in $((SECONDS - stage_start)) s"
  return 0
}
stage() {
  end_stage
  stage_name=$* stage_start=$SECONDS
  echo; echo "=== $stage_name (t = $((SECONDS - start)) s)"
}
py_env_pid=""  # the background venv setup (below), stopped if a stage fails first
trap '[ $? -eq 0 ] || echo "=== FAILED in stage: $stage_name (t = $((SECONDS - start)) s)"
      [ -z "$py_env_pid" ] || kill "$py_env_pid" 2> /dev/null || true' EXIT

# The largest cases of seven kernel test families (the N = 1000 shapes, the two longest decoding
# grids, the explicit-mask determinism sweep, the paged-against-contiguous bits, the fp8 cache's
# thread-count and paged bits, two layouts of the heads read together): the Release stage runs
# them; the sanitized and emulated stages run the families' smaller cases, which reach the same
# code paths in a fraction of the time.
big_kernel_cases='N1000_|decode_Hq6_Hkv3_Nq1_Nk12345|decode_Hq8_Hkv2_Nq3_Nk9000|ExplicitMaskGivesTheBitsOfItsStructure|PagedGivesTheContiguousBits'
big_kernel_cases+='|PagedAsContiguous/fp8_e4m3_|HeadsReadTogetherGiveEachHeadsOwnBits/heads_major_(paged32|contiguous)$'
# The lab's statistical tests (each claim's verdict at its full sample count): the Release
# stage runs them; under the sanitizers every experiment's C++ runs once in lab.Registry.
lab_statistics='^lab\.(Puzzle|Alternatives|Projections|Gradients|Saturation|Verdicts|Variance|Matrix|General)\.'

stage "setup"
bash scripts/setup.sh
# The Python stage's venv (PyTorch and transformers from PyPI: minutes of download and
# unpacking, little CPU) is filled in the background while the C++ stages build; the Python
# stage waits for it. Its output goes to a log the Python stage prints.
py_env_log=$(mktemp)
bash scripts/python_env.sh > "$py_env_log" 2>&1 &
py_env_pid=$!

# One compiler cache for the Release build and the Python stage's wheel: the wheel's core library
# (src/attention, the kernels: its longest files) is compiled with the Release build's flags, so
# pip's build of the wheel takes those objects from the cache instead of compiling them again. The
# cache is in the tree (build-ccache/): a fresh clone starts with it empty, and nothing of another
# run or machine is reused. CCACHE_BASEDIR makes the two build folders' command lines alike.
with_ccache=()
if command -v ccache > /dev/null; then
  with_ccache=(env CXX="${CXX:-g++}" CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_DIR="$PWD/build-ccache" CCACHE_BASEDIR="$PWD")
fi

stage "Release build"
"${with_ccache[@]}" bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
stage "Release tests"
(cd build && ctest --output-on-failure -j "$jobs")

stage "Debug build: the ISA objects share no inline code"
# A user's Debug build compiles the ISA files at SDPA_ISA_DEBUG_OPT (-O1) and the rest at -O0
# (src/CMakeLists.txt): the same check as kernel.isa_objects_share_no_inline_code, over the two
# libraries' objects, that no ISA object exports an inline function another path could link to.
mkdir -p build-debug
"${with_ccache[@]}" cmake -S . -B build-debug -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSDPA_BUILD_TESTS=OFF \
  -DSDPA_BUILD_APPS=OFF -DSDPA_BUILD_BENCH=OFF -DSDPA_BUILD_PYTHON=OFF > build-debug/configure.log 2>&1 ||
  { cat build-debug/configure.log; exit 1; }
"${with_ccache[@]}" cmake --build build-debug -j "$jobs" --target sdpa sdpa_nn
bash tests/kernel/check_isa_symbols.sh "$(find build-debug/src -name '*.cpp.o' | tr '\n' ';')"

stage "ASan + UBSan build"
# At -O1 (with -g for the reports' line numbers): the sanitizers' checks turn the kernels'
# inlined loops into very large functions, on which GCC's -O2 passes took 718 s for
# fast_avx512.cpp alone (3113 s of compiling in all); at -O1, 79 s (1311 s in all), while the
# tests ran about as long (1293 s of test time against 1228 s). docs/design.md, "CI time".
# Without the kernel tests' W = 16 build on AVX2 (SDPA_TEST_W16_ON_AVX2), the longest file to
# compile (232 s), which runs the AVX-512 path's logic where the CPU has no AVX-512: the Release
# stage runs it; here the CPU's own paths run. Nor the micro-benchmarks (bench/), which no test runs.
# And without the AVX-512 path where this CPU lacks it (SDPA_AVX512=HOST): there its code is
# compiled, never run, and under the sanitizers fast_avx512.cpp was the longest file.
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG" \
  -DSDPA_SANITIZE=address,undefined -DSDPA_TEST_W16_ON_AVX2=OFF -DSDPA_BUILD_BENCH=OFF -DSDPA_AVX512=HOST
stage "ASan + UBSan tests"
# LeakSanitizer's stop-the-world tracer crashes now and then at a process's exit ("Tracer caught
# signal 11 ... LeakSanitizer has encountered a fatal error"; google/sanitizers#1353), seen here in
# an Open MPI rank of the ring tests on a busy host: a failure of the tool, which checked nothing.
# A test whose failure is only that runs once more; a leak, an AddressSanitizer or UBSan report,
# or any other failure fails the stage as it is.
# The package.* tests (install to a prefix, build examples/ against it, run the moved install's
# lab report) check where files go and run little that the cli.* and kernel tests do not: they
# are left to the Release stage, which saves the sanitized stage a second lab report. The lab
# report itself (cli.lab_report: every experiment at its full size, lab.json, then the page,
# which Python draws) is left to the Release stage too: under the sanitizers it was the stage's
# longest test (196 s), and its C++ still runs sanitized: every experiment in lab.Registry and
# lab.Registry, and the report's runs that end in an error (cli.lab_errors). The lab's
# statistical tests and the kernel's largest cases are left to the Release stage (above).
asan_ctest() {
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure \
    -E "^package\.|^cli\.lab_report\$|$lab_statistics|$big_kernel_cases" "$@")
}
if ! asan_ctest -j "$jobs"; then
  log=build-asan/Testing/Temporary/LastTest.log
  failed=$(cut -d: -f2- build-asan/Testing/Temporary/LastTestsFailed.log)
  for t in $failed; do
    out=$(awk -v name="$t" '$0 ~ ("Testing: " name "$") {p = 1} p {print} p && /^Test (Failed|Passed)/ {exit}' "$log")
    if ! grep -q "LeakSanitizer has encountered a fatal error" <<< "$out" ||
       grep -qE "ERROR: (AddressSanitizer|LeakSanitizer: detected)|runtime error:" <<< "$out"; then
      echo "ASan + UBSan: $t failed (not LeakSanitizer's tracer alone)"
      exit 1
    fi
  done
  echo "=== ASan + UBSan: LeakSanitizer's tracer crashed in:" $failed "- running them once more"
  asan_ctest --rerun-failed
fi

stage "aarch64: cross build, kernel tests under QEMU"
# The library and its kernel tests built for aarch64 (cmake/aarch64-linux-gnu.cmake) and run by
# qemu-aarch64 through ctest (docs/design.md, "Other CPUs: the aarch64 build").
# First the neon path alone (SDPA_TEST_ISAS=neon, SVE off): every kernel test but the largest
# cases of five families (big_kernel_cases, above), whose smaller cases still run; those are
# two fifths of the suite's time under QEMU. And the training lab's GEMM
# and GELU, and its thread-count bits with each path forced. The scalar path's kernel is the
# x86-64 scalar path's source, which both stages above run; on aarch64 it runs in a full run.
# Then the sve path alone (SDPA_TEST_ISAS=sve) at 512 bits, QEMU's default length, whose
# decoding layout differs most from neon's; the 256-bit build runs in a full run (README.md's
# aarch64 commands). QEMU emulates SVE several times slower than NEON, so this run takes the
# tests that reach each of the sve layer's primitives once: the shape grid against the fp64
# reference (up to D 128), the decoding grid, the per-ISA NaN, empty-row, scratch, math and
# thread-count decoding tests, 16-bit decoding, the conversions, the 8-bit codes, dropout's
# Philox bits, and the projections' GEMM and GELU.
mkdir -p build-arm64
cmake -S . -B build-arm64 -G Ninja --toolchain cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  -DSDPA_BUILD_APPS=OFF > build-arm64/configure.log 2>&1 || { cat build-arm64/configure.log; exit 1; }
cmake --build build-arm64 -j "$jobs" --target sdpa_kernel_tests sdpa_nn_tests
(cd build-arm64 && QEMU_CPU=max,sve=off SDPA_TEST_ISAS=neon ctest --output-on-failure -j "$jobs" \
  -R '^kernel\.|^nn\.(LinearIsa|threads)\.' -E "$big_kernel_cases")
sve_tests='^kernel\.(Shapes/Grid|Features/Grid\.FastMatchesReference/decode_|Isa/(NaNs|EmptyRows|Scratch)|'
sve_tests+='Isa/VectorMath|Isa/Determinism\.Decoding|Kernel/Dtypes\.(Bf16|Fp16)WithinTheRule/decode_lanes5_|'
sve_tests+='Half|KvQuant|QuantizedKvCache\.MatchesTheReference|'
sve_tests+='Dropout\.FastKernelMaskIsTheReferenceMask)|^nn\.LinearIsa\.'
echo "=== aarch64 sve path at 512 bits"
(cd build-arm64 && QEMU_CPU=max,sve512=on SDPA_TEST_ISAS=sve ctest --output-on-failure -j "$jobs" \
  -R "$sve_tests" -E 'N1000_|_D256|Nk12345|Nk9000|SameBitsFor1_2_7Threads/')

if [ -f scripts/fuzz_smoke.sh ]; then
  stage "fuzz smoke (.npy parser, KV-cache calls; libFuzzer)"
  FUZZ_SECONDS=${FUZZ_SECONDS:-30} bash scripts/fuzz_smoke.sh
fi

stage "Python package (pip install . into .venv, pytest)"
wait "$py_env_pid" || echo "python: the background venv setup failed (exit $?); python_test.sh tries again"
py_env_pid=""
echo "--- the venv, filled in the background:"; cat "$py_env_log"; rm -f "$py_env_log"
# The cache's counts from here on are the wheel's compiles alone: its hits, the Release build's objects.
[ ${#with_ccache[@]} -eq 0 ] || "${with_ccache[@]}" ccache --zero-stats > /dev/null
"${with_ccache[@]}" bash scripts/python_test.sh
[ ${#with_ccache[@]} -eq 0 ] || "${with_ccache[@]}" ccache --show-stats | grep -E "Hits|Misses" || true

end_stage
echo; echo "=== all tests passed in $((SECONDS - start)) s"
