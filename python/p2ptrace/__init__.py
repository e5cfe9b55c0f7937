"""p2ptrace: which path every GPU pair's traffic took, and why (the wheel's Python side).

The package holds the real tool, built from C++: bin/p2ptrace (the CLI) and lib/libp2ptrace.so and
lib/libp2ptrace_audit.so (what `p2ptrace run` preloads into the job). The `p2ptrace` command and
`python -m p2ptrace` run the CLI; `shim_path()` is the shim for a hand-made LD_PRELOAD.
"""
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def cli_path():
    """The CLI binary inside the installed package."""
    return os.path.join(_HERE, "bin", "p2ptrace")


def shim_path():
    """libp2ptrace.so inside the installed package (LD_PRELOAD it; libp2ptrace_audit.so is beside it)."""
    return os.path.join(_HERE, "lib", "libp2ptrace.so")
