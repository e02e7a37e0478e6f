#!/bin/bash
# pmcctl run: runs a command with PMC_SOCKET and PMC_EVENTS set, prints the regions of that
# command's processes only when it exits, and exits with its status; with the daemon that
# answers at the socket, or with a private one started and stopped for the run.
BUILD_PMCCTL=${PMCCTL_BIN:-}
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
run_as_user() { as_user "$PMCCTL_BIN" run "$@"; }

# --- with the test daemon, as uid 65534 ---
# Another process of the same user records meanwhile: it is not the command's.
# (setpriv and env exec: $! is the client's pid)
# (It holds its thread until $TMP/w0/go, made once the command's runs below are done.)
mkdir -m 1777 "$TMP/w0"
setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" PMC_EVENTS=page-faults \
	"$PMC_TEST_CLIENT_BIN" steady 1 200 5000 "$TMP/w0/go" >"$TMP/other" 2>&1 &
OTHER=$!
wait_status threads 1

run_as_user --events page-faults --format json -- "$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/j" 2>"$TMP/err" ||
	fail "run exits $?: $(cat "$TMP/err")"
# stdout holds the figures only: the command's own output goes to stderr (issue 24:
# `pmcctl run --format json -- app | jq` read the app's lines too).
jq -e . "$TMP/j" >/dev/null || fail "stdout of run --format json is not JSON alone: $(cat "$TMP/j")"
cp "$TMP/j" "$TMP/json"
cp "$TMP/json" "$TMP/first.json"
expect_eq "the command ran, its output on stderr" "$(grep -c '^page_faults=40$' "$TMP/err")" 1
expect_eq "none of it on stdout" "$(grep -c '^page_faults=' "$TMP/j")" 0
expect_eq "its one region" "$(jq -c '[.regions[].name]' "$TMP/json")" '["pages"]'
expect_faults "exactly 40 page faults" "$(jq '.regions[0].events["page-faults"].sum' "$TMP/json")" 40
expect_eq "only the events asked for" "$(jq -c '.regions[0].events | keys' "$TMP/json")" '["page-faults"]'
expect_eq "its pid" "$(jq '.regions[0].pid == .pid' "$TMP/json")" true
expect_eq "exit status in JSON" "$(jq .exit_status "$TMP/json")" 0
expect_eq "the test daemon was used" "$(jq -r .daemon "$TMP/json")" system
grep -v '^[a-z_]*=[0-9]*$' "$TMP/err" && fail "stderr with the system daemon: $(cat "$TMP/err")"
# CSV too; with --output FILE, stdout stays the command's.
run_as_user --events page-faults --format csv -- "$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/c" 2>"$TMP/err" ||
	fail "run --format csv exits $?"
expect_eq "CSV on stdout, the command's output on stderr" \
	"$(grep -c '^page_faults=40$' "$TMP/c"),$(grep -c '^page_faults=40$' "$TMP/err")" 0,1
mkdir "$TMP/user-out" && chown 65534:65534 "$TMP/user-out"
run_as_user --events page-faults --format json --output "$TMP/user-out/o.json" -- "$PMC_TEST_CLIENT_BIN" pages 4 10 \
	>"$TMP/c" 2>"$TMP/err" || fail "run --output exits $?"
expect_eq "with --output, the command's stdout" "$(grep -c '^page_faults=40$' "$TMP/c")" 1
jq -e '.regions[0].name == "pages"' "$TMP/user-out/o.json" >/dev/null || fail "--output file: $(cat "$TMP/user-out/o.json")"

run_as_user --events page-faults -- "$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/t" || fail "run (table) exits $?"
grep -q "^regions of .*pmc-test-client pages 4 10 (pid [0-9]*) and the processes it started; exit status 0:$" "$TMP/t" ||
	fail "table heading: $(cat "$TMP/t")"
expect_faults "table: 40 page faults" "$(awk '$4 == "pages" && $6 == "page-faults" {print $7}' "$TMP/t")" 40

# -r N: each region merged over the runs, one row with the mean and spread (issue 24: a row
# per run's process, 3 of region pages here), in the table, JSON and CSV.
run_as_user -r 3 --events page-faults -- "$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/t" 2>"$TMP/err" ||
	fail "run -r 3 exits $?: $(cat "$TMP/err")"
expect_eq "-r 3 table: one row of pages' page faults" \
	"$(awk '$2 == "pages" && $3 == "page-faults"' "$TMP/t" | wc -l)" 1
