#!/bin/bash
# Processes and threads: fork (the child registers anew and never counts with its
# parent's counters), exec (same pid, new image), context switches of a thread that
# blocks a known number of times, and libpfm4 event names end to end.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
N=4 K=25
run_client "$TMP/fork" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" fork $N $K
child=$(kv child_pid "$TMP/fork")
expect_faults "parent page-faults" "$(region_json parent "$CLIENT_PID" | jq '.events["page-faults"].sum')" $((N * K))
# After fork the parent's own writes to pages it shares with the child fault once each
# (copy on write): a few more than N*K, never fewer.
pa=$(region_json parent-after "$CLIENT_PID" | jq '.events["page-faults"].sum')
[ "$pa" -ge $((N * K)) ] && [ "$pa" -le $((N * K + 8)) ] || fail "parent-after page-faults $pa, want $((N * K)) + copy-on-write (8 at most)"
pass "parent-after page-faults = $pa"
expect_faults "child page-faults" "$(region_json child "$child" | jq '.events["page-faults"].sum')" $((N * K))
expect_eq "child region only in the child" "$(pmcctl query --pid "$CLIENT_PID" --region child --format json | jq '.regions | length')" 0
# The parent's counters (two registered threads) are closed in the child at fork, and the
# child counts with its own, one event's fd.
expect_eq "perf fds the child inherits" "$(kv child_inherited_perf_fds "$TMP/fork")" 0
expect_eq "perf fds the child holds, its own" "$(kv child_own_perf_fds "$TMP/fork")" 1
# A region open across fork() ends in both: counted in the parent only.
expect_eq "across, in the parent" "$(region_json across "$CLIENT_PID" | jq .count)" 1
expect_eq "across, not in the child" "$(pmcctl query --pid "$child" --region across --format json | jq '.regions | length')" 0
expect_eq "helper thread" "$(region_json helper "$CLIENT_PID" | jq .count)" 1

run_client "$TMP/exec" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" exec $N $K
expect_faults "before exec" "$(region_json before-exec "$CLIENT_PID" | jq '.events["page-faults"].sum')" $((N * K))
expect_faults "after exec, same pid" "$(region_json pages "$CLIENT_PID" | jq '.events["page-faults"].sum')" $((N * K))

M=20
run_client "$TMP/block" env PMC_EVENTS=context-switches,task-clock "$PMC_TEST_CLIENT_BIN" block $M
cs=$(region_json block "$CLIENT_PID" | jq '.events["context-switches"].sum')
around=$(kv switches_around "$TMP/block")
inside=$(kv voluntary_inside "$TMP/block")
# Bounds that no load can break: every voluntary switch the thread's own /proc counters saw
# inside the region (each read that blocked), at most every switch they saw around it
# (preemption lands anywhere, inside the region or not).
[ "$cs" -ge "$inside" ] && [ "$cs" -le "$around" ] && [ "$cs" -ge 1 ] ||
	fail "context-switches $cs, want $inside (voluntary, inside the region) to $around (all, around it)"
pass "context-switches = $cs for $M blocking reads (the kernel: $inside voluntary inside, $around around)"

run_client "$TMP/pfm" env PMC_EVENTS=perf::PAGE-FAULTS,perf::TASK-CLOCK "$PMC_TEST_CLIENT_BIN" pages $N $K
j=$(region_json pages "$CLIENT_PID")
expect_faults "libpfm4 perf::PAGE-FAULTS" "$(jq '.events["perf::PAGE-FAULTS"].sum' <<<"$j")" $((N * K))
expect_eq "libpfm4 names kept" "$(jq -c '.events | keys_unsorted' <<<"$j")" '["perf::PAGE-FAULTS","perf::TASK-CLOCK"]'
daemon_alive
