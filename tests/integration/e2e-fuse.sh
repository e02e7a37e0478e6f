#!/bin/bash
# A file whose close never ends, sent to the daemon where it expects none: a FUSE file whose
# server never answers the flush (pmc-test-fuse-hold; any user can mount one with
# fusermount). Every close() of it waits, in any process that holds it, and no signal ends
# the wait. The daemon's loop goes on serving (fdcheck hands the close to its closer
# thread); its periodic save, a child process, shares the daemon's fd table instead of a
# copy, so that it closes none of it: the saves go on, and SIGTERM saves and ends the loop.
# (The daemon's process itself, whose closer thread waits, ends only when that file system's
# server does: the kernel's rule, said in the README.)
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_TEST_IDENTITY_BIN:?set by ctest}" "${PMC_TEST_FUSE_BIN:?set by ctest}" "${PMC_TEST_STATE_BIN:?set by ctest}"
[ "$(id -u)" = 0 ] || skip "mounting the test's FUSE file system needs root"
start_fuse_hold
STATE=$TMP/state/pmc.state
install -d -m 0700 "$TMP/state"
start_daemon --state "$STATE" --state-interval 1
saved() { pmcctl status --format json | jq -r .state_saved_ns; }

# Two such files attached to a Status: the connection is closed, the next client served;
# the closer thread of its uid waits on the first, the second waits behind it (its queue).
fuse_attach root "$PMC_TEST_IDENTITY_BIN"

# A program after the attack: counted, and in a save that ends after it (120 s at most).
run_client "$TMP/victim.out" "$PMC_TEST_CLIENT_BIN" named after-attack 2 3
t0=$(saved)
for _ in $(seq 1200); do [ "$(saved)" -gt "$t0" ] && break; daemon_alive; sleep 0.1; done
[ "$(saved)" -gt "$t0" ] || fail "no save since the attack (state_saved_ns $t0): $(cat "$TMP/daemon.log")"
! grep -q "previous save is still running" "$TMP/daemon.log" || fail "a save waited: $(cat "$TMP/daemon.log")"
pass "the periodic saves go on beside the waiting close"
expect_eq "the program after the attack" "$(pmcctl query --region after-attack --format json | jq '.regions[0].count')" 3

# SIGTERM: the loop saves and ends (the file written within 120 s), with the file system's
# server still holding the closer thread; once that server ends, so does the daemon, 0.
before=$(stat -c %y "$STATE")
kill -TERM "$DAEMON_PID"
for _ in $(seq 1200); do
	grep -q "shutting down" "$TMP/daemon.log" && [ "$(stat -c %y "$STATE")" != "$before" ] && break
	sleep 0.1
done
[ "$(stat -c %y "$STATE")" != "$before" ] || fail "no final save at SIGTERM: $(cat "$TMP/daemon.log")"
pass "SIGTERM: the final save is written"
kill -TERM $FUSE
wait $FUSE || true
wait "$DAEMON_PID" || fail "pmcdaemon exit status $? once the file system ended: $(cat "$TMP/daemon.log")"
DAEMON_PID=
pass "the daemon ends once the file system's server does"
