#!/bin/bash
# The SampleRing's order (daemon/session/session.c): a datagram the daemon reads after a frame
# its client put before sending it, the frame unseen at the daemon's last look at the ring, is
# parked until the frame is read, so that each is handled in the order the client sent them.
# Only a daemon stopped between its look at the ring and its read of the socket shows it:
# pmc-test-recv-gate (LD_PRELOAD) holds it there once, while pmc-test-raw's ring-park puts a
# frame defining a region and sends a datagram counting that region without defining it.
# The same window with a datagram the read itself refuses (2 fds): the frame put before it is
# read, then the connection is closed for it (the error is not lost behind the frame). And a
# client that sends a batch at the gate and closes with a reply unread: the daemon's read says
# ECONNRESET once before that batch, which is still read.
. "$(dirname "$0")/../lib/lib.sh"
[ -n "${PMC_TEST_RECV_GATE_LIB:-}" ] && [ -f "$PMC_TEST_RECV_GATE_LIB" ] ||
	fail "PMC_TEST_RECV_GATE_LIB is not set to the built pmc-test-recv-gate module"
GATE=$TMP/gate
mkdir -m 0777 "$GATE"
mkfifo -m 0666 "$GATE/notify" "$GATE/go"
# An ASan daemon wants its runtime first in the list of libraries: the gate goes after it.
# A gate left holding the daemon (its client failed between the FIFOs) is let go at the exit,
# so that the daemon stops and its log is shown.
release_gate() { { exec 3<>"$GATE/notify" 4<>"$GATE/go" && printf g >&4; } 2>/dev/null || true; }
trap 'rc=$?; release_gate; (exit $rc); cleanup' EXIT
gated_daemon() {
	LD_PRELOAD=$PMC_TEST_RECV_GATE_LIB PMC_TEST_GATE=$GATE \
		ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 start_daemon
}
gated_daemon

out=$(as_user "$PMC_TEST_RAW_BIN" "$SOCK" ring-park "$GATE") || fail "ring-park: $out"
pass "ring-park: $out"
grep -q "a datagram read before a frame its client put ahead of it: parked" "$TMP/daemon.log" ||
	fail "the datagram was not parked (the gate held the daemon elsewhere): $(cat "$TMP/daemon.log")"
! grep -q "closing the connection" "$TMP/daemon.log" ||
	fail "a connection was closed: $(grep "closing the connection" "$TMP/daemon.log")"
pass "the datagram read first was parked behind the frame, and the connection kept"
j=$(pmcctl query --region parked-first --format json | jq -ce '.regions[] | select(.name == "parked-first")') ||
	fail "no region parked-first: $(pmcctl query --format json)"
expect_eq "parked-first's samples (the frame's, then the datagram's)" "$(jq .count <<<"$j")" 2
expect_eq "parked-first's page-faults (7 + 5)" "$(jq '.events["page-faults"].sum' <<<"$j")" 12
expect_eq "nothing dropped" "$(pmcctl status --format json | jq .dropped)" 0
daemon_alive

# 2. The read refuses the datagram (2 fds) that came after the frame.
kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=
gated_daemon
out=$(as_user "$PMC_TEST_RAW_BIN" "$SOCK" ring-park-fds "$GATE") || fail "ring-park-fds: $out"
pass "ring-park-fds: $out"
grep -q "unexpected file descriptors: closing the connection" "$TMP/daemon.log" ||
	fail "the refused datagram's close not logged: $(cat "$TMP/daemon.log")"
j=$(pmcctl query --region parked-first --format json | jq -ce '.regions[] | select(.name == "parked-first")') ||
	fail "no region parked-first: $(pmcctl query --format json)"
expect_eq "parked-first's samples (the frame's, read before the refusal)" "$(jq .count <<<"$j")" 1
daemon_alive

# 3. A reset said before a batch still queued.
kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=
gated_daemon
out=$(as_user "$PMC_TEST_RAW_BIN" "$SOCK" reset-queued "$GATE") || fail "reset-queued: $out"
pass "reset-queued: $out"
# Its connection's end (no client left), then its figures, final.
no_clients() { [ "$(pmcctl status --format json | jq .clients)" = 0 ]; }
wait_until "the daemon to end reset-queued's connection" 60 no_clients
expect_eq "reset-queued's samples (the last batch read after the reset)" \
	"$(pmcctl query --region reset-queued --format json | jq '[.regions[].count] | add // 0')" 3
expect_eq "nothing dropped" "$(pmcctl status --format json | jq .dropped)" 0
daemon_alive
