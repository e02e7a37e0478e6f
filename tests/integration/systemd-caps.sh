#!/bin/bash
# The daemon with pmcdaemon.service's capabilities (CAP_PERFMON, CAP_SYS_ADMIN, CAP_SETPCAP,
# ambient and bounding; NoNewPrivileges=) as a user of its own (uid 61234), issue 30 item 2:
#  - at this kernel's perf_event_paranoid (2 or below, upstream): every thread's effective
#    set is CAP_PERFMON alone after start, CAP_SYS_ADMIN and CAP_SETPCAP are gone from the
#    permitted, inheritable, ambient and bounding sets (for good), and a uid-65534 client is
#    counted exactly;
#  - at paranoid 3 as Debian's and Ubuntu's kernels have it (PMCDAEMON_TEST_PARANOID=3: the
#    daemon refuses itself every perf_event_open() of a thread without CAP_SYS_ADMIN
#    effective, as their patch does): CAP_SYS_ADMIN stays permitted only, raised once for
#    each perf_event_open() (counted: as many raises as counters the client's thread got)
#    and lowered again (effective set CAP_PERFMON alone afterwards, on every thread), the
#    client exact; the daemon the unit ran before (CAP_PERFMON only) counts nothing there.
# `pmcctl status` (text and JSON) and the log's "privilege:" line say what it holds and why.
# Debian's own kernel at paranoid 3 is the QEMU boot test's.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/systemd-lib.sh"
unit_user
[ "$(cat /proc/sys/kernel/perf_event_paranoid)" -le 2 ] ||
	skip "perf_event_paranoid is above 2 here: the QEMU boot test covers such kernels"
unit_caps
expect_eq "the unit's capabilities" "$UNIT_CAPS" "-all,+perfmon,+sys_admin,+setpcap"

mkdir "$TMP/run" && chown "$DUID:$DUID" "$TMP/run"
SOCK=$TMP/run/pmc.sock
USER_ENV=(env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$SOCK")
PERFMON=0000004000000000
PERFMON_ADMIN=0000004000200000

# start_as CAPS [ENV...]: the daemon as uid $DUID holding CAPS (setpriv's spelling)
start_as() {
	: >"$TMP/daemon.log" # the last daemon's "listening on" is not this one's
	local caps=$1
	shift
	env "$@" setpriv --reuid="$DUID" --regid="$DUID" --clear-groups --no-new-privs \
		--inh-caps="$caps" --ambient-caps="$caps" --bounding-set="$caps" -- \
		"$PMCDAEMON_BIN" --socket "$SOCK" --verbose >"$TMP/daemon.log" 2>&1 &
	DAEMON_PID=$!
	wait_for "$TMP/daemon.log" "listening on $SOCK"
}

# expect_sets WHAT EFF PRM INH AMB BND: each set of every thread of the daemon (hex, as
# /proc/PID/task/TID/status gives them)
expect_sets() {
	local what=$1 t set want i
	shift
	for t in /proc/"$DAEMON_PID"/task/*; do
		i=0
		for set in CapEff CapPrm CapInh CapAmb CapBnd; do
			i=$((i + 1))
			want=${!i}
			expect_eq "$what: thread ${t##*/} $set" "$(awk -v s="$set:" '$1 == s {print $2}' "$t/status")" "$want"
		done
	done
	expect_eq "$what: NoNewPrivs" "$(awk '/^NoNewPrivs:/ {print $2}' "/proc/$DAEMON_PID/status")" 1
}

# client_exact WHAT: a uid-65534 client's regions, exact (pages written x calls)
N=5 K=40
client_exact() {
	run_client "$TMP/out" env PMC_EVENTS=page-faults,task-clock "$PMC_TEST_CLIENT_BIN" pages $N $K
	expect_eq "$1: client enabled" "$(kv enabled "$TMP/out")" 1
	[ ! -s "$TMP/out.err" ] || fail "$1: client warned: $(cat "$TMP/out.err")"
	local j
	j=$(region_json pages "$CLIENT_PID")
	expect_eq "$1: count" "$(jq .count <<<"$j")" $K
	expect_faults "$1: page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))
}

# 1. This kernel (paranoid <= 2): CAP_SYS_ADMIN and CAP_SETPCAP dropped for good.
start_as "$UNIT_CAPS"
expect_sets "paranoid $(cat /proc/sys/kernel/perf_event_paranoid)" $PERFMON $PERFMON $PERFMON $PERFMON $PERFMON
grep -q "privilege: CAP_PERFMON; CAP_SYS_ADMIN dropped for good at start" "$TMP/daemon.log" ||
	fail "no privilege line in the log: $(cat "$TMP/daemon.log")"
client_exact "CAP_SYS_ADMIN dropped"
s=$(pmcctl status --format json)
expect_eq "status capabilities" "$(jq .capabilities <<<"$s")" $((16#$PERFMON))
expect_eq "status raises" "$(jq .sys_admin_raised <<<"$s")" 0
jq -r .privilege <<<"$s" | grep -q "^CAP_PERFMON; CAP_SYS_ADMIN dropped for good at start" ||
	fail "status privilege: $(jq -r .privilege <<<"$s")"
pmcctl status | grep -q "^privilege: .*CAP_SYS_ADMIN dropped for good" ||
	fail "pmcctl status (text): $(pmcctl status)"
pass "status: $(jq -r .privilege <<<"$s")"
stop_daemon

# 2. Paranoid 3 (Debian's and Ubuntu's default), as the test makes the daemon see it.
start_as "$UNIT_CAPS" PMCDAEMON_TEST_PARANOID=3
expect_sets "paranoid 3, after start" $PERFMON $PERFMON_ADMIN $PERFMON $PERFMON $PERFMON_ADMIN
grep -q "privilege: CAP_PERFMON; CAP_SYS_ADMIN permitted only, raised around perf_event_open (perf_event_paranoid 3" \
	"$TMP/daemon.log" || fail "no privilege line in the log: $(cat "$TMP/daemon.log")"
r0=$(pmcctl status --format json | jq .sys_admin_raised)
client_exact "paranoid 3"
s=$(pmcctl status --format json)
# One thread, two events (one software group): two perf_event_open() calls, each refused
# without CAP_SYS_ADMIN, then made with it raised.
expect_eq "raises for the client's counters" "$(($(jq .sys_admin_raised <<<"$s") - r0))" 2
expect_eq "status paranoid" "$(jq .perf_event_paranoid <<<"$s")" 3
expect_eq "status capabilities" "$(jq .capabilities <<<"$s")" $((16#$PERFMON))
expect_sets "paranoid 3, after the client" $PERFMON $PERFMON_ADMIN $PERFMON $PERFMON $PERFMON_ADMIN
pmcctl status | grep -q "^privilege: .*raised around perf_event_open (perf_event_paranoid 3.*raised [0-9]* times" ||
	fail "pmcctl status (text): $(pmcctl status)"
stop_daemon

# 3. The unit as it was (CAP_PERFMON only) at paranoid 3: nothing counted, and said so.
start_as -all,+perfmon PMCDAEMON_TEST_PARANOID=3
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages $N $K
grep -q "Permission denied" "$TMP/out.err" ||
	fail "CAP_PERFMON only at paranoid 3: want 'Permission denied', got: $(cat "$TMP/out.err")"
pass "CAP_PERFMON only at paranoid 3 (the unit before): $(head -1 "$TMP/out.err")"
stop_daemon
