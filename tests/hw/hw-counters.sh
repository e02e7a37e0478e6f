#!/bin/bash
# Hardware counters, where a PMU exists (skips with 77 elsewhere), x86-64 and arm64: a loop of
# known instruction count (2 per iteration) counted by pmc over regions, in user space where the
# kernel allows it (rdpmc, mrs) and with read() where it does not; more than 2^32 instructions
# in one region (arm64's 32-bit counters overflow); fork, exec and 4 threads; cycles within
# bounds its own run gives; cycles, instructions and a libpfm4 name; IPC derived; multiplexing marked, and
# its totals against what the kernel's own read() gives for the same events.
#
# With PMC_HW_EXACT=1 (an emulated PMU that counts exactly: QEMU's TCG with -icount, one vCPU;
# tests/hw/emulated-pmu.sh sets it) every region must count 2N plus the same constant, for every
# N, process and thread; on real hardware, within 0.1 %. PMC_HW_EXPECT_USER_READS=1 requires
# the user-space path (where the kernel is known to allow it) instead of following the caps.
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_TEST_HW_BIN:?set by ctest}" "${PMC_TEST_HW_REF_BIN:?set by ctest}"
EXACT=${PMC_HW_EXACT:-0}
ARCH=$(uname -m)
# Each client's figures are read once the daemon took its hang-up: its last batches may still
# wait in its socket, for a daemon that shares the guest's one CPU. (On a loaded host, 2,496 of
# the 2,000,000 regions beside a spinning thread were missing from a query made at once: not
# read yet, or dropped by the library while its background thread held the lock, which a
# thread now no longer does (test-records); the losses are now checked first, to tell.)
RUN_CLIENT_TAKEN=1
# --allow-kernel: the multiplexing check asks for :k and :uk variants too.
start_daemon --allow-kernel all
pmcctl events --format json | jq -e '.hardware_pmu' >/dev/null ||
	skip "no hardware PMU on this machine (perf_event_open of cycles fails): nothing to check"
case $ARCH in
x86_64 | aarch64) ;;
*) skip "no 2-instruction loop for $ARCH" ;;
esac
cp "$PMC_TEST_HW_BIN" "$TMP/bin/" && chmod a+rx "$TMP/bin/pmc-test-hw"
HW=$TMP/bin/pmc-test-hw

