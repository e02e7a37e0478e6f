# Shared by the integration scripts: start a real pmcdaemon as root on a temporary
# socket, run clients as an unprivileged user (uid 65534), and compare JSON with jq.
# Exit 77 (skipped) where this cannot run: not root, no setpriv/jq, no perf_event.
set -euo pipefail

: "${PMCDAEMON_BIN:?set by ctest}" "${PMCCTL_BIN:?set by ctest}"

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }

[ "$(id -u)" = 0 ] || skip "needs root to run the daemon and switch to uid 65534"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is missing"
command -v jq >/dev/null || skip "jq is missing"
if [ "$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo 4)" -gt 3 ]; then
	skip "perf_event_open is disabled (perf_event_paranoid > 3)"
fi

TMP=$(mktemp -d /tmp/pmc-test.XXXXXX)
chmod 755 "$TMP"
# Named, so that the daemon's log can be found after a test that ctest killed at its time-out
# (tests/run.sh --soak prints it).
echo "# temporary directory: $TMP"
SOCK=$TMP/pmc.sock
DAEMON_PID=
HELPER_PIDS=()
# The daemon must stop cleanly on SIGTERM: exit 0, and no sanitizer report.
cleanup() {
	local rc=$? drc=0 p
	for p in "${HELPER_PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [ -n "$DAEMON_PID" ]; then
		# Resumed first where a test stopped it (SIGSTOP) and ended before it resumed it.
		kill -CONT "$DAEMON_PID" 2>/dev/null
		kill -TERM "$DAEMON_PID" 2>/dev/null
		wait "$DAEMON_PID" 2>/dev/null || drc=$?
		if [ "$drc" != 0 ] || grep -qE "Sanitizer|runtime error" "$TMP/daemon.log"; then
			echo "FAIL: pmcdaemon exited with status $drc on SIGTERM:" >&2
			cat "$TMP/daemon.log" >&2
			rc=1
		fi
	fi
	# A failed test shows what its daemons said: the last one's log, and those of any it
	# started before (start_daemon keeps them in daemon.earlier.log).
	if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
		for f in "$TMP/daemon.earlier.log" "$TMP/daemon.log"; do
			[ -s "$f" ] || continue
			echo "--- $f (its last 300 lines) ---" >&2
			tail -n 300 "$f" >&2
		done
	fi
	rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT

# uid 65534 may not be able to reach the build tree (a checkout under /root): run its
# programs from a copy in $TMP, with the library found through LD_LIBRARY_PATH.
mkdir "$TMP/bin"
for b in PMC_EXAMPLE_BIN PMC_TEST_CLIENT_BIN PMC_TEST_RAW_BIN PMCCTL_BIN; do
	[ -n "${!b:-}" ] || continue
	cp "${!b}" "$TMP/bin/"
	printf -v "$b" '%s' "$TMP/bin/$(basename "${!b}")"
done
[ -n "${PMC_CLIENT_LIB:-}" ] && cp -a "$(dirname "$PMC_CLIENT_LIB")"/libpmcclient.so* "$TMP/bin/"
chmod -R a+rX "$TMP/bin"
USER_ENV=(env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$SOCK")
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" "$@"; }

start_daemon() {
	if [ -s "$TMP/daemon.log" ]; then
		{ echo "=== an earlier pmcdaemon of this test"; cat "$TMP/daemon.log"; } >>"$TMP/daemon.earlier.log"
	fi
	# Emptied here, not by the new daemon's redirect: the wait below must not read the last
	# daemon's "listening on" (a killed one leaves its socket too) before that child runs.
	: >"$TMP/daemon.log"
	"$PMCDAEMON_BIN" --socket "$SOCK" --verbose "$@" 2>"$TMP/daemon.log" &
	DAEMON_PID=$!
	# Ready once it says so: the socket exists a moment before its signal handlers do.
	for _ in $(seq 2400); do
		[ -S "$SOCK" ] && grep -q "listening on" "$TMP/daemon.log" && return 0
		kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$TMP/daemon.log" >&2; fail "pmcdaemon exited at start"; }
		sleep 0.05
	done
	fail "pmcdaemon did not create $SOCK"
}

# start_helper OUT READY CMD...: CMD in the background, its output in OUT, ready once OUT has
# the line READY; stopped at exit (pmc-fake-daemon and the like)
start_helper() {
	local out=$1 ready=$2
	shift 2
	"$@" >"$out" 2>&1 &
	HELPER_PIDS+=($!)
	for _ in $(seq 2400); do
		grep -qx "$ready" "$out" && return 0
		sleep 0.05
	done
	fail "$* did not start: $(cat "$out")"
}

daemon_alive() { kill -0 "$DAEMON_PID" 2>/dev/null || { cat "$TMP/daemon.log" >&2; fail "pmcdaemon died"; }; }

# daemon_fds: how many fds the daemon holds now
daemon_fds() { find "/proc/$DAEMON_PID/fd" -mindepth 1 -maxdepth 1 | wc -l; }
# expect_daemon_fds WHAT WANT: the daemon's fd count comes back to WANT (60 s at most)
expect_daemon_fds() {
	for _ in $(seq 600); do
		[ "$(daemon_fds)" = "$2" ] && break
		daemon_alive
		sleep 0.1
	done
	expect_eq "$1" "$(daemon_fds)" "$2"
}

# start_fuse_hold: mount pmc-test-fuse-hold ($PMC_TEST_FUSE_BIN) on $TMP/fuse (its one file:
# $TMP/fuse/f, whose flush is never answered; its output in $TMP/fuse.out, its pid in
# $FUSE); skips where FUSE cannot be mounted
start_fuse_hold() {
	local rc
	mkdir "$TMP/fuse"
	"$PMC_TEST_FUSE_BIN" "$TMP/fuse" >"$TMP/fuse.out" 2>&1 &
	FUSE=$!
	HELPER_PIDS+=($FUSE) # first: the other helpers' exits wait for it
	for _ in $(seq 2400); do
		grep -qx mounted "$TMP/fuse.out" && break
		kill -0 $FUSE 2>/dev/null || { wait $FUSE && rc=0 || rc=$?; [ "$rc" = 77 ] && skip "no FUSE here: $(cat "$TMP/fuse.out")"; fail "fuse-hold: $(cat "$TMP/fuse.out")"; }
		sleep 0.05
	done
	grep -qx mounted "$TMP/fuse.out" || fail "fuse-hold did not mount: $(cat "$TMP/fuse.out")"
}

# fuse_attach WHO CMD...: CMD (pmc-test-identity, run as WHO) attaches $TMP/fuse/f twice to a
# Status, in the background (its exit waits for the file's close): checks that its connection
# is closed and the next client served, and that the daemon tries to close the file
fuse_attach() {
	local who=$1
	shift
	"$@" "$SOCK" attach "$TMP/fuse/f" >"$TMP/attach.out" 2>&1 &
	HELPER_PIDS+=($!)
	for _ in $(seq 2400); do grep -q "^verdict:" "$TMP/attach.out" && break; sleep 0.05; done
	expect_eq "two never-closing files attached to a Status by $who: closed, and the next client served" "$(sed -n 's/^verdict: //p' "$TMP/attach.out")" pass
	for _ in $(seq 2400); do grep -q "^flush" "$TMP/fuse.out" && break; sleep 0.05; done
	grep -q "^flush" "$TMP/fuse.out" || fail "the daemon never tried to close the file: $(cat "$TMP/fuse.out")"
	pass "the daemon's closer thread waits on the file's flush"
}

pmcctl() { "$PMCCTL_BIN" --socket "$SOCK" "$@"; }

# wait_status FIELD MIN: until `pmcctl status`'s FIELD is at least MIN (120 s), else fail
wait_status() {
	for _ in $(seq 2400); do
		[ "$(pmcctl status --format json | jq ".$1")" -ge "$2" ] && return 0
		sleep 0.05
	done
	fail "status $1 never reached $2: $(pmcctl status --format json | jq ".$1")"
}

# query_json REGION PID: the JSON object of one region of one process
region_json() {
	pmcctl query --region "$1" --pid "$2" --format json | jq -e --arg r "$1" '.regions[] | select(.name == $r)'
}

# expect_eq WHAT GOT WANT
expect_eq() { [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"; pass "$1 = $3"; }

# run_client OUT ARGS...: run the test client as uid 65534, keep its pid and output
run_client() {
	local out=$1
	shift
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" "$@" >"$out" 2>"$out.err" &
	local pid=$!
	wait "$pid" || { cat "$out.err" >&2; fail "client $* failed"; }
	CLIENT_PID=$pid
	# RUN_CLIENT_TAKEN=1: then until the daemon took its hang-up (hangups_taken, below), for a
	# test whose clients run one at a time and whose figures are read after each.
	[ -z "${RUN_CLIENT_TAKEN:-}" ] || hangups_taken
}
kv() { sed -n "s/^$1=//p" "$2"; }

# hangups_taken: waits (120 s at most) until the daemon holds no client but the pmcctl asking:
# clients that ended may have left what they sent queued in their sockets for a daemon behind
# them (the library waits for room in the queue, not for the daemon to read it); a
# connection's hang-up comes after its last batch, so then all of it is counted, and what
# the hang-ups count as lost too.
no_clients() { [ "$(pmcctl status --format json | jq '.threads == 0 and .clients <= 1')" = true ]; }
hangups_taken() { daemon_alive; wait_until "the daemon to take the clients' hang-ups" 120 no_clients; }
# slot_free: until a connection of its own was served and closed by the daemon, its hang-up
# taken: against a daemon with --max-clients 1, before each connection, which is refused as a
# second client while the daemon has not taken the last one's hang-up yet (pmcctl's included).
status_closed() { "$PMC_TEST_RAW_BIN" "$SOCK" status-closed >/dev/null 2>&1; }
slot_free() { daemon_alive; wait_until "the daemon to take the last connection's hang-up" 120 status_closed; }

# wait_until WHAT SECONDS CMD...: until CMD succeeds (every 0.1 s), at most SECONDS (generous:
# a loaded machine, a sanitized build), failing with WHAT if it never did. A wait on an event,
# where a fixed sleep would guess how long it takes.
wait_until() {
	local what=$1 secs=$2
	shift 2
	for _ in $(seq $((secs * 10))); do
		"$@" && return 0
		sleep 0.1
	done
	"$@" || fail "waited $secs s for $what"
}

# expect_faults WHAT GOT WANT: exact, except under sanitizers, whose shadow memory
# faults in pages of its own inside the regions: one byte of shadow for 8 bytes touched, so
# GOT may exceed WANT by an eighth, + 8 (1,538-1,539 for 1,500 fresh pages is usual).
expect_faults() {
	if [ -n "${PMC_SANITIZED:-}" ]; then
		[ "$2" -ge "$3" ] && [ "$2" -le $(($3 + $3 / 8 + 8)) ] ||
			fail "$1: got '$2', want '$3' (sanitized build: up to 1/8 + 8 more)"
		pass "$1 = $2 (want $3; sanitized build)"
	else
		expect_eq "$1" "$2" "$3"
	fi
}

# load_programs N REGIONS: N copies of pmc-test-raw under N process names (raw-01 ...), each
# defining REGIONS regions of one run as uid 65534, all at once, and a second process of
# raw-01: checks that the registry then holds (N + 1) * REGIONS regions.
load_programs() {
	local n=$1 regions=$2 i p pids=()
	for i in $(seq -w 1 "$n"); do
		cp "$PMC_TEST_RAW_BIN" "$TMP/bin/raw-$i"
	done
	chmod a+rx "$TMP/bin"/raw-*
	for i in $(seq -w 1 "$n") 01; do
		as_user "$TMP/bin/raw-$i" "$SOCK" regions "$regions" 0 >"$TMP/raw-$i.out" 2>&1 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p" || fail "pmc-test-raw regions $regions failed: $(cat "$TMP"/raw-*.out)"
	done
	expect_eq "regions in the registry" "$(pmcctl status --format json | jq .regions)" \
		$(((n + 1) * regions))
}

# metrics_port: the port of a daemon started with --metrics 127.0.0.1:0, from its log
metrics_port() {
	local port
	for _ in $(seq 2400); do
		port=$(sed -n 's|^.*serving metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$TMP/daemon.log")
		[ -n "$port" ] && { echo "$port"; return 0; }
		daemon_alive
		sleep 0.05
	done
	fail "pmcdaemon did not log the address of its metrics page"
}

# start_prometheus CONFIG: a real Prometheus (Debian's package) on a free loopback port,
# its data in $TMP; sets PROM_URL and PROM_PID (the caller stops it at exit). Prometheus
# cannot be told to pick a free port: a few random ones are tried.
start_prometheus() {
	PROM_URL=
	for _ in 1 2 3 4 5; do
		local port=$((20000 + RANDOM % 40000))
		rm -rf "$TMP/prom-data"
		prometheus --config.file="$1" --storage.tsdb.path="$TMP/prom-data" \
			--web.listen-address="127.0.0.1:$port" >"$TMP/prometheus.log" 2>&1 &
		PROM_PID=$!
		for _ in $(seq 1200); do
			curl -sf -o /dev/null "http://127.0.0.1:$port/-/ready" && { PROM_URL=http://127.0.0.1:$port; break; }
			kill -0 "$PROM_PID" 2>/dev/null || break
			sleep 0.1
		done
		[ -n "$PROM_URL" ] && return 0
		kill "$PROM_PID" 2>/dev/null || true
		wait "$PROM_PID" 2>/dev/null || true
		PROM_PID=
		grep -q "address already in use" "$TMP/prometheus.log" || { cat "$TMP/prometheus.log" >&2; fail "prometheus did not start"; }
	done
	fail "prometheus found no free port in 5 tries"
}

# promql QUERY: the value of the query's first sample of $PROM_URL, empty while there is none;
# evaluated at the instant $PROM_TIME (Unix seconds) where set, else now
promql() {
	local at=()
	[ -z "${PROM_TIME:-}" ] || at=(--data-urlencode "time=$PROM_TIME")
	curl -sf --get --data-urlencode "query=$1" "${at[@]}" "$PROM_URL/api/v1/query" | jq -r '.data.result[0].value[1] // empty'
}

# burst_accounted P T K PIDS...: e2e-burst's figures for P clients (PIDS, their outputs in
# $TMP/bN.out and .err) of T threads of K regions each: every sample counted or counted lost,
# by a client that says why. A thread whose registration the daemon did not answer within
# the library's 2 s (it is behind 200 registrations, slower still under sanitizers or on a
# loaded machine) runs unprofiled for a while, its regions dropped and counted
# ("unregistered"), and its process says so on stderr; a process whose Hello was not
# answered in time says that profiling is disabled until the daemon answers (its regions
# meanwhile: "no-daemon", or said at its exit when no batch could carry them); a process
# whose last samples the daemon took nothing of for 2 s leaves them counted lost ("unsent").
# Nothing else may go: no sample dropped for a full buffer (the library waits for room), none
# missing from every figure. Sets BURST_SAID: the clients that said so.
burst_accounted() {
	local p=$1 t=$2 k=$3 i pid got lost said s q
	shift 3
	hangups_taken
	s=$(pmcctl status --format json)
	echo "status: $(jq -c '{samples, batches, dropped, lost, losses}' <<<"$s")"
	expect_eq "losses of other reasons than a registration or Hello not answered in time, or samples not taken at exit" \
		"$(jq -c '.losses // {} | del(.unregistered, .["no-daemon"], .unsent)' <<<"$s")" '{}'
	q=$(pmcctl query --region burst --format json)
	BURST_SAID=0
	for i in $(seq "$p"); do
		pid=$1
		shift
		got=$(jq --argjson p "$pid" '[.regions[] | select(.pid == $p) | .count] | add // 0' <<<"$q")
		lost=$(jq --argjson p "$pid" '[.losses[]? | select(.pid == $p) | .count] | add // 0' <<<"$q")
		# What no daemon got, said at its exit (libpmcclient's pmc__atexit()).
		said=$(sed -n 's/^pmc: at exit, \([0-9]*\) samples not sent and \([0-9]*\) dropped reached no pmcdaemon.*/\1 \2/p' "$TMP/b$i.err" | head -1)
		[ -z "$said" ] || lost=$((lost + ${said% *} + ${said#* }))
		if [ "$lost" = 0 ] && [ "$got" = $((t * k)) ]; then
			[ "$(kv enabled "$TMP/b$i.out")" = 1 ] || fail "client $i: not enabled: $(cat "$TMP/b$i.err")"
			[ ! -s "$TMP/b$i.err" ] || fail "client $i said, though nothing of it was lost: $(cat "$TMP/b$i.err")"
			continue
		fi
		# Each line one of the library's words for a thread or a connection not answered in
		# time; a client that lost only samples at exit (unsent) may say nothing.
		if grep -v -e "not profiled for now: pmcdaemon did not answer its registration within" \
			-e "not profiled for now: pmcdaemon took no request for" \
			-e "profiling disabled: no answer from pmcdaemon" \
			-e "^pmc: at exit, [0-9]* samples not sent and [0-9]* dropped reached no pmcdaemon" "$TMP/b$i.err" >&2; then
			fail "client $i said more than that it was not answered in time"
		fi
		[ ! -s "$TMP/b$i.err" ] || BURST_SAID=$((BURST_SAID + 1))
		if [ $((got + lost)) != $((t * k)) ]; then
			# Only a process that never reached the daemon (its Hello not answered in time,
			# and none since) has regions in no figure: it said that profiling was disabled.
			[ "$got" = 0 ] && [ "$lost" = 0 ] && grep -q "profiling disabled: no answer from pmcdaemon" "$TMP/b$i.err" ||
				fail "client $i (pid $pid): $got counted and $lost counted lost (or said lost at exit) of $((t * k)): $(cat "$TMP/b$i.err")"
			pass "client $i: never answered, profiling disabled (it said so): $(head -c 300 "$TMP/b$i.err")"
			continue
		fi
		pass "client $i: $got counted, $lost counted lost ($(jq -c --argjson p "$pid" '[.losses[]? | select(.pid == $p) | {(.reason): .count}] | add' <<<"$q"); said at exit: ${said:-none}): $(head -c 300 "$TMP/b$i.err")"
	done
	pass "every sample of $p clients counted or counted lost; $BURST_SAID said they were not answered in time"
}
