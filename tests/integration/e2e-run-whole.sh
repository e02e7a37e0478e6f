#!/bin/bash
# pmcctl run counts the whole of a command with no pmc call in it (the daemon opens inherited
# counters on the command before its exec, OpenCommand): its threads and the processes it
# starts, exact (N fresh pages written = N page faults, with ASLR off so that the program's
# own start-up faults are the same every run); -r N repeats it; a bad event stops pmcctl
# before the command runs (exit 2, did-you-mean); a private daemon that dies does not change
# the exit status.
BUILD_PMCCTL=${PMCCTL_BIN:-}
. "$(dirname "$0")/../lib/lib.sh"
[ -z "${PMC_SANITIZED:-}" ] || skip "page faults are not exact under sanitizers (their shadow memory: 3,375 for 3,000); the plain build checks the whole-program figures"
start_daemon
cp "$PMC_WHOLE_APP_BIN" "$TMP/bin/" && chmod a+rx "$TMP/bin/pmc-whole-app"
APP=$TMP/bin/pmc-whole-app
# setarch -R: no address-space randomization for pmcctl and the command it starts.
run_as_user() { as_user setarch "$(uname -m)" -R "$PMCCTL_BIN" run "$@"; }
faults() { # ARGS...: the whole program's page faults of pmc-whole-app ARGS
	run_as_user --events page-faults --format json -- "$APP" "$@" 2>"$TMP/err" |
		jq '.whole_program.events["page-faults"].value' || fail "run $*: $(cat "$TMP/err")"
}

# --- the whole program, exact ---
base=$(faults 0)
[ "$base" -gt 0 ] || fail "no whole-program page faults: $base ($(cat "$TMP/err"))"
expect_eq "3000 fresh pages: 3000 page faults more" $(($(faults 3000) - base)) 3000
base2=$(faults 0 2)
expect_eq "2 processes x 1000 pages: the child process counted too" $(($(faults 1000 2) - base2)) 2000
base4=$(faults 0 1 4)
expect_eq "4 threads x 1000 pages: every thread counted" $(($(faults 1000 1 4) - base4)) 4000

# The table: a "(whole program)" row for each event, and the wall time; the program has
# no region, and says so.
run_as_user --events page-faults,task-clock -- "$APP" 100 >"$TMP/t" 2>"$TMP/err" || fail "table: $(cat "$TMP/err")"
grep -q "recorded no regions (no libpmcclient region ran in them)" "$TMP/t" || fail "table: $(cat "$TMP/t")"
expect_eq "table: page-faults row" "$(awk '$1 == "(whole" && $3 == "page-faults" {print $4}' "$TMP/t")" $((base + 100))
expect_eq "table: task-clock row in ns" "$(awk '$1 == "(whole" && $3 == "task-clock" {print $5}' "$TMP/t")" ns
expect_eq "table: wall row" "$(awk '$1 == "(whole" && $3 == "wall" {print $5}' "$TMP/t")" ns

# -r N: N runs, their mean and spread (none: the same count each run).
run_as_user -r 3 --events page-faults --format json -- "$APP" 500 >"$TMP/j" 2>"$TMP/err" || fail "-r 3: $(cat "$TMP/err")"
expect_eq "-r 3: runs" "$(jq .whole_program.runs "$TMP/j")" 3
expect_eq "-r 3: mean" "$(jq '.whole_program.events["page-faults"].value' "$TMP/j")" $((base + 500))
expect_eq "-r 3: spread" "$(jq '.whole_program.events["page-faults"].stddev' "$TMP/j")" 0
expect_eq "-r 3: min = max" "$(jq '.whole_program.events["page-faults"] | .min == .max' "$TMP/j")" true
run_as_user -r 3 --events page-faults -- "$APP" 500 >"$TMP/t" 2>&1 || fail "-r 3 table"
grep -q "the mean of 3 runs" "$TMP/t" || fail "-r 3 table: $(cat "$TMP/t")"
set +e
run_as_user -r 0 -- true 2>"$TMP/err"
rc=$?
set -e
expect_eq "-r 0 is a usage error" $rc 2

# --- bad events: found before the command runs ---
for ev in page-fualts page-faults,cs,bogus-event; do
	set +e
	run_as_user --events "$ev" -- touch "$TMP/ran" >"$TMP/t" 2>"$TMP/err"
	rc=$?
	set -e
	expect_eq "--events $ev: exit 2" $rc 2
	[ -e "$TMP/ran" ] && fail "--events $ev: the command ran"
	grep -q "unknown event" "$TMP/err" || fail "--events $ev: $(cat "$TMP/err")"
	pass "--events $ev: $(cat "$TMP/err")"
done
grep -q "did you mean 'page-faults'" <(run_as_user --events page-fualts -- true 2>&1) || fail "no did-you-mean"
pass "did you mean 'page-faults'"
if ! "$PMCCTL_BIN" --socket "$SOCK" events --format json | jq -e .hardware_pmu >/dev/null; then
	set +e
	run_as_user --events cycles -- touch "$TMP/ran" >"$TMP/t" 2>"$TMP/err"
	rc=$?
	set -e
	expect_eq "--events cycles without a PMU: exit 2" $rc 2
	[ -e "$TMP/ran" ] && fail "--events cycles: the command ran"
	pass "--events cycles: $(cat "$TMP/err")"
fi

# --- a private daemon (none at the socket) ---
NONE=$TMP/none.sock
"$BUILD_PMCCTL" --socket "$NONE" run --events page-faults --format json -- "$APP" 200 \
	>"$TMP/j" 2>"$TMP/err" || fail "private run exits $?: $(cat "$TMP/err")"
expect_eq "private: the whole program counted" \
	"$(jq '.whole_program.events["page-faults"].value > 200' "$TMP/j")" true
# It dies while the command runs: the command's exit status still, and its figures.
set +e
"$BUILD_PMCCTL" --socket "$NONE" run --events page-faults -- sh -c \
	'pkill -f -- "--socket $PMC_SOCKET"; sleep 0.2; exit 0' >"$TMP/t" 2>"$TMP/err"
rc=$?
set -e
grep -q "the private pmcdaemon ended while the command ran" "$TMP/err" || fail "no word of it: $(cat "$TMP/err")"
expect_eq "private daemon killed: the command's exit status" $rc 0
grep -q "^(whole program)  *page-faults" "$TMP/t" || fail "whole figures: $(cat "$TMP/t")"
daemon_alive
