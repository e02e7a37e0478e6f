#!/bin/bash
# pmcctl run counts the whole of a command with no pmc call in it (the daemon opens inherited
# counters on the command before its exec, OpenCommand): its threads and the processes it
# starts (N fresh pages written: at least N page faults, and few more; the processes and threads
# add up to the whole); -r N repeats it; a bad event stops pmcctl
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

# --- the whole program: what the run itself knows ---
# Each of pmc-whole-app's threads writes N fresh private pages (MADV_NOHUGEPAGE: a page each),
# and the first write to each faults: a thread counts at least the pages it wrote. Beside them
# a program faults on its own start-up (the loader, the C library, a thread's stack: about 60
# a process here, and not the same from run to run: the kernel promises no figure; a page the
# kernel reclaims or moves meanwhile faults again), so nothing here is compared with another
# run's figure. The most a thread, process or program may count above the pages it wrote is
# SLACK per process: 500 is 8 times the start-up seen here and below the 1,000 pages of a
# thread, so that a thread's pages counted in another's, a child not counted, or a count landing
# in another event's (issue 24: 827,882, task-clock's nanoseconds) all fall outside.
SLACK=500
# within WHAT GOT PAGES [PROCS]: GOT page faults for PAGES written by PROCS processes (1)
within() {
	local hi=$(($3 + SLACK * ${4:-1}))
	[ "$2" -ge "$3" ] && [ "$2" -le "$hi" ] || fail "$1: got '$2', want $3..$hi (the pages written, and at most $SLACK a process more)"
	pass "$1: $2 (pages written $3, at most $hi)"
}
# run_json ARGS...: pmcctl run ARGS as uid 65534, its JSON (what the command printed before it
# left out)
run_json() {
	run_as_user "$@" 2>"$TMP/err" | sed -n '/^{/,$p' >"$TMP/run.json"
	jq -e .whole_program "$TMP/run.json" >/dev/null || fail "run $*: $(cat "$TMP/err")"
}
faults() { # ARGS...: the whole program's page faults of pmc-whole-app ARGS
	run_json --events page-faults --format json -- "$APP" "$@"
	jq '.whole_program.events["page-faults"].value' "$TMP/run.json"
}
within "3000 fresh pages" "$(faults 3000)" 3000
within "2 processes x 1000 pages: the child process counted too" "$(faults 1000 2)" 2000 2
within "4 threads x 1000 pages: every thread counted" "$(faults 1000 1 4)" 4000

# Per process and per thread (the daemon opens the counters on each CPU with inherit_stat; the
# kernel reports each task's counts as it ends): each within its own pages, adding up to the
# whole. per_task EVENTS CMD...: "whole;processes' faults by pid;threads' faults by pid, main
# thread first"
per_task() {
	local ev=$1
	shift
	run_json --per-thread --events "$ev" --format json -- "$@"
	jq -r '.whole_program | [.events["page-faults"].value,
		(.processes | sort_by(.pid) | map(.events["page-faults"]) | join(",")),
		(.threads | sort_by([.pid, .tid != .pid]) | map(.events["page-faults"]) | join(","))] | join(";")' \
		"$TMP/run.json"
}
# adds_up WHAT "WHOLE;P,P...;T,T...": the processes and the threads add up to the whole
adds_up() {
	local w p th x sp=0 st=0 P T
	IFS=';' read -r w p th <<<"$2"
	IFS=, read -r -a P <<<"$p"
	IFS=, read -r -a T <<<"$th"
	for x in "${P[@]}"; do sp=$((sp + x)); done
	for x in "${T[@]}"; do st=$((st + x)); done
	[ "$sp" = "$w" ] && [ "$st" = "$w" ] ||
		fail "$1: the whole $w, its processes $p (sum $sp), its threads $th (sum $st)"
}
# sh running pmc-whole-app twice, each with 2 threads of 1000 pages: sh's own process writes no
# page of its own (its start-up alone: within 0 pages), each program's 2000, each thread 1000.
# (Its processes are exec'd: a process that forks shares pages it and its child write after,
# whose faults fall to one or the other as they run, 1 in 6,000 here.)
got=$(per_task page-faults sh -c "$APP 1000 1 2; $APP 1000 1 2")
IFS=';' read -r t p th <<<"$got"
IFS=, read -r -a P <<<"$p"
IFS=, read -r -a T <<<"$th"
expect_eq "sh and 2 programs: processes" "${#P[@]}" 3
expect_eq "sh and 2 programs of 2 threads: threads" "${#T[@]}" 5
within "sh itself (its start-up alone)" "${P[0]}" 0
within "sh's thread" "${T[0]}" 0
for i in 1 2; do
	within "program $i: 2 threads x 1000 pages" "${P[i]}" 2000
