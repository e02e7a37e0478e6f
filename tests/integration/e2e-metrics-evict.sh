#!/bin/bash
# /metrics while the daemon forgets exited processes (--keep-exited 2): their figures join
# a retired aggregate, so that every counter series of the page (_total, _bucket, _sum,
# _count) never goes down from one scrape to the next, and equals the exact sum over every
# process of the program ever run (N fresh pages written = N page faults), under two uids.
# Then pmcctl reset: of one process, the page keeps counting; of everything, every series
# restarts from 0. Then the bound of the retired figures (--metrics-max-series / 4 regions,
# a quarter of that per user), counted in pmc_retired_dropped_total. Then a restart with
# --state: every counter series continues from what it held.
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"

L='comm="pmc-test-client",uid="65534",region="pages"'
E="$L,event=\"page-faults\""

# scrape OUT: the page into OUT, and its counter samples ("series value") into OUT.c
scrape() {
	curl -sS -f -o "$1" "http://127.0.0.1:$PORT/metrics" || fail "GET /metrics"
	grep -E '^pmc_[a-z_]*(_total|_bucket|_sum|_count)[{ ]' "$1" >"$1.c" || true
}
# value PAGE SERIES: the value of the one sample named SERIES (name and labels, exactly)
value() {
	SERIES="$2 " awk 'BEGIN { s = ENVIRON["SERIES"] }
		index($0, s) == 1 { n++; v = substr($0, length(s) + 1) }
		END { if (n != 1) exit 1; print v }' "$1" ||
		fail "not exactly one sample of $2 in: $(cat "$1")"
}
# monotonic PREV CUR: every counter series of PREV is in CUR, with a value as large
monotonic() {
	awk 'function key(line) { return substr(line, 1, length(line) - length($NF) - 1) }
		NR == FNR { prev[key($0)] = $NF; next }
		{ cur[key($0)] = $NF }
		END {
			for (s in prev) {
				if (!(s in cur)) { print "gone: " s; bad = 1 }
				else if (cur[s] + 0 < prev[s] + 0) { print "down: " s " " prev[s] " -> " cur[s]; bad = 1 }
			}
			exit bad
		}' "$1" "$2" >"$TMP/mono" || fail "a counter went down or vanished: $(cat "$TMP/mono")"
}

