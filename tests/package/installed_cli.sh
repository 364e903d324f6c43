#!/usr/bin/env bash
# installed_cli.sh BUILD_DIR — installs to a temporary prefix, moves the prefix elsewhere
# (so nothing can be found through a path fixed at build or install time), and runs the
# installed `sdpa lab report` and `sdpa sweep` from an unrelated directory: their scripts
# and docs must come from the install itself (share/sdpa beside bin/).
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
mv "$work/prefix" "$work/moved prefix"
sdpa="$work/moved prefix/bin/sdpa"
for f in sdpa_lab_report.py sdpa_train_report.py lab.md; do
  [ -f "$work/moved prefix/share/sdpa/$f" ] || { echo "FAIL: share/sdpa/$f not installed"; exit 1; }
done
mkdir "$work/elsewhere" && cd "$work/elsewhere"
unset SDPA_DATA_DIR
# A draft (--samples 20): what is checked is where the files come from; cli.lab_report runs
# the report at full size.
"$sdpa" lab report --samples 20 --out rep > log.txt
grep -q 'wrote rep/index.html' log.txt || { echo "FAIL: lab report: $(cat log.txt)"; exit 1; }
grep -q "file://$work/moved prefix/share/sdpa/lab.md" rep/index.html ||
  { echo "FAIL: the report does not link the installed docs/lab.md"; exit 1; }
"$sdpa" sweep --d-model 16 --layers 1 --seq 8 --batch 4 --steps 4 --warmup 2 --eval-size 8 --policies none \
  --seeds 1 --d-head 8 --out sw > sweep.txt 2> /dev/null
[ -s sw/index.html ] && [ -s sw/sweep.json ] || { echo "FAIL: sweep: $(cat sweep.txt)"; exit 1; }
echo "ok: the installed sdpa, moved, ran lab report and sweep from $PWD"
