#!/bin/bash
# pmcdaemon --metrics: the Prometheus page over HTTP on loopback, fetched with curl. Exact
# figures against the test client's ground truth, label escaping, HELP and TYPE lines,
# 404 for other paths, the refusal of an address beyond loopback, and the warning that a
# page without --metrics-token-file is open (e2e-metrics-auth tests the token).
. "$(dirname "$0")/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"

# A non-loopback address is refused before anything starts, naming the option.
for addr in 192.0.2.1:9464 0.0.0.0:0 '[::]:0'; do
	set +e
	"$PMCDAEMON_BIN" --socket "$TMP/refused.sock" --metrics "$addr" 2>"$TMP/err"
	rc=$?
	set -e
	expect_eq "--metrics $addr exit" $rc 2
	grep -qF -- "--metrics $addr: not a loopback address" "$TMP/err" && grep -qF -- "--metrics-any" "$TMP/err" ||
		fail "--metrics $addr: message: $(cat "$TMP/err")"
	[ ! -e "$TMP/refused.sock" ] || fail "--metrics $addr: the refused daemon created its socket"
done
set +e
"$PMCDAEMON_BIN" --socket "$TMP/refused.sock" --metrics 127.0.0.1 2>"$TMP/err"
expect_eq "--metrics without a port exit" $? 2
set -e

start_daemon --metrics 127.0.0.1:0
PORT=$(metrics_port)
URL=http://127.0.0.1:$PORT
grep -q "the metrics page has no access control: every local user who can reach 127.0.0.1:$PORT may read it.*--metrics-token-file FILE" "$TMP/daemon.log" ||
	fail "no warning that the page is open: $(cat "$TMP/daemon.log")"
pass "warned that the page is open to every local user"

run_client "$TMP/a" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 3 7
A=$CLIENT_PID
# Every character the format escapes, and a byte that is not UTF-8.
WEIRD=$'we"ird\\na\nme\xff'
run_client "$TMP/w" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named "$WEIRD" 2 5
W=$CLIENT_PID
# The page shows what the daemon's loop has read; a query makes it read every batch.
expect_eq "query count" "$(region_json pages "$A" | jq .count)" 7
expect_eq "query count (odd name)" "$(pmcctl query --pid "$W" --format json | jq '.regions[0].count')" 5

curl -sS -f -D "$TMP/headers" -o "$TMP/metrics" "$URL/metrics" || fail "GET /metrics"
grep -qi '^content-type: text/plain; version=0.0.4; charset=utf-8' "$TMP/headers" ||
	fail "content type: $(cat "$TMP/headers")"

# value SERIES: the value of the one sample named SERIES (name and labels, exactly)
value() {
	SERIES="$1 " awk 'BEGIN { s = ENVIRON["SERIES"] }
		index($0, s) == 1 { n++; v = substr($0, length(s) + 1) }
		END { if (n != 1) exit 1; print v }' "$TMP/metrics" ||
		fail "not exactly one sample of $1 in: $(cat "$TMP/metrics")"
}
L="pid=\"$A\",comm=\"pmc-test-client\",region=\"pages\""
E="$L,event=\"page-faults\""
expect_eq "region count" "$(value "pmc_region_count_total{$L}")" 7
expect_faults "page-faults sum" "$(value "pmc_region_event_sum{$E}")" 21
expect_eq "page-faults count" "$(value "pmc_region_event_count{$E}")" 7
expect_eq "wall count" "$(value "pmc_region_wall_seconds_count{$L}")" 7
expect_eq "scaled samples" "$(value "pmc_region_event_scaled_samples_total{$E}")" 0
[ -z "${PMC_SANITIZED:-}" ] && expect_eq "page-faults median" "$(value "pmc_region_event{$E,quantile=\"0.5\"}")" 3
wall_sum=$(value "pmc_region_wall_seconds_sum{$L}")
awk -v s="$wall_sum" 'BEGIN { exit !(s > 0 && s < 10) }' || fail "wall seconds sum: $wall_sum"
expect_eq "samples_total" "$(value pmc_samples_total)" 12
expect_eq "regions" "$(value pmc_regions)" 2
expect_eq "rejected" "$(value pmc_rejected_connections_total)" 0
expect_eq "evicted" "$(value pmc_evicted_processes_total)" 0

# Label values: backslash, double quote and newline escaped as the format says; a byte that
# is not UTF-8 as the visible text \xff (its backslash escaped: \\xff on the page).
WL="pid=\"$W\",comm=\"pmc-test-client\",region=\"we\\\"ird\\\\na\\nme\\\\xff\""
expect_eq "odd name count" "$(value "pmc_region_count_total{$WL}")" 5
expect_faults "odd name page-faults sum" "$(value "pmc_region_event_sum{$WL,event=\"page-faults\"}")" 10

# Every family has HELP and TYPE; counters, and only they, end in _total.
for fam in pmc_build_info pmc_uptime_seconds pmc_clients pmc_threads pmc_processes pmc_regions \
	pmc_samples_total pmc_batches_total pmc_dropped_samples_total pmc_rejected_connections_total pmc_evicted_processes_total \
	pmc_region_count_total pmc_region_wall_seconds pmc_region_event pmc_region_event_scaled_samples_total; do
	grep -q "^# HELP $fam " "$TMP/metrics" || fail "no HELP for $fam"
	grep -qE "^# TYPE $fam (counter|gauge|summary)$" "$TMP/metrics" || fail "no TYPE for $fam"
done
awk '/^# TYPE/ { if (($4 == "counter") != ($3 ~ /_total$/)) { print; bad = 1 } } END { exit bad }' \
	"$TMP/metrics" || fail "counter names"
pass "HELP and TYPE lines"

expect_eq "GET /nope" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/nope")" 404
expect_eq "GET /" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/")" 404
expect_eq "POST /metrics" "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/metrics")" 405
expect_eq "HEAD /metrics" "$(curl -s -o /dev/null -w '%{http_code}' -I "$URL/metrics")" 200

# After a reset: zero counts, and quantiles of nothing are NaN.
pmcctl reset --pid "$A" >/dev/null
curl -sS -f -o "$TMP/metrics" "$URL/metrics" || fail "GET /metrics after reset"
expect_eq "count after reset" "$(value "pmc_region_count_total{$L}")" 0
expect_eq "median after reset" "$(value "pmc_region_event{$E,quantile=\"0.5\"}")" NaN
expect_eq "other process untouched" "$(value "pmc_region_count_total{$WL}")" 5
daemon_alive
