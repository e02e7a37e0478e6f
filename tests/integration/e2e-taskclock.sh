#!/bin/bash
# task-clock summed over K busy regions agrees with CLOCK_THREAD_CPUTIME_ID measured
# around the same regions to within 2 %.
#
# On a VM the two differ by the time the host takes the CPU away (steal): the scheduler
# leaves it out of the thread's CPU time, perf's task-clock does not. So the steal that
# /proc/stat shows during a run (10 ms ticks) is allowed on top of the 2 %.
# They differ too at each context switch inside a region: perf's task-clock stops and starts
# at the perf hooks of the switch, the scheduler's runtime at its own accounting (update_curr)
# earlier in it, so the switch's own time between those points is in one and not the other.
# Measured here: about 10 us a switch (4.4 ms, 1.8 %, over 421 switches at load 7; once 2.3 %
# under ASan), and the regions count their switches (context-switches, the same run): 50 us
# a switch is allowed on top. Each run stands alone; the test passes on the first of 5 whose
# sum is within its bound: a library that reads or adds task-clock wrongly is off in every
# run (the count of regions is checked in each).
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
K=100 # about 0.25 s of CPU: one stolen millisecond is then 0.4 %, not 3 %
steal_ticks() { awk '/^cpu / { print $9 }' /proc/stat; }
ok=
for attempt in 1 2 3 4 5; do
	s0=$(steal_ticks)
	run_client "$TMP/out" env PMC_EVENTS=task-clock,context-switches "$PMC_TEST_CLIENT_BIN" cpu $K
	stolen=$(($(steal_ticks) - s0))
	truth=$(kv thread_cpu_ns "$TMP/out")
	j=$(region_json spin "$CLIENT_PID")
	expect_eq "count" "$(jq .count <<<"$j")" $K
	got=$(jq '.events["task-clock"].sum' <<<"$j")
	cs=$(jq '.events["context-switches"].sum' <<<"$j")
	echo "run $attempt: task-clock sum $got ns, CLOCK_THREAD_CPUTIME_ID $truth ns," \
		"context switches in the regions $cs, steal $stolen ticks"
	if awk -v a="$got" -v b="$truth" -v s=$((stolen * 10000000 + cs * 50000)) 'BEGIN { d = a - b; if (d < 0) d = -d;
		printf "run %d: difference %.4f%% (allowed: 2%% + %d ns of steal and switches)\n", ARGV[1], d / b * 100, s;
		exit !(d < 0.02 * b + s) }' "$attempt"; then
		ok=1
		break
	fi
done
[ -n "$ok" ] || fail "task-clock differs from CLOCK_THREAD_CPUTIME_ID by more than its bound in each of 5 runs"
pass "task-clock within 2 % (and its steal and switches)"
daemon_alive
