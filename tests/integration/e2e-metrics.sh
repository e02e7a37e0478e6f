#!/bin/bash
# pmcdaemon --metrics: the Prometheus page over HTTP on loopback, fetched with curl. Exact
# figures against the test client's ground truth, merged over two processes of one program
# (no pid label), its histograms' buckets, label escaping, HELP and TYPE lines, chunks, 404
# for other paths, the refusal of an address beyond loopback, the warning that a page
# without --metrics-token-file is open (e2e-metrics-auth tests the token), and the default
# series cap (e2e-metrics-scale: 100,000 regions).
. "$(dirname "$0")/../lib/lib.sh"
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
# Another process of the same program: its runs of the region add to A's on the page.
run_client "$TMP/b" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 3 5
B=$CLIENT_PID
# Every character the format escapes, and a byte that is not UTF-8.
WEIRD=$'we"ird\\na\nme\xff'
run_client "$TMP/w" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named "$WEIRD" 2 5
W=$CLIENT_PID
# The page shows what the daemon's loop has read; a query makes it read every batch.
expect_eq "query count" "$(region_json pages "$A" | jq .count)" 7
expect_eq "query count (second process)" "$(region_json pages "$B" | jq .count)" 5
expect_eq "query count (odd name)" "$(pmcctl query --pid "$W" --format json | jq '.regions[0].count')" 5

curl -sS -f -D "$TMP/headers" -o "$TMP/metrics" "$URL/metrics" || fail "GET /metrics"
grep -qi '^content-type: text/plain; version=0.0.4; charset=utf-8' "$TMP/headers" ||
	fail "content type: $(cat "$TMP/headers")"
# Written as it is built, a chunk at a time.
grep -qi '^transfer-encoding: chunked' "$TMP/headers" || fail "not chunked: $(cat "$TMP/headers")"

