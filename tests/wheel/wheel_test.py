#!/usr/bin/env python3
"""The wheel: built, installed into a fresh virtual environment, and used there on the
simulated node.

1. scripts/build-wheel.py builds it (scikit-build-core, then auditwheel repair; its CMake build
   directory is kept in --work, so a rebuild compiles only what changed) and prints how long it took.
2. The wheel: named py3-none-manylinux_X_Y_<arch>; X.Y is no older than the newest GLIBC_ symbol version
   any ELF file in it needs (read here with readelf, not taken from auditwheel; 2.36 today, equal) and no
   newer than this host's, and it is what `auditwheel show` finds (the lowest policy that fits); it
   holds the CLI, the shim and the audit module inside the package, and bundles the libraries the CLI
   needs that manylinux does not promise (abseil, fmt) in p2ptrace.libs/.
3. Installed with pip into a fresh venv: `p2ptrace` is on PATH there, `p2ptrace --help` and
   `python -m p2ptrace --help` work; the installed shim and audit module need the C library only
   (readelf -d); the installed CLI loads every bundled library from the venv, never the system's (ldd).
4. `p2psim launch … -- <venv>/bin/p2ptrace run -- peer_copy` on tests/sim/topologies/mixed-8gpu.json:
   the CLI finds its own shim and audit module inside the venv (P2PTRACE_LIB unset, no build tree on
   any path), and the report lists every directional GPU pair with the class, calls and bytes
   peer_copy moved.

5. A torchrun-style job: the installed `p2ptrace run -- p2psim launch --hosts node0:4 -- nccl_ring`
   (4 ranks with RANK/LOCAL_RANK/WORLD_SIZE): the report has each ring pair with NCCL's transport.

Usage: wheel_test.py --work DIR --p2psim BIN --peer-copy BIN --nccl-ring BIN
"""
import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOPOLOGY = os.path.join(ROOT, "tests", "sim", "topologies", "mixed-8gpu.json")
MiB = 1 << 20

# What the C library ships: all the shim and the audit module may need (libc-only DT_NEEDED), the
# dynamic loader included (the shim takes _dl_find_object from it).
GLIBC_SONAMES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2",
                 "ld-linux-aarch64.so.1"}
# What every manylinux system provides besides glibc (PEP 600's list): the CLI may need these unbundled.
MANYLINUX_SONAMES = GLIBC_SONAMES | {"libstdc++.so.6", "libgcc_s.so.1"}

# mixed-8gpu.json by GPU index: NVLink 0-1 and 4-5; the rest of a socket ({0-3}, {4-7}) PCIe P2P; across
# the sockets no peer access.
NVLINK = {frozenset(p) for p in ((0, 1), (4, 5))}


def copy_class(a, b):
    if frozenset((a, b)) in NVLINK:
        return "nvlink"
    return "pcie_p2p" if (a < 4) == (b < 4) else "host_staged"


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def run(args, env=None, timeout=900):
    done = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    return done.returncode, done.stdout, done.stderr


def must(args, what, env=None):
    rc, out, err = run(args, env)
    check(rc == 0, f"{what} failed (exit {rc}):\n{out[-3000:]}{err[-3000:]}")
    return out


def elf_needed(path):
    """(DT_NEEDED list, RPATH/RUNPATH list) of an ELF file, by readelf -d."""
    out = must(["readelf", "-d", "-W", path], f"readelf -d {path}")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    paths = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library (?:rpath|runpath): \[([^\]]+)\]", out)
    return needed, paths


def glibc_versions(path):
    """Every GLIBC_x.y version the file needs (readelf -V's version needs)."""
    out = must(["readelf", "-V", "-W", path], f"readelf -V {path}")
    needs = out[out.find("Version needs section"):] if "Version needs section" in out else ""
    needs = needs.split("\n\n")[0]  # not the version definitions (the shim defines GLIBC_2.34's dlclose)
    return {tuple(int(n) for n in v.split(".")) for v in re.findall(r"Name: GLIBC_(\d+\.\d+)\s", needs)}


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def build(work):
    t0 = time.monotonic()
    out = must([sys.executable, os.path.join(ROOT, "scripts", "build-wheel.py"), "--out", os.path.join(work, "dist"),
                "--build-dir", os.path.join(work, "build")], "scripts/build-wheel.py")
    print(out, end="")
    wheels = [f for f in os.listdir(os.path.join(work, "dist")) if f.startswith("p2ptrace-") and f.endswith(".whl")]
    check(len(wheels) == 1, f"expected one wheel in {work}/dist, found {wheels}")
    wheel = os.path.join(work, "dist", wheels[0])
    print(f"wheel: {wheels[0]}, {os.path.getsize(wheel) / MiB:.1f} MiB, built in {time.monotonic() - t0:.0f} s")
    return wheel