expect_faults "-r 3 table: the mean of 40 page faults" \
	"$(awk '$2 == "pages" && $3 == "page-faults" {print $4}' "$TMP/t")" 40
expect_eq "-r 3 table: 10 calls a run" "$(awk '$2 == "pages" && $3 == "calls" {print $4 "," $6 "," $7}' "$TMP/t")" 10,10,10
run_as_user -r 3 --events page-faults --format json -- "$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/j" 2>"$TMP/err" ||
	fail "run -r 3 --format json exits $?: $(cat "$TMP/err")"
expect_eq "-r 3 JSON: one merged region" "$(jq -c '[.regions_over_runs[] | [.name, .runs]]' "$TMP/j")" '[["pages",3]]'
expect_eq "-r 3 JSON: each run's process kept for diff" "$(jq '[.regions[] | .pid] | unique | length' "$TMP/j")" 3
expect_faults "-r 3 JSON: the mean" "$(jq '.regions_over_runs[0].events["page-faults"].value | floor' "$TMP/j")" 40
if [ -z "${PMC_SANITIZED:-}" ]; then
	expect_eq "-r 3 JSON: exact, no spread" \
		"$(jq -c '.regions_over_runs[0].events["page-faults"] | [.value, .stddev, .min, .max]' "$TMP/j")" '[40,0,40,40]'
fi
run_as_user -r 3 --events page-faults --format csv -- "$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/c" 2>"$TMP/err" ||
	fail "run -r 3 --format csv exits $?: $(cat "$TMP/err")"
expect_eq "-r 3 CSV: one row of pages' page faults, 3 runs" \
	"$(awk -F, '$3 == "pages" && $5 == "page-faults" { print $4 }' "$TMP/c")" 3
expect_faults "-r 3 CSV: the mean" "$(awk -F, '$3 == "pages" && $5 == "page-faults" { print $6 }' "$TMP/c")" 40
# Two processes a run (fork): a row per region, whichever process ran it.
run_as_user -r 2 --events page-faults --format json -- "$PMC_TEST_CLIENT_BIN" fork 2 5 >"$TMP/j" 2>"$TMP/err" ||
	fail "run -r 2 fork exits $?: $(cat "$TMP/err")"
expect_eq "-r 2 of fork: each region once" \
	"$(jq -c '[.regions_over_runs[].name] | sort | . == unique and index("child") != null and index("parent") != null' "$TMP/j")" true
expect_faults "-r 2 of fork: the child's 10 pages a run" \
	"$(jq '.regions_over_runs[] | select(.name == "child") | .events["page-faults"].value | floor' "$TMP/j")" 10

# The command's exit status passes through; its children are the command's too (found by
# the run's tag; e2e-run-many checks short-lived ones; region "steady", 1 fresh page a run).
set +e
run_as_user --events page-faults --format json -- sh -c "$PMC_TEST_CLIENT_BIN steady 1 40 5000; exit 3" \
	>"$TMP/j" 2>"$TMP/err"
rc=$?
set -e
expect_eq "exit status 3 passed through" $rc 3
sed -n '/^{/,$p' "$TMP/j" >"$TMP/json"
expect_eq "exit status 3 in JSON" "$(jq .exit_status "$TMP/json")" 3
cp "$TMP/json" "$TMP/exit3.json"
expect_eq "the child's region" "$(jq -c '[.regions[].name]' "$TMP/json")" '["steady"]'
expect_faults "the child's 40 page faults" "$(jq '.regions[0].events["page-faults"].sum' "$TMP/json")" 40
expect_eq "the child is not the shell" "$(jq '.regions[0].pid != .pid' "$TMP/json")" true

# --region filters what is printed (of the command's own process: "fork" forks a child
# that lives a few ms, which pmcctl may miss with this daemon; see the private one below).
run_as_user --region 'par*' --format json -- "$PMC_TEST_CLIENT_BIN" fork 2 5 >"$TMP/j" || fail "run --region"
expect_eq "--region 'par*'" "$(sed -n '/^{/,$p' "$TMP/j" | jq -c '[.regions[].name] | sort')" '["parent","parent-after"]'

