#!/bin/bash
# Each refusal is a clear error, and the daemon keeps serving everyone else.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
raw() { as_user "$PMC_TEST_RAW_BIN" "$SOCK" "$@"; }

out=$(raw foreign-tid "$DAEMON_PID") || fail "foreign tid not refused with EPERM: $out"
grep -q "is not a thread of the calling process" <<<"$out" || fail "unclear message: $out"
pass "foreign tid refused: $(grep message= <<<"$out")"
out=$(raw foreign-tid 1) || fail "tid 1 not refused: $out"

out=$(raw event page-fualts) || fail "unknown event not refused with ENOENT: $out"
grep -q "unknown event 'page-fualts'" <<<"$out" || fail "message does not name the event: $out"
grep -q "did you mean 'page-faults'" <<<"$out" || fail "no suggestion: $out"
pass "unknown event refused: $(grep message= <<<"$out")"

# Through the library: one warning naming the event, and the application still runs.
as_user env PMC_EVENTS=page-faults,no-such-event "$PMC_TEST_CLIENT_BIN" pages 1 5 >"$TMP/out" 2>"$TMP/err" ||
	fail "application failed with a bad PMC_EVENTS"
grep -q "unknown event 'no-such-event'" "$TMP/err" || fail "library warning: $(cat "$TMP/err")"
pass "library warns: $(cat "$TMP/err")"

for m in garbage fds bad-batch no-hello heads-file heads-unsealed heads-small heads-big heads-none heads-twice; do
	out=$(raw $m) || fail "$m: $out"
	pass "$m: $out"
done
# Each heads table refused for its own reason (daemon/session/session.c, handle_heads_table()).
for why in "not a memfd sealed against shrinking" "smaller than it says" "of no size or too large" \
	"a second heads table" "must carry one file descriptor carries none"; do
	grep -q "$why" "$TMP/daemon.log" || fail "heads table refusal not logged: $why"
done
pass "heads tables refused, each logged with its reason"
out=$(raw heads-good) || fail "heads-good: $out"
pass "heads-good: $out"
out=$("$PMC_TEST_RAW_BIN" "$SOCK" oversize) || fail "oversize datagram: $out"
pass "2 MiB datagram: $out"
grep -q "request over 1048576 bytes" "$TMP/daemon.log" || fail "oversize not logged"
out=$(raw many-events 17) || fail "17 events not refused with E2BIG: $out"
grep -q "17 events asked for; at most 16 per thread" <<<"$out" || fail "message: $out"
pass "too many events: $(grep message= <<<"$out")"
out=$(raw status) || fail "daemon no longer answers"
# uid 65534 sees its own 10 closed connections; root all 11 (the oversize was root's).
grep -q "rejected=10" <<<"$out" || fail "rejected count: $out"
pass "daemon still serves: $out"
expect_eq "rejected, as root sees it" "$(pmcctl status --format json | jq .rejected)" 11
# And a real client still gets exact counts.
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 4 10
expect_faults "page-faults after refusals" "$(region_json pages "$CLIENT_PID" | jq '.events["page-faults"].sum')" 40
daemon_alive
