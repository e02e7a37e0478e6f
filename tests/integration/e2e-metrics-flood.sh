#!/bin/bash
# The metrics page under a connection flood from a hostile local user: idle connections,
# partial requests, requests with a wrong token and headers over the 16 KiB limit, opened
# as fast as one shell can, 150 held at once. A connection whose request passed the token
# check is never closed to make room for another (the flood had kept the real scraper from
# ever getting the page: 0 of 13-16 scrapes complete), so each of 5 slow scrapes with the
# token (curl --limit-rate: a 13 MB page, more than the sockets hold, over about 2 s, while the flood opens
# thousands of connections) gets the whole page. The flood's connections are closed: past
# the 64 kept, or after METRICS_HEADER_TIMEOUT_S (3 s) without an authorized request,
# however slowly they send; a 401 closes its connection.
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"

FLOOD=
trap 'rc=$?; set +e; [ -z "$FLOOD" ] || { kill "$FLOOD"; wait "$FLOOD"; } 2>/dev/null; (exit $rc); cleanup' EXIT

TOKEN=flood-test-token-0123456789
printf '%s\n' "$TOKEN" >"$TMP/token"
chmod 600 "$TMP/token"
start_daemon --metrics 127.0.0.1:0 --metrics-token-file "$TMP/token" --metrics-max-series 1000000
PORT=$(metrics_port)
REGIONS=2000
run_client "$TMP/raw.out" "$PMC_TEST_RAW_BIN" "$SOCK" regions $REGIONS 0

# scrape OUT: the whole page, read slowly, with the token
scrape() {
	curl -sS -f --max-time 60 --limit-rate 8M -H "Authorization: Bearer $TOKEN" -o "$1" \
		"http://127.0.0.1:$PORT/metrics" 2>"$1.err"
}
scrape "$TMP/before" || fail "scrape before the flood: $(cat "$TMP/before.err")"
LINES=$(wc -l <"$TMP/before")
expect_eq "regions on the page before the flood" "$(grep -c '^pmc_region_count_total{' "$TMP/before")" $REGIONS

# The flood: a background shell that opens connections of the 4 kinds in turn, as fast as
# it can, keeping the last 150 open; it writes how many it opened every 100.
flood() {
	trap '' PIPE
	local fds=() k=0 fd big
	big=$(head -c 20000 /dev/zero | tr '\0' a)
	while :; do
		exec {fd}<>"/dev/tcp/127.0.0.1/$PORT" 2>/dev/null || continue
		case $((k % 4)) in
		0) ;;
		1) printf 'GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ' >&"$fd" 2>/dev/null || true ;;
		2) printf 'GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n' >&"$fd" 2>/dev/null || true ;;
		3) printf 'GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: %s' "$big" >&"$fd" 2>/dev/null || true ;;
		esac
		fds+=("$fd")
		k=$((k + 1))
		if [ ${#fds[@]} -gt 150 ]; then
			eval "exec ${fds[0]}<&-"
			fds=("${fds[@]:1}")
		fi
		[ $((k % 100)) != 0 ] || { echo "$k" >"$TMP/flood.tmp" && mv "$TMP/flood.tmp" "$TMP/flood.n"; }
	done
}
flood &
FLOOD=$!
# The flood's pace is the machine's: waited for (500 connections), and the scrapes go on until
# it opened 200 more beside them (5 at least), rather than asking it for a rate.
flooded() { [ "$(cat "$TMP/flood.n" 2>/dev/null || echo 0)" -ge "$1" ]; }
wait_until "the flood's first 500 connections" 120 flooded 500
n0=$(cat "$TMP/flood.n")
pass "the flood is on ($n0 connections opened)"

complete=0 i=0
while [ $i -lt 5 ] || ! flooded $((n0 + 200)); do
	i=$((i + 1))
	[ $i -le 1000 ] || fail "the flood opened only $(($(cat "$TMP/flood.n") - n0)) connections beside 1000 scrapes"
	if scrape "$TMP/m" && [ "$(wc -l <"$TMP/m")" = "$LINES" ] &&
		[ "$(grep -c '^pmc_region_count_total{' "$TMP/m")" = $REGIONS ]; then
		complete=$((complete + 1))
	else
		echo "scrape $i: $(cat "$TMP/m.err"), $(wc -l <"$TMP/m" 2>/dev/null) of $LINES lines"
	fi
done
echo "note: the flood opened $(($(cat "$TMP/flood.n") - n0)) connections during the $i scrapes"
expect_eq "complete pages of $i scrapes under the flood" $complete $i
daemon_alive
kill "$FLOOD"
wait "$FLOOD" 2>/dev/null || true
FLOOD=
grep -q "metrics: over 64 connections: closed .* without an authorized request" "$TMP/daemon.log" ||
	fail "the evictions were not logged: $(tail -n 20 "$TMP/daemon.log")"
pass "the evictions were logged"

# A partial request that sends a byte a second is closed 3 s after its accept, not kept
# alive by its bytes (evhttp's time-out counts from the last byte).
trap '' PIPE
exec {slow}<>"/dev/tcp/127.0.0.1/$PORT"
t0=$SECONDS
closed=
# (30 bytes: ten times its 3 s, for a daemon slow to get to it on a loaded machine)
for i in $(seq 30); do
	printf 'G' >&"$slow" 2>/dev/null || { closed=1; break; }
	sleep 1
done
exec {slow}<&-
[ -n "$closed" ] || fail "a partial request sending a byte a second was still open after 30 s"
waited=$((SECONDS - t0))
pass "a partial request sending a byte a second was closed within $waited s"
# The page is served whole after the flood.
scrape "$TMP/after" || fail "scrape after the flood: $(cat "$TMP/after.err")"
expect_eq "lines of the page after the flood" "$(wc -l <"$TMP/after")" "$LINES"