# check PAGE: the page's series of region "pages" against every run so far (RUNS: "N K"
# each, K calls of N pages): runs, events, their sum, and each bucket le=X, the runs of at
# most X pages.
check() {
	local page=$1 count=0 pf=0 n k
	for r in "${RUNS[@]}"; do
		read -r n k <<<"$r"
		count=$((count + k))
		pf=$((pf + n * k))
	done
	expect_eq "runs ($2)" "$(value "$page" "pmc_region_count_total{$L}")" $count
	expect_eq "wall _count ($2)" "$(value "$page" "pmc_region_wall_seconds_count{$L}")" $count
	expect_eq "page-faults _count ($2)" "$(value "$page" "pmc_region_event_count{$E}")" $count
	expect_eq "page-faults +Inf ($2)" "$(value "$page" "pmc_region_event_bucket{$E,le=\"+Inf\"}")" $count
	expect_eq "scaled ($2)" "$(value "$page" "pmc_region_event_scaled_samples_total{$E}")" 0
	# Under sanitizers, a run's first touch of its shadow memory may fault inside the
	# region too: at least the pages written, at most one more each run.
	if [ -n "${PMC_SANITIZED:-}" ]; then
		local got
		got=$(value "$page" "pmc_region_event_sum{$E}")
		[ "$got" -ge $pf ] && [ "$got" -le $((pf + count)) ] ||
			fail "page-faults _sum ($2): got $got, want $pf to $((pf + count)) (sanitized build)"
		pass "page-faults _sum ($2) = $got (want $pf to $((pf + count)); sanitized build)"
		return 0
	fi
	expect_eq "page-faults _sum ($2)" "$(value "$page" "pmc_region_event_sum{$E}")" $pf
	local runs="${RUNS[*]}"
	RUNS_TEXT=$runs awk -v s="pmc_region_event_bucket{$E,le=\"" '
		BEGIN { n = split(ENVIRON["RUNS_TEXT"], v, " ") }
		index($0, s) == 1 {
			le = substr($0, length(s) + 1); sub(/".*/, "", le)
			if (le == "+Inf") next
			want = 0
			for (i = 1; i < n; i += 2) if (v[i] + 0 <= le + 0) want += v[i + 1]
			if ($NF + 0 != want) { print "le=" le ": " $NF ", want " want; bad = 1 }
			buckets++
		}
		END { if (!buckets) { print "no buckets"; bad = 1 } exit bad }' "$page" >"$TMP/buckets" ||
		fail "page-faults buckets ($2): $(cat "$TMP/buckets")"
	pass "page-faults buckets ($2): every le exact"
}

start_daemon --metrics 127.0.0.1:0 --keep-exited 2
PORT=$(metrics_port)

# Six processes of one program, one of them root's (another uid: a series of its own), each
# with its own page count: several powers of two, a smaller one after larger ones.
RUNS=()
PREV=
pids=()
i=0
for r in "5 3" "1 4" "9 2" "2 5" "17 1" "3 3"; do
	i=$((i + 1))
	read -r n k <<<"$r"
	if [ $i = 4 ]; then
		"${USER_ENV[@]}" PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages "$n" "$k" \
			>"$TMP/c$i" 2>"$TMP/c$i.err" || { cat "$TMP/c$i.err" >&2; fail "root client failed"; }
	else
		run_client "$TMP/c$i" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages "$n" "$k"
		pids+=("$CLIENT_PID")
	fi
	[ $i = 4 ] || RUNS+=("$r")
	# Reads every batch and the disconnect, which forgets the oldest exited process.
	pmcctl status >/dev/null
	scrape "$TMP/m$i"
	[ -z "$PREV" ] || monotonic "$PREV.c" "$TMP/m$i.c"
	check "$TMP/m$i" "after run $i"
	PREV=$TMP/m$i
done
pass "every counter series non-decreasing over 6 scrapes"
expect_eq "root's runs, in a series of their own" \
	"$(value "$PREV" 'pmc_region_count_total{comm="pmc-test-client",uid="0",region="pages"}')" 5
expect_eq "evicted" "$(value "$PREV" pmc_evicted_processes_total)" 4
expect_eq "processes kept" "$(value "$PREV" pmc_processes)" 2
# One retired aggregate per (uid, program, region): uid 65534's and root's.
expect_eq "retired regions" "$(value "$PREV" pmc_retired_regions)" 2
expect_eq "retired dropped" "$(value "$PREV" pmc_retired_dropped_total)" 0
# pmcctl still shows only the processes it keeps.
expect_eq "query: the last two processes" "$(pmcctl query --format json | jq '[.regions[].pid] | length')" 2

# A reset of one process clears its figures for pmcctl; the page keeps counting them.
pmcctl reset --pid "${pids[-1]}" >/dev/null
scrape "$TMP/r1"
monotonic "$PREV.c" "$TMP/r1.c"
check "$TMP/r1" "after pmcctl reset --pid"
PREV=$TMP/r1
# Then it ends, is forgotten, and still counts.
run_client "$TMP/c7" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 4 2
RUNS+=("4 2")
run_client "$TMP/c8" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 6 1
RUNS+=("6 1")
pmcctl status >/dev/null
scrape "$TMP/r2"
monotonic "$PREV.c" "$TMP/r2.c"
check "$TMP/r2" "after the reset process was forgotten"
expect_eq "evicted" "$(value "$TMP/r2" pmc_evicted_processes_total)" 6

# A reset of everything is a reset of every series: all restart from 0, as a restarted
# exporter's would (Prometheus's rate() takes that as a counter reset).
pmcctl reset >/dev/null
scrape "$TMP/r3"
expect_eq "runs after pmcctl reset" "$(value "$TMP/r3" "pmc_region_count_total{$L}")" 0
expect_eq "page-faults _sum after pmcctl reset" "$(value "$TMP/r3" "pmc_region_event_sum{$E}")" 0
expect_eq "buckets after pmcctl reset" "$(grep "^pmc_region_event_bucket{$E," "$TMP/r3")" \
	"pmc_region_event_bucket{$E,le=\"+Inf\"} 0"
RUNS=("7 2")
run_client "$TMP/c9" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 7 2
pmcctl status >/dev/null
scrape "$TMP/r4"
monotonic "$TMP/r3.c" "$TMP/r4.c"
check "$TMP/r4" "after pmcctl reset and one run"
daemon_alive
kill "$DAEMON_PID"
wait "$DAEMON_PID"
DAEMON_PID=

# The bound: --metrics-max-series 8 keeps 2 retired regions, 1 per user. Region "a" of
# the first process is kept; "b" of the second finds uid 65534's share taken by the very
# aggregate it joins: its figures are dropped and counted (its series leaves the page).
start_daemon --metrics 127.0.0.1:0 --metrics-max-series 8 --keep-exited 1
PORT=$(metrics_port)
for name in a b c; do
	run_client "$TMP/n$name" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named $name 1 1
	pmcctl status >/dev/null
done
scrape "$TMP/b"
expect_eq "evicted (bound)" "$(value "$TMP/b" pmc_evicted_processes_total)" 2
expect_eq "retired regions (bound)" "$(value "$TMP/b" pmc_retired_regions)" 1
expect_eq "retired dropped (bound)" "$(value "$TMP/b" pmc_retired_dropped_total)" 1
grep -q "uid 65534's retired figures on /metrics reached its share" "$TMP/daemon.log" ||
	fail "the bound was not logged: $(cat "$TMP/daemon.log")"
pass "bound logged: $(grep "retired figures on /metrics" "$TMP/daemon.log" | head -1)"
daemon_alive
kill "$DAEMON_PID"
wait "$DAEMON_PID"
DAEMON_PID=

# --state: the retired figures are saved with the processes, so that after a restart every
# counter series continues from what it held (not from the figures of the one process it
# kept); the next process forgotten joins the restored retired figures.
STATE=$TMP/state
start_daemon --metrics 127.0.0.1:0 --keep-exited 1 --state "$STATE"
PORT=$(metrics_port)
RUNS=()
for r in "3 2" "5 1" "2 3"; do
	read -r n k <<<"$r"
	run_client "$TMP/s$n" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages "$n" "$k"
	RUNS+=("$r")
	pmcctl status >/dev/null
done
scrape "$TMP/s1"
check "$TMP/s1" "before the restart"
expect_eq "retired regions (before the restart)" "$(value "$TMP/s1" pmc_retired_regions)" 1
daemon_alive
kill "$DAEMON_PID"
wait "$DAEMON_PID"
DAEMON_PID=
start_daemon --metrics 127.0.0.1:0 --keep-exited 1 --state "$STATE"
PORT=$(metrics_port)
scrape "$TMP/s2"
monotonic "$TMP/s1.c" "$TMP/s2.c"
check "$TMP/s2" "after the restart"
expect_eq "retired regions (after the restart)" "$(value "$TMP/s2" pmc_retired_regions)" 1
# Not one counter series changed: none lower, none higher, none gone.
diff <(sort "$TMP/s1.c") <(sort "$TMP/s2.c") >"$TMP/restart.diff" ||
	fail "counter series changed across the restart: $(cat "$TMP/restart.diff")"
pass "every counter series ($(wc -l <"$TMP/s2.c")) equal across the restart"
run_client "$TMP/s4" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 4 1
RUNS+=("4 1")
pmcctl status >/dev/null
scrape "$TMP/s3"
monotonic "$TMP/s2.c" "$TMP/s3.c"
check "$TMP/s3" "after the restored process was forgotten"
expect_eq "evicted (restored)" "$(value "$TMP/s3" pmc_evicted_processes_total)" 3
daemon_alive
