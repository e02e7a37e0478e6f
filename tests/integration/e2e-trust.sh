#!/bin/bash
# The daemon grants a client exactly what the kernel would grant it: each attack of the
# trust review, made by uid 65534 against a root daemon, refused or contained, and the
# daemon serving everyone else throughout.
. "$(dirname "$0")/../lib/lib.sh"
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

# 3. Only counting events, with the modes pmc documents: no sampling period or frequency
# (a sampling event's records), no exclusive or pinned counters, no CPU.
for m in period=100000 freq=1000 excl pinned cpu=0 mg u:u; do
	out=$(raw event "perf::TASK-CLOCK:$m" $EINVAL) || fail "perf::TASK-CLOCK:$m not refused: $out"
done
pass "perf::TASK-CLOCK with period=, freq=, excl, pinned, cpu=, mg or a repeated mode: EINVAL ($(grep message= <<<"$out"))"
out=$(raw event "cs:uuk" $EINVAL) || fail "cs:uuk not refused: $out"
# One spelling per event: aliases, modes that are the default, libpfm4's case.
out=$(raw canon cs:ku) || fail "cs:ku: $out"
expect_eq "cs:ku is" "$(kv name <(echo "$out"))" context-switches
out=$(raw canon PERF::task-clock:u page-faults:u) || fail "canon: $out"
expect_eq "libpfm4 and mode spellings" "$(kv name <(echo "$out") | paste -sd,)" "perf::TASK-CLOCK,page-faults:u"
# The hint for a refused kernel mode keeps the PMU prefix.
out=$(raw event perf::CYCLES:k $EACCES) || out=$(raw event perf::CYCLES:k 2) ||
	fail "perf::CYCLES:k: $out"
if grep -q "error=13" <<<"$out"; then
	grep -q "use 'perf::CYCLES:u'" <<<"$out" || fail "hint: $out"
	pass "perf::CYCLES:k: $(grep message= <<<"$out")"
fi

# 9. An event named twice, in any spelling, is refused rather than counted twice.
out=$(raw canon page-faults page-faults) && fail "page-faults twice accepted: $out"
grep -q "asked for twice" <<<"$out" || fail "message: $out"
out=$(raw canon faults perf::PAGE-FAULTS:k:u) && fail "faults and perf::PAGE-FAULTS:k:u accepted: $out"
pass "an event named twice: $(grep message= <<<"$out")"
run_client "$TMP/dup" env PMC_EVENTS=page-faults,page-faults "$PMC_TEST_CLIENT_BIN" pages 2 5
grep -q "asked for twice" "$TMP/dup.err" || fail "the application was not told: $(cat "$TMP/dup.err")"
expect_eq "nothing counted twice" "$(pmcctl query --pid "$CLIENT_PID" --format json | jq '[.regions[].events["page-faults"].sum // 0] | add // 0')" 0
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# --allow-events matches the event, not a prefix of its name.
start_daemon --allow-events perf::TASK-CLOCK,page-faults
out=$(raw event "perf::TASK-CLOCK:period=100000" $EINVAL) || fail "period= through the allowlist: $out"
out=$(raw canon task-clock) || fail "task-clock is perf::TASK-CLOCK: $out"
out=$(raw event perf::TASK-CLOCK-X 2) || fail "a longer name: $out"
out=$(raw event cs $EACCES) || fail "cs allowed: $out"
pass "--allow-events: $(grep message= <<<"$out")"
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=
set +e
"$PMCDAEMON_BIN" --socket "$TMP/x.sock" --allow-events perf::TASK >"$TMP/x.log" 2>&1
rc=$?
set -e
expect_eq "an allowlist entry that names no event: exit" $rc 1
grep -q "'perf::TASK' is not an event" "$TMP/x.log" || fail "message: $(cat "$TMP/x.log")"
