#!/usr/bin/env python3
"""NVML calls per CUDA copy and per NCCL call: none. The shim reads the node's links through NVML
at job start and at exit (core/link_health.h) and resolves a pair's link once; a copy or a
collective must never reach NVML, which on a real node takes a driver lock and can take
milliseconds.

Each workload runs on the simulated node under LD_PRELOAD=libp2ptrace.so and valgrind's callgrind
twice, with N and FACTOR*N calls; callgrind's call edges count every call into libnvidia-ml.so.1's
nvml* functions from outside it, per function. The test passes when each function's count is the same
at N and FACTOR*N, the shim's own are nonzero (the start and exit readings did call NVML), the
workload's calls grew by (FACTOR-1)*N (the loop ran), and each run's report holds a start and an exit
reading with no note that NVML did not answer (a reading cut short by its deadline would make the
counts differ for a reason that is not the per-call path). Then each workload runs once natively
for the readings' times (`read_ms`, as the reader measured them; under valgrind they mean nothing).

  bench/nvml_calls.py [--build-dir build/default] [--n 1000] [--factor 10] [--workloads peer,allreduce] [--keep]

Exit status 0 when the counts hold, 1 with the reason otherwise. Python standard library only.
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPOLOGY = os.path.join(ROOT, "tests", "sim", "topologies", "demo-8gpu.json")

# name -> (program in the build's bench/, its arguments for n calls, the function it calls n times).
# Each program makes a few calls of its own around the loop (warm-up, setup): the growth is what is
# checked, not the count.
WORKLOADS = {
    "peer": ("shim_overhead", lambda n: ["--callgrind-loop", str(n), "peer"], "cudaMemcpyPeerAsync"),
    "allreduce": ("nccl_overhead", lambda n: ["allreduce", str(n)], "ncclAllReduce"),
}


def die(msg):
    print("nvml_calls: " + msg, file=sys.stderr)
    sys.exit(1)


def callgrind_calls(path):
    """Calls per (caller object, callee object, callee function) in a callgrind output file (all
    threads: the readings run on helper threads). Names are compressed as "(id) name" the first
    time and "(id)" after; objects and functions have id spaces of their own."""
    names = {"ob": {}, "fn": {}}
    ob = cob = cfn = None
    out = collections.Counter()

    def name(space, v):
        v = v.strip()
        if v.startswith("("):
            key, _, rest = v.partition(")")
            if rest.strip():
                names[space][key] = rest.strip()
            return names[space].get(key, "")
        return v

    with open(path, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                ob, cob = name("ob", line[3:]), None
            elif line.startswith("cob="):
                cob = name("ob", line[4:])
            elif line.startswith("fn="):
                name("fn", line[3:])
                cob = cfn = None
            elif line.startswith("cfn="):
                cfn = name("fn", line[4:])
            elif line.startswith("calls="):
                n = int(line[6:].split()[0])
                # A callee in the caller's own object has no cob= line.
                out[os.path.basename(ob or ""), os.path.basename(cob or ob or ""), cfn or ""] += n
                cob = None
    return out


def nvml_calls(edges):
    """NVML API calls from outside libnvidia-ml, per (caller object, function). Its constructors,
    destructors and internal calls are not the API's."""
    out = collections.Counter()
    for (caller, callee, fn), n in edges.items():
        if callee.startswith("libnvidia-ml") and not caller.startswith("libnvidia-ml") and fn.startswith("nvml"):
            out[caller, fn] += n
    return out


def workload_calls(edges, program, fn):
    return sum(n for (caller, _, f), n in edges.items() if caller == program and f.split("@")[0] == fn)


def env_for(args, trace_dir, valgrind):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("P2PTRACE_", "P2PSIM_", "NCCL_"))}
    env.update({"LD_LIBRARY_PATH": args.sim_lib, "P2PSIM_TOPOLOGY": TOPOLOGY, "LD_PRELOAD": args.shim,
                "P2PTRACE_DIR": trace_dir, "P2PTRACE_WARN": "off"})
    if valgrind:
        env["P2PSIM_ARENA_GB"] = "1"  # valgrind cannot reserve the sim's default 160 GiB per GPU
        # Under valgrind a reading takes seconds: its NVML deadline (3 s by default) must not cut it.
        env["P2PTRACE_NVML_TIMEOUT_MS"] = "600000"
    os.makedirs(trace_dir)
    return env


def run(cmd, env, what):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        die("%s failed (exit %d): %s\n%s" % (what, p.returncode, " ".join(cmd), (p.stderr or p.stdout)[-3000:]))
    return p


def links_of(args, trace_dir, what):
    """The report's link health of the run's one host: a start and an exit reading, NVML answered."""
    p = run([args.cli, "report", trace_dir, "--json"], dict(os.environ, LD_PRELOAD=""), "report " + what)
    links = json.loads(p.stdout).get("links") or []
    if len(links) != 1:
        die("%s: the report has %d hosts' link readings, not 1" % (what, len(links)))
    h = links[0]
    if h.get("readings") != 1 or h.get("exit_readings") != 1:
        die("%s: %s start and %s exit readings, not 1 and 1" % (what, h.get("readings"), h.get("exit_readings")))
    nvml_notes = [n for n in h.get("notes", []) if "NVML" in n or "nvidia-ml" in n]
    if nvml_notes:
        die("%s: a reading lacks NVML's part: %s" % (what, "; ".join(nvml_notes)))
    return h


