#!/bin/bash
# The whole test suite from a fresh Debian 12 machine, as root: installs the build
# dependencies, builds with warnings as errors and runs every test (unit; integration
# as uid 65534 against a real daemon; the hw suite skips without a hardware PMU), builds
# every target with clang as well and runs its unit tests, then builds again with
# AddressSanitizer and UndefinedBehaviorSanitizer and runs it all again,
# and fuzzes the daemon's decode and dispatch with libFuzzer for PMC_FUZZ_SECONDS
# (default 120), its hand decoder of sample batches against protobuf-c for 30 s and its
# state files (load, save again, query) for 30 s, failing on any crash, leak, sanitizer
# report or difference.
# Usage: tests/run.sh [--quick]   (--quick: skip the sanitizer and fuzzing passes)
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
# The hw suite against a real kernel PMU: QEMU's emulated arm64 one (build-emu; 1-3 minutes).
echo "== build-emu: the hw suite on an emulated arm64 PMU"
tests/emulated-pmu.sh build-emu
[ "${1:-}" = --quick ] && exit 0

# The other compiler: everything (benchmarks too) with clang's warnings as errors, and the
# unit tests of that build.
echo "== build-clang: clang-14, every target, warnings as errors; unit tests"
cmake -S . -B build-clang -DCMAKE_C_COMPILER=clang-14 -DPMC_WERROR=ON \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPMC_BUILD_BENCH=ON >/dev/null
cmake --build build-clang -j"$(nproc)" >build-clang/build.log 2>&1 ||
	{ cat build-clang/build.log >&2; echo "build failed in build-clang" >&2; exit 1; }
(cd build-clang && ctest --output-on-failure -L unit)

run_suite build-sanitize -DCMAKE_BUILD_TYPE=Debug -DPMC_SANITIZE=address,undefined

echo "== build-fuzz: libFuzzer over the daemon's decode and dispatch"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=Debug -DPMC_FUZZ=ON \
	-DPMC_SANITIZE=address,undefined -DPMC_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz-dispatch fuzz-batch fuzz-state -j"$(nproc)" >build-fuzz/build.log 2>&1 ||
	{ cat build-fuzz/build.log >&2; exit 1; }
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
# fuzz TARGET SECONDS [SEEDS]: each from a seed corpus (tests/fuzz/corpus by default); a
# crash, leak or report fails the run.
fuzz() {
	rm -rf "$corpus"/*
	cp "${3:-tests/fuzz/corpus}"/* "$corpus/"
	build-fuzz/tests/"$1" -max_total_time="$2" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 "$corpus" >build-fuzz/"$1".log 2>&1 ||
		{ tail -60 build-fuzz/"$1".log >&2; echo "$1 found a crash or leak (build-fuzz/$1.log)" >&2; exit 1; }
	echo "$1: $(grep -E '^stat::number_of_executed_units' build-fuzz/"$1".log | awk '{ print $2 }') inputs in $2 s"
}
# Decode and dispatch of every request by the daemon's session code.
fuzz fuzz-dispatch "${PMC_FUZZ_SECONDS:-120}"
# The hand decoder of sample batches against protobuf-c, field by field.
fuzz fuzz-batch 30
# State files (--state) of any bytes, loaded as at start-up, saved again, queried.
fuzz fuzz-state 30 tests/fuzz/corpus-state
echo "fuzz: no crash, no leak"
