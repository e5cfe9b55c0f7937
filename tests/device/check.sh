#!/usr/bin/env bash
# The real-GPU check: for a machine with an NVIDIA GPU and driver, CMake, nvcc and a C++ compiler but
# no package registry. It builds what needs nothing else (-DP2PTRACE_SHIM_ONLY=ON: core,
# libp2ptrace.so, the audit module, examples, the copy benchmark), then runs each program bare and
# traced (LD_PRELOAD and LD_AUDIT, as `p2ptrace run` sets them) against the real CUDA (and NCCL, a
# header and library that belong together) and compares what the program saw: exit codes, its CUDA
# error lines, every line of output that carries no measurement, and that a traced program left a
# trace. With the CLI (a wheel in dist/, made by scripts/build-wheel.py, installed into a venv here)
# each traced run gets its report. Then what users ask first: a DDP training step bare vs traced
# (8 alternated pairs: median ratio and each side's spread), JAX and CuPy programs bare vs traced.
# Everything lands in $OUT (or ./device-results): summary.txt (the verdicts, read first), log.txt,
# nvidia-smi.txt, topo.txt, bench.txt, ddp.txt, report-*.txt, doctor-test.{json,txt}, doctor.json, sm-copy-check.txt
# and traces.tar.gz.
# Exit 0 when every comparison held, 1 when one did not, 2 when the build failed. Under 6 minutes.
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

# --- NCCL: a header and a library that belong together, and which ----------------------------------
# GPU images keep NCCL in the Python wheel (nvidia/nccl/{include,lib}); a header alone (a distro's
# /usr/include/nccl.h with no libnccl) would compile against one release and run another.
nccl_lib_dir() {  # the directory holding libnccl.so* next to ROOT/include/nccl.h, or nothing
  local d
  [ -e "$1/include/nccl.h" ] || return 1
  for d in "$1/lib" "$1/lib64" "$1/lib/x86_64-linux-gnu" "$1/lib/aarch64-linux-gnu"; do
    if ls "$d"/libnccl.so* >/dev/null 2>&1; then echo "$d"; return 0; fi
  done
  return 1
}
NCCL_ROOT=${NCCL_ROOT:-}
NCCL_FROM="NCCL_ROOT"
if [ -z "$NCCL_ROOT" ] && command -v python3 >/dev/null; then
  for d in $(python3 -c 'import nvidia.nccl as m; print(*m.__path__)' 2>/dev/null); do
    if nccl_lib_dir "$d" >/dev/null; then NCCL_ROOT=$d; NCCL_FROM="the Python wheel (nvidia-nccl)"; break; fi
  done
fi
for d in /usr/local/cuda /usr; do
  if [ -z "$NCCL_ROOT" ] && nccl_lib_dir "$d" >/dev/null; then NCCL_ROOT=$d; NCCL_FROM="$d"; fi
done
if [ -n "$NCCL_ROOT" ]; then
  NCCL_LIB_DIR=$(nccl_lib_dir "$NCCL_ROOT")
  NCCL_LIB=$(ls "$NCCL_LIB_DIR"/libnccl.so* | head -1)
  NCCL_VERSION=$(grep -m3 -E '#define NCCL_(MAJOR|MINOR|PATCH) ' "$NCCL_ROOT/include/nccl.h" | awk '{printf "%s%s", sep, $3; sep="."}')
  say "NCCL: $NCCL_VERSION from $NCCL_FROM: header $NCCL_ROOT/include/nccl.h, library $NCCL_LIB"
else
  say "NCCL: no header with its library (wheel nvidia-nccl, /usr/local/cuda, /usr): NCCL programs skipped"
fi

# --- build -----------------------------------------------------------------------------------------
log "configure + build ($BUILD)"
CMAKE_ARGS=(-S "$ROOT" -B "$BUILD" -DP2PTRACE_SHIM_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo)
[ -n "$NCCL_ROOT" ] && CMAKE_ARGS+=(-DNCCL_ROOT="$NCCL_ROOT" -DNCCL_INCLUDE_DIR="$NCCL_ROOT/include"
                                    -DP2PTRACE_NCCL_LIBRARY="$NCCL_LIB")
