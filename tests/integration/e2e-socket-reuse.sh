#!/bin/bash
# A daemon's exit removes only the socket file it created (issue 31, item 7): daemon 1's
# socket file is deleted while a client of it runs, and daemon 2 starts on the same path.
# Daemon 1's exit (SIGTERM) must leave daemon 2's socket in place (the same inode), and a
# program started afterwards is counted by daemon 2, exactly. Before: daemon 1's exit
# unlinked daemon 2's socket, and later programs were not counted (0 of 3).
. "$(dirname "$0")/../lib/lib.sh"

# Daemon 1, with a client of it running (regions for about 2 s).
start_daemon
D1=$DAEMON_PID
HELPER_PIDS+=("$D1")
as_user env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" steady 1 400 5000 >"$TMP/steady.out" 2>&1 &
STEADY=$!
wait_status clients 1

# Its socket file deleted, and daemon 2 on the same path.
rm "$SOCK"
mv "$TMP/daemon.log" "$TMP/daemon1.log"
start_daemon
D2=$DAEMON_PID
ino=$(stat -c %i "$SOCK")
expect_eq "status answered by daemon 2" "$(pmcctl status --format json | jq .pid)" "$D2"

# Daemon 1 stops: daemon 2's socket stays.
kill -TERM "$D1"
wait "$D1" || fail "daemon 1's exit status on SIGTERM: $(cat "$TMP/daemon1.log")"
[ -S "$SOCK" ] || fail "daemon 1's exit removed daemon 2's socket"
expect_eq "socket inode after daemon 1's exit" "$(stat -c %i "$SOCK")" "$ino"
grep -q "is no longer this daemon's socket" "$TMP/daemon1.log" ||
	fail "daemon 1 did not say why it left the socket: $(cat "$TMP/daemon1.log")"
wait "$STEADY" || fail "the client of daemon 1 failed: $(cat "$TMP/steady.out")"

# A program started now is counted by daemon 2, exactly.
N=5 K=40
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages $N $K
expect_eq "client enabled" "$(kv enabled "$TMP/out")" 1
j=$(region_json pages "$CLIENT_PID")
expect_eq "count by daemon 2" "$(jq .count <<<"$j")" $K
expect_faults "page-faults by daemon 2" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))

# Daemon 2's own exit still removes its socket.
kill -TERM "$D2"
wait "$D2" || fail "daemon 2's exit status on SIGTERM: $(cat "$TMP/daemon.log")"
DAEMON_PID=
[ ! -e "$SOCK" ] || fail "daemon 2 left its own socket behind"
pass "daemon 2 removed its own socket at exit"
