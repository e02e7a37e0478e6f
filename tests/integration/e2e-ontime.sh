#!/bin/bash
# Data on time: a sample reaches the daemon within PMC_FLUSH_MS (1 s by default) of its
# region's end while the program runs on, also when its thread runs no further region (it
# blocks for good); PMC_FLUSH_MS=0 turns the periodic send off. A program started before the
# daemon is counted once the daemon is up, after its one warning line. Each wait is bounded
# (30 s: without the periodic send nothing would come at all, so the bound asks no speed of
# a loaded machine), and no check depends on how fast the machine is.
. "$(dirname "$0")/../lib/lib.sh"

count_of() { pmcctl query --region "$1" --pid "$2" --format json | jq '.regions[0].count // 0'; }
faults_of() { pmcctl query --region "$1" --pid "$2" --format json | jq '.regions[0].events["page-faults"].sum // 0'; }
# wait_line FILE PATTERN SECONDS: until FILE has a line matching PATTERN
wait_line() {
	for _ in $(seq $(($3 * 10))); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	fail "no '$2' in $1 after $3 s: $(cat "$1" "$1.err" 2>/dev/null)"
}
# wait_count REGION PID WANT SECONDS: until the daemon counts WANT samples of REGION
wait_count() {
	for _ in $(seq $(($4 * 10))); do
		[ "$(count_of "$1" "$2")" = "$3" ] && return 0
		sleep 0.1
	done
}
client_bg() { # OUT ENV... -- ARGS...: the test client as uid 65534, in the background
	local out=$1
	shift
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" PMC_EVENTS=page-faults \
		"$@" >"$out" 2>"$out.err" &
	CPID=$!
}

start_daemon

# 1. 10 regions a second in one thread; 5 regions in another that then blocks for good.
client_bg "$TMP/on.out" "$PMC_TEST_CLIENT_BIN" ontime
wait_line "$TMP/on.out" "^ticked=20$" 30
wait_count tick $CPID 20 30
wait_count blocked $CPID 5 30
kill -0 $CPID 2>/dev/null || fail "the program ended: $(cat "$TMP/on.out.err")"
expect_eq "while it runs: region tick" "$(count_of tick $CPID)" 20
expect_faults "while it runs: tick page-faults" "$(faults_of tick $CPID)" 20
expect_eq "while it runs: region blocked, its thread blocked since" "$(count_of blocked $CPID)" 5
expect_faults "while it runs: blocked page-faults" "$(faults_of blocked $CPID)" 5
for _ in $(seq 300); do [ "$(count_of tick-on $CPID)" -gt 0 ] && break; sleep 0.1; done
[ "$(count_of tick-on $CPID)" -gt 0 ] || fail "region tick-on not seen while the program runs"
pass "region tick-on seen while the program runs: $(count_of tick-on $CPID)"
kill $CPID; wait $CPID 2>/dev/null || true
expect_eq "stderr" "$(cat "$TMP/on.out.err")" ""

# 2. PMC_FLUSH_MS=0: no periodic send; what a thread holds goes at exit (or when a batch
#    is full, or at pmc_flush()).
setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" PMC_EVENTS=page-faults \
	PMC_FLUSH_MS=0 "$PMC_TEST_CLIENT_BIN" ontime >"$TMP/off.out" 2>"$TMP/off.out.err" &
CPID=$!
wait_line "$TMP/off.out" "^ticked=20$" 30
sleep 2
expect_eq "PMC_FLUSH_MS=0: nothing sent while it runs" "$(count_of tick $CPID)" 0
kill $CPID; wait $CPID 2>/dev/null || true

# 3. Started before the daemon: one warning line, regions interned all the same; counted
#    once the daemon is up, without the program doing anything about it.
kill -TERM "$DAEMON_PID"; wait "$DAEMON_PID" || fail "daemon exit status on SIGTERM"
DAEMON_PID=
rm -f "$SOCK"
client_bg "$TMP/late.out" "$PMC_TEST_CLIENT_BIN" late 7
wait_line "$TMP/late.out" "^late_id_nonzero=1$" 30
wait_line "$TMP/late.out.err" "cannot connect to pmcdaemon" 30
sleep 0.5
start_daemon
wait_line "$TMP/late.out" "^done=7$" 30
wait_count late $CPID 7 30
kill -0 $CPID 2>/dev/null || fail "the program ended: $(cat "$TMP/late.out.err")"
expect_eq "started before the daemon: region late" "$(count_of late $CPID)" 7
expect_faults "started before the daemon: late page-faults" "$(faults_of late $CPID)" 7
expect_eq "started before the daemon: stderr lines" "$(wc -l <"$TMP/late.out.err")" 1
pass "its one line: $(cat "$TMP/late.out.err")"
kill $CPID; wait $CPID 2>/dev/null || true
daemon_alive
