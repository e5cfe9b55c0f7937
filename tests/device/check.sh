#!/usr/bin/env bash
# The real-GPU check (issue 4): for a machine with an NVIDIA GPU and driver, CMake, nvcc and a C++
# compiler but no package registry. It builds what needs nothing else (-DP2PTRACE_SHIM_ONLY=ON:
# core, libp2ptrace.so, examples, the copy benchmark), then runs each program bare and under the
# shim against the real CUDA (and NCCL, when found) and compares what the program saw: exit codes,
# its CUDA error lines, and every line of output that does not carry a measurement. It records
# nvidia-smi's view of the node. Everything lands in $OUT (or ./device-results): summary.txt (the
# verdicts, read first), log.txt, nvidia-smi.txt, topo.txt, bench.txt and traces.tar.gz (the
# traces and NCCL logs, for `p2ptrace report`/`dump` on a machine that has the full CLI).
# Exit 0 when every comparison held, 1 when one did not, 2 when the build failed. Under 5 minutes.
#
#   tests/device/check.sh            # from the repository root
#   OUT=/tmp/r tests/device/check.sh
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/device-results}
mkdir -p "$OUT"
BUILD=${P2PTRACE_DEVICE_BUILD:-$ROOT/build/device}
WORK=$(mktemp -d)
LOG=$OUT/log.txt
SUMMARY=$OUT/summary.txt
: >"$LOG"
: >"$SUMMARY"
FAILED=0

say() { echo "$*" | tee -a "$SUMMARY"; }
log() { echo "== $*" >>"$LOG"; }
verdict() {  # verdict NAME OK(0/1) DETAIL
  if [ "$2" = 0 ]; then say "PASS $1${3:+: $3}"; else say "FAIL $1${3:+: $3}"; FAILED=1; fi
}

say "p2ptrace device check, $(date -u +%FT%TZ), $(hostname), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"

# --- the node --------------------------------------------------------------------------------------
{ nvidia-smi 2>&1; echo; nvidia-smi -q 2>&1 | head -200; } >"$OUT/nvidia-smi.txt"
{ nvidia-smi topo -m 2>&1; echo; echo '# nvidia-smi topo -p2p r'; nvidia-smi topo -p2p r 2>&1; } >"$OUT/topo.txt"
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
say "GPUs: ${GPUS:-0} ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1))"

# --- NCCL: the CUDA toolkit's, or a Python wheel's (nvidia-nccl-cu*) --------------------------------
NCCL_ROOT=${NCCL_ROOT:-}
if [ -z "$NCCL_ROOT" ]; then
  for d in /usr/local/cuda /usr; do
    if [ -e "$d/include/nccl.h" ]; then NCCL_ROOT=$d; break; fi
  done
fi
if [ -z "$NCCL_ROOT" ] && command -v python3 >/dev/null; then
  NCCL_ROOT=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(list(nvidia.nccl.__path__)[0] + "/x"))' 2>/dev/null || true)
fi
say "NCCL: ${NCCL_ROOT:-not found}"

