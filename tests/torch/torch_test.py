#!/usr/bin/env python3
"""Real, unmodified PyTorch on the simulated node, bare and under `p2ptrace run`.

Each case runs one program twice through `p2psim launch` on tests/sim/topologies/mixed-8gpu.json
(NVLink 0-1 and 4-5, PCIe switches {2,3} and {6,7}, two sockets): bare, and as
`p2ptrace run -- CMD`. It asserts the same exit status, the same program output (the traced run's
stdout is the bare one followed by the report), the program's own checks, and then the report
(`p2ptrace report --json`) against what the program did: every GPU pair by physical index, its
class, calls and bytes, and every NCCL operation's calls and bytes per communicator.

Usage: torch_test.py --p2psim BIN --p2ptrace BIN --tag 2.10 CASE
CASE: copies | copies-visible | train-lazy | train-eager-visible | graph | raise | late
The environment comes from scripts/fetch-torch.py (run by scripts/test.sh); a missing one fails.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOPOLOGY = os.path.join(ROOT, "tests", "sim", "topologies", "mixed-8gpu.json")

# mixed-8gpu.json, by physical GPU index: what a direct copy between two GPUs uses, and what NCCL does.
NVLINK = {frozenset(p) for p in ((0, 1), (4, 5))}
SWITCH = {0: "sw0", 1: "sw0", 2: "sw1", 3: "sw1", 4: "sw2", 5: "sw2", 6: "sw3", 7: "sw3"}
SOCKET = {g: 0 if g < 4 else 1 for g in range(8)}


def copy_class(a, b):
    if frozenset((a, b)) in NVLINK:
        return "nvlink"
    return "pcie_p2p" if SOCKET[a] == SOCKET[b] else "host_staged"


def nccl_class(a, b):
    """NCCL 2.27-2.30 on Intel: P2P up to PXB (same switch), else host memory (SHM)."""
    if frozenset((a, b)) in NVLINK:
        return "nvlink"
    return "pcie_p2p" if SWITCH[a] == SWITCH[b] else "shm"


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, env, timeout=600):
    done = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def bundled_nccl(tag):
    """The NCCL release the pinned PyTorch installs (nvidia-nccl-cu12/-cu13): the sim plays that one."""
    with open(os.path.join(HERE, f"requirements-{tag}.txt")) as f:
        for line in f:
            m = re.match(r"nvidia-nccl-cu\d+==(\S+)", line)
            if m:
                return m.group(1)
    raise Failure(f"requirements-{tag}.txt pins no nvidia-nccl package")


class Case:
    def __init__(self, p2psim, p2ptrace, venv, work, nccl):
        self.p2psim, self.p2ptrace = p2psim, p2ptrace
        self.python = os.path.join(venv, "bin", "python")
        self.work = work
        self.nccl = nccl

    def both(self, command, env_extra, sort_lines):
        """Runs COMMAND bare and traced; returns (report json, the program's stdout lines)."""
        env = dict(os.environ, P2PSIM_NCCL_VERSION=self.nccl, **env_extra)
        env.pop("LD_PRELOAD", None)
        launch = [self.p2psim, "launch", "--topology", TOPOLOGY, "--hosts", "node0:1"]
        rc_bare, out_bare, err_bare = run(launch + ["--dir", os.path.join(self.work, "bare"), "--"] + command, env)
        trace = os.path.join(self.work, "trace")
        rc_traced, out_traced, err_traced = run(
            launch + ["--dir", os.path.join(self.work, "traced"), "--",
                      self.p2ptrace, "run", "--dir", trace, "--"] + command, env)
        print(f"bare: exit {rc_bare}\n{out_bare}{err_bare[-3000:]}\ntraced: exit {rc_traced}\n{out_traced[:2000]}"
              f"{err_traced[-3000:]}")
        check(rc_bare == 0, f"the bare run failed (exit {rc_bare})")
        check(rc_traced == rc_bare, f"exit status {rc_traced} traced, {rc_bare} bare")
        marker = "[rank 0] p2ptrace report: "
        check(marker in out_traced, "no report after the traced run")
        program_traced = out_traced[:out_traced.index(marker)]
        a, b = out_bare.splitlines(), program_traced.splitlines()
        if sort_lines:  # torchrun's workers share one stdout: lines interleave differently run to run
            a, b = sorted(a), sorted(b)
        check(a == b, f"the program's output differs traced:\n{program_traced}\nbare:\n{out_bare}")
        for stream in (err_bare, err_traced):
            check("is not simulated" not in stream, "the program reached a function the sim does not model")
        rc, out, err = run([self.p2ptrace, "report", trace, "--json"], env)
        check(rc == 0, f"p2ptrace report --json failed: {err}")
        return json.loads(out), a

    @staticmethod
    def pairs(report):
        out = {}
        for p in report["pairs"]:
            key = (p["src"]["gpu"], p["dst"]["gpu"])
            check(key[0] != key[1], f"a GPU paired with itself: {p}")
            check(key not in out, f"pair {key} listed twice")
            out[key] = p
        return out


def copies(case, visible):
    """Single process: copies between GPU pairs of every class, by CUDA ordinal under `visible`."""
    physical = [int(x) for x in visible.split(",")] if visible else list(range(8))
    specs = ["0:1", "2:3", "1:2", "3:4"] if not visible else ["0:1", "2:0", "3:0"]
    env = {"CUDA_VISIBLE_DEVICES": visible} if visible else {}
    report, lines = case.both([case.python, os.path.join(HERE, "copies.py")] + specs, env, sort_lines=False)
    check(len(lines) == len(specs) and all("equal [True, True, True, True, True]" in l for l in lines),
          "a copy's data differs")
    want = {}
    for spec in specs:
        a, b = (physical[int(x)] for x in spec.split(":"))
        for key, calls in (((a, b), 2), ((b, a), 1)):
            total = want.get(key, (0, 0))[0] + calls
            want[key] = (total, total * (4 << 20))
    got = case.pairs(report)
    check(set(got) == set(want), f"pairs {sorted(got)}, want {sorted(want)}")
    for (a, b), (calls, nbytes) in want.items():
        p = got[(a, b)]
        check(p["source"] == "cuda", f"GPU{a}->GPU{b}: source {p['source']}")
        check(p["transport"] == copy_class(a, b), f"GPU{a}->GPU{b}: {p['transport']}, want {copy_class(a, b)}")
        check((p["calls"], p["bytes"]) == (calls, nbytes),
              f"GPU{a}->GPU{b}: {p['calls']} calls {p['bytes']} bytes, want {calls} and {nbytes}")
        check(p["src"]["name"] == f"GPU{a}" and p["dst"]["name"] == f"GPU{b}", f"names {p['src']} {p['dst']}")
    (rank,) = report["ranks"]
    check(rank["gpus"] == physical, f"the process's CUDA ordinals name GPUs {rank['gpus']}, want {physical}")
    # A refused peer check is told by the node's GPU names, never the process's ordinals.
    staged = {(a, b) for (a, b) in want if copy_class(a, b) == "host_staged"}
    told = 0
    for f in report["findings"]:
        for ev in f["evidence"]:
            if ev.startswith("cudaDeviceCanAccessPeer says 0 between "):
                told += 1
                a, b = (int(g[3:]) for g in ev.split("between ")[1].split(" and "))
                check((a, b) in staged or (b, a) in staged, f"evidence names no host-staged pair of the job: {ev}")
    check(told > 0 or not staged, "no finding tells the refused peer check of the host-staged pairs")


# train.py's sizes (float32 elements).
N, CHUNK, RING, WORLD = 1 << 18, 1 << 12, 1 << 14, 4


def train(case, init, visible):
    physical = [int(x) for x in visible.split(",")] if visible else list(range(8))
    env = {"TRAIN_INIT": init}
    if visible:
        env["CUDA_VISIBLE_DEVICES"] = visible
    command = [case.python, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD),
               "--master-port", str(free_port()), os.path.join(HERE, "train.py")]
    report, lines = case.both(command, env, sort_lines=True)
    check(report["job"]["nccl_versions"] == [case.nccl], f"NCCL {report['job']['nccl_versions']}, want {case.nccl}")
    done = [l for l in lines if re.search(r"rank \d/4 on cuda:\d", l)]
    check(len(done) == WORLD, f"{len(done)} ranks finished, want {WORLD}")
    check(all("WRONG" not in l for l in done), "a collective's result is wrong")
    check(sum("new_group ok" in l for l in done) == 2, "new_group's all_reduce did not run on ranks 0 and 1")
    gpu = physical[:WORLD]  # rank r drives cuda:r (LOCAL_RANK)
    ranks = sorted(report["ranks"], key=lambda r: r["rank"])
    check([r["rank"] for r in ranks] == list(range(WORLD)), f"ranks {[r['rank'] for r in ranks]}")
    check([r["gpu"] for r in ranks] == gpu, f"ranks' GPUs {[r['gpu'] for r in ranks]}, want {gpu}")

    # Pairs: NCCL's connections, and the sends of all_to_all_single (CHUNK to every other rank) and
    # batch_isend_irecv (RING to the next rank). A rank's send to itself crosses no link.
    got = case.pairs(report)
    for (a, b), p in got.items():
        check(p["transport"] == nccl_class(a, b), f"GPU{a}->GPU{b}: {p['transport']}, want {nccl_class(a, b)}")
        check(p["fallback"] == (nccl_class(a, b) == "shm"), f"GPU{a}->GPU{b}: fallback {p['fallback']}")
    want = {}
    for r in range(WORLD):
        for q in range(WORLD):
            if q != r:
                ring = q == (r + 1) % WORLD
                want[(gpu[r], gpu[q])] = (1 + ring, 4 * (CHUNK + (RING if ring else 0)))
    sent = {k: (p["calls"], p["bytes"]) for k, p in got.items() if p["bytes"]}
    check(sent == want, f"sends per pair {sorted(sent.items())}, want {sorted(want.items())}")

    # Operations per communicator: the world's and new_group's.
    ops = {}
    for o in report["nccl_ops"]:
        ops.setdefault(o["nranks"], {})[o["op"]] = (o["calls"], o["bytes"])
    world_ops = ops.get(WORLD, {})
    want_world = {
        "ncclAllReduce": (2 * WORLD, WORLD * 4 * N + WORLD * 4),  # all_reduce, and barrier's one float
        "ncclBroadcast": (WORLD, WORLD * 4 * N),
        "ncclAllGather": (WORLD, WORLD * 4 * N * WORLD),
        "ncclReduceScatter": (WORLD, WORLD * 4 * N * WORLD),
    }
    if "ncclAlltoAll" in world_ops:  # PyTorch with NCCL 2.28+: all_to_all_single is one ncclAlltoAll
        want_world["ncclAlltoAll"] = (WORLD, WORLD * 4 * CHUNK * WORLD)  # nccl-tests' size: a block per rank
        want_world["ncclSend"] = want_world["ncclRecv"] = (WORLD, WORLD * 4 * RING)
    else:  # grouped send/recv to every rank, itself included
        a2a_sends = WORLD * WORLD
        want_world["ncclSend"] = want_world["ncclRecv"] = (a2a_sends + WORLD, 4 * (a2a_sends * CHUNK + WORLD * RING))
    check(world_ops == want_world, f"world operations {world_ops}, want {want_world}")
    check(ops.get(2) == {"ncclAllReduce": (2, 2 * 4 * N)}, f"new_group's operations {ops.get(2)}")


