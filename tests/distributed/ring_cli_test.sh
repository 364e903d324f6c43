#!/usr/bin/env bash
# ring_cli_test.sh MPIEXEC SDPA NPY_TOOL CASE — `sdpa attention --ring` and `sdpa bench --ring`
# under mpirun, end to end. Every mpirun runs under `timeout`: a hang fails the test.
set -euo pipefail
mpiexec=$1 sdpa=$2 tool=$3 case=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
export OMP_NUM_THREADS=1
mpi() { local np=$1; shift; timeout 60 "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$@"; }

fail() { echo "FAIL: $*"; exit 1; }
# close A B TOL: max |a - b| <= TOL. The ring's derived bound is tested in dist.ring.np*;
# here 1e-3 separates a correct ring (errors ~1e-6 on these sizes) from a misplaced shard
# (errors ~1).
close() {
  local d; d=$("$tool" maxdiff "$1" "$2")
  awk -v d="$d" -v t="$3" 'BEGIN { exit !(d <= t) }' || fail "$1 vs $2 differ by $d (> $3)"
  echo "ok: $1 ~ $2 (max diff $d)"
}
# expect_fault FRAGMENT NP CMD...: non-zero exit within the timeout (124 = hung), FRAGMENT
# on stderr, and no output file o.npy.
expect_fault() {
  local fragment=$1 np=$2; shift 2
  local rc=0
  rm -f o.npy
  mpi "$np" "$@" > out.txt 2> err.txt || rc=$?
  [ "$rc" -ne 0 ] || fail "expected a non-zero exit: $*"
  [ "$rc" -ne 124 ] || fail "hung (killed by timeout): $*"
  grep -qF -- "$fragment" err.txt || { cat err.txt; fail "stderr should mention '$fragment': $*"; }
  [ ! -e o.npy ] || fail "o.npy left behind: $*"
  ls | grep -q '\.tmp' && fail "temporary files left behind: $(ls)"
  echo "ok: exit $rc mentioning '$fragment'"
}

"$tool" make q.npy f32 1 2 4 37 8; "$tool" make k.npy f32 2 2 2 41 8; "$tool" make v.npy f32 3 2 2 41 8
"$tool" make g.npy f32 4 2 4 37 8; "$tool" make q2.npy f32 5 2 4 37 8
grads=(--grad-out g.npy --dq dq.npy --dk dk.npy --dv dv.npy)

