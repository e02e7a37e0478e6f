#!/bin/bash
# pmcctl run of a shell loop of short-lived programs (issue 24: "18 to 20 of 20 processes
# captured, and nothing said"). The command's processes are found by the run's tag, whatever
# their life: all 20 of 20, each time. Those whose figures the daemon dropped before pmcctl
# asked (ended, past --keep-exited-per-user) are counted by that tag and said, in the table,
# in JSON and on stderr; a private daemon keeps the figures of 10,000 ended processes.
BUILD_PMCCTL=${PMCCTL_BIN:-}
. "$(dirname "$0")/../lib/lib.sh"
start_daemon --keep-exited-per-user 25
run_as_user() { as_user "$PMCCTL_BIN" run "$@"; }
loop() { echo "for i in \$(seq $1); do $PMC_TEST_CLIENT_BIN pages 1 1 >/dev/null; done"; }
procs() { jq '[.regions[] | select(.name == "pages") | .pid] | unique | length' "$1"; }

for k in 1 2 3; do
	run_as_user --events page-faults --format json -- sh -c "$(loop 20)" >"$TMP/j" 2>"$TMP/err" ||
		fail "run of 20 programs: $(cat "$TMP/err")"
	expect_eq "20 programs of a few ms, run $k: every process" "$(procs "$TMP/j")" 20
	expect_eq "20 programs, run $k: none dropped" "$(jq .evicted_processes "$TMP/j")" 0
	pf=$(jq '[.regions[] | select(.name == "pages") | .events["page-faults"].sum] | add' "$TMP/j")
	if [ -z "${PMC_SANITIZED:-}" ]; then
		expect_eq "20 programs, run $k: their page faults" "$pf" 20
	else
		# The sanitizers' shadow memory faults pages of its own inside regions, in each of
		# the 20 processes; the plain build checks the figure exactly.
		[ "$pf" -ge 20 ] || fail "20 programs, run $k: their page faults: $pf, under 20"
		pass "20 programs, run $k: their page faults = $pf (20 and the sanitizers' own)"
	fi
done

# 30 ended processes of one user, over --keep-exited-per-user 25: the daemon keeps 25 (the
# others' of the runs above went first), and run says that 5 are not listed.
run_as_user --events page-faults --format json -- sh -c "$(loop 30)" >"$TMP/j" 2>"$TMP/err" ||
	fail "run of 30 programs: $(cat "$TMP/err")"
expect_eq "30 programs, 25 kept: listed" "$(procs "$TMP/j")" 25
expect_eq "30 programs, 25 kept: dropped, in JSON" "$(jq .evicted_processes "$TMP/j")" 5
grep -qx "pmcctl: run: 5 of the command's processes ended and pmcdaemon dropped their figures before pmcctl could read them (over its --keep-exited-per-user or --keep-exited): they are not listed" \
	"$TMP/err" || fail "no word on stderr of the 5 dropped: $(cat "$TMP/err")"
run_as_user --events page-faults -- sh -c "$(loop 30)" >"$TMP/t" 2>"$TMP/err" || fail "table run"
grep -q "^5 of the command's processes ended and pmcdaemon dropped their figures" "$TMP/t" ||
	fail "no word in the table of the 5 dropped: $(cat "$TMP/t")"
pass "5 dropped processes said in JSON, on stderr and in the table"

# A private daemon (none at the socket) keeps them all.
"$BUILD_PMCCTL" --socket "$TMP/none.sock" run --events page-faults --format json -- sh -c "$(loop 130)" \
	>"$TMP/j" 2>"$TMP/err" || fail "private run of 130 programs: $(cat "$TMP/err")"
expect_eq "130 programs, a private daemon: every process" "$(procs "$TMP/j")" 130
expect_eq "130 programs, a private daemon: none dropped" "$(jq .evicted_processes "$TMP/j")" 0
daemon_alive
