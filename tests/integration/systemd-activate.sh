#!/bin/bash
# Socket activation the way pmcdaemon.socket does it, with systemd-socket-activate in
# place of PID 1: it binds a SOCK_SEQPACKET socket and executes pmcdaemon with
# LISTEN_FDS=1. The daemon serves pmcctl and a uid-65534 client on that socket (exact
# page faults), ignores --socket, leaves the socket file to its owner when it stops,
# and refuses a stream socket or two sockets.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/systemd-lib.sh"
command -v systemd-socket-activate >/dev/null ||
	skip "systemd-socket-activate is missing (Debian package systemd)"

# umask 000 stands for the unit's SocketMode=0666: uid 65534 must be able to connect.
(umask 000 && exec systemd-socket-activate --seqpacket -l "$SOCK" \
	"$PMCDAEMON_BIN" --verbose --socket "$TMP/ignored.sock") 2>"$TMP/daemon.log" &
DAEMON_PID=$!
wait_for "$TMP/daemon.log" "listening on the socket passed by systemd"
[ ! -e "$TMP/ignored.sock" ] || fail "--socket was not ignored under socket activation"
pass "the daemon took the passed socket and ignored --socket"

expect_eq "pmcctl status: pid" "$(pmcctl status --format json | jq .pid)" "$DAEMON_PID"
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

set +e
timeout 10 systemd-socket-activate -l "$TMP/stream.sock" "$PMCDAEMON_BIN" 2>"$TMP/stream.log"
expect_eq "stream socket: exit status" $? 1
grep -q "not a listening AF_UNIX SOCK_SEQPACKET socket" "$TMP/stream.log" ||
	fail "stream socket: message: $(cat "$TMP/stream.log")"
timeout 10 systemd-socket-activate --seqpacket -l "$TMP/a.sock" -l "$TMP/b.sock" \
	"$PMCDAEMON_BIN" 2>"$TMP/two.log"
expect_eq "two sockets: exit status" $? 1
grep -q "passed 2 sockets" "$TMP/two.log" || fail "two sockets: message: $(cat "$TMP/two.log")"
set -e
