#!/bin/bash
# bench/scale.sh: the rows of bench/run at scale (issue 12), in bench/run's table format:
#   8  queries at 100,000 regions (25 processes x 4,000, 4 events each): `pmcctl status`,
#      `pmcctl query --region NAME --pid N`, `pmcctl query --format json` (all of it, streamed)
#      and a scrape of /metrics (default series cap), each against the same call to an empty
#      daemon (or, for the JSON, `cat` of the same bytes through the same pipe); wall time per
#      call (p50, p99), the daemon's CPU time per call and its RSS before, during and after
#   9  daemon ingest with a full JSON query, then a scrape, looping beside it, against ingest
#      alone, alternating in the same run (pmc-bench-ingest beside)
#   10 samples lost when 25 client processes start at once and exit (tests/integration/
#      tests/helpers/pmc-test-burst.c, compiled here against the build's libpmcclient, where it exists)
#
# Usage: sudo [PMC_BENCH_BASE_PMCCTL=OLD_PMCCTL] bench/scale.sh [--rows] BUILD_DIR
#   BUILD_DIR: a Release build with PMC_BUILD_BENCH=ON (bench/run builds it, then calls this
#   with --rows: only the rows are printed; alone, the table's header comes first).
#   PMC_BENCH_BASE_PMCCTL: another pmcctl (an earlier commit's) whose full JSON query is
#   timed too, alternating with this one's, in row 8 (a before and after in one run).
# Runs as root: starts its own pmcdaemons on temporary sockets (and loopback metrics ports),
# writes nothing in the source tree (its files go to a temporary directory, removed at exit),
# never fails on a figure. About 90 seconds.
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
ROWS_ONLY=
[ "${1:-}" = --rows ] && { ROWS_ONLY=1; shift; }
BUILD=${1:?usage: bench/scale.sh [--rows] BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
PROGRAMS=25 REGIONS=4000
LAT_REPS=100 RTT_CALLS=2000 JSON_REPS=5 SCRAPE_REPS=20
BESIDE_PROCS=4 BESIDE_REPS=4 BESIDE_SECONDS=1.5
BURST_PROCS=25 BURST_SAMPLES=4000 BURST_REPS=3

die() { echo "bench/scale.sh: $*" >&2; exit 1; }
say() { echo "bench/scale.sh: [${SECONDS}s] $*" >&2; }

[ "$(id -u)" = 0 ] || die "run as root: it starts pmcdaemon"
DAEMON=$BUILD/daemon/pmcdaemon PMCCTL=$BUILD/client/pmcctl INGEST=$BUILD/bench/pmc-bench-ingest
for b in "$DAEMON" "$PMCCTL" "$INGEST"; do
	[ -x "$b" ] || die "$b is missing: build first (bench/run builds, then runs this)"
done
command -v curl >/dev/null || die "curl is missing"

TMP=$(mktemp -d /tmp/pmc-bench-scale.XXXXXX)
PIDS=()
cleanup() {
	local rc=$?
	for p in "${PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$TMP"
	exit $rc
}
trap cleanup EXIT

if [ "$(nproc)" -ge 2 ]; then
	ON_DAEMON_CPU=(taskset -c 0) BENCH_CPU=1
else
	ON_DAEMON_CPU=() BENCH_CPU=
fi

# start_daemon NAME ARGS...: a pmcdaemon on $TMP/NAME.sock, pinned with the daemon's CPU;
# sets PID_<NAME> and, with --metrics, URL_<NAME>
start_daemon() {
	local name=$1 pid port=
	shift
	"${ON_DAEMON_CPU[@]}" "$DAEMON" --socket "$TMP/$name.sock" "$@" 2>"$TMP/$name.log" &
	pid=$!
	PIDS+=("$pid")
	printf -v "PID_$name" '%s' "$pid"
	for _ in $(seq 200); do
		[ -S "$TMP/$name.sock" ] && grep -q "listening on" "$TMP/$name.log" && break
		kill -0 "$pid" 2>/dev/null || { cat "$TMP/$name.log" >&2; die "pmcdaemon $name exited"; }
		sleep 0.05
	done
	if [[ " $* " = *" --metrics "* ]]; then
		for _ in $(seq 100); do
			port=$(sed -n 's|^.*serving metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$TMP/$name.log")
			[ -n "$port" ] && break
			sleep 0.05
		done
		[ -n "$port" ] || die "pmcdaemon $name logged no metrics address"
		printf -v "URL_$name" '%s' "http://127.0.0.1:$port/metrics"
	fi
}
alive() { kill -0 "$1" 2>/dev/null || die "a pmcdaemon died: $(cat "$TMP"/*.log)"; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
kv() { sed -n "s/^$2=//p" "$TMP/$1" | head -n 1; }
hwm_kb() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status"; }
# reset_hwm PID: VmHWM starts again from VmRSS (proc(5): clear_refs 5)
reset_hwm() { echo 5 >"/proc/$1/clear_refs"; }

# The big one holds 100,000 regions; the empty one is the baseline of the same calls.
OPTS=(--max-regions 65535 --max-regions-per-user 1000000 --max-total-regions 1000000
	--max-batch-rate 100000000 --max-clients-per-user 1024 --max-fds-per-user 100000000
	--metrics 127.0.0.1:0)
start_daemon big "${OPTS[@]}"
start_daemon empty "${OPTS[@]}"
# Everything else here (pmcctl, curl, the clients) on the other CPU.
[ -n "$BENCH_CPU" ] && taskset -pc "$BENCH_CPU" $$ >/dev/null

say "row 8: $PROGRAMS processes x $REGIONS regions (4 events each) into a fresh daemon"
for i in $(seq -w 1 $PROGRAMS); do
	cp "$INGEST" "$TMP/scale-$i"
	"$TMP/scale-$i" regions "$TMP/big.sock" $REGIONS >"$TMP/fill-$i.out" 2>&1 &
	FILL_PIDS[10#$i]=$!
done
for i in $(seq -w 1 $PROGRAMS); do
	wait "${FILL_PIDS[10#$i]}" || die "filling the daemon: $(cat "$TMP/fill-$i.out")"
done
ONE_PID=${FILL_PIDS[1]}
TOTAL=$("$PMCCTL" --socket "$TMP/big.sock" status --format json | jq .regions)
ONE_REGION=bench-region-00001

# ---- latency of single calls ----
# call OUT DAEMON_PID CMD...: runs CMD once, output to /dev/null; appends "wall_us daemon_ns"
call() {
	local out=$1 pid=$2 c0 c1 t0 t1 x
	shift 2
	read -r c0 x <"/proc/$pid/schedstat"
	t0=${EPOCHREALTIME/./}
	"$@" >/dev/null
	t1=${EPOCHREALTIME/./}
	read -r c1 x <"/proc/$pid/schedstat"
	echo "$((t1 - t0)) $((c1 - c0))" >>"$out"
}
# pct FILE P: the P-th percentile (nearest rank) of column 1, in ms
pct() { sort -n "$1" | awk -v p="$2" '{ v[NR] = $1 } END { i = int(NR * p / 100 + 0.999); if (i < 1) i = 1; printf "%.2f", v[i] / 1000 }'; }
# cpu_us FILE: mean daemon CPU per call (column 2), in us
cpu_us() { awk '{ s += $2 } END { printf "%.0f", s / NR / 1000 }' "$1"; }

say "row 8: latency of pmcctl status / query --region --pid / a scrape, $LAT_REPS each, alternating with an empty daemon"
for d in big empty; do
	sock=$TMP/$d.sock
	# warm-up: page cache, the daemons' first replies
	"$PMCCTL" --socket "$sock" status >/dev/null
	"$PMCCTL" --socket "$sock" query --region "$ONE_REGION" --pid "$ONE_PID" >/dev/null
done
for r in $(seq $LAT_REPS); do
	for k in 0 1 2 3; do
		case $(((r + k) % 4)) in
		0) call "$TMP/lat-status-big" "$PID_big" "$PMCCTL" --socket "$TMP/big.sock" status ;;
		1) call "$TMP/lat-status-empty" "$PID_empty" "$PMCCTL" --socket "$TMP/empty.sock" status ;;
		2) call "$TMP/lat-one-big" "$PID_big" "$PMCCTL" --socket "$TMP/big.sock" query \
			--region "$ONE_REGION" --pid "$ONE_PID" ;;
		3) call "$TMP/lat-one-empty" "$PID_empty" "$PMCCTL" --socket "$TMP/empty.sock" query \
			--region "$ONE_REGION" --pid "$ONE_PID" ;;
		esac
	done
