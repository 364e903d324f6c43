#!/usr/bin/env bash
# install_and_consume.sh BUILD_DIR EXAMPLES_DIR CXX [BUILD_TYPE] [SANITIZERS]
set -euo pipefail
build=$1 examples=$2 cxx=$3 type=${4:-Release} sanitize=${5:-}
flags=()  # a sanitizer build's library needs its runtime in the consumer too
[ -n "$sanitize" ] && flags=(-DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$sanitize")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
echo "installed: $(cd "$work/prefix" && find . -type f | sort | tr '\n' ' ')"
cmake -S "$examples" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_BUILD_TYPE="$type" "${flags[@]}" > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"
"$work/build/basic"
