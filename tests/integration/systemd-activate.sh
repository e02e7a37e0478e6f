#!/bin/bash
# Socket activation the way pmcdaemon.socket does it, with systemd-socket-activate in
# place of PID 1: it binds a SOCK_SEQPACKET socket and executes pmcdaemon with
# LISTEN_FDS=1. The daemon serves pmcctl and a uid-65534 client on that socket (exact
# page faults), ignores --socket, leaves the socket file to its owner when it stops,
# and refuses anything but one listening SOCK_SEQPACKET socket.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/systemd-lib.sh"
command -v systemd-socket-activate >/dev/null ||
	skip "systemd-socket-activate is missing (Debian package systemd)"

systemd-socket-activate --seqpacket -l "$SOCK" \
	"$PMCDAEMON_BIN" --verbose --socket "$TMP/ignored.sock" >"$TMP/daemon.log" 2>&1 &
DAEMON_PID=$!
wait_for "$TMP/daemon.log" "Listening on $SOCK"
chmod 0666 "$SOCK" # as SocketMode=0666 does: uid 65534 connects too
# As with systemd, the first connection starts the daemon (same pid: exec).
expect_eq "pmcctl status: pid" "$(pmcctl status --format json | jq .pid)" "$DAEMON_PID"
grep -q "listening on the socket passed by systemd" "$TMP/daemon.log" ||
	fail "the daemon did not take the passed socket: $(cat "$TMP/daemon.log")"
[ ! -e "$TMP/ignored.sock" ] || fail "--socket was not ignored under socket activation"
pass "the daemon took the passed socket and ignored --socket"

N=7 K=40
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages $N $K
expect_eq "client enabled" "$(kv enabled "$TMP/out")" 1
j=$(region_json pages "$CLIENT_PID")
expect_eq "count" "$(jq .count <<<"$j")" $K
expect_eq "uid" "$(jq .uid <<<"$j")" 65534
expect_faults "page-faults sum" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))
expect_faults "page-faults min" "$(jq '.events["page-faults"].min' <<<"$j")" $N

stop_daemon
# The socket is systemd's: pmcdaemon.socket keeps listening after the service stops.
[ -S "$SOCK" ] || fail "pmcdaemon removed the socket systemd passed"
pass "the passed socket file is left in place"

# What systemd must pass: one socket, SOCK_SEQPACKET, listening. (A file stands for a
# socket of the wrong kind: the check is the same.)
set +e
LISTEN_FDS=1 sh -c 'export LISTEN_PID=$$; exec "$0"' "$PMCDAEMON_BIN" 3</dev/null 2>"$TMP/bad.log"
expect_eq "not a socket: exit status" $? 1
grep -q "not a listening AF_UNIX SOCK_SEQPACKET socket" "$TMP/bad.log" ||
	fail "not a socket: message: $(cat "$TMP/bad.log")"
LISTEN_FDS=2 sh -c 'export LISTEN_PID=$$; exec "$0"' "$PMCDAEMON_BIN" 3</dev/null 4</dev/null \
	2>"$TMP/two.log"
expect_eq "two sockets: exit status" $? 1
grep -q "passed 2 sockets" "$TMP/two.log" || fail "two sockets: message: $(cat "$TMP/two.log")"
set -e
