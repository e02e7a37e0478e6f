#!/bin/bash
# With no daemon the application runs to completion exactly as before, after one
# warning line on stderr; PMC_DISABLE=1 silences even that.
. "$(dirname "$0")/../lib/lib.sh"
as_user env PMC_SOCKET="$TMP/nobody-listens.sock" "$PMC_TEST_CLIENT_BIN" threads 4 2 600 >"$TMP/out" 2>"$TMP/err" ||
	fail "the application failed without a daemon"
expect_eq "output" "$(kv count "$TMP/out")" 2400
expect_eq "enabled" "$(kv enabled "$TMP/out")" 0
expect_eq "stderr lines" "$(wc -l <"$TMP/err")" 1
grep -q "pmc: profiling disabled: cannot connect to pmcdaemon at $TMP/nobody-listens.sock" "$TMP/err" ||
	fail "warning does not name the socket: $(cat "$TMP/err")"
pass "warning: $(cat "$TMP/err")"
as_user env PMC_DISABLE=1 "$PMC_EXAMPLE_BIN" 5 2 >"$TMP/out" 2>"$TMP/err" || fail "PMC_DISABLE=1 run failed"
expect_eq "PMC_DISABLE stderr lines" "$(wc -l <"$TMP/err")" 0
# A daemon that hangs with its backlog full: the connect fails at once, no wait.
"$PMC_TEST_RAW_BIN" "$TMP/stuck.sock" stuck 20 >"$TMP/stuck.out" &
stuck=$!
for _ in $(seq 2400); do grep -q ready "$TMP/stuck.out" 2>/dev/null && break; sleep 0.05; done
chmod 666 "$TMP/stuck.sock"
as_user env PMC_SOCKET="$TMP/stuck.sock" "$PMC_TEST_CLIENT_BIN" pages 1 10 >"$TMP/out" 2>"$TMP/err" ||
	fail "the application failed against a hung daemon"
kill $stuck; wait $stuck 2>/dev/null || true
expect_eq "hung daemon: application finished" "$(kv count "$TMP/out")" 10
grep -q "Resource temporarily unavailable" "$TMP/err" || fail "warning: $(cat "$TMP/err")"
pass "hung daemon: $(cat "$TMP/err")"
# A daemon that is gone after the client connected: the client carries on, and says at its
# exit that the samples of its regions since reached no daemon, each of them: held in its ring
# (4,096 at most) or dropped (issue 35: they were lost in silence).
start_daemon
as_user "$PMC_TEST_CLIENT_BIN" orphan "$TMP/go" 6000 >"$TMP/out" 2>"$TMP/err" &
cpid=$!
for _ in $(seq 600); do grep -q "^first=done$" "$TMP/out" && break; kill -0 $cpid 2>/dev/null || break; sleep 0.1; done
grep -q "^first=done$" "$TMP/out" || fail "orphan: no first region sent in 60 s: $(cat "$TMP/out" "$TMP/err")"
kill -9 "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null || true; DAEMON_PID=
touch "$TMP/go"
wait "$cpid" || fail "client failed after the daemon died: $(cat "$TMP/err")"
expect_eq "client finished" "$(kv count "$TMP/out")" 6000
line=$(grep "^pmc: at exit, [0-9]* samples not sent and [0-9]* dropped reached no pmcdaemon" "$TMP/err") ||
	fail "no word of the samples at exit: $(cat "$TMP/err")"
read -r held dropped < <(sed -n 's/^pmc: at exit, \([0-9]*\) samples not sent and \([0-9]*\) dropped.*/\1 \2/p' <<<"$line")
expect_eq "every region since the daemon died: held or dropped" "$((held + dropped))" 6000
pass "$line"