# graph.py's sizes and replays.
GRAPH_N, GRAPH_REPLAYS, GRAPH_WORLD = 1 << 16, 5, 2


def graph(case):
    """torch.cuda.graph capturing all_reduce and broadcast, replayed: each replay counts, once per rank."""
    command = [case.python, "-m", "torch.distributed.run", "--nproc-per-node", str(GRAPH_WORLD),
               "--master-port", str(free_port()), os.path.join(HERE, "graph.py")]
    report, lines = case.both(command, {"GRAPH_REPLAYS": str(GRAPH_REPLAYS)}, sort_lines=True)
    done = [l for l in lines if re.search(r"rank \d/2 on cuda:\d graph replays", l)]
    check(len(done) == GRAPH_WORLD and all(l.endswith(" ok") for l in done), f"ranks' results {done}")
    ops = {o["op"]: (o["calls"], o["bytes"], o["graph_calls"], o["graph_bytes"]) for o in report["nccl_ops"]}
    size, replays = 4 * GRAPH_N, GRAPH_WORLD * GRAPH_REPLAYS
    want = {
        # one eager all_reduce per rank, then one per replay per rank
        "ncclAllReduce": (GRAPH_WORLD + replays, (GRAPH_WORLD + replays) * size, replays, replays * size),
        "ncclBroadcast": (replays, replays * size, replays, replays * size),
    }
    check(ops == want, f"operations {ops}, want {want}")


