#!/bin/bash
# A share is a guarantee, not a cap: one user alone uses the daemon's room (25 processes of
# uid 65534 with 4,000 regions each, 100,000 regions, with the default limits, whose share
# per uid is a quarter: 65,536), every sample counted, nothing evicted; then another uid
# arrives and is served exactly.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
load_programs 24 4000
st=$(pmcctl status --format json)
expect_eq "nothing evicted" "$(jq .evicted <<<"$st")" 0
expect_eq "no sample dropped" "$(jq .dropped <<<"$st")" 0
expect_eq "every sample counted" "$(jq .samples <<<"$st")" 100000
# The newcomer finds its share.
setpriv --reuid=65533 --regid=65533 --clear-groups -- "${USER_ENV[@]}" env PMC_EVENTS=page-faults \
	"$PMC_TEST_CLIENT_BIN" pages 3 20 >"$TMP/v" 2>"$TMP/v.err" &
v=$!
wait $v || fail "the newcomer failed: $(cat "$TMP/v.err")"
expect_faults "the newcomer's page-faults" "$(region_json pages $v | jq '.events["page-faults"].sum')" 60
expect_eq "the first user's figures kept" "$(pmcctl status --format json | jq .evicted)" 0
daemon_alive
