#!/usr/bin/env bash
# cli_test.sh SDPA NPY_TOOL CASE — one end-to-end case of the sdpa command line.
set -euo pipefail
sdpa=$1 tool=$2 case=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*"; exit 1; }
# The CPU's flags as this build's paths can use them: a build without the AVX-512 path
# (SDPA_AVX512 OFF, or HOST on a CPU without it; CMake then passes SDPA_BUILD_AVX512=0) counts
# the AVX-512 and AMX extensions as absent, as its dispatch does. The cases below read them here.
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
[ "${SDPA_BUILD_AVX512:-1}" = 1 ] || cpu_flags=$(echo "$cpu_flags" | tr ' ' '\n' | grep -v -e '^avx512' -e '^amx' | tr '\n' ' ')
export SDPA_TEST_CPU_FLAGS=$cpu_flags
# expect_error NAME_FRAGMENT CMD...: exit 1, exactly one stderr line "sdpa: error: ...", no new files.
expect_error() {
  local fragment=$1; shift
  local before after rc=0
  before=$(ls -A | sort)
  "$@" > out.txt 2> err.txt || rc=$?
  after=$(ls -A | sort)
  rm -f out.txt err.txt.keep
  [ "$rc" -eq 1 ] || fail "expected exit 1, got $rc: $*"
  [ "$(wc -l < err.txt)" -eq 1 ] || { cat err.txt; fail "expected one stderr line: $*"; }
  grep -q '^sdpa: error: ' err.txt || { cat err.txt; fail "stderr must start 'sdpa: error:': $*"; }
  grep -qF -- "$fragment" err.txt || { cat err.txt; fail "stderr should mention '$fragment': $*"; }
  [ "$(echo "$after" | grep -v -e '^out.txt$' -e '^err.txt$')" = "$(echo "$before" | grep -v -e '^out.txt$' -e '^err.txt$')" ] \
    || fail "files left behind: $(diff <(echo "$before") <(echo "$after") | tr '\n' ' ')"
  echo "ok: error mentioning '$fragment'"
}
# close A B TOL: max |a - b| <= TOL
close() {
  local d; d=$("$tool" maxdiff "$1" "$2")
  awk -v d="$d" -v t="$3" 'BEGIN { exit !(d <= t) }' || fail "$1 vs $2 differ by $d (> $3)"
  echo "ok: $1 ~ $2 (max diff $d)"
}

