#!/bin/bash
# 10,000 registered threads of one process, 4 software events each (40,000 counter fds in
# the daemon, and as many in the process), all alive at once: every thread registers, its
# one region writing N fresh pages counts exactly N page faults, and the daemon's status
# shows every thread. Raises RLIMIT_NOFILE (as root) for the daemon and the process, and
# passes the daemon --max-threads and --max-fds-per-user (defaults: 1024, and a quarter of
# its fd limit less 64). Prints the daemon's RSS, registrations per second and the daemon's
# CPU time per registration (no thresholds). Where the hard RLIMIT_NOFILE cannot be raised
# far enough (setrlimit needs CAP_SYS_RESOURCE for that), it runs what fits instead, and
# says so: all the threads with as many events as fit, then as many threads as fit with all
# 4 events. PMC_SCALE_THREADS and PMC_SCALE_PAGES change T (10,000) and N (4).
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_TEST_THREADS_SCALE_BIN:?set by ctest}"
cp "$PMC_TEST_THREADS_SCALE_BIN" "$TMP/bin/"
chmod a+rx "$TMP/bin/$(basename "$PMC_TEST_THREADS_SCALE_BIN")"
PROG=$TMP/bin/$(basename "$PMC_TEST_THREADS_SCALE_BIN")

# Under sanitizers, 2,000 (each thread costs ~50 KiB of the daemon's shadow memory and
# ~5 ms to register there): the 10,000 are for the plain build.
if [ -n "${PMC_SANITIZED:-}" ]; then
	T=${PMC_SCALE_THREADS:-2000}
else
	T=${PMC_SCALE_THREADS:-10000}
