#!/usr/bin/env python3
"""The fleet questions of docs/ROWS.md, asked with DuckDB of `p2ptrace export --rows` over 1,000 jobs.

The test plans a fleet (24 two-GPU nodes, some NVLink, some PCIe; a few that sometimes run with peer
access off, a few whose NVLink sometimes drops to PCIe), writes each job with `p2ptrace synth` under
one of four launchers (SLURM, a Kubernetes pod, Open MPI 5, torchrun), exports its rows, and asks:

  1. which nodes had any fallback;
  2. GPU-hours lost per cause;
  3. which GPU pairs changed class between two consecutive jobs on the same node.

Each answer is checked against what the plan says it generated, computed here from the plan (never
read back from the rows): the set of nodes, each cause's hours against the synth model's expectation
(copies' sizes and rates as tools/cli/synth.cc draws them), and every (node, pair, job before, job after).
It also checks the rows' scheduler fields, nulls for what nothing measured, and that the same SQL
answers the same over Parquet written by DuckDB. Prints the generation and query times.

Usage: fleet_test.py --cli build/default/bin/p2ptrace [--jobs 1000] [--keep DIR]
Run with the DuckDB environment's python (scripts/fetch-duckdb.py --python).
"""
import argparse
import concurrent.futures
import glob
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import duckdb
except ImportError:  # run by CTest with the system python: go on in the pinned environment
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from p2ptrace_cache import cache_root
    venv = os.path.join(cache_root(), "venvs", "duckdb")
    venv_python = os.path.join(venv, "bin", "python")
    if not os.path.exists(venv_python) or os.path.realpath(sys.prefix) == os.path.realpath(venv):
        sys.exit(f"fleet_test: no DuckDB environment at {venv_python}: run scripts/fetch-duckdb.py")
    os.execv(venv_python, [venv_python] + sys.argv)
QUERIES = os.path.join(ROOT, "docs", "rows-queries.sql")

NODES = [f"gpu-{i:02d}" for i in range(24)]
NVLINK_NODES = NODES[:16]
PCIE_NODES = NODES[16:]
PEER_ACCESS_OFF = {"gpu-03", "gpu-07", "gpu-11", "gpu-18", "gpu-21"}  # sometimes run the fallback scenario
NVLINK_FLAKY = {"gpu-05", "gpu-09"}                                    # sometimes NVLink down: PCIe
CLASS = {"healthy": "nvlink", "pcie": "pcie_p2p", "fallback": "host_staged"}
EVENTS = 16
START = 1767225600
# tools/cli/synth.cc's model of a staged copy: 1, 2, 4 or 8 MiB, at 12 GB/s x U(0.95, 1.05); ten of a
# rank's 16 events are copies (slots 0-3 and 7 of every 8, NCCL otherwise). A fallback pair's cost is
# bytes x (1/achieved - 1/best), best being NVLink's catalog low figure (core/causes.cc: 20 GB/s,
# link count unknown) when nothing on the node measured NVLink.
COPIES_PER_RANK = sum(1 for i in range(EVENTS) if i % 8 < 4 or i % 8 == 7)
MEAN_COPY_BYTES = (1 + 2 + 4 + 8) / 4 * (1 << 20)
MEAN_INV_JITTER = math.log(1.05 / 0.95) / 0.1
STAGED_GBPS, NVLINK_LOW_GBPS = 12.0, 20.0
# NCCL with NCCL_P2P_DISABLE=1 goes through SHM at 9 GB/s x U(0.95, 1.05): each rank's ring sends
# (slot 4 of every 8 events) carry 4 MiB; one such pair per direction on a two-GPU node.
SENDS_PER_RANK = sum(1 for i in range(EVENTS) if i % 8 == 4)
SEND_BYTES, SHM_GBPS = 4 << 20, 9.0


def plan(jobs, seed=16):
    rng = random.Random(seed)
    out = []
    for j in range(jobs):
        launcher = ("slurm", "kubernetes", "openmpi", "torchrun")[j % 4]
        kind = NVLINK_NODES if rng.random() < 0.65 else PCIE_NODES
        n_hosts = 1 if launcher == "kubernetes" else rng.choice((1, 1, 1, 2, 3))
        hosts = sorted(rng.sample(kind, n_hosts))
        scenario = "healthy" if kind is NVLINK_NODES else "pcie"
        if n_hosts == 1 and hosts[0] in PEER_ACCESS_OFF and rng.random() < 0.35:
            scenario = "fallback"
        elif n_hosts == 1 and hosts[0] in NVLINK_FLAKY and rng.random() < 0.3:
            scenario = "pcie"
        out.append({"index": j, "launcher": launcher, "hosts": hosts, "scenario": scenario,
                    "seed": rng.randrange(1, 1 << 30), "start": START + 600 * j})
    return out


def job_id(job):
    j = job["index"]
    return {"slurm": str(700000 + j), "kubernetes": f"train-{j}", "openmpi": f"prterun-login-{j}@1",
            "torchrun": f"tr-{j:04d}"}[job["launcher"]]


