#!/bin/bash
# bench/pprof-diff.sh: what pmcctl's pprof output and diff cost at scale (issue 25). A
# pmcdaemon on a temporary socket holds N regions of one process (pmc-test-raw regions N:
# no call paths, so each is a single-frame stack of the profile, the untracked path of
# pprof.c), then, as medians of REPS runs each, alternating: `pmcctl dump --format json`
# against `pmcctl dump --format pprof` (wall time, bytes written), and `pmcctl diff` of
# that JSON file against itself (wall time, pmcctl's peak RSS). Then call path trees at the
# size of --max-reply (issue 34), from pmc-fake-daemon: `pmcctl query --tree` and `pmcctl
# flamegraph` against a reply that never ends (refused at --max-reply, 64 MiB) and against
# one that ends (TREE_PARTS parts of 200 nodes, a tree 20 levels deep, some 59 MB), peak RSS
# beside the reply's bytes, and as a multiple of them (issue 34's target: 2x at most).
#
# Usage: sudo [PMC_BENCH_BASE_PMCCTL=OLD_PMCCTL] bench/pprof-diff.sh BUILD_DIR [N] [REPS]
#   (defaults 20000, 5); PMC_BENCH_BASE_PMCCTL: another pmcctl (an earlier commit's) run
#   too, alternating with this one, for a before and after in one run
# Runs as root (it starts pmcdaemon and runs the client as uid 65534); writes nothing in
# the tree; never fails on a figure.
set -euo pipefail
BUILD=$(cd "${1:?usage: bench/pprof-diff.sh BUILD_DIR [N] [REPS]}" && pwd)
N=${2:-20000} REPS=${3:-5}
DAEMON=$BUILD/daemon/pmcdaemon PMCCTL=$BUILD/client/pmcctl RAW=$BUILD/tests/pmc-test-raw
FAKE=$BUILD/tests/pmc-fake-daemon INGEST=$BUILD/bench/pmc-bench-ingest TREE_PARTS=3300
BASE=${PMC_BENCH_BASE_PMCCTL:-}
[ "$(id -u)" = 0 ] || { echo "bench/pprof-diff.sh: run as root" >&2; exit 1; }
TMP=$(mktemp -d)
chmod 755 "$TMP"
FPIDS=()
trap 'kill "$DPID" "${FPIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"' EXIT
"$DAEMON" --socket "$TMP/s" --max-regions "$N" --max-regions-per-user $((2 * N)) >"$TMP/log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [ -S "$TMP/s" ] && break; sleep 0.05; done
cp "$RAW" "$TMP/raw" && chmod a+rx "$TMP/raw"
setpriv --reuid=65534 --regid=65534 --clear-groups -- "$TMP/raw" "$TMP/s" regions "$N" 0 >"$TMP/raw.out" || { cat "$TMP/raw.out" "$TMP/log" >&2; exit 1; }

# median of the numbers on stdin
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
timed() { /usr/bin/time -f "%e %M" -o "$TMP/t" "$@" && cat "$TMP/t" >&2; }
# timed_any CMD...: as timed, whatever CMD's exit status (a refused reply exits 1)
timed_any() { /usr/bin/time -f "%e %M" -o "$TMP/t" "$@" || true; cat "$TMP/t" >&2; }
for r in $(seq "$REPS"); do
	timed "$PMCCTL" --socket "$TMP/s" dump --format json >"$TMP/d.json" 2>>"$TMP/json.t"
	timed "$PMCCTL" --socket "$TMP/s" dump --format pprof >"$TMP/d.pb.gz" 2>>"$TMP/pprof.t"
	timed "$PMCCTL" --socket "$TMP/s" diff "$TMP/d.json" "$TMP/d.json" --format json >/dev/null 2>>"$TMP/diff.t"
	[ -z "$BASE" ] || timed "$BASE" diff "$TMP/d.json" "$TMP/d.json" --format json >/dev/null 2>>"$TMP/diff-base.t"
done 2>/dev/null

