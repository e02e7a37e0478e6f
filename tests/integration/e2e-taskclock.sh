#!/bin/bash
# task-clock summed over K busy regions agrees with CLOCK_THREAD_CPUTIME_ID measured
# around the same regions to within 2 %.
. "$(dirname "$0")/lib.sh"
start_daemon
K=20
run_client "$TMP/out" env PMC_EVENTS=task-clock,context-switches "$PMC_TEST_CLIENT_BIN" cpu $K
truth=$(kv thread_cpu_ns "$TMP/out")
j=$(region_json spin "$CLIENT_PID")
expect_eq "count" "$(jq .count <<<"$j")" $K
got=$(jq '.events["task-clock"].sum' <<<"$j")
echo "task-clock sum $got ns, CLOCK_THREAD_CPUTIME_ID $truth ns"
awk -v a="$got" -v b="$truth" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "relative difference %.4f%%\n", d * 100; exit !(d < 0.02) }' ||
	fail "task-clock differs from CLOCK_THREAD_CPUTIME_ID by 2 % or more"
pass "task-clock within 2 %"
daemon_alive
