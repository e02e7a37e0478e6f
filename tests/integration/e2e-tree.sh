#!/bin/bash
# Call paths: a program with nested and recursive regions (pmc-test-client tree) shows its
# tree with exact page-fault totals at every level, inclusive and self; its folded stacks
# add up to the inclusive totals; the per-name view is today's; the tree survives a restart
# through the state file; what no node holds (too deep, an older client) is counted by
# reason; a Define that breaks the rules closes that connection only.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon --state "$TMP/state.pb"
# Each client's figures are read once the daemon took its hang-up (tests/lib/lib.sh): what a
# client sent may wait in its socket after it ended, and a program's room for nodes is made
# by the ended ones only once their hang-ups are taken.
export RUN_CLIENT_TAKEN=1
K=5
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" tree $K
TREE_PID=$CLIENT_PID
pmcctl query --tree --pid "$CLIENT_PID" --format json >"$TMP/tree.json"
pmcctl query --tree --pid "$CLIENT_PID" >"$TMP/tree.txt"
cat "$TMP/tree.txt"

# node PATH FIELD: a jq expression on the node of PATH ("main;parse")
node() { jq --arg p "$1" "[.. | objects | select(.path? == \$p)] | .[0] | $2" "$TMP/tree.json"; }
check_tree() {
	local out=$1 key want path
	while IFS='=' read -r key want; do
		case $key in
		incl.*)
			path=${key#incl.}
			expect_faults "inclusive page-faults of $path" "$(node "$path" '.events["page-faults"].sum')" "$want"
			expect_eq "count of $path" "$(node "$path" .count)" $K
			;;
		self.*)
			path=${key#self.}
			expect_faults "self page-faults of $path" "$(node "$path" '.self["page-faults"]')" "$want"
			;;
		esac
	done <"$out"
}
check_tree "$TMP/out"
expect_eq "nodes" "$(jq '[.. | objects | select(has("children"))] | length' "$TMP/tree.json")" 8
expect_eq "roots" "$(jq '.[0].tree | length' "$TMP/tree.json")" 1
# self wall time: never above the inclusive (the children's walls lie within it)
jq -e '[.. | objects | select(has("children")) | .self.wall_ns <= .wall_ns.sum and .self.wall_ns >= 0] | all' \
	"$TMP/tree.json" >/dev/null || fail "a self wall time outside [0, inclusive]"
pass "self wall times within [0, inclusive]"
grep -q '^      walk ' "$TMP/tree.txt" || fail "table: walk;walk;walk not indented three levels"
pass "table indents the recursion"

# The per-name view is unchanged: a name's figures over all its paths.
expect_eq "lex count (two paths)" "$(region_json lex "$CLIENT_PID" | jq .count)" "$(kv name.lex.count "$TMP/out")"
expect_faults "lex page-faults" "$(region_json lex "$CLIENT_PID" | jq '.events["page-faults"].sum')" "$(kv name.lex.sum "$TMP/out")"
expect_eq "walk count (recursion)" "$(region_json walk "$CLIENT_PID" | jq .count)" "$(kv name.walk.count "$TMP/out")"
expect_faults "walk page-faults (each level inclusive)" "$(region_json walk "$CLIENT_PID" | jq '.events["page-faults"].sum')" "$(kv name.walk.sum "$TMP/out")"