# Trees: a reply that never ends, one that ends.
"$FAKE" stream "$TMP/never.sock" 200 >"$TMP/never.out" 2>&1 &
FPIDS+=($!)
"$FAKE" stream "$TMP/ends.sock" 200 "$TREE_PARTS" >"$TMP/ends.out" 2>&1 &
FPIDS+=($!)
for _ in $(seq 100); do [ -S "$TMP/never.sock" ] && [ -S "$TMP/ends.sock" ] && break; sleep 0.05; done
ENDS_BYTES=
[ -x "$INGEST" ] && ENDS_BYTES=$("$INGEST" query "$TMP/ends.sock" | sed -n 's/^bytes=//p')
for r in $(seq "$REPS"); do
	for b in "$PMCCTL" ${BASE:+"$BASE"}; do
		k=$([ "$b" = "$PMCCTL" ] && echo new || echo base)
		timed_any "$b" --socket "$TMP/never.sock" query --tree >/dev/null 2>>"$TMP/never-tree-$k.t"
		timed_any "$b" --socket "$TMP/never.sock" flamegraph >/dev/null 2>>"$TMP/never-flame-$k.t"
		timed "$b" --socket "$TMP/ends.sock" query --tree --format csv >/dev/null 2>>"$TMP/ends-tree-$k.t"
		timed "$b" --socket "$TMP/ends.sock" flamegraph >/dev/null 2>>"$TMP/ends-flame-$k.t"
	done
done 2>/dev/null
# (lines of /usr/bin/time's "%e %M" only: a run that exits 1 has "Command exited..." before)
row() { printf '%-52s %8s s  %s\n' "$1" "$(awk '/^[0-9.]+ [0-9]+$/ { print $1 }' "$TMP/$2.t" | median)" "$3"; }
echo "bench/pprof-diff.sh: $N regions of one process, medians of $REPS runs ($(nproc) CPUs)"
row "dump --format json" json "$(stat -c %s "$TMP/d.json") bytes"
row "dump --format pprof" pprof "$(stat -c %s "$TMP/d.pb.gz") bytes (gzip)"
row "diff of that JSON with itself" diff "pmcctl peak RSS $(awk '{ print $2 }' "$TMP/diff.t" | median) kB"
[ -z "$BASE" ] || row "the same by $BASE" diff-base "peak RSS $(awk '{ print $2 }' "$TMP/diff-base.t" | median) kB"
# peak RSS: the median of the runs' (the reply refused exits 1 after /usr/bin/time's line)
peak() { awk '/^[0-9.]+ [0-9]+$/ { print $2 }' "$TMP/$1.t" | median; }
# ratio BYTES KB: KB kB as a multiple of BYTES bytes ("?" when BYTES is not known)
ratio() { [ -n "$1" ] && awk -v b="$1" -v k="$2" 'BEGIN { printf "%.2fx", k * 1024 / b }' || echo "?x"; }
for k in new ${BASE:+base}; do
	who=$([ $k = new ] && echo "" || echo " ($BASE)")
	row "query --tree, reply never ends$who" "never-tree-$k" "peak RSS $(peak "never-tree-$k") kB ($(ratio 67108864 "$(peak "never-tree-$k")") the bound); refused at --max-reply 67108864 bytes"
	row "flamegraph, reply never ends$who" "never-flame-$k" "peak RSS $(peak "never-flame-$k") kB ($(ratio 67108864 "$(peak "never-flame-$k")"))"
	row "query --tree --format csv, $TREE_PARTS x 200 nodes$who" "ends-tree-$k" "peak RSS $(peak "ends-tree-$k") kB ($(ratio "$ENDS_BYTES" "$(peak "ends-tree-$k")") the reply); reply ${ENDS_BYTES:-?} bytes"
	row "flamegraph, the same$who" "ends-flame-$k" "peak RSS $(peak "ends-flame-$k") kB ($(ratio "$ENDS_BYTES" "$(peak "ends-flame-$k")"))"
done
