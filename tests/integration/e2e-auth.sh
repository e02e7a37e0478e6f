#!/bin/bash
# Authorization, each refusal tried as an unprivileged user with the error it gets,
# and the limits, each with a clear error or a counted drop.
. "$(dirname "$0")/../lib/lib.sh"
raw() { as_user "$PMC_TEST_RAW_BIN" "$SOCK" "$@"; }
ctl_as() { local u=$1; shift; setpriv --reuid=$u --regid=$u --clear-groups -- "$PMCCTL_BIN" --socket "$SOCK" "$@"; }
EACCES=13 ENOENT=2

start_daemon --admin-group 4242
# Kernel mode of hardware events: refused before anything is opened.
out=$(raw event cycles:k $EACCES) || fail "cycles:k not refused with EACCES: $out"
grep -q "counting kernel mode ('cycles:k') is not allowed for uid 65534" <<<"$out" || fail "message: $out"
pass "kernel mode refused: $(grep message= <<<"$out")"
out=$(raw event cycles:uk $EACCES) || fail "cycles:uk not refused: $out"
# Software events of one's own thread count kernel activity: allowed.
run_client "$TMP/cs" env PMC_EVENTS=context-switches,page-faults "$PMC_TEST_CLIENT_BIN" block 5
# Bounds that no load can break (the flake "context-switches 5, the kernel saw 8" came from
# a fixed slack): at least the voluntary switches the thread's /proc counters saw inside the
# region, at most all those they saw around it.
cs=$(region_json block "$CLIENT_PID" | jq '.events["context-switches"].sum')
around=$(kv switches_around "$TMP/cs")
inside=$(kv voluntary_inside "$TMP/cs")
[ "$cs" -ge 1 ] && [ "$cs" -ge "$inside" ] && [ "$cs" -le "$around" ] ||
	fail "context-switches $cs, want $inside (voluntary, inside the region) to $around (all, around it)"
pass "software events count kernel activity for uid 65534"

# Who sees what: uid 65534 its own processes, another user nothing, root all.
expect_eq "owner sees its process" "$(ctl_as 65534 query --format json | jq "[.regions[] | select(.pid == $CLIENT_PID)] | length")" 2
expect_eq "another user sees nothing" "$(ctl_as 65533 query --format json | jq '.regions | length')" 0
expect_eq "root sees it" "$(pmcctl query --pid "$CLIENT_PID" --format json | jq '.regions | length')" 2
expect_eq "admin group member sees all" "$(setpriv --reuid=65533 --regid=65533 --groups=4242 -- "$PMCCTL_BIN" --socket "$SOCK" query --pid "$CLIENT_PID" --format json | jq '.regions | length')" 2
# Reset: root and --admin-group only.
set +e
out=$(ctl_as 65534 reset 2>&1); rc=$?
set -e
expect_eq "reset by a user exits" $rc 1
grep -q "reset needs root or a member of the daemon's --admin-group" <<<"$out" || fail "reset message: $out"
pass "reset refused: $out"
out=$(setpriv --reuid=65534 --regid=65534 --groups=4242 -- "$PMCCTL_BIN" --socket "$SOCK" reset --format json) ||
	fail "admin-group member may not reset: $out"
expect_eq "admin group member resets" "$(jq '.cleared > 0' <<<"$out")" true

# A connection whose process has exited may not register (pidfd).
out=$(raw orphan) || fail "orphan registration not refused with ESRCH: $out"
grep -q "has exited" <<<"$out" || fail "orphan message: $out"
pass "orphan refused: $(grep message= <<<"$out")"
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# --allow-events and --allow-kernel.
start_daemon --allow-events page-faults,task-clock
out=$(raw event context-switches $EACCES) || fail "event outside --allow-events not refused: $out"
grep -q "not allowed here: the operator set --allow-events" <<<"$out" || fail "message: $out"
pass "--allow-events: $(grep message= <<<"$out")"
run_client "$TMP/ok" env PMC_EVENTS=page-faults:u "$PMC_TEST_CLIENT_BIN" pages 2 5
expect_faults "allowed event with modifier" "$(region_json pages "$CLIENT_PID" | jq '.events["page-faults:u"].sum')" 10
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# Socket mode: 0600 lets no one but root connect; the application runs on regardless.
start_daemon --socket-mode 0600
set +e
ctl_as 65534 status >/dev/null 2>"$TMP/err"; rc=$?
set -e
expect_eq "pmcctl as a user on a 0600 socket exits" $rc 69
grep -q "Permission denied" "$TMP/err" || fail "message: $(cat "$TMP/err")"
as_user "$PMC_TEST_CLIENT_BIN" pages 1 3 >"$TMP/out" 2>"$TMP/err" || fail "application failed"
grep -q "Permission denied" "$TMP/err" || fail "library warning: $(cat "$TMP/err")"
pass "application warned and ran: $(cat "$TMP/err")"
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# Limits.
start_daemon --max-clients 1 --max-threads 2 --max-regions 2 --max-batch-rate 2 --allow-kernel nobody
raw hold 5 >"$TMP/held" &
holder=$!
# The holder is a client (its Hello answered) before pmcctl comes: no sleep to guess it.
for _ in $(seq 2400); do grep -q held "$TMP/held" && break; sleep 0.05; done
grep -q held "$TMP/held" || fail "the holding client did not connect"
# pmcctl reads the refusal the daemon sent before closing. Once in CI (ASan build, a loaded
# machine) it said "closed the connection" instead, not reproduced in 2,300 tries since:
# up to 3 tries, each said.
for try in 1 2 3; do
	set +e
	out=$(pmcctl status 2>&1); rc=$?
	set -e
	grep -q -- "--max-clients" <<<"$out" && break
	echo "try $try: rc $rc: $out"
