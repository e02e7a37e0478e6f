#!/bin/bash
# Run tags are per uid (issue 31, item 6): the evicted-process counts of `pmcctl run` by run
# tag were one 64-entry table for all users, keyed by tag alone. Another user who learns a
# run's tag added its own evicted processes to that run's count (5 became 35), and another
# user's evictions under 70 tags of its own pushed the run's tag out (5 became 0). A tag
# answers only its owner: the run says exactly its own 5, both times, and lists only its own.
BUILD_PMCCTL=${PMCCTL_BIN:-}
. "$(dirname "$0")/../lib/lib.sh"
OTHER=65533
as_other() { setpriv --reuid=$OTHER --regid=$OTHER --clear-groups -- "${USER_ENV[@]}" "$@"; }
start_daemon --keep-exited-per-user 25
mkdir -m 1777 "$TMP/w"
loop() { echo "for i in \$(seq $1); do $PMC_TEST_CLIENT_BIN pages 1 1 >/dev/null; done"; }
procs() { jq '[.regions[] | select(.name == "pages") | .pid] | unique | length' "$1"; }

# run_victim K: a run of 30 programs by uid 65534 (5 of them past --keep-exited-per-user),
# which then says its tag in $TMP/w/tag-K and waits for $TMP/w/go-K before it ends.
run_victim() {
	local k=$1
	as_user "$PMCCTL_BIN" run --events page-faults --format json -- sh -c \
		"$(loop 30); echo \"\$PMC_RUN_TAG\" >$TMP/w/tag-$k.new && mv $TMP/w/tag-$k.new $TMP/w/tag-$k;
		 while [ ! -e $TMP/w/go-$k ]; do sleep 0.05; done" >"$TMP/j$k" 2>"$TMP/err$k" &
	VICTIM=$!
	for _ in $(seq 1200); do
		[ -s "$TMP/w/tag-$k" ] && return 0
		kill -0 "$VICTIM" 2>/dev/null || fail "run $k ended early: $(cat "$TMP/err$k")"
		sleep 0.05
	done
	fail "run $k did not say its tag within 60 s"
}
# other_runs TAG...: one program of uid 65533 per tag, said in its Hello as its run tag.
other_runs() {
	local t
	for t in "$@"; do
		as_other env PMC_RUN_TAG="$t" "$PMC_TEST_CLIENT_BIN" pages 1 1 >/dev/null ||
			fail "uid $OTHER's program under tag $t"
	done
}
finish_victim() {
	local k=$1
	touch "$TMP/w/go-$k"
	wait "$VICTIM" || fail "run $k: $(cat "$TMP/err$k")"
	expect_eq "run $k: its 30 programs, 25 kept: listed" "$(procs "$TMP/j$k")" 25
	expect_eq "run $k: uid $OTHER's processes under its tag not listed" \
		"$(jq "[.regions[] | select(.uid == $OTHER)] | length" "$TMP/j$k")" 0
}

# 1. uid 65533 learns the tag and has 55 processes say it (30 of them evicted, past its own
#    25): they are its own, not the run's.
run_victim 1
tag=$(cat "$TMP/w/tag-1")
[ -n "$tag" ] || fail "run 1 said no tag"
mapfile -t same < <(for _ in $(seq 55); do echo "$tag"; done)
other_runs "${same[@]}"
finish_victim 1
expect_eq "run 1, its tag said by 55 processes of uid $OTHER (30 evicted): its dropped" \
	"$(jq .evicted_processes "$TMP/j1")" 5

# 2. uid 65533 has 95 processes evicted under 95 tags of its own, more than the table's 64:
#    the run's tag stays.
run_victim 2
mapfile -t many < <(for i in $(seq 120); do echo "other-$i"; done)
other_runs "${many[@]}"
finish_victim 2
expect_eq "run 2, after uid $OTHER's evictions under 95 tags of its own: its dropped" \
	"$(jq .evicted_processes "$TMP/j2")" 5
daemon_alive
