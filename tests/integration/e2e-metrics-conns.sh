#!/bin/bash
# pmcdaemon --metrics under a flood of idle connections. The listener keeps at most
# METRICS_MAX_CONNECTIONS (64) open: with 200 idle ones from a local user, the daemon holds
# no more than 64 of them, a scrape still succeeds at once and the log grows by a line or
# two. A connection without a request is closed after METRICS_HEADER_TIMEOUT_S (3 s). Out of file
# descriptors (EMFILE: the daemon under `ulimit -n 40`), the listener neither spins nor
# logs each failed accept(): it closes its oldest connection to make room, or pauses.
# At most METRICS_MAX_SCRAPES (4) pages are served at once: with 4 readers that asked for a
# page of 27 MB and read none of it, the fifth scrape is answered 503, the daemon's RSS grows
# by far less than a page (it writes a chunk at a time, when the last has gone), and once the
# readers are gone their scrapes are freed and a page is served again, whole.
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"

MAX_CONNECTIONS=64
HELPER=
trap 'rc=$?; set +e; [ -z "$HELPER" ] || { kill "$HELPER"; wait "$HELPER"; } 2>/dev/null; (exit $rc); cleanup' EXIT

# open_idle N: a background process (HELPER) opens N TCP connections to the page, sends
# nothing and holds them; it writes how many it opened so far to $TMP/opened
open_idle() {
	rm -f "$TMP/opened"
	(
		for ((i = 1; i <= $1; i++)); do
			exec {fd}<>"/dev/tcp/127.0.0.1/$PORT" || exit 1
			echo "$i" >"$TMP/opened"
		done
		exec sleep 120
	) &
	HELPER=$!
	for _ in $(seq 1200); do
		[ "$(cat "$TMP/opened" 2>/dev/null)" = "$1" ] && { pass "opened $1 idle connections"; return 0; }
		kill -0 "$HELPER" 2>/dev/null || fail "could not open $1 connections (got $(cat "$TMP/opened" 2>/dev/null))"
		sleep 0.05
	done
	fail "opening $1 connections took over 60 s (got $(cat "$TMP/opened" 2>/dev/null))"
}

close_idle() {
	kill "$HELPER"
	wait "$HELPER" 2>/dev/null || true
	HELPER=
}

n_fds() { ls "/proc/$DAEMON_PID/fd" | wc -l; }

# scrape_now WHAT: a GET of the page succeeds (within 30 s: a daemon that starved it would
# never answer; how long it took is printed, and judged in bench/, not here)
scrape_now() {
	local t0=$EPOCHREALTIME
	curl -sS -f --max-time 30 -o "$TMP/metrics" "http://127.0.0.1:$PORT/metrics" || fail "$1: the scrape failed"
	grep -q '^pmc_clients ' "$TMP/metrics" || fail "$1: the page lacks pmc_clients"
	pass "$1: scraped in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }') s"
}

# --- at most 64 connections ---
start_daemon --metrics 127.0.0.1:0
PORT=$(metrics_port)
scrape_now "before the flood"
base=$(n_fds)
lines=$(wc -l <"$TMP/daemon.log")
open_idle 200
# The daemon has taken all it will take once a scrape, queued behind them, is answered.
scrape_now "with 200 idle connections"
held=$(n_fds)
[ "$held" -le $((base + MAX_CONNECTIONS + 1)) ] ||
	fail "the daemon holds $((held - base)) connections, over the limit of $MAX_CONNECTIONS"
pass "the daemon holds $((held - base)) connections (at most $MAX_CONNECTIONS)"
closed=$(ss -Htn state close-wait "( dport = :$PORT )" | wc -l)
[ "$closed" -ge $((200 - MAX_CONNECTIONS)) ] || fail "only $closed of the 200 idle connections were closed"
pass "the daemon closed $closed of the idle connections"
grown=$(($(wc -l <"$TMP/daemon.log") - lines))
[ "$grown" -le 3 ] || fail "the log grew by $grown lines: $(tail -n 20 "$TMP/daemon.log")"
pass "the log grew by $grown line(s)"
grep -q "metrics: over $MAX_CONNECTIONS connections: closed" "$TMP/daemon.log" || fail "the limit was not logged"
close_idle

# A connection that sends no request is closed METRICS_HEADER_TIMEOUT_S (3 s) after its
# accept (e2e-metrics-flood: one that sends its request a byte at a time too).
exec {idle}<>"/dev/tcp/127.0.0.1/$PORT"
t0=$SECONDS
set +e
read -r -t 60 -u "$idle" _
rc=$?
set -e
exec {idle}<&-
[ "$rc" = 1 ] || fail "an idle connection was still open after 60 s (read status $rc)"
waited=$((SECONDS - t0))
# Not before its 3 s (SECONDS counts whole seconds: 2 at least); how much later a loaded
# machine closes it is no figure to check.
[ "$waited" -ge 2 ] || fail "an idle connection was closed after $waited s, before its 3 s"
pass "an idle connection was closed after $waited s"
daemon_alive
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "pmcdaemon exited with status $? on SIGTERM: $(cat "$TMP/daemon.log")"
DAEMON_PID=
! grep -qE "Sanitizer|runtime error" "$TMP/daemon.log" || fail "sanitizer report: $(cat "$TMP/daemon.log")"
mv "$TMP/daemon.log" "$TMP/daemon-1.log"

