#!/bin/bash
# Figures that add up across hosts: two pmcdaemons on loopback (two --metrics ports) scraped
# by a real prometheus, each fed samples of region "fleet" with known values by
# pmc-test-dist (each value both a wall time in ns and a page-faults count): daemon A the
# values 1..1000, from two processes of one program (the page merges them), daemon B
# 1000..10000. Over both daemons the fleet query
#   histogram_quantile(Q, sum by (le, region) (rate(pmc_region_event_bucket[5m])))
# (and the same of pmc_region_wall_seconds, and of the counters as they are, without rate)
# must be within the bucket error of the true quantile of the union: Prometheus interpolates
# inside the bucket where the rank falls, so the estimate lies in the bucket
# (2^k - 1, 2^(k+1) - 1] that holds the true value: an error below its width, 2^k. (The
# truth of a rate() weighs each daemon's runs as rate() extrapolated them.)
# `promtool check metrics` accepts both pages. Skips (77) without promtool or prometheus
# (Debian package prometheus).
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"
command -v promtool >/dev/null || skip "promtool is missing (Debian package prometheus)"
command -v prometheus >/dev/null || skip "prometheus is missing (Debian package prometheus)"
: "${PMC_TEST_DIST_BIN:?set by ctest}"
cp "$PMC_TEST_DIST_BIN" "$TMP/bin/"
chmod a+rx "$TMP/bin/pmc-test-dist"
DIST=$TMP/bin/pmc-test-dist

B_PID=
PROM_PID=
# stop_b: daemon B must stop cleanly on SIGTERM too
stop_b() {
	local drc=0
	[ -n "$B_PID" ] || return 0
	kill -TERM "$B_PID" 2>/dev/null
	wait "$B_PID" 2>/dev/null || drc=$?
	B_PID=
	if [ "$drc" != 0 ] || grep -qE "Sanitizer|runtime error" "$TMP/daemon-b.log"; then
		echo "FAIL: pmcdaemon B exited with status $drc on SIGTERM:" >&2
		cat "$TMP/daemon-b.log" >&2
		return 1
	fi
}
# cleanup (lib.sh) takes the exit status from $?; errexit would stop the trap half-way.
trap 'rc=$?; set +e; [ -z "$PROM_PID" ] || { kill "$PROM_PID"; wait "$PROM_PID"; } 2>/dev/null; stop_b || rc=1; (exit $rc); cleanup' EXIT

