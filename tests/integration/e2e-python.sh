#!/bin/bash
# The Python binding as issue 31 (item 9) found it, as uid 65534 against a real daemon, with
# the build tree's package (pmc/ and its extension, copied). Regions in asyncio tasks
# (README, "Python"): the tasks of one event loop share a thread, whose regions the library
# nests:
# - two tasks whose regions span an await, K times each: every enter that finds the other
#   task's region open raises RuntimeError naming both, and nothing is lost: what was not
#   refused is counted, no "nesting" drop (before: the second task's K regions were all
#   dropped as nesting, silently);
# - two child tasks whose regions end before each await, inside one region of their
#   creator's: all 2 K counted, under that region in the call tree; a region around
#   asyncio.to_thread() of a region in the other thread: both counted;
# - a function decorated with pmc.region called in a task while another task's region is
#   open: RuntimeError, the function not called;
# - a child task's region still open when its creator's region ends: that end raises
#   RuntimeError and the child's region is counted as dropped ("nesting", 1);
# - PMC_DISABLE=1: nothing raised (regions are no-ops).
# And: a name with a NUL raises ValueError (it was counted as "nul"); a 1 MiB name used K
# times in a with and K times as a decorator counts 2 K drops, name-too-long (it counted 1);
# K regions left unsent by os._exit() are lost as "never sent" in `pmcctl status` (they
# were labelled as sent to a daemon that was killed).
. "$(dirname "$0")/../lib/lib.sh"
[ -n "${PMC_PYTHON:-}" ] || skip "no Python development files (python3-dev): no extension"
[ -z "${PMC_SANITIZED:-}" ] || skip "a sanitized extension needs its runtime preloaded into python3"
: "${PMC_PYTHON_PKG:?set by ctest}"

mkdir -p "$TMP/py"
cp -r "$PMC_PYTHON_PKG" "$TMP/py/"
cp "$(dirname "$0")/../helpers/python-app.py" "$TMP/bin/"
chmod -R a+rX "$TMP/py" "$TMP/bin"
PY=(env PYTHONPATH="$TMP/py" PYTHONDONTWRITEBYTECODE=1 PMC_EVENTS=page-faults
	"$PMC_PYTHON" "$TMP/bin/python-app.py")

start_daemon
K=50
run_client "$TMP/out" "${PY[@]}" asyncio $K
PID=$CLIENT_PID
a=$(kv counted_a "$TMP/out") b=$(kv counted_b "$TMP/out") x=$(kv crossed "$TMP/out")
# Which task's enters are refused is the loop's order: every run is one or the other.
expect_eq "crossing tasks: counted + refused" $((a + b + x)) $((2 * K))
[ "$x" -ge 1 ] || fail "crossing tasks: no enter refused ($a + $b counted): the regions interleave"
pass "crossing tasks: $x enters refused (RuntimeError), $a + $b counted"
msg=$(kv message "$TMP/out")
grep -q "task-[ab]'.*task-[ab]'.*await" <<<"$msg" || fail "the error names both regions and the await: $msg"
pass "the error says: $msg"
hangups_taken
q=$(pmcctl query --pid "$PID" --format json)
count() { jq --arg r "$1" '[.regions[] | select(.name == $r) | .count] | add // 0' <<<"$q"; }
expect_eq "crossing tasks: task-a counted" "$(count task-a)" "$a"
expect_eq "crossing tasks: task-b counted" "$(count task-b)" "$b"
expect_eq "child tasks' regions that end before each await: all counted" "$(count step)" $((2 * K))
expect_eq "their creator's region" "$(count gather)" 1
paths=$(pmcctl query --pid "$PID" --tree --format json |
	jq -c '[.. | objects | select(.name == "step" and has("path")) | [.path, .count]]')
expect_eq "child tasks' regions nest in their creator's" "$paths" "[[\"gather;step\",$((2 * K))]]"
expect_eq "a region around to_thread()" "$(count to-thread)" 1
expect_eq "a region in to_thread()'s thread" "$(count in-thread)" 1
expect_eq "a decorated call in a task while another's region is open: refused, not called" \
	"$(kv deco_crossed "$TMP/out") $(kv deco_ran "$TMP/out")" "RuntimeError 0"
expect_eq "the other's region, counted" "$(count holder)" 1
expect_eq "a child's region open past its creator's: the end raises" "$(kv orphan "$TMP/out")" RuntimeError
expect_eq "the creator's region counted" "$(count orphan-outer)" 1
expect_eq "the child's region counted as dropped, nothing else lost" \
	"$(jq -c '[.losses[]? | select(.pid == '"$PID"') | [.reason, .count]]' <<<"$q")" '[["nesting",1]]'

run_client "$TMP/off" env PMC_DISABLE=1 "${PY[@]}" asyncio $K
expect_eq "PMC_DISABLE=1: nothing refused" "$(kv crossed "$TMP/off") $(kv orphan "$TMP/off")" "0 ok"

R=10
run_client "$TMP/refused" "${PY[@]}" refused $R
expect_eq "a name with a NUL" "$(kv nul "$TMP/refused")" ValueError
expect_eq "runs of the two 1 MiB names" "$(kv count "$TMP/refused")" $((2 * R))
hangups_taken
expect_eq "each run of a refused name counted (name-too-long)" \
	"$(pmcctl query --pid "$CLIENT_PID" --format json |
		jq -c '[.losses[]? | [.reason, .count]]')" "[[\"name-too-long\",$((2 * R))]]"

expect_eq "nothing lost before os._exit()" "$(pmcctl status --format json | jq .lost)" 0
# No background send in the run (an hour), and fewer samples than a batch (512): all unsent.
U=100
run_client "$TMP/exit" env PMC_FLUSH_MS=3600000 "${PY[@]}" exit $U
expect_eq "os._exit(): the program counted" "$(kv enabled "$TMP/exit")" 1
hangups_taken
expect_eq "os._exit(): lost, of which never sent" \
	"$(pmcctl status --format json | jq -c '[.lost, .lost_unsent]')" "[$U,$U]"
pmcctl status | grep -q "^lost samples: *$U (never sent: their processes ended holding them, reason unsent)$" ||
	fail "status table: $(pmcctl status | grep 'lost samples')"
pass "pmcctl status labels them: never sent"
daemon_alive
