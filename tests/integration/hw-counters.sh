#!/bin/bash
# Hardware counters, where a PMU exists (skips with 77 elsewhere): a loop of known
# instruction count within 0.1 %, cycles within 2 % of perf stat on the same loop,
# the rdpmc path taken, IPC derived, and multiplexing marked when more hardware events
# are asked for than the PMU has counters.
. "$(dirname "$0")/lib.sh"
start_daemon
pmcctl events --format json | jq -e '.hardware_pmu' >/dev/null ||
	skip "no hardware PMU on this machine (perf_event_open of cycles fails): nothing to check"
[ "$(uname -m)" = x86_64 ] || skip "the known-length loop is x86-64 assembly"

ITER=200000000 # 400 M instructions: start-up costs vanish next to it
run_client "$TMP/out" env PMC_EVENTS=instructions,cycles "$PMC_TEST_CLIENT_BIN" loop $ITER
want=$(kv instructions "$TMP/out")
j=$(region_json loop "$CLIENT_PID")
got=$(jq '[.events.instructions.max] | .[0]' <<<"$j")
awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "instructions %d, want %d: %.5f%%\n", a, b, d * 100; exit !(d < 0.001) }' ||
	fail "instructions off by 0.1 % or more"
pass "instructions within 0.1 %"
expect_eq "rdpmc path taken" "$(kv rdpmc "$TMP/out")" 1
[ "$(jq '.derived.ipc > 0' <<<"$j")" = true ] || fail "no ipc derived: $j"
pass "ipc = $(jq .derived.ipc <<<"$j")"

if command -v perf >/dev/null; then
	cyc=$(jq '.events.cycles.max' <<<"$j")
	ref=$(perf stat -x, -e cycles:u "$PMC_TEST_CLIENT_BIN" loop $ITER 2>&1 >/dev/null | awk -F, '/cycles/ { print $1 }')
	awk -v a="$cyc" -v b="$ref" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "cycles %d, perf stat %d: %.3f%%\n", a, b, d * 100; exit !(d < 0.02) }' ||
		fail "cycles differ from perf stat by 2 % or more"
	pass "cycles within 2 % of perf stat"
fi

# More hardware events than counters: the kernel multiplexes, and the output says so.
# Generic events every x86 PMU has, each twice under two names (plain and :u count the
# same): 12 hardware events, more than any core PMU's generic counters.
many=cycles,cycles:u,instructions,instructions:u,branches,branches:u,branch-misses,branch-misses:u,cache-references,cache-references:u,cache-misses,cache-misses:u
run_client "$TMP/mux" env PMC_EVENTS=$many "$PMC_TEST_CLIENT_BIN" cpu 20
j=$(region_json spin "$CLIENT_PID")
[ "$(jq '[.events[] | select(.scaled)] | length > 0' <<<"$j")" = true ] || fail "12 hardware events, none marked scaled: $j"
pass "multiplexed events marked scaled: $(jq -c '[.events | to_entries[] | select(.value.scaled) | .key]' <<<"$j")"
