#!/bin/bash
# Versions that mix (README, "Versions"): the library, pmcctl and pmcdaemon of an earlier
# commit, built from this repository's history, against today's, both ways. An application
# linked with the old library, run against today's daemon, and one linked with today's
# library against the old daemon each count exactly the page faults their regions cause
# (N fresh pages written per call, K calls; T threads), say nothing on stderr, and lose
# nothing; pmcctl of either side reads either daemon's figures, and today's pmcctl run says
# in one line what the old daemon cannot do. The state file survives an upgrade and a
# downgrade, and a program of either library running across them (SIGTERM, the other
# version started on the same socket) is counted whole.
#
# OLD: the 0.1.0 line, the oldest this release promises to mix with: 058cae9 (3 Dec 2026),
# the last tree before 0.2.0's additions to the wire (pidfds with RegisterThread, heads
# tables, run tags, losses by reason 20-22), against which today's library, before it asked
# the daemon what it takes, was not profiled at all ("registering with pmcdaemon failed:
# Connection reset by peer": that daemon closes a connection whose request carries an fd).
OLD=058cae9
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_SOURCE_DIR:?set by ctest}" "${PMC_BUILD_DIR:?set by ctest}"
git -C "$PMC_SOURCE_DIR" cat-file -e "$OLD^{commit}" 2>/dev/null ||
	skip "commit $OLD is not in this clone's history (a shallow clone? git fetch --unshallow)"

# The old tree's four programs, built once and kept in the build tree by commit: the old
# CMake project configured, and only pmcdaemon, pmcctl, libpmcclient and its test client
# built (about a minute on two cores; then nothing). A lock keeps two runs from building it
# at once.
full=$(git -C "$PMC_SOURCE_DIR" rev-parse "$OLD^{commit}")
CACHE=$PMC_BUILD_DIR/version-mix/$full
mkdir -p "$PMC_BUILD_DIR/version-mix"
exec 9>"$PMC_BUILD_DIR/version-mix/lock"
flock 9
if [ ! -f "$CACHE/built" ]; then
	rm -rf "$CACHE"
	mkdir -p "$CACHE/src"
	git -C "$PMC_SOURCE_DIR" archive "$full" | tar -x -C "$CACHE/src"
	echo "building $OLD in $CACHE (once)"
	{
		"${CMAKE_COMMAND:-cmake}" -S "$CACHE/src" -B "$CACHE/build" -DPMC_WERROR=OFF \
			-DPMC_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
			"${CMAKE_COMMAND:-cmake}" --build "$CACHE/build" -j2 \
				--target pmcdaemon pmcctl pmcclient pmc-test-client
	} >"$CACHE/build.log" 2>&1 || { tail -30 "$CACHE/build.log" >&2; fail "building $OLD"; }
	touch "$CACHE/built"
fi
flock -u 9
O=$TMP/old
mkdir "$O"
cp "$CACHE/build/daemon/pmcdaemon" "$CACHE/build/client/pmcctl" \
	"$CACHE/build/tests/pmc-test-client" "$O/"
