#!/bin/bash
# Honest windows: the wall time of a sample encloses the window its counters were read
# over, so no sample's task-clock exceeds its wall time. Each of 200 regions runs once
# (empty, or spinning up to a few ms), so that each region's sums are one sample's figures.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
K=200
run_client "$TMP/w.out" env PMC_EVENTS=task-clock,page-faults "$PMC_TEST_CLIENT_BIN" window $K
pid=$CLIENT_PID
pmcctl query --pid "$pid" --format json >"$TMP/q.json"
expect_eq "regions" "$(jq '[.regions[] | select(.name | test("^w[0-9]+$"))] | length' "$TMP/q.json")" $K
expect_eq "one sample each" "$(jq '[.regions[] | select(.count != 1)] | length' "$TMP/q.json")" 0
bad=$(jq -c '[.regions[] | select(.events["task-clock"].sum > .wall_ns.sum)
	| {name, wall: .wall_ns.sum, task_clock: .events["task-clock"].sum}]' "$TMP/q.json")
[ "$bad" = "[]" ] || fail "$(jq length <<<"$bad") samples' task-clock exceeds their wall time, e.g. $(jq -c '.[:3]' <<<"$bad")"
pass "no sample's task-clock exceeds its wall time"
pass "empty region: $(jq -c '.regions[] | select(.name == "w0") | {wall: .wall_ns.sum, task_clock: .events["task-clock"].sum}' "$TMP/q.json")"
