#!/bin/bash
# Exited clients' queues are read a slice at a time (issue "Trust, round four", item 3): 200
# processes of uid 65534 fill their sockets with batches and exit at once, then uid 65534
# asks for its Status, whose answer must count every one of those batches. The daemon reads
# those queues 2 ms at a time, the Status waiting in between (once, one handler read them all
# to their end: 2.5-3.5 s in which no other user was served); another user's (uid 1001)
# Status, asked meanwhile, is answered. Checked by events, not by time: the daemon says the
# request waits, the victim is answered, the Status counts every sample sent, and the
# slices it waited are counted (drain_slices). The latency figures: bench/fairness.sh (drain).
. "$(dirname "$0")/../lib/lib.sh"
command -v jq >/dev/null || skip "jq is missing"
start_daemon --max-batch-rate 1000000
as_user "$PMC_TEST_RAW_BIN" "$SOCK" fill-exit 200 >"$TMP/fill.out" 2>&1 || fail "fill-exit: $(cat "$TMP/fill.out")"
sent=$(sed -n 's/^sent=//p' "$TMP/fill.out")
as_user "$PMCCTL_BIN" status --format json >"$TMP/attacker.json" 2>"$TMP/attacker.err" &
ATT=$!
victim() { setpriv --reuid=1001 --regid=1001 --clear-groups -- "${USER_ENV[@]}" "$@"; }
# The victim asks as soon as the attacker's Status waits, or once it is answered (then the
# queues were read before it came: no slice to check; the counts still are).
for _ in $(seq 600); do
	grep -q "its request waits while exited clients' queues are read" "$TMP/daemon.log" && break
	kill -0 $ATT 2>/dev/null || break
	sleep 0.05
done
victim "$PMCCTL_BIN" status --format json >"$TMP/victim.json" || fail "the victim's Status failed"
expect_eq "the victim's Status is its own" "$(jq .uid "$TMP/victim.json")" 1001
# pmcctl waits 5 s for an answer; on a loaded machine the reading of 200 full queues in
# 2 ms slices can take longer. A Status that timed out is asked again (the queues read so
# far stay read: each try goes on where the last one stopped), 12 tries (a minute) at most;
# any other failure fails.
if ! wait $ATT; then
	for try in $(seq 12); do
		grep -q "did not answer within" "$TMP/attacker.err" ||
			fail "the attacker's Status failed: $(cat "$TMP/attacker.err")"
		echo "# the attacker's Status timed out (a loaded machine): asked again ($try)"
		as_user "$PMCCTL_BIN" status --format json >"$TMP/attacker.json" 2>"$TMP/attacker.err" && break
		[ "$try" = 12 ] && fail "the attacker's Status failed 13 times: $(cat "$TMP/attacker.err")"
	done
fi
expect_eq "samples counted by the attacker's Status (all it sent)" "$(jq .samples "$TMP/attacker.json")" "$sent"
grep -q "its request waits while exited clients' queues are read" "$TMP/daemon.log" ||
	fail "the daemon never read the queues in slices (the queues were read before the Status came?)"
slices=$(jq .drain_slices "$TMP/attacker.json")
[ "$slices" -gt 0 ] || fail "drain slices: $slices"
pass "the attacker's Status waited $slices slices past the first"
expect_eq "drain slices of the victim's requests" "$(jq .drain_slices "$TMP/victim.json")" 0
