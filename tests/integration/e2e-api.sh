#!/bin/bash
# The API as an application writes it, against a real daemon, each figure checked in the
# daemon's query output against the program's ground truth (count, page faults):
# PMC_SCOPE leaves break and continue to the application's loop and ends its region by
# any way out of its block; PMC_REGION's break leaves only its own block (as documented);
# a name that changes at run time at one call site is counted under each of its values;
# pmc_region() interns 4095 names from 4 threads at once; pmc_enabled() says 1 only
# where the calling thread counts; in C++, an exception thrown through each form ends its
# region exactly once.
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_TEST_API_BIN:?set by ctest}"
cp "$PMC_TEST_API_BIN" "$TMP/bin/"
API=$TMP/bin/$(basename "$PMC_TEST_API_BIN")
CXX_API=
if [ -n "${PMC_TEST_API_CXX_BIN:-}" ]; then
	cp "$PMC_TEST_API_CXX_BIN" "$TMP/bin/"
	CXX_API=$TMP/bin/$(basename "$PMC_TEST_API_CXX_BIN")
fi
chmod -R a+rX "$TMP/bin"

# check_regions OUT NAME...: each region of the client's last run has the count and the
# page faults its output (NAME_count=, NAME_page_faults=) says it had. With
# AT_LEAST_FAULTS=1, at least those page faults: a sanitized build's exceptions fault in
# shadow memory of their own inside the regions.
check_regions() {
	local out=$1 r j got want
	shift
	for r in "$@"; do
		j=$(region_json "$r" "$CLIENT_PID") || fail "region '$r' is not in the daemon's figures"
		expect_eq "$r count" "$(jq .count <<<"$j")" "$(kv "${r}_count" "$out")"
		got=$(jq '.events["page-faults"].sum' <<<"$j")
		want=$(kv "${r}_page_faults" "$out")
		if [ -n "${AT_LEAST_FAULTS:-}" ]; then
			[ "$got" -ge "$want" ] || fail "$r page-faults: got $got, want at least $want"
			pass "$r page-faults = $got (want at least $want)"
		else
			expect_faults "$r page-faults" "$got" "$want"
		fi
	done
}

start_daemon

# Control flow: what plain C prints, and the regions' spans.
run_client "$TMP/flow" env PMC_EVENTS=page-faults "$API" flow 10
expect_eq "PMC_SCOPE in a loop, break at 1" "$(kv scope_break "$TMP/flow")" "0 1"
expect_eq "PMC_SCOPE in a loop, continue when odd" "$(kv scope_continue "$TMP/flow")" "0 + 1 2 + 3"
expect_eq "PMC_REGION in a loop, break at 1 (leaves its block only)" \
	"$(kv region_break "$TMP/flow")" "0 1 2 3 4"
check_regions "$TMP/flow" scope-break scope-continue region-break two-outer two-inner \
	scope-return scope-goto nest-outer nest-inner

# Names that change at run time at one call site, beside a literal.
run_client "$TMP/names" env PMC_EVENTS=page-faults "$API" names 20
check_regions "$TMP/names" dyn-a dyn-b sdyn-a sdyn-b dyn-literal
n=$(pmcctl query --pid "$CLIENT_PID" --format json | jq '.regions | length')
expect_eq "regions of the names run" "$n" 5

# Interning: one id per name whatever the threads, the table's end, truncation.
run_client "$TMP/intern" "$API" intern
grep '^intern:' "$TMP/intern" >&2 || true
expect_eq "names interned wrong" "$(kv intern_bad "$TMP/intern")" 0
expect_eq "a 4096th name gets an id" "$(kv intern_4096th "$TMP/intern")" 1
expect_eq "a 299-byte name is refused" "$(kv intern_long "$TMP/intern")" 0
expect_eq "its first 127 bytes are a name" "$(kv intern_prefix_named "$TMP/intern")" 1
expect_eq "the empty name" "$(kv intern_empty "$TMP/intern")" 0
expect_eq "no name" "$(kv intern_null "$TMP/intern")" 0

# pmc_enabled(): 1 only where the calling thread counts.
# enabled_is WHAT OUT WANT: before any region, inside one, on a second thread
enabled_is() {
	expect_eq "$1: pmc_enabled() before any region, inside one, on another thread" \
		"$(kv enabled_before "$2") $(kv enabled_inside "$2") $(kv enabled_thread "$2")" "$3"
}
run_client "$TMP/en" env PMC_EVENTS=page-faults "$API" enabled
enabled_is "a good event" "$TMP/en" "1 1 1"
run_client "$TMP/en" env PMC_EVENTS=no-such-event "$API" enabled
enabled_is "an unknown event" "$TMP/en" "0 0 0"
grep -q "unknown event 'no-such-event'" "$TMP/en.err" || fail "no warning: $(cat "$TMP/en.err")"
run_client "$TMP/en" env PMC_DISABLE=1 PMC_EVENTS=page-faults "$API" enabled
enabled_is "PMC_DISABLE=1" "$TMP/en" "0 0 0"
run_client "$TMP/en" env PMC_SOCKET="$TMP/nobody-listens.sock" "$API" enabled
enabled_is "no daemon" "$TMP/en" "0 0 0"

if [ -n "$CXX_API" ]; then
	run_client "$TMP/cxx-flow" env PMC_EVENTS=page-faults "$CXX_API" flow
	expect_eq "C++: PMC_SCOPE in a loop, break at 1" "$(kv cxx_scope_break "$TMP/cxx-flow")" "0 1"
	expect_eq "C++: PMC_REGION in a loop, break at 1" \
		"$(kv cxx_region_break "$TMP/cxx-flow")" "0 1 2 3 4"
	check_regions "$TMP/cxx-flow" cxx-scope-break cxx-region-break
	K=20
	run_client "$TMP/cxx" env PMC_EVENTS=page-faults "$CXX_API" throw $K
	expect_eq "C++: exceptions caught" "$(kv caught "$TMP/cxx")" $((5 * K))
	AT_LEAST_FAULTS=${PMC_SANITIZED:-} check_regions "$TMP/cxx" cxx-macro cxx-scope cxx-inner \
		cxx-outer cxx-twice cxx-region cxx-dyn-a cxx-dyn-b
	# Ended once: the outer sample of cxx-twice holds its 3 pages (2 if ended twice).
	[ -n "${PMC_SANITIZED:-}" ] || expect_eq "cxx-twice: largest sample" \
		"$(region_json cxx-twice "$CLIENT_PID" | jq '.events["page-faults"].max')" 3
else
	echo "SKIP (part): no C++ compiler at configure time: the C++ API is not run"
fi

# Per thread: with --max-threads 1 the main thread counts, a second one is refused.
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "pmcdaemon exited with status $? on SIGTERM"
DAEMON_PID=
start_daemon --max-threads 1
run_client "$TMP/en" env PMC_EVENTS=page-faults "$API" enabled
enabled_is "--max-threads 1" "$TMP/en" "1 1 0"
daemon_alive
