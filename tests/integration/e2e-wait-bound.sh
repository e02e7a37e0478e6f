#!/bin/bash
# The wait bound (issue "Trust, round four", item 4; pmc.h "Waiting"): whatever the daemon
# does, the application's threads wait for it at most 10 s in all (PMC_WAIT_TOTAL_MS) beyond
# the first 10 ms of each request they wait on (PMC_PROMPT_MS), for the whole process, not
# per thread, and one request 2 s at most; a wait given up makes no thread wait again until the daemon caught up; a
# signal that interrupts a wait does not start it over.
# Checked from inside the client (pmc-test-client timed): the time during which any of its
# threads was inside a library call that may wait, its exit or exit() (union_ms: once
# however many were in one together), against that bound, counting the requests the daemon
# received (each could have been waited on for its free 10 ms), plus 3 s for a loaded
# machine (a call's own work, a thread woken late). A bound, not a figure: what the run
# took is printed. Before: a daemon answering every datagram in 1.9 s held 64 threads one
# after another, 110 s inside pmc_region() and pmc_begin() (4 threads: 5.8 s); a daemon
# stopped while batches flow held pmc_flush() 2 s and then each thread's exit 4 s; with a
# periodic signal, pmc_flush() against a stopped daemon, and the first pmc_region() against
# one hung at Hello, never returned.
. "$(dirname "$0")/../lib/lib.sh"

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# check_bound OUT THREADS WALL_MS REQUESTS: the client's threads were in the library for
# less than the bound.
check_bound() {
	local out=$1 t=$2 wall=$3 n=$4 u
	u=$(kv union_ms "$out")
	[ -n "$u" ] || fail "no union_ms from the client: $(cat "$out" "$out.err")"
	u=${u%.*}
	local bound=$((10000 + 10 * n + 3000))
	echo "# $t threads: in the library ${u} ms (bound $bound ms for $n requests); the run took ${wall} ms; the sum over threads $(kv total_ms "$out") ms, the longest call $(kv max_call_ms "$out") ms, the longest exit $(kv max_exit_ms "$out") ms"
	[ "$u" -lt "$bound" ] || fail "$t threads: in the library ${u} ms, over $bound ms"
	pass "$t threads: held under the bound"
}

# 1. A daemon that handles every datagram 1.9 s after the one before (each under the 2 s a
# request could wait before): Hello, then registrations. 1, 4 and 64 threads; and one that
# handles each 90 ms after the one before, 64 threads (each request charged past its 10 ms).
FAKE=$TMP/fake.sock
for case in 1900:1 1900:4 1900:64 90:64; do
	ms=${case%:*} t=${case#*:}
	rm -f "$FAKE"
	start_helper "$TMP/fake-$ms-$t.out" listening "$PMC_FAKE_DAEMON_BIN" slow "$FAKE" "$ms"
	t0=$(now_ms)
	as_user env PMC_SOCKET="$FAKE" "$PMC_TEST_CLIENT_BIN" timed "$t" 200 \
		>"$TMP/slow-$t" 2>"$TMP/slow-$t.err" || fail "client: $(cat "$TMP/slow-$t.err")"
	wall=$(($(now_ms) - t0))
	expect_eq "daemon taking $ms ms a datagram, $t threads: regions run" "$(kv runs "$TMP/slow-$t")" $((t * 201))
	check_bound "$TMP/slow-$t" "$t" "$wall" $((1 + $(grep -c '^register tid=' "$TMP/fake-$ms-$t.out")))
	kill "${HELPER_PIDS[-1]}"
	wait "${HELPER_PIDS[-1]}" 2>/dev/null || true
done

# 2. A daemon hung at Hello (accepts, never reads): the first pmc_region() waits, no other
# call; and again with a SIGALRM every 20 ms all along.
rm -f "$FAKE"
start_helper "$TMP/fake-silent.out" listening "$PMC_FAKE_DAEMON_BIN" silent "$FAKE"
for alarm in 0 20000; do
	t0=$(now_ms)
	as_user env PMC_SOCKET="$FAKE" PMC_TEST_ALARM_US=$alarm "$PMC_TEST_CLIENT_BIN" timed 4 200 \
		>"$TMP/silent" 2>"$TMP/silent.err" || fail "client: $(cat "$TMP/silent.err")"
	echo "# hung at Hello, SIGALRM every $alarm us (0: none):"
	check_bound "$TMP/silent" 4 $(($(now_ms) - t0)) 1
done

# 3. A real daemon stopped (SIGSTOP) while batches flow: 4 threads register, then the daemon
# stops, and each runs 100,000 regions of 4 events (its queue fills), pmc_flush()es and
# exits; exit() sends what is left. (The regions of a registered thread are not timed: the
# hot path, which never waits.) Every region is counted or lost once it goes on.
# With a SIGALRM every 20 ms all along (the first run shows the wait without it).
start_daemon
for alarm in 0 20000; do
	rm -f "$TMP/stop" # the first pass's "ready" is not this client's
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" env PMC_EVENTS=page-faults,task-clock,context-switches,cpu-migrations \
		PMC_TEST_ALARM_US=$alarm "$PMC_TEST_CLIENT_BIN" timed 4 100000 "$TMP/go" >"$TMP/stop" 2>"$TMP/stop.err" &
	client=$!
	HELPER_PIDS+=($client)
	wait_until "the client's threads to register" 60 grep -qx ready "$TMP/stop"
	kill -STOP "$DAEMON_PID"
	t0=$(now_ms)
	touch "$TMP/go"
	wait $client || fail "the client failed: $(cat "$TMP/stop.err")"
	wall=$(($(now_ms) - t0))
	kill -CONT "$DAEMON_PID"
	expect_eq "stopped daemon: threads registered" "$(kv enabled "$TMP/stop")" 4
	echo "# $(tr "\n" " " <"$TMP/stop")"
	[ "$(kv flush_failed "$TMP/stop")" -gt 0 ] || fail "no pmc_flush() met the stopped daemon's full queue"
	# Requests waited on: the 4 flushes and 4 exits and exit()'s, each a wait for room at most.
	check_bound "$TMP/stop" 4 "$wall" 9
	runs=$(kv runs "$TMP/stop")
	# The daemon reads what was queued once it goes on: every hang-up taken, all of it counted.
	hangups_taken
	j=$(pmcctl query --pid $client --format json)
	counted=$(jq '[.regions[]? | select(.name == "timed") | .count] | add // 0' <<<"$j")
	lost=$(jq '[.losses[]? | .count] | add // 0' <<<"$j")
	echo "# stopped daemon: $runs runs, $counted counted, $lost lost: $(jq -c '[.losses[]? | {(.reason): .count}] | add' <<<"$j")"
	[ "$counted" -gt 0 ] || fail "stopped daemon: nothing counted once it went on"
	# Samples a thread dropped with its ring full while the daemon was stopped are reported in a
	# later batch, which a process whose every send failed never sends (README, faults): what is
	# counted and lost is at most what ran.
	[ $((counted + lost)) -le "$runs" ] || fail "stopped daemon: $counted counted + $lost lost > $runs runs"
	pass "stopped daemon: counted + lost <= runs"
	rm -f "$TMP/go"
done
daemon_alive