# Killed by a signal: 128 + N.
set +e
run_as_user -- sh -c 'kill -TERM $$' >"$TMP/t" 2>&1
rc=$?
set -e
expect_eq "killed by SIGTERM" $rc 143
grep -q "recorded no regions" "$TMP/t" || fail "no regions message: $(cat "$TMP/t")"
set +e
run_as_user -- /nonexistent/program >/dev/null 2>"$TMP/err"
rc=$?
run_as_user >/dev/null 2>&1
rc2=$?
set -e
expect_eq "a command that is not there" $rc 127
grep -q "cannot run '/nonexistent/program': No such file or directory" "$TMP/err" || fail "$(cat "$TMP/err")"
expect_eq "run without a command" $rc2 2

touch "$TMP/w0/go"
wait "$OTHER" || fail "the other client failed: $(cat "$TMP/other")"
for f in first exit3; do
	expect_eq "a process started before the command is not the command's ($f)" \
		"$(jq --argjson p "$OTHER" '[.regions[] | select(.pid == $p)] | length' "$TMP/$f.json")" 0
done
expect_eq "though the user sees it" \
	"$(as_user "$PMCCTL_BIN" query --pid "$OTHER" --format json | jq '.regions | length')" 1
# One the user starts while the command runs, outside its tree, is not either: the command
# says it started ($TMP/w/started), then waits for $TMP/w/go, made once the other one ended.
mkdir -m 1777 "$TMP/w"
# (The command's wait is bounded too, 120 s, should the test fail before it makes go.)
run_as_user --events page-faults --format json -- sh -c "touch $TMP/w/started;
	for i in \$(seq 2400); do [ -e $TMP/w/go ] && break; sleep 0.05; done;
	exec $PMC_TEST_CLIENT_BIN steady 1 20 5000" >"$TMP/j" 2>&1 &
R=$!
started() { [ -e "$TMP/w/started" ] || { kill -0 "$R" 2>/dev/null || fail "run ended early: $(cat "$TMP/j")"; false; }; }
wait_until "the command to start" 120 started
run_client "$TMP/u" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named unrelated 1 3
touch "$TMP/w/go"
wait "$R" || fail "run: $(cat "$TMP/j")"
expect_eq "a process started beside the command is not the command's" \
	"$(sed -n '/^{/,$p' "$TMP/j" | jq -c '[.regions[].name]')" '["steady"]'
expect_eq "though the user sees it" \
	"$(as_user "$PMCCTL_BIN" query --region unrelated --format json | jq '.regions | length')" 1

# --- no daemon at the socket: a private one, started and stopped ---
# pmcctl of the build tree, as root: it finds ../daemon/pmcdaemon.
NONE=$TMP/none.sock
private_check() { # OUT ERR: the daemon pmcctl said it started is gone, and its socket
	local pid sock
	pid=$(sed -n 's/^pmcctl: no pmcdaemon answers at .*: counting with a private one (pid \([0-9]*\), socket .*$/\1/p' "$2")
	sock=$(sed -n 's/^pmcctl: no pmcdaemon answers at .*: counting with a private one (pid [0-9]*, socket \(.*\)) until the command ends$/\1/p' "$2")
	[ -n "$pid" ] && [ -n "$sock" ] || fail "no word of a private daemon: $(cat "$2")"
	kill -0 "$pid" 2>/dev/null && fail "the private pmcdaemon $pid still runs"
	[ -e "$sock" ] && fail "its socket $sock is left"
	[ -e "$(dirname "$sock")" ] && fail "its directory $(dirname "$sock") is left"
	pgrep -f -- "--socket $sock" >/dev/null && fail "a pmcdaemon on $sock still runs"
	pass "private pmcdaemon $pid on $sock started and stopped, nothing left"
}
"$BUILD_PMCCTL" --socket "$NONE" run --events page-faults --format json -- "$PMC_TEST_CLIENT_BIN" pages 4 10 \
	>"$TMP/j" 2>"$TMP/err" || fail "private run exits $?: $(cat "$TMP/err")"
private_check "$TMP/j" "$TMP/err"
sed -n '/^{/,$p' "$TMP/j" >"$TMP/json"
expect_eq "private: the daemon" "$(jq -r .daemon "$TMP/json")" private
expect_faults "private: exactly 40 page faults" "$(jq '.regions[0].events["page-faults"].sum' "$TMP/json")" 40
set +e
PMC_SOCKET=$NONE "$BUILD_PMCCTL" run -- sh -c "$PMC_TEST_CLIENT_BIN pages 4 10 >/dev/null; exit 3" >"$TMP/t" 2>"$TMP/err"
rc=$?
set -e
expect_eq "private: exit status 3" $rc 3
private_check "$TMP/t" "$TMP/err"
grep -q "exit status 3:$" "$TMP/t" || fail "private table: $(cat "$TMP/t")"
expect_faults "private: the short-lived child's 40 page faults" \
	"$(awk '$4 == "pages" && $6 == "page-faults" {print $7}' "$TMP/t")" 40
