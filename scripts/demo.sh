#!/usr/bin/env bash
# The demo: a job on a simulated 8-GPU node (two NVLink islands of four H100s on two CPU sockets),
# traced by libp2ptrace.so, ending in the viewer's report: which GPU pairs got direct P2P, which fell
# back to host-staged copies, how fast each was, and why.
source "$(dirname "$0")/common.sh"
build default
B=$ROOT/build/default
out=$ROOT/build/demo
rm -rf "$out"
log "running examples/peer_copy on the simulated node under p2ptrace (traces in build/demo)"
LD_LIBRARY_PATH=$B/sim/lib P2PSIM_TOPOLOGY=$ROOT/tests/sim/topologies/demo-8gpu.json P2PSIM_HOST=node0 \
  "$B/bin/p2ptrace" run --dir "$out" -- "$B/bin/peer_copy" --size 64M --iters 3
