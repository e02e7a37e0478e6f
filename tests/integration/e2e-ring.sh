#!/bin/bash
# The SampleRing (proto/wire/ring.h): the library puts its batches and definitions in a ring it
# shares with the daemon where the daemon takes one, and the figures are those of datagrams
# (PMC_RING=0), exactly; a ring the daemon may not map, or whose words or frames are
# impossible, closes that one connection (its reason logged), and the daemon goes on.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
raw() { as_user "$PMC_TEST_RAW_BIN" "$SOCK" "$@"; }

# 1. Refused, each for its reason: 7 connections, fewer lines than the log's limit (20 in 10 s).
for m in ring-unsealed ring-size ring-twice ring-head ring-frame ring-status ring-bad-batch; do
	out=$(raw $m) || fail "$m: $out"
	pass "$m: $out"
done
for why in "sample ring: not a memfd sealed against shrinking" "a sample ring of a size not offered" \
	"a second sample ring" "its sample ring's words or frames are impossible" \
	"a request its sample ring cannot carry" "malformed sample batch"; do
	grep -q "$why" "$TMP/daemon.log" || fail "sample ring refusal not logged: $why"
done
pass "sample rings refused, each logged with its reason (the bad batch read from its frame)"
out=$(raw ring-good) || fail "ring-good: $out"
pass "ring-good: $out"
out=$(raw ring-closed) || fail "ring-closed: $out"
pass "ring-closed: $out"

# 2. The library, both ways: the same regions, the same exact page faults. K > a batch, and
#    threads: frames from several threads, a partial batch each at its exit.
export RUN_CLIENT_TAKEN=1
T=3 N=2 K=1500
for mode in ring datagrams; do
	if [ $mode = datagrams ]; then ring_env=(env PMC_RING=0); else ring_env=(env); fi
	run_client "$TMP/$mode.out" "${ring_env[@]}" PMC_EVENTS=page-faults,context-switches \
		"$PMC_TEST_CLIENT_BIN" threads $T $N $K
	pid=$CLIENT_PID
	j=$(region_json mt-pages "$pid")
	expect_eq "$mode: count" "$(jq .count <<<"$j")" $((T * K))
	expect_faults "$mode: page-faults sum" "$(jq '.events["page-faults"].sum' <<<"$j")" $((T * N * K))
	if [ $mode = ring ]; then
		grep -q "pid $pid (uid 65534): its batches come in a sample ring" "$TMP/daemon.log" ||
			fail "ring: the client sent no sample ring: $(grep "pid $pid" "$TMP/daemon.log")"
	else
		! grep -q "pid $pid (uid 65534): its batches come in a sample ring" "$TMP/daemon.log" ||
			fail "PMC_RING=0: the client sent a sample ring"
	fi
	pass "$mode: its batches came $( [ $mode = ring ] && echo "in a sample ring" || echo "as datagrams")"
done
expect_eq "nothing dropped" "$(pmcctl status --format json | jq .dropped)" 0
daemon_alive