fi
N=${PMC_SCALE_PAGES:-4}
ALL_EVENTS=(page-faults task-clock context-switches cpu-migrations)
E=${#ALL_EVENTS[@]}
RESERVE=1000 # fds besides the counters, in the daemon and in the process

# Counter fds: the daemon keeps one of each it passes, and the process holds its own.
NOFILE=$((T * E + RESERVE))
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=$((1 << 30))
if [ "$hard" -lt $NOFILE ] && [ "$(cat /proc/sys/fs/nr_open)" -ge $NOFILE ] &&
	ulimit -Hn $NOFILE 2>/dev/null; then
	hard=$NOFILE
fi
[ "$hard" -ge $NOFILE ] || echo "note: RLIMIT_NOFILE's hard limit is $hard and cannot be raised here" \
	"(setrlimit needs CAP_SYS_RESOURCE to raise it): $T threads x $E events need $NOFILE"
[ $((hard - RESERVE)) -ge "$T" ] || skip "RLIMIT_NOFILE's hard limit $hard holds no $T counter fds"
ulimit -Sn $((hard < NOFILE ? hard : NOFILE))
# The threads of uid 65534 (RLIMIT_NPROC counts them) and of the machine.
for opt in -Hu -Su; do
	[ "$(ulimit $opt)" = unlimited ] || [ "$(ulimit $opt)" -ge $((T + 1000)) ] ||
		ulimit $opt $((T + 1000)) || skip "RLIMIT_NPROC $(ulimit $opt) is under $((T + 1000))"
done
now=$(awk '{ split($4, a, "/"); print a[2] }' /proc/loadavg) # threads on the machine
for lim in /proc/sys/kernel/threads-max /proc/sys/kernel/pid_max; do
	[ "$(cat $lim)" -ge $((now + T + 1000)) ] || skip "$lim is $(cat $lim): too few for $T more threads"
done
echo "note: RLIMIT_NOFILE $(ulimit -Sn) (hard $(ulimit -Hn)) for the daemon and the process;" \
	"RLIMIT_NPROC $(ulimit -Su)"

rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$DAEMON_PID/status"; }
cpu_ns() { awk '{ print $1 }' "/proc/$DAEMON_PID/schedstat"; }
# wait_for KEY: until the program prints KEY (its output line), while it runs
wait_for() {
	for _ in $(seq 3000); do
		grep -q "^$1" "$TMP/out" && return 0
		kill -0 "$CPID" 2>/dev/null || { cat "$TMP/out.err" >&2; fail "the program exited before '$1'"; }
		daemon_alive
		sleep 0.05
	done
	cat "$TMP/out.err" >&2
	fail "no '$1' from the program in 150 s"
}

# run_scale T E: a fresh daemon; one process of T threads with the first E events each
run_scale() {
	local t=$1 e=$2 events
	events=$(IFS=,; echo "${ALL_EVENTS[*]:0:$e}")
	echo "# $t threads x $e event(s) ($events), $N fresh pages each"
	# Not --verbose (lib.sh's start_daemon): a log line per registration would be counted
	# in the daemon's CPU time per registration.
	"$PMCDAEMON_BIN" --socket "$SOCK" --max-threads "$t" --max-fds-per-user $((t * e)) \
		2>"$TMP/daemon.log" &
	DAEMON_PID=$!
	for _ in $(seq 2400); do
		[ -S "$SOCK" ] && grep -q "listening on" "$TMP/daemon.log" && break
		daemon_alive
		sleep 0.05
	done
	grep -q "listening on" "$TMP/daemon.log" || fail "pmcdaemon did not start"

	rm -rf "$TMP/ctl"
	mkdir "$TMP/ctl"
	chmod 755 "$TMP/ctl"
	# setpriv and env exec: $! is the program's pid.
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" PMC_EVENTS="$events" \
		PMC_FLUSH_MS=0 "$PROG" "$t" "$N" "$TMP/ctl" >"$TMP/out" 2>"$TMP/out.err" &
	CPID=$!
	# lib.sh's cleanup ends it when the test fails first: 10,000 threads left orphaned (and
	# busy) would weigh on every test after.
	HELPER_PIDS+=($CPID)
	wait_for created=
	local rss0 rss1 rss2 c0 c1 s j ns
	rss0=$(rss_kb)
	c0=$(cpu_ns)
	touch "$TMP/ctl/go"
	wait_for registered_ns=
	c1=$(cpu_ns)
	rss1=$(rss_kb)
	wait_for "done"
	rss2=$(rss_kb)
	[ ! -s "$TMP/out.err" ] || fail "the program said: $(head -c 2000 "$TMP/out.err")"
	expect_eq "threads enabled (registered with the daemon)" "$(kv enabled "$TMP/out")" "$t"
	expect_eq "threads whose sample could not be sent" "$(kv flush_failed "$TMP/out")" 0

	# Each thread's sample is queued, not yet read (a Status drains a running client for
	# 300 us): until the daemon counted t samples (120 s at most); counts only grow.
	for _ in $(seq 1200); do
		s=$(pmcctl status --format json)
		[ "$(jq ".samples >= $t" <<<"$s")" = true ] && break
		sleep 0.1
	done
	expect_eq "threads registered, all alive at once" "$(jq .threads <<<"$s")" "$t"
	expect_eq "samples" "$(jq .samples <<<"$s")" "$t"
	expect_eq "dropped" "$(jq .dropped <<<"$s")" 0
	expect_eq "lost" "$(jq .lost <<<"$s")" 0
	j=$(pmcctl query --pid $CPID --region scale --format json | jq -e '.regions[0]') ||
		fail "no region scale"
	expect_eq "runs of region scale" "$(jq .count <<<"$j")" "$t"
	# Under sanitizers, each thread's first touch of its shadow memory may fault inside the
	# region too (up to one page a thread): at least the pages written, at most one more.
	if [ -n "${PMC_SANITIZED:-}" ]; then
		pf=$(jq '.events["page-faults"].sum' <<<"$j")
		[ "$pf" -ge $((t * N)) ] && [ "$pf" -le $((t * (N + 1))) ] ||
			fail "page-faults of region scale: got $pf, want $((t * N)) to $((t * (N + 1))) (sanitized build)"
		pass "page-faults of region scale = $pf (want $((t * N)) to $((t * (N + 1))); sanitized build)"
	else
		expect_eq "page-faults of region scale, over every thread" \
			"$(jq '.events["page-faults"].sum' <<<"$j")" $((t * N))
	fi
	[ -n "${PMC_SANITIZED:-}" ] || expect_eq "page-faults per run (min, max)" \
		"$(jq -c '[.events["page-faults"].min, .events["page-faults"].max]' <<<"$j")" "[$N,$N]"
	expect_eq "events counted" "$(jq -c '.events | keys | length' <<<"$j")" "$e"

	ns=$(kv registered_ns "$TMP/out")
	echo "note: $t threads x $e event(s): registered in" \
		"$(awk -v n="$ns" 'BEGIN { printf "%.3f", n / 1e9 }') s," \
		"$(awk -v n="$ns" -v t="$t" 'BEGIN { printf "%.0f", t / (n / 1e9) }') registrations/s;" \
		"daemon CPU $(awk -v c="$((c1 - c0))" -v t="$t" 'BEGIN { printf "%.1f", c / t / 1e3 }') us" \
		"per registration; daemon RSS $rss0 kB before, $rss1 kB registered, $rss2 kB with the" \
		"samples ($(awk -v a="$rss0" -v b="$rss2" -v t="$t" 'BEGIN { printf "%.2f", (b - a) / t }') KiB" \
		"per thread); $(kv flush_eagain "$TMP/out") pmc_flush() calls found the daemon's queue full" \
		"(retried)"

	touch "$TMP/ctl/exit"
	wait "$CPID" || { cat "$TMP/out.err" >&2; fail "the program failed"; }
	grep -q '^exited' "$TMP/out" || fail "the program did not end its threads"
	for _ in $(seq 2400); do
		[ "$(pmcctl status --format json | jq .threads)" = 0 ] && break
		sleep 0.05
	done
	expect_eq "threads held after the process exited" "$(pmcctl status --format json | jq .threads)" 0
	echo "note: daemon RSS $(rss_kb) kB after the process exited (its figures kept)"
	daemon_alive
	kill -TERM "$DAEMON_PID"
	local rc=0
	wait "$DAEMON_PID" || rc=$?
	DAEMON_PID=
	[ $rc = 0 ] || { cat "$TMP/daemon.log" >&2; fail "pmcdaemon exited with status $rc on SIGTERM"; }
}

if [ "$hard" -ge $NOFILE ]; then
	run_scale "$T" "$E"
else
	# What fits: all T threads with as many events as fit, then as many threads as fit
	# with all E events. Neither is the T x E asked for.
	e=$(((hard - RESERVE) / T))
	run_scale "$T" $((e < E ? e : E))
	t=$(((hard - RESERVE) / E / 100 * 100))
	[ "$t" -ge 100 ] && run_scale "$t" "$E"
	echo "note: NOT RUN: $T threads x $E events (RLIMIT_NOFILE $hard, under the $NOFILE needed)"
fi
