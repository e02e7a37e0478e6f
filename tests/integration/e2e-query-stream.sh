#!/bin/bash
# Streamed query replies against a client that pipelines: two streamed Queries on one
# connection, read by the daemon while another connection's Query and Status read what the
# others queued (pmc-test-raw two-streams, 10 times). The first must stop that reading until
# its reply is sent: before, the second replaced it mid-stream and the daemon crashed
# (a NULL stream, or a freed session, in the write callback of the first).
. "$(dirname "$0")/../lib/lib.sh"

start_daemon
as_user "$PMC_TEST_RAW_BIN" "$SOCK" two-streams >"$TMP/out" 2>&1 || fail "two-streams: $(cat "$TMP/out")"
grep -q '^served$' "$TMP/out" || fail "two-streams: $(cat "$TMP/out")"
pass "two streamed replies on one connection, each whole, the daemon serving on"
daemon_alive
