#!/bin/bash
# One user cannot starve another: each attack of the trust review, made by uid 65534
# within the daemon's limits, leaves a victim (uid 65533) served and counted exactly.
. "$(dirname "$0")/../lib/lib.sh"
raw() { as_user "$PMC_TEST_RAW_BIN" "$SOCK" "$@"; }
ctl_as() { local u=$1; shift; setpriv --reuid=$u --regid=$u --clear-groups -- "$PMCCTL_BIN" --socket "$SOCK" "$@"; }
# victim OUT ARGS...: the test client as uid 65533; its pid in VICTIM_PID
victim() {
	local out=$1
	shift
	setpriv --reuid=65533 --regid=65533 --clear-groups -- "${USER_ENV[@]}" "$@" >"$out" 2>"$out.err" &
	VICTIM_PID=$!
	wait $VICTIM_PID || { cat "$out.err" >&2; fail "victim $* failed"; }
}
# victim_counted WHAT: the victim's region "pages" counted exactly (2 pages x 5)
victim_counted() {
	victim "$TMP/v" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 2 5
	expect_faults "$1: the victim's page-faults" \
		"$(region_json pages "$VICTIM_PID" | jq '.events["page-faults"].sum')" 10
}

# Connections that never say Hello: one uid alone takes all but one share of the slots (a
# share is a guarantee, not a cap: 8 less 2 kept for a newcomer), and not for long.
start_daemon --max-clients 8 --hello-timeout 2
raw silent 8 120 >"$TMP/silent" &
silent=$!
# All 8 taken by the daemon before the victim comes: the first refusal (the 7th) is logged,
# and the 8th was queued before the victim's connection.
wait_until "the daemon to refuse uid 65534's 7th silent connection" 120 \
	grep -q "holds 6 connections, past its share" "$TMP/daemon.log"
victim_counted "8 silent connections beside it"
pmcctl status >/dev/null || fail "root's status refused"
wait $silent
expect_eq "silent connections refused at once (all but a newcomer's share of 2 taken)" "$(kv refused "$TMP/silent")" 2
expect_eq "silent connections closed after --hello-timeout" "$(kv closed "$TMP/silent")" 6
grep -q "no Hello within 2 s" "$TMP/daemon.log" || fail "no log of the timeout"
grep -q "holds 6 connections, past its share (--max-clients-per-user 2)" "$TMP/daemon.log" ||
	fail "no log naming the share"
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# Regions: uid 65534's live processes take all of --max-total-regions but one share (3 of
# 12), which the victim then finds.
start_daemon --max-total-regions 12
raw regions 12 4 >"$TMP/regions" &
holder=$!
for _ in $(seq 1200); do grep -q sent "$TMP/regions" && break; sleep 0.1; done
victim "$TMP/nest" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" nested 1 3
expect_eq "the victim keeps its 3 regions" \
	"$(pmcctl query --pid "$VICTIM_PID" --format json | jq -c '[.regions[] | [.name, .count]] | sort')" \
	'[["inner",3],["outer",3],["scoped",3]]'
expect_eq "uid 65534 holds all but a share: 9" "$(ctl_as 65534 query --format json | jq '.regions | length')" 9
expect_eq "its other 3 samples dropped and counted" "$(ctl_as 65534 status --format json | jq .dropped)" 3
grep -q -- "--max-regions-per-user" "$TMP/daemon.log" || fail "no log naming the share"
# (It may have ended already: it holds its regions 4 s, which a sanitized build under load
# spends before the checks above are done; its regions stay, its process ended.)
kill $holder 2>/dev/null || true
wait $holder || true
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# Counter fds: 100 fds for the daemon leave 36 for counters, a share of 9 for each uid:
# uid 65534's 12 threads of 4 events get 6 threads (24 fds: all but a newcomer's share of
# 9, 4 fds a thread) while alone, and the victim still registers. The hog's threads hold
# their counters until $TMP/w/go (steady's F): its 6 refused threads, which retry, find no
# room while the 6 hold theirs (a 7th would make 28 > 27, 22 beside the victim), so that
# exactly 6 threads count their 40 regions each.
# (The log emptied first: the wait below must not read the last daemon's "listening on".)
: >"$TMP/daemon.log"
(ulimit -n 100 && exec "$PMCDAEMON_BIN" --socket "$SOCK" --verbose) 2>"$TMP/daemon.log" &
DAEMON_PID=$!
fd_daemon_up() { daemon_alive; [ -S "$SOCK" ] && grep -q "listening on" "$TMP/daemon.log"; }
wait_until "the fd-limited daemon to listen" 120 fd_daemon_up
EV=page-faults,task-clock,context-switches,cpu-migrations
mkdir -m 1777 "$TMP/w"
as_user env PMC_EVENTS=$EV "$PMC_TEST_CLIENT_BIN" steady 12 40 25000 "$TMP/w/go" >"$TMP/hog" 2>"$TMP/hog.err" &
hog=$!
wait_status threads 6 # the hog's, the only threads yet
victim "$TMP/vf" env PMC_EVENTS=$EV "$PMC_TEST_CLIENT_BIN" pages 2 5
expect_faults "counter fds: the victim's page-faults" \
	"$(region_json pages "$VICTIM_PID" | jq '.events["page-faults"].sum')" 10
