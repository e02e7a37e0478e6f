#!/bin/bash
# pmcctl run counts the whole of a command with no pmc call in it (the daemon opens inherited
# counters on the command before its exec, OpenCommand): its threads and the processes it
# starts, exact (N fresh pages written = N page faults, with ASLR off so that the program's
# own start-up faults are the same every run); -r N repeats it; a bad event stops pmcctl
# before the command runs (exit 2, did-you-mean); a private daemon that dies does not change
# the exit status.
BUILD_PMCCTL=${PMCCTL_BIN:-}
. "$(dirname "$0")/../lib/lib.sh"
[ -z "${PMC_SANITIZED:-}" ] || skip "page faults are not exact under sanitizers (their shadow memory: 3,375 for 3,000); the plain build checks the whole-program figures"
start_daemon
cp "$PMC_WHOLE_APP_BIN" "$TMP/bin/" && chmod a+rx "$TMP/bin/pmc-whole-app"
APP=$TMP/bin/pmc-whole-app
# setarch -R: no address-space randomization for pmcctl and the command it starts.
run_as_user() { as_user setarch "$(uname -m)" -R "$PMCCTL_BIN" run "$@"; }
faults() { # ARGS...: the whole program's page faults of pmc-whole-app ARGS
	run_as_user --events page-faults --format json -- "$APP" "$@" 2>"$TMP/err" |
		jq '.whole_program.events["page-faults"].value' || fail "run $*: $(cat "$TMP/err")"
}

# --- the whole program, exact ---
base=$(faults 0)
[ "$base" -gt 0 ] || fail "no whole-program page faults: $base ($(cat "$TMP/err"))"
expect_eq "3000 fresh pages: 3000 page faults more" $(($(faults 3000) - base)) 3000
base2=$(faults 0 2)
expect_eq "2 processes x 1000 pages: the child process counted too" $(($(faults 1000 2) - base2)) 2000
# Four threads: the least of 3 runs each. A page fault the kernel counts twice (once in a
# loaded CI run: 4,002 for 4,000, threads one after another) only ever adds; the least of
# three is the program's own, exactly.
faults_min() {
	local a b c
	a=$(faults "$@") b=$(faults "$@") c=$(faults "$@")
	printf '%s\n' "$a" "$b" "$c" | sort -n | head -1
}
base4=$(faults_min 0 1 4)
expect_eq "4 threads x 1000 pages: every thread counted" $(($(faults_min 1000 1 4) - base4)) 4000

# Per process and per thread (the daemon opens the counters on each CPU with inherit_stat; the
# kernel reports each task's counts as it ends): exact too, and they add up to the sum.
# per_task N: "total;processes' faults by pid;threads' faults by pid, main thread first" of
# a shell that runs pmc-whole-app twice, each with 2 threads of N fresh pages. (Its processes
# are exec'd: a process that forks shares pages it and its child write after, whose faults
# fall to one or the other as they run, 1 in 6,000 here; the whole is exact, as above.)
per_task() {
	run_as_user --per-thread --events page-faults --format json -- \
		sh -c "$APP $1 1 2; $APP $1 1 2" 2>"$TMP/err" |
		jq -r '.whole_program | [.events["page-faults"].value,
			(.processes | sort_by(.pid) | map(.events["page-faults"]) | join(",")),
			(.threads | sort_by([.pid, .tid != .pid]) | map(.events["page-faults"]) | join(","))] | join(";")' ||
		fail "run --per-thread $*: $(cat "$TMP/err")"
}
IFS=';' read -r t0 p0 th0 <<<"$(per_task 0)"
IFS=';' read -r t1 p1 th1 <<<"$(per_task 1000)"
IFS=, read -r -a P0 <<<"$p0"; IFS=, read -r -a P1 <<<"$p1"
IFS=, read -r -a T0 <<<"$th0"; IFS=, read -r -a T1 <<<"$th1"
expect_eq "sh and 2 programs: processes" "${#P1[@]}" 3
expect_eq "sh and 2 programs of 2 threads: threads" "${#T1[@]}" 5
for i in 1 2; do
	expect_eq "program $i: 2 threads x 1000 pages more" $((P1[i] - P0[i])) 2000
done
for i in 1 2 3 4; do
	expect_eq "thread $i of the programs: 1000 pages more" $((T1[i] - T0[i])) 1000