done
for d in big empty; do
	"$INGEST" rtt "$TMP/$d.sock" $RTT_CALLS "$ONE_PID" "$ONE_REGION" >"$TMP/rtt-$d"
done
[ "$(kv rtt-big query_regions)" = 1 ] || die "the query for $ONE_REGION of pid $ONE_PID matched $(kv rtt-big query_regions) regions"
alive "$PID_big"

say "row 8: /metrics, $SCRAPE_REPS scrapes, alternating with an empty daemon"
curl -sS -f -o "$TMP/metrics" "$URL_big" || die "GET $URL_big"
rss0_scrape=$(rss_kb "$PID_big")
reset_hwm "$PID_big"
for r in $(seq $SCRAPE_REPS); do
	for k in 0 1; do
		case $(((r + k) % 2)) in
		0) call "$TMP/lat-scrape-big" "$PID_big" curl -sS -f -o /dev/null "$URL_big" ;;
		1) call "$TMP/lat-scrape-empty" "$PID_empty" curl -sS -f -o /dev/null "$URL_empty" ;;
		esac
	done
done
hwm_scrape=$(hwm_kb "$PID_big")
rss1_scrape=$(rss_kb "$PID_big")
alive "$PID_big"

BASE_PMCCTL=${PMC_BENCH_BASE_PMCCTL:-}
[ -z "$BASE_PMCCTL" ] || [ -x "$BASE_PMCCTL" ] || die "PMC_BENCH_BASE_PMCCTL=$BASE_PMCCTL is not a program"
say "row 8: pmcctl query --format json (all $TOTAL regions), $JSON_REPS times, alternating with cat of the same bytes and a reader of the parts alone${BASE_PMCCTL:+ (and $BASE_PMCCTL)}"
"$PMCCTL" --socket "$TMP/big.sock" query --format json >"$TMP/q.json"
JSON_BYTES=$(stat -c %s "$TMP/q.json")
JSON_REGIONS=$(grep -c '^ *"name": "' "$TMP/q.json" || true)
rss0_json=$(rss_kb "$PID_big")
reset_hwm "$PID_big"
for r in $(seq $JSON_REPS); do
	for k in 0 1 2 3; do
		v=$(((r + k) % 4))
		if [ $v = 3 ]; then
			[ -n "$BASE_PMCCTL" ] || continue
			t0=${EPOCHREALTIME/./}
			n=$(/usr/bin/time -f "%M" -o "$TMP/time" "$BASE_PMCCTL" --socket "$TMP/big.sock" query \
				--format json | wc -c)
			t1=${EPOCHREALTIME/./}
			echo "$((t1 - t0)) 0 $n $(tail -n 1 "$TMP/time")" >>"$TMP/json-base"
		elif [ $v = 0 ]; then
			read -r c0 x <"/proc/$PID_big/schedstat"
			t0=${EPOCHREALTIME/./}
			n=$(/usr/bin/time -f "%M" -o "$TMP/time" "$PMCCTL" --socket "$TMP/big.sock" query \
				--format json | wc -c)
			t1=${EPOCHREALTIME/./}
			read -r c1 x <"/proc/$PID_big/schedstat"
			echo "$((t1 - t0)) $((c1 - c0)) $n $(tail -n 1 "$TMP/time")" >>"$TMP/json-pmcctl"
		elif [ $v = 1 ]; then
			read -r c0 x <"/proc/$PID_big/schedstat"
			t0=${EPOCHREALTIME/./}
			"$INGEST" query "$TMP/big.sock" >"$TMP/raw"
			t1=${EPOCHREALTIME/./}
			read -r c1 x <"/proc/$PID_big/schedstat"
			echo "$((t1 - t0)) $((c1 - c0)) $(kv raw bytes) $(kv raw parts)" >>"$TMP/json-raw"
		else
			t0=${EPOCHREALTIME/./}
			n=$(cat "$TMP/q.json" | wc -c)
			t1=${EPOCHREALTIME/./}
			echo "$((t1 - t0)) 0 $n" >>"$TMP/json-cat"
		fi
	done
