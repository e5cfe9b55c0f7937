#!/usr/bin/env python3
"""Builds the p2ptrace wheel: `pip install dist/p2ptrace-*.whl` gives the `p2ptrace` command, with the shim
and the audit module inside the package.

1. scikit-build-core (pyproject.toml) configures the project with P2PTRACE_PACKAGE_ONLY (core, the shim,
   the audit module, the CLI: nothing else is compiled) and installs it into the wheel's p2ptrace/.
   Its CMake build directory is kept (--build-dir, default build/wheel), so a second build compiles only
   what changed.
2. auditwheel repair (with patchelf) copies every library the CLI needs that a manylinux system does not
   promise (abseil, fmt) into the wheel's p2ptrace.libs/ under hashed names, points the CLI's RPATH at
   them, and names the platform by the newest glibc/libstdc++ symbol versions any file in the wheel
   needs (manylinux_2_X). The shim and the audit module need only the C library and stay untouched.

The tools come pinned from scripts/requirements-wheel.txt (scripts/fetch-wheel-tools.py; cached).
Usage: scripts/build-wheel.py [--out DIR (default dist)] [--build-dir DIR (default build/wheel)]
"""
import argparse
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from p2ptrace_cache import cache_root  # noqa: E402


def tools_venv():
    path = os.path.join(ROOT, "scripts", "fetch-wheel-tools.py")
    spec = importlib.util.spec_from_file_location("fetch_wheel_tools", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ensure()


def run(command, what, env=None):
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"build-wheel: {what} failed (exit {done.returncode}):\n{done.stdout[-6000:]}")
    return done.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "dist"), help="where the wheel goes")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build", "wheel"), help="CMake build directory (kept)")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    build_dir = os.path.abspath(args.build_dir)
    venv = tools_venv()
    bin_dir = os.path.join(venv, "bin")
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))

    # ccache, where installed (scripts/common.sh installs it): CI builds in a fresh clone, where the kept
    # build directory cannot help (new sources, new build tree); ccache keyed on the compile commands
    # relative to the checkout (CCACHE_BASEDIR) recompiles nothing that did not change.
    settings = [f"--config-settings=build-dir={build_dir}"]
    if shutil.which("ccache") and os.environ.get("P2PTRACE_WHEEL_CCACHE", "1") != "0":
        settings += ["--config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache",
                     "--config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        env.update(CCACHE_DIR=os.path.join(cache_root(), "ccache-wheel"), CCACHE_BASEDIR=ROOT,
                   CCACHE_NOHASHDIR="true", CCACHE_MAXSIZE="300M")

    raw = os.path.join(build_dir, "unrepaired")
    shutil.rmtree(raw, ignore_errors=True)
    t0 = time.monotonic()
    print(f"build-wheel: building in {build_dir}", flush=True)
    run([os.path.join(bin_dir, "python"), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index",
         "--disable-pip-version-check", "--wheel-dir", raw, *settings, ROOT],
        "pip wheel (scikit-build-core)", env)
    built = glob.glob(os.path.join(raw, "p2ptrace-*.whl"))
    if len(built) != 1:
        sys.exit(f"build-wheel: expected one wheel in {raw}, found {built}")
    t1 = time.monotonic()

    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, "p2ptrace-*.whl")):  # so that dist/p2ptrace-*.whl is this one
        os.remove(old)
    report = run([os.path.join(bin_dir, "auditwheel"), "repair", "--wheel-dir", out, built[0]],
                 "auditwheel repair", env)
    wheels = glob.glob(os.path.join(out, "p2ptrace-*.whl"))
    if len(wheels) != 1:
        sys.exit(f"build-wheel: expected one repaired wheel in {out}, found {wheels}\n{report}")
    t2 = time.monotonic()
    size = os.path.getsize(wheels[0])
    print(f"build-wheel: {wheels[0]} ({size / 2**20:.1f} MiB): build {t1 - t0:.0f} s, repair {t2 - t1:.0f} s",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
