#!/bin/bash
# A thread that cannot take its counter fds (the process at its RLIMIT_NOFILE) runs
# unprofiled on its own: its regions are counted as dropped (reason fd-limit), one line on
# stderr says so, and the process's other threads and its connection go on, counted
# exactly. Both ways in: the library sees there is no room before it asks (many threads
# under ulimit -n 64), and a reply whose fds do not fit (MSG_CTRUNC). The daemon holds
# fds for the profiled threads only.
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_TEST_FDLIMIT_BIN:?set by ctest}"
cp "$PMC_TEST_FDLIMIT_BIN" "$TMP/bin/"
APP=$TMP/bin/$(basename "$PMC_TEST_FDLIMIT_BIN")
chmod a+rx "$APP"
EV=page-faults,task-clock,context-switches,cpu-migrations

start_daemon

# The app's uid: one no other test uses. The kernel charges fds in flight in AF_UNIX
# sockets to the sending uid, and refuses an SCM_RIGHTS send (ETOOMANYREFS) once that uid's,
# machine-wide, pass the sender's RLIMIT_NOFILE: 64 here. As uid 65534, the fds that other
# processes of that uid on the machine had in flight (other tests spraying fds, run by
# another ctest beside the soak's) failed its registration's pidfd: "Too many references".
APP_UID=65531
# run_case NAME ARGS...: the app as uid APP_UID under ulimit -n 64; checks what the daemon
# holds while its threads live, then lets them end and checks the figures.
run_case() {
	local name=$1 out=$TMP/$1.out
	shift
	rm -f "$TMP/go"
	mkfifo "$TMP/go"
	setpriv --reuid=$APP_UID --regid=$APP_UID --clear-groups -- "${USER_ENV[@]}" PMC_EVENTS=$EV \
		bash -c 'ulimit -n 64 && exec "$@"' _ "$APP" "$@" <"$TMP/go" >"$out" 2>"$out.err" &
	local pid=$!
	exec 3>"$TMP/go"
	for _ in $(seq 1200); do
		grep -q '^ready$' "$out" && break
		kill -0 $pid 2>/dev/null || { exec 3>&-; cat "$out.err" >&2; fail "$name: the app ended early"; }
		sleep 0.1
	done
	grep -q '^ready$' "$out" || fail "$name: the app never got ready: $(cat "$out.err")"
	local profiled unprofiled
	profiled=$(kv profiled "$out") unprofiled=$(kv unprofiled "$out")
	pass "$name: $profiled threads profiled, $unprofiled not"
	[ "$unprofiled" -gt 0 ] || fail "$name: every thread got its fds: the case tests nothing"
	[ "$profiled" -gt 0 ] || fail "$name: no thread got its fds"
	# The main thread and the profiled ones, none for the others (all alive now).
	expect_eq "$name: threads the daemon holds" "$(pmcctl status --format json | jq .threads)" \
		$((profiled + 1))
	echo go >&3
	exec 3>&-
	wait $pid || { cat "$out.err" >&2; fail "$name: the app failed"; }
	local j
	j=$(region_json fd $pid)
	expect_eq "$name: region fd, count" "$(jq .count <<<"$j")" "$(kv fd_count "$out")"
	expect_faults "$name: region fd, page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" \
		"$(kv fd_page_faults "$out")"
	expect_eq "$name: region main, count" "$(region_json main $pid | jq .count)" 1
	expect_eq "$name: samples not counted, by reason" \
		"$(pmcctl query --pid $pid --format json | jq -c '[.losses[] | [.reason, .count]]')" \
		"[[\"fd-limit\",$(kv dropped "$out")]]"
	expect_eq "$name: connections (never dropped)" \
		"$(grep -c "pid $pid (uid $APP_UID): connected" "$TMP/daemon.log")" 1
	expect_eq "$name: stderr lines" "$(wc -l <"$out.err")" 1
	grep -q "reason fd-limit" "$out.err" || fail "$name: stderr: $(cat "$out.err")"
	pass "$name: its line: $(cat "$out.err")"
	expect_eq "$name: threads held after exit" "$(pmcctl status --format json | jq .threads)" 0
}

# 1. 40 threads at once under 64 fds, 4 events each: room for some of them only.
run_case threads threads 40 3 2
# 2. The reply's fds cut short (MSG_CTRUNC), then a thread registers as usual.
run_case ctrunc ctrunc 3 2
expect_eq "connections closed for malformed input" "$(pmcctl status --format json | jq .rejected)" 0
daemon_alive
