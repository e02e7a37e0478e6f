#!/bin/bash
# The burst of e2e-burst.sh (25 processes of 8 threads, 4,000 regions of 4 events each, at
# once) with two busy loops beside it, on a machine whose CPUs are all taken: the daemon
# runs as pmcdaemon.service runs it (Nice=-5), and answers control (Hello, registration)
# before bulk (batches), so that every thread registers in time and is profiled: every
# sample counted, none dropped, lost or unregistered.
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
s=$(pmcctl status --format json)
echo "status: $(jq -c '{samples, batches, dropped, lost, losses}' <<<"$s")"
expect_eq "losses by reason (none unregistered)" "$(jq -c '.losses // {}' <<<"$s")" '{}'
expect_eq "samples counted" "$(jq .samples <<<"$s")" $((P * T * K))
for i in $(seq $P); do
	[ "$(kv enabled "$TMP/b$i.out")" = 1 ] || fail "client $i: not enabled: $(cat "$TMP/b$i.err")"
	[ ! -s "$TMP/b$i.err" ] || fail "client $i said: $(cat "$TMP/b$i.err")"
done
pass "every thread of every client profiled, and silent on stderr"
daemon_alive
