#!/usr/bin/env python3
"""Fetches libnccl.so.2 of several real NCCL releases (PyPI wheels) for tests/integration/nccl/nccl_releases_test.

Each release ends up as ${P2PTRACE_CACHE:-$HOME/.cache/p2ptrace}/nccl/<version>/libnccl.so.2. A release
already there with the pinned hash is not downloaded again. The wheels come the way this machine's own
client fetches them: `python3 -m pip download` by package name and version, hash-checked against the
pins (--require-hashes), so a pip configured for a mirror or a proxy (pip.conf, PIP_INDEX_URL) is used
as configured; the script names no package host. Python standard library and pip only. The test
fails when a release is missing; P2PTRACE_SKIP_NCCL_RELEASES=1 skips it on purpose (offline work).

Usage: scripts/fetch-nccl-releases.py [--only VERSION]   fetch what is missing, verify everything
       scripts/fetch-nccl-releases.py --list              print the pinned versions, one a line (read by CMake)
       scripts/fetch-nccl-releases.py --hashes            print "version sha256-of-libnccl.so.2", one a line

The pins are the sha256 values the package index publishes for each wheel. 2.13.4 is the pre-2.16
release: it exports ncclX without the pncclX aliases (checked with `nm -D`). The wheels are about 1.3 GB
together, almost all of it libnccl.so.2 itself.
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

from p2ptrace_cache import cache_root, sha256_of

# version, package, wheel sha256, libnccl.so.2 sha256
RELEASES = [
    ("2.13.4", "nvidia-nccl-cu11",
     "dec943cc2b75a700565965b59918137778e7917802734f40bf6084c043d9ad98",
     "7d5daf2de19fd2426f5a53ab41336815b107ff4293005f9ab496b2edd470b6b6"),
    ("2.18.3", "nvidia-nccl-cu12",
     "89cf220910c43e53df992f54f7aa2a35c6d606b077c9ae95b1f17c544d3ad3f3",
     "40f71adb510e5242c6af1315b9ebac47aaeb00eb36418b91b3e7f7a0cd812333"),
    ("2.21.5", "nvidia-nccl-cu12",
     "8579076d30a8c24988834445f8d633c697d42397e92ffc3f63fa26766d25e0a0",
     "78df2f31f6db8142ec546a1e5a31cb066f7892d12d2f665b448f8069a08ef807"),
    ("2.23.4", "nvidia-nccl-cu12",
     "b097258d9aab2fa9f686e33c6fe40ae57b27df60cedbd15d139701bb5509e0c1",
     "68baad42a19091c4ef92d26a16737c1f3371440eb9526edc4c899c9093131ab0"),
    ("2.26.2", "nvidia-nccl-cu12",
     "694cf3879a206553cc9d7dbda76b13efaf610fdb70a50cba303de1b0d1530ac6",
     "e4a7aee9c3eecf53fac780441d2f03b578ab8db8874b71f8e391bcec7adb2899"),
    ("2.32.3", "nvidia-nccl-cu12",
     "bb94b2348e4861d5e8aa00b36c3d12d9bdf9c6369b82cbb723de0b582280a21c",
     "a23d2e3e47ad7f8987ac73eb04a373d6d40cfbb3a7a5bf41a9e0e8434817559b"),
]
MEMBER = "nvidia/nccl/lib/libnccl.so.2"
CHUNK = 1 << 20
# The pinned wheels' platform tags, newest first: pip picks the one wheel of each release that has one.
PLATFORMS = ["manylinux_2_27_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"]


def cache_dir():
    return os.path.join(cache_root(), "nccl")


def download(package, version, wheel_sha, dest):
    """The release's wheel into dest by pip (its configuration, its retries), hash-checked; returns its path."""
    requirements = os.path.join(dest, "requirements.txt")
    with open(requirements, "w") as f:
        f.write(f"{package}=={version} --hash=sha256:{wheel_sha}\n")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-cache-dir",
               "--disable-pip-version-check", "--quiet", "--require-hashes", "--timeout", "60", "--dest", dest,
               "-r", requirements]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip download {package}=={version} failed (exit {done.returncode}):\n{done.stdout.strip()}")
    wheels = glob.glob(os.path.join(dest, "*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"pip download {package}=={version} left {len(wheels)} wheels, expected one")
    if sha256_of(wheels[0]) != wheel_sha:  # pip checked it; a second look costs a second
        raise RuntimeError(f"{os.path.basename(wheels[0])}: sha256 differs from the pinned {wheel_sha}")
    return wheels[0]


def fetch(version, package, wheel_sha, lib_sha, root):
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
        wheel = download(package, version, wheel_sha, tmp)
        size = os.path.getsize(wheel)
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
    args = argv[1:]
    if args == ["--list"]:
        print("\n".join(r[0] for r in RELEASES))
        return 0
    if args == ["--hashes"]:
        print("\n".join(f"{r[0]} {r[3]}" for r in RELEASES))
        return 0
    releases = RELEASES
    if len(args) == 2 and args[0] == "--only":
        releases = [r for r in RELEASES if r[0] == args[1]]
        if not releases:
            print(f"error: {args[1]} is not a pinned release ({', '.join(r[0] for r in RELEASES)})", file=sys.stderr)
            return 2
    elif args:
        print(f"usage: {argv[0]} [--only VERSION | --list | --hashes]", file=sys.stderr)
        return 2
    root = cache_dir()
    total, seconds = 0, 0.0
    for release in releases:
        try:
            size, took = fetch(*release, root)
        except (OSError, RuntimeError, zipfile.BadZipFile, KeyError) as e:
            print(f"error: NCCL {release[0]}: {e}", file=sys.stderr)
            return 1
        total, seconds = total + size, seconds + took
    what = f"downloaded {total / 1e6:.0f} MB in {seconds:.1f} s" if total else "all cached"
    print(f"NCCL releases in {root}: {', '.join(r[0] for r in releases)} ({what})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
