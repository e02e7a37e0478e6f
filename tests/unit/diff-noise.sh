#!/bin/bash
# pmcctl diff's noise test on files made by hand (no daemon, no perf): a change of the mean
# past --fail-above that the two runs' own spread explains stays within the noise (exit 0);
# a clean shift of the same runs is beyond it (exit 1); the rank test over the buckets, and
# Welch's z where the files carry none; an exact count that did not vary needs no model,
# one that varied goes through the rank test; several processes of one program add up.
set -euo pipefail
: "${PMCCTL_BIN:?set by ctest}"
command -v jq >/dev/null || { echo "SKIP: jq is missing"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_eq() { [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"; echo "ok - $1 = $3"; }

# file NAME EVENT BUCKETS: one region "work" of program "app" whose EVENT (wall or an event)
# has the buckets BUCKETS ([[low, high, count], ...]); its count, sum, mean, stddev, min,
# max, p50 and p99 computed from them (each run at its bucket's low).
file() {
	jq -n --arg ev "$2" --argjson b "$3" '
	  def stats: ($b | map(.[2]) | add) as $n | ($b | map(.[0] * .[2]) | add) as $s |
	    ($s / $n) as $m | ($b | map(.[2] * (.[0] - $m) * (.[0] - $m)) | add / $n | sqrt) as $sd |
	    {sum: $s, min: ($b | map(.[0]) | min), max: ($b | map(.[0]) | max), mean: $m,
	     stddev: $sd, p50: $b[0][0], p90: $b[-1][0], p99: $b[-1][0], scaled: false, buckets: $b};
	  ($b | map(.[2]) | add) as $n |
	  {format_version: 1, regions: [{name: "work", pid: 7, comm: "app", uid: 1000, count: $n,
	    wall_ns: (if $ev == "wall" then stats else {sum: $n, min: 1, max: 1, mean: 1, stddev: 0, p50: 1, p90: 1, p99: 1, scaled: false} end),
	    events: (if $ev == "wall" then {} else {($ev): stats} end), derived: {}}]}' >"$TMP/$1"
}
gate() { local rc=0; "$PMCCTL_BIN" diff "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?; echo $rc; }
field() { "$PMCCTL_BIN" diff "$1" "$2" --format json | jq -r --arg e "$3" ".regions[] | select(.event == \$e) | $4"; }

# Noise: half the runs at 100 ns, half at 200 (mean 150); then 9 and 11 (mean 155, +3.3 %).
file base wall '[[100,100,10],[200,200,10]]'
file noisy wall '[[100,100,9],[200,200,11]]'
expect_eq "+3.3 % within the noise: exit with --fail-above 1" "$(gate "$TMP/base" "$TMP/noisy" --event wall --fail-above 1)" 0
expect_eq "its test" "$(field "$TMP/base" "$TMP/noisy" wall .test)" rank
expect_eq "within the noise" "$(field "$TMP/base" "$TMP/noisy" wall .beyond_noise)" false
# The same 20 % slower: the runs overlap too much to tell (z 2.8).
file slower wall '[[120,120,10],[240,240,10]]'
expect_eq "20 % slower, as spread as that: exit" "$(gate "$TMP/base" "$TMP/slower" --event wall --fail-above 1)" 0
# A shift of runs that vary less: 100 or 110 ns, then every run 20 % slower.
file tight wall '[[100,100,10],[110,110,10]]'
file shifted wall '[[120,120,10],[132,132,10]]'
expect_eq "every run 20 % slower: exit" "$(gate "$TMP/tight" "$TMP/shifted" --event wall --fail-above 1)" 1
expect_eq "beyond the noise" "$(field "$TMP/tight" "$TMP/shifted" wall .beyond_noise)" true
expect_eq "the change" "$(field "$TMP/tight" "$TMP/shifted" wall .change_pct)" 20
expect_eq "within --fail-above 25: exit" "$(gate "$TMP/tight" "$TMP/shifted" --event wall --fail-above 25)" 0
# Without buckets: Welch's z, the same verdicts.
for f in base noisy tight shifted; do jq 'del(.. | .buckets?)' "$TMP/$f" >"$TMP/$f-nb"; done
expect_eq "no buckets: Welch" "$(field "$TMP/base-nb" "$TMP/noisy-nb" wall .test)" welch
expect_eq "no buckets, +3.3 %: exit" "$(gate "$TMP/base-nb" "$TMP/noisy-nb" --event wall --fail-above 1)" 0
expect_eq "no buckets, shifted: exit" "$(gate "$TMP/tight-nb" "$TMP/shifted-nb" --event wall --fail-above 1)" 1

# Exact counts: one run each, 10 then 11 page faults: any change of a count that never
# varied is real.
file pf10 page-faults '[[10,10,1]]'
file pf11 page-faults '[[11,11,1]]'
expect_eq "exact count, one run: exit" "$(gate "$TMP/pf10" "$TMP/pf11" --event page-faults --fail-above 5)" 1
expect_eq "its test" "$(field "$TMP/pf10" "$TMP/pf11" page-faults .test)" exact
expect_eq "exact and equal: exit" "$(gate "$TMP/pf10" "$TMP/pf10" --event page-faults --fail-above 0)" 0
# A count that varied goes through the rank test: 10 or 30 faults, then one more 30.
file pfv page-faults '[[10,10,5],[30,30,5]]'
file pfv2 page-faults '[[10,10,4],[30,30,6]]'
expect_eq "varying count: rank test" "$(field "$TMP/pfv" "$TMP/pfv2" page-faults .test)" rank
expect_eq "varying count, +10 %: exit" "$(gate "$TMP/pfv" "$TMP/pfv2" --event page-faults --fail-above 5)" 0
# --fail-below: a fall past it.
expect_eq "fewer faults: --fail-below 5" "$(gate "$TMP/pf11" "$TMP/pf10" --event page-faults --fail-below 5)" 1

# Two processes of one program add up: 10 runs at 100 and 10 at 200 in two files' halves.
jq '.regions += [.regions[0] | .pid = 8]' "$TMP/base" >"$TMP/two"
expect_eq "two processes: calls" "$(field "$TMP/base" "$TMP/two" wall .current.calls)" 40
expect_eq "two processes: mean unchanged" "$(field "$TMP/base" "$TMP/two" wall .change_pct)" 0
expect_eq "two processes: p99 from the merged buckets" "$(field "$TMP/base" "$TMP/two" wall .current.p99)" 200