done
hwm_json=$(hwm_kb "$PID_big")
rss1_json=$(rss_kb "$PID_big")
alive "$PID_big"
PMCCTL_STEADY=$(awk '$3 != '"$JSON_BYTES"' { bad++ } END { print bad + 0 }' "$TMP/json-pmcctl")

# The fourth loop asks nothing of the daemon: a shell counting on the benchmark CPU, as busy
# there as a reader. What it costs the ingest is what the load processes lose by sharing their
# CPU (here, 2 CPUs: one for the daemon), not the daemon's: the readers' ratios are read
# beside it.
CPU_ONLY="sh -c 'i=0; while [ \$i -lt 100000 ]; do i=\$((i + 1)); done'"
say "row 9: ingest ($BESIDE_PROCS load processes) alone / with pmcctl's full JSON query looping / a reader of the parts alone / scrapes / a shell loop on the benchmark CPU, $BESIDE_REPS x ${BESIDE_SECONDS}s each"
"$INGEST" beside "$TMP/big.sock" $BESIDE_PROCS $BESIDE_REPS $BESIDE_SECONDS \
	"$PMCCTL --socket $TMP/big.sock query --format json" "$INGEST query $TMP/big.sock" \
	"curl -sS -f -o /dev/null $URL_big" "$CPU_ONLY" >"$TMP/beside"