command -v ninja >/dev/null && CMAKE_ARGS+=(-G Ninja)
if ! cmake "${CMAKE_ARGS[@]}" >>"$LOG" 2>&1 || ! cmake --build "$BUILD" -j "$(nproc)" >>"$LOG" 2>&1; then
  say "FAIL build: see log.txt"
  tail -40 "$LOG"
  exit 2
fi
SHIM=$BUILD/lib/libp2ptrace.so
AUDIT=$BUILD/lib/libp2ptrace_audit.so
say "built: $(ls "$BUILD/bin" "$BUILD/bench" "$BUILD/lib" 2>/dev/null | grep -v -e CMake -e cmake -e Test | tr '\n' ' ')"

# --- the CLI, for the reports: the wheel in dist/ (made where the build tools are), unpacked -------
CLI=${P2PTRACE_CLI:-}
WHEEL=$(ls "$ROOT"/dist/p2ptrace-*.whl 2>/dev/null | tail -1)
if [ -z "$CLI" ] && [ -n "$WHEEL" ] && python3 -m zipfile -e "$WHEEL" "$WORK/cli" >>"$LOG" 2>&1; then
  CLI=$WORK/cli/p2ptrace/bin/p2ptrace  # its libraries by a relative RPATH, as the wheel installs them
  chmod +x "$CLI"
fi
if [ -n "$CLI" ]; then say "CLI: $("$CLI" --version 2>&1) (${WHEEL:-P2PTRACE_CLI})"; else say "CLI: none (no dist/p2ptrace-*.whl): no reports"; fi

# What a run printed that carries no measurement: timings, bandwidths (with a unit, or a table row of
# decimal numbers as peer_copy prints them) and pids vary run to run.
stable() {
  grep -v -E '[0-9]+\.[0-9]+ *(GB/s|us|ms|s|ns)\b|ns/call|pid|^p2ptrace: (warning|all )|([0-9]+\.[0-9]+[[:space:]]+){2,}|^ *GPU[0-9]+( +[0-9]+\.[0-9]+)+ *$' "$1" || true
}

RUN_LIMIT=${RUN_LIMIT:-120}  # seconds per program run: a hang is a failed run (exit 124), never a hung check