done
expect_eq "the processes add up to the sum" $((P1[0] + P1[1] + P1[2])) "$t1"
expect_eq "the threads add up to the sum" $((T1[0] + T1[1] + T1[2] + T1[3] + T1[4])) "$t1"
# Events of two PMUs (task-clock has one of its own, page-faults and context-switches share
# the software one), 20 runs of two-thread programs. At a context switch between a thread
# and a copy of its counter context, the kernel may swap the two contexts, and inherit_stat
# then exchanges their counts pairwise in list order: the command's own list is in the order
# the daemon opened them, a copy's in the kernel's (CPU, PMU) order, so that one event's
# count landed in another's (827,882 page faults: task-clock's nanoseconds; issue 24). The
# daemon's anchor, a counter of the command's own task that is not inherited, keeps its
# context from being copied (OpenCommand.anchor).
MIXED=task-clock,page-faults,context-switches
mixed() { # EVENTS CMD...: "whole;processes';threads'" page faults, main threads first
	local ev=$1
	shift
	run_as_user --per-thread --events "$ev" --format json -- "$@" 2>"$TMP/err" |
		jq -r '.whole_program | [.events["page-faults"].value,
			(.processes | sort_by(.pid) | map(.events["page-faults"]) | join(",")),
			(.threads | sort_by([.pid, .tid != .pid]) | map(.events["page-faults"]) | join(","))] | join(";")' ||
		fail "run --events $ev $*: $(cat "$TMP/err")"
}
# pmc-whole-app, 2 threads of 1000 pages: exact, as with page-faults alone, thread by thread;
# 2 processes of 2 threads: the whole exact.
want=$(mixed page-faults "$APP" 1000 1 2)
want2=$(mixed page-faults "$APP" 1000 2 2)
bad=
for i in $(seq 20); do
	got=$(mixed "$MIXED" "$APP" 1000 1 2)
	[ "$got" = "$want" ] || bad+=" run $i: $got;"
	got=$(mixed "$MIXED" "$APP" 1000 2 2)
	[ "${got%%;*}" = "${want2%%;*}" ] || bad+=" 2 processes, run $i: $got;"
done
expect_eq "$MIXED, 20 runs of 2 threads (whole;process;threads, as page-faults alone counts them): those that differ" "${bad:-none}" none
# pmc-test-client (libpmcclient: its own thread and the library's): within the bounds that
# 5 runs with page-faults alone give (their least halved, their most doubled), its threads
# adding up to it.
lo= hi=
for i in $(seq 5); do
	IFS=';' read -r t _ _ <<<"$(mixed page-faults "$PMC_TEST_CLIENT_BIN" tree 2)"
	[ -z "$lo" ] || [ "$t" -lt "$lo" ] && lo=$t
	[ -z "$hi" ] || [ "$t" -gt "$hi" ] && hi=$t
done
bad=
for i in $(seq 20); do
	IFS=';' read -r t p th <<<"$(mixed "$MIXED" "$PMC_TEST_CLIENT_BIN" tree 2)"
	IFS=, read -r -a T <<<"$th"
	if [ "$t" -lt $((lo / 2)) ] || [ "$t" -gt $((hi * 2)) ] || [ "$p" != "$t" ] ||
		[ "${#T[@]}" != 2 ] || [ $((T[0] + T[1])) != "$t" ]; then
		bad+=" run $i: $t;$p;$th;"
	fi
done
expect_eq "$MIXED, 20 runs of pmc-test-client tree 2 (page faults in $((lo / 2))..$((hi * 2)), 1 process of 2 threads adding up): those outside" "${bad:-none}" none
# The table: a row per process where there are several, with its threads; --per-thread: a
# row per thread.
run_as_user --events page-faults -- "$APP" 10 3 2 >"$TMP/t" 2>"$TMP/err" || fail "table: $(cat "$TMP/err")"
grep -q "^the whole program per process (3 processes; they add up to the figures above):$" "$TMP/t" ||
	fail "no per-process table: $(cat "$TMP/t")"
