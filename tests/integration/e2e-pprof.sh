#!/bin/bash
# pprof output read by a real reader: go tool pprof (Debian's golang-go). A program with
# nested and recursive regions of known page faults (pmc-test-client tree): pprof's flat is
# each node's self count and its cum the node's inclusive one, exactly; the program is the
# root frame; labels pid, comm, uid; an older client's region is a single-frame stack;
# run --format pprof --output FILE writes the same. Skipped (77) where Go is missing.
. "$(dirname "$0")/../lib/lib.sh"
command -v go >/dev/null || skip "go is missing (apt-get install golang-go): go tool pprof reads the profile"
export HOME=$TMP GOCACHE=$TMP/gocache GOFLAGS=-mod=mod GOTOOLCHAIN=local
go tool pprof -h >/dev/null 2>&1 || skip "go tool pprof does not run here"
gopprof() { go tool pprof "$@" 2>"$TMP/pprof.err" || { cat "$TMP/pprof.err" >&2; fail "go tool pprof $*"; }; }

start_daemon
K=3
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" tree $K
pmcctl dump --pid "$CLIENT_PID" --format pprof >"$TMP/tree.pb.gz"
gzip -t "$TMP/tree.pb.gz" || fail "not gzip"
pass "dump --format pprof writes gzip"

gopprof -top -nodecount=1000 -sample_index=page-faults "$TMP/tree.pb.gz" >"$TMP/top"
cat "$TMP/top"
# flat and cum of a function: "flat flat% sum% cum cum% name"
col() { awk -v f="$1" -v c="$2" '$NF == f { print $c }' "$TMP/top"; }
# Self of a name: the sum of the self figures of its nodes; cum: the inclusive figure of
# its outermost nodes (pprof counts a recursive function once per stack).
selfsum() { sed -n 's/^self\.\([^=]*\)=\(.*\)/\1 \2/p' "$TMP/out" |
	awk -v f="$1" '{ n = split($1, a, ";"); if (a[n] == f) t += $2 } END { print t + 0 }'; }
inclouter() { sed -n 's/^incl\.\([^=]*\)=\(.*\)/\1 \2/p' "$TMP/out" |
	awk -v f="$1" '{ n = split($1, a, ";"); if (a[n] != f) next; for (i = 1; i < n; i++) if (a[i] == f) next; t += $2 }
		END { print t + 0 }'; }
names=$(sed -n 's/^incl\.\([^=]*\)=.*/\1/p' "$TMP/out" | tr ';' '\n' | sort -u)
[ -n "$names" ] || fail "pmc-test-client tree printed no truth"
for f in $names; do
	expect_faults "pprof flat of $f (self page faults)" "$(col "$f" 1)" "$(selfsum "$f")"
	expect_faults "pprof cum of $f (inclusive page faults)" "$(col "$f" 4)" "$(inclouter "$f")"
done
expect_faults "root frame: the program, cum = main's inclusive" "$(col pmc-test-client 4)" "$(kv incl.main "$TMP/out")"
expect_eq "root frame's flat" "$(col pmc-test-client 1)" 0

gopprof -top -nodecount=1000 -sample_index=calls "$TMP/tree.pb.gz" >"$TMP/top"
expect_eq "calls of main" "$(col main 1)" $K
gopprof -raw "$TMP/tree.pb.gz" >"$TMP/raw"
head -30 "$TMP/raw"
grep -Eq 'calls/count wall/nanoseconds(\[dflt\])? page-faults/count' "$TMP/raw" || fail "sample types: $(grep -m1 count "$TMP/raw")"
pass "sample types calls/count wall/nanoseconds page-faults/count"
grep -q "pid:\[$CLIENT_PID\]" "$TMP/raw" || fail "no pid label"
grep -q 'comm:\[pmc-test-client\]' "$TMP/raw" || fail "no comm label"
grep -q 'uid:\[65534\]' "$TMP/raw" || fail "no uid label"
pass "labels pid, comm, uid"

# An older client (no call paths): its region is one frame under the program.
"$PMC_TEST_RAW_BIN" "$SOCK" batch old-style >/dev/null
raw_pid=$(pmcctl query --region old-style --format json | jq '.regions[0].pid')
pmcctl dump --pid "$raw_pid" --format pprof >"$TMP/old.pb.gz"
gopprof -traces -sample_index=calls "$TMP/old.pb.gz" >"$TMP/old"
cat "$TMP/old"
grep -Eq 'call_path: +untracked' "$TMP/old" || fail "untracked label missing"
# the stack: 1 call of old-style, under the program
expect_eq "the untracked stack" "$(grep -A1 -E '^ +1 +old-style$' "$TMP/old" | awk 'NR == 2 { print $1 }')" pmc-test-raw
pass "a region without call paths is a single-frame stack"

# run --format pprof --output FILE
PMC_EVENTS=page-faults "$PMCCTL_BIN" --socket "$SOCK" run --format pprof --output "$TMP/run.pb.gz" -- \
	"$PMC_TEST_CLIENT_BIN" tree 2 >"$TMP/run-out"
gopprof -top -nodecount=1000 -nodefraction=0 -sample_index=page-faults "$TMP/run.pb.gz" >"$TMP/top"
cat "$TMP/top"
expect_faults "run: cum of main" "$(col main 4)" "$(kv incl.main "$TMP/run-out")"

# Bad uses: a terminal, a command without pprof.
if pmcctl status --format pprof >/dev/null 2>"$TMP/err"; then fail "status --format pprof accepted"; fi
grep -q "for 'query', 'dump' and 'run'" "$TMP/err" || fail "status --format pprof: $(cat "$TMP/err")"
pass "pprof refused for status"
