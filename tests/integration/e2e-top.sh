#!/bin/bash
# pmcctl top: the live view, while a client runs regions in the background: two refreshes
# with the region and its rates, filters, Ctrl-C exits 0, usage errors exit 2.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon

# One thread running region "mt-pages" (one fresh page per run) until killed; setpriv
# execs the client, so $! is its pid.
setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" env PMC_EVENTS=page-faults,task-clock "$PMC_TEST_CLIENT_BIN" threads 1 1 1000000000 >"$TMP/c" 2>"$TMP/c.err" &
C=$!
# cleanup (lib.sh) takes the exit status from $?; errexit would stop the trap half-way.
trap 'rc=$?; set +e; kill "$C" 2>/dev/null; wait "$C" 2>/dev/null; (exit $rc); cleanup' EXIT
for _ in $(seq 1200); do
	pmcctl query --pid "$C" --region mt-pages --format json | jq -e '.regions[0].count > 0' >/dev/null && break
	kill -0 "$C" 2>/dev/null || { cat "$TMP/c.err" >&2; fail "the client exited"; }
	sleep 0.1
done
pmcctl query --pid "$C" --region mt-pages --format json | jq -e '.regions[0].count > 0' >/dev/null ||
	fail "the client's region never showed up"

set +e
pmcctl top --iterations 2 --interval 0.5 >"$TMP/top" 2>"$TMP/top.err"
expect_eq "top exit" $? 0
set -e
cat "$TMP/top"
[ ! -s "$TMP/top.err" ] || fail "top wrote to stderr: $(cat "$TMP/top.err")"
expect_eq "refreshes" "$(grep -c '^pmcctl top - ' "$TMP/top")" 2
# Not a terminal: no escape sequences, refreshes separated by one blank line.
! grep -q $'\033' "$TMP/top" || fail "escape sequences on a pipe"
awk '/^pmcctl top - / && NR > 1 && prev != "" { exit 1 } { prev = $0 }' "$TMP/top" ||
	fail "refreshes not separated by a blank line"
# task-clock's nanoseconds per second are a CPU utilization: in per cent of one CPU, not
# "7.5M" (issue 24).
grep -qE '^ *PID +COMM +CONTAINER +REGION +RUNS/S +RUNS +WALL/RUN +page-faults/s +task-clock %CPU$' "$TMP/top" ||
	fail "column heads: $(grep PID "$TMP/top")"
awk -v p="$C" '$1 == p && $4 == "mt-pages" && $NF !~ /^[0-9]+\.[0-9]$/ { print $NF; exit 1 }' "$TMP/top" ||
	fail "task-clock %CPU is not a percentage: $(grep mt-pages "$TMP/top")"
pass "task-clock as %CPU: $(awk -v p="$C" '$1 == p && $4 == "mt-pages" { print $NF }' "$TMP/top" | tr '\n' ' ')"
expect_eq "rows of the client's region" "$(awk -v p="$C" '$1 == p && $4 == "mt-pages"' "$TMP/top" | wc -l)" 2
# The client is running: its rate is not 0, and one page per run gives as many page
# faults per second as runs per second (the same figures, so the same text).
awk -v p="$C" -v sanitized="${PMC_SANITIZED:-}" '$1 == p && $4 == "mt-pages" {
	if ($5 == "0" || $5 == "-") { print "rate " $5; exit 1 }
	if (sanitized == "" && $8 != $5) { print "runs/s " $5 " page-faults/s " $8; exit 1 }
}' "$TMP/top" || fail "rates of mt-pages"
pass "rates of mt-pages"

# On a terminal narrower than the header: the header wraps between its fields, none lost,
# and no line is wider than the terminal (issue 24: cut at 120 columns, "rejected" lost).
if command -v script >/dev/null; then
	script -qc "stty cols 60 rows 20; $PMCCTL_BIN --socket $SOCK top --iterations 1 --interval 0.2" \
		/dev/null </dev/null >"$TMP/tty" || fail "top on a terminal: $(cat "$TMP/tty")"
	sed -e 's/\r$//' -e 's/\x1b\[H\x1b\[2J//' "$TMP/tty" >"$TMP/tty.txt"
	for field in "up " "clients " "threads " "processes " "regions " "samples " "batches " "dropped " "rejected "; do
		grep -q "$field[0-9]" "$TMP/tty.txt" || fail "header field '$field' lost on 60 columns: $(cat "$TMP/tty.txt")"
	done
	awk 'length($0) > 60 { print; exit 1 }' "$TMP/tty.txt" || fail "a line wider than 60 columns"
	grep -q mt-pages "$TMP/tty.txt" || fail "no row on a terminal: $(cat "$TMP/tty.txt")"
	pass "header wrapped on 60 columns: $(head -4 "$TMP/tty.txt" | tr '\n' '|')"
fi
pmcctl top --iterations 1 --interval 0.1 --region nope >"$TMP/top" || fail "top --region nope"
grep -q "^no region matches --region 'nope'" "$TMP/top" || fail "--region filter: $(cat "$TMP/top")"
pmcctl top --iterations 1 --interval 0.1 --pid "$C" >"$TMP/top" || fail "top --pid"
expect_eq "--pid filter rows" "$(awk -v p="$C" '$1 == p && $4 == "mt-pages"' "$TMP/top" | wc -l)" 1

# Ctrl-C: exits 0 after what it printed (pmcctl itself in the background, so that $! is
# its pid; it must undo the SIG_IGN a background job gets for SIGINT). Its own file: the
# last command's output in $TMP/top has mt-pages, and the signal must come after pmcctl
# printed, not before the shell's child truncated the file.
"$PMCCTL_BIN" --socket "$SOCK" top --interval 0.2 >"$TMP/top-int" 2>&1 &
T=$!
for _ in $(seq 1200); do
	grep -q mt-pages "$TMP/top-int" && break
	sleep 0.1
done
kill -INT "$T"
for _ in $(seq 1200); do
	kill -0 "$T" 2>/dev/null || break
	sleep 0.1
done
if kill -0 "$T" 2>/dev/null; then
	kill -KILL "$T"
	fail "top still running 120 s after SIGINT"
fi
set +e
wait "$T"
expect_eq "exit on SIGINT" $? 0
set -e
grep -q mt-pages "$TMP/top-int" || fail "top printed nothing before SIGINT: $(cat "$TMP/top-int")"

set +e
pmcctl top --format json >/dev/null 2>&1
expect_eq "top --format json exit" $? 2
pmcctl top --format table --iterations 1 --interval 0.1 >/dev/null 2>&1
expect_eq "top --format table exit" $? 0
pmcctl top --iterations 0 >/dev/null 2>&1
expect_eq "--iterations 0 exit" $? 2
pmcctl top --interval abc >/dev/null 2>&1
expect_eq "--interval abc exit" $? 2
pmcctl status --interval 1 >/dev/null 2>&1
expect_eq "status --interval exit" $? 2
"$PMCCTL_BIN" --help >"$TMP/help.txt" && grep -q '^  top ' "$TMP/help.txt"
expect_eq "top in --help" $? 0
set -e
daemon_alive