case $case in
  help_and_version)
    "$sdpa" --help | grep -q attention || fail "--help lists no subcommands"
    "$sdpa" attention --help | grep -q -- '--causal' || fail "attention --help"
    "$sdpa" check --help | grep -q -- '--seq' || fail "check --help"
    # --version names the path and the 16-bit engine this CPU runs, under each setting of the
    # variables that steer them: the expectation is derived here from /proc/cpuinfo, not listed.
    for vars in "" "SDPA_AMX=0" "SDPA_AMX=0 SDPA_BF16_DOT=1" "SDPA_AMX=0 SDPA_BF16_DOT=0" "SDPA_BF16_DOT=0" \
                "SDPA_ISA=avx2" "SDPA_ISA=scalar"; do
      if [ "$vars" = "SDPA_ISA=avx2" ] && [[ $cpu_flags != *" avx2 "* ]]; then continue; fi
      got=$(env $vars "$sdpa" --version) || fail "--version with '$vars'"
      want=$(env $vars /usr/bin/python3 - <<'PY'
import os, platform
flags = set(os.environ["SDPA_TEST_CPU_FLAGS"].split())
vendor = next((l.split(":")[1].strip() for l in open("/proc/cpuinfo") if l.startswith("vendor_id")), "")
avx2 = {"avx2", "fma", "f16c"} <= flags
avx512 = avx2 and {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags
bf16 = avx512 and "avx512_bf16" in flags
release = tuple(int(x) for x in platform.release().split("-")[0].split(".")[:2])
amx = bf16 and {"amx_tile", "amx_bf16"} <= flags and release >= (5, 16)
isa = os.environ.get("SDPA_ISA") or ("avx512" if avx512 else "avx2" if avx2 else "scalar")
engine = ""
if isa == "avx512":
    dot = os.environ.get("SDPA_BF16_DOT", "auto")
    if amx and os.environ.get("SDPA_AMX") != "0":
        engine = ", bf16 and fp16 on AMX-BF16"
    elif bf16 and dot != "0" and (dot == "1" or vendor == "AuthenticAMD"):
        engine = ", bf16 on AVX512_BF16 dot products"
print(f"(isa: {isa}{engine})")
PY
)
      echo "$got" | grep -qE '^sdpa [0-9]+\.[0-9]+\.[0-9]+ \(' || fail "--version: $got"
      [ "${got#* * }" = "$want" ] || fail "--version with '$vars': got '$got', this CPU's flags say '$want'"
      echo "ok: --version with '$vars': $want"
    done
    rc=0; "$sdpa" > /dev/null 2>&1 || rc=$?; [ "$rc" -eq 2 ] || fail "no subcommand should exit 2, got $rc"
    rc=0; "$sdpa" attention --bogus 2> /dev/null || rc=$?; [ "$rc" -eq 2 ] || fail "unknown option should exit 2, got $rc"
    echo "ok: help, version, usage errors" ;;
  docs_options)
    # The options README.md and docs/ show for each subcommand (and bench/ script) are ones it defines.
    here=$(dirname "${BASH_SOURCE[0]}")
    /usr/bin/python3 "$here/docs_options.py" "$here/../.." "$sdpa" ;;
  ranks)
    for shape in "33 16" "3 33 16" "2 3 33 16"; do
      "$tool" make q.npy f32 1 $shape; "$tool" make k.npy f32 2 $shape; "$tool" make v.npy f32 3 $shape
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy --causal top-left
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out r.npy --lse rl.npy --causal top-left --kernel reference
      want="float32 [$(echo $shape | sed 's/ /, /g')]"
      [ "$("$tool" info o.npy)" = "$want" ] || fail "out: $("$tool" info o.npy), want $want"
      want_lse="float32 [$(echo $shape | awk '{$NF=""; print}' | sed 's/ *$//; s/ /, /g')]"
      [ "$("$tool" info l.npy)" = "$want_lse" ] || fail "lse: $("$tool" info l.npy), want $want_lse"
      close o.npy r.npy 1e-5; close l.npy rl.npy 1e-5
    done ;;
  float64)
    "$tool" make q.npy f64 1 2 40 8; "$tool" make k.npy f64 2 2 50 8; "$tool" make v.npy f64 3 2 50 4
    "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy --scale 0.5 --softcap 3
    "$sdpa" attention --q q.npy --k k.npy --v v.npy --out r.npy --scale 0.5 --softcap 3 --kernel reference
    [ "$("$tool" info o.npy)" = "float64 [2, 40, 4]" ] || fail "out: $("$tool" info o.npy)"
    close o.npy r.npy 1e-5 ;;
  float16)
    # q, k, v, dout in float16 (GQA, causal): out and the gradients come back float16, lse float32.
    "$tool" make q.npy f16 1 2 4 40 16; "$tool" make k.npy f16 2 2 2 50 16; "$tool" make v.npy f16 3 2 2 50 16
    "$tool" make g.npy f16 4 2 4 40 16
    for kernel in fast reference; do
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o_$kernel.npy --lse l_$kernel.npy --causal bottom-right \
        --grad-out g.npy --dq dq_$kernel.npy --dk dk_$kernel.npy --dv dv_$kernel.npy --kernel $kernel
    done
    [ "$("$tool" info o_fast.npy)" = "float16 [2, 4, 40, 16]" ] || fail "out: $("$tool" info o_fast.npy)"
    [ "$("$tool" info l_fast.npy)" = "float32 [2, 4, 40]" ] || fail "lse: $("$tool" info l_fast.npy)"
    [ "$("$tool" info dk_fast.npy)" = "float16 [2, 2, 50, 16]" ] || fail "dk: $("$tool" info dk_fast.npy)"
    # Both kernels round their fp32 / fp64 result once to float16: they may differ by one ulp
    # of the largest value, 2^-10·max|x|, with |out| < 4 and gradients below 16 on N(0, 1)
    # inputs: 4e-3 and 1.6e-2 (the fp32 arithmetic's own error is far below).
    close o_fast.npy o_reference.npy 4e-3; close l_fast.npy l_reference.npy 1e-4
    for g in dq dk dv; do close ${g}_fast.npy ${g}_reference.npy 1.6e-2; done
    # One dtype per call: a float32 tensor among float16 ones is named, nothing is written.
    "$tool" make k32.npy f32 2 2 2 50 16; "$tool" make g32.npy f32 4 2 4 40 16
    expect_error "--k: dtype float32 differs from --q's float16" "$sdpa" attention --q q.npy --k k32.npy --v v.npy --out x.npy
    expect_error "--grad-out: dtype float32 differs from --q's float16" "$sdpa" attention --q q.npy --k k.npy --v v.npy \
      --out x.npy --grad-out g32.npy --dq a.npy --dk b.npy --dv c.npy
    # Packed float16: one sequence of one head is the plain float16 call on the same numbers
    # ([T, 1, D] = [T, D]), forward and backward; out and gradients float16, lse float32.
    "$tool" offsets cq.npy i32 0 40; "$tool" offsets ck.npy i64 0 50
    "$tool" make q3.npy f16 1 40 1 16; "$tool" make k3.npy f16 2 50 1 16; "$tool" make v3.npy f16 3 50 1 16
    "$tool" make g3.npy f16 4 40 1 16
    "$tool" make q2.npy f16 1 40 16; "$tool" make k2.npy f16 2 50 16; "$tool" make v2.npy f16 3 50 16
    "$tool" make g2.npy f16 4 40 16
    "$sdpa" attention --q q3.npy --k k3.npy --v v3.npy --out o3.npy --lse l3.npy --cu-seqlens-q cq.npy \
      --cu-seqlens-k ck.npy --causal bottom-right --grad-out g3.npy --dq dq3.npy --dk dk3.npy --dv dv3.npy
    "$sdpa" attention --q q2.npy --k k2.npy --v v2.npy --out o2.npy --lse l2.npy --causal bottom-right \
      --grad-out g2.npy --dq dq2.npy --dk dk2.npy --dv dv2.npy
    [ "$("$tool" info o3.npy)" = "float16 [40, 1, 16]" ] || fail "packed out: $("$tool" info o3.npy)"
    [ "$("$tool" info l3.npy)" = "float32 [1, 40]" ] || fail "packed lse: $("$tool" info l3.npy)"
    [ "$("$tool" info dk3.npy)" = "float16 [50, 1, 16]" ] || fail "packed dk: $("$tool" info dk3.npy)"
    for x in o l dq dk dv; do close ${x}3.npy ${x}2.npy 0; done ;;
  backward)
    "$tool" make q.npy f32 1 1 4 30 8; "$tool" make k.npy f32 2 1 2 30 8; "$tool" make v.npy f32 3 1 2 30 8
    "$tool" make g.npy f32 4 1 4 30 8; "$tool" make m.npy bool 5 30 30
    for kern in fast reference; do
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o_$kern.npy --mask m.npy --kernel $kern \
        --grad-out g.npy --dq dq_$kern.npy --dk dk_$kern.npy --dv dv_$kern.npy
    done
    [ "$("$tool" info dk_fast.npy)" = "float32 [1, 2, 30, 8]" ] || fail "dk shape"
    for t in o dq dk dv; do close ${t}_fast.npy ${t}_reference.npy 1e-4; done ;;
  masks_and_windows)
    "$tool" make q.npy f32 1 2 20 8; "$tool" make k.npy f32 2 2 25 8; "$tool" make v.npy f32 3 2 25 8
    "$tool" make add.npy f32 6 20 25; "$tool" make keep.npy bool 7 1 1 25
    for extra in "--mask add.npy" "--mask keep.npy --causal bottom-right" "--window 3,2" "--window -1,0 --causal top-left"; do
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy $extra
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out r.npy $extra --kernel reference
      close o.npy r.npy 1e-5
    done ;;
  errors)
    "$tool" make q.npy f32 1 2 10 8; "$tool" make k.npy f32 2 2 12 8; "$tool" make v.npy f32 3 2 12 8
    "$tool" make k7.npy f32 2 2 12 7; "$tool" make v64.npy f64 3 2 12 8; "$tool" make m.npy f32 4 10 13
    "$tool" make g.npy f32 5 2 10 8; "$tool" make z.npy f32 6 2 0 8
    printf 'not an npy file' > junk.npy
    base=(attention --q q.npy --k k.npy --v v.npy --out o.npy)
    expect_error "missing.npy" "$sdpa" attention --q missing.npy --k k.npy --v v.npy --out o.npy
    expect_error "magic" "$sdpa" attention --q junk.npy --k k.npy --v v.npy --out o.npy
    expect_error "head dim" "$sdpa" attention --q q.npy --k k7.npy --v v.npy --out o.npy
    expect_error "dtype" "$sdpa" attention --q q.npy --k k.npy --v v64.npy --out o.npy
    expect_error "zero-size" "$sdpa" attention --q z.npy --k k.npy --v v.npy --out o.npy
    expect_error "scale" "$sdpa" "${base[@]}" --scale inf
    expect_error "softcap" "$sdpa" "${base[@]}" --softcap -1
    expect_error "--causal" "$sdpa" "${base[@]}" --causal diagonal
    expect_error "--window" "$sdpa" "${base[@]}" --window 3
    expect_error "--isa" "$sdpa" "${base[@]}" --isa sse9
    # errors found after the inputs were read and the forward ran: still no output file
    expect_error "mask" "$sdpa" "${base[@]}" --lse l.npy --mask m.npy
    expect_error "go together" "$sdpa" "${base[@]}" --grad-out g.npy --dq dq.npy
    expect_error "nonexistent_dir" "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy --lse /nonexistent_dir/l.npy
    [ ! -e o.npy ] || fail "o.npy written although --lse could not be" ;;
  varlen)
    # One packed sequence of one head is the plain call on the same numbers ([T, 1, D] = [T, D]).
    "$tool" make q.npy f32 1 30 1 8; "$tool" make k.npy f32 2 40 1 8; "$tool" make v.npy f32 3 40 1 8
    "$tool" make q2.npy f32 1 30 8; "$tool" make k2.npy f32 2 40 8; "$tool" make v2.npy f32 3 40 8
    "$tool" offsets cq.npy i32 0 30; "$tool" offsets ck.npy i64 0 40
    "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy --cu-seqlens-q cq.npy --cu-seqlens-k ck.npy \
      --causal bottom-right
    "$sdpa" attention --q q2.npy --k k2.npy --v v2.npy --out r.npy --lse rl.npy --causal bottom-right
    [ "$("$tool" info o.npy)" = "float32 [30, 1, 8]" ] || fail "out: $("$tool" info o.npy)"
    [ "$("$tool" info l.npy)" = "float32 [1, 30]" ] || fail "lse: $("$tool" info l.npy)"
    close o.npy r.npy 1e-6; close l.npy rl.npy 1e-6
    # A packed mask (rank 3, [Hq|1, Tq|1, Tk|1]): for that one sequence, the plain call with the
    # same numbers as a [Tq, Tk] mask; keep (bool) and additive (float).
    "$tool" make mk3.npy bool 6 1 30 40; "$tool" make mk2.npy bool 6 30 40
    "$tool" make ma3.npy f32 7 1 30 40; "$tool" make ma2.npy f32 7 30 40
    for m in mk ma; do
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy --cu-seqlens-q cq.npy --cu-seqlens-k ck.npy \
        --mask ${m}3.npy
      "$sdpa" attention --q q2.npy --k k2.npy --v v2.npy --out r.npy --lse rl.npy --mask ${m}2.npy
      close o.npy r.npy 1e-6; close l.npy rl.npy 1e-6
    done
    # Three sequences, GQA, backward: shapes; bad offsets: errors naming them, nothing written.
    "$tool" make q.npy f32 1 30 4 8; "$tool" make k.npy f32 2 40 2 8; "$tool" make v.npy f32 3 40 2 6
    "$tool" make g.npy f32 4 30 4 6
    "$tool" offsets cq.npy i64 0 10 10 30; "$tool" offsets ck.npy i32 0 5 25 40
    "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy --cu-seqlens-q cq.npy --cu-seqlens-k ck.npy \
      --grad-out g.npy --dq dq.npy --dk dk.npy --dv dv.npy
    [ "$("$tool" info o.npy)" = "float32 [30, 4, 6]" ] || fail "out: $("$tool" info o.npy)"
    [ "$("$tool" info l.npy)" = "float32 [4, 30]" ] || fail "lse: $("$tool" info l.npy)"
    [ "$("$tool" info dv.npy)" = "float32 [40, 2, 6]" ] || fail "dv: $("$tool" info dv.npy)"
    # ... with a per-head additive mask and a per-key keep mask (each sequence reads its block).
    "$tool" make mh.npy f32 8 4 30 40; "$tool" make mkey.npy bool 9 1 1 40
    for m in mh mkey; do
      rm -f o.npy dv.npy
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy --cu-seqlens-q cq.npy --cu-seqlens-k ck.npy \
        --mask $m.npy --causal bottom-right --grad-out g.npy --dq dq.npy --dk dk.npy --dv dv.npy
      [ "$("$tool" info o.npy)" = "float32 [30, 4, 6]" ] || fail "out with $m: $("$tool" info o.npy)"
      [ "$("$tool" info dv.npy)" = "float32 [40, 2, 6]" ] || fail "dv with $m: $("$tool" info dv.npy)"
    done
    rm -f o.npy l.npy dq.npy dk.npy dv.npy
    "$tool" make m4.npy f32 8 1 4 30 40; "$tool" make m39.npy f32 8 1 30 39
    vm=(attention --q q.npy --k k.npy --v v.npy --out o.npy --cu-seqlens-q cq.npy --cu-seqlens-k ck.npy)
    expect_error "--mask (m4.npy): packed sequences take a rank-3 [Hq|1, Tq|1, Tk|1] mask, got rank 4" \
      "$sdpa" "${vm[@]}" --mask m4.npy
    expect_error "mask: shape [1, 1, 30, 39] does not broadcast to the packed batch's [1, Hq, Tq, Tk] = [1, 4, 30, 40]" \
      "$sdpa" "${vm[@]}" --mask m39.npy
    "$tool" offsets down.npy i32 0 20 10 30; "$tool" offsets short.npy i32 0 30; "$tool" offsets past.npy i32 0 10 31
    "$tool" make fl.npy f32 9 4
    vl=(attention --q q.npy --k k.npy --v v.npy --out o.npy --cu-seqlens-k ck.npy)
    expect_error "cu_seqlens_q: offsets must not decrease" "$sdpa" "${vl[@]}" --cu-seqlens-q down.npy
    expect_error "cu_seqlens_k: length 4 differs from cu_seqlens_q's 2" "$sdpa" "${vl[@]}" --cu-seqlens-q short.npy
    expect_error "cu_seqlens_q: must end at q's 30 rows, got 31" "$sdpa" "${vl[@]}" --cu-seqlens-q past.npy
    expect_error "--cu-seqlens-q (fl.npy): expected int32 or int64 offsets, got float32" "$sdpa" "${vl[@]}" --cu-seqlens-q fl.npy
    expect_error "go together" "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy --cu-seqlens-q cq.npy
    "$tool" make q4.npy f32 1 1 30 4 8
    expect_error "rank" "$sdpa" attention --q q4.npy --k k.npy --v v.npy --out o.npy --cu-seqlens-q cq.npy --cu-seqlens-k ck.npy ;;
  dropout)
    # The fast and the reference kernel drop the same probabilities for the same --seed and
    # --offset (forward, and the backward regenerating the mask); another seed or offset, or
    # no dropout, gives another output; bad p: an error naming --dropout, nothing written.
    "$tool" make q.npy f32 1 2 40 8; "$tool" make k.npy f32 2 2 50 8; "$tool" make v.npy f32 3 2 50 8
    "$tool" make g.npy f32 4 2 40 8
    for kern in fast reference; do
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o_$kern.npy --lse l_$kern.npy --kernel $kern \
        --dropout 0.3 --seed 7 --offset 2 --causal bottom-right --grad-out g.npy --dq dq_$kern.npy --dk dk_$kern.npy --dv dv_$kern.npy
    done
    for t in o l dq dk dv; do close ${t}_fast.npy ${t}_reference.npy 1e-4; done
    "$sdpa" attention --q q.npy --k k.npy --v v.npy --out none.npy --lse l_none.npy --causal bottom-right
    close l_none.npy l_fast.npy 1e-6  # lse is that of the undropped scores
    for other in "--dropout 0.3 --seed 8 --offset 2" "--dropout 0.3 --seed 7 --offset 3" ""; do
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out x.npy --causal bottom-right $other
      d=$("$tool" maxdiff x.npy o_fast.npy)
      awk -v d="$d" 'BEGIN { exit !(d > 1e-2) }' || fail "'$other' gave the same output as seed 7, offset 2 (max diff $d)"
    done
    echo "ok: another seed, offset or none changes the output"
    base=(attention --q q.npy --k k.npy --v v.npy --out e.npy)
    expect_error "--dropout" "$sdpa" "${base[@]}" --dropout 1
    expect_error "--dropout" "$sdpa" "${base[@]}" --dropout -0.5 ;;
  sinks)
    # Attention sinks: the fast kernel and the reference agree on out, lse, the gradients and
    # --dsinks (dense and packed); sinks change the output; --dsinks needs --sinks and the backward.
    "$tool" make q.npy f32 1 2 40 8; "$tool" make k.npy f32 2 2 50 8; "$tool" make v.npy f32 3 2 50 8
    "$tool" make g.npy f32 4 2 40 8; "$tool" make s.npy f32 5 2; "$tool" make s3.npy f32 5 3
    for kern in fast reference; do
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o_$kern.npy --lse l_$kern.npy --kernel $kern --sinks s.npy \
        --causal bottom-right --grad-out g.npy --dq dq_$kern.npy --dk dk_$kern.npy --dv dv_$kern.npy --dsinks ds_$kern.npy
    done
    for t in o l dq dk dv ds; do close ${t}_fast.npy ${t}_reference.npy 1e-4; done
    [ "$("$tool" info ds_fast.npy)" = "float32 [2]" ] || fail "dsinks: $("$tool" info ds_fast.npy)"
    "$sdpa" attention --q q.npy --k k.npy --v v.npy --out none.npy --causal bottom-right
    d=$("$tool" maxdiff none.npy o_fast.npy)
    awk -v d="$d" 'BEGIN { exit !(d > 1e-3) }' || fail "sinks left the output unchanged (max diff $d)"
    base=(attention --q q.npy --k k.npy --v v.npy --out e.npy)
    expect_error "--dsinks" "$sdpa" "${base[@]}" --dsinks x.npy --grad-out g.npy --dq a.npy --dk b.npy --dv c.npy
    expect_error "--dsinks" "$sdpa" "${base[@]}" --sinks s.npy --dsinks x.npy
    expect_error "sinks: shape [3] should be [Hq] = [2]" "$sdpa" "${base[@]}" --sinks s3.npy ;;
  decode)
    # sdpa decode: contiguous = dense attention on the same keys (tokens-before-heads files
    # transposed for `sdpa attention`); paged = contiguous; an append writes the new rows into the
    # cache files and a later call reads them; an int8 cache = the float cache of its dequantized
    # values; bad input leaves every file as it was.
    "$tool" make q.npy f32 1 2 1 4 8; "$tool" make kc.npy f32 2 2 6 2 8; "$tool" make vc.npy f32 3 2 6 2 8
    "$tool" offsets full.npy i32 6 6
    "$sdpa" decode --q q.npy --k-cache kc.npy --v-cache vc.npy --cache-seqlens full.npy --out o.npy --lse l.npy
    [ "$("$tool" info o.npy)" = "float32 [2, 1, 4, 8]" ] || fail "decode out: $("$tool" info o.npy)"
    [ "$("$tool" info l.npy)" = "float32 [2, 4, 1]" ] || fail "decode lse: $("$tool" info l.npy)"
    for x in q kc vc o; do "$tool" transpose12 $x.npy ${x}T.npy; done
    "$sdpa" attention --q qT.npy --k kcT.npy --v vcT.npy --out r.npy --lse rl.npy --kernel reference
    close oT.npy r.npy 1e-5; close l.npy rl.npy 1e-5
    # paged, block size 3: the same numbers (same seed, same count) as the contiguous cache
    "$tool" make kp.npy f32 2 4 3 2 8; "$tool" make vp.npy f32 3 4 3 2 8; "$tool" table table.npy 2 0 1 2 3
    "$sdpa" decode --q q.npy --k-cache kp.npy --v-cache vp.npy --block-table table.npy --cache-seqlens full.npy \
      --out op.npy
    close op.npy o.npy 0
    # append one token to sequences holding 3 and 5: the files are rewritten, and the next call
    # without new tokens (lengths 4 and 6) reads what was appended
    "$tool" make kn.npy f32 4 2 1 2 8; "$tool" make vn.npy f32 5 2 1 2 8; "$tool" offsets short.npy i32 3 5
    "$tool" offsets after.npy i32 4 6
    cp kc.npy kc0.npy
    "$sdpa" decode --q q.npy --k-cache kc.npy --v-cache vc.npy --cache-seqlens short.npy --k kn.npy --v vn.npy \
      --out oa.npy --causal
    d=$("$tool" maxdiff kc.npy kc0.npy)
    awk -v d="$d" 'BEGIN { exit !(d > 0) }' || fail "the append left the key cache file unchanged"
    "$sdpa" decode --q q.npy --k-cache kc.npy --v-cache vc.npy --cache-seqlens after.npy --out ob.npy --causal
    close oa.npy ob.npy 0
    # an int8 cache (codes 0/1 as uint8, scale 0.25) against the float cache of its values
    "$tool" make kq.npy bool 6 2 6 2 8; "$tool" make vq.npy bool 7 2 6 2 8; "$tool" fill s.npy 0.25 2 2 6
    "$tool" dequant kq.npy s.npy kd.npy; "$tool" dequant vq.npy s.npy vd.npy
    "$sdpa" decode --q q.npy --k-cache kq.npy --v-cache vq.npy --kv-quant int8 --k-scale s.npy --v-scale s.npy \
      --cache-seqlens full.npy --out oq.npy
    "$sdpa" decode --q q.npy --k-cache kd.npy --v-cache vd.npy --cache-seqlens full.npy --out od.npy
    close oq.npy od.npy 1e-6
    "$sdpa" decode --q q.npy --k-cache kq.npy --v-cache vq.npy --kv-quant fp8_e4m3 --k-scale s.npy --v-scale s.npy \
      --cache-seqlens full.npy --out o8.npy
    # bad input: a clear error, no output, the cache files unchanged
    sums=$(md5sum kc.npy vc.npy kq.npy s.npy)
    base=(decode --q q.npy --k-cache kc.npy --v-cache vc.npy --out e.npy)
    "$tool" table bad_table.npy 2 0 1 2 9; "$tool" offsets long.npy i32 6 7; "$tool" fill s3.npy 0.25 2 2 5
    expect_error "block_table" "$sdpa" decode --q q.npy --k-cache kp.npy --v-cache vp.npy --block-table bad_table.npy \
      --cache-seqlens full.npy --out e.npy
    expect_error "seqlens" "$sdpa" "${base[@]}" --cache-seqlens long.npy
    expect_error "--k and --v go together" "$sdpa" "${base[@]}" --cache-seqlens short.npy --k kn.npy
    expect_error "seqlens" "$sdpa" "${base[@]}" --cache-seqlens full.npy --k kn.npy --v vn.npy
    expect_error "--kv-quant: expected 'int8' or 'fp8_e4m3', got 'int4'" "$sdpa" decode --q q.npy --k-cache kq.npy \
      --v-cache vq.npy --kv-quant int4 --k-scale s.npy --v-scale s.npy --cache-seqlens full.npy --out e.npy
    expect_error "k_scale" "$sdpa" decode --q q.npy --k-cache kq.npy --v-cache vq.npy --kv-quant int8 \
      --k-scale s3.npy --v-scale s.npy --cache-seqlens full.npy --out e.npy
    expect_error "uint8" "$sdpa" "${base[@]}" --kv-quant int8 --k-scale s.npy --v-scale s.npy --cache-seqlens full.npy
    expect_error "--kv-quant" "$sdpa" "${base[@]}" --k-scale s.npy --cache-seqlens full.npy
    [ "$(md5sum kc.npy vc.npy kq.npy s.npy)" = "$sums" ] || fail "a refused call changed a cache file" ;;
  isa_environment)
    [ "$(SDPA_ISA=scalar "$sdpa" --version)" = "$("$sdpa" --version | sed 's/(isa: .*)/(isa: scalar)/')" ] || fail "SDPA_ISA=scalar"
    "$tool" make q.npy f32 1 40 8; "$tool" make k.npy f32 2 40 8; "$tool" make v.npy f32 3 40 8
    SDPA_ISA=scalar "$sdpa" attention --q q.npy --k k.npy --v v.npy --out s.npy
    "$sdpa" attention --q q.npy --k k.npy --v v.npy --out a.npy
    close s.npy a.npy 1e-5
    expect_error "SDPA_ISA" env SDPA_ISA=mmx "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy
    # SDPA_LOG=1: each call's plan on stderr, one line, naming the path it ran; the output unchanged.
    SDPA_LOG=1 SDPA_ISA=scalar "$sdpa" attention --q q.npy --k k.npy --v v.npy --out l.npy 2> log.txt
    grep -qE '^sdpa: forward float32: scalar, [0-9]+ threads?; items: ' log.txt || fail "SDPA_LOG=1: $(cat log.txt)"
    [ "$(wc -l < log.txt)" -eq 1 ] || fail "SDPA_LOG=1 printed $(wc -l < log.txt) lines for one call"
    close l.npy s.npy 0
    expect_error "SDPA_LOG" env SDPA_LOG=yes "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o.npy ;;
  check)
    "$sdpa" check --seq 256 --heads 2 | tee check.txt
    grep -q '^OK$' check.txt || fail "check did not pass"
    "$sdpa" check --seq 100 --kv-seq 150 --heads 4 --kv-heads 2 --dim 24 --dim-v 40 --causal bottom-right \
      --repeat 1 --format json | tee check.json
    /usr/bin/python3 - check.json <<'PY' || fail "check json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["pass"] is True and all(c["pass"] for c in d["checks"]), d
