#!/usr/bin/env bash
# The demo: a job on a simulated 8-GPU node (two NVLink islands of four H100s on two CPU sockets),
# showing which GPU pairs get direct P2P and which fall back to host-staged copies, and how fast.
source "$(dirname "$0")/common.sh"
build default
B=$ROOT/build/default
log "running examples/peer_copy on the simulated node (tests/sim/topologies/demo-8gpu.json)"
"$B/bin/p2psim" launch --topology "$ROOT/tests/sim/topologies/demo-8gpu.json" --hosts node0:1 -- \
  "$B/bin/peer_copy" --size 64M --iters 3
