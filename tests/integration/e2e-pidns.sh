#!/bin/bash
# A program in its own pid namespace (unshare --pid, as in a container): the daemon records
# the pid the program sees (ns_pid, 1 here) beside its own view of it (pid), at connection
# (its log) and in the figures (JSON, CSV): its threads register across pid namespaces
# (threadid.h) and count exactly.
. "$(dirname "$0")/../lib/lib.sh"
command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
unshare --pid --fork --mount-proc true 2>/dev/null || skip "cannot make a pid namespace here (unshare --pid)"
start_daemon

# The client is pid 1 of the new namespace: unshare forks it, setpriv and env exec it.
unshare --pid --fork --mount-proc setpriv --reuid=65534 --regid=65534 --clear-groups -- \
	"${USER_ENV[@]}" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named in-pidns 10 3 \
	>"$TMP/c" 2>&1 || fail "the client in its pid namespace failed: $(cat "$TMP/c")"
cat "$TMP/c"

# --- at connection: the daemon's log (--verbose) ---
line=$(grep -E 'pid [0-9]+ \(uid 65534\): connected \(ns_pid [0-9]+, cgroup .*\)$' "$TMP/daemon.log" | head -1)
[ -n "$line" ] || { cat "$TMP/daemon.log" >&2; fail "no connection of uid 65534 logged with its ns_pid"; }
host_pid=$(sed -E 's/.*pid ([0-9]+) \(uid 65534.*/\1/' <<<"$line")
ns_pid=$(sed -E 's/.*ns_pid ([0-9]+),.*/\1/' <<<"$line")
expect_eq "ns_pid at connection: the program's own pid 1" "$ns_pid" 1
[ "$host_pid" -gt 1 ] || fail "host pid at connection: $host_pid"
pass "pid at connection: $host_pid in the daemon's namespace, $ns_pid in the program's"
# The cgroup of the program is logged too, as /proc gives it.
grep -qE "connected \(ns_pid 1, cgroup /[^ ]*\)$" <<<"$line" || fail "no cgroup logged: $line"

# --- in the figures ---
j=$(pmcctl query --region in-pidns --format json)
[ "$(jq '.regions | length' <<<"$j")" = 1 ] || fail "no figures of the program in its pid namespace: $(cat "$TMP/c")"
r=$(jq '.regions[0]' <<<"$j")
expect_eq "JSON ns_pid" "$(jq .ns_pid <<<"$r")" 1
expect_eq "JSON pid: the daemon's" "$(jq .pid <<<"$r")" "$host_pid"
expect_eq "JSON: both differ" "$(jq '.pid != .ns_pid' <<<"$r")" true
expect_eq "CSV ns_pid" "$(pmcctl query --region in-pidns --format csv | awk -F, 'NR == 2 { print $NF }')" 1
expect_faults "exact page faults" "$(jq '.events["page-faults"].sum' <<<"$r")" 30