assert d["forward_runs"] >= 1 and d["backward_runs"] >= 1, d
PY
    ;;
  bench)
    "$sdpa" bench --help | grep -q -- '--suite' || fail "bench --help"
    # One small shape, forward and backward, with the BLAS baseline; PyTorch skipped here
    # (it is optional, and says so plainly when it is missing).
    "$sdpa" bench --seq 128 --heads 2 --repeat 2 --no-torch --format json | tee b.json
    /usr/bin/python3 - b.json <<'PY' || fail "bench json"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 1, rows
for key in ["seconds_median", "gflops", "peak_gflops", "fraction_of_peak", "speedup_vs_blas", "probe_gflops"]:
    assert isinstance(rows[0][key], float) and rows[0][key] > 0, key
assert rows[0]["runs"] >= 2 and rows[0]["torch_seconds_median"] is None, rows[0]
# BUSY is the probe below 85 % of the peak, whatever this host was doing
assert rows[0]["host_busy"] == (rows[0]["probe_gflops"] < 0.85 * rows[0]["peak_gflops"]), rows[0]
assert rows[0]["bf16_dot_peak_gflops"] is None, rows[0]  # an fp32 row
PY
    # A bf16 row carries the vdpbf16ps peak exactly where the CPU has the instruction.
    "$sdpa" bench --seq 64 --heads 1 --dtype bfloat16 --repeat 1 --no-torch --no-blas --format json | tee bf.json
    /usr/bin/python3 - bf.json <<'PY' || fail "bench bf16 json"
