#!/bin/bash
# Figures added up over processes never mix users: a process of another user named like the
# victim's program, with the same regions, adds neither to the victim's /metrics series (200
# runs had become 201: the page has a uid label) nor to its flame graph stacks (2,000 had
# become 1,002,000: the root frame is "comm (uid U)").
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"

OTHER=65533
as_other() { setpriv --reuid=$OTHER --regid=$OTHER --clear-groups -- "${USER_ENV[@]}" "$@"; }

start_daemon --metrics 127.0.0.1:0
PORT=$(metrics_port)
run_client "$TMP/victim" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" tree 5
VICTIM=$CLIENT_PID
as_other env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" tree 3 >"$TMP/other" 2>&1 ||
	fail "the other user's client failed: $(cat "$TMP/other")"
# A query makes the daemon read every batch queued.
expect_eq "victim's runs of main" "$(pmcctl query --region main --pid "$VICTIM" --format json | jq '.regions[0].count')" 5

curl -sS -f -o "$TMP/metrics" "http://127.0.0.1:$PORT/metrics" || fail "GET /metrics"
count_of() { sed -n "s/^pmc_region_count_total{comm=\"pmc-test-client\",uid=\"$1\",region=\"main\"} //p" "$TMP/metrics"; }
expect_eq "/metrics: the victim's runs of main" "$(count_of 65534)" 5
expect_eq "/metrics: the other user's, apart" "$(count_of $OTHER)" 3
expect_eq "/metrics: series of main" "$(grep -c '^pmc_region_count_total{.*region="main"}' "$TMP/metrics")" 2
if command -v promtool >/dev/null; then
	promtool check metrics <"$TMP/metrics" >"$TMP/promtool.out" 2>&1 || fail "promtool: $(cat "$TMP/promtool.out")"
	pass "promtool accepts the page"
fi

pmcctl flamegraph --event page-faults >"$TMP/folded"
cat "$TMP/folded"
expect_eq "flame graph root frames" "$(sed 's/;.*//' "$TMP/folded" | sort -u | paste -sd,)" \
	"pmc-test-client (uid $OTHER),pmc-test-client (uid 65534)"
victim_total=$(awk '{ w = $NF; s = $0; sub(/ [0-9]+$/, "", s) }
	index(s, "pmc-test-client (uid 65534);main") == 1 { t += w } END { print t + 0 }' "$TMP/folded")
expect_eq "the victim's stacks add up to its main alone" "$victim_total" \
	"$(pmcctl query --tree --pid "$VICTIM" --format json | jq '[.. | objects | select(.path? == "main")] | .[0].events["page-faults"].sum')"
daemon_alive
