#!/bin/bash
# Root running `pmcctl run` (no daemon at the socket: a private one) with XDG_RUNTIME_DIR and
# TMPDIR a directory of uid 65534 (su without '-'), where uid 65534 races to replace each
# directory made there by a symlink to a root-owned directory (pmc-fake-daemon plant, with
# inotify). Before: pmcctl made its directory there, and the private daemon's log truncated
# the root-owned file the symlink led to, and its socket went where uid 65534 chose. Now
# pmcctl makes nothing there, says why, and runs the command with a directory of its own
# under /tmp.
BUILD_PMCCTL=${PMCCTL_BIN:-}
. "$(dirname "$0")/../lib/lib.sh"

EVIL=$TMP/evil
VICTIM=$TMP/victim
mkdir "$EVIL" "$VICTIM"
chown 65534:65534 "$EVIL"
chmod 755 "$EVIL" "$VICTIM"
echo secret >"$VICTIM/pmcdaemon.log"
chmod 600 "$VICTIM/pmcdaemon.log"

start_helper "$TMP/plant.out" watching setpriv --reuid=65534 --regid=65534 --clear-groups -- \
	"$PMC_FAKE_DAEMON_BIN" plant "$EVIL" "$VICTIM"

# pmcctl of the build tree, as root: it finds ../daemon/pmcdaemon.
rc=0
XDG_RUNTIME_DIR=$EVIL TMPDIR=$EVIL "$BUILD_PMCCTL" --socket "$TMP/none.sock" run --events page-faults \
	--format json -- "$PMC_TEST_CLIENT_BIN" pages 4 10 >"$TMP/j" 2>"$TMP/err" || rc=$?
[ "$rc" = 0 ] || fail "run exits $rc: $(cat "$TMP/err")"
expect_eq "the root-owned file is intact" "$(cat "$VICTIM/pmcdaemon.log")" secret
expect_eq "nothing of root's in uid 65534's directory" "$(find "$EVIL" -mindepth 1 -user root | wc -l)" 0
expect_eq "nothing for the racer to replace" "$(grep -c '^planted' "$TMP/plant.out" || true)" 0
expect_eq "no socket in the root-owned directory" "$(find "$VICTIM" -type s | wc -l)" 0
grep -q "^pmcctl: not making the private pmcdaemon's directory in XDG_RUNTIME_DIR: $EVIL belongs to uid 65534, not to uid 0 or root$" "$TMP/err" ||
	fail "no word of XDG_RUNTIME_DIR: $(cat "$TMP/err")"
grep -q "^pmcctl: not making the private pmcdaemon's directory in TMPDIR: $EVIL belongs to uid 65534" "$TMP/err" ||
	fail "no word of TMPDIR: $(cat "$TMP/err")"
grep -q "counting with a private one (pid [0-9]*, socket /tmp/pmcctl-run\.[^/]*/pmc.sock)" "$TMP/err" ||
	fail "the private daemon's socket is not under /tmp: $(cat "$TMP/err")"
sed -n '/^{/,$p' "$TMP/j" >"$TMP/json"
expect_eq "the private daemon counted" "$(jq -r .daemon "$TMP/json")" private
expect_faults "exactly 40 page faults" "$(jq '.regions[0].events["page-faults"].sum' "$TMP/json")" 40

# A directory above the base that others may write (not sticky) is refused too.
mkdir -p "$TMP/open/run"
chmod 777 "$TMP/open"
rc=0
XDG_RUNTIME_DIR=$TMP/open/run TMPDIR= "$BUILD_PMCCTL" --socket "$TMP/none.sock" run -- true >/dev/null 2>"$TMP/err" || rc=$?
expect_eq "run exits (open parent)" $rc 0
grep -q "^pmcctl: not making the private pmcdaemon's directory in XDG_RUNTIME_DIR: $TMP/open is writable by others (mode 0777, not sticky)$" "$TMP/err" ||
	fail "no word of the open parent: $(cat "$TMP/err")"
expect_eq "nothing made under it" "$(find "$TMP/open/run" -mindepth 1 | wc -l)" 0