import json, os, sys
rows = json.load(open(sys.argv[1]))
flags = os.environ["SDPA_TEST_CPU_FLAGS"].split()
has = all(f in flags for f in ["avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_bf16"])
got = rows[0]["bf16_dot_peak_gflops"]
assert (isinstance(got, float) and got > 0) if has else got is None, (has, rows[0])
PY
    # With AMX off a bf16 row runs on vdpbf16ps exactly where the CPU has it (SDPA_BF16_DOT=0: widened).
    for dot in 1 0; do
      SDPA_AMX=0 SDPA_BF16_DOT=$dot "$sdpa" bench --seq 64 --heads 1 --dtype bfloat16 --repeat 1 --no-torch --no-blas \
        --format json > bfd.json
      /usr/bin/python3 - bfd.json $dot <<'PY' || fail "bench bf16 json, SDPA_BF16_DOT=$dot"
import json, os, sys
row = json.load(open(sys.argv[1]))[0]
flags = os.environ["SDPA_TEST_CPU_FLAGS"].split()
has = all(f in flags for f in ["avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_bf16"])
assert row["amx_bf16"] is False and row["bf16_dot"] is (has and sys.argv[2] == "1" and row["isa"] == "avx512"), row
PY
    done
    # Another value is an error that names the variable, where the avx512 path would read it.
    if [[ $cpu_flags == *" avx512f "* ]]; then
      if SDPA_AMX=0 SDPA_BF16_DOT=yes "$sdpa" --version > dot_err.txt 2>&1; then fail "SDPA_BF16_DOT=yes accepted"; fi
      grep -q "SDPA_BF16_DOT: expected 0, 1 or auto" dot_err.txt || fail "SDPA_BF16_DOT error: $(cat dot_err.txt)"
    fi
    "$sdpa" bench --seq 130 --kv-seq 70 --heads 4 --kv-heads 2 --backward --causal --repeat 1 --no-torch | tee b.txt
    grep -q 'causal bwd' b.txt || fail "bench table lacks the causal bwd row"
    grep -q 'FMA peak' b.txt || fail "bench table lacks the measured peak"
    grep -q ' probe$' b.txt || fail "bench table lacks the host probe column"
    SDPA_TORCH_PYTHON=/nonexistent/python "$sdpa" bench --seq 64 --heads 1 --repeat 1 --no-blas | tee t.txt
    grep -q 'PyTorch: not available' t.txt || fail "a missing PyTorch must be said plainly"
    "$sdpa" bench --seq 1 --kv-seq 5000 --heads 4 --kv-heads 1 --repeat 1 --no-torch | grep -q '^decode' \
      || fail "decoding row"
    # Decoding rows also time a plain read of the same K and V, alternating with the kernel.
    "$sdpa" bench --seq 1 --kv-seq 5000 --heads 4 --kv-heads 1 --repeat 1 --no-torch --no-blas --format json > d.json
    /usr/bin/python3 - d.json <<'PY' || fail "decoding json"
import json, sys
row = json.load(open(sys.argv[1]))[0]
for key in ["read_gbs", "fraction_of_read", "bandwidth_gbs", "fraction_of_bandwidth"]:
    assert row[key] > 0, key
assert row["decoding"] is True, row
PY
    # The packed-versus-padded row, in a 16-bit dtype, in the JSON with its own fields; the
    # FLOPs ratio is the hand count 3·300² / (300² + 129² + 64²) for lengths 300, 129, 64.
    "$sdpa" bench --varlen 300,129,64 --heads 2 --dim 32 --dtype float16 --repeat 2 --min-seconds 0 --no-torch \
      --no-blas --format json > v.json
    /usr/bin/python3 - v.json <<'PY' || fail "varlen json"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 1, rows
row = rows[0]
assert row["pass"] == "varlen fwd fp16" and row["dtype"] == "float16" and row["lengths"] == [300, 129, 64], row
for key in ["seconds_median", "padded_seconds_median", "gflops", "peak_gflops", "speedup_vs_padded"]:
    assert row[key] > 0, key
want = 3 * 300**2 / (300**2 + 129**2 + 64**2)
assert abs(row["flops_ratio_padded"] - want) < 1e-12 * want, (row["flops_ratio_padded"], want)
assert row["runs"] >= 2 and row["padded_runs"] >= 2, row
PY
    # --mask padding: the row names its mask and each item's padded keys (⌊b·Nk/(2B)⌋: 0, 16,
    # 32, 48 for B = 4, Nk = 128), and its FLOPs are the kept pairs' (hand count, top-left
    # causal, Nq = Nk = 128: (128 − p)²/2 per head = 8192, 6272, 4608, 3200; 2·(32 + 32)·B·H·mean
    # = 128·2·22272 = 5,701,632), the BLAS baseline skipped (it has no explicit mask).
    "$sdpa" bench --batch 4 --heads 2 --seq 128 --dim 32 --causal --mask padding --repeat 1 --min-seconds 0 \
      --no-torch --format json > m.json
    /usr/bin/python3 - m.json <<'PY' || fail "mask json"
