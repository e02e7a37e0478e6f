#!/bin/bash
# Queries past one datagram: 25 programs (copies of pmc-test-raw under 25 names) of 4,000
# regions each, and a second process of the first program: 104,000 (process, region)
# aggregates of one run each. `pmcctl query` asks for its reply in parts (Query.stream) and
# prints each as it arrives: JSON, CSV and table list every region once, with exact totals;
# a query naming one region of one process is answered as before. Before, every one of these
# failed ("100000 regions do not fit in one reply"). Prints pmcctl's time, peak RSS and the
# daemon's RSS before and after (no thresholds).
. "$(dirname "$0")/../lib/lib.sh"

PROGRAMS=25
REGIONS=4000
TOTAL=$(((PROGRAMS + 1) * REGIONS))

start_daemon --max-regions-per-user 200000 --keep-exited 26
load_programs $PROGRAMS $REGIONS

rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
rss0=$(rss_kb "$DAEMON_PID")
# timed FILE ARGS...: pmcctl ARGS > FILE, with its time and peak RSS noted
timed() {
	local out=$1
	shift
	/usr/bin/time -f "%e %M" -o "$TMP/time" "$PMCCTL_BIN" --socket "$SOCK" "$@" >"$out" ||
		fail "pmcctl $* failed"
	read -r secs peak <"$TMP/time"
	echo "note: pmcctl $*: $(stat -c %s "$out") bytes in $secs s, pmcctl peak RSS $peak kB," \
		"daemon RSS $rss0 kB before, $(rss_kb "$DAEMON_PID") kB after"
}

timed "$TMP/q.json" query --format json
expect_eq "regions in the JSON" "$(jq '.regions | length' "$TMP/q.json")" $TOTAL
expect_eq "runs in the JSON" "$(jq '[.regions[].count] | add' "$TMP/q.json")" $TOTAL
expect_eq "distinct (pid, region) in the JSON" \
	"$(jq -r '.regions[] | "\(.pid) \(.name)"' "$TMP/q.json" | sort -u | wc -l)" $TOTAL
expect_eq "programs in the JSON" "$(jq -r '.regions[].comm' "$TMP/q.json" | sort -u | wc -l)" $PROGRAMS

timed "$TMP/d.csv" dump --format csv
expect_eq "wall-clock rows in the CSV" "$(awk -F, '$5 == "wall_ns"' "$TMP/d.csv" | wc -l)" $TOTAL
expect_eq "runs in the CSV" "$(awk -F, '$5 == "wall_ns" { n += $4 } END { print n }' "$TMP/d.csv")" $TOTAL

timed "$TMP/q.txt" query
expect_eq "header lines in the table" "$(grep -c '^ *PID  *COMM' "$TMP/q.txt")" 1
expect_eq "wall-clock rows in the table" "$(grep -c ' wall ' "$TMP/q.txt")" $TOTAL

# One region of one process: one part, as before.
pid=$(jq -r '.regions[0].pid' "$TMP/q.json")
name=$(jq -r '.regions[0].name' "$TMP/q.json")
pmcctl query --pid "$pid" --region "$name" --format json >"$TMP/one.json"
expect_eq "the one region asked for" "$(jq -r '.regions | length' "$TMP/one.json")" 1

# A client that asks for one reply (no Query.stream) is told why it cannot have it.
as_user "$PMC_TEST_RAW_BIN" "$SOCK" query-whole >"$TMP/whole.out" 2>&1 || fail "a whole reply of $TOTAL regions: $(cat "$TMP/whole.out")"
grep -q "do not fit in one reply" "$TMP/whole.out" || fail "no reason given: $(cat "$TMP/whole.out")"

# A reader that stalls after the first part: the daemon waits for it and serves the others
# meanwhile (status, a client's samples); the processes it forgets meanwhile (--keep-exited
# 26: 5 more that end push out 5 of the 26 listed) are left out, the rest streamed.
as_user "$PMC_TEST_RAW_BIN" "$SOCK" query-slow 3 >"$TMP/slow.out" 2>&1 &
slow=$!
for _ in $(seq 600); do grep -q "first part" "$TMP/slow.out" && break; sleep 0.1; done
grep -q "first part" "$TMP/slow.out" || fail "no first part in 60 s: $(cat "$TMP/slow.out")"
expect_eq "status while a reply waits for its reader" "$(pmcctl status --format json | jq .regions)" $TOTAL
for i in 1 2 3 4 5; do
	as_user "$PMC_TEST_RAW_BIN" "$SOCK" regions 1 0 >/dev/null || fail "a client while a reply waits"
done
expect_eq "processes after 5 more ended (--keep-exited 26)" "$(pmcctl status --format json | jq .processes)" 26
wait $slow || fail "the stalled reader: $(cat "$TMP/slow.out")"
got=$(sed -n 's/^regions=//p' "$TMP/slow.out")
[ "$got" -ge $((TOTAL - 5 * REGIONS)) ] && [ "$got" -le $((TOTAL - 4 * REGIONS)) ] ||
	fail "the stalled reader got $got regions, want those of the 21 or 22 processes left"
pass "the stalled reader got $got regions in $(sed -n 's/^parts=//p' "$TMP/slow.out") parts"
daemon_alive
