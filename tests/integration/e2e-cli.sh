#!/bin/bash
# pmcctl: every command in every format, filters, reset, exit codes.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
run_client "$TMP/a" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 2 10
A=$CLIENT_PID
run_client "$TMP/b" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 3 10
B=$CLIENT_PID

expect_eq "query all" "$(pmcctl query --format json | jq '[.regions[] | select(.name=="pages")] | length')" 2
expect_eq "--pid filter" "$(pmcctl query --pid $A --format json | jq '.regions | length')" 1
expect_faults "--pid picks" "$(pmcctl query --pid $B --format json | jq '.regions[0].events["page-faults"].sum')" 30
expect_eq "--region filter" "$(pmcctl query --region nope --format json | jq '.regions | length')" 0
pmcctl query --format csv | head -1 | grep -q '^pid,comm,region,count,event,sum,min,max,mean,stddev,p50,p90,p99,scaled' ||
	fail "csv header"
expect_eq "csv rows" "$(pmcctl query --pid $A --format csv | grep -c ',pages,')" 2
pmcctl query --pid $A | grep -q "page-faults" || fail "table lacks page-faults"
pmcctl status | grep -qi "samples" || fail "status table"
expect_eq "status samples" "$(pmcctl status --format json | jq .samples)" 20
pmcctl events --format json | jq -e '.events[] | select(.name=="page-faults") | .usable' >/dev/null || fail "events: page-faults not usable"
# The events table: what counts here, first; what does not only with --all, after (issue 24:
# ~100 rows marked "no" on a machine without a PMU). JSON lists every event.
pmcctl events --format json >"$TMP/ev.json"
usable=$(jq '[.events[] | select(.usable)] | length' "$TMP/ev.json")
total=$(jq '.events | length' "$TMP/ev.json")
pmcctl events >"$TMP/ev.txt"
pmcctl events --all >"$TMP/ev-all.txt"
rows() { awk 'NR > 1 && /^$/ { exit } NR > 1 { print $2 }' "$1"; }
expect_eq "events table: the usable ones" "$(rows "$TMP/ev.txt" | grep -c '^yes$' || true),$(rows "$TMP/ev.txt" | wc -l)" "$usable,$usable"
expect_eq "events --all: every event" "$(rows "$TMP/ev-all.txt" | wc -l)" "$total"
expect_eq "events --all: the usable ones first" "$(rows "$TMP/ev-all.txt" | head -n "$usable" | sort -u | tr '\n' ' ')" "yes "
if [ "$usable" -lt "$total" ]; then
	grep -qx "$((total - usable)) events that this machine cannot count are not listed: 'pmcctl events --all' lists them, with why" \
		"$TMP/ev.txt" || fail "events: no word of the events left out: $(tail -5 "$TMP/ev.txt")"
fi
pmcctl query --all >/dev/null 2>&1 && fail "query --all accepted"
pmcctl dump --format json | jq -e '.regions | length >= 2' >/dev/null || fail "dump"
expect_eq "reset" "$(pmcctl reset --pid $A --format json | jq .cleared)" 1
expect_eq "after reset: no rows of zeros" "$(pmcctl query --pid $A --format json | jq '.regions | length')" 0
expect_eq "other untouched" "$(pmcctl query --pid $B --format json | jq '.regions[0].count')" 10

set +e
pmcctl bogus >/dev/null 2>&1; expect_eq "unknown command exit" $? 2
# A mistyped command gets a did-you-mean (issue 24); another, the list of commands.
pmcctl stauts >/dev/null 2>"$TMP/err"; expect_eq "mistyped command exit" $? 2
expect_eq "mistyped command" "$(head -1 "$TMP/err")" "pmcctl: unknown command 'stauts' (did you mean 'status'?)"
pmcctl flamegrpah >/dev/null 2>"$TMP/err"
expect_eq "mistyped flamegraph" "$(head -1 "$TMP/err")" "pmcctl: unknown command 'flamegrpah' (did you mean 'flamegraph'?)"
pmcctl bogus >/dev/null 2>"$TMP/err"
expect_eq "unknown command" "$(head -1 "$TMP/err")" "pmcctl: unknown command 'bogus' (status, query, dump, reset, events, hist, flamegraph, top, run or diff)"
pmcctl query --format xml >/dev/null 2>&1; expect_eq "bad format exit" $? 2
# Options a command's row in the command table does not list: refused, naming the rows that do.
pmcctl status --pid 3 >/dev/null 2>"$TMP/err"; expect_eq "--pid with status exit" $? 2
expect_eq "--pid with status" "$(head -1 "$TMP/err")" "pmcctl: --pid is for 'query', 'dump', 'reset', 'hist', 'flamegraph' and 'top' only, not 'status'"
pmcctl query -r 2 >/dev/null 2>"$TMP/err"
expect_eq "--repeat with query" "$(head -1 "$TMP/err")" "pmcctl: --repeat is for 'run' only, not 'query'"
pmcctl dump --tree >/dev/null 2>"$TMP/err"
expect_eq "--tree with dump" "$(head -1 "$TMP/err")" "pmcctl: --tree is for 'query' only, not 'dump' (it prints the trees anyway)"
pmcctl top --format json >/dev/null 2>"$TMP/err"
expect_eq "top in json" "$(head -1 "$TMP/err")" "pmcctl: 'top' prints a table only: --format cannot be json or csv"
pmcctl --format json >/dev/null 2>"$TMP/err"
expect_eq "missing command" "$(head -1 "$TMP/err")" "pmcctl: missing command (status, query, dump, reset, events, hist, flamegraph, top, run or diff)"
"$PMCCTL_BIN" --socket "$TMP/none.sock" status >/dev/null 2>"$TMP/err"; expect_eq "no daemon exit" $? 69
grep -q "cannot connect to pmcdaemon at $TMP/none.sock" "$TMP/err" || fail "no-daemon message: $(cat "$TMP/err")"
# Into a file: through a pipe to grep -q, which leaves at the first match, the rest of the
# text (past one stdio buffer) would meet a closed pipe (SIGPIPE, 141).
"$PMCCTL_BIN" --help >"$TMP/help"; expect_eq "--help" $? 0
grep -q "query" "$TMP/help" || fail "--help does not name query"
grep -q "hist" "$TMP/help" || fail "--help does not name hist"
set -e
daemon_alive