# A process the command forks (region "child", a few ms): a private daemon misses none.
"$BUILD_PMCCTL" --socket "$NONE" run --events page-faults --format json -- "$PMC_TEST_CLIENT_BIN" fork 2 5 \
	>"$TMP/j" 2>"$TMP/err" || fail "private run fork exits $?: $(cat "$TMP/err")"
private_check "$TMP/j" "$TMP/err"
sed -n '/^{/,$p' "$TMP/j" >"$TMP/json"
expect_eq "fork: the child process's region" "$(jq '[.regions[] | select(.name == "child")] | length' "$TMP/json")" 1
expect_eq "fork: two processes" "$(jq '[.regions[].pid] | unique | length' "$TMP/json")" 2
expect_faults "fork: the child's page faults" \
	"$(jq '.regions[] | select(.name == "child") | .events["page-faults"].sum' "$TMP/json")" 10

# As uid 65534, with pmcdaemon next to pmcctl: where the kernel lets users count their own
# threads, user mode only; where it does not, pmcctl says what to do.
cp "$PMCDAEMON_BIN" "$TMP/bin/" && chmod a+rx "$TMP/bin/pmcdaemon"
set +e
as_user env PMC_SOCKET="$NONE" "$PMCCTL_BIN" run --events page-faults --format json -- \
	"$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/j" 2>"$TMP/err"
rc=$?
set -e
if [ "$(cat /proc/sys/kernel/perf_event_paranoid)" -le 2 ]; then
	expect_eq "private, as a user: exit" $rc 0
	private_check "$TMP/j" "$TMP/err"
	sed -n '/^{/,$p' "$TMP/j" >"$TMP/json"
	expect_faults "private, as a user: 40 page faults (user mode)" \
		"$(jq '.regions[0].events["page-faults:u"].sum' "$TMP/json")" 40
	# The default events, user mode only: each counts something (context-switches and
	# cpu-migrations happen in the kernel: counted in user mode they always read 0).
	as_user env PMC_SOCKET="$NONE" "$PMCCTL_BIN" run --format json -- \
		"$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/j" 2>"$TMP/err" ||
		fail "private, as a user, default events: exit $?: $(cat "$TMP/err")"
	sed -n '/^{/,$p' "$TMP/j" >"$TMP/json"
	expect_eq "private, as a user, default events: none reads 0" \
		"$(jq -c '[.regions[0].events | to_entries[] | select(.value.sum == 0) | .key]' "$TMP/json")" '[]'
	expect_eq "private, as a user, default events: none reads 0 in the whole program" \
		"$(jq -c '[.whole_program.events | to_entries[] | select(.value.value == 0) | .key]' "$TMP/json")" '[]'
	grep -q "count user mode only: PMC_EVENTS=task-clock:u,page-faults:u$" "$TMP/err" ||
		fail "private, as a user, default events: $(cat "$TMP/err")"
	# Named, a kernel-only event is counted as asked, with a warning.
	as_user env PMC_SOCKET="$NONE" "$PMCCTL_BIN" run --events context-switches -- true \
		>"$TMP/t" 2>"$TMP/err" || fail "context-switches as a user: exit $?: $(cat "$TMP/err")"
	grep -q "^pmcctl: warning: context-switches happens in kernel mode only: counted in user mode, it reads 0$" \
		"$TMP/err" || fail "no warning for context-switches:u: $(cat "$TMP/err")"
else
	expect_eq "private, as a user, perf_event_paranoid > 2: exit" $rc 69
	grep -q "perf_event_paranoid is [0-9]*.*ask the operator to run pmcdaemon (systemctl enable --now pmcdaemon.socket) or to set kernel.perf_event_paranoid=2" \
		"$TMP/err" || fail "paranoid message: $(cat "$TMP/err")"
	pass "perf_event_paranoid > 2: $(cat "$TMP/err")"
fi
daemon_alive