# compare NAME DIR CMD…: bare, then traced into DIR (LD_PRELOAD and LD_AUDIT, as `p2ptrace run` sets
# them); compares exit codes and stable output; a program that ran CUDA must leave a trace
# (EXPECT_TRACE=0 where it cannot). The report of DIR goes to report-NAME.txt.
compare() {
  local name=$1 dir=$2; shift 2
  log "$name bare: $*"
  (cd "$WORK" && timeout "$RUN_LIMIT" "$@") >"$WORK/$name.bare.out" 2>"$WORK/$name.bare.err"; local rb=$?
  log "$name traced"
  (cd "$WORK" && timeout "$RUN_LIMIT" env LD_PRELOAD="$SHIM" LD_AUDIT="$AUDIT" P2PTRACE_DIR="$dir" "$@") \
    >"$WORK/$name.shim.out" 2>"$WORK/$name.shim.err"; local rs=$?
  for f in bare.out bare.err shim.out shim.err; do { echo "--- $name.$f"; cat "$WORK/$name.$f"; } >>"$LOG"; done
  local same_out=0
  if ! diff <(stable "$WORK/$name.bare.out") <(stable "$WORK/$name.shim.out") >>"$LOG"; then same_out=1; fi
  if ! diff <(stable "$WORK/$name.bare.err") <(stable "$WORK/$name.shim.err") >>"$LOG"; then same_out=1; fi
  local traces; traces=$(ls "$dir" 2>/dev/null | grep -c '\.p2ptrace$')
  local missing=0
  if [ "${EXPECT_TRACE:-1}" = 1 ] && [ "$traces" = 0 ]; then missing=1; fi
  local report=""
  if [ -n "$CLI" ] && [ "$traces" -gt 0 ]; then
    NO_COLOR=1 "$CLI" report "$dir" >"$OUT/report-$name.txt" 2>&1
    report="; report: $(grep -m1 -E 'capture|untraced' "$OUT/report-$name.txt" | sed 's/^ *//' | cut -c1-200)"
  fi
  [ "$rb" = "$rs" ] && [ $same_out = 0 ] && [ $missing = 0 ]
  verdict "$name" $? "exit $rb bare / $rs traced, output $([ $same_out = 0 ] && echo same || echo DIFFERENT), $traces trace file(s)$([ $missing = 0 ] || echo ' (NONE, though it ran CUDA)')$report"
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
EXPECT_TRACE=0 compare peer_copy_no_device "$TRACES/no_device" env CUDA_VISIBLE_DEVICES=-1 "$BUILD/bin/peer_copy" --iters 1

# 4. NCCL: a one-rank nccl_ring job (all collectives and a self send/recv on the real NCCL).
if [ -x "$BUILD/bin/nccl_ring" ]; then
  # Each job needs a fresh rendezvous directory (nccl_ring's first argument).
  compare nccl_ring_1rank "$TRACES/nccl_ring" env LD_LIBRARY_PATH="$NCCL_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 bash -c 'd=$(mktemp -d) && "$0" "$d" 1048576; r=$?; rm -rf "$d"; exit $r' \
    "$BUILD/bin/nccl_ring"
fi

# 4b. NCCL's kernel timers: the shim as NCCL's profiler plugin (NCCL >= 2.27.3). The ring's
#     send/recv and collectives timed on the GPU, every call (P2PTRACE_SAMPLE=all): how many NCCL_KERNEL
#     records, and the per-peer times the report prints. An NCCL that should have loaded the shim and
#     left no such record fails the check.
kernel_timers() {  # NAME DIR: the verdict on DIR's NCCL_KERNEL records
  local name=$1 dir=$2 n
  n=$("$CLI" dump "$dir" 2>/dev/null | grep -c '"kind":"nccl_kernel"')
  {
    echo "# $name: $n NCCL_KERNEL records"
    "$CLI" dump "$dir" 2>/dev/null | grep '"kind":"nccl_kernel"' | head -20
    NO_COLOR=1 "$CLI" report "$dir" 2>&1 | grep -E 'kernel timers|rings timed|comm .* channel' | head -20
  } >>"$OUT/kernel-timers.txt"
  local code; code=$(echo "$NCCL_VERSION" | awk -F. '{printf "%d", $1 * 10000 + $2 * 100 + $3}')
  if [ "${code:-0}" -ge 22703 ]; then
    [ "$n" -gt 0 ]
    verdict "$name-kernel-timers" $? "NCCL $NCCL_VERSION: $n operations timed on the GPU by NCCL's kernel timers (kernel-timers.txt)"
  else
    say "$name-kernel-timers: NCCL $NCCL_VERSION has no GPU kernel timers (2.27.3+): $n records, none expected"
  fi
}
if [ -x "$BUILD/bin/nccl_ring" ] && [ -n "$CLI" ]; then
  P2PTRACE_SAMPLE=all compare nccl_ring_kernel "$TRACES/nccl_ring_kernel" \
    env LD_LIBRARY_PATH="$NCCL_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
    bash -c 'd=$(mktemp -d) && "$0" -o sendrecv,allreduce "$d" 1048576; r=$?; rm -rf "$d"; exit $r' "$BUILD/bin/nccl_ring"
  kernel_timers nccl_ring "$TRACES/nccl_ring_kernel"
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
print("allreduce", int(x[0]))
dist.destroy_process_group()
EOF
  compare torch "$TRACES/torch" python3 "$WORK/torch_check.py"
  # PyTorch's expandable segments: its memory from the virtual memory API (cuMemCreate, cuMemMap).
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True MASTER_PORT=29518 \
    compare torch_expandable "$TRACES/torch_expandable" python3 "$WORK/torch_check.py"
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
  grep -q 'address for \([0-9]*\) of \1$' "$OUT/proc_address.txt"
  verdict driver-entry-points $? "$(tail -1 "$OUT/proc_address.txt") (the shim hands out its wrappers only where they are equal)"
else
  say "SKIP driver entry points: could not build proc_address.c (log.txt)"
fi
# 7. JAX (when importable with a GPU): XLA reaches libcuda through dlsym on its own handle and maps
#    its memory with the virtual memory API; traced, it must leave a trace that says so.
if python3 -c 'import jax; assert jax.devices()[0].platform == "gpu"' >/dev/null 2>&1; then
  cat >"$WORK/jax_check.py" <<'EOF'
import jax, jax.numpy as jnp
x = jnp.arange(1 << 20, dtype=jnp.float32)
print("devices", len(jax.devices()), jax.devices()[0].platform)
print("sum", int(jax.jit(lambda a: (a * 2).sum())(x)))
y = jax.device_put(x, jax.devices()[-1])
print("round trip", bool((jax.device_get(y) == jax.device_get(x)).all()))
EOF
  compare jax "$TRACES/jax" python3 "$WORK/jax_check.py"
else
  say "SKIP jax: not importable with a GPU"
fi

# 8. CuPy (when importable): copies, a reduction, and a CUDA error text as CuPy shows it.
if python3 -c 'import cupy; cupy.zeros(1)' >/dev/null 2>&1; then
  cat >"$WORK/cupy_check.py" <<'EOF'
import cupy as cp
a = cp.arange(1 << 20, dtype=cp.float32)
b = a.copy()
print("equal", bool((a == b).all()), "sum", int(a.sum()))
try:
    cp.cuda.runtime.deviceEnablePeerAccess(cp.cuda.runtime.getDeviceCount() + 3)
except cp.cuda.runtime.CUDARuntimeError as e:
    print("error", e)
EOF
  compare cupy "$TRACES/cupy" python3 "$WORK/cupy_check.py"
else
  say "SKIP cupy: not importable"
fi

# 9. A DDP training step (torchrun, NCCL; 8 x Linear 4096 in bf16), bare vs traced (and, with
#    DDP_SIDES, traced with P2PTRACE_SAMPLE=off: what timing costs), in 8 alternated rounds: each run's
#    median step time; per side the median and the spread (max-min over the median), and the median
#    of each round's traced/bare ratio (a round's runs share the machine's state of the moment).
if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  cat >"$WORK/ddp_step.py" <<'EOF'
import os, statistics, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(8)]).cuda().to(torch.bfloat16)
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=1e-4)
x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
def step():
    loss = ddp(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
for _ in range(5):
    step()
torch.cuda.synchronize()
times = []
for _ in range(40):
    t = time.perf_counter()
    step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t)
