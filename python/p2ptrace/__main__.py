"""`p2ptrace …` (the wheel's console script) and `python -m p2ptrace …`: exec the package's CLI binary.

Why a Python entry point that execs a binary kept inside the package, rather than the binary installed
as the wheel's script: the binary must stay where the wheel put it. It finds the shim at ../lib/ from
its own real path (/proc/self/exe, tools/cli/run.cc), and its bundled libraries (abseil, fmt) through the
RPATH auditwheel gave it, relative to it ($ORIGIN/../../p2ptrace.libs). A wheel's scripts are copied
into the environment's bin/, away from both. exec, not a child process: the job's signals, exit status,
terminal and stdin reach the CLI as if it had been run directly, and no Python stays behind it.
"""
import os
import sys

from p2ptrace import cli_path


def main():
    exe = cli_path()
    try:
        os.execv(exe, ["p2ptrace", *sys.argv[1:]])
    except OSError as e:
        print(f"p2ptrace: cannot run {exe}: {e}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
