#!/bin/bash
# One user's close that never returns holds that user alone (issue "Trust, round four", item
# 1). uid 65534 attaches a FUSE file whose server never answers the flush
# (pmc-test-fuse-hold) to a Status: its closer thread waits there for good. Then another
# user (uid 1001) runs 72 programs one after another, each a libpmcclient connection that
# sends its heads table (a memfd, closed at once: it never needs a closer) and counts a
# region: every program is served and counted exactly (one closer for all once refused the
# victim's uid from its 65th program on), the fds the attacker sent are counted against it
# alone (closes_pending), the daemon's fd count comes back to what it was once the programs
# have ended, and to what it was before the attack once the file system's server ends.
# Then uid 65534's 600 connections, opened before, each send a Status with an fd: the daemon,
# the uid's closes pending, closes them unread, each socket (its fd queued inside) deferred
# to the uid's closer: each counted against it (closes_pending), but the daemon's fd table
# holds at most 253 of them and a socket pair, the rest parked in flight in that pair (issue
# 31, item 1's gap: before, one socket each stayed in the table, 600 fds, bounded only by
# RLIMIT_NOFILE); a program of uid 1001 is still counted.
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_TEST_IDENTITY_BIN:?set by ctest}" "${PMC_TEST_FUSE_BIN:?set by ctest}" "${PMC_TEST_CLIENT_BIN:?set by ctest}"
command -v jq >/dev/null || skip "jq is missing"
start_fuse_hold
cp "$PMC_TEST_IDENTITY_BIN" "$TMP/bin/identity"
chmod a+rx "$TMP/bin/identity"
start_daemon
# The daemon at rest: what its first request opens is open, and that request's connection
# closed (a pmcctl's may still be open as pmcctl returns: once counted in `before`, and the
# end counted 14 for 16).
"$PMC_TEST_RAW_BIN" "$SOCK" status-closed >/dev/null || fail "status-closed"
before=$(daemon_fds)
L=600
mkfifo "$TMP/linger.in"
chmod 666 "$TMP/linger.in"
as_user "$PMC_TEST_RAW_BIN" "$SOCK" linger $L <"$TMP/linger.in" >"$TMP/linger.out" 2>&1 &
LINGER=$!
exec 8>"$TMP/linger.in"
wait_until "uid 65534's $L connections" 60 grep -qx ready "$TMP/linger.out"

# The attack: two such files on a Status of uid 65534; the daemon tries to close the first.
fuse_attach "uid 65534" as_user "$TMP/bin/identity"
expect_eq "fds of uid 65534 waiting to be closed (its status)" "$(as_user "$PMCCTL_BIN" status --format json | jq .closes_pending)" 2
held=$(daemon_fds)

# The victim: 72 programs of uid 1001, one after another.
victim() { setpriv --reuid=1001 --regid=1001 --clear-groups -- "${USER_ENV[@]}" "$@"; }
for i in $(seq 72); do
	victim "$PMC_TEST_CLIENT_BIN" named victim 2 3 >"$TMP/victim.out" 2>&1 ||
		fail "victim program $i failed: $(cat "$TMP/victim.out")"
done
expect_eq "the victim's programs counted" "$(pmcctl query --region victim --format json | jq '[.regions[].count] | add')" $((72 * 3))
expect_eq "the victim's processes" "$(pmcctl query --region victim --format json | jq '[.regions[].pid] | unique | length')" 72
expect_eq "fds of uid 1001 waiting to be closed" "$(victim "$PMCCTL_BIN" status --format json | jq .closes_pending)" 0
expect_daemon_fds "the daemon's fds once the victim's programs ended (the attacker's file still held)" "$held"

# uid 65534, its closer held, sprays: 9 connections, each a Status with 253 fds of /dev/null.
# The first connection's fds wait behind the file; the others are closed unread, their
# sockets (what they queued inside) waiting there too: bounded, and none left open later.
as_user "$PMC_TEST_RAW_BIN" "$SOCK" spray 9 253 >"$TMP/spray.out" 2>&1 || fail "spray: $(cat "$TMP/spray.out")"
expect_eq "the spray's connections closed or refused" "$(kv closed "$TMP/spray.out")" 9
n=$(daemon_fds)
[ "$n" -le $((held + 253 + 9)) ] || fail "the daemon holds $n fds (at most $((held + 253 + 9)) expected: $held, the first datagram's 253 fds, 9 sockets)"
pass "the daemon holds $n fds while uid 65534's closer waits (at most $held + 253 + 9)"
expect_eq "a program of uid 1001 after the spray" "$(victim "$PMC_TEST_CLIENT_BIN" named after-spray 2 3 >/dev/null && pmcctl query --region after-spray --format json | jq '.regions[0].count')" 3

# The $L connections, each closed with an fd queued.
n1=$(daemon_fds)
p1=$(pmcctl status --format json | jq .closes_pending) # every uid's: uid 65534's alone have any
echo >&8
exec 8>&-
wait $LINGER || fail "linger: $(cat "$TMP/linger.out")"
expect_eq "uid 65534's connections closed by the daemon" "$(kv closed "$TMP/linger.out")" $L
# (A Status of root's reads every connection's queue first, and the daemon closes those of
# uid 65534 it reads, unread: some were closed while their client had sent nothing, at once.)
unsent=$(kv unsent "$TMP/linger.out")
expect_eq "their sockets with a Status queued, each counted against uid 65534 (closes_pending)" \
	$(($(pmcctl status --format json | jq .closes_pending) - p1)) $((L - unsent))
n2=$(daemon_fds)
# What stays in its table of all uid 65534 sent: the two files, the first spray datagram's
# 253 fds, the sockets gathered since the last park (253 at most) and the pair; and the
# last pmcctl's connection, if the daemon has not yet seen it end (2). Not bounded by n1: a
# Status of root's before n1 had already closed some of the $L connections, unread, so n1
# counts fewer than $L of them. (Before: one socket each stayed in the table, $L - unsent.)
most=$((before + 2 + 253 + 253 + 2 + 2))
[ "$n2" -le "$most" ] ||
	fail "the daemon holds $n2 fds: at most $most expected ($before at rest, 2 files, 253 fds, 253 sockets gathered, the pair, a pmcctl's connection)"
pass "the daemon holds $n2 fds, $n1 with the $L connections open (at most $most: their sockets parked in flight but 253 at most)"
expect_eq "a program of uid 1001 after them" "$(victim "$PMC_TEST_CLIENT_BIN" named after-linger 2 3 >/dev/null && pmcctl query --region after-linger --format json | jq '.regions[0].count')" 3

# The file system's server ends: its flushes fail, the closes end, every fd is closed.
kill -TERM "$FUSE"
wait "$FUSE" || true
expect_daemon_fds "the daemon's fds once the file system's server ended" "$before"
expect_eq "fds of uid 65534 waiting to be closed, after" "$(as_user "$PMCCTL_BIN" status --format json | jq .closes_pending)" 0
