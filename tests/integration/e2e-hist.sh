#!/bin/bash
# pmcctl hist: a region's distribution from the daemon's histogram. Two processes of
# pmc-test-dist send region "d" known values (one sample of each of 1..1000, and of
# 500..600), as wall time and as page-faults: every bucket of the JSON holds exactly the
# values of both ranges within its bounds, the buckets add up to the runs, the table's rows
# too; --pid draws one process; a missing --region or an event not counted says why.
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_TEST_DIST_BIN:?set by ctest}"
cp "$PMC_TEST_DIST_BIN" "$TMP/bin/"
DIST=$TMP/bin/$(basename "$PMC_TEST_DIST_BIN")
chmod a+rx "$DIST"

start_daemon
as_user "$DIST" "$SOCK" d 1 1000 >"$TMP/a.out" || fail "pmc-test-dist 1..1000: $(cat "$TMP/a.out")"
as_user "$DIST" "$SOCK" d 500 600 >"$TMP/b.out" || fail "pmc-test-dist 500..600: $(cat "$TMP/b.out")"

# check_buckets FILE WANT_COUNT RANGES...: each bucket of FILE's JSON holds the values of the
# ranges ("LO-HI") within its bounds, and the buckets add up to WANT_COUNT.
check_buckets() {
	local file=$1 want=$2
	shift 2
	jq -r '.buckets[] | "\(.low) \(.high) \(.count)"' "$file" | awk -v want="$want" -v ranges="$*" '
		BEGIN { n = split(ranges, r, " ") }
		{
			want_n = 0
			for (i = 1; i <= n; i++) {
				split(r[i], b, "-")
				lo = $1 > b[1] ? $1 : b[1]; hi = $2 < b[2] ? $2 : b[2]
				if (hi >= lo) want_n += hi - lo + 1
			}
			if ($3 != want_n) { printf "bucket %s..%s: %s runs, want %s\n", $1, $2, $3, want_n; bad = 1 }
			sum += $3
		}
		END {
			if (sum != want) { printf "buckets add up to %s, want %s\n", sum, want; bad = 1 }
			exit bad
		}' || fail "the buckets of $file are not the values sent"
	expect_eq "runs in $(basename "$file")" "$(jq .count "$file")" "$want"
}

pmcctl hist --region d --format json >"$TMP/wall.json" || fail "pmcctl hist"
check_buckets "$TMP/wall.json" 1101 1-1000 500-600
expect_eq "processes drawn" "$(jq .regions "$TMP/wall.json")" 2
# The wall time as JSON and CSV name it (wall_ns) is the wall time, as "wall" is (issue 24).
pmcctl hist --region d --event wall_ns --format json | cmp - "$TMP/wall.json" ||
	fail "hist --event wall_ns is not the wall time"
pmcctl hist --region d --event wall --format json | cmp - "$TMP/wall.json" ||
	fail "hist --event wall is not the wall time"
pmcctl hist --region d --event page-faults --format json >"$TMP/pf.json" || fail "pmcctl hist --event"
check_buckets "$TMP/pf.json" 1101 1-1000 500-600
expect_eq "unit of page-faults" "$(jq -r .unit "$TMP/pf.json")" count

# What the runs are of: 2 regions (the same name) in 2 processes here; 2 regions of 1
# process below (issue 24: "runs in N processes" counted the regions).
expect_eq "processes in JSON" "$(jq .processes "$TMP/wall.json")" 2
pmcctl hist --region d | grep -q "^wall time of region 'd': 1101 runs of 1 region in 2 processes (" ||
	fail "hist heading: $(pmcctl hist --region d | head -1)"
run_client "$TMP/nested" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" nested 1 5
pmcctl hist --pid "$CLIENT_PID" --region outer --region inner >"$TMP/nested.txt" ||
	fail "hist of outer and inner"
head -1 "$TMP/nested.txt" | grep -q "^wall time of region 'outer', 'inner': 10 runs of 2 regions in 1 process (" ||
	fail "hist heading of one process: $(head -1 "$TMP/nested.txt")"
expect_eq "one process in JSON" \
	"$(pmcctl hist --pid "$CLIENT_PID" --region outer --region inner --format json | jq -c '[.regions, .region_names, .processes]')" '[2,2,1]'
pid=$(pmcctl query --region d --format json | jq '[.regions[].pid] | min')
pmcctl hist --region d --pid "$pid" --format json >"$TMP/one.json" || fail "pmcctl hist --pid"
check_buckets "$TMP/one.json" 1000 1-1000

# The table: one row a power of two (more than 24 buckets), the runs adding up.
pmcctl hist --region d >"$TMP/table" || fail "pmcctl hist (table)"
cat "$TMP/table"
expect_eq "runs in the table's rows" "$(awk '$1 ~ /ns$/ && $2 ~ /s$/ { n += $3 } END { print n }' "$TMP/table")" 1101
grep -q '^ *FROM  *TO  *RUNS' "$TMP/table" || fail "no header"
pmcctl hist --region d --format csv | awk -F, 'NR > 1 { n += $3 } END { exit n != 1101 }' ||
	fail "the CSV's counts do not add up to 1101"

pmcctl hist >"$TMP/err" 2>&1 && fail "hist without --region"
grep -q "needs --region" "$TMP/err" || fail "no reason: $(cat "$TMP/err")"
pmcctl hist --region d --event cycles >"$TMP/err" 2>&1 && fail "hist of an event not counted"
# The refusal lists the events counted, as flamegraph's does (issue 24).
grep -qx "pmcctl: event 'cycles' was not counted in the 2 regions selected: they have wall, page-faults" \
	"$TMP/err" || fail "no reason: $(cat "$TMP/err")"
pmcctl hist --region d --event page-faults:u >"$TMP/err" 2>&1 && fail "hist of page-faults:u"
grep -q "('page-faults' counted user and kernel mode, 'page-faults:u' is user mode only: --event page-faults draws it)$" \
	"$TMP/err" || fail "page-faults:u: $(cat "$TMP/err")"
pass "hist refuses what it cannot draw, saying why"
daemon_alive
