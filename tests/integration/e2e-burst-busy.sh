#!/bin/bash
# The burst of e2e-burst.sh (25 processes of 8 threads, 4,000 regions of 4 events each, at
# once) with two busy loops beside it, on a machine whose CPUs are all taken: the daemon
# runs as pmcdaemon.service runs it (Nice=-5), and answers control (Hello, registration)
# before bulk (batches), so that threads register in time and are profiled: every sample
# counted, or counted lost by a client that says why (burst_accounted in lib.sh: a
# registration not answered within the library's 2 s, where the machine is loaded beyond the
# two loops; the run prints how many). Nothing dropped for want of room.
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_TEST_BURST_BIN:?set by ctest}"
[ -z "${PMC_SANITIZED:-}" ] ||
	skip "under sanitizers the daemon is several times slower: a burst beside busy loops there measures the sanitizers"
cp "$PMC_TEST_BURST_BIN" "$TMP/bin/"
BURST=$TMP/bin/$(basename "$PMC_TEST_BURST_BIN")
chmod a+rx "$BURST"
P=25 T=8 K=4000
EV=page-faults,task-clock,context-switches,cpu-migrations
start_daemon
renice -n -5 -p "$DAEMON_PID" >/dev/null
busy=()
for _ in 1 2; do
	setpriv --reuid=65534 --regid=65534 --clear-groups -- bash -c 'while :; do :; done' \
		</dev/null >/dev/null 2>&1 &
	busy+=($!)
done
trap 'rc=$?; kill -9 "${busy[@]}" 2>/dev/null || true; (exit $rc); cleanup' EXIT
pids=()
for i in $(seq $P); do
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" PMC_EVENTS=$EV \
		bash -c 'until [ -e "$1" ]; do sleep 0.01; done; exec "$2" burst "$3" "$4"' \
		_ "$TMP/go" "$BURST" $T $K >"$TMP/b$i.out" 2>"$TMP/b$i.err" &
	pids+=($!)
done
touch "$TMP/go"
for i in $(seq $P); do
	wait "${pids[$((i - 1))]}" || { cat "$TMP/b$i.err" >&2; fail "client $i failed"; }
done
kill -9 "${busy[@]}"
burst_accounted $P $T $K "${pids[@]}"
daemon_alive
