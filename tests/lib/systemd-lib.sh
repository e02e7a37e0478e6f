# Shared by the systemd-* scripts, sourced after lib.sh: the daemon run the ways
# systemd runs it, without PID 1 systemd.
[ "${PMC_WITH_SYSTEMD:-}" = ON ] || skip "built with PMC_WITH_SYSTEMD=OFF: no socket activation, no sd_notify"

# wait_for FILE REGEX [SECONDS]: until a line of FILE matches REGEX (grep -E)
wait_for() {
	for _ in $(seq $((${3:-10} * 20))); do
		grep -qE -- "$2" "$1" 2>/dev/null && return 0
		[ -z "$DAEMON_PID" ] || daemon_alive
		sleep 0.05
	done
	echo "--- $1:" >&2
	cat "$1" >&2 || true
	fail "no line matching '$2' in $1 within ${3:-10} s"
}

# stop_daemon: SIGTERM; the daemon must exit 0 with no sanitizer report (as lib.sh's
# cleanup checks), and the script goes on.
stop_daemon() {
	local rc=0
	kill -TERM "$DAEMON_PID"
	wait "$DAEMON_PID" || rc=$?
	DAEMON_PID=
	if [ "$rc" != 0 ] || grep -qE "Sanitizer|runtime error" "$TMP/daemon.log"; then
		cat "$TMP/daemon.log" >&2
		fail "pmcdaemon exited with status $rc on SIGTERM"
	fi
	pass "pmcdaemon stopped cleanly"
}

# Helpers started in the background (pmc-notify-listen): killed on exit, before lib.sh's
# cleanup, which sees the script's exit status.
BG_PIDS=()
trap 'rc_=$?; set +e; [ ${#BG_PIDS[@]} = 0 ] || kill "${BG_PIDS[@]}" 2>/dev/null; (exit $rc_); cleanup' EXIT

# The daemon is run from $TMP/bin too: the users it runs as may not reach the build tree.
cp "$PMCDAEMON_BIN" "$TMP/bin/"
chmod a+rx "$TMP/bin/pmcdaemon"
PMCDAEMON_BIN=$TMP/bin/pmcdaemon

# unit_args STATE_ROOT: the arguments that ExecStart= of pmcdaemon.service gives the
# daemon, in the array UNIT_ARGS, with STATE_ROOT for %S (/var/lib under systemd)
unit_args() {
	: "${PMC_SERVICE_UNIT:?set by ctest}"
	local line
	line=$(sed -n 's/^ExecStart=[^ ]*//p' "$PMC_SERVICE_UNIT")
	line=${line//%S/$1}
	[[ $line != *%* ]] || fail "ExecStart= has a specifier this test cannot stand for: $line"
	read -ra UNIT_ARGS <<<"$line"
}

# unit_caps: the capabilities pmcdaemon.service gives the daemon (AmbientCapabilities=, the
# same as CapabilityBoundingSet=), as setpriv names them ("-all,+perfmon,+sys_admin,..."),
# in UNIT_CAPS
unit_caps() {
	: "${PMC_SERVICE_UNIT:?set by ctest}"
	local amb bnd c
	amb=$(sed -n 's/^AmbientCapabilities=//p' "$PMC_SERVICE_UNIT")
	bnd=$(sed -n 's/^CapabilityBoundingSet=//p' "$PMC_SERVICE_UNIT")
	[ -n "$amb" ] && [ "$amb" = "$bnd" ] ||
		fail "the unit's AmbientCapabilities= ($amb) and CapabilityBoundingSet= ($bnd) differ"
	UNIT_CAPS=-all
	for c in $amb; do
		c=${c#CAP_}
		UNIT_CAPS+=",+${c,,}"
	done
}

# unit_user: DUID, a user of the daemon's own as DynamicUser= picks one (uid 61234, unused
# here), and setpriv able to give it capabilities as the unit does; else the test skips
unit_user() {
	DUID=61234
	[[ $(setpriv --help) == *--ambient-caps* ]] || skip "this setpriv has no --ambient-caps"
	setpriv --inh-caps=+perfmon true 2>/dev/null ||
		skip "setpriv does not know CAP_PERFMON (util-linux or kernel older than 5.8)"
	! id -u "$DUID" >/dev/null 2>&1 || skip "uid $DUID belongs to a user here; the test needs it unused"
}
