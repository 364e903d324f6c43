#!/usr/bin/env bash
# fuzz_smoke.sh — build the libFuzzer target for the .npy parser with clang and run it
# for FUZZ_SECONDS (default 60) on a copy of fuzz/corpus/npy. Fails on any crash.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
bash scripts/build.sh build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSDPA_BUILD_FUZZ=ON -DSDPA_BUILD_TESTS=OFF -DSDPA_BUILD_APPS=OFF > /dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp fuzz/corpus/npy/* "$work/"
rc=0
./build-fuzz/fuzz/fuzz_npy -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=1024 -print_final_stats=1 \
  -artifact_prefix=build-fuzz/ "$work" > build-fuzz/fuzz.log 2>&1 || rc=$?
runs=$(grep -E '^stat::number_of_executed_units' build-fuzz/fuzz.log | awk '{print $2}')
if [ "$rc" -ne 0 ]; then
  tail -40 build-fuzz/fuzz.log
  echo "fuzz smoke: FAILED after ${runs:-?} runs (crash input saved under build-fuzz/)"
  exit 1
fi
echo "fuzz smoke: ${runs:-?} inputs in ${seconds} s, no crash; corpus grew from $(ls fuzz/corpus/npy | wc -l) to $(ls "$work" | wc -l) files"
