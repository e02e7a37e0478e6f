#!/bin/bash
# A spray of fds (issue "Trust, round four", item 1), three times: 8 processes of uid 65534 open 9
# connections each and send on each, at once, a Status carrying 253 fds of /dev/null (18,216
# fds in flight; fewer connections where RLIMIT_NOFILE, which bounds a user's fds in flight,
# is lower), beside two busy loops. The daemon refuses them all (one fd at most per
# request) and closes each fd or, past the 64 its uid may have waiting, closes the
# connection with its queue unread: once they have ended, not one of those fds is left open
# in the daemon (its one closer queue of 1,024 slots once overflowed and left thousands open
# for good), and a program of another user is counted.
. "$(dirname "$0")/../lib/lib.sh"
command -v jq >/dev/null || skip "jq is missing"
start_daemon
"$PMC_TEST_RAW_BIN" "$SOCK" status-closed >/dev/null || fail "status-closed" # see e2e-closer-fuse
before=$(daemon_fds)
# The daemon and the busy loops on one CPU: the thread that receives the fds and the one
# that closes them take turns with the loops (where taskset is missing, spread as they come).
busy() { while :; do :; done; }
pin() { command -v taskset >/dev/null && taskset -a -p -c "$(cut -d- -f1 /sys/fs/cgroup/cpuset.cpus.effective 2>/dev/null | cut -d, -f1 | grep . || echo 0)" "$1" >/dev/null 2>&1 || true; }
pin "$DAEMON_PID"
busy &
B1=$!
busy &
B2=$!
pin $B1
pin $B2
HELPER_PIDS+=($B1 $B2)
# A user's fds in flight are bounded by its RLIMIT_NOFILE (the kernel's rule): room for them.
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=1048576
lim=$((hard < 65536 ? hard : 65536))
conns=$(((lim - 1000) / (8 * 253)))
[ "$conns" -gt 9 ] && conns=9
[ "$conns" -ge 2 ] || skip "RLIMIT_NOFILE $hard leaves no room for the spray"
# Three rounds, each 8 processes at once.
for round in 1 2 3; do
	pids=()
	for i in $(seq 8); do
		(ulimit -n "$lim" && as_user "$PMC_TEST_RAW_BIN" "$SOCK" spray "$conns" 253) >"$TMP/spray-$round-$i.out" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || fail "spray failed: $(cat "$TMP"/spray-*.out)"; done
done
kill $B1 $B2
# (A send may fail where the user's fds in flight reach its limit: the kernel's refusal.)
sent=$(cat "$TMP"/spray-*.out | sed -n 's/^sent=//p' | awk "{s += \$1} END {print s}")
[ "$sent" -gt $((3 * 4 * conns)) ] || fail "only $sent datagrams of fds sent"
pass "$sent datagrams of 253 fds sent"
expect_eq "connections closed or refused by the daemon" "$(cat "$TMP"/spray-*.out | sed -n 's/^closed=//p' | awk "{s += \$1} END {print s}")" $((3 * 8 * conns))
expect_daemon_fds "the daemon's fds once the spray ended (none left open)" "$before"
run_client "$TMP/after.out" "$PMC_TEST_CLIENT_BIN" named after-spray 2 3
expect_eq "a program after the spray" "$(pmcctl query --region after-spray --format json | jq '.regions[0].count')" 3
