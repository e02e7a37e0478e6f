#!/bin/bash
# A region writing N fresh pages, called K times, by a uid-65534 process: count K and
# page-faults sum exactly N*K, per call exactly N.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
N=7 K=50
PMC_EVENTS=page-faults,task-clock run_client "$TMP/out" env PMC_EVENTS=page-faults,task-clock "$PMC_TEST_CLIENT_BIN" pages $N $K
expect_eq "client enabled" "$(kv enabled "$TMP/out")" 1
j=$(region_json pages "$CLIENT_PID")
expect_eq "count" "$(jq .count <<<"$j")" $K
expect_faults "page-faults sum" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))
expect_faults "page-faults min" "$(jq '.events["page-faults"].min' <<<"$j")" $N
if [ -z "${PMC_SANITIZED:-}" ]; then # per-call exactness: see expect_faults
	expect_eq "page-faults max" "$(jq '.events["page-faults"].max' <<<"$j")" $N
	expect_eq "page-faults p99" "$(jq '.events["page-faults"].p99 == '$N <<<"$j")" true
	expect_eq "page-faults stddev" "$(jq '.events["page-faults"].stddev == 0' <<<"$j")" true
fi
expect_eq "not scaled" "$(jq '.events["page-faults"].scaled' <<<"$j")" false
expect_eq "uid" "$(jq .uid <<<"$j")" 65534
expect_eq "event keys" "$(jq -c '.events | keys_unsorted' <<<"$j")" '["page-faults","task-clock"]'
expect_eq "wall_ns has stats" "$(jq -c '.wall_ns | keys_unsorted' <<<"$j")" \
	'["sum","min","max","mean","stddev","p50","p90","p99","scaled","floor","too_short"]'
[ "$(jq '.wall_ns.min > 0' <<<"$j")" = true ] || fail "wall_ns.min is 0"
# The example program, the same way: 16 pages x 20 calls.
run_client "$TMP/ex" env PMC_EVENTS=page-faults "$PMC_EXAMPLE_BIN" 20 16
j=$(region_json touch-pages "$CLIENT_PID")
expect_faults "example touch-pages page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" 320
# Software events have no rdpmc: the library says it reads them with read(); with no daemon
# the thread is not profiled at all.
run_client "$TMP/sw" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" loop 1000
expect_eq "software events: read() path" "$(kv rdpmc "$TMP/sw")" 0
run_client "$TMP/none" env PMC_SOCKET="$TMP/no-such.sock" "$PMC_TEST_CLIENT_BIN" loop 1000
expect_eq "no daemon: not profiled" "$(kv rdpmc "$TMP/none")" -1
# A client that disconnected keeps its aggregates.
j=$(region_json pages "$(pmcctl query --format json | jq '.regions[] | select(.name=="pages") | .pid')")
expect_eq "kept after disconnect" "$(jq .count <<<"$j")" $K
daemon_alive