done
expect_eq "over --max-clients exits" $rc 1
grep -q -- "--max-clients" <<<"$out" || fail "max-clients message: $out"
pass "over --max-clients: $out"
wait $holder
# --max-clients 1: each connection after this one waits until the daemon took the last one's
# hang-up (slot_free), or it is refused as the second client ("serves 1 clients": a fresh
# clone's run beside two busy loops failed so); figures once it took the clients' hang-ups
# (hangups_taken, whose own last connection slot_free waits for as well).
taken() { hangups_taken; slot_free; }
taken
# cycles:k passes the policy for nobody; it can then fail only for lack of a PMU.
out=$(raw event cycles:k 0) || { slot_free; out=$(raw event cycles:k $ENOENT); } ||
	fail "cycles:k refused despite --allow-kernel nobody: $out"
pass "--allow-kernel nobody lets cycles:k through the policy: $(grep error= <<<"$out")"
slot_free
run_client "$TMP/mt" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" threads 4 1 10
taken
grep -q -- "--max-threads" "$TMP/mt.err" || fail "no --max-threads warning: $(cat "$TMP/mt.err")"
expect_eq "2 threads of 4 counted" "$(region_json mt-pages "$CLIENT_PID" | jq .count)" 20
slot_free
run_client "$TMP/nest" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" nested 1 5
taken
# inner's path is defined after outer's, its parent: "scoped" is the third region, over the limit
expect_eq "only the first 2 regions kept" "$(pmcctl query --pid "$CLIENT_PID" --format json | jq -c '[.regions[].name]')" '["outer","inner"]'
grep -q -- "--max-regions" "$TMP/daemon.log" || fail "no --max-regions log"
slot_free
d0=$(pmcctl status --format json | jq .dropped)
slot_free
run_client "$TMP/rate" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 1 25000
taken
count=$(region_json pages "$CLIENT_PID" | jq .count)
slot_free
d1=$(pmcctl status --format json | jq .dropped)
# 25,000 samples = 48 full batches + 1, sent in well under a second here: at most 2 batches a
# second are counted (all of them would take 25 s of a program that runs for a fraction of
# one, however loaded the machine), and every sample is either counted or reported dropped.
[ "$count" -lt 25000 ] || fail "--max-batch-rate 2: all $count samples counted"
expect_eq "--max-batch-rate: counted + dropped" $((count + d1 - d0)) 25000
daemon_alive
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# --keep-exited: the figures of at most N exited processes are kept, the oldest go first.
start_daemon --keep-exited 2
pids=()
for i in 1 2 3 4; do
	run_client "$TMP/k$i" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 1 3
	pids+=("$CLIENT_PID")
done
# The last client's disconnect may still be queued: a status call drains it first.
expect_eq "evicted" "$(pmcctl status --format json | jq .evicted)" 2
expect_eq "kept: the last two" "$(pmcctl query --format json | jq -c '[.regions[].pid] | sort')" \
	"$(printf '%s\n' "${pids[2]}" "${pids[3]}" | sort -n | jq -cs .)"
daemon_alive
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# --keep-exited-per-user: one user's short-lived processes push out that user's own
# figures first, never another user's.
start_daemon --keep-exited 10 --keep-exited-per-user 1
"${USER_ENV[@]}" PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 1 3 >"$TMP/root.out" 2>"$TMP/root.err" &
root_pid=$!
wait $root_pid || { cat "$TMP/root.err" >&2; fail "root client failed"; }
pids=()
for i in 1 2 3; do
	run_client "$TMP/u$i" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 1 3
	pids+=("$CLIENT_PID")
done
expect_eq "evicted (uid 65534's first two)" "$(pmcctl status --format json | jq .evicted)" 2
expect_eq "kept: root's and uid 65534's last" "$(pmcctl query --format json | jq -c '[.regions[].pid] | sort')" \
	"$(printf '%s\n' "$root_pid" "${pids[2]}" | sort -n | jq -cs .)"
daemon_alive
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# --max-total-regions: an exited process's figures make room for a running one's new region.
# nested defines 3 regions: the second process's second one evicts the first process.
start_daemon --max-total-regions 4 --max-regions-per-user 4
run_client "$TMP/t1" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" nested 1 3
pmcctl status >/dev/null # the disconnect is handled before the next client comes
run_client "$TMP/t2" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" nested 1 3
expect_eq "evicted to make room" "$(pmcctl status --format json | jq .evicted)" 1
expect_eq "the second process keeps its 3 regions" \
	"$(pmcctl query --format json | jq -c '[.regions[] | [.pid, .name, .count]] | sort')" \
	"$(jq -cn --argjson p "$CLIENT_PID" '[[$p, "inner", 3], [$p, "outer", 3], [$p, "scoped", 3]]')"
daemon_alive
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# ... and when only running processes hold them, a new region is refused, its samples
# dropped and counted.
start_daemon --max-total-regions 1 --max-regions-per-user 2
run_client "$TMP/t3" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" nested 1 3
expect_eq "regions kept" "$(pmcctl query --format json | jq -c '[.regions[].name]')" '["outer"]'
expect_eq "inner's and scoped's samples dropped and counted" "$(pmcctl status --format json | jq .dropped)" 6
grep -q -- "--max-total-regions" "$TMP/daemon.log" || fail "no --max-total-regions log"
pass "--max-total-regions: $(grep -- --max-total-regions "$TMP/daemon.log" | head -1)"
daemon_alive
