#!/bin/bash
# pmcdaemon --metrics as Prometheus sees it: `promtool check metrics` (parser and linter)
# accepts the page, and a real prometheus on loopback scrapes the daemon every second
# until its query API returns the region's exact count, and histogram_quantile() reads
# its page-faults histogram (e2e-prometheus-fleet: over two daemons). The daemon has a bearer token
# (--metrics-token-file): the job that sends it (authorization: credentials_file) is up,
# those without it or with another token are down. Skips (77) without promtool; the
# scrape part needs the prometheus binary too (both come with Debian's prometheus package).
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"
command -v promtool >/dev/null || skip "promtool is missing (Debian package prometheus)"

# promtool must catch what it is here to catch: a counter without _total, a unit in ns.
printf '# HELP pmc_x_ns x\n# TYPE pmc_x_ns counter\npmc_x_ns 1\n' >"$TMP/bad"
if promtool check metrics <"$TMP/bad" >/dev/null 2>&1; then
	fail "promtool check metrics accepts a page it should refuse"
fi

TOKEN=$(head -c 24 /dev/urandom | base64 | tr '+/' '-_')
printf '%s\n' "$TOKEN" >"$TMP/token"
chmod 600 "$TMP/token"
printf 'not-%s\n' "$TOKEN" >"$TMP/wrong-token"
T0=$SECONDS
start_daemon --metrics 127.0.0.1:0 --metrics-token-file "$TMP/token"
PORT=$(metrics_port)
run_client "$TMP/a" env PMC_EVENTS=page-faults,task-clock "$PMC_TEST_CLIENT_BIN" pages 4 6
A=$CLIENT_PID
run_client "$TMP/w" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named $'odd "name"\\\n\xfe' 1 3
expect_eq "query count" "$(region_json pages "$A" | jq .count)" 6

curl -sS -f -H "Authorization: Bearer $TOKEN" -o "$TMP/metrics" "http://127.0.0.1:$PORT/metrics" || fail "GET /metrics"
grep -q '^pmc_region_count_total{comm="pmc-test-client",uid="65534",region="pages"} ' "$TMP/metrics" ||
	fail "page lacks the client's region"
if ! promtool check metrics <"$TMP/metrics" >"$TMP/promtool.out" 2>&1; then
	cat "$TMP/promtool.out" >&2
	fail "promtool check metrics refused the page"
fi
[ ! -s "$TMP/promtool.out" ] || fail "promtool check metrics: $(cat "$TMP/promtool.out")"
pass "promtool check metrics"

if ! command -v prometheus >/dev/null; then
	echo "note: the prometheus binary is missing: the real scrape was not run"
	exit 0
fi

PROM_PID=
# cleanup (lib.sh) takes the exit status from $?; errexit would stop the trap half-way.
trap 'rc=$?; set +e; [ -z "$PROM_PID" ] || { kill "$PROM_PID"; wait "$PROM_PID"; } 2>/dev/null; (exit $rc); cleanup' EXIT
cat >"$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pmc
    authorization:
      type: Bearer
      credentials_file: $TMP/token
    static_configs:
      - targets: ['127.0.0.1:$PORT']
  - job_name: pmc-no-token
    static_configs:
      - targets: ['127.0.0.1:$PORT']
  - job_name: pmc-wrong-token
    authorization:
      type: Bearer
      credentials_file: $TMP/wrong-token
    static_configs:
      - targets: ['127.0.0.1:$PORT']
EOF

start_prometheus "$TMP/prometheus.yml"
got=
for _ in $(seq 1200); do
	got=$(promql 'pmc_region_count_total{comm="pmc-test-client",uid="65534",region="pages"}' || true)
	[ -n "$got" ] && break
	sleep 0.1
done
[ -n "$got" ] || { cat "$TMP/prometheus.log" >&2; fail "prometheus had no pmc_region_count_total after 120 s"; }
expect_eq "scraped region count" "$got" 6
expect_faults "scraped page-faults sum" \
	"$(promql 'pmc_region_event_sum{comm="pmc-test-client",uid="65534",region="pages",event="page-faults"}')" 24
# A histogram Prometheus can read: every run in the bucket of 4 page faults, (3, 7].
[ -n "${PMC_SANITIZED:-}" ] || expect_eq "scraped page-faults median" \
	"$(promql 'histogram_quantile(0.5, sum by (le) (pmc_region_event_bucket{region="pages",event="page-faults"}))')" 5
expect_eq "scrape target up (with the token)" "$(promql 'up{job="pmc"}')" 1
# A byte that is not UTF-8 is the visible text \xfe in the label.
expect_eq "scraped odd region name" \
	"$(promql "pmc_region_count_total{region=\"odd \\\"name\\\"\\\\\\n\\\\xfe\"}")" 3
for job in pmc-no-token pmc-wrong-token; do
	got=
	for _ in $(seq 1200); do
		got=$(promql "up{job=\"$job\"}" || true)
		[ -n "$got" ] && break
		sleep 0.1
	done
	expect_eq "scrape target up ($job)" "$got" 0
	expect_eq "series scraped by $job" "$(promql "count(pmc_clients{job=\"$job\"})")" ""
done
grep -q "metrics: refused a request from 127.0.0.1 without the right bearer token" "$TMP/daemon.log" ||
	fail "the refused scrapes were not logged: $(cat "$TMP/daemon.log")"
# Every scrape of the two jobs is refused, each second: the log says so at most once in 10 s,
# so at most once more than the daemon's whole life in tens of seconds (however long a loaded
# machine made it: not a fixed count).
refused=$(grep -c 'metrics: refused a request' "$TMP/daemon.log")
[ "$refused" -le $(((SECONDS - T0) / 10 + 1)) ] ||
	fail "refused scrapes flood the log: $refused lines in $((SECONDS - T0)) s"
pass "refused scrapes logged $refused times in $((SECONDS - T0)) s"
daemon_alive