import json, sys
row = json.load(open(sys.argv[1]))[0]
assert row["pass"] == "causal fwd padded" and row["mask"] == "padding", row
assert row["key_padding"] == [0, 16, 32, 48], row
got = row["gflops"] * row["seconds_median"] * 1e9
assert abs(got - 5701632) <= 1e-9 * 5701632, got
assert row["blas_seconds_median"] is None, row
PY
    "$sdpa" bench --seq 64 --heads 1 --repeat 1 --no-torch --no-blas --format json | grep -q '"mask":"none","key_padding":null' \
      || fail "a row without --mask must say so"
    "$sdpa" bench --batch 2 --seq 64 --heads 1 --mask padding --backward --repeat 1 --no-torch --no-blas \
      | grep -q '^bwd padded ' || fail "the padded backward row"
    expect_error "--mask" "$sdpa" bench --mask causal
    expect_error "--mask" "$sdpa" bench --mask padding --suite default
    expect_error "--varlen" "$sdpa" bench --varlen 5,4 --mask padding
    expect_error "--varlen" "$sdpa" bench --varlen 3,,4
    expect_error "--varlen" "$sdpa" bench --varlen 0,5
    expect_error "--varlen" "$sdpa" bench --varlen 5,4 --backward
    expect_error "--varlen" "$sdpa" bench --varlen 5,4 --suite default
    expect_error "--varlen" "$sdpa" bench --varlen ''
    expect_error "--varlen" "$sdpa" bench --varlen '' --suite default
    expect_error "--suite" "$sdpa" bench --suite nope
    expect_error "--mask" "$sdpa" bench --mask padding --suite kvcache
    # what a suite or --varlen has no use for is refused, not ignored
    expect_error "--batch" "$sdpa" bench --suite kvcache --batch 2
    expect_error "--dtype" "$sdpa" bench --suite kvcache --kv-seq 128 --dtype bfloat16
    expect_error "--causal" "$sdpa" bench --suite default --causal
    expect_error "--kv-seq" "$sdpa" bench --suite default --kv-seq 128
    expect_error "--seq" "$sdpa" bench --varlen 5,4 --seq 3
    expect_error "--layout" "$sdpa" bench --seq 64 --layout contiguous
    # the KV-cache rows at one short length: every layout and format runs and reports its fraction of a read
    "$sdpa" bench --suite kvcache --kv-seq 128 --repeat 1 --min-seconds 0 --format json > kv.json \
      || fail "bench --suite kvcache"
    /usr/bin/python3 - kv.json <<'PY' || fail "bench --suite kvcache json"
import json, sys
rows = json.load(open(sys.argv[1]))
formats = ("float32", "bfloat16", "int8", "fp8_e4m3")
got = {(r["format"], r["block_size"]) for r in rows if r["seq_q"] == 1}
assert got == {(f, b) for f in formats for b in (None, 16, 64)}, got
# the chunk rows: 64 queries, contiguous and in blocks of 16, each format, and the 8-bit ones with bf16 queries
chunks = [(r["format"], r["block_size"], r["queries"]) for r in rows if r["seq_q"] > 1]
want = [(f, b, "bfloat16" if f == "bfloat16" else "float32") for f in formats for b in (None, 16)]
want += [(f, b, "bfloat16") for f in ("int8", "fp8_e4m3") for b in (None, 16)]
assert sorted(chunks, key=str) == sorted(want, key=str), chunks
for r in rows:
    assert r["queries"] == ("bfloat16" if r["format"] == "bfloat16" else "float32") or r["seq_q"] > 1, r
    assert r["seq_k"] == 128 and r["fraction_of_read"] > 0 and r["heads_major"], r
    assert r["seq_q"] in (1, 64) and abs(r["tokens_per_s"] * r["seconds_median"] / r["seq_q"] - 1) < 1e-9, r
    # a paged row is timed against the same sequence in a contiguous cache too, alternated; a contiguous row is not
    paged = r["block_size"] is not None
    assert (r["time_over_contiguous"] is not None) == paged and (r["contiguous_seconds_median"] is not None) == paged, r
    if paged:
        assert abs(r["time_over_contiguous"] * r["contiguous_seconds_median"] / r["paged_seconds_median"] - 1) < 1e-9, r
    # the FLOPs flops.hpp counts: QK^T and PV for each of the 32 query heads over the keys the mask keeps (a
    # chunk's bottom-right causal triangle by its area), against the fp32 FMA peak measured in the run
    pairs = 128 if r["seq_q"] == 1 else 64 * 128 - 64 * 64 / 2
    assert r["flops"] == 4 * 32 * 128 * pairs, r
    assert abs(r["gflops"] * 1e9 * r["seconds_median"] / r["flops"] - 1) < 1e-9, r
    assert r["peak_gflops"] > 0 and abs(r["fraction_of_peak"] * r["peak_gflops"] / r["gflops"] - 1) < 1e-9, r
# the bytes a step reads: K and V in 4 or 2 bytes, or 1 byte and a 4-byte scale per row of 128
want = [2 * 128 * 8 * 128 * n for n in (4, 2)] + [2 * 128 * 8 * (128 + 4)] * 2
assert [r["bytes"] for r in rows if r["block_size"] is None and r["seq_q"] == 1] == want, rows
PY
    # a model's own heads and head dim: every row takes them (12 / 4 heads of 64), and the bytes follow
    expect_error "--dim-v" "$sdpa" bench --suite kvcache --kv-seq 128 --dim 64 --dim-v 32
    "$sdpa" bench --suite kvcache --kv-seq 96 --heads 12 --kv-heads 4 --dim 64 --repeat 1 --min-seconds 0 \
      --format json > kvs.json || fail "bench --suite kvcache --heads"
    /usr/bin/python3 - kvs.json <<'PY' || fail "bench --suite kvcache --heads json"
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 24, len(rows)  # 12 decoding rows, 8 chunks, 4 chunks with bf16 queries
for r in rows:
    assert (r["heads"], r["kv_heads"], r["dim"], r["seq_k"]) == (12, 4, 64, 96), r
want = [2 * 96 * 4 * 64 * n for n in (4, 2)] + [2 * 96 * 4 * (64 + 4)] * 2
assert [r["bytes"] for r in rows if r["block_size"] is None and r["seq_q"] == 1] == want, rows
PY
    # its batch rows over three sequences: one call, and one call per sequence, both timed; the bytes those
    # lengths hold (the last block of each read head by head, not the whole block)
    expect_error "--varlen" "$sdpa" bench --suite kvcache --varlen 16,70 --kv-seq 128
    expect_error "--varlen" "$sdpa" bench --suite kvcache --varlen 16,0
    "$sdpa" bench --suite kvcache --varlen 16,70,200 --repeat 1 --min-seconds 0 --format json > kvb.json \
      || fail "bench --suite kvcache --varlen"
    /usr/bin/python3 - kvb.json <<'PY' || fail "bench --suite kvcache --varlen json"
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["format"] for r in rows] == ["float32", "bfloat16", "int8", "fp8_e4m3"], rows
for r in rows:
    assert r["batch"] == 3 and r["seq_k"] == 286 and r["seq_k_each"] == [16, 70, 200] and r["block_size"] == 64, r
    assert r["fraction_of_read"] > 0 and r["one_at_a_time_seconds_median"] > 0 and r["speedup_vs_one_at_a_time"] > 0, r
    assert r["time_over_contiguous"] is None, r  # a batch: its sequences one call each instead
want = [2 * 286 * 8 * 128 * n for n in (4, 2)] + [2 * 286 * 8 * (128 + 4)] * 2
assert [r["bytes"] for r in rows] == want, rows
PY
    expect_error "--threads" "$sdpa" bench --threads -1
    expect_error "--kv-heads" "$sdpa" bench --heads 6 --kv-heads 4
    expect_error "--seq" "$sdpa" bench --seq 0
    expect_error "--repeat" "$sdpa" bench --repeat 0
    expect_error "--min-seconds" "$sdpa" check --min-seconds -1 ;;
  bench_flops)
    # `sdpa check` and `sdpa bench` count FLOPs with one function: GFLOP/s × seconds is the
    # same count in both, the value worked out by hand from docs/performance.md's rule.
    # Top-left causal, Nq = 100 < Nk = 150: Nq²/2 = 5000 visible pairs per head;
    # forward 2·(Dk + Dv)·B·Hq·5000 = 2·(24 + 40)·1·4·5000 = 2,560,000; backward 2.5×.
    shape="--seq 100 --kv-seq 150 --heads 4 --kv-heads 2 --dim 24 --dim-v 40 --repeat 1 --min-seconds 0 --format json"
    "$sdpa" check $shape --causal top-left > c.json
    "$sdpa" bench $shape --causal --no-torch --no-blas > f.json
    "$sdpa" bench $shape --causal --backward --no-torch --no-blas > g.json
    /usr/bin/python3 - c.json f.json g.json <<'PY' || fail "FLOP counts differ"
import json, sys
check, fwd, bwd = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))[0], json.load(open(sys.argv[3]))[0]
want = 2 * (24 + 40) * 1 * 4 * (100 * 100 / 2)
counts = {
    "check forward": check["forward_gflops"] * check["forward_seconds_median"] * 1e9,
    "check backward": check["backward_gflops"] * check["backward_seconds_median"] * 1e9 / 2.5,
    "bench forward": fwd["gflops"] * fwd["seconds_median"] * 1e9,
    "bench backward": bwd["gflops"] * bwd["seconds_median"] * 1e9 / 2.5,
}
for name, got in counts.items():
    assert abs(got - want) <= 1e-9 * want, (name, got, want)
