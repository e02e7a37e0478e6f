#!/bin/bash
# bench/emulated.sh: bench/run's row 7 (a region's cost in instructions, counted by the PMU
# itself) in the emulated arm64 machine of tests/hw/emulated-pmu.sh, where QEMU's PMU counts
# exactly (-icount shift=0, one vCPU): the instructions one region begin+end costs the
# application with 1, 2 and 4 hardware events, against the floor for the same work, with
# user-space reads (kernel.perf_user_access=1) and with read() (0). No threshold: it reports.
#
# Usage (as root, in the guest): PMCDAEMON_BIN=... bench/emulated.sh BENCH_REGION_BINARY
set -euo pipefail
REGION=${1:?usage: emulated.sh PATH/TO/pmc-bench-region}
: "${PMCDAEMON_BIN:?}"
TMP=$(mktemp -d)
SOCK=$TMP/pmc.sock
UA=/proc/sys/kernel/perf_user_access
UA_ORIG=$(cat "$UA")
"$PMCDAEMON_BIN" --socket "$SOCK" 2>"$TMP/daemon.log" &
DAEMON_PID=$!
trap 'kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; echo "$UA_ORIG" >"$UA"; rm -rf "$TMP"' EXIT
for _ in $(seq 100); do
	[ -S "$SOCK" ] && break
	sleep 0.05
done
[ -S "$SOCK" ] || { cat "$TMP/daemon.log" >&2; exit 1; }

EVENTS=(instructions cycles instructions:k cycles:k)
echo "bench: instructions per region begin+end (user mode; kernel mode in brackets), floor = the" \
	"same counters read by two inline passes of the reader + 2 clock reads; 4096 regions (8" \
	"batches sent), and without the batches: the smallest of 4 blocks of 256 regions"
for ua in 1 0; do
	echo "$ua" >"$UA"
	for n in 1 2 4; do
		list=$(IFS=,; echo "${EVENTS[*]:0:$n}")
		PMC_SOCKET=$SOCK PMC_EVENTS=$list "$REGION" instructions 3 4096 >"$TMP/out"
		# Blocks of 256 regions, the smallest of 4: one without a batch sent (every 512).
		PMC_SOCKET=$SOCK PMC_EVENTS=$list "$REGION" instructions 4 256 >"$TMP/nobatch"
		# One block of 4096 (8 batches), wherever the batches were packed.
		PMC_SOCKET=$SOCK PMC_EVENTS=$list "$REGION" instructions 1 4096 >"$TMP/one"
		kv() { sed -n "s/^$1=//p" "${2:-$TMP/out}"; }
		echo "bench: perf_user_access=$ua, $n event(s) ($list), pmc $(kv pmc_kind)," \
			"floor $(kv floor_kind): pmc_begin+pmc_end $(kv pmc_instr_user) [$(kv pmc_instr_kernel)]," \
			"PMC_REGION $(kv macro_instr_user) [$(kv macro_instr_kernel)]," \
			"floor $(kv floor_instr_user) [$(kv floor_instr_kernel)]:" \
			"$(kv pmc_instr_user_ratio)x the floor's user instructions" \
			"(PMC_REGION $(kv macro_instr_user_ratio)x); without the batches:" \
			"$(kv pmc_instr_user "$TMP/nobatch") ($(kv pmc_instr_user_ratio "$TMP/nobatch")x)"
		# The minimal floor (bench/floor-min.h), where every counter is in its page.
		if [ -n "$(kv floor_min_instr_user)" ]; then
			echo "bench: perf_user_access=$ua, $n event(s): minimal floor (floor-min.h)" \
				"$(kv floor_min_instr_user): pmc_begin+pmc_end $(kv pmc_instr_user_min_ratio)x" \
				"that; without the batches $(kv pmc_instr_user_min_ratio "$TMP/nobatch")x"
		fi
		# Issue 33's F3 (bench/floor-f3.h): only the passes, compiler barriers, the deltas.
		if [ -n "$(kv floor_f3_instr_user)" ]; then
			echo "bench: perf_user_access=$ua, $n event(s): F3 (floor-f3.h)" \
				"$(kv floor_f3_instr_user): pmc_begin+pmc_end $(kv pmc_instr_user_f3_ratio)x" \
				"that (batches amortized, the least of 3 blocks of 4096); without the batches" \
				"$(kv pmc_instr_user "$TMP/nobatch") = $(kv pmc_instr_user_f3_ratio "$TMP/nobatch")x;" \
				"one block of 4096 (after one unmeasured): $(kv pmc_instr_user "$TMP/one")" \
				"= $(kv pmc_instr_user_f3_ratio "$TMP/one")x"
		fi
		# Where pmc takes the wall time from the page: the floor without its clock_gettime.
		if [ -n "$(kv floor_page_instr_user)" ]; then
			echo "bench: perf_user_access=$ua, $n event(s): floor with the page's clock" \
				"(no clock_gettime) $(kv floor_page_instr_user): pmc_begin+pmc_end" \
				"$(kv pmc_instr_user_page_ratio)x that; without the batches" \
				"$(kv pmc_instr_user_page_ratio "$TMP/nobatch")x"
		fi
	done
done