print("step_ms %.4f" % (1e3 * statistics.median(times)))
dist.destroy_process_group()
EOF
  : >"$OUT/ddp.txt"
  # DDP_SIDES="bare traced untimed" adds the runs without timing events (a third more time).
  for i in $(seq "${DDP_ROUNDS:-8}"); do
    for side in ${DDP_SIDES:-bare traced}; do
      case $side in
        bare) run=(env) ;;
        traced) run=(env LD_PRELOAD="$SHIM" LD_AUDIT="$AUDIT" P2PTRACE_DIR="$TRACES/ddp-$i") ;;
        untimed) run=(env LD_PRELOAD="$SHIM" LD_AUDIT="$AUDIT" P2PTRACE_DIR="$TRACES/ddp-untimed-$i" P2PTRACE_SAMPLE=off) ;;
      esac
      (cd "$WORK" && timeout "$RUN_LIMIT" "${run[@]}" python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
        "$WORK/ddp_step.py") >"$WORK/ddp.out" 2>>"$LOG"
      echo "$i $side $(grep -m1 -o 'step_ms [0-9.]*' "$WORK/ddp.out" | cut -d' ' -f2)" >>"$OUT/ddp.txt"
    done
  done
  cat >"$WORK/ddp_summary.py" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 3:
        runs[parts[0]][parts[1]] = float(parts[2])
