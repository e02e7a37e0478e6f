#!/bin/bash
# bench/fairness.sh: no user may hold the loop (issue "Trust, round three", items 2 and 3).
# A victim (uid 65533) connects, says Hello and asks for Status, 10 ms apart (pmc-test-raw
# victim), idle and beside each kind of hog of uid 65534, whose own processes hold
# regions with histograms (PMC_BENCH_PROGRAMS, default 25, programs x 4,000 + a second process
# of the first: 104,000):
#   whole   2 connections asking for whole (not streamed) histogram Queries (about 24 MB:
#           refused past the 4 MiB cap), as fast as they can
#   stream  1 connection reading streamed histogram Queries as fast as it can
#   flood   4 connections flooding SampleBatches (--max-batch-rate 1000000)
#   conns   32 connections: 16 streaming as above, 16 flooding
#   define  Define floods (issue "Trust, round four", item 5): PMC_BENCH_DEFINERS processes
#           (default 16) x 4 connections x 200,000 call path definitions each (ids 1-65,535
#           over and over, in Defines of 8,192), started together (pmc-test-raw define-flood)
#   drain   over and over: 200 processes fill their sockets with batches and exit at once
#           (pmc-test-raw fill-exit), then a Status of uid 65534, whose answer counts all
#           they queued: those queues are read before it is answered (issue "Trust, round
#           four", item 3: once in one handler, 2.5-3.5 s; now 2 ms at a time)
# Each row: the victim's Hello (connect included) and Status round trips, p50 / p99 / max,
# and the daemon's peak memory (VmHWM) over its memory at rest.
#
# Usage: sudo [PMC_BENCH_KINDS="idle drain"] bench/fairness.sh BUILD_DIR [BEFORE_PMCDAEMON]
#   BUILD_DIR: a build with the tests (its pmcdaemon, tests/pmc-test-raw); with
#   BEFORE_PMCDAEMON (another pmcdaemon binary, e.g. of the commit before), every row is
#   measured with that daemon too, after the first, in the same run.
# Runs as root (it starts pmcdaemon, switches to uids 65533 and 65534); never fails on a
# figure. About a minute per daemon.
set -euo pipefail

BUILD=$(cd "${1:?usage: bench/fairness.sh BUILD_DIR [BEFORE_PMCDAEMON]}" && pwd)
DAEMONS=("$BUILD/daemon/pmcdaemon")
[ -n "${2:-}" ] && DAEMONS+=("$(realpath "$2")")
CALLS=${PMC_BENCH_CALLS:-300}
PROGRAMS=${PMC_BENCH_PROGRAMS:-25}
DEFINERS=${PMC_BENCH_DEFINERS:-16}
HOG_S=$((CALLS * 12 / 1000 + 3))
KINDS=${PMC_BENCH_KINDS:-idle whole stream flood conns define drain}

die() { echo "bench/fairness.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root: it starts pmcdaemon and switches users"
RAW=$BUILD/tests/pmc-test-raw
[ -x "$RAW" ] || die "$RAW is missing: build with the tests"

TMP=$(mktemp -d /tmp/pmc-bench-fair.XXXXXX)
chmod 755 "$TMP"
DPID=
cleanup() {
	local rc=$?
	[ -n "$DPID" ] && { kill -TERM "$DPID" 2>/dev/null; wait "$DPID" 2>/dev/null || true; }
	jobs -p | xargs -r kill 2>/dev/null || true
	rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT
mkdir "$TMP/bin"
for i in $(seq -w 1 "$PROGRAMS"); do cp "$RAW" "$TMP/bin/raw-$i"; done
cp "$RAW" "$TMP/bin/raw"
chmod -R a+rX "$TMP/bin"
SOCK=$TMP/pmc.sock
hog() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$TMP/bin/raw" "$SOCK" "$@"; }
kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

# row LABEL KIND: the victim beside hog KIND
row() {
	local label=$1 kind=$2 pids=() i
	echo 5 >"/proc/$DPID/clear_refs"
	local rss0
	rss0=$(kb "$DPID" VmRSS)
	case $kind in
	whole) for i in 1 2; do hog hog whole "$HOG_S" >/dev/null & pids+=($!); done ;;
	stream) hog hog stream "$HOG_S" >/dev/null & pids+=($!) ;;
	flood) for i in 1 2 3 4; do hog flood "$HOG_S" >/dev/null & pids+=($!); done ;;
	conns) for i in $(seq 16); do
		hog hog stream "$HOG_S" >/dev/null & pids+=($!)
		hog flood "$HOG_S" >/dev/null & pids+=($!)
	done ;;
	define) for i in $(seq "$DEFINERS"); do
		hog define-flood 4 200000 >/dev/null & pids+=($!)
	done ;;
	drain) (
		end=$((SECONDS + HOG_S))
		while [ $SECONDS -lt $end ]; do
			hog fill-exit 200 >/dev/null
			hog status >/dev/null
		done
	) & pids+=($!) ;;
	esac
	[ "$kind" = idle ] || [ "$kind" = define ] || sleep 1
	setpriv --reuid=65533 --regid=65533 --clear-groups -- "$TMP/bin/raw" "$SOCK" victim "$CALLS" \
		>"$TMP/victim" 2>&1 || echo "victim failed: $(cat "$TMP/victim")" >&2
	local hwm
	hwm=$(kb "$DPID" VmHWM)
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	read -r h50 h99 hmax < <(sed -n 's/^hello_us=//p' "$TMP/victim")
	read -r s50 s99 smax < <(sed -n 's/^status_us=//p' "$TMP/victim")
	printf '| %s | %s | %s / %s / %s | %s / %s / %s | %s |\n' "$label" "$kind" \
		"$((h50 / 1000)).$((h50 % 1000 / 100))" "$((h99 / 1000)).$((h99 % 1000 / 100))" "$((hmax / 1000)).$((hmax % 1000 / 100))" \
		"$((s50 / 1000)).$((s50 % 1000 / 100))" "$((s99 / 1000)).$((s99 % 1000 / 100))" "$((smax / 1000)).$((smax % 1000 / 100))" \
		"$(((hwm - rss0) / 1024)) MiB"
}

echo "| daemon | hog (uid 65534) | victim Hello ms p50 / p99 / max | victim Status ms p50 / p99 / max | daemon peak memory over rest |"
echo "|---|---|---|---|---|"
for n in "${!DAEMONS[@]}"; do
	d=${DAEMONS[$n]}
	label="this build"
	[ "$n" = 0 ] || label="before"
	"$d" --socket "$SOCK" --max-regions-per-user 200000 --keep-exited 40 \
		--max-batch-rate 1000000 2>"$TMP/daemon.log" &
	DPID=$!
	for _ in $(seq 200); do [ -S "$SOCK" ] && grep -q "listening on" "$TMP/daemon.log" && break; sleep 0.05; done
	lp=()
	for i in $(seq -w 1 "$PROGRAMS") 01; do
		setpriv --reuid=65534 --regid=65534 --clear-groups -- "$TMP/bin/raw-$i" "$SOCK" regions 4000 0 >/dev/null & lp+=($!)
	done
	for p in "${lp[@]}"; do wait "$p"; done
	for kind in $KINDS; do row "$label" "$kind"; done
	kill -TERM "$DPID"; wait "$DPID" || true; DPID=
	rm -f "$SOCK"
done
