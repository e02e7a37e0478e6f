#!/bin/bash
# The whole test suite from a fresh Debian 12 machine, as root: installs the build
# dependencies, builds with warnings as errors and runs every test (unit; integration
# as uid 65534 against a real daemon; the hw suite skips without a hardware PMU), builds
# the Debian packages and installs them in Debian 12 booted with systemd as PID 1
# (tests/packaging), builds every target with clang as well and runs its unit tests,
# then builds again with AddressSanitizer and UndefinedBehaviorSanitizer and runs it all
# again, and fuzzes with libFuzzer the daemon's decode and dispatch (600,000 inputs), its hand
# decoder of sample batches against protobuf-c (10,000,000) and its state files (load,
# save again, query; 500,000), and the library's reading of a hostile daemon's replies
# (200,000), failing on any crash, leak, fd left open, sanitizer report or difference.
# The fuzzing is the same at every run (seed PMC_FUZZ_SEED, default 1), so that a run
# fails only on a change, never on the luck of the draw; a longer hunt with other seeds:
#   PMC_FUZZ_SECONDS=600 PMC_FUZZ_SEED=0 tests/run.sh   (seed 0: a new one each time)
# Usage: tests/run.sh [--quick]   (--quick: skip the clang, sanitizer and fuzzing passes)
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
tests/hw/emulated-pmu.sh build-emu
# The Debian packages as an operator installs them (tests/packaging/run.sh): built and
# lintian-clean, then Debian 12 booted with systemd as PID 1, under systemd-nspawn (install,
# socket activation, restart and upgrade under a running client, purge) and under QEMU with
# Debian's own kernel (exact figures at its perf_event_paranoid 3). Downloads are cached
# in /var/cache/pmc-tests (PMC_TEST_CACHE).
echo "== build-pkg: Debian packages, and Debian 12 with systemd as PID 1 (nspawn, QEMU)"
tests/packaging/run.sh build-pkg build-test/tests/pmc-test-client
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

echo "== build-fuzz: libFuzzer over the daemon's decode and dispatch, pmcctl diff's reader and the pprof writer"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=Debug -DPMC_FUZZ=ON \
	-DPMC_SANITIZE=address,undefined -DPMC_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz-dispatch fuzz-batch fuzz-state fuzz-client fuzz-diff fuzz-pprof -j"$(nproc)" >build-fuzz/build.log 2>&1 ||
	{ cat build-fuzz/build.log >&2; exit 1; }
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
# fuzz TARGET RUNS [SEEDS]: RUNS inputs from a seed corpus (tests/fuzz/corpus by default),
# or PMC_FUZZ_SECONDS of them; a crash, leak or report fails the run, and the input that
# failed is kept in build-fuzz/ (crash-*, leak-*) to be run again: build-fuzz/tests/TARGET FILE.
fuzz() {
	local limit="-runs=$2"
	[ -z "${PMC_FUZZ_SECONDS:-}" ] || limit="-max_total_time=$PMC_FUZZ_SECONDS"
	rm -rf "$corpus"/*
	cp "${3:-tests/fuzz/corpus}"/* "$corpus/"
	local start=$SECONDS
	build-fuzz/tests/"$1" -seed="${PMC_FUZZ_SEED:-1}" "$limit" -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix=build-fuzz/ -print_final_stats=1 "$corpus" >build-fuzz/"$1".log 2>&1 ||
		{ tail -60 build-fuzz/"$1".log >&2; echo "$1 found a crash or leak (build-fuzz/$1.log)" >&2; exit 1; }
	echo "$1: $(grep -E '^stat::number_of_executed_units' build-fuzz/"$1".log | awk '{ print $2 }') inputs in $((SECONDS - start)) s"
}
# Decode and dispatch of every request by the daemon's session code.
fuzz fuzz-dispatch 600000
# The hand decoder of sample batches against protobuf-c, field by field.
fuzz fuzz-batch 10000000
# State files (--state) of any bytes, loaded as at start-up, saved again, queried.
fuzz fuzz-state 500000 tests/fuzz/corpus-state
# The library's reading of a hostile daemon's replies to a registration, on time and late.
fuzz fuzz-client 200000 tests/fuzz/corpus-client
# pmcctl diff's reader: JSON files of any bytes, read and compared (about 45 s here).
fuzz fuzz-diff 150000 tests/fuzz/corpus-diff
# pmcctl's pprof writer on any daemon reply (about 40 s here).
fuzz fuzz-pprof 400000 tests/fuzz/corpus-pprof
echo "fuzz: no crash, no leak"
