#!/bin/bash
# The whole test suite from a fresh Debian 12 machine, as root: installs the build
# dependencies, builds with warnings as errors and runs every test (unit; integration
# as uid 65534 against a real daemon; the hw suite skips without a hardware PMU), then
# builds again with AddressSanitizer and UndefinedBehaviorSanitizer and runs it all again.
# Usage: tests/run.sh [--quick]   (--quick: skip the sanitizer pass)
set -euo pipefail
cd "$(dirname "$0")/.."
.ci/deps

run_suite() {
	local dir=$1
	shift
	echo "== $dir: cmake $*"
	cmake -S . -B "$dir" -DPMC_WERROR=ON "$@" >/dev/null
	cmake --build "$dir" -j"$(nproc)" >"$dir/build.log" 2>&1 ||
		{ cat "$dir/build.log" >&2; echo "build failed in $dir" >&2; return 1; }
	# The integration tests run clients as uid 65534: let it reach the built binaries.
	chmod -R o+rX "$dir" 2>/dev/null || true # a convenience; lib.sh copies what uid 65534 runs
	(cd "$dir" && ctest --output-on-failure -j2)
}

run_suite build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${1:-}" != --quick ]; then
	run_suite build-sanitize -DCMAKE_BUILD_TYPE=Debug -DPMC_SANITIZE=address,undefined
fi