start_daemon --metrics 127.0.0.1:0
PORT_A=$(metrics_port)
SOCK_B=$TMP/b.sock
"$PMCDAEMON_BIN" --socket "$SOCK_B" --verbose --metrics 127.0.0.1:0 2>"$TMP/daemon-b.log" &
B_PID=$!
PORT_B=
for _ in $(seq 2400); do
	PORT_B=$(sed -n 's|^.*serving metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$TMP/daemon-b.log")
	[ -n "$PORT_B" ] && [ -S "$SOCK_B" ] && grep -q "listening on" "$TMP/daemon-b.log" && break
	kill -0 "$B_PID" 2>/dev/null || { cat "$TMP/daemon-b.log" >&2; fail "pmcdaemon B exited at start"; }
	sleep 0.05
done
[ -n "$PORT_B" ] || fail "pmcdaemon B did not log the address of its metrics page"

# feed SOCKET LO HI: one process of pmc-test-dist sends region "fleet" the values LO..HI
feed() {
	run_client "$TMP/feed.out" "$DIST" "$1" fleet "$2" "$3"
	expect_eq "pmc-test-dist $2..$3 sent" "$(cat "$TMP/feed.out")" "sent=$(($3 - $2 + 1))"
}

# First each region's smallest value alone, and Prometheus scrapes that: the bucket series
# of the values to come exist then (a series leaves out only the buckets below its smallest
# value), and rate() sees the values that follow as an increase.
feed "$SOCK" 1 1
feed "$SOCK_B" 1000 1000

cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pmc
    static_configs:
      - targets: ['127.0.0.1:$PORT_A', '127.0.0.1:$PORT_B']
EOF
start_prometheus "$TMP/prometheus.yml"
# wait_for WHAT QUERY WANT: until QUERY gives WANT (120 s at most: a scrape a second, on a
# loaded machine)
wait_for() {
	local got=
	for _ in $(seq 1200); do
		got=$(promql "$2" || true)
		[ "$got" = "$3" ] && { pass "$1 = $3"; return 0; }
		sleep 0.1
	done
	cat "$TMP/prometheus.log" >&2
	fail "$1: got '$got', want '$3' after 120 s"
}
wait_for "targets up" 'sum(up{job="pmc"})' 2
wait_for "scrapes of the smallest values alone" \
	'min(count_over_time(pmc_region_count_total{region="fleet"}[5m]) >= bool 2)' 1

feed "$SOCK" 1 500
feed "$SOCK" 501 1000
feed "$SOCK_B" 1000 10000
wait_for "runs scraped over the fleet" 'sum(pmc_region_count_total{region="fleet"})' 10003
# Every query below at one instant T: rate() extrapolates each target's increase from its
# first scrape to the instant asked, and two instants a scrape apart weigh A and B
# differently (a run of B weighed 1.31 of A's in the weights and 0.96 in the quantile once,
# queried a moment apart: p0.04 at 386 for 513). T is the older of the two targets' last
# scrapes, which Prometheus has stored when it answers: later scrapes change nothing at T.
# It waits until each target's last scrape at or before T holds all the runs.
at_t_all_runs() {
	PROM_TIME=
	PROM_TIME=$(promql 'min(timestamp(up{job="pmc"}))')
	[ -n "$PROM_TIME" ] && [ "$(promql 'sum(pmc_region_count_total{region="fleet"})')" = 10003 ]
}
wait_until "an instant at which both targets' last scrapes hold all 10003 runs" 60 at_t_all_runs
echo "note: every query below at the instant $PROM_TIME"

for port in "$PORT_A" "$PORT_B"; do
	curl -sS -f -o "$TMP/metrics" "http://127.0.0.1:$port/metrics" || fail "GET /metrics"
	if ! promtool check metrics <"$TMP/metrics" >"$TMP/promtool.out" 2>&1 || [ -s "$TMP/promtool.out" ]; then
		cat "$TMP/promtool.out" >&2
		fail "promtool check metrics refused the page of port $port"
	fi
	! grep -q 'pid="' "$TMP/metrics" || fail "the page has a pid label"
done
pass "promtool check metrics (both pages); no pid label"
curl -sS -f -o "$TMP/metrics" "http://127.0.0.1:$PORT_A/metrics" || fail "GET /metrics"
expect_eq "daemon A: the runs of its three processes, merged" \
	"$(sed -n 's/^pmc_region_count_total{comm="pmc-test-dist",uid="65534",region="fleet"} //p' "$TMP/metrics")" 1001

# truth Q UNIT WA WB N0...: the true Q-quantile of 1..1000 (each value of weight WA), and
# 1000..10000 (weight WB), with the values N0... (weight 1), divided by UNIT; then the
# bounds of the bucket that holds it, (2^k - 1) / UNIT and (2^(k+1) - 1) / UNIT. The
# smallest value whose cumulated weight reaches Q times the whole (the nearest rank when
# every weight is 1).
truth() {
	local q=$1 unit=$2 wa=$3 wb=$4
	shift 4
	{
		seq 1 1000 | sed "s/\$/ $wa/"
		seq 1000 10000 | sed "s/\$/ $wb/"
		for v in "$@"; do echo "$v 1"; done
	} | sort -n -k1,1 | awk -v q="$q" -v unit="$unit" '{ v[NR] = $1; w[NR] = $2; all += $2 }
		END {
			for (i = 1; i <= NR; i++) { c += w[i]; if (c >= q * all * (1 - 1e-12)) break }
			x = v[i]; p = 1; while (p * 2 <= x) p *= 2
			printf "%.12g %.12g %.12g\n", x / unit, (p - 1) / unit, (2 * p - 1) / unit
		}'
}

# check WHAT QUERY Q UNIT WA WB N0...: the query's estimate is inside the bucket of the truth
check() {
	local what=$1 query=$2 q=$3 unit=$4
	shift 4
	local est x lo hi
	est=$(promql "$query")
	read -r x lo hi <<<"$(truth "$q" "$unit" "$@")"
	[ -n "$est" ] || fail "$what: no answer to $query"
	awk -v e="$est" -v lo="$lo" -v hi="$hi" 'BEGIN { t = (hi - lo) * 1e-9; exit !(e >= lo - t && e <= hi + t) }' ||
		fail "$what: got $est, want $x within its bucket [$lo, $hi]"
	pass "$what: $est; true $x, bucket [$lo, $hi], error $(awk -v e="$est" -v x="$x" 'BEGIN { d = e - x; print d < 0 ? -d : d }') <= $(awk -v lo="$lo" -v hi="$hi" 'BEGIN { print hi - lo }')"
}

# rate() extrapolates each target's counters over the window from its own scrape times: its
# sums weigh A's runs and B's a little differently. The truth of a rate weighs them as
# Prometheus did: A's runs by A's rate of _count over its 1000 runs, B's likewise.
# weight FAMILY INSTANCE RUNS: that weight
weight() {
	promql "sum(rate(${1}_count{region=\"fleet\",instance=\"$2\"}[5m])) / $3"
}
EW_A=$(weight pmc_region_event "127.0.0.1:$PORT_A" 1000)
EW_B=$(weight pmc_region_event "127.0.0.1:$PORT_B" 9001)
WW_A=$(weight pmc_region_wall_seconds "127.0.0.1:$PORT_A" 1000)
WW_B=$(weight pmc_region_wall_seconds "127.0.0.1:$PORT_B" 9001)
echo "note: rate() weighs a run of A $EW_A, of B $EW_B (page-faults); $WW_A, $WW_B (wall time)"
for q in 0.04 0.6 0.99; do
	# Over the rate, the values fed after the first scrapes; over the counters, all.
	check "fleet p$q of page-faults, rate" \
		"histogram_quantile($q, sum by (le, region) (rate(pmc_region_event_bucket{region=\"fleet\"}[5m])))" \
		"$q" 1 "$EW_A" "$EW_B"
	check "fleet p$q of the wall time, rate" \
		"histogram_quantile($q, sum by (le, region) (rate(pmc_region_wall_seconds_bucket{region=\"fleet\"}[5m])))" \
		"$q" 1e9 "$WW_A" "$WW_B"
	check "fleet p$q of page-faults, counters" \
		"histogram_quantile($q, sum by (le, region) (pmc_region_event_bucket{region=\"fleet\"}))" \
		"$q" 1 1 1 1 1000
	check "fleet p$q of the wall time, counters" \
		"histogram_quantile($q, sum by (le, region) (pmc_region_wall_seconds_bucket{region=\"fleet\"}))" \
		"$q" 1e9 1 1 1 1000
done
# Each daemon's own histogram is one of the fleet's: its +Inf bucket is its _count.
expect_eq "fleet +Inf bucket" "$(promql 'sum(pmc_region_event_bucket{region="fleet",le="+Inf"})')" 10003
expect_eq "fleet _count" "$(promql 'sum(pmc_region_event_count{region="fleet"})')" 10003
expect_eq "fleet _sum" "$(promql 'sum(pmc_region_event_sum{region="fleet"})')" $((500500 + 1 + 1000 + 50005000 - 499500))
daemon_alive
kill -0 "$B_PID" 2>/dev/null || { cat "$TMP/daemon-b.log" >&2; fail "pmcdaemon B died"; }
