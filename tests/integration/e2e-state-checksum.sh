#!/bin/bash
# The state file's checksum (issue 31, item 8): a saved file with one bit flipped, at 25
# places spread evenly over it, and the file truncated: each time the daemon starts (no
# exit 1), moves the file aside to FILE.bad (its bytes as they were), says so in its log
# and in `pmcctl status` (text and JSON), and holds no figures; the intact file then brings
# back exactly the figures saved. Before: 12 of 25 flips loaded other figures without a
# word, and a file that did not decode made the daemon exit 1 (a unit restarting on failure
# never came up). Every bit of a small file is flipped in test-state.
. "$(dirname "$0")/../lib/lib.sh"
command -v od >/dev/null || skip "od (coreutils) is missing"
mkdir -m 0755 "$TMP/st"
STATE=$TMP/st/state

# A client's figures, saved at SIGTERM.
start_daemon --state "$STATE"
N=5 K=40
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages $N $K
PID=$CLIENT_PID
j=$(region_json pages "$PID")
expect_eq "count" "$(jq .count <<<"$j")" $K
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "daemon exit status on SIGTERM: $(cat "$TMP/daemon.log")"
DAEMON_PID=
cp "$STATE" "$TMP/good"
size=$(stat -c %s "$TMP/good")
[ "$size" -gt 25 ] || fail "the state file is $size bytes"

# flip_bit FILE BIT: FILE with bit BIT (0 = the first byte's lowest) inverted
flip_bit() {
	local off=$(($2 / 8)) mask=$((1 << ($2 % 8))) byte
	byte=$(od -An -tu1 -j "$off" -N1 "$1" | tr -d ' ')
	printf "$(printf '\\%03o' $((byte ^ mask)))" | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}

# refused WHAT: the daemon, started on the damaged $STATE, comes up, moves it aside with
# its bytes, says so, and holds no figures
refused() {
	cp "$STATE" "$TMP/damaged"
	rm -f "$STATE.bad"
	start_daemon --state "$STATE"
	grep -q "$STATE: .*moved aside to $STATE.bad; the daemon starts without its figures" "$TMP/daemon.log" ||
		fail "$1: no word in the log: $(cat "$TMP/daemon.log")"
	cmp -s "$STATE.bad" "$TMP/damaged" || fail "$1: $STATE.bad is not the damaged file"
	local s
	s=$(pmcctl status --format json)
	expect_eq "$1: status names the file moved aside" "$(jq -r .state_moved_aside <<<"$s")" "$STATE.bad"
	[ -n "$(jq -r .state_moved_reason <<<"$s")" ] || fail "$1: status gives no reason"
	pmcctl status | grep -q "^state file refused at start: .*moved aside to $STATE.bad" ||
		fail "$1: pmcctl status (text) does not say it: $(pmcctl status)"
	expect_eq "$1: processes held" "$(jq .processes <<<"$s")" 0
	expect_eq "$1: samples held" "$(jq .samples <<<"$s")" 0
	kill -TERM "$DAEMON_PID"
	wait "$DAEMON_PID" || fail "$1: daemon exit status on SIGTERM: $(cat "$TMP/daemon.log")"
	DAEMON_PID=
}

# 25 single-bit flips, spread evenly over the file's bits (deterministic).
bits=$((size * 8))
for i in $(seq 0 24); do
	bit=$((i * (bits - 1) / 24))
	cp "$TMP/good" "$STATE"
	flip_bit "$STATE" "$bit"
	refused "bit $bit of $bits flipped"
done
# Truncated: by one byte, and to half.
for keep in $((size - 1)) $((size / 2)); do
	head -c "$keep" "$TMP/good" >"$STATE"
	refused "truncated to $keep of $size bytes"
done

# The intact file: the figures saved, exactly, and nothing moved aside.
rm -f "$STATE.bad"
cp "$TMP/good" "$STATE"
start_daemon --state "$STATE"
j=$(region_json pages "$PID")
expect_eq "count restored" "$(jq .count <<<"$j")" $K
expect_faults "page-faults restored" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))
expect_eq "nothing moved aside" "$(pmcctl status --format json | jq -r .state_moved_aside)" ""
[ ! -e "$STATE.bad" ] || fail "$STATE.bad made for an intact file"
