#!/bin/bash
# The installed manual pages: each renders with man(1) and groff without a single warning,
# `man` finds them under the installed MANPATH (the function names of libpmcclient(3)
# too), and they document what the programs and the header say: every long option of
# `pmcdaemon --help` and `pmcctl --help`, every pmcctl command, every function and
# environment variable of <pmc/pmc.h>.
. "$(dirname "$0")/../lib/lib-install.sh"
command -v man >/dev/null || skip "man is missing (Debian package man-db)"
command -v groff >/dev/null || skip "groff is missing (Debian package groff-base)"

PAGES=(man8/pmcdaemon.8 man1/pmcctl.1 man3/libpmcclient.3)
for p in "${PAGES[@]}"; do
	f=$P_MAN/$p
	[ -f "$f" ] || fail "$p not installed"
	MANWIDTH=80 man --warnings -E UTF-8 -l "$f" >"$TMP/out" 2>"$TMP/err" || fail "man -l $p failed"
	[ ! -s "$TMP/err" ] || fail "man --warnings -l $p: $(cat "$TMP/err")"
	[ "$(wc -l <"$TMP/out")" -gt 20 ] || fail "man -l $p rendered almost nothing"
	groff -man -ww -z "$f" 2>"$TMP/err" || fail "groff -man $p failed"
	[ ! -s "$TMP/err" ] || fail "groff -man -ww $p: $(cat "$TMP/err")"
	pass "$p renders without warnings"
done

export MANPATH=$P_MAN
for page in "8 pmcdaemon" "1 pmcctl" "3 libpmcclient"; do
	# shellcheck disable=SC2086 # "SECTION NAME"
	where=$(man -w $page) || fail "man -w $page: not found under $P_MAN"
	case $where in "$P_MAN"/*) ;; *) fail "man -w $page: $where, not the installed page" ;; esac
done
pass "man finds the installed pages"

# documented PAGE WHAT ROFF_TEXT: the page (file) must hold ROFF_TEXT
documented() { grep -qF -- "$3" "$1" || fail "${1#"$P_MAN/"} does not document $2"; }
roff_opt() { printf '%s' "$1" | sed 's/-/\\-/g'; }

"$P_SBIN/pmcdaemon" --help >"$TMP/help" || fail "pmcdaemon --help"
for o in $(grep -oE -- '--[a-z][a-z-]*' "$TMP/help" | sort -u); do
	documented "$P_MAN/man8/pmcdaemon.8" "pmcdaemon $o" "$(roff_opt "$o")"
done
"$P_BIN/pmcctl" --help >"$TMP/help" || fail "pmcctl --help"
for o in $(grep -oE -- '--[a-z][a-z-]*' "$TMP/help" | sort -u); do
	documented "$P_MAN/man1/pmcctl.1" "pmcctl $o" "$(roff_opt "$o")"
done
cmds=$(awk '/^Commands:/ {f = 1; next} /^$/ {f = 0} f && /^  [a-z]/ {print $1}' "$TMP/help")
[ -n "$cmds" ] || fail "no commands found in pmcctl --help"
for c in $cmds; do
	grep -qx "\.B $c" "$P_MAN/man1/pmcctl.1" || fail "pmcctl.1 does not document command $c"
done
pass "pmcdaemon.8 and pmcctl.1 document every option and command of --help"

funcs=$(sed -n 's/^PMC_EXPORT .*[ *]\(pmc_[a-z][a-z_]*\)(.*$/\1/p' "$P_INCLUDE/pmc/pmc.h")
[ -n "$funcs" ] || fail "no functions found in pmc.h"
for fn in $funcs PMC_REGION; do
	documented "$P_MAN/man3/libpmcclient.3" "$fn" ".BR $fn ()"
	[ -f "$P_MAN/man3/$fn.3" ] || fail "no page man3/$fn.3"
	# man follows its ".so" to libpmcclient.3
	[ "$(man -w 3 "$fn" 2>/dev/null)" = "$P_MAN/man3/libpmcclient.3" ] ||
		fail "man -w 3 $fn: '$(man -w 3 "$fn" 2>&1)', want $P_MAN/man3/libpmcclient.3"
done
vars=$(sed -n '/Environment:/,/\*\//p' "$P_INCLUDE/pmc/pmc.h" | grep -oE 'PMC_[A-Z_]+' | sort -u)
[ -n "$vars" ] || fail "no environment variables found in pmc.h"
for v in $vars; do
	documented "$P_MAN/man3/libpmcclient.3" "$v" "$v"
done
pass "libpmcclient.3 documents every function and variable of pmc.h; man 3 finds each"
