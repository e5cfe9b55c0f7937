#!/usr/bin/env bash
# The demo: an 8-rank NCCL job (examples/nccl_ring, one process per GPU as torchrun starts them) on a
# simulated 8-GPU node — two NVLink islands of four H100s on two CPU sockets — traced by
# libp2ptrace.so and ending in the viewer's report: which GPU pairs got P2P, which fell back to host
# memory (the ring crosses the sockets twice), and why.
source "$(dirname "$0")/common.sh"
build default
B=$ROOT/build/default
out=$ROOT/build/demo
rm -rf "$out" "$out-rendezvous"
mkdir -p "$out-rendezvous"
log "8-rank NCCL ring on the simulated node under p2ptrace (traces in build/demo)"
"$B/bin/p2ptrace" run --dir "$out" -- \
  "$B/bin/p2psim" launch --topology "$ROOT/tests/sim/topologies/demo-8gpu.json" --hosts node0:8 -- \
  "$B/bin/nccl_ring" "$out-rendezvous"
log "also: '$B/bin/p2ptrace html $out -o demo.html' (one self-contained page), '$B/bin/p2ptrace export $out --perfetto demo.json' (ui.perfetto.dev), '$B/bin/p2ptrace report $out --json' for scripts; CUDA copies: '$B/bin/p2ptrace run -- $B/bin/peer_copy' under LD_LIBRARY_PATH=$B/sim/lib P2PSIM_TOPOLOGY=tests/sim/topologies/demo-8gpu.json"
