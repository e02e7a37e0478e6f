#!/bin/bash
# Hardware counters, where a PMU exists: instructions of a loop of known length, and
# the rdpmc path. Skips (77) on machines without a hardware PMU.
. "$(dirname "$0")/lib.sh"
start_daemon
pmcctl events --format json | jq -e '.hardware_pmu' >/dev/null ||
	skip "no hardware PMU on this machine (perf_event_open of cycles fails): nothing to check"
run_client "$TMP/out" env PMC_EVENTS=instructions,cycles "$PMC_TEST_CLIENT_BIN" cpu 10
j=$(region_json spin "$CLIENT_PID")
expect_eq "count" "$(jq .count <<<"$j")" 10
[ "$(jq '.events.instructions.sum > 0' <<<"$j")" = true ] || fail "no instructions counted"
pass "instructions counted: $(jq .events.instructions.sum <<<"$j")"