def raise_(case):
    """Rank 2 raises mid-training; torchrun stops the others, waiting in an all_gather rank 2 never
    called. The report, post mortem, names rank 2 first (exited with status 1 while the others waited)
    and the others waiting in ncclAllGather #3 of the world."""
    env = dict(os.environ, P2PSIM_NCCL_VERSION=case.nccl, TRAIN_RAISE_RANK="2", P2PSIM_NCCL_TIMEOUT="300")
    env.pop("LD_PRELOAD", None)
    trace = os.path.join(case.work, "trace")
    command = [case.python, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD),
               "--master-port", str(free_port()), os.path.join(HERE, "train.py")]
    rc, out, err = run([case.p2psim, "launch", "--topology", TOPOLOGY, "--hosts", "node0:1", "--dir",
                        os.path.join(case.work, "traced"), "--", case.p2ptrace, "run", "--dir", trace, "--"] + command, env)
    print(f"traced: exit {rc}\n{out[-3000:]}{err[-3000:]}")
    check(rc != 0, "torchrun succeeded although rank 2 raised")
    check("a training step failed (TRAIN_RAISE_RANK)" in err, "rank 2's exception is not in the job's output")
    rc, out, err = run([case.p2ptrace, "report", trace, "--json"], env)
    check(rc == 0, f"p2ptrace report --json failed: {err}")
    st = json.loads(out)["stopped"]
    check(st["present"], f"no stopped finding: {json.dumps(st)[:2000]}")
    first = st["first_process"]
    check(first >= 0 and st["processes"][first]["rank"] == 2, f"first: {st['verdict']}")
    check(st["processes"][first]["exit_status"] == 1, f"rank 2's exit status {st['processes'][first]}")
    check("while the others waited for it" in st["verdict"], st["verdict"])
    world = [c for c in st["comms"] if c["nranks"] == WORLD]
    check(len(world) == 1, f"communicators {[(c['id'], c['nranks']) for c in st['comms']]}")
    check("ranks 0-1, 3 wait in ncclAllGather #3" in world[0]["waits"] and "rank 2 never called #3" in world[0]["waits"],
          world[0]["waits"])