sides = [k for k in ("bare", "traced", "untimed") if any(k in r for r in runs.values())]
v = {k: [r[k] for r in runs.values() if k in r] for k in sides}
if "bare" not in sides or "traced" not in sides:
    print("no step times (log.txt)")
    sys.exit(1)
out = []
for k in sides:
    m = statistics.median(v[k])
    out.append("%s %.3f ms (%d runs, spread %.1f%%)" % (k, m, len(v[k]), 100 * (max(v[k]) - min(v[k])) / m))
for k in sides[1:]:
    ratios = [r[k] / r["bare"] for r in runs.values() if k in r and "bare" in r]
    out.append("%s/bare per round: median %.3f (%.3f-%.3f)" % (k, statistics.median(ratios), min(ratios), max(ratios)))
print("median step: " + ", ".join(out))
EOF
  ddp_line=$(python3 "$WORK/ddp_summary.py" "$OUT/ddp.txt")
  verdict ddp $? "$ddp_line"
  if [ -n "$CLI" ] && [ -d "$TRACES/ddp-1" ]; then
    NO_COLOR=1 "$CLI" report "$TRACES/ddp-1" >"$OUT/report-ddp.txt" 2>&1
    # torch's own NCCL (its wheel's, not necessarily NCCL_ROOT's): the same verdict on its release.
    NCCL_VERSION=$(python3 -c 'import torch; print(".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null || echo 0) \
      kernel_timers ddp "$TRACES/ddp-1"
  fi
else
  say "SKIP ddp: torch not importable with CUDA"
fi

# 10. doctor --test: every ordered GPU pair measured and judged, with NCCL's own choice
#     where NCCL is here. One GPU: "1 GPU, no pairs to test", exit 0. More: a verdict for each of the
#     n(n-1) pairs, exit 0 (all pass or expected) or 1 (one failed: the text says why), in seconds.
if [ -n "$CLI" ]; then
  start=$(date +%s.%N)
  (cd "$WORK" && timeout "$RUN_LIMIT" env ${NCCL_LIB_DIR:+LD_LIBRARY_PATH="$NCCL_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"} \
    NO_COLOR=1 "$CLI" doctor --test ${NCCL_LIB_DIR:+--nccl} --json >"$OUT/doctor-test.json" 2>"$OUT/doctor-test.err")
  rt=$?
  took=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')" 2>/dev/null || echo '?')
  (cd "$WORK" && timeout "$RUN_LIMIT" env NO_COLOR=1 "$CLI" doctor --test >"$OUT/doctor-test.txt" 2>&1)
  if [ "${GPUS:-0}" -le 1 ]; then
    grep -q "${GPUS:-0} GPU.*, no pairs to test" "$OUT/doctor-test.json" "$OUT/doctor-test.txt" && [ "$rt" = 0 ]
    verdict doctor_test $? "exit $rt, $(head -1 "$OUT/doctor-test.txt" | cut -c1-160), ${took} s"
  else
    detail=$(python3 - "$OUT/doctor-test.json" "$GPUS" <<'EOF'
import collections, json, sys
j = json.load(open(sys.argv[1])); n = int(sys.argv[2])
v = collections.Counter(p["verdict"] for p in j["pairs"])
ok = len(j["pairs"]) == n * (n - 1) and all(p["verdict"] for p in j["pairs"])
nv = [p["gbps"] for p in j["pairs"] if p["gbps"]]
nccl = j.get("nccl") or {}
print(("ok" if ok else "BAD"), f"{len(j['pairs'])} pairs {dict(v)}, one way {min(nv, default=0):.0f}-{max(nv, default=0):.0f} GB/s,",
      f"nccl {nccl.get('version')} {sum(p['agrees'] for p in nccl.get('pairs', []))}/{len(nccl.get('pairs', []))} as predicted" if nccl else "no nccl")
EOF
)
    case "$detail" in ok*) [ "$rt" = 0 ] || [ "$rt" = 1 ];; *) false;; esac
    verdict doctor_test $? "exit $rt, ${detail#ok }, ${took} s"
  fi