def check_wheel(wheel):
    """The file name's tag and the contents; returns (the tag's glibc, the bundled libraries)."""
    m = re.fullmatch(r"p2ptrace-[0-9.]+-py3-none-(\S+)\.whl", os.path.basename(wheel))
    check(m, f"not a py3-none-<platform> wheel: {os.path.basename(wheel)}")
    tags = m.group(1).split(".")
    check(all(t.startswith("manylinux") and t.endswith("_" + platform.machine()) for t in tags),
          f"not a manylinux wheel: {tags}")
    pep600 = [tuple(int(n) for n in re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", t).groups())
              for t in tags if re.fullmatch(r"manylinux_\d+_\d+_\w+", t)]
    check(len(pep600) == 1, f"expected one manylinux_X_Y tag: {tags}")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for f in ("p2ptrace/__init__.py", "p2ptrace/__main__.py", "p2ptrace/bin/p2ptrace",
                  "p2ptrace/lib/libp2ptrace.so", "p2ptrace/lib/libp2ptrace_audit.so"):
            check(f in names, f"{f} is not in the wheel: {sorted(names)}")
        mode = z.getinfo("p2ptrace/bin/p2ptrace").external_attr >> 16
        check(mode & 0o111, f"p2ptrace/bin/p2ptrace is not executable in the wheel (mode {mode:o})")
        bundled = sorted(os.path.basename(n) for n in names if n.startswith("p2ptrace.libs/") and not n.endswith("/"))
        entry = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
        check("p2ptrace = p2ptrace.__main__:main" in entry, f"no p2ptrace console script: {entry}")
    check(any(b.startswith("libabsl_") for b in bundled), f"abseil is not bundled: {bundled}")
    check(any(b.startswith("libfmt") for b in bundled), f"fmt is not bundled: {bundled}")
    print(f"platform tags: {tags}; bundled ({len(bundled)}): {' '.join(bundled)}")
    return pep600[0], bundled


def auditwheel_says(wheel):
    venv = must([sys.executable, os.path.join(ROOT, "scripts", "fetch-wheel-tools.py"), "--venv"],
                "fetch-wheel-tools --venv")
    out = must([os.path.join(venv.strip(), "bin", "auditwheel"), "show", wheel], "auditwheel show")
    m = re.search(r'consistent with the following platform tag:\s*"?(manylinux_\d+_\d+_\w+)', " ".join(out.split()))
    check(m, f"auditwheel show names no platform tag:\n{out}")
    return m.group(1)


def install(wheel, work):
    venv = os.path.join(work, "venv")
    shutil.rmtree(venv, ignore_errors=True)
    t0 = time.monotonic()
    must([sys.executable, "-m", "venv", venv], "python3 -m venv")
    must([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-index", "--no-deps",
          "--disable-pip-version-check", "--quiet", wheel], "pip install of the wheel")
    print(f"installed into a fresh venv in {time.monotonic() - t0:.0f} s")
    return venv


def clean_env(venv):
    """The user's environment after `source venv/bin/activate`: nothing of ours preloaded or pointed at."""
    env = dict(os.environ, PATH=os.path.join(venv, "bin") + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
               NO_COLOR="1")
    for name in ("P2PTRACE_LIB", "LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "P2PTRACE_DIR", "PYTHONPATH"):
        env.pop(name, None)
    return env


def check_installed(venv, tag_glibc, bundled):
    env = clean_env(venv)
    python = os.path.join(venv, "bin", "python")
    pkg = must([python, "-c", "import os, p2ptrace; print(os.path.dirname(p2ptrace.__file__))"], "import p2ptrace",
               env).strip()
    check(pkg.startswith(os.path.realpath(venv) + os.sep) or pkg.startswith(venv + os.sep),
          f"p2ptrace imported from {pkg}, not from the venv")
    libs_dir = os.path.join(os.path.dirname(pkg), "p2ptrace.libs")
    cli, shim, audit = (os.path.join(pkg, "bin", "p2ptrace"), os.path.join(pkg, "lib", "libp2ptrace.so"),
                        os.path.join(pkg, "lib", "libp2ptrace_audit.so"))

    # On PATH, and both ways of starting it.
    check(shutil.which("p2ptrace", path=env["PATH"]) == os.path.join(venv, "bin", "p2ptrace"),
          f"`p2ptrace` on PATH is {shutil.which('p2ptrace', path=env['PATH'])}")
    help_text = must(["p2ptrace", "--help"], "p2ptrace --help", env)
    check("p2ptrace run" in help_text and "p2ptrace report" in help_text, f"p2ptrace --help:\n{help_text}")
    check(must([python, "-m", "p2ptrace", "--help"], "python -m p2ptrace --help", env) == help_text,
          "python -m p2ptrace --help differs from p2ptrace --help")
    rc, _, err = run(["p2ptrace", "no-such-command"], env)
    check(rc != 0, "p2ptrace no-such-command succeeded: the wrapper lost the CLI's exit status")

    # The shim and the audit module: the C library only, no search path of their own.
    for lib in (shim, audit):
        needed, paths = elf_needed(lib)
        print(f"{os.path.basename(lib)}: NEEDED {needed}")
        check(needed and set(needed) <= GLIBC_SONAMES, f"{lib} needs more than the C library: {needed}")
        check(not paths, f"{lib} has a search path: {paths}")

    # The CLI: manylinux's libraries, else the bundled ones, found through its RPATH, from the venv.
    needed, paths = elf_needed(cli)
    print(f"CLI: NEEDED {needed}; RPATH {paths}")
    for n in needed:
        check(n in MANYLINUX_SONAMES or n in bundled, f"the CLI needs {n}, neither manylinux's nor bundled")
    check(any(n.startswith("libabsl_") for n in needed) and any(n.startswith("libfmt") for n in needed),
          f"the CLI needs no bundled abseil/fmt: {needed}")
    check(paths == ["$ORIGIN/../../p2ptrace.libs"], f"the CLI's search path: {paths}")
    ldd = must(["ldd", cli], "ldd of the installed CLI", env)
    check("not found" not in ldd, f"ldd: a library is missing:\n{ldd}")
    for line in ldd.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m and m.group(1) not in MANYLINUX_SONAMES and not m.group(1).startswith("ld-linux"):
            check(os.path.realpath(m.group(2)).startswith(os.path.realpath(libs_dir) + os.sep),
                  f"the CLI loads {m.group(1)} from {m.group(2)}, not from the wheel's {libs_dir}")

    # The tag: the newest glibc any ELF file of the installed wheel needs.
    elves = [cli, shim, audit] + [os.path.join(libs_dir, b) for b in bundled]
    need = {}
    for f in elves:
        check(is_elf(f), f"{f} is not an ELF file")
        versions = glibc_versions(f)
        need[os.path.basename(f)] = max(versions) if versions else (0, 0)
    newest = max(need.values())
    host = tuple(int(n) for n in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    print(f"newest GLIBC_ needed: {newest[0]}.{newest[1]} (" +
          ", ".join(f"{k} {v[0]}.{v[1]}" for k, v in sorted(need.items(), key=lambda kv: kv[1], reverse=True)[:4]) +
          f"); tag manylinux_{tag_glibc[0]}_{tag_glibc[1]}; this host's glibc {host[0]}.{host[1]}")
    check(tag_glibc >= newest, f"the tag promises glibc {tag_glibc}, a file needs {newest}")
    check(tag_glibc <= host, f"the tag claims glibc {tag_glibc}, above this host's {host}")
    return cli


def check_job(venv, work, p2psim, peer_copy):
    env = clean_env(venv)
    trace = os.path.join(work, "trace")
    shutil.rmtree(trace, ignore_errors=True)
    shutil.rmtree(os.path.join(work, "launch"), ignore_errors=True)
    rc, out, err = run([p2psim, "launch", "--topology", TOPOLOGY, "--hosts", "node0:1", "--dir",
                        os.path.join(work, "launch"), "--", "p2ptrace", "run", "--dir", trace, "--",
                        peer_copy, "--size", "1M", "--iters", "1"], env, timeout=300)
    print(f"p2psim launch … p2ptrace run -- peer_copy: exit {rc}\n{out[-1500:]}{err[-1500:]}")
    check(rc == 0, f"the traced job failed (exit {rc})")
    check("cannot find the shim" not in err and "next to the shim" not in err,
          "the installed CLI did not find its shim or its audit module")
    check("p2ptrace report" in out, "no report printed after the job")
    report = json.loads(must([os.path.join(venv, "bin", "python"), "-m", "p2ptrace", "report", trace, "--json"],
                             "p2ptrace report --json", env))
    check(report["capture"]["cudart_13"], f"the job's cudart 13 was not traced: {report['capture']}")
    check(report["capture"]["abnormal_exits"] == 0, f"abnormal exits: {report['capture']}")
    # peer_copy --size 1M --iters 1: per ordered pair one warm-up and one timed copy with peer access
    # off (host-staged), then two with it on (the pair's own path where it has one).
    got = {}
    for p in report["pairs"]:
        key = (p["src"]["gpu"], p["dst"]["gpu"], p["transport"])
        check(key not in got, f"pair {key} listed twice")
        got[key] = p
    want = {}
    for a in range(8):
        for b in range(8):
            if a == b:
                continue
            cls = copy_class(a, b)
            if cls == "host_staged":
                want[(a, b, "host_staged")] = (4, 4 * MiB, False, "host_staged")
            else:
                want[(a, b, cls)] = (2, 2 * MiB, False, cls)
                want[(a, b, "host_staged")] = (2, 2 * MiB, True, cls)
    check(set(got) == set(want),
          f"pairs: missing {sorted(set(want) - set(got))}, unexpected {sorted(set(got) - set(want))}")
    for key, (calls, nbytes, fallback, expected) in want.items():
        p = got[key]
        check((p["calls"], p["bytes"], p["fallback"], p["expected"]) == (calls, nbytes, fallback, expected),
              f"pair {key}: calls {p['calls']} bytes {p['bytes']} fallback {p['fallback']} expected {p['expected']};"
              f" want {calls} {nbytes} {fallback} {expected}")
        if fallback:
            check(p["causes"] and p["causes"][0]["id"] == "peer-access-not-enabled",
                  f"pair {key}: causes {p['causes']}")
    print(f"report: {len(got)} pair rows as peer_copy moved them")


def check_ranks_job(venv, work, p2psim, nccl_ring):
    """A torchrun-style job: the installed `p2ptrace run` launches 4 ranks (p2psim launch sets RANK,
    LOCAL_RANK, WORLD_SIZE as torchrun does), each an NCCL ring step of 4 MiB to the next rank."""
    env = clean_env(venv)
    trace = os.path.join(work, "trace-ranks")
    shutil.rmtree(trace, ignore_errors=True)
    shutil.rmtree(os.path.join(work, "launch-ranks"), ignore_errors=True)
    id_dir = os.path.join(work, "ring-id")  # where rank 0 publishes the NCCL unique id: fresh for each job
    shutil.rmtree(id_dir, ignore_errors=True)
    os.makedirs(id_dir)
    rc, out, err = run(["p2ptrace", "run", "--dir", trace, "--", p2psim, "launch", "--topology", TOPOLOGY,
                        "--hosts", "node0:4", "--dir", os.path.join(work, "launch-ranks"), "--", nccl_ring, id_dir],
                       env, timeout=300)
    print(f"p2ptrace run -- p2psim launch --hosts node0:4 -- nccl_ring: exit {rc}\n{out[-800:]}{err[-800:]}")
    check(rc == 0, f"the traced 4-rank job failed (exit {rc})")
    report = json.loads(must(["p2ptrace", "report", trace, "--json"], "p2ptrace report --json", env))
    cap = report["capture"]
    check(cap["processes"] == 4 and cap["abnormal_exits"] == 0 and cap["nccl_logs"] == 4, f"capture: {cap}")
    # The ring's next-rank pairs, by the transport NCCL printed on mixed-8gpu (NVLink 0-1, PCIe 2-3,
    # SHM where the path crosses the host bridge).
    got = sorted((p["src"]["rank"], p["dst"]["rank"], p["transport"], p["calls"], p["bytes"]) for p in report["pairs"])
    want = [(0, 1, "nvlink", 1, 4 * MiB), (1, 2, "shm", 1, 4 * MiB), (2, 3, "pcie_p2p", 1, 4 * MiB),
            (3, 0, "shm", 1, 4 * MiB)]
    check(got == want, f"4-rank job pairs {got}, want {want}")
    print(f"4-rank job: {len(got)} ring pairs as NCCL connected them")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="build directory, dist, venv and traces (kept between runs)")
    ap.add_argument("--p2psim", required=True)
    ap.add_argument("--peer-copy", required=True)
    ap.add_argument("--nccl-ring", required=True)
    args = ap.parse_args()
    work = os.path.abspath(args.work)
    os.makedirs(work, exist_ok=True)
    try:
        wheel = build(work)
        tag_glibc, bundled = check_wheel(wheel)
        shown = auditwheel_says(wheel)
        check(shown == f"manylinux_{tag_glibc[0]}_{tag_glibc[1]}_{platform.machine()}",
              f"auditwheel show says {shown}, the file name manylinux_{tag_glibc[0]}_{tag_glibc[1]}")
        venv = install(wheel, work)
        check_installed(venv, tag_glibc, bundled)
        check_job(venv, work, args.p2psim, args.peer_copy)
        check_ranks_job(venv, work, args.p2psim, args.nccl_ring)
    except Failure as e:
        print(f"FAILED: {e}", flush=True)
        return 1
    print("wheel: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
