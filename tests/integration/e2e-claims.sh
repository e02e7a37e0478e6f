#!/bin/bash
# What a client claims it dropped or lost is not checked, so the daemon bounds it: at most
# SESSION_MAX_CLAIMED (2^40) samples per connection, and every total it adds to saturates.
# A raw client (uid 65534) claiming UINT64_MAX dropped and UINT64_MAX sent before, in each
# of 3 batches, 3 times over: the totals grow by 2^40 a connection, never wrap (they went
# 0 -> 9.2e18 -> 1), stay monotonic on /metrics, and root's status says which uid claimed
# them.
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"

BOUND=$((1 << 40))
start_daemon --metrics 127.0.0.1:0
PORT=$(metrics_port)
scrape_dropped() {
	curl -sS -f --max-time 10 "http://127.0.0.1:$PORT/metrics" | sed -n 's/^pmc_dropped_samples_total //p'
}
prev=$(scrape_dropped)
expect_eq "dropped before any claim" "$prev" 0
for i in 1 2 3; do
	run_client "$TMP/claim-$i.out" "$PMC_TEST_RAW_BIN" "$SOCK" claim-max 3
	expect_eq "claim $i: sent" "$(cat "$TMP/claim-$i.out")" sent
	got=$(scrape_dropped)
	[ "$got" -ge "$prev" ] || fail "pmc_dropped_samples_total went down: $prev -> $got"
	expect_eq "claim $i: pmc_dropped_samples_total" "$got" $((i * BOUND))
	prev=$got
	st=$(pmcctl status --format json)
	expect_eq "claim $i: status dropped" "$(jq .dropped <<<"$st")" $((i * BOUND))
	expect_eq "claim $i: status lost" "$(jq .lost <<<"$st")" 0
	expect_eq "claim $i: claimed, by uid" "$(jq -c .claims <<<"$st")" \
		"[{\"uid\":65534,\"dropped\":$((i * BOUND)),\"lost\":0}]"
done
pmcctl status | grep -q "^claimed by uid 65534: *$((3 * BOUND)) dropped, 0 lost" ||
	fail "status table: $(pmcctl status)"
pass "pmcctl status names the uid that claimed"
grep -q "claims more dropped or lost samples than a connection may" "$TMP/daemon.log" ||
	fail "the bound was not logged: $(cat "$TMP/daemon.log")"
pass "the bound is logged"

# A claim of lost samples alone (sent_before past what was received) is bounded the same
# way: the first batch of a connection spends its whole bound on the dropped claim, so a
# second connection that claims only lost samples (the lie mode: 100,001 sent before per
# batch, 88,999 dropped) is counted as claimed, under its uid.
run_client "$TMP/lie.out" "$PMC_TEST_RAW_BIN" "$SOCK" lie 2
st=$(pmcctl status --format json)
expect_eq "lie: claimed lost, by uid" "$(jq '.claims[0].lost' <<<"$st")" "$(jq .lost <<<"$st")"
[ "$(jq .lost <<<"$st")" -gt 0 ] || fail "lie: no lost samples counted: $st"
pass "lost claims under uid 65534: $(jq -c .claims <<<"$st")"
daemon_alive