def synth_command(cli, job, out):
    j, launcher = job["index"], job["launcher"]
    env = []
    host_names = job["hosts"]
    if launcher == "slurm":
        env = [f"SLURM_JOB_ID={job_id(job)}", "SLURM_PROCID={rank}", "SLURMD_NODENAME={host}"]
    elif launcher == "kubernetes":  # one pod: its hostname is the pod's name, the node comes from the downward API
        host_names = [f"train-{j}-0"]
        env = ["KUBERNETES_SERVICE_HOST=10.96.0.1", f"POD_NAME=train-{j}-0", "POD_NAMESPACE=ml",
               f"NODE_NAME={job['hosts'][0]}", f"TORCHELASTIC_RUN_ID={job_id(job)}"]
    elif launcher == "openmpi":
        env = ["OMPI_COMM_WORLD_RANK={rank}", f"PMIX_NAMESPACE={job_id(job)}", "PMIX_RANK={rank}"]
    else:
        env = [f"TORCHELASTIC_RUN_ID={job_id(job)}"]
    cmd = [cli, "synth", "--ranks", str(2 * len(job["hosts"])), "--gpus-per-host", "2", "--events", str(EVENTS),
           "--scenario", job["scenario"], "--seed", str(job["seed"]), "--out", out, "--host-names",
           ",".join(host_names), "--job-id", f"p2ptrace-{job_id(job)}", "--start-time", str(job["start"])]
    for kv in env:
        cmd += ["--env", kv]
    return cmd