# region REGION PID: region_json, or fail with what the daemon said
region() {
	region_json "$1" "$2" || {
		tail -n 20 "$TMP/daemon.log" "$TMP"/*.err >&2
		fail "no region $1 of pid $2 (the logs above)"
	}
}

# check_loop WHAT REGION PID N [EVENT]: EVENT (instructions) of every REGION sample of PID is
# 2N + a constant: the same constant for every sample (exact), or within 0.1 % of 2N. Sets C
# to the constant (min - 2N).
check_loop() {
	local what=$1 region=$2 pid=$3 n=$4 ev=${5:-instructions} j lo hi count
	j=$(region "$region" "$pid")
	lo=$(jq --arg e "$ev" '.events[$e].min' <<<"$j")
	hi=$(jq --arg e "$ev" '.events[$e].max' <<<"$j")
	count=$(jq .count <<<"$j")
	[[ "$lo" =~ ^[0-9]+$ && "$hi" =~ ^[0-9]+$ ]] || fail "$what: no $ev counts: $j"
	C=$((lo - 2 * n))
	if [ "$EXACT" = 1 ]; then
		[ "$lo" = "$hi" ] || fail "$what: $ev of $count regions of 2N = $((2 * n)) instructions vary: $lo..$hi"
		pass "$what: $count regions, $ev = 2N + $C exactly (N = $n)"
	else
		awk -v a="$hi" -v b="$((2 * n))" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < 0.001) }' ||
			fail "$what: $ev $lo..$hi, want 2N = $((2 * n)) within 0.1 %"
		pass "$what: $count regions, $ev $lo..$hi, 2N = $((2 * n)) (within 0.1 %)"
	fi
}

# same_constant WHAT: C equals the constant the first loop gave (exact mode)
same_constant() {
	[ "$EXACT" = 1 ] || return 0
	[ "$C" = "$C1" ] || fail "$1: constant $C, the loop's is $C1"
	pass "$1: the same constant, $C"
}

# run_pairs_check WHAT PREFIX: 80 nested pairs PREFIX-oI { PREFIX-iI { 10^5 iterations } }, 3
# rounds: every inner region's samples the same, outer = inner + one D for every pair and sample,
# the first of each outer region too (its inner path new to the thread): a thread read through
# its pages writes records, and their reader looks the paths up, not the region's thread, so
# that no sample is kept out (first_path_samples 0; the read() way's threads, whose begin looks
# its path up, keep such a sample out: e2e-nested).
run_pairs_check() {
	local what=$1 prefix=$2 pairs ds
	run_client "$TMP/$prefix" env PMC_EVENTS=instructions "$HW" pairs "$prefix" 80 100000 3
	pairs=$(pmcctl query --pid "$CLIENT_PID" --format json | jq -c --arg p "$prefix-" '[.regions[] | select(.name | startswith($p))
		| {key: .name, value: [.count, .events.instructions.min, .events.instructions.max, .events.instructions.sum, (.first_path_samples // 0)]}] | from_entries')
	expect_eq "$what: regions" "$(jq 'length' <<<"$pairs")" 160
	jq -e '[to_entries[] | select(.value[0] != 3 or .value[4] != 0)] | length == 0' <<<"$pairs" >/dev/null ||
		fail "$what: want 3 samples (count) and no first_path_samples of each region: $pairs"
	pass "$what: every region's 3 samples in its figures, none kept out"
	[ "$EXACT" = 1 ] || return 0
	jq -e '[to_entries[] | .value | select(.[1] != .[2])] | length == 0' <<<"$pairs" >/dev/null ||
		fail "$what: a region's samples vary: $pairs"
	ds=$(jq -c --arg p "$prefix" '. as $x | [range(80) | tostring | [$x[$p + "-o" + .], $x[$p + "-i" + .]] | .[0][1] - .[1][1]] | unique' <<<"$pairs")
	[ "$(jq length <<<"$ds")" = 1 ] || fail "$what: outer - inner differs between pairs: $ds"
	pass "$what: 80 nested pairs: outer = inner + $(jq '.[0]' <<<"$ds") in every sample"
}

# check_wall WHAT REGION PID OUT K: the K regions REGION of PID were all counted, none lost
# (two ends on different clocks would be, as read-failed), and the wall times pmc reports lie
# between what the program timed with CLOCK_MONOTONIC_RAW inside each region and around it
# (OUT: its inner_*, outer_*), give or take 0.1 % and 1 us a region: pmc's clock is the
# counters' page's (the kernel's sched_clock, another clock of the same ticks) where the page
# has one, else that one.
check_wall() {
	local what=$1 j w
	j=$(region "$2" "$3")
	expect_eq "$what: regions counted" "$(jq .count <<<"$j")" "$5"
	expect_eq "$what: none lost" \
		"$(pmcctl query --pid "$3" --format json | jq -c '[.losses[]? | select(.pid == '"$3"')]')" "[]"
	w=$(jq -c '.wall_ns | [.sum, .min, .max]' <<<"$j")
	awk -v w="$w" -v is="$(kv inner_sum "$4")" -v im="$(kv inner_min "$4")" \
		-v os="$(kv outer_sum "$4")" -v om="$(kv outer_max "$4")" -v k="$(jq .count <<<"$j")" '
		BEGIN { gsub(/[][]/, "", w); split(w, v, ",");
			ok = v[1] >= is * 0.999 - 1000 * k && v[1] <= os * 1.001 + 1000 * k &&
				v[2] >= im * 0.999 - 1000 && v[3] <= om * 1.001 + 1000 && v[2] > 0;
			printf "wall: sum %d in [%d, %d], min %d >= %d, max %d <= %d\n", v[1], is, os, v[2], im, v[3], om;
			exit !ok }' || fail "$what: the wall times are not within the program's own"
	pass "$what: wall times within CLOCK_MONOTONIC_RAW's, inside and around each region"
}

# arm64: user-space reads need kernel.perf_user_access=1 (default 0). Both paths are tested;
# the setting is put back at exit.
UA=/proc/sys/kernel/perf_user_access
UA_ORIG=
restore_user_access() {
	local rc=$?
	[ -n "$UA_ORIG" ] && echo "$UA_ORIG" >"$UA"
	return $rc
}
trap 'restore_user_access; cleanup' EXIT
if [ "$ARCH" = aarch64 ] && [ -w "$UA" ]; then
	UA_ORIG=$(cat "$UA")
	# The daemon started with the machine's setting: where it was 0, it said what to set.
	if [ "$UA_ORIG" = 0 ]; then
		grep -q 'kernel.perf_user_access=1' "$TMP/daemon.log" ||
			fail "perf_user_access is 0 and pmcdaemon did not say what to set: $(cat "$TMP/daemon.log")"
		pass "pmcdaemon says: $(grep -m1 'perf_user_access=1' "$TMP/daemon.log")"
	fi
	echo 0 >"$UA"
	ev=$(pmcctl events --format json)
	expect_eq "pmcctl events: user_reads with perf_user_access 0" "$(jq .user_reads <<<"$ev")" false
	expect_eq "pmcctl events: what to set" "$(jq -r .user_reads_hint <<<"$ev")" \
		"sysctl -w kernel.perf_user_access=1"
	pmcctl status | grep -q 'user-space counter reads: *no, read() .*perf_user_access=1' ||
		fail "pmcctl status does not say it: $(pmcctl status)"
	run_client "$TMP/ua0" env PMC_EVENTS=instructions "$HW" loop loop-read 1000000 5
	expect_eq "perf_user_access 0: read() path" "$(kv rdpmc "$TMP/ua0")" 0
	check_loop "perf_user_access 0, read() path" loop-read "$CLIENT_PID" 1000000
	C_READ=$C
	run_client "$TMP/ua0w" env PMC_EVENTS=instructions "$HW" wall wall-read 1000000 5
	check_wall "perf_user_access 0, read() path" wall-read "$CLIENT_PID" "$TMP/ua0w" 5
	# The path look-up inside a region costs the same whatever other paths exist, on this
	# path too.
	run_pairs_check "perf_user_access 0, read() path: nested pairs" pair-read
	echo 1 >"$UA"
	expect_eq "pmcctl status: user_reads with perf_user_access 1" \
		"$(pmcctl status --format json | jq .user_reads)" true
fi

# The path the library should take: user space where the kernel gives the counter in the
# page (cap_user_rdpmc and an index) and the clock (cap_user_time: not on guests whose
# sched_clock is kvm-clock); otherwise read(), by design.
"$PMC_TEST_HW_REF_BIN" caps instructions >"$TMP/caps" || fail "opening instructions as root failed"
if [ "$(kv cap_user_rdpmc "$TMP/caps")" = 1 ] && [ "$(kv cap_user_time "$TMP/caps")" = 1 ] &&
	[ "$(kv index "$TMP/caps")" != 0 ]; then
	want_rdpmc=1
else
	want_rdpmc=0
	[ "${PMC_HW_EXPECT_USER_READS:-0}" = 1 ] &&
		fail "user-space reads expected, the kernel gives $(tr '\n' ' ' <"$TMP/caps")"
fi
WIDTH=$(kv pmc_width "$TMP/caps")
echo "caps: $(tr '\n' ' ' <"$TMP/caps")"

# A known loop, two lengths: the slope is exactly 2 and the constant the same.
run_client "$TMP/l6" env PMC_EVENTS=instructions "$HW" loop loop-1e6 1000000 5
expect_eq "user-space path taken where the kernel allows it" "$(kv rdpmc "$TMP/l6")" $want_rdpmc
check_loop "loop of 2 x 10^6" loop-1e6 "$CLIENT_PID" 1000000
C1=$C
run_client "$TMP/l7" env PMC_EVENTS=instructions "$HW" loop loop-1e7 10000000 3
check_loop "loop of 2 x 10^7" loop-1e7 "$CLIENT_PID" 10000000
same_constant "loop of 2 x 10^7"
run_client "$TMP/l6b" env PMC_EVENTS=instructions "$HW" loop loop-1e6 1000000 5
check_loop "loop of 2 x 10^6, run again" loop-1e6 "$CLIENT_PID" 1000000
same_constant "loop of 2 x 10^6, run again"
# The wall time: the page's clock on the user-space path, CLOCK_MONOTONIC_RAW on read().
run_client "$TMP/wall" env PMC_EVENTS=instructions "$HW" wall wall 1000000 5
expect_eq "wall: user-space path taken where the kernel allows it" "$(kv rdpmc "$TMP/wall")" $want_rdpmc
check_wall "wall time, $([ "$want_rdpmc" = 1 ] && echo "the page's clock" || echo "read() path")" wall "$CLIENT_PID" "$TMP/wall" 5
path="read()"
[ "$want_rdpmc" = 1 ] && path="user space"
echo "constant: count(N) - 2N = $C1 ($path)${C_READ:+; $C_READ with read() (perf_user_access 0)}"

# Beside a thread that spins on the same CPU, the scheduler's ticks preempt the region's thread,
# some of them inside a pass over its counter's page, which the kernel updates as it schedules
# the thread in again (the page's lock moves, the pass does not stand). A begin so interrupted
# is made again from its start (client.c, pass_retry()), so that what runs after its read is
# what runs after any: it counts the constant. An end so interrupted reads again the general
# way: X more, the same X for each (one event). So every sample counts 2N + C or 2N + C + X:
# the least is 2N + C and, for samples of two values only, the variance is (mean - least) *
# (largest - mean), which a third value makes smaller. Before, a begin so interrupted went the
# general way too, its own figure more (on cortex-a57 the samples above 2N + C summed 2,054
# with the largest 88 above). Where the ticks fall moves from run to run (QEMU's virtual clock
# follows the host's while the guest idles before this client), a run may have no begin
# interrupted, and none is seen: what is checked is that no sample counts a third figure.
# None may be lost either (a full ring's samples go the general way after a flush: a third
# figure for a reason of its own).
run_client "$TMP/busy" env PMC_EVENTS=instructions "$HW" busy loop-busy 1 2000000
j=$(region loop-busy "$CLIENT_PID")
read -r lo hi mean sd count <<<"$(jq -r '[.events.instructions.min, .events.instructions.max,
	.events.instructions.mean, .events.instructions.stddev, .count] | @tsv' <<<"$j")"
echo "# beside a spinning thread: $count regions, instructions $lo..$hi, mean $mean, stddev $sd"
# The losses first: a count short by regions lost says why.
expect_eq "beside a spinning thread: none lost" \
	"$(pmcctl query --pid "$CLIENT_PID" --format json | jq -c '[.losses[]? | select(.pid == '"$CLIENT_PID"')]')" "[]"
expect_eq "beside a spinning thread: regions counted" "$count" 2000000
expect_eq "beside a spinning thread: rdpmc" "$(kv rdpmc "$TMP/busy")" $want_rdpmc
if [ "$EXACT" = 1 ]; then
	expect_eq "beside a spinning thread: the least sample" "$lo" $((2 + C1))
	# Two values: var = (mean - lo)(hi - mean) (the sample variance n / (n - 1) of it); a
	# third in between makes it smaller. Within 1e-6 of each other (doubles' rounding).
	awk -v lo="$lo" -v hi="$hi" -v m="$mean" -v sd="$sd" -v n="$count" 'BEGIN {
		two = (m - lo) * (hi - m); v = sd * sd; pv = v * (n - 1) / n
		d = v - two; if (d < 0) d = -d; e = pv - two; if (e < 0) e = -e
		if (two == 0) exit !(v == 0)
		exit !(d <= 1e-6 * two || e <= 1e-6 * two) }' ||
		fail "beside a spinning thread: samples of more than two figures: $lo..$hi, mean $mean, stddev $sd"
	if [ "$hi" != "$lo" ]; then
		pass "beside a spinning thread: every sample 2N + $C1 or $((hi - lo)) more (the ends interrupted: $(awk -v m="$mean" -v lo="$lo" -v hi="$hi" -v n="$count" 'BEGIN { printf "%.0f", (m - lo) * n / (hi - lo) }'))"
	else
		pass "beside a spinning thread: every sample 2N + $C1"
	fi
fi

# More than 2^32 instructions in one region: 32-bit counters (arm64 without 64-bit event
# counters) overflow, and the kernel's updates of the page must keep the reads exact.
run_client "$TMP/big" env PMC_EVENTS=instructions "$HW" loop loop-big 2200000000 1
check_loop "one region of 4.4 x 10^9 instructions (counter width $WIDTH)" loop-big "$CLIENT_PID" 2200000000
same_constant "4.4 x 10^9 instructions"

# At depth 32, the first region finds the thread's frames full and grows them: that is done
# before its counters are read, so it counts what the others do (its own constant: a nested
# region's path is looked up with its parent's).
run_client "$TMP/deep" env PMC_EVENTS=instructions "$HW" deep loop-deep 1000000 4
check_loop "a region at depth 32, the first growing the frames" loop-deep "$CLIENT_PID" 1000000

# fork, exec and threads: each process and thread its own exact counts.
run_client "$TMP/fork" env PMC_EVENTS=instructions "$HW" fork loop-fork 1000000 3
check_loop "fork: parent" loop-fork "$CLIENT_PID" 1000000
same_constant "fork: parent"
check_loop "fork: child" loop-fork "$(kv child_pid "$TMP/fork")" 1000000
same_constant "fork: child"
expect_eq "fork: the child's path" "$(kv child_rdpmc "$TMP/fork")" $want_rdpmc
run_client "$TMP/exec" env PMC_EVENTS=instructions "$HW" exec loop-exec 1000000 3
check_loop "exec: before" loop-exec "$CLIENT_PID" 1000000
same_constant "exec: before"
check_loop "exec: the new image" loop-exec-exec "$CLIENT_PID" 1000000
same_constant "exec: the new image"
expect_eq "exec: the new image's path" "$(kv rdpmc "$TMP/exec")" $want_rdpmc
run_client "$TMP/thr" env PMC_EVENTS=instructions "$HW" threads 4 loop-threads 1000000 3
check_loop "4 threads" loop-threads "$CLIENT_PID" 1000000
same_constant "4 threads"
expect_eq "4 threads: every thread's path" "$(kv rdpmc "$TMP/thr")" $want_rdpmc

# A thread's first region, whose pmc_begin() registers the thread (no warm-up), leaves through
# the same code as every other begin: it counts the same constant, in the process's first
# thread and in new ones. No LD_BIND_NOW: pmc-test-hw links pmc::client, whose link options
# (as pkg-config's Libs) bind pmc_end() at load, not inside the first region.
# The same where pmc_enabled() registered each thread before its first region: 10 ms before it
# (early), or at once before it (early-now: the thread not scheduled out in between).
for how in cold early early-now; do
	what="a thread's first region (it registers the thread)"
	[ $how = early ] && what="a thread's first region after pmc_enabled() registered it"
	[ $how = early-now ] && what="a thread's first region at once after pmc_enabled()"
	run_client "$TMP/$how" env PMC_EVENTS=instructions "$HW" $how loop loop-$how 1000000 3
	check_loop "$what" loop-$how "$CLIENT_PID" 1000000
	same_constant "$what"
	run_client "$TMP/${how}t" env PMC_EVENTS=instructions "$HW" $how threads 4 loop-$how-t 1000000 3
	check_loop "4 threads: $what" loop-$how-t "$CLIENT_PID" 1000000
	same_constant "4 threads: $what"
done

# A PMC_SCOPE whose name is chosen at run time at one call site (two names, each after itself
# and after the other; the first sample of each looks its name up and begins a path new to
# the thread): every sample of both counts one constant. A literal name's call site too (its
# constant its own: the program's instructions around another call site are others).
run_client "$TMP/rtnames" env PMC_EVENTS=instructions "$HW" names rt 1000000 10
check_loop "run-time names at one call site: the first" rt-a "$CLIENT_PID" 1000000
C_SCOPE=$C
check_loop "run-time names at one call site: the second" rt-b "$CLIENT_PID" 1000000
[ "$EXACT" != 1 ] || expect_eq "run-time names at one call site: one constant" "$C" "$C_SCOPE"
check_loop "PMC_SCOPE of a literal name" names-literal "$CLIENT_PID" 1000000

# Nested pairs, 80 of them (160 names, more paths than the thread's 64-slot cache; 160 samples
# a round, sent between rounds: fewer than the 256 at which a region's end wakes the background
# thread, which would count inside the outer region): each outer region counts its inner one
# plus one constant D, whatever the names, the first sample of each outer region too, inside
# which the inner path began for the first time on the thread (README: "Limits").
run_pairs_check "nested pairs" pair
# pmcctl's floor (what the thread's warm-up region measured) is what a program's empty region
# counts of the library: pmc_begin(); pmc_end(), called as a program calls them.
run_client "$TMP/empty" env PMC_EVENTS=instructions "$HW" empty empty 5
j=$(region empty "$CLIENT_PID")
lo=$(jq .events.instructions.min <<<"$j")
floor=$(jq .events.instructions.floor <<<"$j")
[[ "$floor" =~ ^[0-9]+$ ]] || fail "no floor in pmcctl query: $j"
if [ "$EXACT" = 1 ]; then
	expect_eq "an empty region, every sample" "$(jq .events.instructions.max <<<"$j")" "$lo"
	expect_eq "pmcctl's floor: an empty region's instructions" "$floor" "$lo"
else
	pass "pmcctl's floor $floor, an empty region $lo..$(jq .events.instructions.max <<<"$j") instructions"
fi

# cycles, instructions and a libpfm4 name beside them: the core's INST_RETIRED on arm64 where
# libpfm4 knows the core (cortex-a57), else the architectural event's raw number
# (perf_raw::r0008, or r00c0: retired instructions on Intel and AMD); IPC derived.
pfm=perf_raw::r0008
[ "$ARCH" = x86_64 ] && pfm=perf_raw::r00c0
[ "$ARCH" = aarch64 ] && pmcctl events --format json | jq -e '.events[].name | select(test("::INST_RETIRED$"))' >/dev/null &&
	pfm=INST_RETIRED
run_client "$TMP/names" env PMC_EVENTS="cycles,instructions,$pfm" "$HW" loop loop-names 1000000 3
j=$(region loop-names "$CLIENT_PID")
pfm_key=$(jq -r '.events | keys[] | select(test("::"))' <<<"$j")
[ -n "$pfm_key" ] || fail "no libpfm4 event in $j"
# Each event of a group has its own constant: the reads of the others fall inside its region.
check_loop "libpfm4 name $pfm ($pfm_key)" loop-names "$CLIENT_PID" 1000000 "$pfm_key"
check_loop "instructions beside it" loop-names "$CLIENT_PID" 1000000
[ "$(jq '.derived.ipc > 0' <<<"$j")" = true ] || fail "no ipc derived: $j"
pass "cycles $(jq .events.cycles.max <<<"$j"), ipc = $(jq .derived.ipc <<<"$j")"

# Cycles, by what the same run knows, never by another run's count (perf stat's run of its
# own differs with the machine's load: the clock's frequency, a busy SMT sibling): at least
# the region's instructions / 16 (no core retires more than 16 instructions a cycle: the
# widest shipping ones retire 8-10), at most its thread's CPU time (task-clock, the same
# region) x 10 GHz (no core clocks faster, and the counter counts only while the thread
# runs). Nothing counted, another event's count or one scaled wrong falls outside. Where a
# perf(1) counts (Debian's runs only under a Debian kernel of its version), its figure for a
# run of its own is printed beside, not compared.
ITER=200000000 # 400 M instructions: start-up costs vanish next to it
run_client "$TMP/cyc" env PMC_EVENTS=instructions,cycles,task-clock "$HW" loop loop-cycles $ITER 1
j=$(region loop-cycles "$CLIENT_PID")
cyc=$(jq '.events.cycles.max' <<<"$j") ins=$(jq '.events.instructions.max' <<<"$j")
tc=$(jq '.events["task-clock"].max' <<<"$j")
[[ "$cyc" =~ ^[0-9]+$ && "$ins" =~ ^[0-9]+$ && "$tc" =~ ^[0-9]+$ ]] || fail "cycles, instructions, task-clock: $j"
[ "$ins" -ge $((2 * ITER)) ] || fail "instructions $ins, fewer than the loop's $((2 * ITER))"
[ "$cyc" -ge $((ins / 16)) ] && [ "$cyc" -le $((tc * 10)) ] ||
	fail "cycles $cyc outside $((ins / 16))..$((tc * 10)) (instructions $ins / 16 .. task-clock $tc ns x 10 GHz)"
pass "cycles $cyc within $((ins / 16))..$((tc * 10)) (instructions / 16 .. task-clock ns x 10 GHz): $(awk -v c="$cyc" -v t="$tc" 'BEGIN { printf "%.2f GHz", c / t }')"
if command -v perf >/dev/null && perf stat -x, -e cycles:u true >/dev/null 2>&1; then
	ref=$(perf stat -x, -e cycles:u "$HW" loop perf-ref $ITER 1 2>&1 >/dev/null | awk -F, '/cycles/ { print $1; exit }')
	echo "note: perf stat's cycles:u for a run of its own: $ref (not compared: another run)"
fi

# More hardware events than counters: the kernel multiplexes, and the output says so.
if [ "$ARCH" = x86_64 ]; then
	# Generic events every x86 PMU has, under :u, :uk and :k: 16 hardware events (the most a
	# thread may ask for), more than any x86 core PMU's generic and fixed counters together
	# (a fixed counter holds one of cycles:u, cycles:uk, cycles:k at a time).
	many=cycles:u,cycles:uk,cycles:k,instructions:u,instructions:uk,instructions:k
	many=$many,branches:u,branches:uk,branches:k,branch-misses:u,branch-misses:uk,branch-misses:k
	many=$many,cache-references:u,cache-references:uk,cache-references:k,cache-misses:u,cache-misses:uk
	run_client "$TMP/mux" env PMC_EVENTS=$many "$PMC_TEST_CLIENT_BIN" cpu 20
	j=$(region_json spin "$CLIENT_PID")
	[ "$(jq '[.events[] | select(.scaled)] | length > 0' <<<"$j")" = true ] || fail "16 hardware events, none marked scaled: $j"
	pass "multiplexed events marked scaled: $(jq -c '[.events | to_entries[] | select(.value.scaled) | .key]' <<<"$j")"
	exit 0
fi
# arm64: 6 event counters and the cycle counter; armv8_pmuv3 may have as few as cycles and
# instructions (QEMU's), so 8 events of those two (generic and raw: INST_RETIRED 0x08,
# CPU_CYCLES 0x11), more than the 7 counters.
many=instructions,instructions:k,instructions:uk,cycles,cycles:k,cycles:uk,perf_raw::r0008,perf_raw::r0011
# (The totals below need each region many rotations long: NM iterations.)
N=10000000 K=5 NM=100000000
run_client "$TMP/mux" env PMC_EVENTS=$many "$HW" loop loop-mux $NM $K
j=$(region loop-mux "$CLIENT_PID")
[ "$(jq '.events | length' <<<"$j")" = 8 ] || fail "8 events asked for, got $j"
jq -e '[.events[] | select(.scaled and .running_ratio > 0 and .running_ratio < 1)] | length == 8' <<<"$j" >/dev/null ||
	fail "not every one of 8 events on 7 counters marked scaled with its ratio: $j"
pass "8 events on 7 counters, all scaled: running ratios $(jq -c '[.events[].running_ratio]' <<<"$j")"
# Multiplexed, a group's reads may find it off its counter (the slow path): its wall clock is
# still the page's, the same at both ends.
run_client "$TMP/muxw" env PMC_EVENTS=$many "$HW" wall wall-mux $N $K
check_wall "8 events on 7 counters" wall-mux "$CLIENT_PID" "$TMP/muxw" $K
# Their totals against the truth this run knows (2 x NM x K user instructions; the two events
# count user mode only), within a bound argued from the loop: it retires its instructions at
# one steady rate, so an event's count while on a counter, scaled by the region's enabled /
# running time, is the loop's instructions but for the time the event runs while no user
# instruction retires: the kernel's tick and rotation, t of some microseconds at each of the
# region's L/W rotations (W a tick, 4 ms; L, 2 x 10^8 instructions, is 200 ms under QEMU's
# -icount shift=0, some 70 ms on a 3 GHz core). Each group runs about half of each region, so
# the error is at most (L/W + 1) x t / (L/2 - W): 1.1 % at a generous t of 20 us (the runs
# here show about 0.1 %), within the 2 % checked. (With regions of a few ticks, as NM = 10^7
# was, a group's share of a region can be a sliver, and the same t a large part of it.) The
# kernel's own read() of the same events opened the same way, a run of its own, is printed
# beside it, not compared (another run).
"$PMC_TEST_HW_REF_BIN" mux $NM $K ${many//,/ } >"$TMP/ref" || fail "pmc-test-hw-ref mux failed"
truth=$((2 * NM * K))
for e in instructions perf_raw::r0008; do
	got=$(jq --arg e "$e" '.events[$e].sum' <<<"$j")
	ref=$(kv "$e" "$TMP/ref" | cut -d' ' -f1)
	awk -v e="$e" -v a="$got" -v b="$truth" -v r="$ref" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d;
		printf "%s: pmc %d, truth %d: %.3f%% off (the kernel read() in a run of its own: %s)\n", e, a, b, d * 100, r;
		exit !(d <= 0.02) }' || fail "$e: multiplexed total off the truth by more than 2 %"
done
pass "multiplexed totals within 2 % of the truth"
