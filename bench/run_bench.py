#!/usr/bin/env python3
"""The shim's per-call overhead on the simulated node: bench/shim_overhead run bare, under
LD_PRELOAD=libp2ptrace.so counting only (P2PTRACE_SAMPLE=off) and timing every call
(P2PTRACE_SAMPLE=all), then the same calls under callgrind for instruction counts.

  bench/run_bench.py [--build-dir build/default] [--rounds 3] [--min-time 0.3] [--no-callgrind] ...
  bench/run_bench.py --nccl [--build-dir ...]   # NCCL calls instead (bench.budgets.nccl), callgrind only
  bench/run_bench.py --dlsym [--build-dir ...]  # calls taken with dlsym, bare vs libp2ptrace_audit.so

Wall-clock numbers: each mode runs --rounds times, interleaved (bare, counting, timing, bare, ...),
and the median per benchmark is reported, with the difference and the ratio to bare measured in the
same invocation. The simulated runtime is far slower than a real cudart enqueue, so the absolute
difference (shim - bare) is the number that carries over; the ratio does not.

Instructions: `shim_overhead --callgrind-loop N KIND` under valgrind --tool=callgrind for N=1000 and
N=2000; (Ir(2000) - Ir(1000)) / 1000 is one call with startup cancelled out. Budgets (bench.budgets.copies):
an untimed cross-device copy at most 100 instructions over bare, a same-device copy at most 40, a timed
copy no more than the two event records over the untimed one. --breakdown lists, per kind, the shim's
per-call instructions by function (the same difference method applied to each function's self cost).
The timed copy's cost is reported for the calling thread alone (callgrind --separate-threads=yes:
thread 1 is the loop's) and for all threads (adding the shim's resolver thread), next to event2.
Caveat: valgrind gives the program no vDSO, so clock_gettime shows as ~10 instructions plus a system
call whose kernel side is not counted; natively it is the vDSO's ~20-60 instructions (see the
clock_gettime row of the wall-clock table).

The callgrind runs set P2PSIM_ARENA_GB=1: valgrind cannot give the simulated runtime the 160 GiB of
address space per GPU it reserves by default.

Only the Python standard library is used. Exit status: 0 when every budget holds (or --no-callgrind,
or --report-only), 1 when one is exceeded, 2 on a usage or run error.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ["same", "cross", "peer", "h2d", "same_small", "cross_small", "event2", "graph", "graph16", "cugraph"]
DESCRIPTION = {
    "same": "cudaMemcpyAsync D2D dev0->dev0 4KiB",
    "cross": "cudaMemcpyAsync D2D dev0->dev1 4KiB",
    "peer": "cudaMemcpyPeerAsync dev0->dev1 4KiB",
    "h2d": "cudaMemcpyAsync H2D pinned->dev0 4KiB",
    "same_small": "same, between 4 KiB allocations",
    "cross_small": "cross, between 4 KiB allocations",
    "event2": "2x cudaEventRecord (reference)",
    "graph": "cudaGraphLaunch, 1 captured cross copy",
    "graph16": "cudaGraphLaunch, 16 captured cross copies",
    "cugraph": "cuGraphLaunch (driver), 1 captured copy",
    "clock": "clock_gettime(MONOTONIC) (reference)",
}
# Instructions over bare, untimed (P2PTRACE_SAMPLE=off). h2d has no budget of its own: it is held to the
# same-device budget, the other uninteresting case (marked * in the table).
BUDGET = {"same": 40, "cross": 100, "peer": 100, "h2d": 40, "same_small": 40, "cross_small": 100,
          "graph": 150, "graph16": 150, "cugraph": 150}  # a launch of a captured graph, whatever its size
# The wrapped function each kind calls (the shim's wrapper is NAME@@libcudart.so.13).
API = {"peer": "cudaMemcpyPeerAsync", "event2": None, "graph": "cudaGraphLaunch", "graph16": "cudaGraphLaunch",
       "cugraph": "cuGraphLaunch"}
MODES = ["bare", "counting", "timing"]
N_SMALL, N_LARGE = 1000, 2000


def die(msg):
    print("run_bench.py: " + msg, file=sys.stderr)
    sys.exit(2)


def base_env(args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("P2PTRACE_") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = args.sim_lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["P2PSIM_TOPOLOGY"] = args.topology
    return env


def mode_env(args, mode, trace_dir, preload=()):
    env = base_env(args)
    if preload or mode != "bare":
        env["LD_PRELOAD"] = ":".join(list(preload) + ([args.shim] if mode != "bare" else []))
    if mode != "bare":
        env["P2PTRACE_DIR"] = trace_dir
        env["P2PTRACE_MAX_MB"] = str(args.max_mb)
        env["P2PTRACE_SAMPLE"] = "off" if mode == "counting" else "all"
        env["P2PTRACE_WARN"] = "off"  # the per-call cost, not the job-start topology warnings
    return env


def run(cmd, env, what):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        die("%s failed (exit %d): %s\n%s" % (what, p.returncode, " ".join(cmd), p.stderr[-4000:]))
    # The shim warns on stderr when something is wrong with its settings: never measure that silently.
    if "p2ptrace: warning" in p.stderr:
        die("%s: the shim warned:\n%s" % (what, p.stderr[-2000:]))
    return p


def bench_key(name):
    return name.split("/")[0]


# --- wall clock ----------------------------------------------------------------------------------

def wall_clock(args, tmp):
    kinds = args.kinds + ["clock"]
    filt = "^(%s)/" % "|".join(kinds)
    samples = {m: {k: [] for k in kinds} for m in MODES}
    for rnd in range(args.rounds):
        for mode in MODES:
            trace_dir = os.path.join(tmp, "wall-%s-%d" % (mode, rnd))
            cmd = [args.binary, "--benchmark_format=json", "--benchmark_min_time=%g" % args.min_time,
                   "--benchmark_filter=" + filt]
            p = run(cmd, mode_env(args, mode, trace_dir), "benchmark (%s)" % mode)
            for b in json.loads(p.stdout)["benchmarks"]:
                if b.get("error_occurred"):
                    die("benchmark %s (%s): %s" % (b["name"], mode, b.get("error_message")))
                scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
                samples[mode][bench_key(b["name"])].append(b["real_time"] * scale)
            shutil.rmtree(trace_dir, ignore_errors=True)  # sparse, but do not keep gigabytes around
            print("  round %d/%d %-8s done" % (rnd + 1, args.rounds, mode), file=sys.stderr)
    med = {m: {k: statistics.median(v) for k, v in samples[m].items() if v} for m in MODES}
    return med, samples


def print_wall(args, med, samples):
    print()
    print("Wall clock, ns per call (median of %d interleaved rounds, --benchmark_min_time=%g):"
          % (args.rounds, args.min_time))
    hdr = "%-11s %-38s %9s %9s %9s %7s %9s %9s %7s" % (
        "kind", "call", "bare", "counting", "diff", "ratio", "timing", "diff", "ratio")
    print(hdr)
    print("-" * len(hdr))
    for k in args.kinds + ["clock"]:
        b, c, t = med["bare"].get(k), med["counting"].get(k), med["timing"].get(k)
        if b is None:
            continue
        print("%-11s %-38s %9.1f %9.1f %+9.1f %6.2fx %9.1f %+9.1f %6.2fx" % (
            k, DESCRIPTION[k], b, c, c - b, c / b, t, t - b, t / b))
    spread = []
    for m in MODES:
        for k, v in samples[m].items():
            if len(v) > 1 and min(v) > 0:
                spread.append((max(v) / min(v) - 1) * 100)
    if spread:
        print("(round-to-round spread: up to %.0f%%; the machine is shared, so read differences of a few "
              "ns as noise)" % max(spread))


# --- callgrind -------------------------------------------------------------------------------------

def callgrind_run(args, tmp, mode, kind, n):
    """One callgrind run, one output file per thread (--separate-threads=yes: OUT-01 is the calling
    thread, later numbers the shim's resolver and the sim's threads). Returns (files, Ir per thread
    keyed by thread number)."""
    out = os.path.join(tmp, "cg-%s-%s-%d.out" % (mode, kind, n))
    trace_dir = os.path.join(tmp, "cg-trace-%s-%s-%d" % (mode, kind, n))
    cmd = [args.valgrind, "--tool=callgrind", "--separate-threads=yes", "--callgrind-out-file=" + out,
           args.binary, "--callgrind-loop", str(n), kind]
    env = mode_env(args, mode, trace_dir)
    env["P2PSIM_ARENA_GB"] = "1"
    run(cmd, env, "callgrind %s %s N=%d" % (mode, kind, n))
    timed = timed_copies(trace_dir)
    shutil.rmtree(trace_dir, ignore_errors=True)
    files, ir = {}, {}
    for name in os.listdir(tmp):
        m = re.match(re.escape(os.path.basename(out)) + r"-(\d+)$", name)
        if not m:
            continue
        path = os.path.join(tmp, name)
        with open(path) as f:
            for line in f:
                if line.startswith("totals:") or line.startswith("summary:"):
                    files[int(m.group(1))], ir[int(m.group(1))] = path, int(line.split()[1])
                    break
    if 1 not in ir:
        die("no totals for the calling thread in %s-01" % out)
    ir["timed"] = timed
    return files, ir


def timed_copies(trace_dir):
    """Timed copies resolved in a run: timed_calls of every pair counter (format 1.0 layout)."""
    import glob
    import struct
    total = 0
    for path in glob.glob(os.path.join(trace_dir, "*.p2ptrace")):
        with open(path, "rb") as f:
            h = f.read(64)
            max_dev = struct.unpack_from("<I", h, 28)[0]
            counters = struct.unpack_from("<Q", h, 48)[0]
            f.seek(counters)
            cells = f.read(max_dev * max_dev * 2 * 48)
        for i in range(0, len(cells), 48):
            total += struct.unpack_from("<Q", cells, i + 24)[0]
    return total


FN_LINE = re.compile(r"^\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(\S.*)$")


def self_costs(path, inclusive=False, by_object=False):
    """Ir per function, self or inclusive (inlined code of other files folded into its function);
    by_object: name them "function [object]" (the shim's NCCL and driver wrappers share their names
    with the simulated libraries' functions; callgrind names a fragment by the file of its first
    line, which for a wrapper may be an inlined header's, so only the object tells them apart)."""
    p = subprocess.run([args_global.annotate, "--auto=no", "--threshold=100",
                        "--inclusive=" + ("yes" if inclusive else "no"), path],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                       # Outside the source tree: there callgrind_annotate reads sources by relative
                       # path and splits a function's inclusive cost among its inlined files' fragments.
                       cwd=os.path.dirname(os.path.abspath(path)))
    costs, started = {}, False
    for line in p.stdout.splitlines():
        if "file:function" in line:
            started = True
            continue
        m = FN_LINE.match(line) if started else None
        if not m:
            continue
        obj = re.search(r"\s+\[([^\]]*)\]$", m.group(2))
        name = re.sub(r"\s+\[[^\]]*\]$", "", m.group(2))
        name = re.sub(r"^[^:]*:(?!:)", "", name, count=1)  # drop "file:"
        if by_object:
            if obj is None:
                continue  # a fragment without its object: its function's first fragment names it
            name = "%s [%s]" % (name, os.path.basename(obj.group(1)))
        v = int(m.group(1).replace(",", ""))
        # Self costs of a function's fragments (its inlined code from other files) add up; each
        # fragment's inclusive cost is already the function's whole.
        costs[name] = max(costs.get(name, 0), v) if inclusive else costs.get(name, 0) + v
    return costs


def all_threads_self_costs(thread_files):
    costs = {}
    for path in thread_files.values():
        for name, v in self_costs(path).items():
            costs[name] = costs.get(name, 0) + v
    return costs


def short(name):
    name = re.sub(r"\(.*", "", name.replace("(anonymous namespace)::", ""))
    return name.replace("p2ptrace::shim::", "")


TIMED_KINDS = ("cross", "peer", "cross_small")  # a timed copy's verdict: timing - counting, against event2


def needed_runs(args):
    """The (mode, kind) runs to make: all of them, or with --budgets-only those a verdict reads (the
    shim's own instructions come from the counting run itself; bare only where no callgrind_annotate
    can separate them, and event2's, the timed copies' allowance)."""
    if not args.budgets_only:
        return {(m, k) for m in MODES for k in args.kinds}
    runs = {("counting", k) for k in args.kinds if k in BUDGET}
    if not args.annotate:
        runs |= {("bare", k) for k in args.kinds if k in BUDGET}
    if "event2" in args.kinds:
        runs.add(("bare", "event2"))
        runs |= {(m, k) for m in ("counting", "timing") for k in TIMED_KINDS if k in args.kinds}
    return runs


def cell(value, spec):
    """A table cell: the number as `spec` formats it, or '-' where that run was not made."""
    if value is None:
        return "%*s" % (len(spec % 0.0), "-")
    return spec % value


def callgrind(args, tmp):
    ir = {}
    files = {}
    runs = needed_runs(args)
    for mode in MODES:
        for k in args.kinds:
            if (mode, k) not in runs:
                continue
            for n in (N_SMALL, N_LARGE):
                files[mode, k, n], ir[mode, k, n] = callgrind_run(args, tmp, mode, k, n)
            print("  callgrind %-8s %-6s done" % (mode, k), file=sys.stderr)
    d = N_LARGE - N_SMALL
    # All threads (the +bare column), and the calling thread alone (thread 1: the loop's).
    threads = lambda m, k, n: sum(v for t, v in ir[m, k, n].items() if t != "timed")
    per_call = {(m, k): (threads(m, k, N_LARGE) - threads(m, k, N_SMALL)) / d for m, k in runs}
    per_call_caller = {(m, k): (ir[m, k, N_LARGE][1] - ir[m, k, N_SMALL][1]) / d for m, k in runs}
    # The share of the N calls that were timed (the rest found no free event pair: skipped).
    per_call_caller.update({("timed_share", k): (ir["timing", k, N_LARGE]["timed"] - ir["timing", k, N_SMALL]["timed"]) / d
                            for m, k in runs if m == "timing"})
    # The shim's own instructions: its wrapper's inclusive cost minus the real function's, per call.
    # Unlike shim - bare, this leaves out any change in what the simulated runtime itself executes
    # (e.g. its string compares cost a little more or less at other heap addresses).
    own = {}
    if args.annotate:
        for m in ("counting", "timing"):
            for k in args.kinds:
                api = API.get(k, "cudaMemcpyAsync")
                if api is None or (m, k) not in runs:
                    continue
                driver = api.startswith("cu") and not api.startswith("cuda")
                inc = {n: self_costs(files[m, k, n][1], inclusive=True, by_object=driver) for n in (N_SMALL, N_LARGE)}
                dd = lambda name: (inc[N_LARGE].get(name, 0) - inc[N_SMALL].get(name, 0)) / (N_LARGE - N_SMALL)
                if driver:  # libcuda is unversioned: the shim's wrapper and the driver's function share a name
                    wrapper, real = "%s [libp2ptrace.so]" % api, "%s [libcuda.so.1]" % api
                    if wrapper in inc[N_LARGE] and real in inc[N_LARGE]:
                        own[m, k] = dd(wrapper) - dd(real)
                    continue
                own[m, k] = dd(api + "@@libcudart.so.13") - dd(api)
    return per_call, per_call_caller, files, own


def print_callgrind(args, per_call, per_call_caller, files, own):
    print()
    print("Instructions per call (callgrind, (Ir(N=%d) - Ir(N=%d)) / %d):" % (N_LARGE, N_SMALL, N_LARGE - N_SMALL))
    hdr = "%-11s %-38s %8s %9s %8s %8s %-5s %6s %8s %8s %6s" % (
        "kind", "call", "bare", "counting", "+bare", "budget", "", "own", "timing", "+count", "own")
    print(hdr)
    print("-" * len(hdr))
    ok = True
    for k in args.kinds:
        b, c, t = per_call.get(("bare", k)), per_call.get(("counting", k)), per_call.get(("timing", k))
        minus = lambda x, y: None if x is None or y is None else x - y
        budget = BUDGET.get(k)
        verdict = ""
        oc, ot = own.get(("counting", k)), own.get(("timing", k))
        if budget is not None:
            # Judged on own when measured: the shim's added instructions for the very same run of
            # the real call. shim - bare also moves with the simulated runtime's own work, which
            # varies by a few instructions between processes (heap and mapping addresses).
            if oc is None and b is None:
                die("no own cost for %s (callgrind_annotate named no wrapper): run without --budgets-only" % k)
            cost = oc if oc is not None else c - b
            verdict = "ok" if cost <= budget else "OVER"
            ok = ok and cost <= budget
        print("%-11s %-38s %s %s %s %8s %-5s %6s %s %s %6s" % (
            k, DESCRIPTION[k], cell(b, "%8.1f"), cell(c, "%9.1f"), cell(minus(c, b), "%+8.1f"),
            ("<=%d%s" % (budget, "*" if k == "h2d" else "")) if budget else "", verdict,
            "%.1f" % oc if oc is not None else "", cell(t, "%8.1f"), cell(minus(t, c), "%+8.1f"),
            "%.1f" % ot if ot is not None else ""))
    if "event2" in args.kinds:
        ev = per_call["bare", "event2"]
        print("Timed copy (P2PTRACE_SAMPLE=all) over an untimed one (counting), per call: the two event records"
              " cost %.1f instructions bare (event2); the budget allows a timed copy that much." % ev)
        print("  caller = the calling thread's own Ir (callgrind --separate-threads=yes, thread 1), timing - counting;"
              " own = the same from the wrapper's inclusive cost; total = all threads (+ the resolver's EventQuery,"
              " ElapsedTime, TIMING record and wake-ups).")
        print("  timed = the share of the loop's calls that were timed (pair counters' timed_calls); the others found"
              " no free event pair (the resolver had not caught up) and were skipped: caller and total mix both.")
        print("  %-11s %9s %9s %9s %9s %9s %7s  %s" % ("kind", "caller", "-event2", "own", "total", "resolver", "timed",
                                                      "verdict"))
        for k in TIMED_KINDS:
            if k not in args.kinds:
                continue
            total = per_call["timing", k] - per_call["counting", k]
            caller = per_call_caller["timing", k] - per_call_caller["counting", k]
            o = own["timing", k] - own["counting", k] if ("timing", k) in own and ("counting", k) in own else None
            fits = caller <= ev
            ok = ok and fits
            print("  %-11s %+9.1f %+9.1f %9s %+9.1f %+9.1f %6.0f%%  %s" % (
                k, caller, caller - ev, "%+.1f" % o if o is not None else "", total, total - caller,
                100 * per_call_caller["timed_share", k], "ok" if fits else "OVER"))
    print("+bare: shim - bare. own: the shim's wrapper inclusive minus the real call inclusive: what the shim adds")
    print("to the same run of the real call (the verdict; +bare also carries the simulated runtime's own variation")
    print("between processes, a few instructions either way).")
    print("* h2d has no budget of its own; held to the same-device one.")
    if args.budgets_only:
        print("-: not measured (--budgets-only: only the runs a verdict reads).")
    print("Note: valgrind gives the program no vDSO: clock_gettime counts ~10 instructions + an uncounted "
          "system call here; natively the vDSO costs more (clock row of the wall-clock table).")
    return ok


def print_breakdown(args, files, mode="counting", kinds=None, base="bare", caller_only=False):
    print()
    print("Where the shim's instructions go (%s mode; self Ir per call by function, minus the %s run, %s,"
          " >= 0.5):" % (mode, base, "calling thread only" if caller_only else "all threads"))
    d = N_LARGE - N_SMALL
    pick = (lambda fs: {1: fs[1]}) if caller_only else (lambda fs: fs)
    for k in kinds if kinds is not None else args.kinds:
        bare = {n: all_threads_self_costs(pick(files[base, k, n])) for n in (N_SMALL, N_LARGE)}
        shim = {n: all_threads_self_costs(pick(files[mode, k, n])) for n in (N_SMALL, N_LARGE)}
        names = set().union(*bare.values(), *shim.values())
        rows = []
        for name in names:
            pb = (bare[N_LARGE].get(name, 0) - bare[N_SMALL].get(name, 0)) / d
            ps = (shim[N_LARGE].get(name, 0) - shim[N_SMALL].get(name, 0)) / d
            if abs(ps - pb) >= 0.5:
                rows.append((ps - pb, name))
        rows.sort(reverse=True)
        print("  %s (%s): total %+.1f" % (k, DESCRIPTION[k], sum(r[0] for r in rows)))
        for v, name in rows:
            print("    %+7.1f  %s" % (v, short(name)[:110]))


# --- NCCL calls (--nccl) ---------------------------------------------------------------------------
# bench/nccl_overhead on the simulated libnccl.so.2, bare and under the shim, both with the same
# environment (so the simulated NCCL, which reads its environment on every call, does the same work):
# the log tap's settings as a traced parent hands them down (NCCL_DEBUG=INFO, NCCL_DEBUG_FILE in the
# trace directory, P2PTRACE_NCCL_TAP_FILE), so the shim runs with its tap in force, and the log file
# exists and does not grow during the loop. P2PTRACE_SAMPLE=off: the collective is untimed.
NCCL_KINDS = ["version", "allreduce", "profiled", "sampled"]
NCCL_DESCRIPTION = {"version": "ncclGetVersion (nothing recorded)",
                    "allreduce": "ncclAllReduce 4 KiB, 1 rank, untimed",
                    "profiled": "the same, profiler plugin on, sampled out",
                    "sampled": "the same, every call timed (SAMPLE=all)"}
NCCL_WRAPPED = {"version": "ncclGetVersion", "allreduce": "ncclAllReduce", "profiled": "ncclAllReduce",
                "sampled": "ncclAllReduce"}
NCCL_PROGRAM = {"version": "version", "allreduce": "allreduce", "profiled": "allreduce", "sampled": "allreduce"}
# P2PTRACE_SAMPLE per kind. Off, NCCL is not given the shim as its profiler plugin; "profiled" times
# the first call only (the CUDA events' sample and the plugin's), so the loop's calls are sampled out.
NCCL_SAMPLE = {"version": "off", "allreduce": "off", "profiled": "1:1000000000:1024G", "sampled": "all"}
# bench.budgets.nccl: an untimed NCCL call, log file not grown (own); the profiler plugin's callbacks
# per sampled-out operation (the "plugin" column: their inclusive instructions, whatever NCCL does
# around them is NCCL's cost, in +bare).
NCCL_BUDGET = {"allreduce": 150}
NCCL_PLUGIN_BUDGET = {"profiled": 150}
PLUGIN_CALLBACKS = re.compile(r"::(StartEvent|StopEvent|RecordEventState)<?.*\[libp2ptrace\.so\]$")


def nccl_env(args, mode, trace_dir, sample="off"):
    env = {k: v for k, v in base_env(args).items() if not k.startswith("NCCL_")}
    env["P2PSIM_ARENA_GB"] = "1"
    pattern = os.path.join(trace_dir, "nccl.bench.%p.log")
    env.update({"P2PTRACE_DIR": trace_dir, "P2PTRACE_MAX_MB": str(args.max_mb), "P2PTRACE_SAMPLE": sample,
                "P2PTRACE_WARN": "off", "NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": pattern,
                "P2PTRACE_NCCL_TAP_FILE": pattern, "P2PTRACE_NCCL_TAP": "1",
                "LD_PRELOAD": args.shim if mode == "shim" else ""})
    if args.no_thread:
        env["NCCL_OVERHEAD_NO_THREAD"] = "1"
    os.makedirs(trace_dir, exist_ok=True)
    return env


def nccl_bench(args, tmp):
    binary = os.path.join(os.path.abspath(args.build_dir), "bench", "nccl_overhead")
    if not os.path.exists(binary):
        die("missing %s (build: cmake --build %s --target nccl_overhead p2ptrace p2psim_libs)" % (binary, args.build_dir))
    ir, files = {}, {}
    # --budgets-only: the traced runs of the judged kinds (own and plugin come from them alone; bare
    # too where no callgrind_annotate can separate them).
    judged = [k for k in NCCL_KINDS if not args.budgets_only or k in NCCL_BUDGET or k in NCCL_PLUGIN_BUDGET]
    modes = ("shim",) if args.budgets_only and args.annotate else ("bare", "shim")
    for kind in judged:
        for mode in modes:
            for n in (N_SMALL, N_LARGE):
                out = os.path.join(tmp, "nccl-%s-%s-%d.out" % (mode, kind, n))
                env = nccl_env(args, mode, os.path.join(tmp, "nccl-trace-%s-%s-%d" % (mode, kind, n)), NCCL_SAMPLE[kind])
                run([args.valgrind, "--tool=callgrind", "--separate-threads=yes", "--callgrind-out-file=" + out,
                     binary, NCCL_PROGRAM[kind], str(n)], env, "callgrind nccl %s %s N=%d" % (mode, kind, n))
                with open(out + "-01") as f:
                    ir[mode, kind, n] = next(int(l.split()[1]) for l in f if l.startswith(("totals:", "summary:")))
                files[mode, kind, n] = out + "-01"
            print("  callgrind nccl %-5s %-9s done" % (mode, kind), file=sys.stderr)
    d = N_LARGE - N_SMALL
    print()
    print("NCCL calls, instructions per call (callgrind, calling thread, (Ir(N=%d) - Ir(N=%d)) / %d):"
          % (N_LARGE, N_SMALL, d))
    hdr = "%-10s %-42s %8s %8s %8s %8s %-5s %6s %7s %8s %-5s" % (
        "kind", "call", "bare", "shim", "+bare", "budget", "", "own", "plugin", "budget", "")
    print(hdr)
    print("-" * len(hdr))
    ok = True
    for kind in judged:
        b = (ir["bare", kind, N_LARGE] - ir["bare", kind, N_SMALL]) / d if ("bare", kind, N_LARGE) in ir else None
        s = (ir["shim", kind, N_LARGE] - ir["shim", kind, N_SMALL]) / d
        own, plugin = "", None
        if args.annotate:
            inc = {n: self_costs(files["shim", kind, n], inclusive=True, by_object=True) for n in (N_SMALL, N_LARGE)}
            fn = NCCL_WRAPPED[kind]
            per = lambda name: (inc[N_LARGE].get(name, 0) - inc[N_SMALL].get(name, 0)) / d
            wrapper, real = "%s [libp2ptrace.so]" % fn, "%s [libnccl.so.2]" % fn
            if wrapper in inc[N_LARGE] and real in inc[N_LARGE]:
                own = "%.1f" % (per(wrapper) - per(real))
            # The plugin's callbacks, called by NCCL (from inside the real call): none is inside another.
            plugin = sum(per(name) for name in set(inc[N_LARGE]) | set(inc[N_SMALL]) if PLUGIN_CALLBACKS.search(name))
        # The rule, as for copies: the shim's own instructions (its wrapper's inclusive cost minus the
        # real call's, both from the same run) are judged; +bare also carries the simulated NCCL's
        # own variation between a bare and a traced process (tens of instructions either way).
        budget = NCCL_BUDGET.get(kind)
        verdict = ""
        if budget is not None:
            if not own and b is None:
                die("no own cost for %s (callgrind_annotate named no wrapper): run without --budgets-only" % kind)
            judged = float(own) if own else s - b
            verdict = "ok" if judged <= budget else "OVER"
            ok = ok and judged <= budget
        plugin_budget, plugin_verdict = NCCL_PLUGIN_BUDGET.get(kind), ""
        if plugin_budget is not None and plugin is not None:
            plugin_verdict = "ok" if plugin <= plugin_budget else "OVER"
            ok = ok and plugin <= plugin_budget
        print("%-10s %-42s %s %8.1f %s %8s %-5s %6s %7s %8s %-5s" % (
            kind, NCCL_DESCRIPTION[kind], cell(b, "%8.1f"), s, cell(None if b is None else s - b, "%+8.1f"), "<=%d" % budget if budget else "", verdict, own,
            "%.1f" % plugin if plugin else "", "<=%d" % plugin_budget if plugin_budget else "", plugin_verdict))
    print("+bare: shim - bare. own: the shim's wrapper inclusive minus the real call's, from the same run (the verdict,")
    print("as for copies; +bare when callgrind_annotate is missing).")
    print("plugin: the shim's profiler callbacks (StartEvent, StopEvent, RecordEventState) per call, inclusive;")
    print("+bare of profiled/sampled also holds what the simulated NCCL does to report its events to a plugin.")
    print("Both runs: NCCL_DEBUG=INFO, NCCL_DEBUG_FILE in the trace dir (the tap in force; the file does not grow")
    print("in the loop), P2PTRACE_SAMPLE=off. valgrind has no vDSO: clock_gettime is ~10 instructions + a syscall.")
    return ok


# --- The NCCL path per operation (--nccl-path) ---------------------------------------------
# bench/nccl_overhead pair: a 2-rank allreduce (ncclGroupStart, one ncclAllReduce per rank, both in
# the calling thread, ncclGroupEnd) per iteration, bare and under the shim, per sampling mode and size.
# Per iteration in the steady state ((X(N2) - X(N1)) / (N2 - N1), the calling thread only):
#   Ir        callgrind instructions
#   syscalls  system calls (strace -f -k): all, and those with the shim on their stack
#   CUDA      calls into libcudart/libcuda (callgrind's call edges): all, and those the shim made
# The shim's must be 0 where NCCL's kernel timers measure (the default on NCCL >= 2.27.3: the
# simulated NCCL is 2.28) and under P2PTRACE_SAMPLE=off; the syscalls 0 in every mode.
PATH_SAMPLES = [("off", "off"), ("default", None), ("all", "all"), ("events", "all")]  # events: P2PTRACE_NCCL_PROFILER=off
PATH_SIZES = [(4096, 100, 300), (16 << 20, 4, 12)]  # bytes, N1, N2
# The shim's system calls per iteration that pass: none on the call's path; what remains is the
# trace's growth (a new chunk claimed: fallocate, madvise, a few more, once per chunk of records, so
# a few hundredths per iteration when every call is sampled). One per call (a stat) fails.
SHIM_SYSCALLS = 0.1


def callgrind_edges(path):
    """Calls per (caller object, callee object) in a callgrind output file."""
    names, edges = {}, {}
    ob = cob = None

    def name(v):
        v = v.strip()
        if v.startswith("("):
            key, _, rest = v.partition(")")
            if rest.strip():
                names[key] = rest.strip()
            return names.get(key, "")
        return v

    with open(path) as f:
        for line in f:
            if line.startswith("ob="):
                ob = name(line[3:])
            elif line.startswith("cob="):
                cob = name(line[4:])
            elif line.startswith("calls="):
                n = int(line[6:].split()[0])
                key = (os.path.basename(ob or ""), os.path.basename(cob or ob or ""))
                edges[key] = edges.get(key, 0) + n
                cob = None
            elif line.startswith(("fn=", "fl=", "fi=", "fe=")):
                cob = None
    return edges


def cuda_calls(edges):
    into = lambda callee: callee.startswith(("libcudart.so", "libcuda.so"))
    total = sum(n for (caller, callee), n in edges.items() if into(callee) and not into(caller))
    shim = sum(n for (caller, callee), n in edges.items() if into(callee) and caller.startswith("libp2ptrace"))
    return total, shim


def strace_syscalls(path):
    """System calls of the first (calling) thread: all, and the shim's own (the innermost frame
    outside the C and C++ runtimes is libp2ptrace.so's; NCCL's own calls have the shim's wrapper
    further out on their stack, and stay NCCL's)."""
    runtime = ("/libc.so", "/ld-linux", "/libstdc++", "/libgcc_s", "/libm.so", "linux-vdso")
    main = None
    total = shim = 0
    current = None  # the calling thread's system call whose stack is being read; None when decided
    with open(path) as f:
        for line in f:
            if line.startswith(" > "):
                if current is not None and not any(r in line for r in runtime):
                    shim += "libp2ptrace.so" in line
                    current = None
                continue
            pid = line.split(" ", 1)[0]
            if not pid.isdigit():
                continue
            main = main or pid
            current = pid if pid == main and "resumed>" not in line else None
            total += current is not None
    return total, shim


def nccl_path_bench(args, tmp):
    binary = os.path.join(os.path.abspath(args.build_dir), "bench", "nccl_overhead")
    strace = shutil.which("strace")
    if not strace:
        die("strace is needed for --nccl-path (apt-get install strace)")
    probe = subprocess.run([strace, "-f", "-qq", "-o", os.devnull, "true"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    if probe.returncode != 0:  # ptrace refused (a container's seccomp, yama): nothing can be counted
        print("SKIP: strace cannot trace here (%s)" % probe.stderr.strip().splitlines()[-1:])
        return False
    rows = []
    bare_cache = {}
    sizes = PATH_SIZES[:1] if args.syscalls_only else PATH_SIZES
    # --syscalls-only (the ctest): the traced runs a verdict reads (events and bare are shown, not judged).
    samples = [p for p in PATH_SAMPLES if not args.syscalls_only or p[0] != "events"]
    modes = ("shim",) if args.syscalls_only else ("bare", "shim")
    for size, n1, n2 in sizes:
        for label, sample in samples:
            got = {"bare": None}
            for mode in modes:
                if mode == "bare" and size in bare_cache:
                    got["bare"] = bare_cache[size]
                    continue
                per = {}
                for n in (n1, n2):
                    tag = "%s-%s-%d-%d" % (mode, label, size, n)
                    env = nccl_env(args, mode, os.path.join(tmp, "t-" + tag), sample or "off")
                    if sample is None:
                        env.pop("P2PTRACE_SAMPLE", None)
                    if label == "events":
                        env["P2PTRACE_NCCL_PROFILER"] = "off"
                    out = os.path.join(tmp, "cg-" + tag)
                    cmd = [binary, "pair", str(n), str(size)]
                    ir, calls = 0, (0, 0)
                    if not args.syscalls_only:
                        run([args.valgrind, "--tool=callgrind", "--separate-threads=yes", "--callgrind-out-file=" + out] + cmd,
                            env, "callgrind " + tag)
                        with open(out + "-01") as f:
                            ir = next(int(l.split()[1]) for l in f if l.startswith(("totals:", "summary:")))
                        calls = cuda_calls(callgrind_edges(out + "-01"))
                    st = os.path.join(tmp, "st-" + tag)
                    env = nccl_env(args, mode, os.path.join(tmp, "s-" + tag), sample or "off")
                    if sample is None:
                        env.pop("P2PTRACE_SAMPLE", None)
                    if label == "events":
                        env["P2PTRACE_NCCL_PROFILER"] = "off"
                    run([strace, "-f", "-k", "-qq", "-o", st] + cmd, env, "strace " + tag)
                    per[n] = (ir,) + calls + strace_syscalls(st)
                d = float(n2 - n1)
                got[mode] = tuple((per[n2][i] - per[n1][i]) / d for i in range(5))
                if mode == "bare":
                    bare_cache[size] = got["bare"]
            rows.append((size, label, got["bare"], got["shim"]))
            print("  nccl path %-8s %s done" % (label, "16 MiB" if size > 4096 else "4 KiB"), file=sys.stderr)
    print()
    print("NCCL path per iteration (2-rank allreduce: group, one call per rank; calling thread; (X(N2)-X(N1))/(N2-N1)):")
    hdr = "%-7s %-8s %12s %12s %9s | %8s %8s %6s | %8s %8s %6s" % (
        "size", "sample", "Ir bare", "Ir traced", "+Ir", "sys bare", "sys trc", "shim", "cuda bare", "cuda trc", "shim")
    print(hdr)
    print("-" * len(hdr))
    ok = True
    for size, label, b, s in rows:
        bare = (lambda i: None) if b is None else (lambda i: b[i])
        print("%-7s %-8s %s %12.1f %s | %s %8.2f %6.2f | %s %8.2f %6.2f" % (
            "16 MiB" if size > 4096 else "4 KiB", label, cell(bare(0), "%12.1f"), s[0],
            cell(None if b is None else s[0] - b[0], "%+9.1f"), cell(bare(3), "%8.2f"), s[3], s[4],
            cell(bare(1), "%8.2f"), s[1], s[2]))
        # events: the way without NCCL's kernel timers (P2PTRACE_NCCL_PROFILER=off, or an NCCL before
        # 2.27.3): two CUDA events per sampled call and a wake of the timing thread (a futex); shown, not judged.
        ok = ok and (label == "events" or (s[4] <= SHIM_SYSCALLS and s[2] == 0))
    print("sample: off (P2PTRACE_SAMPLE=off), default (unset: 8:64:16M), all; events: all, with P2PTRACE_NCCL_PROFILER=off")
    print("(NCCL's kernel timers off, so operations are timed with CUDA events on NCCL's stream: the old way).")
    print("shim: of the calling thread's system calls / CUDA calls, those the shim made (its stack's innermost frame")
    print("outside the C/C++ runtimes). Met (events not judged): CUDA 0; system calls <= %.2f per iteration (a" % SHIM_SYSCALLS)
    print("trace chunk claimed now and then as the records grow; none on the call's path).")
    if args.syscalls_only:
        print("-: not measured (--syscalls-only: the traced runs the verdict reads).")
    return ok


DLSYM_KINDS = ("allreduce", "dlsym")
DLSYM_DESCRIPTION = {"allreduce": "ncclAllReduce taken with dlsym, untimed", "dlsym": "dlsym(libnccl, \"ncclAllReduce\")"}


def dlsym_bench(args, tmp):
    """bench/dlsym_overhead under callgrind: bare, LD_PRELOAD alone (the calls unseen), and with
    LD_AUDIT=libp2ptrace_audit.so (the shim's wrapper answers). Calling thread only."""
    binary = os.path.join(os.path.abspath(args.build_dir), "bench", "dlsym_overhead")
    audit = os.path.join(os.path.dirname(args.shim), "libp2ptrace_audit.so")
    for path in (binary, audit):
        if not os.path.exists(path):
            die("missing %s (build: cmake --build %s --target dlsym_overhead p2ptrace p2ptrace_audit p2psim_libs)"
                % (path, args.build_dir))
    modes = ("bare", "preload", "audit")
    ir, files = {}, {}
    for kind in DLSYM_KINDS:
        for mode in modes:
            for n in (N_SMALL, N_LARGE):
                out = os.path.join(tmp, "dlsym-%s-%s-%d.out" % (mode, kind, n))
                env = nccl_env(args, "shim" if mode != "bare" else "bare",
                               os.path.join(tmp, "dlsym-trace-%s-%s-%d" % (mode, kind, n)))
                env["LD_AUDIT"] = audit if mode == "audit" else ""
                run([args.valgrind, "--tool=callgrind", "--separate-threads=yes", "--callgrind-out-file=" + out,
                     binary, kind, str(n)], env, "callgrind dlsym %s %s N=%d" % (mode, kind, n))
                with open(out + "-01") as f:
                    ir[mode, kind, n] = next(int(l.split()[1]) for l in f if l.startswith(("totals:", "summary:")))
                files[mode, kind, n] = out + "-01"
            print("  callgrind dlsym %-7s %-9s done" % (mode, kind), file=sys.stderr)
    d = N_LARGE - N_SMALL
    print()
    print("Through dlsym, instructions per call (callgrind, calling thread, (Ir(N=%d) - Ir(N=%d)) / %d):"
          % (N_LARGE, N_SMALL, d))
    hdr = "%-10s %-38s %8s %8s %8s %8s %6s" % ("kind", "call", "bare", "preload", "audit", "+bare", "own")
    print(hdr)
    print("-" * len(hdr))
    for kind in DLSYM_KINDS:
        per = {m: (ir[m, kind, N_LARGE] - ir[m, kind, N_SMALL]) / d for m in modes}
        own = ""
        if kind == "allreduce" and args.annotate:  # the wrapper's inclusive cost minus the real call's
            inc = {n: self_costs(files["audit", kind, n], inclusive=True, by_object=True) for n in (N_SMALL, N_LARGE)}
            one = lambda name: (inc[N_LARGE].get(name, 0) - inc[N_SMALL].get(name, 0)) / d
            wrapper, real = "ncclAllReduce [libp2ptrace.so]", "ncclAllReduce [libnccl.so.2]"
            if wrapper in inc[N_LARGE] and real in inc[N_LARGE]:
                own = "%.1f" % (one(wrapper) - one(real))
        print("%-10s %-38s %8.1f %8.1f %8.1f %+8.1f %6s" % (kind, DLSYM_DESCRIPTION[kind], per["bare"], per["preload"],
                                                            per["audit"], per["audit"] - per["bare"], own))
    print("preload: LD_PRELOAD=libp2ptrace.so alone (the calls never reach it); audit: with")
    print("LD_AUDIT=libp2ptrace_audit.so (they reach the wrapper). own: the wrapper's inclusive cost minus the")
    print("real call's. NCCL_DEBUG=INFO into the trace dir (the tap in force, not growing), P2PTRACE_SAMPLE=off.")
    return True


# --- NCCL's timer work when threads share a process (--nccl-threads) ----------------------------------
# examples/nccl_ring, 256 iterations of its five operations at 64 KiB, under `p2ptrace run` with the
# default sample, as one process whose 4 threads drive 4 GPUs and as 4 processes: the operations the
# simulated NCCL ran with KernelCh in their mask (its timer work, P2PSIM_KERNELCH_FILE) and the
# NCCL_KERNEL records the traces hold. The same job must cost NCCL the same timer work either way.
THREADS_ARGS = ["-n", "256", "-b", "64K", "-e", "64K"]


def nccl_threads_bench(args, tmp):
    bd = os.path.abspath(args.build_dir)
    cli, p2psim, ring = (os.path.join(bd, "bin", n) for n in ("p2ptrace", "p2psim", "nccl_ring"))
    for path in (cli, p2psim, ring):
        if not os.path.exists(path):
            die("missing %s (build: cmake --build %s)" % (path, bd))
    rows = []
    for label, hosts, extra in (("4 processes", "node0:4", []), ("1 process, 4 threads", "node0:1", ["-t", "4"])):
        work = os.path.join(tmp, label.replace(" ", "-").replace(",", ""))
        os.makedirs(os.path.join(work, "id"))
        env = dict(os.environ, P2PSIM_KERNELCH_FILE=os.path.join(work, "kernelch.txt"),
                   P2PSIM_NCCL_DIR=os.path.join(work, "id"), P2PTRACE_WARN="off")
        for k in ("P2PTRACE_SAMPLE", "P2PTRACE_NCCL_PROFILER", "NCCL_DEBUG", "NCCL_DEBUG_FILE", "CUDA_VISIBLE_DEVICES"):
            env.pop(k, None)
        trace = os.path.join(work, "trace")
        run([cli, "run", "--dir", trace, "--", p2psim, "launch", "--topology", args.topology, "--hosts", hosts, "--",
             ring] + extra + THREADS_ARGS + [os.path.join(work, "id")], env, "nccl_ring " + label)
        per_pid = {}
        with open(os.path.join(work, "kernelch.txt")) as f:
            for line in f:
                pid, n = line.split()
                per_pid[pid] = max(per_pid.get(pid, 0), int(n))
        records = calls = 0
        for name in os.listdir(trace):
            if name.endswith(".p2ptrace"):
                out = subprocess.run([cli, "dump", os.path.join(trace, name), "--json"], stdout=subprocess.PIPE,
                                     text=True, check=True).stdout
                records += out.count('"kind":"nccl_kernel"')
                calls += out.count('"kind":"nccl_op"')
        rows.append((label, calls, sum(per_pid.values()), records))
    print()
    print("NCCL's timer work, nccl_ring %s, default sample (8:64:16M):" % " ".join(THREADS_ARGS))
    print("%-22s %8s %18s %16s" % ("job", "calls", "ops with KernelCh", "NCCL_KERNEL"))
    for label, calls, ops, records in rows:
        print("%-22s %8d %18d %16d" % (label, calls, ops, records))
    (_, _, procs, _), (_, _, threads, _) = rows
    ok = threads <= procs + procs // 50 and all(ops == records for _, _, ops, records in rows)
    print("threads vs processes: %+d operations with timer work (at most 2%% more passes), every one recorded: %s"
          % (threads - procs, all(ops == records for _, _, ops, records in rows)))
    return ok


args_global = None


def main():
    global args_global
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "default"))
    ap.add_argument("--shim", default=None, help="libp2ptrace.so to measure (default: the build dir's)")
    ap.add_argument("--topology", default=os.path.join(ROOT, "tests", "sim", "topologies", "demo-8gpu.json"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.3, help="--benchmark_min_time per benchmark (s)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma list of " + ",".join(KINDS))
    ap.add_argument("--max-mb", type=int, default=4096, help="P2PTRACE_MAX_MB (the trace file is sparse)")
    ap.add_argument("--trace-root", default=None, help="where the temporary P2PTRACE_DIRs go (default: a temp dir)")
    ap.add_argument("--no-benchmark", action="store_true", help="skip the wall-clock runs")
    ap.add_argument("--no-callgrind", action="store_true", help="skip the instruction counts")
    ap.add_argument("--breakdown", action="store_true", help="per-function instruction breakdown of the shim")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (callgrind outputs)")
    ap.add_argument("--report-only", action="store_true", help="exit 0 even when a budget is exceeded")
    ap.add_argument("--nccl", action="store_true",
                    help="instead: NCCL calls (bench/nccl_overhead: ncclGetVersion, an untimed ncclAllReduce), callgrind only")
    ap.add_argument("--nccl-path", action="store_true",
                    help="instead: per NCCL operation, bare vs traced, per sampling mode and size: instructions, "
                         "system calls and CUDA calls; callgrind and strace")
    ap.add_argument("--nccl-threads", action="store_true",
                    help="instead: NCCL's timer work (operations run with KernelCh) when one process's threads drive "
                         "several GPUs vs the same job as processes")
    ap.add_argument("--syscalls-only", action="store_true",
                    help="with --nccl-path: 4 KiB only, system calls only (strace; no callgrind): the ctest")
    ap.add_argument("--budgets-only", action="store_true",
                    help="only the runs a budget's verdict reads (the ctests); other cells print as -")
    ap.add_argument("--dlsym", action="store_true",
                    help="instead: calls taken with dlsym, bare vs through libp2ptrace_audit.so (bench/dlsym_overhead), callgrind only")
    ap.add_argument("--no-thread", action="store_true",
                    help="with --nccl: no idle thread in nccl_overhead (bare stays single-threaded; see nccl_overhead.cc)")
    args = ap.parse_args()
    args_global = args
    args.kinds = [k for k in args.kinds.split(",") if k]
    for k in args.kinds:
        if k not in KINDS:
            die("unknown kind %r" % k)
    bd = os.path.abspath(args.build_dir)
    args.binary = os.path.join(bd, "bench", "shim_overhead")
    args.shim = os.path.abspath(args.shim) if args.shim else os.path.join(bd, "lib", "libp2ptrace.so")
    args.sim_lib = os.path.join(bd, "sim", "lib")
    args.topology = os.path.abspath(args.topology)
    if args.nccl_threads:
        tmp = tempfile.mkdtemp(prefix="p2ptrace-bench-", dir=args.trace_root)
        try:
            ok = nccl_threads_bench(args, tmp)
            print("budgets: %s" % ("met" if ok else "EXCEEDED"))
            return 0 if ok or args.report_only else 1
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.nccl or args.dlsym or args.nccl_path:
        args.valgrind, args.annotate = shutil.which("valgrind"), shutil.which("callgrind_annotate")
        if not args.valgrind and not args.syscalls_only:
            die("valgrind is needed for --nccl")
        for path in (args.shim, os.path.join(args.sim_lib, "libnccl.so.2")):
            if not os.path.exists(path):
                die("missing %s (build: cmake --build %s --target nccl_overhead p2ptrace p2psim_libs)" % (path, bd))
        tmp = tempfile.mkdtemp(prefix="p2ptrace-bench-", dir=args.trace_root)
        try:
            print("shim: %s\nsim: %s\ndate: %s" % (args.shim, args.sim_lib, time.strftime("%Y-%m-%d %H:%M %Z")))
            ok = (dlsym_bench(args, tmp) if args.dlsym else nccl_path_bench(args, tmp) if args.nccl_path
                  else nccl_bench(args, tmp))
            print("budgets: %s" % ("met" if ok else "EXCEEDED"))
            return 0 if ok or args.report_only else 1
        finally:
            if args.keep:
                print("kept: " + tmp, file=sys.stderr)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    for path in (args.binary, args.shim, os.path.join(args.sim_lib, "libcudart.so.13"), args.topology):
        if not os.path.exists(path):
            die("missing %s (build: cmake --build %s --target shim_overhead p2ptrace p2psim_libs)" % (path, bd))
    if not args.no_callgrind:
        args.valgrind = shutil.which("valgrind")
        args.annotate = shutil.which("callgrind_annotate")
        if not args.valgrind:
            die("valgrind is needed for the instruction counts; or pass --no-callgrind")
        if args.breakdown and not args.annotate:
            die("callgrind_annotate is needed for --breakdown")

    tmp = tempfile.mkdtemp(prefix="p2ptrace-bench-", dir=args.trace_root)
    try:
        print("shim_overhead: %s\nshim: %s\ntopology: %s\ndate: %s, %d CPUs"
              % (args.binary, args.shim, args.topology, time.strftime("%Y-%m-%d %H:%M %Z"), os.cpu_count()))
        ok = True
        if not args.no_benchmark:
            med, samples = wall_clock(args, tmp)
            print_wall(args, med, samples)
        if not args.no_callgrind:
            per_call, per_call_caller, files, own = callgrind(args, tmp)
            ok = print_callgrind(args, per_call, per_call_caller, files, own)
            if args.breakdown:
                print_breakdown(args, files)
                timed = [k for k in args.kinds if k in ("cross", "peer")]
                print_breakdown(args, files, "timing", timed, base="counting", caller_only=True)
                print_breakdown(args, files, "timing", timed, base="counting")
            print("budgets: %s" % ("met" if ok else "EXCEEDED"))
        return 0 if ok or args.report_only else 1
    finally:
        if args.keep:
            print("kept: " + tmp, file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
