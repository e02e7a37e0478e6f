#!/bin/bash
# Hardware counters, where a PMU exists (skips with 77 elsewhere): a loop of known
# instruction count within 0.1 %, cycles within 2 % of perf stat on the same loop,
# the rdpmc path taken where the kernel allows it, IPC derived, and multiplexing marked
# when more hardware events are asked for than the PMU has counters.
. "$(dirname "$0")/lib.sh"
# --allow-kernel: the multiplexing check asks for :k and :uk variants too.
start_daemon --allow-kernel all
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
# The library reads with rdpmc where the kernel allows it in user space (cap_user_rdpmc)
# and gives the clock to bring the times up to date (cap_user_time: not on guests whose
# sched_clock is kvm-clock); otherwise with read(), by design.
"$PMC_TEST_CLIENT_BIN" caps >"$TMP/caps" || fail "perf_event_open of instructions:u as root failed"
if [ "$(kv cap_user_rdpmc "$TMP/caps")" = 1 ] && [ "$(kv cap_user_time "$TMP/caps")" = 1 ]; then
	expect_eq "rdpmc path taken" "$(kv rdpmc "$TMP/out")" 1
else
	expect_eq "read() path, as the kernel gives $(tr '\n' ' ' <"$TMP/caps")" "$(kv rdpmc "$TMP/out")" 0
fi
[ "$(jq '.derived.ipc > 0' <<<"$j")" = true ] || fail "no ipc derived: $j"
pass "ipc = $(jq .derived.ipc <<<"$j")"

# perf(1) is optional, and Debian's /usr/bin/perf runs only under a Debian kernel of its
# version: without a perf that counts, there is nothing to compare with (said, not hidden).
if ! command -v perf >/dev/null; then
	echo "note: no perf(1): cycles not compared with perf stat"
elif ! perf stat -x, -e cycles:u true >/dev/null 2>"$TMP/perf-check"; then
	echo "note: perf stat cannot count here ($(head -1 "$TMP/perf-check")): cycles not compared"
else
	cyc=$(jq '.events.cycles.max' <<<"$j")
	ref=$(perf stat -x, -e cycles:u "$PMC_TEST_CLIENT_BIN" loop $ITER 2>&1 >/dev/null | awk -F, '/cycles/ { print $1; exit }')
	[[ "$ref" =~ ^[0-9]+$ ]] && [ "$ref" -gt 0 ] || fail "perf stat gave no cycles count: '$ref'"
	awk -v a="$cyc" -v b="$ref" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; printf "cycles %d, perf stat %d: %.3f%%\n", a, b, d * 100; exit !(d < 0.02) }' ||
		fail "cycles differ from perf stat by 2 % or more"
	pass "cycles within 2 % of perf stat"
fi

# More hardware events than counters: the kernel multiplexes, and the output says so.
# Generic events every x86 PMU has, under :u, :uk and :k: 16 hardware events (the most a
# thread may ask for), more than any x86 core PMU's generic and fixed counters together
# (a fixed counter holds one of cycles:u, cycles:uk, cycles:k at a time).
many=cycles:u,cycles:uk,cycles:k,instructions:u,instructions:uk,instructions:k
many=$many,branches:u,branches:uk,branches:k,branch-misses:u,branch-misses:uk,branch-misses:k
many=$many,cache-references:u,cache-references:uk,cache-misses:u,cache-misses:uk
run_client "$TMP/mux" env PMC_EVENTS=$many "$PMC_TEST_CLIENT_BIN" cpu 20
j=$(region_json spin "$CLIENT_PID")
[ "$(jq '[.events[] | select(.scaled)] | length > 0' <<<"$j")" = true ] || fail "16 hardware events, none marked scaled: $j"
pass "multiplexed events marked scaled: $(jq -c '[.events | to_entries[] | select(.value.scaled) | .key]' <<<"$j")"
