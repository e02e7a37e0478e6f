#!/bin/bash
# `cmake --install --prefix DIR` (no DESTDIR), as a user installs into a private prefix:
# every file lands inside DIR (the systemd units too), and a program built against it
# finds libpmcclient.so there at run time through the RUNPATH it is linked with.
. "$(dirname "$0")/../lib/lib-install.sh"
: "${PMC_CC:?set by ctest}"
P=$TMP/private
"$CMAKE_COMMAND" --install "$PMC_BUILD_DIR" --prefix "$P" >"$TMP/prefix.log" 2>&1 ||
	{ cat "$TMP/prefix.log" >&2; fail "cmake --install --prefix failed"; }
n=0
while read -r f; do
	case "$f" in "$P"/*) n=$((n + 1)) ;; *) fail "installed outside the prefix: $f" ;; esac
done <"$PMC_BUILD_DIR/install_manifest.txt"
[ "$n" -gt 10 ] || fail "only $n files installed"
pass "$n files installed, all inside $P"
if [ -n "${PMC_SYSTEMD_UNITDIR:-}" ]; then
	[ -f "$P/lib/systemd/system/pmcdaemon.socket" ] || fail "units not in $P/lib/systemd/system"
	pass "units in $P/lib/systemd/system"
fi
# Built against the private prefix as the README says, with its pkg-config file (which
# names the prefix relative to itself), run without LD_LIBRARY_PATH.
pc=$(find "$P" -name pmcclient.pc -print -quit)
[ -n "$pc" ] || fail "no pmcclient.pc in $P"
! grep -qF "$PMC_INSTALL_PREFIX" "$pc" || fail "pmcclient.pc names the configured prefix $PMC_INSTALL_PREFIX"
export PKG_CONFIG_PATH=${pc%/*} PKG_CONFIG_LIBDIR=
libdir=$(pkg-config --variable=libdir pmcclient)
expect_eq "pkg-config's libdir" "$(realpath "$libdir")" "$(dirname "$(find "$P" -name libpmcclient.so -print -quit)")"
cat >"$TMP/app.c" <<'C'
#include <pmc/pmc.h>
#include <stdio.h>
int main(void) { PMC_REGION("x") { puts("ran"); } return 0; }
C
SAN=()
[ -z "${PMC_SANITIZE:-}" ] || SAN=("-fsanitize=$PMC_SANITIZE") # the library is built with it
# shellcheck disable=SC2046 # word splitting of the flags is meant
"$PMC_CC" "${SAN[@]}" -o "$TMP/app" "$TMP/app.c" $(pkg-config --cflags --libs pmcclient) \
	-Wl,-rpath,"$libdir" ||
	fail "cannot build against $P with pkg-config: $(pkg-config --cflags --libs pmcclient)"
out=$(PMC_DISABLE=1 "$TMP/app") || fail "the program did not run: $out"
expect_eq "a program built against the private prefix (pkg-config) runs" "$out" ran
