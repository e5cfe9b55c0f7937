"""What the fetch scripts share: where the cache is, and a file's sha256 (Python standard library only)."""
import hashlib
import os


def cache_root():
    """${P2PTRACE_CACHE:-$HOME/.cache/p2ptrace}: downloaded releases, wheels and environments."""
    return os.environ.get("P2PTRACE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "p2ptrace")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()