# --- out of file descriptors ---
# `ulimit -n` sets the hard limit too, which the daemon cannot raise.
bash -c 'ulimit -n 40 && exec "$@"' sh "$PMCDAEMON_BIN" --socket "$SOCK" --verbose --metrics 127.0.0.1:0 \
	2>"$TMP/daemon.log" &
DAEMON_PID=$!
# (the first daemon's log moved away above: "listening on" is this one's; its socket may be
# the last one's)
sock_up() { daemon_alive; [ -S "$SOCK" ] && grep -q "listening on" "$TMP/daemon.log"; }
wait_until "the daemon's socket" 120 sock_up
PORT=$(metrics_port)
scrape_now "under ulimit -n 40"
base=$(n_fds)
[ "$base" -le 30 ] || fail "the daemon has $base fds at start: no room to run out of them under 40"
open_idle 80
# Once it has said so, a second of its log: a daemon that retried the accept at once, again
# and again, would log (or spin) all through it. (The second is a window for a rate, not a
# wait: a slower machine only makes its log grow less.)
wait_until "the daemon to run out of fds and say so" 120 \
	grep -q "metrics: cannot accept a connection: Too many open files" "$TMP/daemon.log"
lines=$(wc -l <"$TMP/daemon.log")
sleep 1
grown=$(($(wc -l <"$TMP/daemon.log") - lines))
[ "$grown" -le 3 ] || fail "out of fds, the log grew by $grown lines in 1 s: $(tail -n 5 "$TMP/daemon.log")"
pass "out of fds, the log grew by $grown line(s) in the second after"
scrape_now "out of fds, with 80 idle connections"
close_idle
scrape_now "after the idle connections closed"
daemon_alive
kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "pmcdaemon exited with status $? on SIGTERM: $(cat "$TMP/daemon.log")"
DAEMON_PID=
mv "$TMP/daemon.log" "$TMP/daemon-2.log"

# --- scrapes at once, and readers that do not read ---
MAX_SCRAPES=4
start_daemon --metrics 127.0.0.1:0 --metrics-max-series 1000000
PORT=$(metrics_port)
# 4,000 regions of 77 series each: a page of about 27 MB, more than the sockets hold.
run_client "$TMP/raw.out" "$PMC_TEST_RAW_BIN" "$SOCK" regions 4000 0
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$DAEMON_PID/status"; }
curl -sS -f -o "$TMP/metrics" "http://127.0.0.1:$PORT/metrics" || fail "GET the big page"
page=$(stat -c %s "$TMP/metrics")
[ "$page" -gt $((16 << 20)) ] || fail "the page is only $page bytes"
page_lines=$(wc -l <"$TMP/metrics")
rss0=$(rss_kb)
holders=()
for _ in $(seq $MAX_SCRAPES); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"
	printf 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' >&"$fd"
	holders+=("$fd")
done
# The daemon takes the four requests as it gets to them (a loaded machine: later than a fixed
# second): a fifth scrape is served in full until then, and refused once the four are under
# way; never refused, it fails here.
fifth_refused() {
	[ "$(curl -s -o /dev/null -D "$TMP/headers" -w '%{http_code}' "http://127.0.0.1:$PORT/metrics")" = 503 ]
}
wait_until "a fifth scrape at once answered 503, beside $MAX_SCRAPES unread" 60 fifth_refused
pass "a fifth scrape at once = 503"
grep -qi '^retry-after: 1' "$TMP/headers" || fail "503 without Retry-After: $(cat "$TMP/headers")"
grown=$(($(rss_kb) - rss0))
echo "note: with $MAX_SCRAPES pages of $page bytes unread, the daemon's RSS grew by $grown kB"
# Under sanitizers freed memory waits in a quarantine: RSS tells nothing there.
if [ -z "${PMC_SANITIZED:-}" ]; then
	[ "$grown" -lt $((page / 1024)) ] || fail "the daemon's RSS grew by $grown kB with the pages unread (a page: $page bytes)"
	pass "the daemon's RSS grew by less than a page"
fi
grep -q "metrics: over $MAX_SCRAPES scrapes at once: answered 503" "$TMP/daemon.log" || fail "the 503 was not logged"
for fd in "${holders[@]}"; do
	exec {fd}<&-
done
# Their scrapes end as the daemon sees the connections closed, at its next write.
ok=
for _ in $(seq 1200); do
	if curl -s -f -o "$TMP/metrics" "http://127.0.0.1:$PORT/metrics"; then
		ok=1
		break
	fi
	sleep 0.1
done
[ -n "$ok" ] || fail "no page served after the readers went away"
expect_eq "lines of the page served after the readers went away" "$(wc -l <"$TMP/metrics")" "$page_lines"
daemon_alive