cp -a "$CACHE/build/client/"libpmcclient.so* "$O/"
chmod -R a+rX "$O"
OLD_V=$("$O/pmcdaemon" --version) NEW_V=$("$PMCDAEMON_BIN" --version)
OLD_V=${OLD_V#pmcdaemon } NEW_V=${NEW_V#pmcdaemon }
echo "old: $OLD, $OLD_V; new: $NEW_V"
# The old test client loads the old library (LD_LIBRARY_PATH before its RUNPATH).
OLD_CLIENT=(env LD_LIBRARY_PATH="$O" "$O/pmc-test-client")
lib=$(LD_LIBRARY_PATH="$O" ldd "$O/pmc-test-client" | awk '$1 ~ /^libpmcclient/ {print $3}')
expect_eq "the old client's library" "$lib" "$O/libpmcclient.so.0"

N=8 K=40 T=4
# expect_pages WHAT PMCCTL PID REGION COUNT FAULTS: REGION of PID as PMCCTL reads it
expect_pages() {
	local c= f=
	read -r c f < <("$2" --socket "$SOCK" query --pid "$3" --format json |
		jq -r --arg r "$4" '.regions[] | select(.name == $r) |
			[.count, .events["page-faults"].sum] | @tsv') || true
	expect_eq "$1: $4: count" "${c:-none}" "$5"
	expect_faults "$1: $4: page-faults" "${f:-0}" "$6"
}
# check WHO CLIENT...: runs CLIENT pages and threads as uid 65534 with page-faults, each
# exact, in the figures of today's pmcctl and the old one, nothing on stderr, nothing lost
check() {
	local who=$1 ctl v
	shift
	run_client "$TMP/p" env PMC_EVENTS=page-faults "$@" pages $N $K
	[ ! -s "$TMP/p.err" ] || fail "$who, pages: stderr: $(cat "$TMP/p.err")"
	pid=$CLIENT_PID
	run_client "$TMP/t" env PMC_EVENTS=page-faults "$@" threads $T $N $K
	[ ! -s "$TMP/t.err" ] || fail "$who, threads: stderr: $(cat "$TMP/t.err")"
	for ctl in "$PMCCTL_BIN" "$O/pmcctl"; do
		v=$("$ctl" --version)
		expect_pages "$who, $v" "$ctl" "$pid" pages $K $((N * K))
		expect_pages "$who, $v, $T threads" "$ctl" "$CLIENT_PID" mt-pages $((T * K)) $((T * N * K))
		expect_eq "$who, $v: samples lost" \
			"$("$ctl" --socket "$SOCK" query --format json | jq -c '[.losses[]?]')" "[]"
		"$ctl" --socket "$SOCK" status >"$TMP/status" 2>&1 ||
			fail "$who: $v status: $(cat "$TMP/status")"
	done
	expect_eq "$who: threads registered" \
		"$(grep -c "pid $CLIENT_PID: registered thread" "$TMP/daemon.log")" $((T + 1))
}

# stop_daemon WHO: SIGTERM, exit status 0 (the state file written)
stop_daemon() {
	daemon_alive
	kill -TERM "$DAEMON_PID"
	wait "$DAEMON_PID" || fail "$1 exited with $? on SIGTERM: $(cat "$TMP/daemon.log")"
	DAEMON_PID=
}
# kept WHAT PID REGION COUNT FAULTS: a process's figures, read by today's pmcctl after a restart
kept() { expect_pages "$1" "$PMCCTL_BIN" "$2" "$3" "$4" "$5"; }

# Today's library against the old daemon, which keeps a state file.
PMCDAEMON_BIN=$O/pmcdaemon start_daemon --state "$TMP/state"
check "libpmcclient $NEW_V with pmcdaemon $OLD_V ($OLD)" "$PMC_TEST_CLIENT_BIN"
b_pages=$pid b_threads=$CLIENT_PID
# What cannot work: today's pmcctl run asks the old daemon for no whole-program counters
# (it would close the connection), says so in one line naming both versions, and counts the
# command's regions all the same.
PMC_EVENTS=page-faults pmcctl run --format json -- "$PMC_TEST_CLIENT_BIN" pages $N $K \
	>"$TMP/run.json" 2>"$TMP/run.err" || fail "pmcctl run with pmcdaemon $OLD_V: $(cat "$TMP/run.err")"
expect_eq "pmcctl $NEW_V run with pmcdaemon $OLD_V: stderr" "$(grep -v '^[a-z_]*=' "$TMP/run.err")" \
	"pmcctl: run: no whole-program figures: pmcdaemon $OLD_V counts no whole command (pmcctl $NEW_V's run needs pmcdaemon 0.2.0 or later); the regions are counted"
read -r c f < <(jq -r '.regions[] | select(.name == "pages") |
	[.count, .events["page-faults"].sum] | @tsv' "$TMP/run.json") || true
expect_eq "pmcctl $NEW_V run with pmcdaemon $OLD_V: pages: count" "${c:-none}" $K
expect_faults "pmcctl $NEW_V run with pmcdaemon $OLD_V: pages: page-faults" "${f:-0}" $((N * K))
stop_daemon "pmcdaemon $OLD_V"
# Upgraded: today's daemon reads the old one's state file; then the old library against it.
start_daemon --state "$TMP/state"
kept "pmcdaemon $OLD_V's figures after the upgrade to $NEW_V" "$b_pages" pages $K $((N * K))
kept "pmcdaemon $OLD_V's figures after the upgrade to $NEW_V" "$b_threads" mt-pages \
	$((T * K)) $((T * N * K))
check "libpmcclient $OLD_V ($OLD) with pmcdaemon $NEW_V" "${OLD_CLIENT[@]}"
a_pages=$pid
stop_daemon "pmcdaemon $NEW_V"
# Downgraded: the old daemon reads today's state file.
PMCDAEMON_BIN=$O/pmcdaemon start_daemon --state "$TMP/state"
kept "after the downgrade to pmcdaemon $OLD_V, $NEW_V's figures" "$a_pages" pages $K $((N * K))
kept "after the downgrade to pmcdaemon $OLD_V, $OLD_V's own figures" "$b_pages" pages $K $((N * K))
stop_daemon "pmcdaemon $OLD_V"

# Programs that run on while the daemon is upgraded and downgraded under them (SIGTERM,
# the next started on the same socket and state file): each library reconnects to each
# daemon, sends what it holds there (the count grows on each), and every one of its T x SK
# regions, one fresh page each, is in the figures at the end, none lost or dropped.
ST=4 SK=6000
# steady_count PID: the region "steady" of PID as today's pmcctl reads it (0: none yet)
steady_count() {
	pmcctl query --region steady --pid "$1" --format json | jq '[.regions[].count] | add // 0'
}
# wait_more WHAT PID N: until region steady of PID counts more than N (60 s at most)
wait_more() {
	for _ in $(seq 600); do
		[ "$(steady_count "$2")" -gt "$3" ] && return 0
		kill -0 "$2" 2>/dev/null || fail "$1: the program ended before the daemon had more than $3 of its regions"
		sleep 0.1
	done
	fail "$1: no more than $3 of its regions after 60 s"
}
# across WHO D1 D2 D3 CLIENT...: CLIENT steady under daemon binary D1, then D2, then D3
across() {
	local who=$1 cpid n=0 d
	local ds=("$2" "$3" "$4")
	shift 4
	PMCDAEMON_BIN=${ds[0]} start_daemon --state "$TMP/state"
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" \
		PMC_EVENTS=page-faults "$@" steady $ST $SK 1000 >"$TMP/s.out" 2>"$TMP/s.err" &
	cpid=$!
	for d in 0 1 2; do
		if [ $d -gt 0 ]; then
			stop_daemon "$("${ds[d - 1]}" --version)"
			PMCDAEMON_BIN=${ds[d]} start_daemon --state "$TMP/state"
		fi
		wait_more "$who, under $("${ds[d]}" --version)" $cpid "$n"
		n=$(steady_count $cpid)
		pass "$who: $n regions counted under $("${ds[d]}" --version)"
	done
	wait $cpid || fail "$who: the program failed: $(cat "$TMP/s.err")"
	expect_eq "$who: the program's regions" "$(kv count "$TMP/s.out")" $((ST * SK))
	expect_eq "$who: counted across the restarts" "$(steady_count $cpid)" $((ST * SK))
	expect_faults "$who: page-faults" "$(region_json steady $cpid | jq '.events["page-faults"].sum')" \
		$((ST * SK))
	expect_eq "$who: [lost, dropped]" "$(pmcctl status --format json | jq -c '[.lost, .dropped]')" "[0,0]"
	stop_daemon "$("${ds[2]}" --version)"
	rm -f "$TMP/state"
}
NEW_BIN=$PMCDAEMON_BIN
across "libpmcclient $NEW_V, pmcdaemon $OLD_V, $NEW_V, $OLD_V" "$O/pmcdaemon" "$NEW_BIN" \
	"$O/pmcdaemon" "$PMC_TEST_CLIENT_BIN"
across "libpmcclient $OLD_V, pmcdaemon $NEW_V, $OLD_V, $NEW_V" "$NEW_BIN" "$O/pmcdaemon" \
	"$NEW_BIN" "${OLD_CLIENT[@]}"
