#!/bin/bash
# What one uid's definitions may take of the daemon's memory (issue 31, item 5; README,
# limits: "tables of region and call path ids"). Each connection keeps a table of the region
# and call path ids its Defines and batches' names define, 8 bytes an id: before, only the
# connection shares bounded them (64 x 4 x 400,000 path definitions of one uid: RSS +86 MiB,
# +139 MiB with --max-regions 65535). Now their bytes are charged to their uid under
# share.h's rule: here --max-define-memory 2 MiB, shares of 1 MiB, so uid 65534 alone may
# hold 2 - 1 = 1 MiB. It runs one process of 12 connections x 16,384 call paths (a table
# of 128 KiB each: 1.5 MiB wanted), holding them open:
# - its charged bytes (pmcctl status: define_bytes) stay within 1 MiB, the refusal logged,
#   and its Defines are all handled (Status answered on each connection after them);
# - its two samples are each counted, by name, or dropped as max-regions (a path past its
#   table);
# - a program of uid 65533 meanwhile is counted exactly, its call path in the tree (its
#   share is kept for it);
# - once the flooder ends, every byte is given back (define_bytes 0).
# And a SampleBatch naming 20,000 regions (4,096 ids, each named again and again) goes on in
# later slices as a Define does: all 4,096 names defined, its sample counted, the
# connection served after it.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon --max-define-memory 2 --max-define-memory-per-user 1
MIB=$((1024 * 1024))
mkfifo "$TMP/hold"
chmod 666 "$TMP/hold"
as_user "$PMC_TEST_RAW_BIN" "$SOCK" define-flood 12 16384 hold <"$TMP/hold" >"$TMP/flood" 2>&1 &
FLOOD=$!
exec 7>"$TMP/hold" # the flooder's stdin, open until the test releases it
wait_until "the flooder's Defines to be handled" 120 grep -qx sent "$TMP/flood"
charged=$(as_user "$PMCCTL_BIN" status --format json | jq .define_bytes)
[ "$charged" -gt 0 ] && [ "$charged" -le $MIB ] ||
	fail "uid 65534's id tables: $charged bytes charged, want 1 to $MIB (the share rule alone)"
pass "uid 65534's id tables: $charged bytes charged (at most $MIB: 2 MiB less a share)"
grep -q "uid 65534 holds .* bytes of tables of region and call path ids, past its share" "$TMP/daemon.log" ||
	fail "the refusal was not logged"
pass "logged: $(grep -o "uid 65534 holds .* bytes of tables[^:]*" "$TMP/daemon.log" | head -1)"

N=5 K=40
setpriv --reuid=65533 --regid=65533 --clear-groups -- "${USER_ENV[@]}" \
	env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages $N $K >"$TMP/out" 2>"$TMP/out.err" &
vpid=$!
wait $vpid || fail "victim: $(cat "$TMP/out.err")"
j=$(region_json pages "$vpid")
expect_eq "uid 65533 beside it: counted" "$(jq .count <<<"$j")" $K
expect_faults "uid 65533 beside it: page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))
expect_eq "uid 65533's call path" "$(pmcctl query --pid "$vpid" --tree --format json |
	jq -c '[.. | objects | select(.name? == "pages" and has("path")) | [.path, .count]]')" "[[\"pages\",$K]]"

echo >&7
exec 7>&-
wait $FLOOD || fail "flooder: $(cat "$TMP/flood")"
hangups_taken
fpid=$(pmcctl query --format json | jq '[.regions[] | select(.uid == 65534) | .pid][0] // empty')
if [ -n "$fpid" ]; then
	q=$(pmcctl query --pid "$fpid" --format json)
	counted=$(jq '[.regions[].count] | add // 0' <<<"$q")
	dropped=$(jq '[.losses[]? | select(.reason == "max-regions") | .count] | add // 0' <<<"$q")
	expect_eq "the flooder's samples: counted by name + dropped (max-regions)" $((counted + dropped)) 2
fi
expect_eq "id tables once every connection ended (bytes charged)" \
	"$(pmcctl status --format json | jq .define_bytes)" 0

regions0=$(pmcctl status --format json | jq .regions)
as_user "$PMC_TEST_RAW_BIN" "$SOCK" names-batch 20000 >"$TMP/names" 2>&1 &
wait $! || fail "names-batch: $(cat "$TMP/names")"
expect_eq "a batch of 20,000 names: its connection served after it" "$(cat "$TMP/names")" sent
hangups_taken
q=$(pmcctl query --comm pmc-test-raw --format json)
expect_eq "a batch of 20,000 names: regions defined" \
	$(($(pmcctl status --format json | jq .regions) - regions0)) 4096
expect_eq "a batch of 20,000 names: its sample" \
	"$(jq -c '[.regions[] | select(.name | startswith("n")) | [.name, .count]]' <<<"$q")" '[["n1",1]]'
echo "slices past the first that definitions took: $(pmcctl status --format json | jq .define_slices)"
daemon_alive
