#!/bin/bash
# The daemon with the privileges pmcdaemon.service gives it: a user of its own (here
# uid 61234, in systemd's DynamicUser= range), CAP_PERFMON as its only capability
# (AmbientCapabilities= and CapabilityBoundingSet=), NoNewPrivileges=. It serves a
# client of another user, uid 65534, with exact page faults: perf_event_open on that
# user's threads, and reading its /proc/PID/stat and /proc/PID/task/TID, work with
# CAP_PERFMON alone. The same daemon without CAP_PERFMON is refused by the kernel.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/systemd-lib.sh"
unit_user

# The daemon creates its socket in a directory of its own.
mkdir "$TMP/run" && chown "$DUID:$DUID" "$TMP/run"
SOCK=$TMP/run/pmc.sock
USER_ENV=(env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$SOCK")

# The unit's StateDirectory=, as systemd makes it for the service's user.
mkdir -p "$TMP/state/pmcdaemon"
chown "$DUID:$DUID" "$TMP/state/pmcdaemon"
chmod 0700 "$TMP/state/pmcdaemon"
unit_args "$TMP/state"

# start_as CAPS: the daemon as uid $DUID holding CAPS ("-all,+perfmon" or "-all"), with
# the arguments of the unit's ExecStart=
start_as() {
	: >"$TMP/daemon.log" # the last daemon's "listening on" is not this one's
	setpriv --reuid="$DUID" --regid="$DUID" --clear-groups --no-new-privs \
		--inh-caps="$1" --ambient-caps="$1" --bounding-set="$1" -- \
		"$PMCDAEMON_BIN" "${UNIT_ARGS[@]}" --socket "$SOCK" --verbose >"$TMP/daemon.log" 2>&1 &
	DAEMON_PID=$!
	wait_for "$TMP/daemon.log" "listening on $SOCK"
}

start_as -all,+perfmon
st=/proc/$DAEMON_PID/status
expect_eq "daemon uid" "$(awk '/^Uid:/ {print $2 $3 $4 $5}' "$st")" "$DUID$DUID$DUID$DUID"
# CAP_PERFMON is bit 38.
for set in CapPrm CapEff CapAmb CapBnd; do
	expect_eq "daemon $set" "$(awk -v s="$set:" '$1 == s {print $2}' "$st")" 0000004000000000
done
expect_eq "daemon NoNewPrivs" "$(awk '/^NoNewPrivs:/ {print $2}' "$st")" 1

N=5 K=40
run_client "$TMP/out" env PMC_EVENTS=page-faults,task-clock "$PMC_TEST_CLIENT_BIN" pages $N $K
expect_eq "client enabled" "$(kv enabled "$TMP/out")" 1
[ ! -s "$TMP/out.err" ] || fail "client warned: $(cat "$TMP/out.err")"
j=$(region_json pages "$CLIENT_PID")
expect_eq "count" "$(jq .count <<<"$j")" $K
expect_eq "client uid" "$(jq .uid <<<"$j")" 65534
# comm comes from the client's /proc/PID/stat, read by the daemon's uid.
expect_eq "client comm" "$(jq -r .comm <<<"$j")" pmc-test-client
expect_faults "page-faults sum" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))
expect_faults "page-faults min" "$(jq '.events["page-faults"].min' <<<"$j")" $N
if [ -z "${PMC_SANITIZED:-}" ]; then
	expect_eq "page-faults max" "$(jq '.events["page-faults"].max' <<<"$j")" $N
fi
# The daemon with CAP_PERFMON alone still grants no more than the kernel would: a
# setuid-root process is not counted for the user who started it.
install -o root -m 4755 "$(command -v sleep)" "$TMP/bin/suid-sleep"
if as_user "$TMP/bin/suid-sleep" 0 2>/dev/null; then
	out=$(as_user "$PMC_TEST_RAW_BIN" "$SOCK" exec-then-register "$TMP/bin/suid-sleep") ||
		fail "CAP_PERFMON daemon: setuid target not refused: $out"
	pass "CAP_PERFMON daemon refuses a setuid target: $(grep message= <<<"$out")"
fi
stop_daemon

# The state file the unit names, written by that user, brings the figures back.
st_file=$(ls "$TMP"/state/pmcdaemon/*)
expect_eq "state file owner and mode" "$(stat -c '%u %a' "$st_file")" "$DUID 600"
start_as -all,+perfmon
j=$(region_json pages "$CLIENT_PID")
expect_eq "count after a restart" "$(jq .count <<<"$j")" $K
expect_faults "page-faults after a restart" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))
stop_daemon

# Without CAP_PERFMON the kernel refuses to count another user's threads: the
# capability above is what made it work, and all it takes.
start_as -all
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages $N $K
grep -q "Permission denied" "$TMP/out.err" ||
	fail "without CAP_PERFMON: want a 'Permission denied' warning, got: $(cat "$TMP/out.err")"
grep -q "pmcdaemon runs without CAP_PERFMON" "$TMP/out.err" ||
	fail "the client is not told why: $(cat "$TMP/out.err")"
grep -q "without CAP_PERFMON: the kernel lets this daemon count only its own user's threads" \
	"$TMP/daemon.log" || fail "no warning at start: $(cat "$TMP/daemon.log")"
pass "without CAP_PERFMON: $(head -1 "$TMP/out.err")"
expect_eq "no samples without CAP_PERFMON" \
	"$(pmcctl query --pid "$CLIENT_PID" --format json | jq '[.regions[] | select(.name == "pages") | .count] | add // 0')" 0
stop_daemon
