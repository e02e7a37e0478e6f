#!/bin/bash
# pmcctl diff as a CI gate, on files of real runs (pmcctl run --format json, pmcctl dump
# --format json): the same deterministic program twice exits 0; more page faults per call
# exit 1 with --fail-above, fewer with --fail-below; a region of one side only is listed
# as new or gone (exit 0); call paths are compared where both files have them; files that
# are not pmc's JSON, truncated, of a newer format, a pprof profile, too large: exit 2 with
# the file and the problem.
. "$(dirname "$0")/../lib/lib.sh"
# diff's verdicts rest on exact page-fault counts, which the sanitizers' shadow memory makes
# inexact (expect_faults): the plain build checks them.
[ -z "${PMC_SANITIZED:-}" ] || skip "page faults are not exact under sanitizers (their shadow memory); the plain build checks diff"
start_daemon
# figures FILE ARGS...: pmcctl run's JSON of pmc-test-client ARGS (run as uid 65534)
figures() {
	local out=$1
	shift
	as_user "$PMCCTL_BIN" run --events page-faults --format json --output "$TMP/u/out.json" -- "$PMC_TEST_CLIENT_BIN" "$@" >/dev/null ||
		fail "run $*"
	mv "$TMP/u/out.json" "$out"
}
mkdir -m 777 "$TMP/u"
gate() { local rc=0; pmcctl diff "$@" >"$TMP/diff.out" 2>"$TMP/diff.err" || rc=$?; echo $rc; }

figures "$TMP/base.json" nested 4 20
figures "$TMP/same.json" nested 4 20
figures "$TMP/grown.json" nested 5 20
figures "$TMP/shrunk.json" nested 3 20
jq -e '.regions[0].events["page-faults"].buckets | length >= 1' "$TMP/base.json" >/dev/null ||
	fail "run --format json writes no buckets"
pass "run's JSON carries the histograms"

expect_eq "same program: exit" "$(gate "$TMP/base.json" "$TMP/same.json" --event page-faults --fail-above 5)" 0
cat "$TMP/diff.out"
pmcctl diff "$TMP/base.json" "$TMP/same.json" --format json >"$TMP/same-diff.json"
expect_eq "same: inner page faults change" "$(jq '.regions[] | select(.region == "pmc-test-client;inner" and .event == "page-faults") | .change_pct' "$TMP/same-diff.json")" 0
expect_eq "same: not beyond the noise" "$(jq '[.regions[] | select(.event == "page-faults") | .beyond_noise] | any' "$TMP/same-diff.json")" false

expect_eq "grown 25 %: exit with --fail-above 5" "$(gate "$TMP/base.json" "$TMP/grown.json" --event page-faults --fail-above 5)" 1
cat "$TMP/diff.out"
grep -q FAIL "$TMP/diff.out" || fail "the table marks no row FAIL"
expect_eq "grown 25 %: exit with --fail-above 30" "$(gate "$TMP/base.json" "$TMP/grown.json" --event page-faults --fail-above 30)" 0
pmcctl diff "$TMP/base.json" "$TMP/grown.json" --format json >"$TMP/grown-diff.json"
expect_eq "grown: inner's change" "$(jq '.regions[] | select(.region == "pmc-test-client;inner" and .event == "page-faults") | .change_pct' "$TMP/grown-diff.json")" 25
expect_eq "grown: inner's mean before, after" "$(jq -c '.regions[] | select(.region == "pmc-test-client;inner" and .event == "page-faults") | [.base.mean, .current.mean]' "$TMP/grown-diff.json")" "[4,5]"
expect_eq "grown: beyond the noise, exact" "$(jq -r '.regions[] | select(.region == "pmc-test-client;inner" and .event == "page-faults") | "\(.beyond_noise) \(.test)"' "$TMP/grown-diff.json")" "true exact"

expect_eq "shrunk: exit with --fail-above" "$(gate "$TMP/base.json" "$TMP/shrunk.json" --event page-faults --fail-above 5)" 0
expect_eq "shrunk 25 %: exit with --fail-below 5" "$(gate "$TMP/base.json" "$TMP/shrunk.json" --event page-faults --fail-below 5)" 1

