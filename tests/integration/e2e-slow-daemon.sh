#!/bin/bash
# A daemon that answers Hello but never a registration (pmc-fake-daemon hello), and a client
# whose 4 threads start one after another, 300 ms apart (pmc-test-client serial 4 300).
# Before: each thread sent its RegisterThread and waited the library's 2 s for it (the
# connection dropped after each time-out, the next one made in the background in between):
# 4 registrations, 4 waits, 8.9 s. Now the first waits, and no thread asks again until the
# daemon answers: 1 registration on 1 connection. Counted at the fake daemon, never timed.
. "$(dirname "$0")/../lib/lib.sh"

FAKE=$TMP/fake.sock
start_helper "$TMP/fake.out" listening "$PMC_FAKE_DAEMON_BIN" hello "$FAKE"
as_user env PMC_SOCKET="$FAKE" PMC_FLUSH_MS=0 "$PMC_TEST_CLIENT_BIN" serial 4 300 \
	>"$TMP/out" 2>"$TMP/err" || fail "client: $(cat "$TMP/out" "$TMP/err")"
echo "# $(tr '\n' ' ' <"$TMP/out")"
expect_eq "threads run, none profiled" "$(grep -c '^thread=[0-3] enabled=0$' "$TMP/out")" 4
expect_eq "registrations sent (each one waited for)" "$(grep -c '^register tid=' "$TMP/fake.out")" 1
expect_eq "connections" "$(grep -c '^accept$' "$TMP/fake.out")" 1
grep -Eq "pmcdaemon did not answer its registration within [0-9]* ms; no thread waits for it again until it answers, and each asks again later, its regions counted meanwhile \(reason unregistered\)" "$TMP/err" ||
	fail "no word of the time-out: $(cat "$TMP/err")"
# ... and at exit that the 4 regions dropped meanwhile reached no daemon (no thread was
# registered to carry the word: libpmcclient's pmc__atexit(); they went unsaid before).
grep -q "^pmc: at exit, 0 samples not sent and 4 dropped reached no pmcdaemon" "$TMP/err" ||
	fail "no word at exit of the 4 regions dropped: $(cat "$TMP/err")"
expect_eq "lines on stderr" "$(wc -l <"$TMP/err")" 2

# A transient refusal is asked again after a back-off, and the thread counted from then on.
# A real daemon with --max-threads 1: thread A holds it, thread B is refused (EMFILE), A
# exits, and B registers at a region begun after its back-off (0.5 s). Before: B never
# asked again (b_enabled=0), its regions lost unsaid. Exact: every run of B is counted, or
# lost as "unregistered".
start_daemon --max-threads 1
run_client "$TMP/retry" env PMC_EVENTS=page-faults PMC_FLUSH_MS=0 "$PMC_TEST_CLIENT_BIN" retry 5
expect_eq "B registered on asking again" "$(kv b_enabled "$TMP/retry")" 1
runs=$(kv runs_b "$TMP/retry")
counted=$(region_json b "$CLIENT_PID" | jq .count)
lost=$(pmcctl query --pid "$CLIENT_PID" --format json | jq '[.losses[] | select(.reason == "unregistered") | .count] | add')
echo "# B: $runs runs, $counted counted, $lost lost (unregistered)"
expect_eq "B's runs: counted + lost (unregistered)" $((counted + lost)) "$runs"
[ "$counted" -ge 5 ] || fail "B's last 5 runs not all counted: $counted"
[ "$lost" -ge 1 ] || fail "B's refused run not counted as lost: $lost"
expect_eq "losses: unregistered only" \
	"$(pmcctl query --pid "$CLIENT_PID" --format json | jq -c '[.losses[].reason]')" '["unregistered"]'
grep -q "thread [0-9]* not profiled for now: .*--max-threads.*; it asks again later, its regions counted meanwhile (reason unregistered)" \
	"$TMP/retry.err" || fail "stderr: $(cat "$TMP/retry.err")"
expect_eq "lines on stderr (said once)" "$(wc -l <"$TMP/retry.err")" 1
daemon_alive

# A refusal by policy stays one: an unknown event is not asked again. Two threads (the one
# running "steady" 60 times over 1.2 s, past two back-offs, and the main thread's
# pmc_enabled()): two registrations, each refused once.
run_client "$TMP/refused" env PMC_EVENTS=page-fualts "$PMC_TEST_CLIENT_BIN" steady 1 60 20000
expect_eq "refused threads ask once each" \
	"$(grep -c "pid $CLIENT_PID: refused: unknown event 'page-fualts'" "$TMP/daemon.log" || true)" 2
