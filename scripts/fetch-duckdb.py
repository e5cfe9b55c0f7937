#!/usr/bin/env python3
"""Makes the pinned DuckDB environment that tests/fleet queries the fleet rows with.

tests/fleet/requirements-duckdb.txt pins the wheel by version and sha256; it is fetched into
${P2PTRACE_CACHE:-$HOME/.cache/p2ptrace}/wheels/duckdb/ and installed, offline from there, into the
virtual environment .../venvs/duckdb/. Both are kept: a second run with the same pins downloads and
installs nothing. The wheel comes the way this machine's own pip fetches it (`pip download`,
pip.conf and PIP_INDEX_URL respected, --require-hashes); the script names no package host.

Usage: scripts/fetch-duckdb.py            fetch and install what is missing; prints the times
       scripts/fetch-duckdb.py --python   print the environment's python (read by CMake and the test)
"""
import os
import sys

from p2ptrace_cache import cache_root, ensure_venv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQ = os.path.join(ROOT, "tests", "fleet", "requirements-duckdb.txt")


def venv_dir():
    return os.path.join(cache_root(), "venvs", "duckdb")


def main(argv):
    if argv == ["--python"]:
        print(os.path.join(venv_dir(), "bin", "python"))
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    ensure_venv("fetch-duckdb", "duckdb", REQ, os.path.join(cache_root(), "wheels", "duckdb"), venv_dir())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
