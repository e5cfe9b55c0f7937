# Sourced by demo.sh and test.sh: install what is missing, then configure and build a preset.
# Idempotent: a second run installs nothing and rebuilds only what changed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CUDA_ROOT=${CUDAToolkit_ROOT:-/usr/local/cuda}

# Debian 12 packages the build and the tests need (the CUDA toolkit itself is not a Debian package).
PACKAGES=(build-essential cmake ninja-build pkg-config python3 python3-pip python3-venv ca-certificates binutils file
          libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
          libabsl-dev libfmt-dev libcli11-dev libunwind-dev clang libclang-rt-14-dev valgrind strace ccache
          chromium     # chromium: the HTML report test renders the page headless; ccache: the wheel's build
          prometheus)  # prometheus: its promtool checks the files of doctor/export --prometheus

# Each step with the seconds since the script started: where CI's time goes, read off its log.
log() { printf '\033[1m==> [%4ss] %s\033[0m\n' "$SECONDS" "$*" >&2; }

ensure_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  local sudo=()
  [ "$(id -u)" = 0 ] || sudo=(sudo)
  log "installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_cuda() {
  if [ ! -f "$CUDA_ROOT/include/cuda_runtime_api.h" ] || [ ! -x "$CUDA_ROOT/bin/nvcc" ]; then
    echo "error: no CUDA toolkit at $CUDA_ROOT (set CUDAToolkit_ROOT to where it is installed)" >&2
    exit 2
  fi
}

# build PRESET: configure (first time only) and build everything of that preset.
build() {
  local preset=$1
  ensure_packages
  ensure_cuda
  cd "$ROOT"
  if [ ! -f "build/$preset/build.ninja" ]; then
    log "configuring ($preset)"
    cmake --preset "$preset" -DCUDAToolkit_ROOT="$CUDA_ROOT" >/dev/null
  fi
  log "building ($preset)"
  cmake --build --preset "$preset" -j "$(nproc)"
}
