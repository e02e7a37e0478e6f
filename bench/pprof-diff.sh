#!/bin/bash
# bench/pprof-diff.sh: what pmcctl's pprof output and diff cost at scale (issue 25). A
# pmcdaemon on a temporary socket holds N regions of one process (pmc-test-raw regions N:
# no call paths, so each is a single-frame stack of the profile, the untracked path of
# pprof.c), then, as medians of REPS runs each, alternating: `pmcctl dump --format json`
# against `pmcctl dump --format pprof` (wall time, bytes written), and `pmcctl diff` of
# that JSON file against itself (wall time, pmcctl's peak RSS).
#
# Usage: sudo bench/pprof-diff.sh BUILD_DIR [N] [REPS]   (defaults 20000, 5)
# Runs as root (it starts pmcdaemon and runs the client as uid 65534); writes nothing in
# the tree; never fails on a figure.
set -euo pipefail
BUILD=$(cd "${1:?usage: bench/pprof-diff.sh BUILD_DIR [N] [REPS]}" && pwd)
N=${2:-20000} REPS=${3:-5}
DAEMON=$BUILD/daemon/pmcdaemon PMCCTL=$BUILD/client/pmcctl RAW=$BUILD/tests/pmc-test-raw
[ "$(id -u)" = 0 ] || { echo "bench/pprof-diff.sh: run as root" >&2; exit 1; }
TMP=$(mktemp -d)
chmod 755 "$TMP"
trap 'kill "$DPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
"$DAEMON" --socket "$TMP/s" --max-regions "$N" --max-regions-per-user $((2 * N)) >"$TMP/log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [ -S "$TMP/s" ] && break; sleep 0.05; done
cp "$RAW" "$TMP/raw" && chmod a+rx "$TMP/raw"
setpriv --reuid=65534 --regid=65534 --clear-groups -- "$TMP/raw" "$TMP/s" regions "$N" 0 >"$TMP/raw.out" || { cat "$TMP/raw.out" "$TMP/log" >&2; exit 1; }

# median of the numbers on stdin
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
timed() { /usr/bin/time -f "%e %M" -o "$TMP/t" "$@" && cat "$TMP/t" >&2; }
for r in $(seq "$REPS"); do
	timed "$PMCCTL" --socket "$TMP/s" dump --format json >"$TMP/d.json" 2>>"$TMP/json.t"
	timed "$PMCCTL" --socket "$TMP/s" dump --format pprof >"$TMP/d.pb.gz" 2>>"$TMP/pprof.t"
	timed "$PMCCTL" --socket "$TMP/s" diff "$TMP/d.json" "$TMP/d.json" --format json >/dev/null 2>>"$TMP/diff.t"
done 2>/dev/null
row() { printf '%-40s %8s s  %s\n' "$1" "$(awk '{ print $1 }' "$TMP/$2.t" | median)" "$3"; }
echo "bench/pprof-diff.sh: $N regions of one process, medians of $REPS runs ($(nproc) CPUs)"
row "dump --format json" json "$(stat -c %s "$TMP/d.json") bytes"
row "dump --format pprof" pprof "$(stat -c %s "$TMP/d.pb.gz") bytes (gzip)"
row "diff of that JSON with itself" diff "pmcctl peak RSS $(awk '{ print $2 }' "$TMP/diff.t" | median) kB"
