#!/usr/bin/env python3
"""Fetches libnccl.so.2 of several real NCCL releases (PyPI wheels) for tests/integration/nccl_releases_test.

Each release ends up as ${P2PTRACE_CACHE:-$HOME/.cache/p2ptrace}/nccl/<version>/libnccl.so.2. A release
already there with the pinned hash is not downloaded again. Python standard library only. The test
fails when a release is missing; P2PTRACE_SKIP_NCCL_RELEASES=1 skips it on purpose (offline work).

Usage: scripts/fetch-nccl-releases.py          fetch what is missing, verify everything
       scripts/fetch-nccl-releases.py --list   print the pinned versions, one a line (read by CMake)

The pins (wheel URL and sha256) come from https://pypi.org/pypi/<package>/json. 2.13.4 is the pre-2.16
release: it exports ncclX without the pncclX aliases (checked with `nm -D`). The wheels are about 1.3 GB
together, almost all of it libnccl.so.2 itself, so a Range request for the member alone would not save much.
"""
import base64
import hashlib
import os
import shutil
import sys
import tempfile
import time
import urllib.request
import zipfile

FILES = "https://files.pythonhosted.org/packages/"
# version, package, wheel path under FILES, wheel sha256, libnccl.so.2 sha256
RELEASES = [
    ("2.13.4", "nvidia-nccl-cu11",
     "d1/bc/63790ca647d67cf051a74152cb36fea805b201aa0d8d41c40d03fad41268/nvidia_nccl_cu11-2.13.4-py3-none-manylinux1_x86_64.whl",
     "dec943cc2b75a700565965b59918137778e7917802734f40bf6084c043d9ad98",
     "7d5daf2de19fd2426f5a53ab41336815b107ff4293005f9ab496b2edd470b6b6"),
    ("2.18.3", "nvidia-nccl-cu12",
     "44/6e/3c9cd7007072f8a63dae7b5eddd1cc1525fd357377467ce3a4749b02d5ff/nvidia_nccl_cu12-2.18.3-py3-none-manylinux1_x86_64.whl",
     "89cf220910c43e53df992f54f7aa2a35c6d606b077c9ae95b1f17c544d3ad3f3",
     "40f71adb510e5242c6af1315b9ebac47aaeb00eb36418b91b3e7f7a0cd812333"),
    ("2.21.5", "nvidia-nccl-cu12",
     "df/99/12cd266d6233f47d00daf3a72739872bdc10267d0383508b0b9c84a18bb6/nvidia_nccl_cu12-2.21.5-py3-none-manylinux2014_x86_64.whl",
     "8579076d30a8c24988834445f8d633c697d42397e92ffc3f63fa26766d25e0a0",
     "78df2f31f6db8142ec546a1e5a31cb066f7892d12d2f665b448f8069a08ef807"),
    ("2.23.4", "nvidia-nccl-cu12",
     "ed/1f/6482380ec8dcec4894e7503490fc536d846b0d59694acad9cf99f27d0e7d/nvidia_nccl_cu12-2.23.4-py3-none-manylinux2014_x86_64.whl",
     "b097258d9aab2fa9f686e33c6fe40ae57b27df60cedbd15d139701bb5509e0c1",
     "68baad42a19091c4ef92d26a16737c1f3371440eb9526edc4c899c9093131ab0"),
    ("2.26.2", "nvidia-nccl-cu12",
     "67/ca/f42388aed0fddd64ade7493dbba36e1f534d4e6fdbdd355c6a90030ae028/nvidia_nccl_cu12-2.26.2-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
     "694cf3879a206553cc9d7dbda76b13efaf610fdb70a50cba303de1b0d1530ac6",
     "e4a7aee9c3eecf53fac780441d2f03b578ab8db8874b71f8e391bcec7adb2899"),
    ("2.32.3", "nvidia-nccl-cu12",
     "f3/f8/9dce3698eed6fae28078eb38f748feb1665767693d8017c099de9fbf0b08/nvidia_nccl_cu12-2.32.3-py3-none-manylinux_2_27_x86_64.whl",
     "bb94b2348e4861d5e8aa00b36c3d12d9bdf9c6369b82cbb723de0b582280a21c",
     "a23d2e3e47ad7f8987ac73eb04a373d6d40cfbb3a7a5bf41a9e0e8434817559b"),
]
MEMBER = "nvidia/nccl/lib/libnccl.so.2"
CHUNK = 1 << 20


def cache_dir():
    root = os.environ.get("P2PTRACE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "p2ptrace")
    return os.path.join(root, "nccl")


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def download(url, dest, want_sha):
    """Streams url to dest, hashing as it goes; returns the bytes read."""
    h, n = hashlib.sha256(), 0
    for attempt in range(3):  # a dropped connection is worth a retry; a wrong hash is not
        try:
            with urllib.request.urlopen(url, timeout=60) as r, open(dest, "wb") as out:
                h, n = hashlib.sha256(), 0
                while block := r.read(CHUNK):
                    h.update(block)
                    out.write(block)
                    n += len(block)
            break
        except OSError as e:
            if attempt == 2:
                raise RuntimeError(f"{url}: {e}") from e
            time.sleep(2 * (attempt + 1))
    if h.hexdigest() != want_sha:
        raise RuntimeError(f"{url}: sha256 {h.hexdigest()}, expected {want_sha}")
    return n


def fetch(version, package, path, wheel_sha, lib_sha, root):
    target_dir = os.path.join(root, version)
    target = os.path.join(target_dir, "libnccl.so.2")
    if os.path.isfile(target):
        if sha256_of(target) == lib_sha:
            return 0, 0.0
        print(f"{target}: hash differs from the pinned one; fetching again", file=sys.stderr)
    os.makedirs(target_dir, exist_ok=True)
    start = time.monotonic()
    # The wheel and the extracted library live next to the target until the rename: an interrupted
    # run leaves no half-written libnccl.so.2 behind.
    with tempfile.TemporaryDirectory(dir=target_dir) as tmp:
        wheel = os.path.join(tmp, os.path.basename(path))
        size = download(FILES + path, wheel, wheel_sha)
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, open(os.path.join(tmp, "lib"), "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)
        if sha256_of(os.path.join(tmp, "lib")) != lib_sha:
            raise RuntimeError(f"{package} {version}: {MEMBER} does not match its pinned sha256")
        os.chmod(os.path.join(tmp, "lib"), 0o755)
        os.replace(os.path.join(tmp, "lib"), target)
    seconds = time.monotonic() - start
    print(f"{package} {version}: {size / 1e6:.0f} MB in {seconds:.1f} s -> {target}", file=sys.stderr)
    return size, seconds


def main(argv):
    if argv[1:] == ["--list"]:
        print("\n".join(r[0] for r in RELEASES))
        return 0
    if argv[1:]:
        print(f"usage: {argv[0]} [--list]", file=sys.stderr)
        return 2
    root = cache_dir()
    total, seconds = 0, 0.0
    for release in RELEASES:
        try:
            size, took = fetch(*release, root)
        except (OSError, RuntimeError, zipfile.BadZipFile, KeyError) as e:
            print(f"error: NCCL {release[0]}: {e}", file=sys.stderr)
            return 1
        total, seconds = total + size, seconds + took
    what = f"downloaded {total / 1e6:.0f} MB in {seconds:.1f} s" if total else "all cached"
    print(f"NCCL releases in {root}: {', '.join(r[0] for r in RELEASES)} ({what})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
