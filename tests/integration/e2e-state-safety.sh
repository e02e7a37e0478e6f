#!/bin/bash
# --state FILE where another user could interfere (the daemon runs as root): a directory
# others can write is refused at start; FILE.tmp as a symbolic link to a root-owned file,
# as a FIFO, as a file of uid 65534, is refused (at start, and at a save while running:
# the daemon neither follows nor removes what it did not create, and the target is
# unchanged); FILE as a FIFO makes start-up fail at once, not hang; FILE of uid 65534 or
# writable by others is not loaded. The layout systemd makes for pmcdaemon.service
# (StateDirectory= under DynamicUser=: a symlinked directory of the daemon's own uid, 0700)
# is accepted.
. "$(dirname "$0")/../lib/lib.sh"
command -v timeout >/dev/null || skip "timeout (coreutils) is missing"
status_of() { pmcctl status --format json | jq -r ".$1"; }
N=0

# start_fails WHAT REGEX ARGS...: the daemon must exit non-zero within 10 s (not hang)
# and log a line matching REGEX (grep -E).
start_fails() {
	local what=$1 re=$2 rc=0
	shift 2
	N=$((N + 1))
	# SIGKILL: a daemon stuck in open() of a FIFO has its SIGTERM handler installed already.
	timeout -s KILL 10 "$PMCDAEMON_BIN" --socket "$TMP/fail$N.sock" "$@" >"$TMP/fail.log" 2>&1 || rc=$?
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		grep -q "listening on" "$TMP/fail.log" && fail "$what: the daemon started: $(cat "$TMP/fail.log")"
		fail "$what: the daemon hung at start: $(cat "$TMP/fail.log")"
	fi
	[ "$rc" != 0 ] || fail "$what: the daemon started: $(cat "$TMP/fail.log")"
	grep -qE -- "$re" "$TMP/fail.log" || fail "$what: no line matching '$re' in: $(cat "$TMP/fail.log")"
	pass "$what: refused (exit $rc): $(grep -E -- "$re" "$TMP/fail.log" | head -1)"
}

# wait_log REGEX [N]: until the daemon's log has N lines (1) matching REGEX (60 s: a save
# every second, on a loaded machine)
wait_log() {
	for _ in $(seq 1200); do
		[ "$(grep -cE -- "$1" "$TMP/daemon.log" || true)" -ge "${2:-1}" ] && return 0
		daemon_alive
		sleep 0.05
	done
	fail "no ${2:-1} lines matching '$1' in the daemon's log in 60 s: $(cat "$TMP/daemon.log")"
}

# saved_after NS: until the daemon reports a save later than NS (60 s)
saved_after() {
	for _ in $(seq 1200); do
		[ "$(status_of state_saved_ns)" -gt "$1" ] && return 0
		sleep 0.05
	done
	fail "no state saved after $1 in 60 s: $(cat "$TMP/daemon.log")"
}

# 1. A directory other users can write, or that another user owns: refused at start,
#    with the directory, its owner and mode, and the fix; nothing written there.
for mode in 1777 0777 0775 0757 0770; do
	d=$TMP/open-$mode
	mkdir "$d" && chmod "$mode" "$d"
	start_fails "directory of mode $mode" \
		"$d: refusing this directory for the state file: it is owned by uid 0 and has mode $mode.*such as /var/lib/pmcdaemon with mode 0755" \
		--state "$d/state"
	[ -z "$(ls -A "$d")" ] || fail "files were created in $d: $(ls -A "$d")"
done
mkdir "$TMP/theirs" && chown 65534:65534 "$TMP/theirs"
start_fails "directory owned by uid 65534" "$TMP/theirs: .*owned by uid 65534 and has mode 0755" \
	--state "$TMP/theirs/state"

# 2. In a safe directory (root's, 0755): FILE.tmp, planted, is never written through.
SAFE=$TMP/safe
mkdir -m 0755 "$SAFE"
STATE=$SAFE/state
printf 'precious\n' >"$TMP/victim"
chmod 0644 "$TMP/victim"
victim_ok() { [ "$(cat "$TMP/victim")" = precious ] && [ "$(stat -c '%u %a %s' "$TMP/victim")" = "0 644 9" ] ||
	fail "$1: the victim file changed: $(stat -c '%u %a %s' "$TMP/victim") $(cat "$TMP/victim")"; }
ln -s "$TMP/victim" "$STATE.tmp"
start_fails "FILE.tmp a symlink to a root-owned file" \
	"$STATE.tmp is a symbolic link owned by uid 0, not a temporary file the daemon \(uid 0\) left: refusing" \
	--state "$STATE"
