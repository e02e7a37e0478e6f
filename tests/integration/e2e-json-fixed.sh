#!/bin/bash
# pmcctl's outputs of a made-up reply, byte for byte as pmcctl printed them before it wrote
# JSON with its own digits and read diff's files without jansson (issue 34): tests/data/
# json-fixed/ holds what pmcctl at commit fa25b6b printed for each command below against
# `pmc-fake-daemon fixed SOCK 1` (and 2, other figures), query, dump and query --tree in
# JSON, CSV and tables, and diff of those dumps (also one with its keys sorted and on one
# line, as jq -S -c writes it), with the exit status of each. PMC_JSON_FIXED_WRITE=1 writes
# the files instead of comparing (only for an output meant to change).
. "$(dirname "$0")/../lib/lib.sh"
DATA=$(cd "$(dirname "$0")/../data/json-fixed" 2>/dev/null && pwd) ||
	{ [ -n "${PMC_JSON_FIXED_WRITE:-}" ] && mkdir -p "$(dirname "$0")/../data/json-fixed" &&
		DATA=$(cd "$(dirname "$0")/../data/json-fixed" && pwd); } || fail "no tests/data/json-fixed"
start_helper "$TMP/fake1.out" listening "$PMC_FAKE_DAEMON_BIN" fixed "$TMP/f1.sock" 1
start_helper "$TMP/fake2.out" listening "$PMC_FAKE_DAEMON_BIN" fixed "$TMP/f2.sock" 2

# out NAME CMD...: CMD's stdout, then a line with its exit status, in $TMP/out/NAME
mkdir "$TMP/out"
out() {
	local name=$1 rc=0
	shift
	"$@" >"$TMP/out/$name" 2>/dev/null || rc=$?
	echo "exit $rc" >>"$TMP/out/$name"
}
p1() { "$PMCCTL_BIN" --socket "$TMP/f1.sock" "$@"; }
p2() { "$PMCCTL_BIN" --socket "$TMP/f2.sock" "$@"; }
for f in json csv table; do
	out "query.$f" p1 query --format "$f"
	out "tree.$f" p1 query --tree --format "$f"
done
out dump.table p1 dump
p1 dump --format json >"$TMP/dump1.json"
p2 dump --format json >"$TMP/dump2.json"
jq -S -c . "$TMP/dump2.json" >"$TMP/dump2-sorted.json"
out dump1.json cat "$TMP/dump1.json"
out dump2.json cat "$TMP/dump2.json"
for f in json csv table; do
	out "diff.$f" "$PMCCTL_BIN" diff "$TMP/dump1.json" "$TMP/dump2.json" --format "$f"
	out "diff-same.$f" "$PMCCTL_BIN" diff "$TMP/dump1.json" "$TMP/dump1.json" --format "$f"
	out "diff-sorted.$f" "$PMCCTL_BIN" diff "$TMP/dump1.json" "$TMP/dump2-sorted.json" --format "$f"
done
out diff-gate.table "$PMCCTL_BIN" diff "$TMP/dump1.json" "$TMP/dump2.json" --event cycles \
	--fail-above 1
out diff-gate-below.json "$PMCCTL_BIN" diff "$TMP/dump2.json" "$TMP/dump1.json" --format json \
	--event page-faults --fail-below 1

if [ -n "${PMC_JSON_FIXED_WRITE:-}" ]; then
	cp "$TMP"/out/* "$DATA/"
	pass "wrote $(ls "$TMP/out" | wc -l) files to $DATA"
	exit 0
fi
n=0
for f in "$TMP"/out/*; do
	name=$(basename "$f")
	[ -e "$DATA/$name" ] || fail "$name: no tests/data/json-fixed/$name"
	cmp -s "$f" "$DATA/$name" || fail "$name differs from what pmcctl printed before: $(diff "$DATA/$name" "$f" | head -n 20)"
	n=$((n + 1))
done
[ "$n" = "$(ls "$DATA" | wc -l)" ] || fail "$n outputs made, $(ls "$DATA" | wc -l) files in tests/data/json-fixed"
pass "$n outputs of query, dump, query --tree and diff byte for byte as before"
