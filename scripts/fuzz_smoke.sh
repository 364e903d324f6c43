#!/usr/bin/env bash
# fuzz_smoke.sh — build the libFuzzer targets with clang++ in build-fuzz/ and run each for
# FUZZ_SECONDS (default 60): fuzz_npy (the .npy parser) on a copy of fuzz/corpus/npy, and
# fuzz_kvcache (attention over a KV cache: its argument checks and every buffer access behind
# them, the library built with ASan and UBSan) from an empty corpus. Exits non-zero on any
# crash, sanitizer report or oversized allocation, leaving the input under build-fuzz/ and the
# log in build-fuzz/<target>.log. Prints one summary line per target.
#   FUZZ_SECONDS=120 scripts/fuzz_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
build=build-fuzz
jobs=${FUZZ_BUILD_JOBS:-$(nproc)}

mkdir -p "$build"
# At -O0 (Debug, so the library's assertions are checked too): clang's AddressSanitizer build of
# fast_avx512.cpp took 395 s at -O2 and 410 s at -O1 against 41 s at -O0, and the fuzzer's
# inputs are a few KiB, so the unoptimised kernel still runs about 1100 KV-cache calls a second
# (2600 at -O2). The ISA files stay at -O0 too (SDPA_ISA_DEBUG_OPT empty, src/CMakeLists.txt), so
# a weak copy of an inline function compiled for a wider ISA may serve another path. Hence
# SDPA_AVX512=HOST: on a CPU without AVX-512 the AVX-512 files are left out, so no such copy
# (GCC's and clang's -O0 fp16::to_float holds vcvtusi2ss) exists to stop the run with SIGILL;
# where they are built, the CPU runs their code. docs/design.md, "CI time".
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DSDPA_ISA_DEBUG_OPT= -DSDPA_AVX512=HOST \
  -DSDPA_BUILD_FUZZ=ON -DSDPA_BUILD_TESTS=OFF -DSDPA_BUILD_APPS=OFF > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
# Only the fuzz targets and what they link (fuzz_kvcache: the library, instrumented).
cmake --build "$build" --target fuzz_npy fuzz_kvcache -j "$jobs" > "$build/build.log" 2>&1 ||
  { cat "$build/build.log"; exit 1; }

# run TARGET SEED_DIR MAX_LEN MALLOC_MB [libFuzzer flags...]
run() {
  local target=$1 seed_dir=$2 max_len=$3 malloc_mb=$4; shift 4
  local work log="$build/$target.log" rc=0 runs took seeds
  work=$(mktemp -d)
  [ -z "$seed_dir" ] || cp "$seed_dir"/* "$work/"
  seeds=$(ls "$work" | wc -l)
  "./$build/fuzz/$target" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb="$malloc_mb" -print_final_stats=1 -artifact_prefix="$build/" "$@" "$work" > "$log" 2>&1 || rc=$?
  runs=$(awk '/^stat::number_of_executed_units/ {print $2}' "$log")
  took=$(awk '/Done [0-9]+ runs in/ {for (i = 1; i <= NF; i++) if ($i == "in") print $(i + 1)}' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    tail -40 "$log"
    echo "fuzz smoke $target: FAILED after ${runs:-?} runs (exit $rc); input saved under $build/, log in $log"
    rm -rf "$work"
    return 1
  fi
  echo "fuzz smoke $target: ${runs:-?} runs in ${took:-$seconds} s, no crash; corpus $seeds seeds -> $(ls "$work" | wc -l) files"
  rm -rf "$work"
}

# .npy inputs up to 4 KiB, so no valid array needs more than that: a 64 MiB allocation can
# only come from trusting a header, and -malloc_limit_mb reports it as a crash.
run fuzz_npy fuzz/corpus/npy 4096 64 -dict=fuzz/npy.dict
# KV-cache shapes are drawn small (dimensions up to 40, 8 blocks): every buffer is a few KiB,
# and the kernel's per-thread scratch stays far below 256 MiB.
run fuzz_kvcache "" 512 256
