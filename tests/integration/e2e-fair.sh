#!/bin/bash
# No user may hold the daemon's loop. A whole (not streamed) Query over more regions than one
# reply holds is refused as soon as its reply would pass the cap, with the daemon's peak
# memory (VmHWM) near the cap, not the size of the whole (before: built whole, then refused:
# hundreds of MB). A small one is built part by part and arrives whole and exact. Beside a
# hog uid streaming histogram queries, asking whole ones and flooding batches from many
# connections, a victim uid's Hello, registration, Status and queries are all answered and
# its figures exact. Prints the daemon's memory and the victim's round trips (no thresholds
# on time: bench/fairness measures them).
. "$(dirname "$0")/../lib/lib.sh"
raw() { as_user "$PMC_TEST_RAW_BIN" "$SOCK" "$@"; }
as_victim() { setpriv --reuid=65533 --regid=65533 --clear-groups -- "${USER_ENV[@]}" "$@"; }

start_daemon --max-regions-per-user 200000 --keep-exited 40 --max-batch-rate 1000000

# A whole reply of several parts (3,000 regions with histograms: about 10 parts of 64 KiB)
# arrives as one datagram with every region, run and bucket once.
raw regions 3000 0 >/dev/null || fail "3000 regions"
raw query-whole hist >"$TMP/small" || fail "a whole query: $(cat "$TMP/small")"
expect_eq "regions in one whole reply" "$(kv regions "$TMP/small")" 3000
expect_eq "runs in it" "$(kv runs "$TMP/small")" 3000
expect_eq "wall-time buckets in it" "$(kv buckets "$TMP/small")" 3000
expect_eq "its more flag" "$(kv more "$TMP/small")" 0

kill "$DAEMON_PID"; wait "$DAEMON_PID"; DAEMON_PID=
start_daemon --max-regions-per-user 200000 --keep-exited 40 --max-batch-rate 1000000

# 12 programs of 4,000 regions (and a second process of the first) with histograms: about
# 12 MB as one reply, three times the cap.
load_programs 12 4000
kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
echo 5 >"/proc/$DAEMON_PID/clear_refs" # VmHWM starts again from VmRSS
rss0=$(kb "$DAEMON_PID" VmRSS)
raw query-whole hist >"$TMP/big" || fail "the big whole query: $(cat "$TMP/big")"
hwm=$(kb "$DAEMON_PID" VmHWM)
grep -q "^error=90 (Message too long)" "$TMP/big" || fail "not refused with EMSGSIZE: $(cat "$TMP/big")"
grep -q "do not fit in one reply" "$TMP/big" && grep -q "Query.stream" "$TMP/big" &&
	grep -q -- "--pid, --comm or --region" "$TMP/big" || fail "the reason does not name the fixes: $(cat "$TMP/big")"
pass "refused: $(sed -n 's/^message=//p' "$TMP/big")"
echo "note: daemon VmRSS $rss0 kB before, VmHWM $hwm kB during the refused query"
# The reply's cap is 4 MiB: the parts gathered up to it, one part more, their
# allocator's slack. Before, the whole reply was built first: over 100 MB here.
# bounded KB WHAT: KB (the peak over rest) within 16 MiB; a sanitized build's allocator keeps
# what is freed in quarantine, and its shadow grows with it: only noted there.
bounded() {
	if [ -n "${PMC_SANITIZED:-}" ]; then
		echo "note: $2 took $1 kB (sanitized build: not checked)"
	else
		[ "$1" -le $((16 * 1024)) ] || fail "$2 took $1 kB of the daemon's memory"
	fi
}
bounded $((hwm - rss0)) "the refused query"
pass "the refused query's peak: $((hwm - rss0)) kB over the daemon's resting memory"
pmcctl status >/dev/null || fail "status after the refused query"

# Eight connections of one uid asking for whole queries at once: built one at a time (each
# waits for the one before), so that the daemon's memory for them is still about one cap's
# (before: each connection's reply built at once, 8 x 4 MiB), and every one is answered.
echo 5 >"/proc/$DAEMON_PID/clear_refs"
rss0=$(kb "$DAEMON_PID" VmRSS)
wholes=()
for i in $(seq 8); do raw hog whole 3 >"$TMP/whole.$i" & wholes+=($!); done
for h in "${wholes[@]}"; do wait "$h" || fail "a whole-query hog failed"; done
hwm=$(kb "$DAEMON_PID" VmHWM)
for i in $(seq 8); do
	[ "$(kv queries "$TMP/whole.$i")" -gt 0 ] || fail "connection $i got no reply: $(cat "$TMP/whole.$i")"
done
bounded $((hwm - rss0)) "8 whole queries at once"
pass "8 connections' whole queries ($(cat "$TMP"/whole.* | sed -n 's/^queries=//p' | paste -sd+ | bc) refused): peak $((hwm - rss0)) kB over the daemon's resting memory"

# The hog, uid 65534: two connections streaming histogram queries, one asking for whole ones
# (each refused), eight flooding batches; the victim, uid 65533, meanwhile: once each of the
# hog's 11 connections said it is at work (its Hello answered), the hog stopped once the
# victim's checks are done ($TMP/w/stop; 120 s at most).
mkdir -m 1777 "$TMP/w"
hog() { PMC_TEST_RAW_STOP=$TMP/w/stop raw "$@"; }
hogs=()
for i in 1 2; do hog hog stream 120 >"$TMP/hog-stream.$i" & hogs+=($!); done
hog hog whole 120 >"$TMP/hog-whole" & hogs+=($!)
for i in $(seq 8); do hog flood 120 >"$TMP/flood.$i" & hogs+=($!); done
at_work() { [ "$(cat "$TMP"/hog-stream.* "$TMP/hog-whole" "$TMP"/flood.* 2>/dev/null | grep -c '^connected$')" = 11 ]; }
wait_until "the hog's 11 connections at work" 120 at_work
as_victim "$PMC_TEST_RAW_BIN" "$SOCK" victim 50 >"$TMP/victim" 2>&1 || fail "the victim's Hello or Status: $(cat "$TMP/victim")"
pass "the victim's 50 Hello and Status beside the hog (us p50 p99 max): $(tr '\n' ' ' <"$TMP/victim")"
setpriv --reuid=65533 --regid=65533 --clear-groups -- "${USER_ENV[@]}" PMC_EVENTS=page-faults \
	"$PMC_TEST_CLIENT_BIN" pages 2 5 >"$TMP/v" 2>"$TMP/v.err" &
vpid=$!
wait $vpid || fail "the victim's client: $(cat "$TMP/v.err")"
setpriv --reuid=65533 --regid=65533 --clear-groups -- "$PMCCTL_BIN" --socket "$SOCK" query --region pages --pid $vpid --format json >"$TMP/vq" || fail "the victim's query: $(cat "$TMP/vq")"
expect_faults "the victim's page-faults beside the hog" "$(jq '.regions[0].events["page-faults"].sum' "$TMP/vq")" 10
touch "$TMP/w/stop"
for h in "${hogs[@]}"; do wait "$h" || fail "a hog failed"; done
for f in "$TMP"/hog-stream.* "$TMP/hog-whole"; do
	[ "$(kv queries "$f")" -gt 0 ] || fail "a hog got no reply: $(cat "$f")"
done
pass "the hog's streamed queries: $(kv queries "$TMP/hog-stream.1") + $(kv queries "$TMP/hog-stream.2") ($(( ($(kv bytes "$TMP/hog-stream.1") + $(kv bytes "$TMP/hog-stream.2")) / 1048576 )) MiB), whole: $(kv queries "$TMP/hog-whole")"
daemon_alive
