#!/usr/bin/env python3
"""scripts/fetch-nccl-releases.py into an empty cache, through pip by name and version: the release
arrives with exactly its pinned sha256; a damaged copy in the cache is noticed and fetched again; an
unknown version is refused. Downloads one release (2.13.4, ~165 MB). Skipped (exit 77) when
P2PTRACE_SKIP_NCCL_RELEASES=1 (offline work)."""
import os
import subprocess
import sys
import tempfile

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts")
SCRIPT = os.path.join(SCRIPTS, "fetch-nccl-releases.py")
sys.path.insert(0, SCRIPTS)
from p2ptrace_cache import sha256_of  # noqa: E402
VERSION = "2.13.4"


def run(cache, *args):
    env = dict(os.environ, P2PTRACE_CACHE=cache)
    return subprocess.run([sys.executable, SCRIPT, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def check(condition, what):
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def main():
    if os.environ.get("P2PTRACE_SKIP_NCCL_RELEASES") == "1":
        return 77
    with tempfile.TemporaryDirectory() as cache:
        pins = dict(line.split() for line in run(cache, "--hashes").stdout.splitlines())
        check(len(pins) == 6 and all(len(h) == 64 for h in pins.values()), f"six pinned hashes: {pins}")
        lib = os.path.join(cache, "nccl", VERSION, "libnccl.so.2")
        first = run(cache, "--only", VERSION)
        check(first.returncode == 0, f"fetch into an empty cache: {first.stderr}")
        check(os.path.isfile(lib) and sha256_of(lib) == pins[VERSION], f"{lib} has the pinned sha256")
        check("MB in" in first.stderr, f"it was downloaded: {first.stderr}")
        check(sorted(os.listdir(os.path.dirname(lib))) == ["libnccl.so.2"], "nothing else is left in the cache")
        again = run(cache, "--only", VERSION)
        check(again.returncode == 0 and "all cached" in again.stderr, f"a second run downloads nothing: {again.stderr}")
        with open(lib, "r+b") as f:  # a damaged copy
            f.seek(4096)
            f.write(b"\0damaged\0")
        repaired = run(cache, "--only", VERSION)
        check(repaired.returncode == 0 and "hash differs from the pinned one" in repaired.stderr,
              f"the damage is noticed: {repaired.stderr}")
        check(sha256_of(lib) == pins[VERSION], "and the pinned release is back")
        unknown = run(cache, "--only", "9.9.9")
        check(unknown.returncode == 2 and "not a pinned release" in unknown.stderr, f"unknown version: {unknown.stderr}")
    print("fetch-nccl-releases: the pinned release by pip, hash-checked, repaired when damaged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