# A new region and a gone one.
figures "$TMP/other.json" named extra 1 3
expect_eq "new and gone regions: exit" "$(gate "$TMP/base.json" "$TMP/other.json" --event page-faults --fail-above 5)" 2
grep -q "no region of both files counted event 'page-faults'" "$TMP/diff.err" || fail "nothing compared: $(cat "$TMP/diff.err")"
pmcctl diff "$TMP/base.json" "$TMP/other.json" --format csv >"$TMP/other.csv"
cat "$TMP/other.csv"
expect_eq "new region" "$(grep -c '^new,pmc-test-client;extra,' "$TMP/other.csv")" 1
expect_eq "gone region" "$(grep -c '^gone,pmc-test-client;inner,' "$TMP/other.csv")" 1
jq '.regions += input.regions' "$TMP/base.json" "$TMP/other.json" >"$TMP/both.json"
expect_eq "a new region beside unchanged ones: exit" "$(gate "$TMP/base.json" "$TMP/both.json" --event page-faults --fail-above 5)" 0
grep -q 'extra  *new' "$TMP/diff.out" || fail "table: extra not new: $(cat "$TMP/diff.out")"
pass "table lists the new region"

# A derived ratio (no PMU here: written into the files): ipc 2.0 -> 1.5 is a fall of 25 %.
jq '.regions[].derived.ipc = 2.0' "$TMP/base.json" >"$TMP/ipc-base.json"
jq '.regions[].derived.ipc = 1.5' "$TMP/same.json" >"$TMP/ipc-low.json"
expect_eq "ipc 25 % lower: exit with --fail-below 10" "$(gate "$TMP/ipc-base.json" "$TMP/ipc-low.json" --event ipc --fail-below 10)" 1
expect_eq "ipc 25 % lower: exit with --fail-below 30" "$(gate "$TMP/ipc-base.json" "$TMP/ipc-low.json" --event ipc --fail-below 30)" 0
expect_eq "ipc 25 % lower: exit with --fail-above 5" "$(gate "$TMP/ipc-base.json" "$TMP/ipc-low.json" --event ipc --fail-above 5)" 0

# Call paths: two dumps of the tree program, compared path by path.
run_client "$TMP/t1" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" tree 3
pmcctl dump --pid "$CLIENT_PID" --format json >"$TMP/d1.json"
run_client "$TMP/t2" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" tree 3
pmcctl dump --pid "$CLIENT_PID" --format json >"$TMP/d2.json"
expect_eq "dumps of the same program: exit" "$(gate "$TMP/d1.json" "$TMP/d2.json" --event page-faults --fail-above 1 --format json)" 0
expect_eq "compared by call path" "$(jq -r .by "$TMP/diff.out")" call_path
expect_eq "the recursion's paths" "$(jq -r '[.regions[] | select(.event == "page-faults") | .region] | map(select(startswith("pmc-test-client;main;walk"))) | length' "$TMP/diff.out")" 3
# a dump against a run's file (no call paths): by name
expect_eq "dump against run: by name" "$(pmcctl diff "$TMP/d1.json" "$TMP/base.json" --format json | jq -r .by)" name

# Bad input: exit 2, the file named with the problem.
bad() {
	local what=$1 file=$2 words=$3
	expect_eq "$what: exit" "$(gate "$TMP/base.json" "$file")" 2
	grep -q "pmcctl: diff: $file: .*$words" "$TMP/diff.err" || fail "$what: $(cat "$TMP/diff.err")"
	pass "$what: says $words"
}
echo 'regions: no' >"$TMP/text"
bad "not JSON" "$TMP/text" "not valid JSON"
head -c 300 "$TMP/base.json" >"$TMP/truncated"
bad "truncated" "$TMP/truncated" "not valid JSON"
echo '{"items": []}' >"$TMP/other-json"
bad "JSON of something else" "$TMP/other-json" "no \"regions\" array"
jq '.format_version = 99' "$TMP/base.json" >"$TMP/newer"
bad "newer format" "$TMP/newer" "newer pmcctl (format version 99"
jq '.regions[0].count = "x"' "$TMP/base.json" >"$TMP/badcount"
bad "a region without its count" "$TMP/badcount" "without name, comm, count"
pmcctl dump --format pprof >"$TMP/prof.pb.gz"
bad "a pprof profile" "$TMP/prof.pb.gz" "gzip-compressed"
truncate -s 2G "$TMP/huge"
bad "huge" "$TMP/huge" "over the 1073741824"
bad "missing" "$TMP/none" "No such file"
expect_eq "one file: usage" "$(gate "$TMP/base.json")" 2
expect_eq "--fail-above without --event: usage" "$(gate "$TMP/base.json" "$TMP/same.json" --fail-above 5)" 2