victim_ok "symlink at start"
[ -L "$STATE.tmp" ] || fail "the symlink was removed"
pass "the daemon refuses: it neither follows nor removes the link"
rm "$STATE.tmp"
ln -s "$TMP/created" "$STATE.tmp"
start_fails "FILE.tmp a dangling symlink" "$STATE.tmp is a symbolic link" --state "$STATE"
[ ! -e "$TMP/created" ] || fail "the dangling symlink's target was created"
rm "$STATE.tmp"
mkfifo -m 0600 "$STATE.tmp"
start_fails "FILE.tmp a FIFO" "$STATE.tmp is a FIFO" --state "$STATE"
rm "$STATE.tmp"
printf 'theirs' >"$STATE.tmp"
chown 65534:65534 "$STATE.tmp"
start_fails "FILE.tmp a file of uid 65534" "$STATE.tmp is a regular file owned by uid 65534" --state "$STATE"
[ "$(stat -c '%u %s' "$STATE.tmp")" = "65534 6" ] || fail "the file of uid 65534 was changed"
rm "$STATE.tmp"
# A stale one of the daemon's own (a save that died): removed, and the daemon starts.
printf 'stale' >"$STATE.tmp"
start_daemon --state "$STATE" --state-interval 1
wait_log "listening on"
[ ! -e "$STATE.tmp" ] || fail "the stale FILE.tmp of the daemon's own is still there"
pass "a stale FILE.tmp of the daemon's own is removed at start"

# ... and while the daemon runs: the periodic save (a child process) refuses, logs it, and
# goes through again once the link is gone; the daemon serves on.
saved_after 0
# Planted between two saves: a save under way holds FILE.tmp for a moment (ln fails "File
# exists": a sanitized daemon's soak once), gone once it is renamed.
plant() { ln -s "$TMP/victim" "$STATE.tmp" 2>/dev/null; }
wait_until "FILE.tmp planted between two periodic saves" 60 plant
wait_log "$STATE.tmp is a symbolic link owned by uid 0, not a temporary file"
wait_log "cannot save the state to $STATE \(the previous one is kept\): File exists"
# A second periodic save refused as well (not a fixed 1.2 s that a loaded machine outlasts).
wait_log "cannot save the state to $STATE \(the previous one is kept\): File exists" 2
victim_ok "symlink while running"
[ -L "$STATE.tmp" ] || fail "the symlink was removed while running"
daemon_alive
pass "a periodic save with FILE.tmp a symlink: refused and logged, the victim unchanged"
rm "$STATE.tmp"
saved_after "$(date +%s%N)"
pass "saves go on once the link is gone"
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "daemon exit status on SIGTERM: $(cat "$TMP/daemon.log")"
DAEMON_PID=
expect_eq "state file owner and mode" "$(stat -c '%u %a %F' "$STATE")" "0 600 regular file"
cp -a "$STATE" "$TMP/good"

# 3. FILE itself: a FIFO (start-up fails at once), a symlink, another user's file, a
#    file others may write: none is loaded.
rm "$STATE"
mkfifo -m 0600 "$STATE"
start_fails "FILE a FIFO" "$STATE is a FIFO, not a state file" --state "$STATE"
rm "$STATE"
ln -s "$TMP/good" "$STATE"
start_fails "FILE a symlink" "$STATE is a symbolic link: refusing" --state "$STATE"
rm "$STATE"
cp -a "$TMP/good" "$STATE"
chown 65534:65534 "$STATE"
start_fails "FILE owned by uid 65534" "$STATE is owned by uid 65534 with mode 0600: only a file of the daemon's own uid" \
	--state "$STATE"
chown 0:0 "$STATE"
chmod 0666 "$STATE"
start_fails "FILE of mode 0666" "$STATE is owned by uid 0 with mode 0666" --state "$STATE"
chmod 0600 "$STATE"
start_daemon --state "$STATE"
wait_log "listening on"
grep -q "restored" "$TMP/daemon.log" || fail "the daemon's own file was not restored: $(cat "$TMP/daemon.log")"
pass "the daemon's own file, 0600, is restored"
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "daemon exit status on SIGTERM"
DAEMON_PID=

# 4. pmcdaemon.service's layout: StateDirectory= under DynamicUser= is a symlink
#    /var/lib/pmcdaemon -> private/pmcdaemon, a directory of the service's uid, 0700.
DUID=61234
! id -u "$DUID" >/dev/null 2>&1 || skip "uid $DUID belongs to a user here; the test needs it unused"
cp "$PMCDAEMON_BIN" "$TMP/bin/" && chmod a+rx "$TMP/bin/pmcdaemon"
mkdir -p "$TMP/private/pmcdaemon" "$TMP/lib" "$TMP/run"
chown "$DUID:$DUID" "$TMP/private/pmcdaemon" "$TMP/run"
chmod 0700 "$TMP/private/pmcdaemon"
ln -s ../private/pmcdaemon "$TMP/lib/pmcdaemon"
setpriv --reuid="$DUID" --regid="$DUID" --clear-groups -- "$TMP/bin/pmcdaemon" \
	--socket "$TMP/run/pmc.sock" --state "$TMP/lib/pmcdaemon/state" --verbose >"$TMP/daemon.log" 2>&1 &
DAEMON_PID=$!
SOCK=$TMP/run/pmc.sock
wait_log "listening on $SOCK"
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "the daemon as uid $DUID: exit status on SIGTERM: $(cat "$TMP/daemon.log")"
DAEMON_PID=
expect_eq "DynamicUser= layout: state file owner and mode" \
	"$(stat -c '%u %a' "$TMP/private/pmcdaemon/state")" "$DUID 600"
