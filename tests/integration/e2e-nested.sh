#!/bin/bash
# Nested regions: the outer region's counts include the inner one's; the scoped
# PMC_REGION form ends its region when left by break.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
N=5 K=30
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" nested $N $K
for r in outer inner scoped; do
	j=$(region_json $r "$CLIENT_PID")
	expect_eq "$r count" "$(jq .count <<<"$j")" $K
	expect_faults "$r page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" "$(kv ${r}_page_faults "$TMP/out")"
done
# Deeper than a thread's first 32 frames and than the 32 regions of a call path: every level
# is recorded (the frames grow), each with its own span.
run_client "$TMP/deep" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" deep 40
j=$(region_json deep "$CLIENT_PID")
expect_eq "deep count" "$(jq .count <<<"$j")" "$(kv count "$TMP/deep")"
if [ -z "${PMC_SANITIZED:-}" ]; then
	expect_eq "deep page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" "$(kv page_faults "$TMP/deep")"
else # ASan's shadow of 40 new stack frames faults inside the regions too
	[ "$(jq '.events["page-faults"].sum' <<<"$j")" -ge "$(kv page_faults "$TMP/deep")" ] || fail "deep page-faults below the truth"
fi
# The levels inside which a call path new to the thread began (each level's own path down to
# 32, then the first flagged one deeper) are first samples of new paths: kept out of the
# figures (min, max, percentiles), counted in count and sum above and in first_path_samples.
expect_eq "deep: first samples of new paths" "$(jq .first_path_samples <<<"$j")" 33
[ -n "${PMC_SANITIZED:-}" ] || expect_eq "deep: the outermost level in the figures" "$(jq '.events["page-faults"].max' <<<"$j")" 7
daemon_alive

# A first sample of a new path in a region the daemon refuses (--max-regions 1: "a" counted,
# "b" and "c" refused) is counted as dropped with the rest of that region's (before: the one
# inside which the path b;c began was counted nowhere, 2 K - 1 dropped).
kill "$DAEMON_PID"
wait "$DAEMON_PID" || true
start_daemon --max-regions 1
K=10
run_client "$TMP/newpath" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" newpath $K
hangups_taken
q=$(pmcctl query --pid "$CLIENT_PID" --format json)
expect_eq "refused regions' new paths: a counted" "$(jq '[.regions[] | select(.name == "a") | .count] | add' <<<"$q")" $K
expect_eq "refused regions' new paths: b and c dropped (max-regions)" \
	"$(jq '[.losses[]? | select(.reason == "max-regions") | .count] | add' <<<"$q")" $((2 * K))
daemon_alive
