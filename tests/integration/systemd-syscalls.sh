#!/bin/bash
# pmcdaemon.service's SystemCallFilter= allows every system call the daemon makes: the
# daemon runs under strace with the unit's ExecStart= arguments, user and capabilities
# (capset, which it lowers CAP_SYS_ADMIN with, is in @privileged), socket-activated and
# notifying a watchdog as under systemd, serves pmcctl and a uid-65534 client, saves its
# state and stops; each call it made must be in @system-service or perf_event_open, and
# in no group of SystemCallFilter=~ (a call outside the filter kills the service with
# SIGSYS).
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/systemd-lib.sh"
: "${PMC_NOTIFY_LISTEN_BIN:?set by ctest}"
command -v strace >/dev/null || skip "strace is missing"
command -v systemd-analyze >/dev/null || skip "systemd-analyze is missing (Debian package systemd)"
command -v systemd-socket-activate >/dev/null || skip "systemd-socket-activate is missing"
strace -f -qq -o /dev/null true 2>/dev/null || skip "strace cannot trace here (no ptrace)"
# The sanitizer runtimes make system calls of their own, and LeakSanitizer cannot run
# under ptrace: the plain build's run of this test is the one that counts.
[ -z "${PMC_SANITIZED:-}" ] || skip "a sanitized daemon: its runtime's system calls are not the daemon's"
UNIT=$(dirname "$0")/../../systemd/pmcdaemon.service.in
[ -f "$UNIT" ] || fail "no $UNIT"

# expand GROUP|CALL...: the system calls named, groups expanded recursively
expand() {
	local g
	for g in "$@"; do
		case $g in
		@*) expand $(systemd-analyze syscall-filter "$g" 2>/dev/null |
			awk 'NR > 1 && $1 !~ /^#/ && NF == 1 {print $1}') ;;
		*) echo "$g" ;;
		esac
	done
}
# The unit's SystemCallFilter= lines in order, as systemd merges them: the first (an allow
# list) sets the calls allowed; each later line takes its calls out (~) or puts them back.
: >"$TMP/allow"
n=0
while read -r line; do
	n=$((n + 1))
	# shellcheck disable=SC2086 # lists of names
	case $n:$line in
	1:~*) fail "the unit's first SystemCallFilter= is a deny list: $line" ;;
	*:~*) expand ${line#\~} | sort -u >"$TMP/less" && comm -23 "$TMP/allow" "$TMP/less" >"$TMP/next" ;;
	*) { cat "$TMP/allow" && expand $line; } | sort -u >"$TMP/next" ;;
	esac
	mv "$TMP/next" "$TMP/allow"
done < <(sed -n 's/^SystemCallFilter=//p' "$UNIT")
[ "$n" -gt 0 ] || fail "no SystemCallFilter= in the unit"
[ "$(wc -l <"$TMP/allow")" -gt 100 ] || fail "could not expand the filter"
grep -qx perf_event_open "$TMP/allow" || fail "perf_event_open is not allowed"

# As the unit runs it: a user of its own with the unit's capabilities (unit_caps).
unit_user
unit_caps
mkdir -p "$TMP/state/pmcdaemon"
chown "$DUID:$DUID" "$TMP/state/pmcdaemon"
chmod 0700 "$TMP/state/pmcdaemon"
unit_args "$TMP/state"
NOTIFY=$TMP/notify.sock
"$PMC_NOTIFY_LISTEN_BIN" "$NOTIFY" 100 >"$TMP/notify.out" 2>&1 &
BG_PIDS+=($!)
for _ in $(seq 2400); do [ -S "$NOTIFY" ] && break; sleep 0.05; done
chmod 0666 "$NOTIFY" # the daemon's uid sends to it, as systemd lets the unit's do
NOTIFY_SOCKET=$NOTIFY WATCHDOG_USEC=200000 strace -f -qq -o "$TMP/strace" \
	systemd-socket-activate --seqpacket -l "$SOCK" -E NOTIFY_SOCKET -E WATCHDOG_USEC \
	setpriv --reuid="$DUID" --regid="$DUID" --clear-groups --no-new-privs \
	--inh-caps="$UNIT_CAPS" --ambient-caps="$UNIT_CAPS" --bounding-set="$UNIT_CAPS" -- \
	"$PMCDAEMON_BIN" "${UNIT_ARGS[@]}" --verbose >"$TMP/daemon.log" 2>&1 &
STRACE_PID=$!
BG_PIDS+=("$STRACE_PID")
wait_for "$TMP/daemon.log" "Listening on $SOCK" 20
chmod 0666 "$SOCK" # as SocketMode=0666 does: uid 65534 connects too
# The first connection starts the daemon: strace's child runs socket-activate, then
# pmcdaemon (the same pid). Not a child of this shell: stopped by hand below.
D=$(pmcctl status --format json | jq .pid)
[ -n "$D" ] || fail "pmcctl status: no pid"
BG_PIDS+=("$D")
wait_for "$TMP/notify.out" "READY=1"
run_client "$TMP/out" env PMC_EVENTS=page-faults,task-clock "$PMC_TEST_CLIENT_BIN" threads 2 3 20
expect_eq "client enabled" "$(kv enabled "$TMP/out")" 1
pmcctl query --format json >/dev/null
pmcctl dump --format csv >/dev/null
pmcctl events >/dev/null
pmcctl reset >/dev/null
run_client "$TMP/bad" "$PMC_TEST_RAW_BIN" "$SOCK" garbage
wait_for "$TMP/notify.out" "WATCHDOG=1"
kill -TERM "$D"
# strace exits with the status of the command it ran.
rc=0
wait "$STRACE_PID" || rc=$?
if [ "$rc" != 0 ] || grep -qE "Sanitizer|runtime error" "$TMP/daemon.log"; then
	cat "$TMP/daemon.log" >&2
	fail "pmcdaemon exited with status $rc on SIGTERM"
fi
pass "pmcdaemon stopped cleanly"

# The calls made once the daemon runs: from its execve on (systemd installs the filter
# just before it).
awk '!seen && /execve\(".*pmcdaemon"/ {seen = 1} seen' "$TMP/strace" |
	sed -nE 's/^[0-9]+ +([a-z0-9_]+)\(.*$/\1/p' | sort -u >"$TMP/made"
[ "$(wc -l <"$TMP/made")" -gt 20 ] || fail "strace saw too few calls: $(cat "$TMP/made")"
grep -qx perf_event_open "$TMP/made" || fail "strace did not see perf_event_open"
grep -qx capset "$TMP/made" || fail "strace did not see capset (the unit's capabilities lowered)"
missing=$(comm -23 "$TMP/made" "$TMP/allow" | tr '\n' ' ')
[ -z "$missing" ] || fail "system calls outside SystemCallFilter=: $missing"
pass "all $(wc -l <"$TMP/made") system calls the daemon made are allowed by the unit"
