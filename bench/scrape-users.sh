#!/bin/bash
# bench/scrape-users.sh: what a scrape of /metrics costs the daemon with the series cap
# shared out per uid, against another pmcdaemon binary (the one before, for a change).
# Loads PROCS pmc-test-raw processes x REGIONS regions (one sample each), spread over USERS
# uids (65534 down), into each daemon, then scrapes each SCRAPES times, alternating; prints
# the daemon CPU time per scrape (utime + stime, from /proc) and the wall time, p50.
# Usage: sudo bench/scrape-users.sh BUILD_DIR OTHER_PMCDAEMON [USERS]
set -euo pipefail
BUILD=$(cd "${1:?usage: bench/scrape-users.sh BUILD_DIR OTHER_PMCDAEMON [USERS]}" && pwd)
OTHER=${2:?usage: bench/scrape-users.sh BUILD_DIR OTHER_PMCDAEMON [USERS]}
USERS=${3:-5}
PROCS=25 REGIONS=4000 SCRAPES=20
RAW=$BUILD/tests/pmc-test-raw
[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
TMP=$(mktemp -d /tmp/pmc-bench.XXXXXX)
chmod 755 "$TMP"
cp "$RAW" "$TMP/raw"
chmod a+rx "$TMP/raw"
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
TCK=$(getconf CLK_TCK)

# start NAME BIN: a daemon on $TMP/NAME.sock with the page on a free port; sets PORT_NAME
start() {
	"$2" --socket "$TMP/$1.sock" --verbose --metrics 127.0.0.1:0 2>"$TMP/$1.log" &
	PIDS+=($!)
	eval "PID_$1=$!"
	for _ in $(seq 200); do
		port=$(sed -n 's|^.*serving metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$TMP/$1.log")
		[ -n "$port" ] && [ -S "$TMP/$1.sock" ] && { eval "PORT_$1=$port"; break; }
		sleep 0.05
	done
	local pids=()
	for i in $(seq "$PROCS"); do
		uid=$((65534 - i % USERS))
		setpriv --reuid=$uid --regid=$uid --clear-groups -- "$TMP/raw" "$TMP/$1.sock" regions "$REGIONS" 0 >/dev/null &
		pids+=($!)
	done
	wait "${pids[@]}"
}
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
start new "$BUILD/daemon/pmcdaemon"
start old "$OTHER"
for d in new old; do : >"$TMP/$d.cpu"; : >"$TMP/$d.wall"; done
for _ in $(seq "$SCRAPES"); do
	for d in new old; do
		pid=PID_$d port=PORT_$d
		c0=$(cpu "${!pid}")
		t=$(curl -s -o "$TMP/$d.page" -w '%{time_total}' "http://127.0.0.1:${!port}/metrics")
		c1=$(cpu "${!pid}")
		echo $(((c1 - c0) * 1000 / TCK)) >>"$TMP/$d.cpu"
		echo "$t" >>"$TMP/$d.wall"
	done
done
p50() { sort -n "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
for d in new old; do
	total=$(awk '{ s += $1 } END { print s }' "$TMP/$d.cpu")
	echo "$d: $USERS uids, $((PROCS * REGIONS)) regions: $(stat -c %s "$TMP/$d.page") bytes, $(grep -c '^pmc_region_count_total{' "$TMP/$d.page") regions on the page; daemon CPU $((total / SCRAPES)) ms a scrape (mean of $SCRAPES, ${TCK} Hz ticks), wall p50 $(p50 "$TMP/$d.wall") s"
done
