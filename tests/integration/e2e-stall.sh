#!/bin/bash
# Every region a program runs is in a figure or counted as lost with its reason: a program
# of two threads, 200 regions each one every 25 ms, starts while the daemon is stopped
# (SIGSTOP: a daemon stalled by a busy machine or a restart) until its first Hello timed out
# (2 s), and 1 s more. Its first
# Hello times out; the regions begun meanwhile are counted as lost (no-daemon) and said
# once the daemon answers; both threads register then and are counted from then on:
# counted + lost = 400 exactly, in pmcctl status and in the query's loss line.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
kill -STOP "$DAEMON_PID"
setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" env PMC_EVENTS=page-faults \
	"$PMC_TEST_CLIENT_BIN" steady 2 200 25000 >"$TMP/out" 2>"$TMP/err" &
client=$!
# Stopped until the client's Hello timed out (its warning: a loaded machine may start it later
# than a fixed 3 s allowed, then nothing timed out), and 1 s more: its threads begin a region
# every 25 ms, and those begun before the daemon answers are counted lost (40 or so; one
# suffices below).
wait_until "the client's Hello to time out (its warning on stderr)" 60 grep -q "profiling starts when it answers" "$TMP/err"
sleep 1
kill -CONT "$DAEMON_PID"
wait $client || fail "the client failed: $(cat "$TMP/err")"
expect_eq "the client ran its regions" "$(kv count "$TMP/out")" 400
counted=$(pmcctl query --pid $client --format json | jq '[.regions[] | select(.name == "steady") | .count] | add // 0')
lost=$(pmcctl query --pid $client --format json | jq '[.losses[]? | select(.reason == "no-daemon") | .count] | add // 0')
other=$(pmcctl query --pid $client --format json | jq '[.losses[]? | select(.reason != "no-daemon") | .count] | add // 0')
[ "$lost" -gt 0 ] || fail "no region counted as lost while the daemon was stopped ($counted counted)"
expect_eq "counted ($counted) + lost while no daemon answered ($lost) + lost otherwise ($other)" $((counted + lost + other)) 400
expect_eq "status: the same losses" "$(pmcctl status --format json | jq '.losses["no-daemon"]')" "$lost"
pmcctl query --pid $client | grep -q "samples not counted (no-daemon)" || fail "no loss line in the table: $(pmcctl query --pid $client)"
# Both threads registered once the daemon answered (the daemon's log, --verbose; the
# main thread, which ran no region of the two, may register too).
n=$(grep "pid $client: registered thread" "$TMP/daemon.log" | grep -vc "registered thread $client " || true)
expect_eq "region threads registered after the stall" "$n" 2
grep -q "profiling starts when it answers" "$TMP/err" || fail "no warning: $(cat "$TMP/err")"
expect_eq "one warning line" "$(wc -l <"$TMP/err")" 1
daemon_alive
