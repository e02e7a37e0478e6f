#!/bin/bash
# A Define flood from one uid (issue 31, item 5): 64 processes x 4 connections x 400,000 path
# definitions made a victim's Status wait 0.76 s, the loop held by Defines handled whole. Now
# a Define goes on in later slices (its uid's other connections wait meanwhile: one decoded
# Define per uid), and the call path nodes of a uid stay within share.h's rule. Here, scaled:
# 4 processes x 2 connections x 75,535 path definitions (ids 1-65,535, then 1-10,000 again)
# while a victim of another uid runs: the victim is counted exactly, every flooder's Defines
# are all handled (each connection answers Status after them), and a sample on a path past
# the nodes its process may keep is counted by its region's name and as "path-limit". The victim's latency is measured in
# bench/fairness.sh (the define row), never here.
. "$(dirname "$0")/../lib/lib.sh"
VICTIM=65533
start_daemon --max-total-regions 16384
PROCS=4 CONNS=2 PATHS=75535

pids=()
for i in $(seq $PROCS); do
	as_user "$PMC_TEST_RAW_BIN" "$SOCK" define-flood $CONNS $PATHS >"$TMP/f$i" 2>&1 &
	pids+=($!)
done
for i in $(seq $PROCS); do
	for _ in $(seq 1200); do
		grep -q flooding "$TMP/f$i" && break
		kill -0 "${pids[$((i - 1))]}" 2>/dev/null || fail "flooder $i ended: $(cat "$TMP/f$i")"
		sleep 0.05
	done
	grep -q flooding "$TMP/f$i" || fail "flooder $i not connected within 60 s"
done

# The victim, during the flood.
N=5 K=40
setpriv --reuid=$VICTIM --regid=$VICTIM --clear-groups -- "${USER_ENV[@]}" \
	env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages $N $K >"$TMP/out" 2>"$TMP/out.err" &
vpid=$!
wait $vpid || fail "victim: $(cat "$TMP/out.err")"
alive=0
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
echo "flooders still running when the victim ended: $alive of $PROCS"
expect_eq "victim enabled" "$(kv enabled "$TMP/out")" 1
[ ! -s "$TMP/out.err" ] || fail "victim warned: $(cat "$TMP/out.err")"
j=$(region_json pages "$vpid")
expect_eq "victim's count" "$(jq .count <<<"$j")" $K
expect_faults "victim's page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))

for i in $(seq $PROCS); do
	wait "${pids[$((i - 1))]}" || fail "flooder $i: $(cat "$TMP/f$i")"
	expect_eq "flooder $i: its Defines all handled, then Status on each connection" \
		"$(tail -1 "$TMP/f$i")" sent
done
# Each flooder's two samples: path 1 (a node of its own) and the last path defined, past the
# nodes its process may keep: both counted by their region's name, the second as
# "path-limit" too. A flooder that ended may have been evicted (its figures dropped, counted)
# to make room for the nodes of its uid's live ones: share.h's rule.
pmcctl query --format json >"$TMP/q.json"
n=$(jq '[.regions[] | select(.uid == 65534) | .count] | add' "$TMP/q.json")
evicted=$(pmcctl status --format json | jq .evicted)
expect_eq "the flooders' samples, by name, and those of their evicted processes" \
	$((n + 2 * evicted)) $((2 * PROCS))
# Path 1 has a node unless the shares left its process none (4 x 4,096 nodes wanted,
# 16,384 less one share for a newcomer allowed): then the tree lists it not at all (both its
# samples are counted by name above).
pmcctl query --tree --format json >"$TMP/tree.json"
listed=0
for p in $(jq '[.regions[] | select(.uid == 65534) | .pid] | unique | .[]' "$TMP/q.json"); do
	pl=$(jq --argjson p "$p" '[.[] | select(.pid == $p)] | .[0].untracked["path-limit"] // "none"' "$TMP/tree.json")
	if [ "$pl" = '"none"' ]; then
		pass "flooder $p: no call path node left to it by the shares"
		continue
	fi
	listed=$((listed + 1))
	[ "$pl" = 1 ] || [ "$pl" = 2 ] || fail "flooder $p: path-limit $pl, want 1 (path 1 has a node) or 2"
	pass "flooder $p: its samples past its nodes counted as path-limit: $pl"
done
[ "$listed" -ge 1 ] || fail "no flooder has a call path node"
grep -q "over its call path nodes" "$TMP/daemon.log" || fail "the refused nodes were not logged"
daemon_alive
