#!/bin/bash
# 4 threads at once, each registering lazily with its own counters: every sample of
# every thread arrives (the last partial batches at thread exit), exact page faults.
. "$(dirname "$0")/../lib/lib.sh"
start_daemon
T=4 N=3 K=700   # K > the 512-sample batch: full batches and a partial one per thread
run_client "$TMP/out" env PMC_EVENTS=page-faults,context-switches "$PMC_TEST_CLIENT_BIN" threads $T $N $K
j=$(region_json mt-pages "$CLIENT_PID")
expect_eq "count" "$(jq .count <<<"$j")" $((T * K))
expect_faults "page-faults sum" "$(jq '.events["page-faults"].sum' <<<"$j")" $((T * N * K))
[ -n "${PMC_SANITIZED:-}" ] || expect_eq "page-faults max" "$(jq '.events["page-faults"].max' <<<"$j")" $N
# (and the main thread, whose pmc_enabled() at the end registers it: it answers for the
# calling thread)
grep -c "registered thread" "$TMP/daemon.log" | { read -r n; expect_eq "threads registered" "$n" $((T + 1)); }
# Exited threads gave their fds back: the daemon holds none for this client now.
expect_eq "threads held after exit" "$(pmcctl status --format json | jq .threads)" 0
daemon_alive
