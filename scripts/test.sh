#!/usr/bin/env bash
# test.sh — set up, then run every test: the Release build's ctest suite, the same
# suite built with AddressSanitizer + UndefinedBehaviorSanitizer, and a fuzz smoke of
# the .npy parser. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stage() { echo; echo "=== $* (t = $((SECONDS - start)) s)"; }

stage "setup"
bash scripts/setup.sh

stage "Release build"
bash scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
stage "Release tests"
(cd build && ctest --output-on-failure -j "$(nproc)")

stage "ASan + UBSan build"
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSDPA_SANITIZE=address,undefined
stage "ASan + UBSan tests"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j "$(nproc)")

stage "fuzz smoke (.npy parser, libFuzzer)"
FUZZ_SECONDS=${FUZZ_SECONDS:-60} bash scripts/fuzz_smoke.sh

stage "all tests passed"
