#!/usr/bin/env bash
# fuzz_smoke.sh — build the libFuzzer target for the .npy parser with clang++ in
# build-fuzz/ and run it for FUZZ_SECONDS (default 60) on a copy of fuzz/corpus/npy.
# Exits non-zero on any crash, sanitizer report or oversized allocation, leaving the
# input under build-fuzz/ and the log in build-fuzz/fuzz.log. Prints one summary line.
#   FUZZ_SECONDS=120 scripts/fuzz_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
build=build-fuzz
jobs=${FUZZ_BUILD_JOBS:-$(nproc)}

mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSDPA_BUILD_FUZZ=ON -DSDPA_BUILD_TESTS=OFF -DSDPA_BUILD_APPS=OFF > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
# Only the fuzz target: it compiles the parser itself and needs nothing else built.
cmake --build "$build" --target fuzz_npy -j "$jobs" > "$build/build.log" 2>&1 || { cat "$build/build.log"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp fuzz/corpus/npy/* "$work/"
seeds=$(ls "$work" | wc -l)
rc=0
# Inputs up to 4 KiB, so no valid array needs more than that: a 64 MiB allocation can
# only come from trusting a header, and -malloc_limit_mb reports it as a crash.
"./$build/fuzz/fuzz_npy" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -malloc_limit_mb=64 -dict=fuzz/npy.dict -print_final_stats=1 -artifact_prefix="$build/" \
  "$work" > "$build/fuzz.log" 2>&1 || rc=$?
runs=$(awk '/^stat::number_of_executed_units/ {print $2}' "$build/fuzz.log")
took=$(awk '/^stat::.*time|Done [0-9]+ runs in/ {for (i = 1; i <= NF; i++) if ($i == "in") print $(i + 1)}' "$build/fuzz.log" | tail -1)
if [ "$rc" -ne 0 ]; then
  tail -40 "$build/fuzz.log"
  echo "fuzz smoke: FAILED after ${runs:-?} runs (exit $rc); input saved under $build/, log in $build/fuzz.log"
  exit 1
fi
echo "fuzz smoke: ${runs:-?} runs in ${took:-$seconds} s, no crash; corpus $seeds seeds -> $(ls "$work" | wc -l) files"