alive "$PID_big"

# ---- row 10: a burst of clients ----
BURST_SRC=$SRC/tests/helpers/pmc-test-burst.c
BURST_ERR=
if [ ! -e "$BURST_SRC" ]; then
	BURST_ERR="tests/helpers/pmc-test-burst.c does not exist"
else
	CC=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
	"${CC:-cc}" -O2 -std=gnu11 -pthread -o "$TMP/burst" "$BURST_SRC" -I"$SRC/client/include" \
		-L"$BUILD/client" -lpmcclient -Wl,-rpath,"$BUILD/client" 2>"$TMP/burst-cc.log" ||
		BURST_ERR="tests/helpers/pmc-test-burst.c does not build: $(head -n 1 "$TMP/burst-cc.log")"
fi
# Its command line: "burst K" (one thread), or "burst T K" since it grew threads.
if [ -z "$BURST_ERR" ]; then
	usage=$("$TMP/burst" 2>&1 || true)
	case $usage in
	*"burst T K"*) BURST_ARGS=(1 $BURST_SAMPLES) ;;
	*"burst K"*) BURST_ARGS=($BURST_SAMPLES) ;;
	*) BURST_ERR="tests/helpers/pmc-test-burst.c: an unknown command line ($usage)" ;;
	esac
fi
if [ -z "$BURST_ERR" ]; then
	say "row 10: $BURST_PROCS clients started at once, $BURST_SAMPLES samples each, $BURST_REPS bursts (a daemon with its default limits)"
	start_daemon burst
	for b in $(seq $BURST_REPS); do
		s0=$("$PMCCTL" --socket "$TMP/burst.sock" status --format json)
		pids=()
		for i in $(seq $BURST_PROCS); do
			env PMC_SOCKET="$TMP/burst.sock" PMC_EVENTS=page-faults bash -c \
				'until [ -e "$1" ]; do sleep 0.01; done; shift; exec "$@"' _ \
				"$TMP/go-$b" "$TMP/burst" burst "${BURST_ARGS[@]}" >"$TMP/b$b-$i.out" 2>&1 &
			pids+=($!)
		done
		touch "$TMP/go-$b"
		for p in "${pids[@]}"; do wait "$p" || echo "$p" >>"$TMP/burst-failed"; done
		s1=$("$PMCCTL" --socket "$TMP/burst.sock" status --format json)
		jq -n -r --argjson a "$s0" --argjson b "$s1" \
			'"\($b.samples - $a.samples) \($b.dropped - $a.dropped) \($b.lost - $a.lost)"' \
			>>"$TMP/burst-counts"
		cat "$TMP"/b$b-*.out | grep -cE '^flush=-11$|^flush_eagain=[1-9]' >>"$TMP/burst-eagain" || true
	done
	alive "$PID_burst"
