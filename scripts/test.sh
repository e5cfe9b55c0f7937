#!/usr/bin/env bash
# Runs every test: the default build, then AddressSanitizer+UBSan and ThreadSanitizer builds.
# Usage: scripts/test.sh [PRESET…]   (default: default asan tsan)
source "$(dirname "$0")/common.sh"
presets=("$@")
((${#presets[@]})) || presets=(default asan tsan)
for preset in "${presets[@]}"; do
  build "$preset"
  log "testing ($preset)"
  ctest --preset "$preset" -j "$(nproc)" --timeout 300
done
log "all tests passed (${presets[*]})"
