#!/bin/bash
# The whole test suite from a fresh Debian 12 machine, as root: installs the build
# dependencies, builds with warnings as errors and runs every test (unit; integration
# as uid 65534 against a real daemon; the hw suite skips without a hardware PMU), builds
# the Debian packages and installs them in Debian 12 booted with systemd as PID 1
# (tests/packaging), builds every target with clang as well and runs its unit tests,
# then builds again with AddressSanitizer and UndefinedBehaviorSanitizer and runs it all
# again, and fuzzes with libFuzzer the daemon's decode and dispatch (600,000 inputs), its
# hand decoder of sample batches against protobuf-c (10,000,000) and its state files (load,
# save again, query; 500,000), and the library's reading of a hostile daemon's replies
# (200,000), failing on any crash, leak, fd left open, sanitizer report or difference; each
# fuzzer stops at its count or its time (8 minutes for dispatch, 4 for state files, 1.5 for
# the others), so a loaded machine runs the first part of the same inputs.
# The fuzzing is the same at every run (seed PMC_FUZZ_SEED, default 1), so that a run
# fails only on a change, never on the luck of the draw; a longer hunt with other seeds:
#   PMC_FUZZ_SECONDS=600 PMC_FUZZ_SEED=0 tests/run.sh   (seed 0: a new one each time)
# Usage: tests/run.sh [--quick]   (--quick: skip the clang, sanitizer and fuzzing passes)
#        tests/run.sh --soak N [--seed S]   (the integration tests N times under load: below)
set -euo pipefail
cd "$(dirname "$0")/.."
soak=
seed=
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1 ;;
	--soak) soak=${2:?--soak N}; shift ;;
	--seed) seed=${2:?--seed S}; shift ;;
	*) echo "usage: tests/run.sh [--quick] | --soak N [--seed S]" >&2; exit 2 ;;
	esac
	shift
done
.ci/deps

run_suite() {
	local dir=$1
	shift
	echo "== [$SECONDS s] $dir: cmake $*"
	cmake -S . -B "$dir" -DPMC_WERROR=ON "$@" >/dev/null
	cmake --build "$dir" -j"$(nproc)" >"$dir/build.log" 2>&1 ||
		{ cat "$dir/build.log" >&2; echo "build failed in $dir" >&2; return 1; }
	# The integration tests run clients as uid 65534: let it reach the built binaries.
	chmod -R o+rX "$dir" 2>/dev/null || true # a convenience; lib.sh copies what uid 65534 runs
	(cd "$dir" && ctest --output-on-failure -j2)
}