# --- build -----------------------------------------------------------------------------------------
log "configure + build ($BUILD)"
CMAKE_ARGS=(-S "$ROOT" -B "$BUILD" -DP2PTRACE_SHIM_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[ -n "$NCCL_ROOT" ] && CMAKE_ARGS+=(-DNCCL_ROOT="$NCCL_ROOT" -DNCCL_INCLUDE_DIR="$NCCL_ROOT/include")
command -v ninja >/dev/null && CMAKE_ARGS+=(-G Ninja)
if ! cmake "${CMAKE_ARGS[@]}" >>"$LOG" 2>&1 || ! cmake --build "$BUILD" -j "$(nproc)" >>"$LOG" 2>&1; then
  say "FAIL build: see log.txt"
  tail -40 "$LOG"
  exit 2
fi
SHIM=$BUILD/lib/libp2ptrace.so
say "built: $(ls "$BUILD/bin" "$BUILD/bench" 2>/dev/null | grep -v -e CMake -e cmake -e Test | tr '\n' ' ')"
NCCL_LIB_DIR=$(dirname "$(grep -m1 '^P2PTRACE_NCCL_LIBRARY:' "$BUILD/CMakeCache.txt" | cut -d= -f2)")

# What a run printed that carries no measurement: timings, bandwidths and pids vary run to run.
stable() { grep -v -E '[0-9]+\.[0-9]+ *(GB/s|us|ms|s|ns)|ns/call|pid|^p2ptrace: (warning|all )' "$1" || true; }

# run NAME DIR CMD…: bare, then traced into DIR; compare exit codes and stable output.
compare() {
  local name=$1 dir=$2; shift 2
  log "$name bare: $*"
  (cd "$WORK" && "$@") >"$WORK/$name.bare.out" 2>"$WORK/$name.bare.err"; local rb=$?
  log "$name traced"
  (cd "$WORK" && env LD_PRELOAD="$SHIM" P2PTRACE_DIR="$dir" "$@") >"$WORK/$name.shim.out" 2>"$WORK/$name.shim.err"; local rs=$?
  for f in bare.out bare.err shim.out shim.err; do { echo "--- $name.$f"; cat "$WORK/$name.$f"; } >>"$LOG"; done
  local same_out=0
  if ! diff <(stable "$WORK/$name.bare.out") <(stable "$WORK/$name.shim.out") >>"$LOG"; then same_out=1; fi
  if ! diff <(stable "$WORK/$name.bare.err") <(stable "$WORK/$name.shim.err") >>"$LOG"; then same_out=1; fi
  local traces; traces=$(ls "$dir" 2>/dev/null | grep -c '\.p2ptrace$')
  [ "$rb" = "$rs" ] && [ $same_out = 0 ]
  verdict "$name" $? "exit $rb bare / $rs traced, output $([ $same_out = 0 ] && echo same || echo DIFFERENT), $traces trace file(s)"
}

TRACES=$WORK/traces
mkdir -p "$TRACES"

# 1. peer_copy: devices, the peer matrix and peer-copy bandwidth (one GPU: the device list only).
compare peer_copy "$TRACES/peer_copy" "$BUILD/bin/peer_copy" --size 16777216 --iters 3

# 2. The copy benchmark: ns per call bare, counting only, timing every copy.
{
  echo "# shim_overhead --time-loop 200000 KIND: ns per call (bare / counting / timing)"
  for kind in same h2d same_small event2 cross peer cross_small; do
    b=$("$BUILD/bench/shim_overhead" --time-loop 200000 "$kind" 2>>"$LOG")
    c=$(env LD_PRELOAD="$SHIM" P2PTRACE_DIR="$TRACES/bench-$kind" P2PTRACE_SAMPLE=off P2PTRACE_WARN=off \
        "$BUILD/bench/shim_overhead" --time-loop 200000 "$kind" 2>>"$LOG")
    t=$(env LD_PRELOAD="$SHIM" P2PTRACE_DIR="$TRACES/bench-$kind-timed" P2PTRACE_SAMPLE=all P2PTRACE_WARN=off \
        "$BUILD/bench/shim_overhead" --time-loop 200000 "$kind" 2>>"$LOG")
    echo "$kind | $b | $c | $t"
  done
} >"$OUT/bench.txt" 2>&1
say "bench: $(grep -c ns/call "$OUT/bench.txt") measurements in bench.txt"

# 3. The real runtime's answers with and without the shim: error codes of a call script (the same
#    program the simulated-node tests use is not built here, so peer_copy's error path stands in):
#    an invalid device through CUDA_VISIBLE_DEVICES must fail the same way.
compare peer_copy_no_device "$TRACES/no_device" env CUDA_VISIBLE_DEVICES=-1 "$BUILD/bin/peer_copy" --iters 1

# 4. NCCL: a one-rank nccl_ring job (all collectives and a self send/recv on the real NCCL).
if [ -x "$BUILD/bin/nccl_ring" ]; then
  # Each job needs a fresh rendezvous directory (nccl_ring's first argument).
  compare nccl_ring_1rank "$TRACES/nccl_ring" env LD_LIBRARY_PATH="$NCCL_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 bash -c 'd=$(mktemp -d) && "$0" "$d" 1048576; r=$?; rm -rf "$d"; exit $r' \
    "$BUILD/bin/nccl_ring"
fi

# 5. PyTorch (when importable): same-device and host copies, and a one-process NCCL allreduce.
if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  cat >"$WORK/torch_check.py" <<'EOF'
import os, torch, torch.distributed as dist
a = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
b = a.clone(); c = a.cpu().cuda()
print("copies equal", bool(torch.equal(a, b)), bool(torch.equal(a, c)))
if torch.cuda.device_count() > 1:
    d = a.to("cuda:1"); print("peer copy equal", bool(torch.equal(d.cpu(), a.cpu())))
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29517")
dist.init_process_group("nccl", rank=0, world_size=1)
x = torch.ones(1 << 20, device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
print("allreduce", float(x[0]))
dist.destroy_process_group()
EOF
  compare torch "$TRACES/torch" python3 "$WORK/torch_check.py"
else
  say "SKIP torch: not importable with CUDA"
fi

# 6. The driver: does cuGetProcAddress hand out the addresses libcuda exports? The shim's driver
#    wrappers are handed out only where it does (DESIGN.md §4, "The driver API").
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
cat >"$WORK/proc_address.c" <<'EOF'
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
  if (cuInit(0) != CUDA_SUCCESS) { printf("cuInit failed\n"); return 1; }
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  int v = 0; cuDriverGetVersion(&v);
  static const char* names[][3] = {{"cuMemcpyPeerAsync", "cuMemcpyPeerAsync", "cuMemcpyPeerAsync_ptsz"},
                                   {"cuMemcpyDtoD", "cuMemcpyDtoD_v2", "cuMemcpyDtoD_v2_ptds"},
                                   {"cuMemcpyDtoDAsync", "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync_v2_ptsz"},
                                   {"cuMemcpyAsync", "cuMemcpyAsync", "cuMemcpyAsync_ptsz"},
                                   {"cuCtxEnablePeerAccess", "cuCtxEnablePeerAccess", "cuCtxEnablePeerAccess"}};
  int same = 0, total = 0;
  for (int i = 0; i < 5; ++i)
    for (int ptds = 0; ptds < 2; ++ptds) {
      void* fn = NULL; CUdriverProcAddressQueryResult q;
      CUresult r = cuGetProcAddress(names[i][0], &fn, v, ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, &q);
      void* exported = dlsym(h, names[i][1 + ptds]);
      ++total; same += r == CUDA_SUCCESS && fn == exported;
      printf("%s%s: %s\n", names[i][0], ptds ? " (ptds)" : "",
             r != CUDA_SUCCESS ? "not found" : fn == exported ? "exported address" : "OTHER address");
    }
  printf("cuGetProcAddress returned the exported address for %d of %d\n", same, total);
  return 0;
}
EOF
if cc -I"$CUDA_HOME/include" "$WORK/proc_address.c" -o "$WORK/proc_address" -L"$CUDA_HOME/lib64/stubs" -lcuda -ldl >>"$LOG" 2>&1; then
  "$WORK/proc_address" >"$OUT/proc_address.txt" 2>&1
  say "driver: $(tail -1 "$OUT/proc_address.txt")"
else
  say "SKIP driver entry points: could not build proc_address.c (log.txt)"
fi
# --- what came back --------------------------------------------------------------------------------
for d in "$TRACES"/*; do
  [ -d "$d" ] && say "traces $(basename "$d"): $(ls "$d" | tr '\n' ' ')"
done
tar -C "$WORK" -czf "$OUT/traces.tar.gz" traces 2>>"$LOG"
say "result: $([ $FAILED = 0 ] && echo 'all comparisons held' || echo 'a comparison FAILED (log.txt has both outputs)')"
rm -rf "$WORK"
exit $FAILED
