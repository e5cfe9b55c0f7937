#!/usr/bin/env python3
"""Makes the pinned PyTorch environments that tests/torch runs on the simulated node.

For each tests/torch/requirements-<tag>.txt (torch and every wheel it pulls, each pinned by version and
the sha256 the package index publishes), the wheels are fetched into
${P2PTRACE_CACHE:-$HOME/.cache/p2ptrace}/wheels/torch-<tag>/ and installed, offline from there, into the
virtual environment .../venvs/torch-<tag>/. Both are kept: a second run with the same pins downloads and
installs nothing. The wheels come the way this machine's own pip fetches them (`pip download` by
package name, pip.conf and PIP_INDEX_URL respected, --require-hashes); the script names no package
host. PyTorch is a test client only: neither the shim nor the CLI depends on it.

Usage: scripts/fetch-torch.py [--only TAG]    fetch and install what is missing; prints the times
       scripts/fetch-torch.py --venv TAG      print the environment's directory (read by CMake and tests)
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import time

from p2ptrace_cache import cache_root, sha256_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*$")


def tags():
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "torch", "requirements-*.txt")))
    return [os.path.basename(f)[len("requirements-"):-len(".txt")] for f in files]


def requirements(tag):
    return os.path.join(ROOT, "tests", "torch", f"requirements-{tag}.txt")


def pins(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = PIN.match(line)
            if not m:
                sys.exit(f"{path}:{n}: not 'name==version --hash=sha256:HEX': {line}")
            out.append(m.groups())
    return out


def wheel_name(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def have_all(wheels, wanted):
    """True when every pinned wheel is already in `wheels` (by name and version; hashes are checked by pip)."""
    present = {}
    for f in os.listdir(wheels) if os.path.isdir(wheels) else []:
        parts = f.split("-")
        if f.endswith(".whl") and len(parts) >= 3:
            present[(parts[0].lower(), parts[1])] = f
    return all((wheel_name(n), v) in present for n, v, _ in wanted)


def run(command, what):
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"fetch-torch: {what} failed (exit {done.returncode}):\n{done.stdout[-4000:]}")


def ensure(tag):
    req = requirements(tag)
    wanted = pins(req)
    wheels = os.path.join(cache_root(), "wheels", f"torch-{tag}")
    venv = os.path.join(cache_root(), "venvs", f"torch-{tag}")
    stamp = os.path.join(venv, "p2ptrace-requirements.sha256")
    want_stamp = sha256_of(req)
    t0 = time.monotonic()
    if not have_all(wheels, wanted):
        os.makedirs(wheels, exist_ok=True)
        print(f"fetch-torch: downloading torch {tag}'s {len(wanted)} wheels into {wheels}", flush=True)
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--require-hashes",
             "--disable-pip-version-check", "--quiet", "--timeout", "60", "--dest", wheels, "-r", req],
            f"pip download of {req}")
    t1 = time.monotonic()
    fresh = not (os.path.exists(stamp) and open(stamp).read().strip() == want_stamp)
    if fresh:
        print(f"fetch-torch: installing torch {tag} into {venv}", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        run([sys.executable, "-m", "venv", venv], f"python3 -m venv {venv} (Debian: apt-get install python3-venv)")
        run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-index", "--no-deps",
             "--require-hashes", "--disable-pip-version-check", "--quiet", "--find-links", wheels, "-r", req],
            f"pip install of {req}")
        with open(stamp, "w") as f:
            f.write(want_stamp + "\n")
    t2 = time.monotonic()
    print(f"fetch-torch: torch {tag}: download {t1 - t0:.0f} s, install {t2 - t1:.0f} s"
          f"{'' if fresh or t1 - t0 > 1 else ' (cached)'}", flush=True)
    return venv


def main(argv):
    if len(argv) == 2 and argv[0] == "--venv":
        print(os.path.join(cache_root(), "venvs", f"torch-{argv[1]}"))
        return 0
    only = argv[1] if len(argv) == 2 and argv[0] == "--only" else None
    if argv and only is None:
        print(__doc__, file=sys.stderr)
        return 2
    for tag in tags():
        if only in (None, tag):
            ensure(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