# --soak N: the integration tests N times in build-test (built if it is not), then once in
# build-sanitize (ASan and UBSan), with two busy loops beside them all the while, as on a
# shared CI runner. Each run starts the tests in an order drawn from its seed (printed), two at
# a time (a RUN_SERIAL or RESOURCE_LOCK test alone, as ctest runs it); a failure prints the
# seed, the run, the test's output and its daemon's log, and the soak goes on to the end (exit
# 1 if any failed). One run again, in the same order: tests/run.sh --soak 1 --seed SEED;
# --soak 0: the sanitized run alone.
if [ -n "$soak" ]; then
	[ "$soak" -ge 0 ] 2>/dev/null || { echo "--soak N: N is a number of runs (0: the sanitized one alone)" >&2; exit 2; }
	[ -n "$seed" ] || seed=$(((RANDOM << 15) | RANDOM))
	busy=()
	# shellcheck disable=SC2317 # called by the trap
	stop_busy() { local p; for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; }
	trap stop_busy EXIT
	for _ in 1 2; do
		sh -c 'while :; do :; done' &
		busy+=($!)
	done
	build_once() { # DIR CMAKE-ARGS...: configure and build DIR unless it is built already
		local dir=$1
		shift
		if [ ! -f "$dir/CTestTestfile.cmake" ]; then
			echo "== $dir: cmake $*"
			cmake -S . -B "$dir" -DPMC_WERROR=ON "$@" >/dev/null
		fi
		cmake --build "$dir" -j2 >"$dir/build.log" 2>&1 ||
			{ cat "$dir/build.log" >&2; echo "build failed in $dir" >&2; exit 1; }
		chmod -R o+rX "$dir" 2>/dev/null || true
	}
	failures=0
	# soak_run DIR RUN SEED: DIR's integration tests once, in an order drawn from SEED
	soak_run() {
		local dir=$1 run=$2 s=$3 logs t p start=$SECONDS
		logs=$dir/soak/run-$run
		rm -rf "$logs"
		mkdir -p "$logs"
		# name, then "serial" for a test ctest runs alone
		(cd "$dir" && ctest --show-only=json-v1 -L integration) | jq -r '.tests[] | [.name,
			(if any((.properties // [])[]; .name == "RUN_SERIAL" or .name == "RESOURCE_LOCK")
			 then "serial" else "-" end)] | @tsv' >"$logs/tests"
		awk -v s="$s" 'BEGIN { srand(s) } { print rand() "\t" $0 }' "$logs/tests" | sort -n |
			cut -f2- >"$logs/order"
		echo "== $dir: run $run, seed $s: $(wc -l <"$logs/order") integration tests, two at a time beside two busy loops"
		local running=() ended
		reap() { # wait for one running test to end
			wait -n -p ended "${running[@]}" || true
			local keep=() q
			for q in "${running[@]}"; do [ "$q" = "$ended" ] || keep+=("$q"); done
			running=("${keep[@]}")
		}
		while IFS=$'\t' read -r t p; do
			if [ "$p" = serial ]; then
				while [ ${#running[@]} -gt 0 ]; do reap; done
			else
				while [ ${#running[@]} -ge 2 ]; do reap; done
			fi
			(
				cd "$dir"
				rc=0
				ctest -R "^$t\$" --output-on-failure >"soak/run-$run/$t.log" 2>&1 || rc=$?
				echo $rc >"soak/run-$run/$t.rc"
			) &
			running+=($!)
			[ "$p" != serial ] || reap
		done <"$logs/order"
		while [ ${#running[@]} -gt 0 ]; do reap; done
		local failed=0
		while IFS=$'\t' read -r t p; do
			# ctest -R that matched nothing passes too: a test passed only where it says so.
			[ "$(cat "$logs/$t.rc" 2>/dev/null)" = 0 ] && grep -q "^100% tests passed" "$logs/$t.log" && continue
			failed=$((failed + 1))
			echo "SOAK FAIL: $t in $dir, run $run, seed $s (again, in the same order: tests/run.sh --soak 1 --seed $s; the order: $logs/order)"
			cat "$logs/$t.log"
			# A test ctest killed at its time-out had no chance to print its daemon's log: it is
			# still in the temporary directory the test named.
			local tmp
			for tmp in $(sed -n 's|^# temporary directory: \(/tmp/pmc-test\.[A-Za-z0-9]*\)$|\1|p' "$logs/$t.log"); do
				[ -f "$tmp/daemon.log" ] || continue
				echo "--- $tmp/daemon.log (the test did not end on its own) ---"
				tail -n 200 "$tmp/daemon.log"
				rm -rf "$tmp"
			done
		done <"$logs/order"
		echo "== $dir: run $run, seed $s: $failed failed of $(wc -l <"$logs/order"), $((SECONDS - start)) s"
		failures=$((failures + failed))
	}
	soak_start=$SECONDS
	build_once build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
	for r in $(seq "$soak"); do
		soak_run build-test "$r" $((seed + r - 1))
	done
	build_once build-sanitize -DCMAKE_BUILD_TYPE=Debug -DPMC_SANITIZE=address,undefined
	soak_run build-sanitize 1 $((seed + soak))
	echo "== soak: $soak runs and 1 sanitized, seed $seed: $failures failed, $((SECONDS - soak_start)) s"
	[ "$failures" = 0 ] || exit 1
	exit 0
fi

run_suite build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The hw suite against a real kernel PMU: QEMU's emulated arm64 one (build-emu; 1-3 minutes).
echo "== [$SECONDS s] build-emu: the hw suite on an emulated arm64 PMU"
tests/hw/emulated-pmu.sh build-emu
# The Debian packages as an operator installs them (tests/packaging/run.sh): built and
# lintian-clean, then Debian 12 booted with systemd as PID 1, under systemd-nspawn (install,
# socket activation, restart and upgrade under a running client, purge) and under QEMU with
# Debian's own kernel (exact figures at its perf_event_paranoid 3). Downloads are cached
# in /var/cache/pmc-tests (PMC_TEST_CACHE).
echo "== [$SECONDS s] build-pkg: Debian packages, and Debian 12 with systemd as PID 1 (nspawn, QEMU)"
tests/packaging/run.sh build-pkg build-test/tests/pmc-test-client
[ -n "${quick:-}" ] && exit 0

# The other compiler: everything (benchmarks too) with clang's warnings as errors, and the
# unit tests of that build.
echo "== [$SECONDS s] build-clang: clang-14, every target, warnings as errors; unit tests"
cmake -S . -B build-clang -DCMAKE_C_COMPILER=clang-14 -DPMC_WERROR=ON \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo -DPMC_BUILD_BENCH=ON >/dev/null
cmake --build build-clang -j"$(nproc)" >build-clang/build.log 2>&1 ||
	{ cat build-clang/build.log >&2; echo "build failed in build-clang" >&2; exit 1; }
(cd build-clang && ctest --output-on-failure -L unit)

run_suite build-sanitize -DCMAKE_BUILD_TYPE=Debug -DPMC_SANITIZE=address,undefined

echo "== [$SECONDS s] build-fuzz: libFuzzer over the daemon's decode and dispatch, pmcctl diff's reader and the pprof writer"
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=Debug -DPMC_FUZZ=ON \
	-DPMC_SANITIZE=address,undefined -DPMC_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz-dispatch fuzz-batch fuzz-ingest fuzz-state fuzz-client fuzz-diff fuzz-pprof -j"$(nproc)" >build-fuzz/build.log 2>&1 ||
	{ cat build-fuzz/build.log >&2; exit 1; }
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
# fuzz TARGET RUNS SECONDS [SEEDS]: the first RUNS inputs drawn from the seed (a corpus in
# tests/fuzz/corpus by default), or as many of them as SECONDS allow: a loaded machine (a shared
# CI runner, the soak's busy loops) runs a shorter prefix of the same inputs instead of the
# whole stage taking three times as long (fuzz-dispatch alone took 24 minutes beside two busy
# loops on 6 Dec); a quiet one runs them all. PMC_FUZZ_SECONDS replaces both. A crash, leak or
# report fails the run, and the input that failed is kept in build-fuzz/ (crash-*, leak-*) to
# be run again: build-fuzz/tests/TARGET FILE.
fuzz() {
	local limit=(-runs="$2" -max_total_time="$3")
	[ -z "${PMC_FUZZ_SECONDS:-}" ] || limit=(-max_total_time="$PMC_FUZZ_SECONDS")
	rm -rf "$corpus"/*
	cp "${4:-tests/fuzz/corpus}"/* "$corpus/"
	local start=$SECONDS n
	build-fuzz/tests/"$1" -seed="${PMC_FUZZ_SEED:-1}" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 \
		-artifact_prefix=build-fuzz/ -print_final_stats=1 "$corpus" >build-fuzz/"$1".log 2>&1 ||
		{ tail -60 build-fuzz/"$1".log >&2; echo "$1 found a crash or leak (build-fuzz/$1.log)" >&2; exit 1; }
	n=$(grep -E '^stat::number_of_executed_units' build-fuzz/"$1".log | awk '{ print $2 }')
	if [ -z "${PMC_FUZZ_SECONDS:-}" ] && [ "$n" -lt "$2" ]; then
		echo "$1: $n of $2 inputs in $((SECONDS - start)) s (stopped at its $3 s)"
	else
		echo "$1: $n inputs in $((SECONDS - start)) s"
	fi
}
# Decode and dispatch of every request by the daemon's session code (about 430 s here).
fuzz fuzz-dispatch 600000 480
# The hand decoder of sample batches against protobuf-c, field by field.
fuzz fuzz-batch 10000000 90
# Samples counted in place against protobuf-c's arrays, every aggregate compared.
fuzz fuzz-ingest 100000 90
# State files (--state) of any bytes, loaded as at start-up, saved again, queried (about 200 s).
fuzz fuzz-state 500000 240 tests/fuzz/corpus-state
# The library's reading of a hostile daemon's replies to a registration, on time and late.
fuzz fuzz-client 200000 90 tests/fuzz/corpus-client
# pmcctl diff's reader: JSON files of any bytes, read and compared (about 60 s here).
fuzz fuzz-diff 150000 90 tests/fuzz/corpus-diff
# pmcctl's pprof writer on any daemon reply (about 50 s here).
fuzz fuzz-pprof 400000 90 tests/fuzz/corpus-pprof
echo "fuzz: no crash, no leak"
echo "== [$SECONDS s] tests/run.sh: every stage passed"