expect_eq "per-process rows, 2 threads each" "$(awk '/per process/ { on = 1; next } on && $2 == 2 && $3 == "pmc-whole-app"' "$TMP/t" | wc -l)" 3
run_as_user --events page-faults -- "$APP" 10 >"$TMP/t" 2>"$TMP/err" || fail "table: $(cat "$TMP/err")"
grep -q "per process" "$TMP/t" && fail "a per-process table for one process: $(cat "$TMP/t")"
# CSV: the whole program's rows, then a (process) row each, with --per-thread a (thread TID) row each.
run_as_user --per-thread --events page-faults --format csv -- "$APP" 10 3 2 >"$TMP/c" 2>"$TMP/err" ||
	fail "csv: $(cat "$TMP/err")"
expect_eq "CSV rows: whole program, processes, threads" \
	"$(awk -F, '$3 == "(whole program)" { w++ } $3 == "(process)" { p++ } $3 ~ /^\(thread / { t++ } END { print w "," p "," t }' "$TMP/c")" 2,3,6
expect_eq "CSV: the processes add up to the sum" \
	"$(awk -F, '$3 == "(process)" { s += $6 } END { print s }' "$TMP/c")" \
	"$(awk -F, '$3 == "(whole program)" && $5 == "page-faults" { print $6 }' "$TMP/c")"

