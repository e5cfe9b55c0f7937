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
import sys

from p2ptrace_cache import cache_root, ensure_venv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tags():
    files = sorted(glob.glob(os.path.join(ROOT, "tests", "torch", "requirements-*.txt")))
    return [os.path.basename(f)[len("requirements-"):-len(".txt")] for f in files]


def requirements(tag):
    return os.path.join(ROOT, "tests", "torch", f"requirements-{tag}.txt")


def ensure(tag):
    return ensure_venv("fetch-torch", f"torch {tag}", requirements(tag),
                       os.path.join(cache_root(), "wheels", f"torch-{tag}"),
                       os.path.join(cache_root(), "venvs", f"torch-{tag}"))


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
