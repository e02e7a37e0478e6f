#!/bin/bash
# A multiplexed (extrapolated) value is marked in every output: JSON "scaled": true with
# the running/enabled ratio, the CSV scaled column, a '*' in the table. Software events
# never multiplex, so the client here is a raw one sending the marks a real client sends
# when running < enabled (the client-side scaling is unit-tested in test-reader).
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
run_client "$TMP/out" "$PMC_TEST_RAW_BIN" "$SOCK" scaled-batch
j=$(region_json mux "$CLIENT_PID")
expect_eq "count" "$(jq .count <<<"$j")" 2
expect_eq "page-faults sum" "$(jq '.events["page-faults"].sum' <<<"$j")" 30
expect_eq "page-faults scaled" "$(jq '.events["page-faults"].scaled' <<<"$j")" true
expect_eq "page-faults scaled samples" "$(jq '.events["page-faults"].scaled_samples' <<<"$j")" 1
expect_eq "page-faults running ratio" "$(jq '.events["page-faults"].running_ratio' <<<"$j")" 0.25
expect_eq "task-clock not scaled" "$(jq '.events["task-clock"].scaled' <<<"$j")" false
expect_eq "csv scaled column" "$(pmcctl query --pid "$CLIENT_PID" --format csv | grep ',mux,' | grep ',page-faults,' | cut -d, -f14)" true
pmcctl query --pid "$CLIENT_PID" | grep -q 'page-faults\*' || fail "table does not mark the scaled event"
pmcctl query --pid "$CLIENT_PID" | grep -q '^\* scaled' || fail "table has no footnote"
pass "table marks page-faults*"
out=$(as_user "$PMC_TEST_RAW_BIN" "$SOCK" bad-mask) || fail "a scaled bit for an absent value was accepted: $out"
pass "bad scaled mask: $out"
daemon_alive
