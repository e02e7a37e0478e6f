#!/bin/bash
# The daemon grants a client exactly what the kernel would grant it: each attack of the
# trust review, made by uid 65534 against a root daemon, refused or contained, and the
# daemon serving everyone else throughout.
. "$(dirname "$0")/lib.sh"
raw() { as_user "$PMC_TEST_RAW_BIN" "$SOCK" "$@"; }
ctl_as() { local u=$1; shift; setpriv --reuid=$u --regid=$u --clear-groups -- "$PMCCTL_BIN" --socket "$SOCK" "$@"; }
EPERM=1 EACCES=13 EINVAL=22

# setuid-root programs a user may run: a sleep, and the raw client.
install -o root -m 4755 "$(command -v sleep)" "$TMP/bin/suid-sleep"
install -o root -m 4755 "$PMC_TEST_RAW_BIN" "$TMP/bin/suid-raw"
as_user "$TMP/bin/suid-sleep" 0 || skip "setuid programs do not run from $TMP (nosuid?)"

start_daemon

# 1. Counters of a setuid-root process: the process that connected execs it, and its
# child, which kept the connection, asks for the parent's thread.
out=$(raw exec-then-register "$TMP/bin/suid-sleep") || fail "setuid target not refused: $out"
grep -q "not as the connection's uid 65534\|is not dumpable" <<<"$out" || fail "message: $out"
pass "setuid exec, then register: $(grep message= <<<"$out")"
# The same through a connection passed to the parent before the child execs.
out=$(raw pass-then-register "$TMP/bin/suid-sleep") || fail "passed connection not refused: $out"
pass "connection passed, child execs setuid, parent registers it: $(grep message= <<<"$out")"
# Its reattach (no reply) created nothing under uid 65534.
expect_eq "nothing filed for the setuid process" "$(ctl_as 65534 query --format json | jq '.regions | length')" 0
grep -q "refused" "$TMP/daemon.log" || fail "no log of the refusal"

# 2. A setuid program's figures are its own: the process registers as uid 65534, keeps
# the connection in a child, execs the setuid raw client, which sends region "secret".
raw exec-batch "$TMP/bin/suid-raw" "$SOCK" batch secret >"$TMP/eb.out" 2>&1 ||
	fail "exec-batch: $(cat "$TMP/eb.out")"
grep -q sent "$TMP/eb.out" || fail "the setuid program did not send: $(cat "$TMP/eb.out")"
expect_eq "uid 65534 does not see the setuid program's region" \
	"$(ctl_as 65534 query --region secret --format json | jq '.regions | length')" 0
expect_eq "root sees it, filed under uid 0" \
	"$(pmcctl query --region secret --format json | jq -c '[.regions[] | [.uid, .count]]')" '[[0,1]]'
daemon_alive