fi

# ---- the rows ----
num() { awk -v x="$1" 'BEGIN { n = sprintf("%.0f", x); s = "";
	while (length(n) > 3) { s = "," substr(n, length(n) - 2) s; n = substr(n, 1, length(n) - 3) }
	print n s }'; }
mega() { awk -v x="$1" 'BEGIN { printf "%.1f M", x / 1e6 }'; }
ratio() { awk -v x="$1" 'BEGIN { printf "%.2fx", x }'; }
# yesno COND-AWK-EXPR WHY: "yes", or "no: WHY"
yesno() { if awk "BEGIN { exit !($1) }"; then echo yes; else echo "no: $2"; fi; }
# col FILE N: the median of column N
median() { sort -n -k"$2,$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
pctchange() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f %%", (b - a) * 100 / a }'; }

if [ -z "$ROWS_ONLY" ]; then
	echo "| # | measured | pmc | compared with | baseline | ratio | target | met |"
	echo "|---|---|---|---|---|---|---|---|"
fi
WHAT="at $(num "$TOTAL") regions ($PROGRAMS processes x $(num $REGIONS), 4 events each)"
us() { awk -v x="$1" 'BEGIN { printf "%.0f", x / 1e3 }'; }
for v in status one; do
	if [ $v = status ]; then
		cmd='`pmcctl status`' rt=status
	else
		cmd="\`pmcctl query --region $ONE_REGION --pid N\`" rt=query
	fi
	b=$TMP/lat-$v-big e=$TMP/lat-$v-empty
	p50=$(pct "$b" 50) p99=$(pct "$b" 99) rp99=$(kv rtt-big ${rt}_p99_ns)
	echo "| 8 | $cmd $WHAT: wall time per pmcctl call, its start, connect and Hello included ($LAT_REPS calls);" \
		"the request's round trip alone on one connection ($(num $RTT_CALLS) calls) |" \
		"pmcctl p50 $p50 ms, p99 $p99 ms; round trip p50 $(us "$(kv rtt-big ${rt}_p50_ns)") us, p99 $(us "$rp99") us;" \
		"daemon CPU $(cpu_us "$b") us per pmcctl call | the same calls to an empty daemon |" \
		"pmcctl p50 $(pct "$e" 50) ms, p99 $(pct "$e" 99) ms; round trip p50 $(us "$(kv rtt-empty ${rt}_p50_ns)") us," \
		"p99 $(us "$(kv rtt-empty ${rt}_p99_ns)") us; daemon CPU $(cpu_us "$e") us |" \
		"$(ratio "$(awk -v a="$p50" -v b="$(pct "$e" 50)" 'BEGIN { print a / b }')") (pmcctl p50) |" \
		"p99 < 5 ms | round trip: $(yesno "$rp99 < 5e6" "p99 $(us "$rp99") us"); pmcctl end to end:" \
		"$(yesno "$p99 < 5" "p99 $p99 ms (an empty daemon's: $(pct "$e" 99) ms)") |"
done
js=$TMP/json-pmcctl jc=$TMP/json-cat
wall_p=$(median "$js" 1) wall_c=$(median "$jc" 1)
mbs_p=$(awk -v b="$JSON_BYTES" -v t="$wall_p" 'BEGIN { printf "%.1f", b / t }')
mbs_c=$(awk -v b="$JSON_BYTES" -v t="$wall_c" 'BEGIN { printf "%.1f", b / t }')
peak_rss=$(median "$js" 4)
drss_peak=$(pctchange "$rss0_json" "$hwm_json") drss_after=$(pctchange "$rss0_json" "$rss1_json")
echo "| 8 | \`pmcctl query --format json\` $WHAT: all of it, streamed, through a pipe to \`wc -c\`" \
	"($(awk -v b="$JSON_BYTES" 'BEGIN { printf "%.1f", b / 1e6 }') MB, $(num "$JSON_REGIONS") regions;" \
	"median of $JSON_REPS) | $mbs_p MB/s end to end ($(awk -v t="$wall_p" 'BEGIN { printf "%.2f", t / 1e6 }') s);" \
	"pmcctl peak RSS $(awk -v k="$peak_rss" 'BEGIN { printf "%.1f", k / 1024 }') MiB; daemon CPU" \
	"$(awk -v c="$(median "$js" 2)" 'BEGIN { printf "%.0f", c / 1e6 }') ms per query; daemon RSS" \
	"$(num "$rss0_json") kB before, peak $(num "$hwm_json") kB ($drss_peak), $(num "$rss1_json") kB after" \
	"($drss_after)$([ "$PMCCTL_STEADY" = 0 ] || echo "; $PMCCTL_STEADY runs printed other sizes");" \
	"a reader that only unpacks the daemon's parts: $(awk -v t="$(median "$TMP/json-raw" 1)" 'BEGIN { printf "%.2f", t / 1e6 }') s for" \
	"$(awk -v b="$(median "$TMP/json-raw" 3)" 'BEGIN { printf "%.1f", b / 1e6 }') MB of protobuf in $(num "$(median "$TMP/json-raw" 4)") parts," \
	"daemon CPU $(awk -v c="$(median "$TMP/json-raw" 2)" 'BEGIN { printf "%.0f", c / 1e6 }') ms |" \
	"\`cat\` of the same bytes through the same pipe | $mbs_c MB/s |" \
	"$(ratio "$(awk -v a="$wall_c" -v b="$wall_p" 'BEGIN { print a / b }')") |" \
	">= 300 MB/s; daemon RSS during and after within 10 % |" \
	"$(yesno "$mbs_p >= 300 && $hwm_json <= 1.1 * $rss0_json && $rss1_json <= 1.1 * $rss0_json" \
		"$(awk -v m="$mbs_p" 'BEGIN { if (m < 300) printf "%.2fx short of 300 MB/s", 300 / m; else printf "MB/s met" }')$(
		awk -v a="$rss0_json" -v h="$hwm_json" -v r="$rss1_json" 'BEGIN {
			if (h > 1.1 * a || r > 1.1 * a) printf "; daemon RSS up %.0f %% during, %.0f %% after", (h - a) * 100 / a, (r - a) * 100 / a }')") |"
if [ -n "$BASE_PMCCTL" ]; then
	wall_b=$(median "$TMP/json-base" 1)
	echo "| 8 | the same \`query --format json\` by \`$BASE_PMCCTL\` (PMC_BENCH_BASE_PMCCTL), alternating" \
		"with this pmcctl's ($(awk -v b="$(median "$TMP/json-base" 3)" 'BEGIN { printf "%.1f", b / 1e6 }') MB; median of $JSON_REPS) |" \
		"$mbs_p MB/s (this pmcctl) | the other pmcctl |" \
		"$(awk -v b="$JSON_BYTES" -v t="$wall_b" 'BEGIN { printf "%.1f", b / t }') MB/s, peak RSS" \
		"$(awk -v k="$(median "$TMP/json-base" 4)" 'BEGIN { printf "%.1f", k / 1024 }') MiB |" \
		"$(ratio "$(awk -v a="$wall_b" -v b="$wall_p" 'BEGIN { print a / b }')") faster | - | - |"
fi
b=$TMP/lat-scrape-big e=$TMP/lat-scrape-empty
p50=$(pct "$b" 50) p99=$(pct "$b" 99)
echo "| 8 | GET /metrics (curl) $WHAT, default --metrics-max-series ($(num "$(stat -c %s "$TMP/metrics")") bytes," \
	"$(num "$(grep -c '^pmc_region_' "$TMP/metrics")") region series; $SCRAPE_REPS scrapes) |" \
	"p50 $p50 ms, p99 $p99 ms; daemon CPU $(cpu_us "$b") us per scrape; daemon RSS $(num "$rss0_scrape") kB before," \
	"peak $(num "$hwm_scrape") kB ($(pctchange "$rss0_scrape" "$hwm_scrape")), $(num "$rss1_scrape") kB after" \
	"($(pctchange "$rss0_scrape" "$rss1_scrape")) | the same scrape of an empty daemon |" \
	"p50 $(pct "$e" 50) ms, p99 $(pct "$e" 99) ms; daemon CPU $(cpu_us "$e") us |" \
	"$(ratio "$(awk -v a="$p50" -v b="$(pct "$e" 50)" 'BEGIN { print a / b }')") (p50) |" \
	"daemon RSS during and after within 10 % |" \
	"$(yesno "$hwm_scrape <= 1.1 * $rss0_scrape && $rss1_scrape <= 1.1 * $rss0_scrape" "daemon RSS up") |"
f=beside
for v in 1 2 3 4; do
	case $v in
	1) what="pmcctl's full \`query --format json\` looping beside it" ;;
	2) what="a reader of the full query's parts alone (\`pmc-bench-ingest query\`, as fast as the daemon streams) looping beside it" ;;
	3) what="scrapes of /metrics looping beside it" ;;
	4) what="a shell loop on the benchmark CPU beside it, asking nothing of the daemon (what the load processes lose to a busy neighbour on their CPU: the reference for the rows above)" ;;
	esac
	r=$(kv $f "beside${v}_ratio") rc=$(kv $f "beside${v}_cpu_ratio")
	echo "| 9 | daemon ingest ($(kv $f procs) load processes, full SampleBatches of 4 events) $WHAT, with $what" \
		"($(kv $f "beside${v}_runs_per_s") runs completed per second; $(kv $f reps) x $(kv $f seconds) s, alternating) |" \
		"$(mega "$(kv $f "beside${v}_samples_per_s")")/s (daemon busy $(awk -v c="$(kv $f "beside${v}_daemon_cpu")" 'BEGIN { printf "%.0f", c * 100 }') %;" \
		"$(mega "$(kv $f "beside${v}_samples_per_cpu_s")")/s per daemon CPU-second) |" \
		"ingest alone, same daemon | $(mega "$(kv $f alone_samples_per_s)")/s (daemon busy" \
		"$(awk -v c="$(kv $f alone_daemon_cpu)" 'BEGIN { printf "%.0f", c * 100 }') %; $(mega "$(kv $f alone_samples_per_cpu_s)")/s per CPU-second) |" \
		"$(ratio "$r") (per daemon CPU-second $(ratio "$rc")) |" \
		"$(if [ $v = 4 ]; then echo "- (a reference) | - |"; else
			echo ">= 0.9x, and runs complete |" \
				"$(yesno "$r >= 0.9 && $(kv $f "beside${v}_runs_per_s") > 0" "$(awk -v x="$r" -v n="$(kv $f "beside${v}_runs_per_s")" 'BEGIN { if (x < 0.9) printf "%.2fx off", 0.9 / x; else if (n <= 0) printf "no run completed" }')") |"
		fi)"
done
if [ -n "$BURST_ERR" ]; then
	echo "| 10 | samples lost when $BURST_PROCS clients start at once | not measurable here: $BURST_ERR | | | | 0 | - |"
else
	read -r got dropped lost < <(awk '{ g += $1; d += $2; l += $3 } END { print g, d, l }' "$TMP/burst-counts")
	want=$((BURST_PROCS * BURST_SAMPLES * BURST_REPS))
	echo "| 10 | samples lost when $BURST_PROCS client processes start at once, each $(num $BURST_SAMPLES) samples" \
		"(1 event), then pmc_flush() and exit ($BURST_REPS bursts; daemon with default limits) |" \
		"$(num $((want - got))) of $(num $want) not counted (dropped $(num "$dropped"), lost $(num "$lost")" \
		"per the daemon); pmc_flush() found the queue full in $(awk '{ s += $1 } END { print s }' "$TMP/burst-eagain") of" \
		"$((BURST_PROCS * BURST_REPS)) clients$([ ! -e "$TMP/burst-failed" ] || echo "; $(wc -l <"$TMP/burst-failed") clients failed") |" \
		"- | | | 0 | $(yesno "$got == $want" "$(num $((want - got))) lost") |"
fi