# Folded stacks: one line per node, its self; the lines under each node add up to its
# inclusive figure.
pmcctl flamegraph --pid "$CLIENT_PID" --event page-faults >"$TMP/folded"
cat "$TMP/folded"
while IFS='=' read -r key want; do
	case $key in incl.*) ;; *) continue ;; esac
	path=${key#incl.}
	sum=$(awk -v p="pmc-test-client (uid 65534);$path" '{ w = $NF; s = $0; sub(/ [0-9]+$/, "", s) }
		s == p || index(s, p ";") == 1 { t += w } END { print t + 0 }' "$TMP/folded")
	expect_faults "folded weights under $path" "$sum" "$want"
done <"$TMP/out"
# page-faults counted without a mode counts user and kernel mode: page-faults:u names no
# event counted, and the refusal says which one does (issue 24); cycles is not there at all.
pmcctl flamegraph --pid "$CLIENT_PID" --event page-faults:u >"$TMP/err" 2>&1 &&
	fail "flamegraph --event page-faults:u drew page-faults (user and kernel mode)"
grep -q "^pmcctl: event 'page-faults:u' was not counted in the 8 call path nodes selected: they have wall, page-faults ('page-faults' counted user and kernel mode, 'page-faults:u' is user mode only: --event page-faults draws it)$" \
	"$TMP/err" || fail "flamegraph --event page-faults:u: $(cat "$TMP/err")"
pmcctl flamegraph --pid "$CLIENT_PID" --event page-faults:uk | cmp - "$TMP/folded" ||
	fail "flamegraph --event page-faults:uk is not page-faults"
pass "flamegraph --event in another mode: $(cat "$TMP/err")"
pmcctl flamegraph --pid "$CLIENT_PID" >"$TMP/folded-wall"
wall_total=$(awk '{ t += $NF } END { print t }' "$TMP/folded-wall")
expect_eq "folded wall times add up to main's" "$wall_total" "$(node main .wall_ns.sum)"
pmcctl flamegraph --pid "$CLIENT_PID" --event wall_ns | cmp - "$TMP/folded-wall" ||
	fail "flamegraph --event wall_ns is not the wall time (as JSON and CSV name it)"

# Deeper than 32: the 32 outer levels are nodes, the deeper ones count under their name
# and in the self of the deepest node ("path-depth").
run_client "$TMP/deep" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" deep 40
pmcctl query --tree --pid "$CLIENT_PID" --format json >"$TMP/deep.json"
deep32=$(printf 'deep;%.0s' $(seq 32)); deep32=${deep32%;}
expect_eq "deepest node: 32 levels" "$(jq --arg p "$deep32" '[.. | objects | select(.path? == $p)] | length' "$TMP/deep.json")" 1
expect_eq "nothing deeper than 32" "$(jq --arg p "$deep32;deep" '[.. | objects | select(.path? == $p)] | length' "$TMP/deep.json")" 0
expect_faults "deepest node's self: its page and the 8 below" \
	"$(jq --arg p "$deep32" '[.. | objects | select(.path? == $p)][0].self["page-faults"]' "$TMP/deep.json")" 9
expect_eq "path-depth (8 levels of deep and of deep-warm)" "$(jq '.[0].untracked["path-depth"]' "$TMP/deep.json")" 16
expect_eq "deep counts all 40 levels by name" "$(region_json deep "$CLIENT_PID" | jq .count)" 40

# An older client (no call paths): counted by name, untracked by the tree.
"$PMC_TEST_RAW_BIN" "$SOCK" batch old-style >/dev/null
raw_pid=$(pmcctl query --region old-style --format json | jq '.regions[0].pid')
expect_eq "older client untracked" "$(pmcctl query --tree --pid "$raw_pid" --format json | jq '.[0].untracked["older-client"]')" 1

# A path of exactly 32 regions is kept; each broken Define closes only its connection.
"$PMC_TEST_RAW_BIN" "$SOCK" define ok >/dev/null || fail "define ok"
# A region id defined again as another name closes the connection (a library never takes an
# id back): the path defined with the first name counted only the first sample, in its
# region and its node, which the region reads its figures from while they are the same.
"$PMC_TEST_RAW_BIN" "$SOCK" define rename >/dev/null 2>&1 || fail "define rename: not closed"
pass "define rename: connection closed"
raw_pid=$(pmcctl query --region before --format json | jq '.regions[0].pid')
expect_eq "first name's figures" "$(region_json before "$raw_pid" | jq -c '[.count, .wall_ns.sum, .wall_ns.max]')" '[1,1000,1000]'
expect_eq "second name unknown" "$(pmcctl query --region renamed --pid "$raw_pid" --format json | jq '.regions | length')" 0
expect_eq "first name's node" "$(pmcctl query --tree --pid "$raw_pid" --format json | jq -c '[.. | objects | select(.path? == "before")] | .[0] | [.count, .wall_ns.sum]')" '[1,1000]'
for kind in no-paths orphan deep no-region batch-undefined flags; do
	"$PMC_TEST_RAW_BIN" "$SOCK" define "$kind" >/dev/null 2>&1 || fail "define $kind: not closed"
	pass "define $kind: connection closed"
done
daemon_alive

# A Define before any thread registered (a library whose reattach was refused) is taken.
expect_eq "Define before register" "$("$PMC_TEST_RAW_BIN" "$SOCK" define noreg)" sent
daemon_alive

# More paths than the daemon keeps: 17,030, past the 4,096 nodes of a process (as many as
# --max-regions) and past the path ids a connection may use (16,384: the library interns no
# more, HelloReply.max_path_id). Every run still counts by name; what no node holds is
# "path-limit". The program sends each outer region's samples as it goes (pmc_flush()): a
# round's 17,030 in one burst outran a daemon on a loaded machine, and its thread dropped what
# its 4,096 could not hold (counted, buffer-full: 112-129 runs of 131 counted here).
run_client "$TMP/paths" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" paths 130
# Its last batches and path definitions may still wait in its socket for a slow daemon (more
# than a query reads of an ended client first: 123-125 runs of 131 counted in a sanitized
# soak): once the daemon took its hang-up, it read them all (run_client waited for that:
# RUN_CLIENT_TAKEN, above).
pmcctl query --pid "$CLIENT_PID" --format json >"$TMP/paths.json"
expect_eq "every run counted by name" "$(jq '[.regions[].count] | unique' "$TMP/paths.json" | jq -c .)" "[$(kv runs "$TMP/paths")]"
expect_eq "no loss" "$(jq '[.losses[]? | .count] | add // 0' "$TMP/paths.json")" 0
pmcctl query --tree --pid "$CLIENT_PID" --format json >"$TMP/paths-tree.json"
expect_eq "nodes kept" "$(jq '[.. | objects | select(has("children"))] | length' "$TMP/paths-tree.json")" 4096
expect_eq "path-limit" "$(jq '.[0].untracked["path-limit"]' "$TMP/paths-tree.json")" $(($(kv paths "$TMP/paths") - 4096))

# A daemon restarted with a lower path id bound (--max-regions 8,192 allows 32,768; the
# default 16,384) while the program runs: its paths past the new bound, interned before,
# count by name ("path-limit": 4,096 nodes for the 19,741 runs of the second round, sync's
# with them), none dropped. The program runs its second round once a sample
# went through to the new daemon ("reconnected=1"): the library learns that the daemon went
# away only at its next send, and a round run before the reconnection fills the thread's ring
# (4,096 samples) in a millisecond, and drops the rest (counted, reason "full"): a CI run
# counted 134-136 runs of 141 here when the program went on at once (issue 35).
kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=
start_daemon --max-regions 8192
setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}" \
	env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" paths-again 140 "$TMP/go" >"$TMP/again" 2>"$TMP/again.err" &
again_pid=$!
wait_line() { # FILE LINE SECONDS WHAT
	for _ in $(seq $(($3 * 10))); do
		grep -qx "$2" "$1" && return 0
		kill -0 $again_pid 2>/dev/null || break
		sleep 0.1
	done
	grep -qx "$2" "$1" || fail "$4: no line '$2' in $3 s: $(cat "$1" "$1.err" 2>/dev/null)"
}
wait_line "$TMP/again" first=done 60 "paths-again's first round"
# pmc_flush() returns once the round's batches are queued, not read: a query drains a running
# client's queue for 2 ms only. Counts only grow: until they are all 141 (120 s at most).
for _ in $(seq 1200); do
	runs=$(pmcctl query --pid $again_pid --format json | jq -c '[.regions[].count] | unique')
	[ "$runs" = "[141]" ] && break
	sleep 0.1
done
expect_eq "first daemon: runs by name" "$runs" "[141]"
kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=
start_daemon --state "$TMP/state.pb"
touch "$TMP/go"
wait $again_pid || fail "paths-again failed: $(cat "$TMP/again.err")"
hangups_taken
expect_eq "reconnected before the second round" "$(kv reconnected "$TMP/again")" 1
pmcctl query --pid $again_pid --format json >"$TMP/again.json"
echo "after the restart: losses $(jq -c '[.losses[]?]' "$TMP/again.json"), status $(pmcctl status --format json | jq -c '{samples, dropped, lost, losses}')"
expect_eq "after the restart: every run counted by name" \
	"$(jq -c '[.regions[] | select(.name != "sync") | .count] | unique' "$TMP/again.json")" "[141]"
expect_eq "after the restart: the sample that waited for it" \
	"$(jq -c '[.regions[] | select(.name == "sync") | .count]' "$TMP/again.json")" "[1]"
expect_eq "after the restart: nothing dropped" "$(jq '[.losses[]? | .count] | add // 0' "$TMP/again.json")" 0
expect_eq "after the restart: path-limit" "$(pmcctl query --tree --pid $again_pid --format json | jq '.[0].untracked["path-limit"]')" $((140 + 140 * 140 + 1 - 4096))
daemon_alive

# The state file keeps the tree.
kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=
start_daemon --state "$TMP/state.pb"
pmcctl query --tree --pid "$TREE_PID" --format json >"$TMP/tree.json"
check_tree "$TMP/out"
daemon_alive

# A reset of one region clears its process's whole tree (its ancestors' inclusive figures
# held it): no node keeps figures, none has a negative self.
pmcctl reset --pid "$TREE_PID" --region parse >/dev/null
pmcctl query --tree --pid "$TREE_PID" --format json >"$TMP/reset.json" || true
expect_eq "nodes with figures after a reset of parse" \
	"$(jq '[.. | objects | select(has("children")) | select(.count > 0)] | length' "$TMP/reset.json")" 0
expect_eq "main's figures by name kept" "$(region_json main "$TREE_PID" | jq .count)" $K
daemon_alive

# A user's room for nodes (that of regions): alone, all of --max-total-regions but one share
# for a newcomer (300 - 150); its processes that ended make room, as for regions; each of
# three programs of 110 paths keeps its whole tree.
kill "$DAEMON_PID"; wait "$DAEMON_PID" || true; DAEMON_PID=
start_daemon --max-total-regions 300 --max-regions-per-user 150
for i in 1 2 3; do
	run_client "$TMP/share$i" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" paths 10
	expect_eq "program $i keeps its 110 nodes" \
		"$(pmcctl query --tree --pid "$CLIENT_PID" --format json | jq '[.. | objects | select(has("children"))] | length')" 110
done
expect_eq "ended processes forgotten for room" "$(pmcctl status --format json | jq .evicted)" 2
daemon_alive
