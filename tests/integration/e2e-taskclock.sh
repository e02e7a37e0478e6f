#!/bin/bash
# task-clock summed over K busy regions agrees with CLOCK_THREAD_CPUTIME_ID measured
# around the same regions to within 2 %.
#
# On a VM the two differ by the time the host takes the CPU away (steal): the scheduler
# leaves it out of the thread's CPU time, perf's task-clock does not. So a run during
# which /proc/stat shows steal does not count, and the test tries again (5 runs at most);
# if every run saw steal, the steal observed (10 ms ticks) is allowed on top of the 2 %.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
K=100 # about 0.25 s of CPU: one stolen millisecond is then 0.4 %, not 3 %
steal_ticks() { awk '/^cpu / { print $9 }' /proc/stat; }
for attempt in 1 2 3 4 5; do
	s0=$(steal_ticks)
	run_client "$TMP/out" env PMC_EVENTS=task-clock,context-switches "$PMC_TEST_CLIENT_BIN" cpu $K
	stolen=$(($(steal_ticks) - s0))
	truth=$(kv thread_cpu_ns "$TMP/out")
	j=$(region_json spin "$CLIENT_PID")
	expect_eq "count" "$(jq .count <<<"$j")" $K
	got=$(jq '.events["task-clock"].sum' <<<"$j")
	echo "run $attempt: task-clock sum $got ns, CLOCK_THREAD_CPUTIME_ID $truth ns, steal $stolen ticks"
	[ "$stolen" = 0 ] && break
done
slack=$((stolen * 10000000))
awk -v a="$got" -v b="$truth" -v s="$slack" 'BEGIN { d = a - b; if (d < 0) d = -d;
	printf "difference %.4f%% (allowed: 2%% + %d ns of steal)\n", d / b * 100, s;
	exit !(d < 0.02 * b + s) }' || fail "task-clock differs from CLOCK_THREAD_CPUTIME_ID by 2 % or more"
pass "task-clock within 2 %"
daemon_alive