# value SERIES: the value of the one sample named SERIES (name and labels, exactly)
value() {
	SERIES="$1 " awk 'BEGIN { s = ENVIRON["SERIES"] }
		index($0, s) == 1 { n++; v = substr($0, length(s) + 1) }
		END { if (n != 1) exit 1; print v }' "$TMP/metrics" ||
		fail "not exactly one sample of $1 in: $(cat "$TMP/metrics")"
}
# One set of series per (program, uid, region): no pid label.
! grep -q 'pid="' "$TMP/metrics" || fail "the page has a pid label"
L='comm="pmc-test-client",uid="65534",region="pages"'
E="$L,event=\"page-faults\""
expect_eq "region count (two processes)" "$(value "pmc_region_count_total{$L}")" 12
expect_faults "page-faults sum" "$(value "pmc_region_event_sum{$E}")" 36
expect_eq "page-faults count" "$(value "pmc_region_event_count{$E}")" 12
expect_eq "wall count" "$(value "pmc_region_wall_seconds_count{$L}")" 12
expect_eq "scaled samples" "$(value "pmc_region_event_scaled_samples_total{$E}")" 0
# Histograms: buckets le = 2^k - 1, from the one below the smallest value's power of two (3
# page faults: le="1", empty) up to 2^40 - 1, then +Inf, which is _count.
if [ -z "${PMC_SANITIZED:-}" ]; then
	expect_eq "page-faults bucket le=0 left out" "$(grep -c "^pmc_region_event_bucket{$E,le=\"0\"}" "$TMP/metrics")" 0
	expect_eq "page-faults bucket le=1" "$(value "pmc_region_event_bucket{$E,le=\"1\"}")" 0
	expect_eq "page-faults bucket le=3" "$(value "pmc_region_event_bucket{$E,le=\"3\"}")" 12
	expect_eq "page-faults bucket le=7" "$(value "pmc_region_event_bucket{$E,le=\"7\"}")" 12
	# le = 1, 3, ..., 2^40 - 1 and +Inf.
	expect_eq "page-faults buckets" "$(grep -c "^pmc_region_event_bucket{$E," "$TMP/metrics")" 41
fi
expect_eq "page-faults last bound" "$(value "pmc_region_event_bucket{$E,le=\"1099511627775\"}")" 12
expect_eq "page-faults +Inf" "$(value "pmc_region_event_bucket{$E,le=\"+Inf\"}")" 12
expect_eq "wall last bound" "$(value "pmc_region_wall_seconds_bucket{$L,le=\"68.719476735\"}")" 12
expect_eq "wall +Inf" "$(value "pmc_region_wall_seconds_bucket{$L,le=\"+Inf\"}")" 12
# Cumulative: never decreasing along the bounds.
awk -v s="pmc_region_wall_seconds_bucket{$L," 'index($0, s) == 1 { if ($2 < last) bad = 1; last = $2 } END { exit bad }' \
	"$TMP/metrics" || fail "wall buckets decrease: $(grep "^pmc_region_wall_seconds_bucket{$L," "$TMP/metrics")"
wall_sum=$(value "pmc_region_wall_seconds_sum{$L}")
awk -v s="$wall_sum" 'BEGIN { exit !(s > 0 && s < 10) }' || fail "wall seconds sum: $wall_sum"
expect_eq "samples_total" "$(value pmc_samples_total)" 17
expect_eq "regions" "$(value pmc_regions)" 3
expect_eq "rejected" "$(value pmc_rejected_connections_total)" 0
expect_eq "evicted" "$(value pmc_evicted_processes_total)" 0
expect_eq "series dropped" "$(value pmc_metrics_series_dropped)" 0

# Label values: backslash, double quote and newline escaped as the format says; a byte that
# is not UTF-8 as the visible text \xff (its backslash escaped: \\xff on the page).
WL="comm=\"pmc-test-client\",uid=\"65534\",region=\"we\\\"ird\\\\na\\nme\\\\xff\""
expect_eq "odd name count" "$(value "pmc_region_count_total{$WL}")" 5
expect_faults "odd name page-faults sum" "$(value "pmc_region_event_sum{$WL,event=\"page-faults\"}")" 10

# Every family has HELP and TYPE; counters, and only they, end in _total.
for fam in pmc_build_info pmc_uptime_seconds pmc_clients pmc_threads pmc_processes pmc_regions \
	pmc_samples_total pmc_batches_total pmc_dropped_samples_total pmc_rejected_connections_total pmc_evicted_processes_total \
	pmc_metrics_series_dropped pmc_region_count_total pmc_region_wall_seconds pmc_region_event \
	pmc_region_event_scaled_samples_total; do
	grep -q "^# HELP $fam " "$TMP/metrics" || fail "no HELP for $fam"
	grep -qE "^# TYPE $fam (counter|gauge|histogram)$" "$TMP/metrics" || fail "no TYPE for $fam"
done
expect_eq "histogram families" "$(grep -c '^# TYPE .* histogram$' "$TMP/metrics")" 2
! grep -q '^# TYPE .* summary$' "$TMP/metrics" || fail "the page still has summaries"
awk '/^# TYPE/ { if (($4 == "counter") != ($3 ~ /_total$/)) { print; bad = 1 } } END { exit bad }' \
	"$TMP/metrics" || fail "counter names"
pass "HELP and TYPE lines"

expect_eq "GET /nope" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/nope")" 404
expect_eq "GET /" "$(curl -s -o /dev/null -w '%{http_code}' "$URL/")" 404
expect_eq "POST /metrics" "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$URL/metrics")" 405
expect_eq "HEAD /metrics" "$(curl -s -o /dev/null -w '%{http_code}' -I "$URL/metrics")" 200
# HTTP/1.0: no chunks, the end of the page is the end of the connection.
curl -sS -f -0 -o "$TMP/metrics10" "$URL/metrics" || fail "GET /metrics over HTTP/1.0"
expect_eq "HTTP/1.0 page ends with the last family" \
	"$(grep -c '^pmc_region_event_scaled_samples_total{' "$TMP/metrics10")" 2

# After a reset of the region in every process: zero counts; a histogram of no run has its
# +Inf bucket only. (A reset of one process leaves the page as it was: e2e-metrics-evict.)
pmcctl reset --region pages >/dev/null
curl -sS -f -o "$TMP/metrics" "$URL/metrics" || fail "GET /metrics after reset"
expect_eq "count after reset" "$(value "pmc_region_count_total{$L}")" 0
expect_eq "buckets after reset" "$(grep "^pmc_region_event_bucket{$E," "$TMP/metrics")" \
	"pmc_region_event_bucket{$E,le=\"+Inf\"} 0"
expect_eq "_count after reset" "$(value "pmc_region_event_count{$E}")" 0
expect_eq "other region untouched" "$(value "pmc_region_count_total{$WL}")" 5

# --- the series cap ---
# 200 regions of one sample each (wall 1000 ns, 1 page fault), 77 series each: over the
# default cap of 10,000. The region with the most runs stays; the page keeps under the cap.
run_client "$TMP/r" "$PMC_TEST_RAW_BIN" "$SOCK" regions 200 0
run_client "$TMP/a" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 3 7
# A scrape reads no client's queue first, as a query does: the client's last batch taken.
hangups_taken
curl -sS -f -o "$TMP/metrics" "$URL/metrics" || fail "GET /metrics with 200 regions more"
series=$(grep -c '^pmc_region_' "$TMP/metrics")
[ "$series" -le 10000 ] || fail "$series series of regions, over the default cap of 10000"
pass "$series series of regions, within the default cap of 10000"
dropped=$(value pmc_metrics_series_dropped)
[ "$dropped" -gt 0 ] || fail "no series dropped with 200 regions"
expect_eq "the largest region stays" "$(value "pmc_region_count_total{$L}")" 7
grep -q "metrics: the page leaves off $dropped series of the regions with the fewest runs to stay within --metrics-max-series 10000" \
	"$TMP/daemon.log" || fail "the dropped series were not logged: $(cat "$TMP/daemon.log")"
curl -sS -f -o "$TMP/metrics" "$URL/metrics" || fail "GET /metrics again"
expect_eq "logged once" "$(grep -c 'metrics: the page leaves off' "$TMP/daemon.log")" 1
daemon_alive

# --metrics-max-series: a whole number, with --metrics.
for bad in 0 -1 x 100000001; do
	set +e
	"$PMCDAEMON_BIN" --socket "$TMP/refused.sock" --metrics 127.0.0.1:0 --metrics-max-series "$bad" 2>"$TMP/err"
	rc=$?
	set -e
	expect_eq "--metrics-max-series $bad exit" $rc 2
	grep -qF -- "--metrics-max-series '$bad': expected a whole number" "$TMP/err" || fail "message: $(cat "$TMP/err")"
done
set +e
"$PMCDAEMON_BIN" --socket "$TMP/refused.sock" --metrics-max-series 100 2>"$TMP/err"
rc=$?
set -e
expect_eq "--metrics-max-series without --metrics exit" $rc 2
grep -qF -- "--metrics-max-series needs --metrics ADDR:PORT" "$TMP/err" || fail "message: $(cat "$TMP/err")"
