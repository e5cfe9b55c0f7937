"""What the fetch scripts share (Python standard library only): where the cache is, a file's sha256, and
a virtual environment made offline from hash-pinned wheels kept in the cache."""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

# name==version and one --hash=sha256:HEX per platform's wheel (the first is returned).
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})(?:\s+--hash=sha256:[0-9a-f]{64})*\s*$")


def cache_root():
    """${P2PTRACE_CACHE:-$HOME/.cache/p2ptrace}: downloaded releases, wheels and environments."""
    return os.environ.get("P2PTRACE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "p2ptrace")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def pins(path):
    """The (name, version, sha256) of each line `name==version --hash=sha256:HEX` of a requirements file."""
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


def run(command, what, who):
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"{who}: {what} failed (exit {done.returncode}):\n{done.stdout[-4000:]}")


def ensure_venv(who, label, req, wheels, venv):
    """Fetches the wheels `req` pins into `wheels` (the way this machine's own pip fetches them: by package
    name, pip.conf and PIP_INDEX_URL respected, --require-hashes; no host named here) and installs them,
    offline from there, into the virtual environment `venv`. Both are kept: a second call with the same
    pins downloads and installs nothing. Returns `venv`."""
    wanted = pins(req)
    stamp = os.path.join(venv, "p2ptrace-requirements.sha256")
    want_stamp = sha256_of(req)
    t0 = time.monotonic()
    if not have_all(wheels, wanted):
        os.makedirs(wheels, exist_ok=True)
        print(f"{who}: downloading {label}'s {len(wanted)} wheels into {wheels}", flush=True)
        run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--require-hashes",
             "--disable-pip-version-check", "--quiet", "--timeout", "60", "--dest", wheels, "-r", req],
            f"pip download of {req}", who)
    t1 = time.monotonic()
    fresh = not (os.path.exists(stamp) and open(stamp).read().strip() == want_stamp)
    if fresh:
        print(f"{who}: installing {label} into {venv}", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        run([sys.executable, "-m", "venv", venv], f"python3 -m venv {venv} (Debian: apt-get install python3-venv)",
            who)
        run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-index", "--no-deps",
             "--require-hashes", "--disable-pip-version-check", "--quiet", "--find-links", wheels, "-r", req],
            f"pip install of {req}", who)
        with open(stamp, "w") as f:
            f.write(want_stamp + "\n")
    t2 = time.monotonic()
    print(f"{who}: {label}: download {t1 - t0:.0f} s, install {t2 - t1:.0f} s"
          f"{'' if fresh or t1 - t0 > 1 else ' (cached)'}", flush=True)
    return venv