done
for i in 1 2 3 4; do
	within "thread $i of the programs: 1000 pages" "${T[i]}" 1000
done
adds_up "sh and 2 programs" "$got"
pass "the processes and the threads add up to the whole: $got"
# Events of two PMUs (task-clock has one of its own, page-faults and context-switches share
# the software one), 20 runs of two-thread programs. At a context switch between a thread
# and a copy of its counter context, the kernel may swap the two contexts, and inherit_stat
# then exchanges their counts pairwise in list order: the command's own list is in the order
# the daemon opened them, a copy's in the kernel's (CPU, PMU) order, so that one event's
# count landed in another's (827,882 page faults: task-clock's nanoseconds; issue 24). The
# daemon's anchor, a counter of the command's own task that is not inherited, keeps its
# context from being copied (OpenCommand.anchor). Each run on its own: each thread within its
# 1000 pages, each process its 2000, adding up to the whole. (Compared once with a run of
# page-faults alone: a CI run's thread started with a page more than that run's, 2,058 for
# 2,057, though every figure of its own added up; issue 35.)
MIXED=task-clock,page-faults,context-switches
# whole_app_ok "WHOLE;P,..;T,..." PROCS: PROCS processes of 2 threads of 1000 pages each;
# what is wrong with it, or nothing
whole_app_ok() {
	local w p th x P T
	IFS=';' read -r w p th <<<"$1"
	IFS=, read -r -a P <<<"$p"
	IFS=, read -r -a T <<<"$th"
	[ "${#P[@]}" = "$2" ] && [ "${#T[@]}" = $((2 * $2)) ] || { echo "processes or threads missing"; return; }
	for x in "${T[@]}"; do
		[ "$x" -ge 1000 ] && [ "$x" -le $((1000 + SLACK)) ] || { echo "a thread outside 1000..$((1000 + SLACK))"; return; }
	done
	for x in "${P[@]}"; do
		[ "$x" -ge 2000 ] && [ "$x" -le $((2000 + SLACK)) ] || { echo "a process outside 2000..$((2000 + SLACK))"; return; }
	done
	(adds_up "" "$1" >/dev/null 2>&1) || echo "not adding up"
}
bad=
for i in $(seq 20); do
	got=$(per_task "$MIXED" "$APP" 1000 1 2)
	why=$(whole_app_ok "$got" 1)
	[ -z "$why" ] || bad+=" run $i: $got ($why);"
	got=$(per_task "$MIXED" "$APP" 1000 2 2)
	why=$(whole_app_ok "$got" 2)
	[ -z "$why" ] || bad+=" 2 processes, run $i: $got ($why);"
