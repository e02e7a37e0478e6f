#!/bin/bash
# The metrics page at 100,000 regions: 25 programs (copies of pmc-test-raw under 25 names,
# so 25 comms) of 4,000 regions each, and a second process of the first program, whose
# regions then have 2 runs where the others have 1. Each region has 77 series: its count,
# the wall-time histogram (1000 ns: bounds 2^9 - 1 .. 2^36 - 1 ns, +Inf, _sum, _count: 31)
# and page-faults' (1: bounds 0 .. 2^40 - 1, +Inf, _sum, _count: 44) and scaled counter.
# Under the default --metrics-max-series (10,000) the page holds the 129 regions with the
# most runs (all of the first program's, 2 runs each), the others' series counted in
# pmc_metrics_series_dropped, and `promtool check metrics` accepts it. Prints the page's
# size, the scrape's time and the daemon's CPU time and RSS (no thresholds).
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"

PROGRAMS=25
REGIONS=4000
PER_REGION=77
CAP=10000

start_daemon --metrics 127.0.0.1:0 --max-regions-per-user 200000
PORT=$(metrics_port)
URL=http://127.0.0.1:$PORT/metrics

load_programs $PROGRAMS $REGIONS

cpu_ms() { awk '{ print ($14 + $15) * 10 }' "/proc/$DAEMON_PID/stat"; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$DAEMON_PID/status"; }
rss0=$(rss_kb)
for n in 1 2; do
	c0=$(cpu_ms)
	t0=$EPOCHREALTIME
	curl -sS -f -o "$TMP/metrics" "$URL" || fail "GET /metrics"
	t1=$EPOCHREALTIME
	echo "note: scrape $n at $((PROGRAMS * REGIONS)) regions: $(stat -c %s "$TMP/metrics") bytes," \
		"$(wc -l <"$TMP/metrics") lines in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') s;" \
		"daemon CPU $(($(cpu_ms) - c0)) ms, RSS $rss0 kB before, $(rss_kb) kB after"
done

# value SERIES: the value of the one sample named SERIES (name and labels, exactly)
value() {
	SERIES="$1 " awk 'BEGIN { s = ENVIRON["SERIES"] }
		index($0, s) == 1 { n++; v = substr($0, length(s) + 1) }
		END { if (n != 1) exit 1; print v }' "$TMP/metrics" ||
		fail "not exactly one sample of $1"
}
kept=$((CAP / PER_REGION))
series=$(grep -c '^pmc_region_' "$TMP/metrics")
expect_eq "series of regions on the page (at most $CAP)" "$series" $((kept * PER_REGION))
expect_eq "series dropped" "$(value pmc_metrics_series_dropped)" $((PROGRAMS * REGIONS * PER_REGION - kept * PER_REGION))
expect_eq "regions on the page" "$(grep -c '^pmc_region_count_total{' "$TMP/metrics")" $kept
expect_eq "regions on the page, of the program with 2 runs each" \
	"$(grep -c '^pmc_region_count_total{comm="raw-01",uid="65534",region="r[0-9]*"} 2$' "$TMP/metrics")" $kept
! grep -q 'pid="' "$TMP/metrics" || fail "the page has a pid label"
expect_eq "regions (gauge)" "$(value pmc_regions)" $(((PROGRAMS + 1) * REGIONS))

if command -v promtool >/dev/null; then
	if ! promtool check metrics <"$TMP/metrics" >"$TMP/promtool.out" 2>&1 || [ -s "$TMP/promtool.out" ]; then
		cat "$TMP/promtool.out" >&2
		fail "promtool check metrics refused the page"
	fi
	pass "promtool check metrics"
else
	echo "note: promtool is missing (Debian package prometheus): the page was not linted"
fi

# The loop serves its clients while it builds the page: Status calls during scrapes.
scrapes() { for _ in 1 2 3 4 5; do curl -s -o /dev/null "$URL"; done; }
scrapes &
SCRAPES=$!
worst=0
for _ in $(seq 50); do
	t0=$EPOCHREALTIME
	pmcctl status >/dev/null || fail "pmcctl status during scrapes"
	ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
	[ "$ms" -gt "$worst" ] && worst=$ms
done
wait "$SCRAPES"
echo "note: the slowest of 50 pmcctl status calls during scrapes took $worst ms (pmcctl's start included)"
daemon_alive
