#!/bin/bash
# SIGTERM while a connection's batch goes on in later slices (issue "Trust, round four",
# leftover of item 3): a client of uid 65534 sends, until a send fails, batches that each
# name 16,000 regions (their names take the daemon several 2 ms slices) with one sample,
# each followed by a plain batch of one sample; the daemon is stopped meanwhile. Whatever
# the client queued before the daemon shut its end is counted in the state it saves: the
# daemon, restarted on that state, counts exactly the samples whose send succeeded. (Before,
# the final drain skipped a connection in the middle of such a batch, and every uid's other
# connection with it: what they had queued was lost.) Tried until the SIGTERM came while a
# batch's names went on (the daemon says so), 40 times at most (a try hits about one time
# in three); each try checks the count.
. "$(dirname "$0")/../lib/lib.sh"
command -v jq >/dev/null || skip "jq is missing"
mkdir -m 0755 "$TMP/st"
STATE=$TMP/st/state
hit=
for try in $(seq 40); do
	rm -f "$STATE"
	start_daemon --state "$STATE"
	as_user "$PMC_TEST_RAW_BIN" "$SOCK" names-batches 16000 100000 >"$TMP/nb.out" 2>&1 &
	NB=$!
	wait_until "the client's first batch" 60 grep -qx started "$TMP/nb.out"
	kill -TERM "$DAEMON_PID"
	wait "$DAEMON_PID" || fail "daemon exit status on SIGTERM: $(cat "$TMP/daemon.log")"
	DAEMON_PID=
	wait $NB || fail "names-batches: $(cat "$TMP/nb.out")"
	sent=$(sed -n 's/^sent=//p' "$TMP/nb.out")
	[ -n "$sent" ] || fail "names-batches printed no count: $(cat "$TMP/nb.out")"
	grep -q "batch's names finished before the final drain" "$TMP/daemon.log" && hit=$try
	start_daemon --state "$STATE"
	expect_eq "try $try: samples of region n1 counted after the restart (all $sent queued before the daemon stopped)" \
		"$(pmcctl query --region n1 --format json | jq '[.regions[].count] | add // 0')" "$sent"
	kill -TERM "$DAEMON_PID"
	wait "$DAEMON_PID" || fail "daemon exit status on SIGTERM: $(cat "$TMP/daemon.log")"
	DAEMON_PID=
	[ -z "$hit" ] || break
done
[ -n "$hit" ] || fail "in 40 tries, the SIGTERM never came while a batch's names went on"
pass "the SIGTERM came while a batch's names went on (try $hit)"