def late(case):
    """Rank 2 sleeps 20 ms before each step's all_reduce: the report names it the late rank, about
    20 ms late, the other three waiting for it every step; the program's output is the bare run's."""
    command = [case.python, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD),
               "--master-port", str(free_port()), os.path.join(HERE, "late.py")]
    report, lines = case.both(command, {"LATE_RANK": "2", "LATE_MS": "20", "LATE_STEPS": "30"}, sort_lines=True)
    done = [l for l in lines if re.search(r"rank \d/4: 30 steps", l)]
    check(len(done) == WORLD and all(l.endswith(" ok") for l in done), f"ranks' results {done}")
    s = report["slow_rank"]
    print(f"slow_rank: {s['kind']}: {s['verdict']}\n  " + "\n  ".join(s["evidence"] + s["notes"]))
    check(s["present"] and s["kind"] == "late-rank", f"no late rank: {json.dumps(s)[:2000]}")
    check(s["rank"] == 2 and s["nranks"] == WORLD, f"late rank {s['rank']} of {s['nranks']}: {s['verdict']}")
    check(s["last"] >= 0.9 * s["compared"] and s["compared"] >= 30, f"last in {s['last']} of {s['compared']}")
    check(18 <= s["late_median_ms"] <= 80, f"{s['late_median_ms']} ms late, want about 20")
    check(s["step_collectives"] == 1 and 3 * 18 <= s["wait_per_step_ms"] <= 3 * 80,
          f"step {s['step_collectives']}, others wait {s['wait_per_step_ms']} ms per step")
    found = [f for f in report["findings"] if f["id"] == "slow-rank"]
    check(len(found) == 1 and found[0]["ranks"] == [2] and found[0]["cause"] == "late-rank", f"findings {found}")


CASES = {
    "late": late,
    "raise": raise_,
    "copies": lambda c: copies(c, ""),
    "copies-visible": lambda c: copies(c, "5,4,7,2"),
    "train-lazy": lambda c: train(c, "lazy", ""),
    "train-eager-visible": lambda c: train(c, "eager", "2,3,4,5"),
    "graph": graph,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--p2psim", required=True)
    ap.add_argument("--p2ptrace", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    venv = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "fetch-torch.py"), "--venv", args.tag],
                          stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        print(f"FAIL: no PyTorch {args.tag} environment at {venv}: run scripts/fetch-torch.py", file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(prefix=f"torch-{args.tag}-{args.case}-")
    try:
        CASES[args.case](Case(os.path.abspath(args.p2psim), os.path.abspath(args.p2ptrace), venv, work,
                              bundled_nccl(args.tag)))
    except Failure as e:
        print(f"FAIL (torch {args.tag}, {args.case}): {e}\n(files kept in {work})", file=sys.stderr)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    print(f"PASS (torch {args.tag}, {args.case})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
