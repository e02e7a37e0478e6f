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
pmcctl dump --format json | jq -e '.regions | length >= 2' >/dev/null || fail "dump"
expect_eq "reset" "$(pmcctl reset --pid $A --format json | jq .cleared)" 1
expect_eq "after reset: no rows of zeros" "$(pmcctl query --pid $A --format json | jq '.regions | length')" 0
expect_eq "other untouched" "$(pmcctl query --pid $B --format json | jq '.regions[0].count')" 10

set +e
pmcctl bogus >/dev/null 2>&1; expect_eq "unknown command exit" $? 2
pmcctl query --format xml >/dev/null 2>&1; expect_eq "bad format exit" $? 2
"$PMCCTL_BIN" --socket "$TMP/none.sock" status >/dev/null 2>"$TMP/err"; expect_eq "no daemon exit" $? 69
grep -q "cannot connect to pmcdaemon at $TMP/none.sock" "$TMP/err" || fail "no-daemon message: $(cat "$TMP/err")"
# Into a file: through a pipe to grep -q, which leaves at the first match, the rest of the
# text (past one stdio buffer) would meet a closed pipe (SIGPIPE, 141).
"$PMCCTL_BIN" --help >"$TMP/help"; expect_eq "--help" $? 0
grep -q "query" "$TMP/help" || fail "--help does not name query"
grep -q "hist" "$TMP/help" || fail "--help does not name hist"
set -e
daemon_alive