assert check["forward_runs"] == 1 and fwd["runs"] == 1, (check, fwd)  # --min-seconds 0: exactly --repeat
print("ok: one FLOP count,", counts)
PY
    ;;
  bench_torch)
    # The PyTorch path without PyTorch: bench/torch_sdpa.py (the build tree's copy, found by
    # io::data_file) runs against a stand-in `torch` module whose attention sleeps, through
    # a Python wrapper whose path holds a space and both quotes. It must time by the rule
    # sent in the request: exactly --repeat runs with --min-seconds 0, --max-runs with a
    # minimum time it cannot reach.
    fake="$work/fake torch's \"site\""
    mkdir -p "$fake/torch/nn"
    cat > "$fake/torch/__init__.py" <<'PY'
"""A stand-in for the interface bench/torch_sdpa.py uses; attention sleeps 1 ms, its grad 2 ms."""
import time
__version__ = "0.0-stand-in"
float32 = "float32"
def set_num_threads(n): pass
class Generator:
    def manual_seed(self, seed): return self
bool = "bool"
class Tensor:
    # ops: what was done to a tensor made by ones(), so that a mask's construction can be read back
    def __init__(self, shape=(), ops=()): self.shape, self.ops = list(shape), list(ops)
    def clone(self): return Tensor()
    def requires_grad_(self, flag=True): return self
    def to(self, dtype): return self
    def tril(self): return Tensor(self.shape, self.ops + ["tril"])
    def __setitem__(self, index, value):  # keep[b, :, :, :pad] = value
        self.ops.append(["set", index[0], index[3].stop, value])
def randn(*shape, generator=None, dtype=None): return Tensor()
def ones(*shape, dtype=None): return Tensor(shape, ["ones " + str(dtype)])
class no_grad:
    def __enter__(self): return self
    def __exit__(self, *exc): return False
class autograd:
    @staticmethod
    def grad(out, inputs, grad_out):
        time.sleep(0.002)
        return inputs
PY
    : > "$fake/torch/nn/__init__.py"
    cat > "$fake/torch/nn/functional.py" <<'PY'
import time
import json, os
import torch
def scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=False, enable_gqa=False, dropout_p=0.0):
    if attn_mask is not None:  # what reached PyTorch, for the --mask check below
        with open(os.environ["FAKE_TORCH_LOG"], "a") as log:
            log.write(json.dumps({"shape": attn_mask.shape, "ops": attn_mask.ops, "is_causal": is_causal}) + "\n")
    time.sleep(0.001)
    return torch.Tensor()
PY
    wrapper_dir="$work/py it's \"here\""
    mkdir -p "$wrapper_dir"
    printf '#!/bin/sh\nPYTHONPATH="$FAKE_TORCH" exec /usr/bin/python3 "$@"\n' > "$wrapper_dir/python"
    chmod +x "$wrapper_dir/python"
    export FAKE_TORCH="$fake" SDPA_TORCH_PYTHON="$wrapper_dir/python"
    "$sdpa" bench --seq 32 --heads 1 --no-blas --repeat 3 --min-seconds 0 | tee t.txt
    grep -q 'PyTorch 0.0-stand-in' t.txt || fail "the stand-in torch did not answer"
    "$sdpa" bench --seq 32 --heads 1 --no-blas --repeat 3 --min-seconds 0 --format json > exact.json
    "$sdpa" bench --seq 32 --heads 1 --no-blas --repeat 2 --min-seconds 1000 --max-runs 4 --backward --format json > capped.json
    /usr/bin/python3 - exact.json capped.json <<'PY' || fail "PyTorch not timed by the rule sent"
import json, sys
exact, capped = json.load(open(sys.argv[1]))[0], json.load(open(sys.argv[2]))[0]
assert exact["runs"] == 3 and exact["torch_runs"] == 3, exact
assert exact["torch_seconds_median"] >= 0.001 and exact["speedup_vs_torch"] > 0, exact
assert capped["runs"] == 4 and capped["torch_runs"] == 4, capped
assert capped["torch_seconds_median"] >= 0.002, capped  # the grad alone, the forward outside the timer
PY
    # --mask padding reaches PyTorch as the same keep mask: ones (B, 1, Nq, Nk), tril for
    # --causal, each item's padded keys set False, with is_causal False.
    export FAKE_TORCH_LOG="$work/torch_masks.log"
    "$sdpa" bench --batch 4 --seq 32 --heads 1 --no-blas --repeat 1 --min-seconds 0 --causal --mask padding \
      --format json > masked.json
    /usr/bin/python3 - "$FAKE_TORCH_LOG" masked.json <<'PY' || fail "the padding mask did not reach PyTorch"
import json, sys
calls = [json.loads(line) for line in open(sys.argv[1])]
assert calls, "no attn_mask reached scaled_dot_product_attention"
want = {"shape": [4, 1, 32, 32], "is_causal": False,
        "ops": ["ones bool", "tril"] + [["set", b, p, False] for b, p in enumerate([0, 4, 8, 12])]}
assert all(c == want for c in calls), (calls[0], want)
row = json.load(open(sys.argv[2]))[0]
assert row["mask"] == "padding" and row["torch_runs"] == 1, row
PY
    # SDPA_DATA_DIR, a directory whose name holds a space and both quotes, comes first:
    # here a script that answers a fixed reply.
    data="$work/data it's \"here\""
    mkdir -p "$data"
    printf 'import json, sys\njson.load(sys.stdin)\nprint(json.dumps({"torch": "fixed", "rows": [{"median_seconds": 0.5, "runs": 7}]}))\n' \
      > "$data/torch_sdpa.py"
    SDPA_DATA_DIR="$data" "$sdpa" bench --seq 32 --heads 1 --no-blas --repeat 1 --format json > fixed.json
    /usr/bin/python3 -c "import json,sys; r=json.load(open('fixed.json'))[0]; assert r['torch_seconds_median'] == 0.5 and r['torch_runs'] == 7, r" \
      || fail "SDPA_DATA_DIR's script was not the one run"
    # A reply that is not JSON is said plainly, with the child's exit status.
    printf 'import sys\nprint("Traceback: boom")\nsys.exit(4)\n' > "$data/torch_sdpa.py"
    SDPA_DATA_DIR="$data" "$sdpa" bench --seq 32 --heads 1 --no-blas --repeat 1 | tee bad.txt
    grep -q 'PyTorch: not available.*exit status 4' bad.txt || fail "a failing script must be said plainly" ;;
  lab_tables)
    "$sdpa" lab --help | grep -q variance || fail "lab --help"
    "$sdpa" lab softmax | grep -q '0.971416' || fail "softmax table"
    [ "$("$sdpa" lab softmax | grep -c fails)" -eq 0 ] || fail "a softmax value fails"
    "$sdpa" lab softmax | tail -4 | grep -q '^verdict: holds$' || fail "the table must close with its verdict"
    "$sdpa" lab variance --dist gaussian rademacher --max-dk 16 --samples 500 --seed 7 --format json > a.json
    "$sdpa" lab variance --dist gaussian rademacher --max-dk 16 --samples 500 --seed 7 --format json > b.json
    cmp -s a.json b.json || fail "same --seed, different output"
    "$sdpa" lab variance --dist gaussian --max-dk 4 --samples 500 --seed 8 --format json > c.json
    ! cmp -s a.json c.json || fail "--seed ignored"
    head -c 1 a.json | grep -q '^{' || fail "json must be one object per table"
    grep -q '"d_k": 16' a.json && grep -q '"var_scaled"' a.json || fail "json rows lack d_k/var/var_scaled"
    # The claim-level verdict, decided in C++, travels with the numbers.
    grep -q '^ "verdict": "holds",$' a.json || fail "variance json lacks its verdict"
    grep -q '^ "outcome": "holds",$' a.json || fail "variance json lacks its outcome"
    for key in expected measured tolerance; do
      grep -Eq "^ \"$key\": \".+\",\$" a.json || fail "variance json lacks a non-empty $key"
    done
    grep -q '^ "tolerance": "every row: |measured − expected| ≤ 4 standard errors' a.json || fail "tolerance text"
    "$sdpa" lab gradients --samples 100 --format json > g.json
    grep -q '^ "verdict": "holds only for the gradient w.r.t. the logits (and q·k)",$' g.json \
      || fail "gradients verdict: $(grep '"verdict"' g.json)"
    grep -q '^ "outcome": "holds only",$' g.json || fail "gradients outcome"
    "$sdpa" lab puzzle --samples 300 --format csv | head -1 | grep -q '^n,trials,mean_var' || fail "csv header"
    echo "ok: tables, formats, determinism" ;;
  lab_errors)
    expect_error "--samples: must be >= 0" "$sdpa" lab variance --samples -5
    expect_error "--threads: must be >= 0" "$sdpa" lab softmax --threads -1
    expect_error "--samples" "$sdpa" lab variance --samples 3
    expect_error "--max-dk" "$sdpa" lab variance --max-dk 0
    expect_error "--dist" "$sdpa" lab variance --dist cauchy
    expect_error "--format" "$sdpa" lab softmax --format xml
    rc=0; "$sdpa" lab nosuch > /dev/null 2>&1 || rc=$?; [ "$rc" -eq 2 ] || fail "unknown experiment should exit 2, got $rc"
    mkdir ro && chmod 555 ro
    if [ "$(id -u)" -ne 0 ]; then  # root ignores directory permissions
      expect_error "ro" "$sdpa" lab report --out ro/report
    fi
    expect_error "report" "$sdpa" lab report --out /proc/sdpa_report_here
    expect_error "sdpa_lab_report.py" env SDPA_DATA_DIR=/nonexistent "$sdpa" lab report --out rep1
    [ ! -e rep1 ] || fail "a failed report left its directory behind"
    mkdir bad && printf 'import sys\nsys.exit(3)\n' > bad/sdpa_lab_report.py && touch bad/lab.md
    mkdir rep2
    expect_error "--samples: must be >= 0" "$sdpa" lab report --samples -1 --out rep3
    [ ! -e rep3 ] || fail "a refused report left its directory behind"
    # The script fails after every experiment ran: a draft's few samples reach it in seconds.
    expect_error "exit status 3" env SDPA_DATA_DIR="$PWD/bad" "$sdpa" lab report --samples 20 --out rep2
    [ -z "$(ls -A rep2)" ] || fail "a failed report left files: $(ls -A rep2)" ;;
  lab_report)
    "$sdpa" lab report --out rep > log.txt
    grep -q 'wrote rep/index.html' log.txt || fail "report: $(cat log.txt)"
    grep -q '<h2>9. Projections' rep/index.html || fail "report lacks sections"
    grep -q '<h2>10. Scaling and 16-bit rounding' rep/index.html || fail "report lacks the precision section"
    grep -q '<h2>11. Attention sinks' rep/index.html || fail "report lacks the sinks section"
    [ "$(grep -o 'data:image/png;base64' rep/index.html | wc -l)" -ge 10 ] || fail "report lacks embedded plots"
    grep -q '"experiments"' rep/lab.json || fail "lab.json"
    # One verdict per experiment in lab.json, and the page shows each (it decides none).
    [ "$(grep -c '^   "verdict": ' rep/lab.json)" -eq "$(grep -c '^   "heading": ' rep/lab.json)" ] \
      || fail "lab.json: an experiment without a verdict"
    [ "$(grep -o 'class="verdict [a-z]*">' rep/index.html | wc -l)" -eq $((2 * $(grep -c '^   "heading": ' rep/lab.json))) ] \
      || fail "the page must show each verdict twice (summary and section)" ;;
  train)
    tiny="--d-model 16 --heads 2 --layers 1 --seq 8 --batch 4 --warmup 3 --eval-size 8 --threads 1"
    "$sdpa" train --help | grep -q -- '--policy' || fail "train --help"
    "$sdpa" train $tiny --steps 12 --log-every 4 --policy adaptive > log.jsonl 2> err.txt
    [ ! -s err.txt ] || fail "stderr should be empty when it is not a terminal: $(cat err.txt)"
    [ "$(wc -l < log.jsonl)" -eq 5 ] || fail "want steps 1, 4, 8, 12 and a summary: $(wc -l < log.jsonl) lines"
    /usr/bin/python3 - log.jsonl <<'PY' || fail "JSON lines"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows[:-1]] == [1, 4, 8, 12], rows