def generate(cli, jobs, work):
    rows_dir = os.path.join(work, "rows")
    os.makedirs(rows_dir)

    def one(job):
        d = os.path.join(work, "jobs", f"j{job['index']:04d}")
        subprocess.run(synth_command(cli, job, d), check=True, stdout=subprocess.DEVNULL)
        out = os.path.join(rows_dir, f"j{job['index']:04d}.ndjson")
        done = subprocess.run([cli, "export", d, "--rows", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
        if done.returncode != 0:
            raise RuntimeError(f"export of {d} failed: {done.stderr}")
        shutil.rmtree(d)  # the rows are what the fleet keeps
        return out

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        list(pool.map(one, jobs))
    return rows_dir


def queries():
    """The three questions, as docs/rows-queries.sql writes them (a view named `rows` over the files)."""
    text = open(QUERIES).read()
    out = {}
    for block in text.split("-- question: ")[1:]:
        name, sql = block.split("\n", 1)
        out[name.strip()] = sql.strip().rstrip(";")
    return out


def expected(jobs):
    nodes, lost, changes = set(), {}, set()
    last = {}  # node -> (job, class) of the node's previous job

    def add(key, hours):
        lost[key] = lost.get(key, 0) + hours
    for job in sorted(jobs, key=lambda x: x["start"]):
        for host in job["hosts"]:
            if job["scenario"] == "fallback":
                nodes.add(host)
            cls = CLASS[job["scenario"]]
            if host in last and last[host][1] != cls:
                for src, dst in ((0, 1), (1, 0)):
                    changes.add((host, src, dst, job_id(last[host][0]), job_id(job), last[host][1], cls))
            last[host] = (job, cls)
        if job["scenario"] == "fallback":
            per_copy = MEAN_COPY_BYTES * (MEAN_INV_JITTER / STAGED_GBPS - 1 / NVLINK_LOW_GBPS) * 1e-9
            per_send = SEND_BYTES * (MEAN_INV_JITTER / SHM_GBPS - 1 / NVLINK_LOW_GBPS) * 1e-9
            add(("peer-access-not-enabled", "cuda"), 2 * COPIES_PER_RANK * per_copy / 3600)
            add(("env-p2p-disabled", "nccl"), 2 * SENDS_PER_RANK * per_send / 3600)
    return nodes, lost, changes


def ask(con, q):
    t0 = time.monotonic()
    r = {name: con.execute(sql).fetchall() for name, sql in q.items()}
    return r, time.monotonic() - t0


def check_answers(r, jobs):
    want_nodes, want_lost, want_changes = expected(jobs)
    got_nodes = {row[0] for row in r["nodes with any fallback"]}
    assert got_nodes == want_nodes, f"nodes with a fallback: {sorted(got_nodes)}, planned {sorted(want_nodes)}"
    got_lost = {(row[0], row[2]): row[1] for row in r["GPU-hours lost per cause"]}
    assert set(got_lost) == set(want_lost), f"causes: {got_lost}, planned {want_lost}"
    for key, hours in want_lost.items():  # random copy sizes: within 6% of the model's mean (~3.5 sigma)
        assert abs(got_lost[key] - hours) <= 0.06 * hours, f"{key}: {got_lost[key]} GPU-h, model {hours}"
    got_changes = {tuple(row) for row in r["pairs whose class changed between jobs on a node"] if row[3] == "cuda"}
    got_changes = {(n, s, d, a, b, ca, cb) for n, s, d, _, a, b, ca, cb in got_changes}
    assert got_changes == want_changes, (f"class changes: {len(got_changes)}, planned {len(want_changes)}; "
                                         f"extra {sorted(got_changes - want_changes)[:5]}, "
                                         f"missing {sorted(want_changes - got_changes)[:5]}")
    return want_nodes, want_lost, want_changes


def check_rows(con, jobs):
    n_bad = con.execute("SELECT count(*) FROM rows WHERE schema <> 'p2ptrace.rows/1' OR kind NOT IN ('pair', 'op')"
                        ).fetchone()[0]
    assert n_bad == 0, n_bad
    # Nothing in a synthetic trace names the GPU models: null, never "" or 0.
    assert con.execute("SELECT count(*) FROM rows WHERE kind = 'pair' AND src_model IS NOT NULL").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM rows WHERE kind = 'pair' AND NOT fallback AND lost_seconds IS NOT NULL"
                       ).fetchone()[0] == 0
    by_job = {job_id(j): j for j in jobs}
    got = con.execute("SELECT DISTINCT job_id, scheduler, scheduler_job_id, node, host, k8s_pod, k8s_namespace, "
                      "trace_job_id FROM rows WHERE kind = 'pair' AND source = 'cuda'").fetchall()
    assert {g[0] for g in got} == set(by_job), "every job has rows, under its scheduler's job id"
    for jid, scheduler, sched_id, node, host, pod, ns, trace_id in got:
        job = by_job[jid]
        assert trace_id == f"p2ptrace-{jid}", trace_id
        launcher = job["launcher"]
        assert scheduler == {"slurm": "slurm", "kubernetes": "kubernetes", "openmpi": "openmpi",
                             "torchrun": "torchrun"}[launcher], (jid, scheduler)
        assert sched_id == jid, (jid, sched_id)
        if launcher == "slurm":
            assert node == host and host in job["hosts"], (jid, node, host)
        elif launcher == "kubernetes":
            assert (node, host, pod, ns) == (job["hosts"][0], f"train-{job['index']}-0", host, "ml"), (jid, node, host)
        else:
            assert node is None and pod is None and ns is None and host in job["hosts"], (jid, node, pod)
    ops = con.execute("SELECT count(*), count(DISTINCT job_id) FROM rows WHERE kind = 'op' AND op = 'ncclAllReduce' "
                      "AND busbw_gbps > 0").fetchone()
    assert ops == (len(jobs), len(jobs)), ops


def same_answers(a, b):
    """Equal answers, sums compared to 1e-9 (their order of addition may differ)."""
    def norm(rows):
        return sorted(tuple(round(x, 9) if isinstance(x, float) else str(x) for x in row) for row in rows)
    return {k: norm(v) for k, v in a.items()} == {k: norm(v) for k, v in b.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--keep", help="write the fleet here (kept) instead of a temporary directory")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="p2ptrace-fleet-")
    if a.keep:
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
    try:
        jobs = plan(a.jobs)
        t0 = time.monotonic()
        rows_dir = generate(os.path.abspath(a.cli), jobs, work)
        t_gen = time.monotonic() - t0
        files = sorted(glob.glob(os.path.join(rows_dir, "*.ndjson")))
        assert len(files) == len(jobs), len(files)
        assert not glob.glob(os.path.join(rows_dir, "*.tmp.*")), "a temporary file was left behind"
        con = duckdb.connect()
        t0 = time.monotonic()
        con.execute(f"CREATE VIEW rows AS SELECT * FROM read_json('{rows_dir}/*.ndjson', format = "
                    "'newline_delimited', union_by_name = true)")
        n_rows = con.execute("SELECT count(*) FROM rows").fetchone()[0]
        t_scan = time.monotonic() - t0
        q = queries()
        r, t_json = ask(con, q)
        want_nodes, want_lost, want_changes = check_answers(r, jobs)
        check_rows(con, jobs)
        # The same questions over Parquet written by DuckDB.
        parquet = os.path.join(work, "fleet.parquet")
        t0 = time.monotonic()
        con.execute(f"COPY (SELECT * FROM rows) TO '{parquet}' (FORMAT parquet)")
        t_copy = time.monotonic() - t0
        con.execute(f"CREATE OR REPLACE VIEW rows AS SELECT * FROM read_parquet('{parquet}')")
        r2, t_parquet = ask(con, q)
        check_answers(r2, jobs)
        assert same_answers(r, r2), "Parquet answers differ from the NDJSON ones"
        print(f"fleet: {len(jobs)} jobs, {n_rows} rows in {len(files)} files "
              f"({sum(os.path.getsize(f) for f in files) / 1e6:.1f} MB); generated (synth + export) in {t_gen:.1f} s "
              f"on {os.cpu_count()} CPUs")
        print(f"fleet: the three questions: {t_json:.2f} s over the NDJSON files (count(*) {t_scan:.2f} s), "
              f"{t_parquet:.2f} s over Parquet ({os.path.getsize(parquet) / 1e6:.1f} MB, COPY {t_copy:.2f} s)")
        print(f"fleet: {len(want_nodes)} nodes with a fallback; "
              + ", ".join(f"{c}: {h * 3600:.3f} GPU-s" for c, h in sorted({row[0]: row[1] for row in
                                                                          r['GPU-hours lost per cause']}.items()))
              + f"; {len(want_changes)} pair class changes")
        print("fleet: OK")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
