#!/bin/bash
# pmcctl against a daemon whose streamed reply never ends (pmc-fake-daemon stream: parts of
# 200 regions of one process, each marked `more`, for ever). Before: query --tree grew to
# 2.3 GB and flamegraph to 2.4 GB in 20 s, and never stopped. Now each stops once the reply
# passes --max-reply (64 MiB by default), exits 1 and says why and what to do; its peak
# memory (VmHWM, /usr/bin/time -v) stays bounded.
. "$(dirname "$0")/../lib/lib.sh"
[ -x /usr/bin/time ] || skip "/usr/bin/time (GNU time) is missing"

FAKE=$TMP/fake.sock
start_helper "$TMP/fake.out" listening "$PMC_FAKE_DAEMON_BIN" stream "$FAKE" 200

# hostile NAME MAX_KB ARGS...: pmcctl ARGS against the fake daemon exits 1, saying that the
# reply passed --max-reply, with a peak RSS under MAX_KB. What stops it is the bytes it read,
# never a time: the 150 s here only stop a pmcctl that would read for ever (64 MiB of parts
# take 1-3 s on a quiet machine, about 60 s on a loaded one under sanitizers).
hostile() {
	local name=$1 max_kb=$2 rc=0
	shift 2
	timeout 150 /usr/bin/time -f 'maxrss_kb=%M' -o "$TMP/time" \
		"$PMCCTL_BIN" --socket "$FAKE" "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
	[ "$rc" != 124 ] || fail "$name: pmcctl still reading after 150 s (past --max-reply long ago)"
	expect_eq "$name: exit status" "$rc" 1
	grep -q "^pmcctl: .*: the reply of pmcdaemon passed --max-reply (.* MiB, [0-9]* regions[^)]*) and goes on: narrow the query with --pid, --comm or --region" "$TMP/err" ||
		fail "$name: message: $(cat "$TMP/err")"
	local kb
	kb=$(sed -n 's/^maxrss_kb=//p' "$TMP/time")
	echo "# $name: peak RSS $kb KiB; $(tail -c 300 "$TMP/err")"
	# AddressSanitizer's redzones and quarantine take two to three times the memory; its
	# quarantine (256 MB) keeps what a command that allocates and frees much has freed:
	# PLAIN_ONLY=1, bounded in the plain build only.
	if [ -n "${PMC_SANITIZED:-}" ] && [ -n "${PLAIN_ONLY:-}" ]; then
		pass "$name: stopped, exit 1 (peak RSS $kb KiB under the sanitizers: bounded in the plain build)"
		return
	fi
	[ -z "${PMC_SANITIZED:-}" ] || max_kb=$((max_kb * 4))
	[ "$kb" -lt "$max_kb" ] || fail "$name: peak RSS $kb KiB, over $max_kb KiB"
	pass "$name: stopped, exit 1, peak RSS $kb KiB (< $max_kb KiB)"
}

# The bound: a reply of 64 MiB of parts. query --tree and flamegraph keep a process's nodes
# until the process ends, folded into its tree as each part arrives (query --tree also each
# node's figures, packed): no more than twice the reply's bytes (issue 34; 108 and 71 MB,
# 430 MB before, 2.3 GB in 20 s and growing before that); a
# table keeps its rows. The default bound once; each other command under a smaller one (a
# quarter of the work, so that the five fit the test's 300 s on a loaded machine), where
# pmcctl's own few MB are added to twice 16 MiB.
hostile "query --tree" $((2 * 65536)) query --tree
hostile "flamegraph --max-reply 16" $((2 * 16384 + 8192)) flamegraph --max-reply 16
hostile "query (table) --max-reply 16" 150000 query --max-reply 16
hostile "query --format json --max-reply 16" 150000 query --format json --max-reply 16
hostile "query --tree --max-reply 16" $((2 * 16384 + 8192)) query --tree --max-reply 16
# Every node the same id (PMC_FAKE_REPEAT): to pmcctl each is another process of the pid (the
# pid again, recycled or exec'd), its tree set aside until the pid's last. What each such tree
# holds beyond what grows with its nodes counts against --max-reply with the parts they came
# of (before: 236 MB at --max-reply 16, a tree of some 550 bytes kept for each node of 85
# bytes read, refused only at 16 MiB read).
start_helper "$TMP/repeat.out" listening env PMC_FAKE_REPEAT=1 "$PMC_FAKE_DAEMON_BIN" stream "$TMP/repeat.sock" 200
FAKE=$TMP/repeat.sock
# (In the plain build: a tree a node, set aside and freed, is what fills ASan's quarantine.)
PLAIN_ONLY=1 hostile "query --tree --max-reply 16, every node's id the same" $((2 * 16384 + 8192)) query --tree --max-reply 16
grep -q ", counting the [0-9]* KiB held for earlier processes of a pid listed again)" "$TMP/err" ||
	fail "the trees set aside are not named in: $(cat "$TMP/err")"
FAKE=$TMP/fake.sock
# A reply that ends under the bound is never refused for it, with an earlier process of its pid
# set aside: 200 parts of 200 nodes (3.4 MB), the ids starting again at part 151, read under
# --max-reply 4 (a first charge counted each tree set aside whole, its parts a second time, and
# refused it).
start_helper "$TMP/recycle.out" listening env PMC_FAKE_RECYCLE=150 "$PMC_FAKE_DAEMON_BIN" stream "$TMP/recycle.sock" 200 200
rc=0
"$PMCCTL_BIN" --socket "$TMP/recycle.sock" query --tree --format csv --max-reply 4 >"$TMP/recycle.csv" 2>"$TMP/err" || rc=$?
expect_eq "a 3.4 MB reply with a pid listed again, under --max-reply 4: exit status" "$rc" 0
expect_eq "a 3.4 MB reply with a pid listed again: every node's two rows" "$(($(wc -l <"$TMP/recycle.csv") - 1))" $((2 * 200 * 200))
# A usage error, not a silent default.
set +e
"$PMCCTL_BIN" --socket "$FAKE" query --max-reply lots >/dev/null 2>"$TMP/err"
rc=$?
set -e
expect_eq "--max-reply lots: usage error" $rc 2
grep -q "invalid --max-reply 'lots'" "$TMP/err" || fail "$(cat "$TMP/err")"
