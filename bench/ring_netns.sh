#!/usr/bin/env bash
# ring_netns.sh — `sdpa bench --ring` with each rank in its own network namespace, the
# ranks joined through a bridge by veth links whose egress `tc tbf` limits to a bandwidth:
# ring attention over a real (if virtual) network link instead of shared memory, to check
# docs/scaling.md's time model. Needs root with CAP_NET_ADMIN (ip netns, veth, bridge,
# tc tbf); not a CI test for that reason. Latency cannot be added where the kernel lacks
# sch_netem (this machine's does): the links then have their native latency (tens of µs).
#
#   bench/ring_netns.sh SDPA P RATE [sdpa bench args...]
#     SDPA   the sdpa binary;  P  ranks;  RATE  tc rate per rank's link (e.g. 100mbit, 1gbit;
#            "none": no limit)
#   e.g. bench/ring_netns.sh build/bin/sdpa 2 100mbit --seq 2048 --heads 4 --dim 64 --repeat 3
#
# Each rank's namespace is sdpa_ns<r> with address 10.78.0.<r+1> on interface sdpa0; the
# bridge sdpa_br (10.78.0.254) lives in the calling namespace. Open MPI is told to use TCP
# on sdpa0 only (btl tcp,self: no shared memory between ranks). Everything made here is
# removed on exit.
set -euo pipefail
sdpa=$(realpath "$1") ranks=$2 rate=$3
shift 3
cleanup() {
  for ((r = 0; r < ranks; r++)); do ip netns del "sdpa_ns$r" 2> /dev/null || true; done
  ip link del sdpa_br 2> /dev/null || true
}
trap cleanup EXIT
cleanup
ip link add sdpa_br type bridge
ip addr add 10.78.0.254/24 dev sdpa_br
ip link set sdpa_br up
for ((r = 0; r < ranks; r++)); do
  ns=sdpa_ns$r
  ip netns add "$ns"
  ip link add "sdpa_h$r" type veth peer name sdpa0 netns "$ns"
  ip link set "sdpa_h$r" master sdpa_br up
  ip -n "$ns" addr add "10.78.0.$((r + 1))/24" dev sdpa0
  ip -n "$ns" link set sdpa0 up
  ip -n "$ns" link set lo up
  if [ "$rate" != none ]; then
    # what rank r sends leaves through sdpa0: limit it (burst: 10 ms at the rate, >= 64 KiB)
    ip netns exec "$ns" tc qdisc add dev sdpa0 root tbf rate "$rate" burst 256kbit latency 100ms
  fi
done
# Open MPI 4.1's runtime (PMIx) reaches its ranks by TCP on loopback, which a namespace does
# not share: let it listen on the bridge, which every namespace reaches.
export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=sdpa_br
mpirun --oversubscribe --allow-run-as-root -np "$ranks" \
  --mca btl tcp,self --mca btl_tcp_if_include sdpa0 \
  bash -c 'exec ip netns exec "sdpa_ns$OMPI_COMM_WORLD_RANK" "$0" "$@"' "$sdpa" bench --ring --no-torch --no-blas "$@"
