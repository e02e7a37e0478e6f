#!/bin/bash
# Nested regions: the outer region's counts include the inner one's; the scoped
# PMC_REGION form ends its region when left by break.
. "$(dirname "$0")/lib.sh"
start_daemon
N=5 K=30
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" nested $N $K
for r in outer inner scoped; do
	j=$(region_json $r "$CLIENT_PID")
	expect_eq "$r count" "$(jq .count <<<"$j")" $K
	expect_faults "$r page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" "$(kv ${r}_page_faults "$TMP/out")"
done
daemon_alive