done
expect_eq "$MIXED, 20 runs of 1 and of 2 processes of 2 threads of 1000 pages (whole;processes;threads): those wrong" "${bad:-none}" none
# pmc-test-client (libpmcclient: its own thread and the library's), 20 runs: 1 process of 2
# threads adding up to the whole; its main thread within the page faults its own region "main"
# counted in the same run (the fresh pages it writes: 11 a call) and SLACK more (its start-up
# with the library's dependencies: about 150 here).
bad=
for i in $(seq 20); do
	IFS=';' read -r t p th <<<"$(per_task "$MIXED" "$PMC_TEST_CLIENT_BIN" tree 2)"
	IFS=, read -r -a T <<<"$th"
	r=$(jq '.regions[] | select(.name == "main") | .events["page-faults"].sum' "$TMP/run.json")
	if [ "$r" != 22 ] || [ "$p" != "$t" ] || [ "${#T[@]}" != 2 ] || [ $((T[0] + T[1])) != "$t" ] ||
		[ "${T[0]}" -lt "$r" ] || [ "${T[0]}" -gt $((r + SLACK)) ]; then
		bad+=" run $i: $t;$p;$th, region main $r;"
	fi
done
expect_eq "$MIXED, 20 runs of pmc-test-client tree 2 (1 process of 2 threads adding up, region main 22 page faults, its thread within 22..$((22 + SLACK))): those wrong" "${bad:-none}" none
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
within "table: page-faults row, 100 fresh pages" "$(awk '$1 == "(whole" && $3 == "page-faults" {print $4}' "$TMP/t")" 100
expect_eq "table: task-clock row in ns" "$(awk '$1 == "(whole" && $3 == "task-clock" {print $5}' "$TMP/t")" ns
expect_eq "table: wall row" "$(awk '$1 == "(whole" && $3 == "wall" {print $5}' "$TMP/t")" ns

# -r N: N runs, their mean and spread: each run within its 500 pages, the mean between the
# least and the most, no spread where they are the same (runs may differ by a page of start-up).
run_as_user -r 3 --events page-faults --format json -- "$APP" 500 >"$TMP/j" 2>"$TMP/err" || fail "-r 3: $(cat "$TMP/err")"
expect_eq "-r 3: runs" "$(jq .whole_program.runs "$TMP/j")" 3
within "-r 3: the least run" "$(jq '.whole_program.events["page-faults"].min' "$TMP/j")" 500
within "-r 3: the most" "$(jq '.whole_program.events["page-faults"].max' "$TMP/j")" 500
expect_eq "-r 3: the mean between them, spread 0 only where they are the same" \
	"$(jq '.whole_program.events["page-faults"] | .min <= .value and .value <= .max and ((.stddev == 0) == (.min == .max))' "$TMP/j")" true
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
	within "pprof: (whole program) flat, 3000 fresh pages" "$(flat "$TMP/w.pb.gz" "(whole program)")" 3000
	# 2 processes: a sample each (pid label), adding up to the whole.
	run_as_user --events page-faults --format pprof -- "$APP" 1000 2 >"$TMP/w2.pb.gz" 2>"$TMP/err" ||
		fail "pprof, 2 processes: $(cat "$TMP/err")"
	within "pprof: 2 processes x 1000 pages" "$(flat "$TMP/w2.pb.gz" "(whole program)")" 2000 2
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
	# (a mean of the runs would be under 500 + SLACK: below the sum's least, 1500)
	within "pprof -r 3: the whole program's sum over the runs" "$(flat "$TMP/w4.pb.gz" "(whole program)")" 1500 3
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
# It dies while the command runs (the command ends once it is gone): the command's exit status
# still, and its figures.
set +e
"$BUILD_PMCCTL" --socket "$NONE" run --events page-faults -- sh -c \
	'pkill -f -- "--socket $PMC_SOCKET"; while pgrep -f -- "--socket $PMC_SOCKET" >/dev/null; do sleep 0.05; done; exit 0' \
	>"$TMP/t" 2>"$TMP/err"
rc=$?
set -e
grep -q "the private pmcdaemon ended while the command ran" "$TMP/err" || fail "no word of it: $(cat "$TMP/err")"
expect_eq "private daemon killed: the command's exit status" $rc 0
grep -q "^(whole program)  *page-faults" "$TMP/t" || fail "whole figures: $(cat "$TMP/t")"
daemon_alive