case $case in
  equal)  # every P, both layouts, every causal alignment: the same files as one process
    i=0
    for np in 2 3 4; do
      for layout in contiguous zigzag; do
        for causal in none top-left bottom-right; do
          extra=()
          [ $((i % 3)) -eq 1 ] && extra=(--softcap 4)
          i=$((i + 1))
          "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o1.npy --lse l1.npy --causal $causal "${extra[@]}" \
            --grad-out g.npy --dq dq1.npy --dk dk1.npy --dv dv1.npy
          mpi $np "$sdpa" attention --ring --layout $layout --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy \
            --causal $causal "${extra[@]}" "${grads[@]}"
          echo "P=$np $layout causal=$causal ${extra[*]}"
          for t in o l dq dk dv; do close $t.npy ${t}1.npy 1e-3; done
          [ "$("$tool" info o.npy)" = "float32 [2, 4, 37, 8]" ] || fail "o.npy shape: $("$tool" info o.npy)"
        done
      done
    done
    # Windows and explicit masks (every rank reads the whole mask; each block its part), and
    # dropout (each block draws the sequence's mask at its own positions).
    "$tool" make add.npy f32 10 4 37 41; "$tool" make keep.npy bool 11 37 41
    for spec in "3 zigzag --mask add.npy --causal bottom-right" "2 contiguous --mask keep.npy" \
                "4 zigzag --window 5,3 --causal top-left" "3 contiguous --window 4,-1" \
                "2 zigzag --dropout 0.3 --seed 7 --offset 2 --causal bottom-right" \
                "3 contiguous --dropout 0.2 --seed 11 --causal top-left"; do
      read -r np layout opts <<< "$spec"
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o1.npy --lse l1.npy $opts \
        --grad-out g.npy --dq dq1.npy --dk dk1.npy --dv dv1.npy
      mpi "$np" "$sdpa" attention --ring --layout "$layout" --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy \
        $opts "${grads[@]}"
      echo "P=$np $layout $opts"
      for t in o l dq dk dv; do close $t.npy ${t}1.npy 1e-3; done
    done
    # Attention sinks (each row's sink merged once, after every block; ∂L/∂sinks summed over
    # the ranks) against one process, with a window and under a causal mask.
    "$tool" make s.npy f32 13 4
    for spec in "3 zigzag --causal bottom-right" "2 contiguous --window 6,2"; do
      read -r np layout opts <<< "$spec"
      "$sdpa" attention --q q.npy --k k.npy --v v.npy --out o1.npy --lse l1.npy $opts --sinks s.npy \
        --grad-out g.npy --dq dq1.npy --dk dk1.npy --dv dv1.npy --dsinks ds1.npy
      mpi "$np" "$sdpa" attention --ring --layout "$layout" --q q.npy --k k.npy --v v.npy --out o.npy --lse l.npy \
        $opts --sinks s.npy "${grads[@]}" --dsinks ds.npy
      echo "P=$np $layout $opts --sinks"
      for t in o l dq dk dv ds; do close $t.npy ${t}1.npy 1e-3; done
      [ "$("$tool" info ds.npy)" = "float32 [4]" ] || fail "ds.npy shape: $("$tool" info ds.npy)"
    done ;;
  faults)
    # Options that differ between ranks.
    expect_fault "ranks disagree on options" 3 bash -c \
      'c=none; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && c=top-left; exec "$0" attention --ring --q q.npy --k k.npy --v v.npy --out o.npy --causal $c' "$sdpa"
    # Dropout seeds that differ between ranks (each would draw another mask).
    expect_fault "ranks disagree on options" 2 bash -c \
      's=7; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && s=8; exec "$0" attention --ring --q q.npy --k k.npy --v v.npy --out o.npy --dropout 0.2 --seed $s' "$sdpa"
    # Sinks that differ between ranks; sinks of the wrong length (every rank alike).
    "$tool" make s.npy f32 13 4; "$tool" make s2.npy f32 14 4; "$tool" make s3.npy f32 13 3
    expect_fault "ranks disagree on options" 2 bash -c \
      'f=s.npy; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && f=s2.npy; exec "$0" attention --ring --q q.npy --k k.npy --v v.npy --sinks $f --out o.npy' "$sdpa"
    expect_fault "sinks: shape [3] should be [Hq] = [4]" 2 "$sdpa" attention --ring --q q.npy --k k.npy --v v.npy \
      --sinks s3.npy --out o.npy
    # A rank that reads a different mask.
    "$tool" make add.npy f32 10 4 37 41; "$tool" make add2.npy f32 12 4 37 41
    expect_fault "ranks disagree on --mask" 2 bash -c \
      'f=add.npy; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && f=add2.npy; exec "$0" attention --ring --q q.npy --k k.npy --v v.npy --mask $f --out o.npy' "$sdpa"
    expect_fault "ranks disagree on --q" 2 bash -c \
      'f=q.npy; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && f=q2.npy; exec "$0" attention --ring --q $f --k k.npy --v v.npy --out o.npy' "$sdpa"
    # A rank whose file is missing: its own message, then the whole job ends.
    expect_fault "missing.npy" 3 bash -c \
      'f=q.npy; [ "$OMPI_COMM_WORLD_RANK" = 2 ] && f=missing.npy; exec "$0" attention --ring --q $f --k k.npy --v v.npy --out o.npy' "$sdpa"
    # A rank that dies (SIGKILL) while the others wait on it in MPI. Rank 1 reads its --q from
    # a FIFO; its killer opens the FIFO's write end, which returns only once rank 1 (past
    # MPI_Init, in the file read) has opened it, then kills it while its read waits for data.
    # No timing: a timed kill races with a rank that finishes first (o.npy written) or with
    # MPI_Init (under ASan the job then ends as "returned a non-zero exit code").
    "$tool" make bq.npy f32 6 1 4 3000 64; "$tool" make bk.npy f32 7 1 4 3000 64; "$tool" make bv.npy f32 8 1 4 3000 64
    rm -f never.fifo && mkfifo never.fifo
    expect_fault "exited on signal 9" 3 bash -c \
      'f=bq.npy; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && { f=never.fifo; ( exec 3> never.fifo; kill -9 $$ ) & }; exec "$0" attention --ring --q $f --k bk.npy --v bv.npy --out o.npy' "$sdpa"
    # Too short a sequence for the layout; a bad layout name.
    "$tool" make sq.npy f32 9 1 1 5 8
    expect_fault "cannot be cut" 3 "$sdpa" attention --ring --q sq.npy --k sq.npy --v sq.npy --out o.npy
    expect_fault "--layout" 2 "$sdpa" attention --ring --layout striped --q q.npy --k k.npy --v v.npy --out o.npy ;;
  bench)
    mpi 2 "$sdpa" bench --ring --seq 512 --heads 2 --dim 32 --causal --repeat 2 --no-torch --no-blas > b.txt
    cat b.txt
    grep -q "hidden" b.txt || fail "no table"
    [ "$(grep -cE '^ +[01] ' b.txt)" -eq 2 ] || fail "expected one row per rank"
    # With dropout (the ring checks every rank's seed): the header says p, one row per rank.
    mpi 2 "$sdpa" bench --ring --seq 256 --heads 2 --dim 32 --dropout 0.25 --backward --repeat 2 > bd.txt
    cat bd.txt
    grep -q "dropout p=0.25" bd.txt || fail "the header should name the dropout"
    [ "$(grep -cE '^ +[01] ' bd.txt)" -eq 2 ] || fail "expected one row per rank with dropout"
    # What the ring's table would ignore is refused (before MPI starts: no mpirun needed).
    for bad in "--dtype bfloat16" "--format json" "--varlen 4,5" "--suite default"; do
      # shellcheck disable=SC2086 # one option and its value per word
      if "$sdpa" bench --ring --seq 64 $bad > /dev/null 2> bad.err; then fail "--ring $bad should fail"; fi
      grep -q -- "${bad%% *}" bad.err || { cat bad.err; fail "--ring $bad: the error should name ${bad%% *}"; }
    done ;;
  sweep)
    # `mpirun -np P sdpa sweep`: the ranks share the grid; the result equals one process's.
    # Then a sweep whose rank 1 is killed (SIGKILL) mid-grid: every rank exits non-zero, the
    # finished runs stay stored, and the re-run trains only the others and writes the same
    # sweep.json as one uninterrupted process.
    grid=(--d-model 16 --layers 1 --seq 8 --batch 4 --steps 200 --warmup 2 --eval-size 8 --log-every 50
          --policies inv_sqrt_dk inv_dk adaptive --seeds 1 2 --d-head 8 --widths 8 16)
    same() {  # same A B: sweep.json A equals B but for timings and how the work was spread
      /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../sweep_json_same.py" "$1" "$2" --spread --runs 12 ||
        fail "$1 differs from $2"
      echo "ok: $1 equals $2"
    }
    "$sdpa" sweep "${grid[@]}" --jobs 1 --threads 1 --out one > /dev/null 2> one.err
    mpi 3 "$sdpa" sweep "${grid[@]}" --out three > three.txt 2> three.err || { cat three.err; fail "mpirun -np 3 sweep"; }
    grep -q "over 3 ranks" three.err || fail "the sweep should say it runs over 3 ranks"
    for r in 0 1 2; do
      [ "$(grep -c "^sdpa sweep \[rank $r/3\]: training .*finished" three.err)" -eq 4 ] || fail "rank $r should train 4 runs"
    done
    same one/sweep.json three/sweep.json
    # Killed: each rank writes its PID, then becomes sdpa; rank 1 is killed once 3 runs are stored.
    launch() { mpi 2 bash -c 'echo $$ > "pid.$OMPI_COMM_WORLD_RANK"; exec "$0" "$@"' "$sdpa" sweep "${grid[@]}" --out cut; }
    rm -f pid.*
    launch > /dev/null 2> cut.err &
    job=$!
    for _ in $(seq 1200); do [ "$(ls cut/runs 2> /dev/null | grep -c '\.json$')" -ge 3 ] && break; sleep 0.05; done
    [ -s pid.1 ] || fail "rank 1 never started"
    kill -9 "$(cat pid.1)" 2> /dev/null || fail "the sweep finished before rank 1 could be killed"
    rc=0; wait $job || rc=$?
    [ "$rc" -ne 0 ] || fail "a sweep with a killed rank should exit non-zero"
    [ "$rc" -ne 124 ] || fail "a sweep with a killed rank hung"
    grep -qi "signal 9" cut.err || { cat cut.err; fail "mpirun should report the killed rank"; }
    [ ! -e cut/sweep.json ] || fail "a killed sweep wrote sweep.json"
    stored=$(ls cut/runs | grep -c '\.json$')
    [ "$stored" -ge 3 ] && [ "$stored" -lt 12 ] || fail "stored $stored of 12 runs"
    echo "ok: rank 1 killed, exit $rc, $stored of 12 runs stored"
    mpi 2 "$sdpa" sweep "${grid[@]}" --out cut > resume.txt 2> resume.err || { cat resume.err; fail "the re-run"; }
    trained=$(grep -c ': training .*finished' resume.err || true)
    [ "$trained" -eq $((12 - stored)) ] || { cat resume.err; fail "the re-run trained $trained runs, not $((12 - stored))"; }
    /usr/bin/python3 -c "import json,sys; n=json.load(open('cut/sweep.json'))['runs_from_store']; sys.exit(n != $stored)" \
      || fail "sweep.json should count $stored runs from the store"
    same one/sweep.json cut/sweep.json
    echo "ok: the re-run trained the $trained runs not stored"
    # Ranks given different grids refuse before training anything.
    expect_fault "ranks disagree on the sweep's grid" 2 bash -c \
      's=2; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && s=3; exec "$0" sweep --d-model 16 --layers 1 --seq 8 --steps 4 --policies none --seeds 1 $s --d-head 8 --out bad' "$sdpa"
    [ ! -e bad/runs ] || [ -z "$(ls bad/runs)" ] || fail "a refused sweep stored runs" ;;
  *) fail "unknown case $case" ;;
esac
echo PASS