hog_count() { ctl_as 65534 query --region steady --format json | jq '[.regions[].count] | add // 0'; }
hog_counted() { [ "$(hog_count)" -ge 240 ]; }
wait_until "the hog's 6 threads' 240 regions" 120 hog_counted
touch "$TMP/w/go"
wait $hog || fail "the hog failed: $(cat "$TMP/hog.err")"
grep -q -- "--max-fds-per-user 9" "$TMP/hog.err" || fail "the hog was not told: $(cat "$TMP/hog.err")"
expect_eq "the hog's threads counted (6 of 12 x 40 regions, past its share of 2)" "$(hog_count)" 240
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# A flood of batches, with Status calls, from two connections of uid 65534: the victim's
# registration, samples and queries are served (a Status drains only the caller's uid's
# connections, for 2 ms at most).
start_daemon --max-batch-rate 1000000
raw flood 4 >"$TMP/flood1" &
f1=$!
raw flood 4 >"$TMP/flood2" &
f2=$!
# Both floods under way (each registered and sent its first batch), then the victim.
floods_on() { [ "$(cat "$TMP/flood1" "$TMP/flood2" | grep -c '^connected$')" = 2 ]; }
wait_until "both floods connected and sending" 120 floods_on
victim_counted "beside a flood"
expect_eq "the victim's own status" "$(ctl_as 65533 status --format json | jq .samples)" 5
wait $f1 $f2 || fail "flood"
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# Threads that ended without a ThreadExit give their fds back when their uid needs them.
start_daemon --max-fds-per-user 3
out=$(raw dead-threads 5) || fail "a live thread refused beside dead ones: $out"
pass "5 threads ended unannounced, a sixth registers within a share of 3 fds"
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# Replies left unread pin at most 256 KiB of the daemon's replies, then the connection goes.
start_daemon
out=$(raw unread 3000)
expect_eq "a client that never reads is disconnected" "$(kv closed <(echo "$out"))" 1
q=$(kv queued <(echo "$out"))
[ "$q" -le $((512 * 1024)) ] || fail "$q bytes of replies queued for a client that never reads"
pass "replies left unread: $q bytes queued, then closed ($(kv sent <(echo "$out")) queries sent)"
grep -q "replies unread.*closing the connection" "$TMP/daemon.log" || fail "not logged"

# A client's own figures count for its own uid only, and its log lines are rate-limited.
raw lie 1000 >/dev/null || fail "lie"
victim_counted "after the lies"
expect_eq "the victim's status: dropped" "$(ctl_as 65533 status --format json | jq .dropped)" 0
expect_eq "the victim's status: lost" "$(ctl_as 65533 status --format json | jq .lost)" 0
expect_eq "the victim's status: its own client" "$(ctl_as 65533 status --format json | jq .samples)" 5
expect_eq "the victim's status says whose" "$(ctl_as 65533 status --format json | jq -c '[.all_users, .uid]')" '[false,65533]'
expect_eq "root's status says whose" "$(pmcctl status --format json | jq -c .all_users)" true
ctl_as 65533 status | grep -q "^figures of: *uid 65533 only" || fail "table: $(ctl_as 65533 status)"
expect_eq "the liar's own status" "$(ctl_as 65534 status --format json | jq .dropped)" 88999000
n=$(grep -c "lost by an earlier daemon" "$TMP/daemon.log" || true)
[ "$n" -le 20 ] || fail "$n log lines for one client's lies"
pass "1000 lying batches: $n log lines"
daemon_alive
kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=

# Memory: a value in every histogram block of 300 regions would take ~5 MiB; uid 65534's
# histograms stop at all but a newcomer's share (3 MiB of --max-memory 4; its share is 1),
# the rest miss the percentiles, counted, and the victim's figures are whole.
start_daemon --max-memory 4 --max-batch-rate 100000
raw spread 300 >/dev/null || fail "spread"
out=$(raw status)
b=$(kv histogram_bytes <(echo "$out"))
[ "$b" -le $((3 << 20)) ] && [ "$b" -gt $((5 << 19)) ] || fail "uid 65534's histograms hold $b bytes"
[ "$(kv histogram_missed <(echo "$out"))" -gt 0 ] || fail "no sample counted as missed: $out"
pass "uid 65534's histograms: $b bytes, $(kv histogram_missed <(echo "$out")) samples missed the percentiles"
expect_eq "its counts are whole all the same" \
	"$(ctl_as 65534 query --region s300 --format json | jq -c '.regions[] | [.count, .events["page-faults"].min, .wall_ns.min]')" \
	"[64,1,1]"
victim_counted "beside a histogram flood"
expect_eq "the victim's p50" "$(region_json pages "$VICTIM_PID" | jq '.events["page-faults"].p50')" 2
out=$(setpriv --reuid=65533 --regid=65533 --clear-groups -- "$PMC_TEST_RAW_BIN" "$SOCK" status)
expect_eq "the victim's histograms missed nothing" "$(kv histogram_missed <(echo "$out"))" 0
grep -q -- "--max-memory-per-user" "$TMP/daemon.log" || fail "not logged"
daemon_alive
