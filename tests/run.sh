#!/bin/bash
# The whole test suite from a fresh Debian 12 machine, as root: installs the build
# dependencies, builds with warnings as errors, runs every test (unit, integration
# as uid 65534 against a real daemon; the hw suite skips without a hardware PMU).
# Usage: tests/run.sh [BUILD_DIR]   (default build-test)
set -euo pipefail
cd "$(dirname "$0")/.."
.ci/deps
dir=${1:-build-test}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPMC_WERROR=ON >/dev/null
cmake --build "$dir" -j"$(nproc)"
# The integration tests run clients as uid 65534: let it reach the built binaries.
chmod -R o+rX "$dir" 2>/dev/null || true
cd "$dir"
ctest --output-on-failure -j2