for r in rows[:-1]:
    for k in ["loss", "accuracy", "eval_accuracy", "beta", "sigma_x", "sigma_wq", "sigma_wk", "score_std", "entropy",
              "max_weight", "grad_norm_q", "grad_norm_k", "grad_norm_v", "grad_norm_o", "tokens_per_s"]:
        assert k in r, k
    assert len(r["beta"]) == 1 and len(r["beta"][0]) == 2, r["beta"]
assert rows[-1]["final"] is True and rows[-1]["tokens_per_s"] > 0
PY
    last() { /usr/bin/python3 -c "import json, sys; print(json.loads(sys.stdin.readlines()[-1])['$1'])"; }
    for p in inv_sqrt_dk none inv_dk fixed:0.5 learned qk_norm log_n adaptive_scores; do
      [ "$("$sdpa" train $tiny --steps 3 --policy $p | last diverged)" = False ] || fail "policy $p"
    done
    for t in copy reverse sort lengthgen; do
      [ "$("$sdpa" train $tiny --steps 3 --task $t | last task)" = "$t" ] || fail "task $t"
    done ;;
  train_resume)
    tiny="--d-model 16 --heads 2 --layers 1 --seq 8 --batch 4 --steps 20 --warmup 3 --eval-size 8 --log-every 1"
    strip() {  # the logged steps less their timing fields
      /usr/bin/python3 -c "import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if not r.get('final'):
        print(json.dumps({k: v for k, v in r.items() if k not in ('tokens_per_s', 'elapsed_s')}))" "$1"
    }
    "$sdpa" train $tiny --policy learned --threads 1 > full.jsonl
    "$sdpa" train $tiny --policy learned --threads 1 --stop-at 9 --save ck.bin > a.jsonl
    "$sdpa" train $tiny --policy learned --threads 2 --resume ck.bin > b.jsonl
    [ "$(strip full.jsonl)" = "$(strip a.jsonl; strip b.jsonl)" ] || {
      diff <(strip full.jsonl) <(strip a.jsonl; strip b.jsonl) | head -5; fail "resumed run differs"; }
    echo "ok: steps 10..20 after --resume are bit-for-bit those of the uninterrupted run" ;;
  train_errors)
    tiny="--d-model 16 --layers 1 --seq 8 --batch 4 --steps 6 --warmup 3 --eval-size 8"
    "$sdpa" train $tiny --stop-at 3 --save ck.bin > /dev/null
    expect_error "unknown policy 'softest'" "$sdpa" train $tiny --policy softest
    expect_error "unknown task" "$sdpa" train $tiny --task nope
    # The library names its parameters as Python does (d_model); the command line says its flags.
    expect_error "sdpa: error: --d-model: 16 is not a multiple of heads (3)" "$sdpa" train $tiny --heads 3
    expect_error "sdpa: error: --lr: must be a finite value > 0" "$sdpa" train $tiny --lr -1
    expect_error "policy=inv_sqrt_dk" "$sdpa" train $tiny --policy adaptive --resume ck.bin
    expect_error "seed=1" "$sdpa" train $tiny --seed 2 --resume ck.bin
    expect_error "cannot open" "$sdpa" train $tiny --resume missing.bin
    head -c 100 ck.bin > trunc.bin
    expect_error "truncated" "$sdpa" train $tiny --resume trunc.bin
    /usr/bin/python3 -c "import sys; b=bytearray(open('ck.bin','rb').read()); b[200]^=1; open('bad.bin','wb').write(b)"
    expect_error "checksum" "$sdpa" train $tiny --resume bad.bin
    /usr/bin/python3 -c "import sys; b=bytearray(open('ck.bin','rb').read()); b[8]=7; open('ver.bin','wb').write(b)"
    expect_error "version 7" "$sdpa" train $tiny --resume ver.bin
    echo "not a checkpoint" > text.bin
    expect_error "magic" "$sdpa" train $tiny --resume text.bin
    expect_error "cannot write into directory" "$sdpa" train $tiny --save no/such/dir/ck.bin ;;
  train_text)
    # a small UTF-8 corpus (a repeated pangram with an accented word), 4500 characters
    for i in $(seq 100); do printf 'the quick brown fox jumps over the lazy dog, café. \n'; done > fox.txt
    tiny="--task text --d-model 16 --heads 2 --layers 1 --seq 16 --batch 8 --warmup 3 --eval-size 8 --threads 1"
    "$sdpa" train $tiny --corpus fox.txt --steps 20 --log-every 10 --save ck.bin > log.jsonl
    /usr/bin/python3 - log.jsonl <<'PY' || fail "text JSON lines"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rows[:-1]] == [1, 10, 20], rows
for r in rows:
    assert abs(r["eval_bits_per_char"] - r["eval_loss"] / math.log(2)) < 1e-9 * r["eval_loss"], r
assert rows[-1]["task"] == "text" and rows[-1]["final"] is True
PY
    "$sdpa" sample --resume ck.bin --prompt "the é" --tokens 40 --seed 3 > s1.txt
    "$sdpa" sample --resume ck.bin --prompt "the é" --tokens 40 --seed 3 > s2.txt
    cmp -s s1.txt s2.txt || fail "the same seed should sample the same text"
    /usr/bin/python3 -c "import sys; t=open('s1.txt', encoding='utf-8').read(); assert t.startswith('the é') and len(t) == 46, repr(t)" \
      || fail "sample: $(cat s1.txt)"
    "$sdpa" sample --resume ck.bin --prompt "fox" --tokens 10 --temperature 0 > /dev/null || fail "greedy sample"
    # the model's keys in 8 bits, per position and per channel: one row per head, format and scheme
    "$sdpa" key-scales --resume ck.bin --corpus fox.txt --contexts 4 --groups 4 8 --json ks.json > ks.txt \
      || fail "key-scales"
    grep -q "heads it wins" ks.txt || fail "key-scales table: $(cat ks.txt)"
    /usr/bin/python3 - ks.json <<'PY' || fail "key-scales JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert (d["layers"], d["heads"], d["contexts"], d["seq"]) == (1, 2, 4, 16), d
