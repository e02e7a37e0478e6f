#!/bin/bash
# sd_notify as Type=notify and WatchdogSec= see it, with pmc-notify-listen in place of
# PID 1 on NOTIFY_SOCKET: READY=1 once the socket answers, STATUS= with the daemon's
# figures, WATCHDOG=1 every half WATCHDOG_USEC, all from the daemon's own pid (what
# NotifyAccess=main accepts), and STOPPING=1 on SIGTERM. A WATCHDOG_PID naming another
# process means no watchdog.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/systemd-lib.sh"
: "${PMC_NOTIFY_LISTEN_BIN:?set by ctest}"

# start_notified NAME WATCHDOG_PID: a daemon on $TMP/NAME.sock that notifies
# $TMP/NAME.notify (listener output in $TMP/NAME.out) with WATCHDOG_USEC=200 ms
start_notified() {
	"$PMC_NOTIFY_LISTEN_BIN" "$TMP/$1.notify" 60 >"$TMP/$1.out" 2>"$TMP/$1.err" &
	LISTEN_PID_=$!
	BG_PIDS+=("$LISTEN_PID_")
	for _ in $(seq 2400); do
		[ -S "$TMP/$1.notify" ] && break
		sleep 0.05
	done
	[ -S "$TMP/$1.notify" ] || fail "pmc-notify-listen did not bind: $(cat "$TMP/$1.err")"
	SOCK=$TMP/$1.sock
	USER_ENV=(env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$SOCK")
	# systemd sets WATCHDOG_PID to the main pid: the shell execs, so $$ is the daemon.
	NOTIFY_SOCKET=$TMP/$1.notify WATCHDOG_USEC=200000 \
		sh -c 'export WATCHDOG_PID="${1:-$$}"; shift; exec "$@"' sh "$2" \
		"$PMCDAEMON_BIN" --socket "$SOCK" --verbose >"$TMP/daemon.log" 2>&1 &
	DAEMON_PID=$!
	wait_for "$TMP/$1.out" "READY=1"
}

# stop_notified NAME: SIGTERM; STOPPING=1 must reach the listener, which then exits 0
stop_notified() {
	stop_daemon
	local rc=0
	wait "$LISTEN_PID_" || rc=$?
	expect_eq "$1: listener saw STOPPING=1 and exited" "$rc" 0
	grep -q "^$2 STOPPING=1$" "$TMP/$1.out" || fail "$1: STOPPING=1 did not come from pid $2"
}

t_start=$(date +%s%N)
start_notified wd ""
D=$DAEMON_PID
# READY=1 is sent once the daemon answers on its socket.
pmcctl status >/dev/null || fail "the daemon does not answer after READY=1"
grep -q "^$D READY=1$" "$TMP/wd.out" || fail "READY=1 not from the daemon's pid $D: $(cat "$TMP/wd.out")"
pass "READY=1 from pid $D, and the socket answers"
grep -q "^$D STATUS=serving 0 clients, 0 threads; 0 samples$" "$TMP/wd.out" ||
	fail "no first STATUS=: $(cat "$TMP/wd.out")"
pass "first STATUS="

N=3 K=25
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages $N $K
expect_faults "page-faults" "$(region_json pages "$CLIENT_PID" | jq '.events["page-faults"].sum')" $((N * K))
# The figures in STATUS= follow: the client's samples, and no client left.
wait_for "$TMP/wd.out" "^$D STATUS=serving 0 clients, 0 threads; $K samples$" 5
pass "STATUS= counts the client's $K samples"

# Every half WATCHDOG_USEC (200 ms): the daemon says its period, and keeps to it. WATCHDOG=1
# keeps coming (5 more, waited for: a loaded machine delays them, and no rate is asked of
# it), never more often than the period: a persistent timer runs a period after the tick it
# was late for, without catching up. Counted against the daemon's whole life (all of them
# sent after t_start): the listener may read a backlog of them at once (16 within 750 ms of
# its reading, in a soak under load).
grep -q "watchdog: telling systemd every 100 ms$" "$TMP/daemon.log" ||
	fail "no word of the watchdog's period (100 ms): $(cat "$TMP/daemon.log")"
ticks() { grep -c "^$D WATCHDOG=1$" "$TMP/wd.out" || true; }
n0=$(ticks)
five_more() { [ $(($(ticks) - n0)) -ge 5 ]; }
wait_until "5 more WATCHDOG=1 (every 100 ms)" 60 five_more
n=$(ticks) ms=$((($(date +%s%N) - t_start) / 1000000))
[ $(((n - 1) * 100)) -le "$ms" ] || fail "WATCHDOG=1: $n in the daemon's $ms ms, more often than every 100 ms"
pass "WATCHDOG=1: $n in the daemon's $ms ms (every 100 ms at most)"
others=$(awk -v d="$D" '$1 != d' "$TMP/wd.out")
[ -z "$others" ] || fail "messages from another pid than the daemon's $D: $others"
stop_notified wd "$D"

# WATCHDOG_PID names another process: READY=1 and STATUS=, but no WATCHDOG=1.
start_notified other 1
D=$DAEMON_PID
sleep 0.6
expect_eq "WATCHDOG=1 for another WATCHDOG_PID" "$(grep -c "WATCHDOG=1" "$TMP/other.out" || true)" 0
stop_notified other "$D"