# The table: a "(whole program)" row for each event, and the wall time; the program has
# no region, and says so.
run_as_user --events page-faults,task-clock -- "$APP" 100 >"$TMP/t" 2>"$TMP/err" || fail "table: $(cat "$TMP/err")"
grep -q "recorded no regions (no libpmcclient region ran in them)" "$TMP/t" || fail "table: $(cat "$TMP/t")"
expect_eq "table: page-faults row" "$(awk '$1 == "(whole" && $3 == "page-faults" {print $4}' "$TMP/t")" $((base + 100))
expect_eq "table: task-clock row in ns" "$(awk '$1 == "(whole" && $3 == "task-clock" {print $5}' "$TMP/t")" ns
expect_eq "table: wall row" "$(awk '$1 == "(whole" && $3 == "wall" {print $5}' "$TMP/t")" ns

# -r N: N runs, their mean and spread (none: the same count each run).
run_as_user -r 3 --events page-faults --format json -- "$APP" 500 >"$TMP/j" 2>"$TMP/err" || fail "-r 3: $(cat "$TMP/err")"
expect_eq "-r 3: runs" "$(jq .whole_program.runs "$TMP/j")" 3
expect_eq "-r 3: mean" "$(jq '.whole_program.events["page-faults"].value' "$TMP/j")" $((base + 500))
expect_eq "-r 3: spread" "$(jq '.whole_program.events["page-faults"].stddev' "$TMP/j")" 0
expect_eq "-r 3: min = max" "$(jq '.whole_program.events["page-faults"] | .min == .max' "$TMP/j")" true
run_as_user -r 3 --events page-faults -- "$APP" 500 >"$TMP/t" 2>&1 || fail "-r 3 table"
grep -q "the mean of 3 runs" "$TMP/t" || fail "-r 3 table: $(cat "$TMP/t")"
set +e
run_as_user -r 0 -- true 2>"$TMP/err"
rc=$?
set -e
expect_eq "-r 0 is a usage error" $rc 2
set +e
"$PMCCTL_BIN" --socket "$SOCK" query --per-thread >/dev/null 2>"$TMP/err"
rc=$?
set -e
expect_eq "--per-thread is for run only" "$rc,$(cat "$TMP/err" | head -1)" "2,pmcctl: --per-thread is for 'run' only, not 'query'"

# --- pprof: the whole program beside the regions, as go tool pprof reads it ---
if command -v go >/dev/null && go tool pprof -h >/dev/null 2>&1; then
	# flat FILE FUNCTION: pprof's flat page faults of FUNCTION (a name of one or two words).
	flat() {
		go tool pprof -top -nodecount=1000 -sample_index=page-faults "$1" 2>"$TMP/pprof.err" |
			awk -v f="$2" '{ n = $6; if (NF > 6) n = n " " $7 } n == f { print $1 }'
	}
	run_as_user --events page-faults --format pprof -- "$APP" 3000 >"$TMP/w.pb.gz" 2>"$TMP/err" ||
		fail "pprof: $(cat "$TMP/err")"
	expect_eq "pprof: (whole program) flat, 3000 fresh pages" "$(flat "$TMP/w.pb.gz" "(whole program)")" $((base + 3000))
	# 2 processes: a sample each (pid label), adding up to the whole.
	run_as_user --events page-faults --format pprof -- "$APP" 1000 2 >"$TMP/w2.pb.gz" 2>"$TMP/err" ||
		fail "pprof, 2 processes: $(cat "$TMP/err")"
	expect_eq "pprof: 2 processes x 1000 pages" "$(flat "$TMP/w2.pb.gz" "(whole program)")" $((base2 + 2000))
	expect_eq "pprof: a whole-program sample per process" \
		"$(go tool pprof -traces -sample_index=page-faults "$TMP/w2.pb.gz" 2>/dev/null | grep -c '^ *pid: ')" 2
	# Beside the regions: region pages (4 pages x 10 calls) and the whole program around it.
	run_as_user --events page-faults --format pprof -- "$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/w3.pb.gz" 2>"$TMP/err" ||
		fail "pprof, regions: $(cat "$TMP/err")"
	expect_eq "pprof: the region beside the whole program" "$(flat "$TMP/w3.pb.gz" pages)" 40
	[ "$(flat "$TMP/w3.pb.gz" "(whole program)")" -gt 40 ] ||
		fail "pprof: no whole program beside the regions: $(go tool pprof -top -sample_index=page-faults "$TMP/w3.pb.gz" 2>&1)"
	pass "pprof: (whole program) $(flat "$TMP/w3.pb.gz" "(whole program)") page faults beside region pages' 40"
	# -r 3: the sums over the runs, as the regions' are.
	run_as_user -r 3 --events page-faults --format pprof -- "$APP" 500 >"$TMP/w4.pb.gz" 2>"$TMP/err" ||
		fail "pprof -r 3: $(cat "$TMP/err")"
	expect_eq "pprof -r 3: the whole program's sum over the runs" "$(flat "$TMP/w4.pb.gz" "(whole program)")" $((3 * (base + 500)))
else
	pass "pprof part skipped: no go tool pprof (apt-get install golang-go)"
fi

# --- bad events: found before the command runs ---
for ev in page-fualts page-faults,cs,bogus-event; do
	set +e
	run_as_user --events "$ev" -- touch "$TMP/ran" >"$TMP/t" 2>"$TMP/err"
	rc=$?
	set -e
	expect_eq "--events $ev: exit 2" $rc 2
	[ -e "$TMP/ran" ] && fail "--events $ev: the command ran"
	grep -q "unknown event" "$TMP/err" || fail "--events $ev: $(cat "$TMP/err")"
	pass "--events $ev: $(cat "$TMP/err")"
done
grep -q "did you mean 'page-faults'" <(run_as_user --events page-fualts -- true 2>&1) || fail "no did-you-mean"
pass "did you mean 'page-faults'"
if ! "$PMCCTL_BIN" --socket "$SOCK" events --format json | jq -e .hardware_pmu >/dev/null; then
	set +e
	run_as_user --events cycles -- touch "$TMP/ran" >"$TMP/t" 2>"$TMP/err"
	rc=$?
	set -e
	expect_eq "--events cycles without a PMU: exit 2" $rc 2
	[ -e "$TMP/ran" ] && fail "--events cycles: the command ran"
	pass "--events cycles: $(cat "$TMP/err")"
fi

# --- a private daemon (none at the socket) ---
NONE=$TMP/none.sock
"$BUILD_PMCCTL" --socket "$NONE" run --events page-faults --format json -- "$APP" 200 \
	>"$TMP/j" 2>"$TMP/err" || fail "private run exits $?: $(cat "$TMP/err")"
expect_eq "private: the whole program counted" \
	"$(jq '.whole_program.events["page-faults"].value > 200' "$TMP/j")" true
# It dies while the command runs: the command's exit status still, and its figures.
set +e
"$BUILD_PMCCTL" --socket "$NONE" run --events page-faults -- sh -c \
	'pkill -f -- "--socket $PMC_SOCKET"; sleep 0.2; exit 0' >"$TMP/t" 2>"$TMP/err"
rc=$?
set -e
grep -q "the private pmcdaemon ended while the command ran" "$TMP/err" || fail "no word of it: $(cat "$TMP/err")"
expect_eq "private daemon killed: the command's exit status" $rc 0
grep -q "^(whole program)  *page-faults" "$TMP/t" || fail "whole figures: $(cat "$TMP/t")"
daemon_alive