def reading_times(trace_dir):
    """Each reading's read_ms as written in the trace (the readings are text blocks, kept as the
    text core/link_health.h serializes)."""
    got = {}
    for name in os.listdir(trace_dir):
        if name.endswith(".p2ptrace"):
            with open(os.path.join(trace_dir, name), "rb") as f:
                for m in re.finditer(rb"p2ptrace-links 1\n(?:[a-z_]+\t[^\n]*\n)*?when\t(start|exit)\n(?:read_ms\t([0-9.]+)\n)?", f.read()):
                    got[m.group(1).decode()] = float(m.group(2)) if m.group(2) else None
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "default"))
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--factor", type=int, default=10)
    ap.add_argument("--workloads", default="peer,allreduce")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (traces, callgrind outputs)")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    args.shim = os.path.join(build, "lib", "libp2ptrace.so")
    args.sim_lib = os.path.join(build, "sim", "lib")
    args.cli = os.path.join(build, "bin", "p2ptrace")
    valgrind = shutil.which("valgrind")
    if not valgrind:
        die("valgrind is needed (apt-get install valgrind)")
    kinds = [k for k in args.workloads.split(",") if k]
    for k in kinds:
        if k not in WORKLOADS:
            die("unknown workload %s (%s)" % (k, ", ".join(WORKLOADS)))
    for path in [args.shim, os.path.join(args.sim_lib, "libnvidia-ml.so.1"), args.cli] + \
            [os.path.join(build, "bench", WORKLOADS[k][0]) for k in kinds]:
        if not os.path.exists(path):
            die("missing %s (build: cmake --build %s --target shim_overhead nccl_overhead p2ptrace p2ptrace_cli p2psim_libs)"
                % (path, args.build_dir))

    tmp = tempfile.mkdtemp(prefix="p2ptrace-nvml-calls-")
    failures = []
    try:
        ns = (args.n, args.n * args.factor)
        for k in kinds:
            program, argv, fn = WORKLOADS[k]
            binary = os.path.join(build, "bench", program)
            nvml, work = {}, {}
            for n in ns:
                tag = "%s-%d" % (k, n)
                trace_dir = os.path.join(tmp, "trace-" + tag)
                out = os.path.join(tmp, "callgrind-" + tag)
                run([valgrind, "--tool=callgrind", "--callgrind-out-file=" + out, binary] + argv(n),
                    env_for(args, trace_dir, True), "callgrind " + tag)
                edges = callgrind_calls(out)
                nvml[n], work[n] = nvml_calls(edges), workload_calls(edges, program, fn)
                links_of(args, trace_dir, tag)
            # Native, for the readings' times.
            trace_dir = os.path.join(tmp, "trace-%s-native" % k)
            run([binary] + argv(args.n), env_for(args, trace_dir, False), "%s native" % k)
            h = links_of(args, trace_dir, "%s native" % k)
            times = reading_times(trace_dir)

            small, big = nvml[ns[0]], nvml[ns[1]]
            shim = lambda c: sum(v for (caller, _), v in c.items() if caller.startswith("libp2ptrace"))
            print("%s: %s N=%d: %d %s calls, N=%d: %d; NVML calls %d and %d (the shim's %d and %d)"
                  % (k, program, ns[0], work[ns[0]], fn, ns[1], work[ns[1]], sum(small.values()), sum(big.values()),
                     shim(small), shim(big)))
            print("  readings (native, N=%d): start %s ms, exit %s ms; the report's slowest: %s ms"
                  % (args.n, times.get("start"), times.get("exit"), h.get("read_ms")))
            per_fn = collections.Counter()
            for (caller, f), v in small.items():
                per_fn[f] += v
            print("  per function, N=%d: " % ns[0] + ", ".join("%s %d" % (f, v) for f, v in sorted(per_fn.items())))
            if work[ns[1]] - work[ns[0]] != ns[1] - ns[0]:
                failures.append("%s: %s calls grew by %d, not %d: the loop did not run as asked"
                                % (k, fn, work[ns[1]] - work[ns[0]], ns[1] - ns[0]))
            if shim(small) == 0:
                failures.append("%s: no NVML call of the shim's at all: the link readings did not run" % k)
            for key in sorted(set(small) | set(big)):
                if small.get(key, 0) != big.get(key, 0):
                    failures.append("%s: %s called %s %d times at N=%d, %d at N=%d: NVML on the per-call path"
                                    % (k, key[0], key[1], small.get(key, 0), ns[0], big.get(key, 0), ns[1]))
    finally:
        if args.keep:
            print("kept " + tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        for f in failures:
            print("FAIL: " + f)
        sys.exit(1)
    print("NVML calls: the same at N and %dxN (%s)" % (args.factor, ", ".join(kinds)))


if __name__ == "__main__":
    main()