assert len(d["head_stats"]) == 2 and len(d["rows"]) == 2 * 2 * 3, len(d["rows"])
assert {r["scales"] for r in d["rows"]} == {"position", "channel/4", "channel/8"}
assert all(r["out_error"] > 0 for r in d["rows"])
PY
    { cat fox.txt; echo "a cat."; } > other.txt
    expect_error "corpus: " "$sdpa" key-scales --resume ck.bin --corpus other.txt
    expect_error "--contexts: must be >= 1" "$sdpa" key-scales --resume ck.bin --corpus fox.txt --contexts 0
    # a text sweep's page shows one sample per policy; the default prompt "ROMEO:" is not in this corpus
    sw="--task text --corpus fox.txt --d-model 16 --layers 1 --seq 16 --batch 4 --steps 6 --warmup 2 --eval-size 8 --d-head 8 --seeds 1 --policies inv_sqrt_dk qk_norm"
    expect_error "--sample-prompt: the character 'R'" "$sdpa" sweep $sw --out tsw
    [ ! -e tsw ] || fail "a refused text sweep left its directory"
    "$sdpa" sweep $sw --sample-prompt "the " --out tsw > /dev/null 2>&1 || fail "text sweep"
    [ "$(grep -o '<h3>[a-z_]*</h3><p>[^<]*</p><pre>the ' tsw/index.html | wc -l)" -eq 2 ] || fail "the page lacks a sample per policy"
    # bad corpora: a clear error naming --corpus, exit 1, nothing written (not even --save)
    : > empty.txt
    printf 'caf\xe9 au lait\n' > latin1.txt
    head -c 300 fox.txt > short.txt
    expect_error "--corpus: cannot read 'missing.txt'" "$sdpa" train $tiny --corpus missing.txt --save ck2.bin
    expect_error "is empty" "$sdpa" train $tiny --corpus empty.txt --save ck2.bin
    expect_error "not UTF-8 at byte 3" "$sdpa" train $tiny --corpus latin1.txt --save ck2.bin
    expect_error "too short" "$sdpa" train $tiny --corpus short.txt --save ck2.bin
    expect_error "scripts/setup.sh" env SDPA_CACHE_DIR="$PWD/nocache" "$sdpa" train --task text --save ck2.bin
    expect_error "not in the corpus's alphabet" "$sdpa" sample --resume ck.bin --prompt "ROMEO"
    "$sdpa" train --d-model 16 --layers 1 --seq 8 --batch 4 --steps 2 --eval-size 4 --save mq.bin > /dev/null
    expect_error "not a text-task checkpoint" "$sdpa" sample --resume mq.bin
    expect_error "not a text-task checkpoint" "$sdpa" key-scales --resume mq.bin ;;
  sweep_resume)
    # A sweep killed mid-way (SIGKILL: no chance to clean up) and run again trains only the
    # runs it had not stored, and writes the sweep.json of a sweep never interrupted.
    grid="--d-model 16 --layers 1 --seq 8 --batch 4 --steps 300 --warmup 2 --eval-size 8 --log-every 50 --jobs 1 --threads 1
          --policies inv_sqrt_dk inv_dk adaptive --seeds 1 2 --d-head 8 --widths 8 16"
    "$sdpa" sweep $grid --out whole > /dev/null 2> whole.err
    "$sdpa" sweep $grid --out cut > /dev/null 2> cut.err &
    pid=$!
    for _ in $(seq 600); do [ "$(ls cut/runs 2> /dev/null | grep -c '\.json$')" -ge 3 ] && break; sleep 0.05; done
    kill -9 $pid 2> /dev/null || fail "the sweep finished before it could be interrupted"
    wait $pid 2> /dev/null || true
    [ ! -e cut/sweep.json ] || fail "an interrupted sweep wrote sweep.json"
    stored=$(ls cut/runs | grep -c '\.json$')
    [ "$stored" -ge 3 ] && [ "$stored" -lt 12 ] || fail "stored $stored of 12 runs"
    "$sdpa" sweep $grid --out cut > table.txt 2> resume.err
    grep -q "($stored stored before)" resume.err || { cat resume.err; fail "the re-run should load $stored stored runs"; }
    [ "$(grep -c 'finished ' resume.err)" -eq $((12 - stored)) ] || { cat resume.err; fail "the re-run should train $((12 - stored)) runs"; }
    grep -q 'ETA' resume.err || fail "progress lacks an ETA"
    /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../sweep_json_same.py" whole/sweep.json cut/sweep.json \
      --min-from-store 3 || fail "the resumed sweep differs"
    echo "ok: killed after $stored of 12 runs; the re-run trained $((12 - stored)) and matches the uninterrupted sweep"
    # --budget: a limit no run fits is refused before anything is written; a generous one cuts nothing
    rc=0; "$sdpa" sweep $grid --budget 0.000001 --out b1 2> b1.err || rc=$?
    [ "$rc" -eq 1 ] && grep -q '^sdpa: error: --budget: 1e-06 s is too little' b1.err || { cat b1.err; fail "--budget 1e-6"; }
    [ ! -e b1 ] || fail "a refused budget left its directory"
    "$sdpa" sweep --d-model 16 --layers 1 --seq 8 --batch 4 --steps 4 --warmup 2 --eval-size 8 --policies none --seeds 1 2 \
      --d-head 8 --budget 100000 --out b2 > b2.txt 2> b2.err || fail "a generous budget"
    grep -q "estimated" b2.err && ! grep -q "cut " b2.err || { cat b2.err; fail "--budget 100000 should cut nothing"; } ;;
  sweep)
    "$sdpa" sweep --d-model 16 --layers 1 --seq 8 --batch 4 --steps 8 --warmup 2 --eval-size 8 --log-every 4 \
      --policies inv_sqrt_dk adaptive --seeds 1 2 --d-head 8 --out sw > table.txt 2> err.txt
    grep -q 'adaptive' table.txt || fail "sweep table: $(cat table.txt)"
    grep -q 'ensemble rule' table.txt || fail "sweep table lacks the ensemble rule: $(cat table.txt)"
    grep -q 'wrote sw/index.html' table.txt || fail "sweep: $(cat table.txt)"
    [ "$(grep -o 'data:image/png;base64' sw/index.html | wc -l)" -ge 8 ] || fail "sweep report lacks plots"
    /usr/bin/python3 -c "import json; d=json.load(open('sw/sweep.json')); assert len(d['runs']) == 4 and len(d['ensemble']) == 2" \
      || fail "sweep.json"
    [ -z "$(ls -A sw | grep -v -e '^index.html$' -e '^sweep.json$' -e '^runs$')" ] || fail "sweep left files: $(ls -A sw)"
    [ "$(ls sw/runs | grep -c '\.json$')" -eq 4 ] || fail "sweep should store its 4 runs: $(ls sw/runs)"
    # A learning-rate sweep gets its plot (loss against lr, a line per policy) and a best-lr row per
    # policy and configuration; a sweep at one lr has no such section.
    ! grep -q '<h2>Learning rate</h2>' sw/index.html || fail "a one-lr sweep's page shows a learning-rate section"
    "$sdpa" sweep --d-model 16 --layers 1 --seq 8 --batch 4 --steps 4 --warmup 2 --eval-size 8 --log-every 4 \
      --policies inv_sqrt_dk qk_norm --seeds 1 2 --d-head 8 --lrs 1e-3 3e-3 --no-ensemble --out swlr > /dev/null 2>&1 \
      || fail "lr sweep"
    grep -q '<h2>Learning rate</h2>.*alt="held-out loss against the learning rate" src="data:image/png;base64' \
      swlr/index.html || fail "the lr sweep's page lacks the plot against lr"
    [ "$(grep -o '<tr><td>d_model 16, d_k 8, xavier</td><td>[a-z_]*</td><td>0.00[13]</td>' swlr/index.html | wc -l)" \
      -eq 2 ] || fail "the lr sweep's page lacks a best lr per policy"
    # No shell between sdpa and the plotting script: paths with spaces, quotes and '$' pass whole.
    odd="it's a \"sweep\" \$HOME dir"
    mkdir "$odd data" && cp "$(dirname "$sdpa")/../share/sdpa/sdpa_train_report.py" "$odd data/"
    SDPA_DATA_DIR="$PWD/$odd data" "$sdpa" sweep --d-model 16 --layers 1 --seq 8 --batch 4 --steps 4 --warmup 2 \
      --eval-size 8 --policies none --seeds 1 --d-head 8 --out "$odd" > odd.txt 2> /dev/null || fail "sweep into '$odd'"
    [ -s "$odd/index.html" ] && [ -s "$odd/sweep.json" ] || fail "sweep into '$odd' wrote: $(ls -A "$odd")"
    # --d-head 0 at width 16 is the head size 16 named too: one run, and the first line says so
    "$sdpa" sweep --d-model 16 --layers 1 --seq 8 --batch 4 --steps 2 --warmup 1 --eval-size 8 --policies none --seeds 1 \
      --d-head 16 0 --no-store --out dh0 > /dev/null 2> dh0.err || fail "sweep --d-head 16 0"
    head -1 dh0.err | grep -q '^sdpa sweep: 1 runs' || fail "first line: $(head -1 dh0.err)"
    expect_error "does not divide" "$sdpa" sweep --d-head 5 --out sw2
    [ ! -e sw2 ] || fail "a failed sweep left its directory" ;;
  *) fail "unknown case $case" ;;
esac
echo "PASS $case"