else
  say "SKIP doctor_test: no CLI"
fi

# 11. doctor --test's two kernels on one GPU (tests/device/sm_copy_check): the PTX compiled by this
#     driver, the copy within the device read back and counted (0 differing, then exactly 1024 after
#     1024 words are overwritten). The kernels' only run where a node has one GPU.
timeout "$RUN_LIMIT" "$BUILD/bin/sm_copy_check" 0 >"$OUT/sm-copy-check.txt" 2>&1
rt=$?
verdict sm_copy_check $([ "$rt" = 0 ] && grep -q '^PASS$' "$OUT/sm-copy-check.txt"; echo $?) \
  "exit $rt, $(grep -m2 -E 'copied|counted|after' "$OUT/sm-copy-check.txt" | tr '\n' ' ' | cut -c1-200)"

# 12. Link health: which NVLink and PCIe counters this GPU and driver give (doctor's reading; an
#     unsupported counter is null, never 0), and what the shim's start and exit readings cost in a
#     traced run (peer_copy's report: links[].read_ms, the slowest of them).
if [ -n "$CLI" ]; then
  (cd "$WORK" && timeout "$RUN_LIMIT" env NO_COLOR=1 "$CLI" doctor --json >"$OUT/doctor.json" 2>"$OUT/doctor.err")
  rt=$?
  NO_COLOR=1 "$CLI" report "$TRACES/peer_copy" --json >"$OUT/report-peer_copy.json" 2>/dev/null
  detail=$(python3 - "$OUT/doctor.json" "$OUT/report-peer_copy.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["links"]["reading"]
given, unsupported = set(), set()
for port in r["nvlinks"] + r["pcie"]:
    for name, value in port["counters"].items():
        assert value is None or (isinstance(value, int) and value >= 0), (name, value)
        (given if value is not None else unsupported).add(("nvlink " if "link" in port else "pcie ") + name)
try:
    shim = [h["read_ms"] for h in json.load(open(sys.argv[2]))["links"] if h["read_ms"] is not None]
except Exception:
    shim = []
print("ok" if r["pcie"] else "BAD", f"{len(r['nvlinks'])} NVLinks, {len(r['pcie'])} PCIe ports read in {r['read_ms']:.1f} ms;",
      f"given: {', '.join(sorted(given)) or 'none'}; unsupported: {', '.join(sorted(unsupported)) or 'none'};",
      f"shim's slowest reading {max(shim):.1f} ms" if shim else "no shim reading")
EOF
)
  case "$detail" in ok*) [ "$rt" = 0 ] || [ "$rt" = 1 ];; *) false;; esac
  verdict link_health $? "exit $rt, ${detail#ok }"
else
  say "SKIP link_health: no CLI"
fi

# --- what came back --------------------------------------------------------------------------------
for d in "$TRACES"/*; do
  [ -d "$d" ] && say "traces $(basename "$d"): $(ls "$d" | tr '\n' ' ')"
done
tar -C "$WORK" -czf "$OUT/traces.tar.gz" traces 2>>"$LOG"
say "result: $([ $FAILED = 0 ] && echo 'all comparisons held' || echo 'a comparison FAILED (log.txt has both outputs)')"
rm -rf "$WORK"
exit $FAILED
