#!/bin/bash
# A daemon that answers Hello but never a registration (pmc-fake-daemon hello), and a client
# whose 4 threads start one after another, 300 ms apart (pmc-test-client serial 4 300).
# Before: each thread sent its RegisterThread and waited the library's 2 s for it (the
# connection dropped after each time-out, the next one made in the background in between):
# 4 registrations, 4 waits, 8.9 s. Now the first waits, and no thread asks again until the
# daemon answers: 1 registration on 1 connection. Counted at the fake daemon, never timed.
. "$(dirname "$0")/lib.sh"

FAKE=$TMP/fake.sock
start_helper "$TMP/fake.out" listening "$PMC_FAKE_DAEMON_BIN" hello "$FAKE"
as_user env PMC_SOCKET="$FAKE" PMC_FLUSH_MS=0 "$PMC_TEST_CLIENT_BIN" serial 4 300 \
	>"$TMP/out" 2>"$TMP/err" || fail "client: $(cat "$TMP/out" "$TMP/err")"
echo "# $(tr '\n' ' ' <"$TMP/out")"
expect_eq "threads run, none profiled" "$(grep -c '^thread=[0-3] enabled=0$' "$TMP/out")" 4
expect_eq "registrations sent (each one waited for)" "$(grep -c '^register tid=' "$TMP/fake.out")" 1
expect_eq "connections" "$(grep -c '^accept$' "$TMP/fake.out")" 1
grep -q "pmcdaemon did not answer its registration within 2000 ms; no thread waits for it again until it answers" "$TMP/err" ||
	fail "no word of the time-out: $(cat "$TMP/err")"
expect_eq "lines on stderr" "$(wc -l <"$TMP/err")" 1
