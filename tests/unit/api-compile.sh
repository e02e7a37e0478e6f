#!/bin/bash
# <pmc/pmc.h> and <pmc/pmc.hpp> as applications compile them: the programs of e2e-api
# (tests/helpers/pmc-test-api.c, pmc-test-api-cxx.cpp: PMC_SCOPE and PMC_REGION, nested, two
# on one line, left by break, continue, return, goto, exceptions; pmc::scope, pmc::region)
# and a C++ file that includes only <pmc/pmc.h>, built by every C compiler here (gcc,
# clang) under -std=c11 -pedantic and -std=gnu11 -pedantic, and every C++ compiler (g++,
# clang++) under -std=c++17 -pedantic, each with -Wall -Wextra -Wshadow -Werror; then
# each program runs with PMC_DISABLE=1 and must take the control flow of plain C.
set -euo pipefail
: "${PMC_SOURCE_DIR:?set by ctest}" "${PMC_CLIENT_LIB:?set by ctest}" "${PMC_CC:?set by ctest}"
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }

TMP=$(mktemp -d /tmp/pmc-api-compile.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
INC=$PMC_SOURCE_DIR/client/include
SRC=$PMC_SOURCE_DIR/tests/helpers
LIBDIR=$(dirname "$PMC_CLIENT_LIB")
WARN=(-pedantic -Wall -Wextra -Wshadow -Werror)
# A sanitized library needs the sanitizer runtime of the compiler that built it: there
# the programs are only compiled (-c), and e2e-api runs the ones the build made.
RUN=1 LINK=(-L"$LIBDIR" -lpmcclient)
[ -z "${PMC_SANITIZE:-}" ] || { RUN=; LINK=(-c); }

# first_of NAME...: the first compiler found
first_of() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null && { echo "$c"; return 0; }
	done
	return 1
}
CCS=("$PMC_CC")
for c in "$(first_of gcc || true)" "$(first_of clang clang-14 || true)"; do
	[ -n "$c" ] && [ "$(readlink -f "$(command -v "$c")")" != "$(readlink -f "$(command -v "$PMC_CC")")" ] &&
		CCS+=("$c")
done
CXXS=()
for c in "$(first_of g++ || true)" "$(first_of clang++ clang++-14 || true)"; do
	[ -n "$c" ] && CXXS+=("$c")
done
[ ${#CXXS[@]} -gt 0 ] || echo "SKIP (part): no C++ compiler (g++, clang++)"

cat >"$TMP/only-h.cpp" <<'CXX'
// <pmc/pmc.h> alone from C++: its functions and both macros.
#include <pmc/pmc.h>
int
main()
{
	int n = 0;
	for (int i = 0; i < 5; i++) {
		PMC_SCOPE("a");
		PMC_SCOPE("b");
		PMC_REGION("c") PMC_REGION("d")
		{
			n += i;
		}
		if (i == 1)
			break;
	}
	pmc_region_t r = pmc_region("e");
	pmc_begin(r);
	pmc_end(r);
	return n == 1 && pmc_enabled() == 0 && pmc_flush() == 0 ? 0 : 1;
}
CXX

# check_flow KEY OUT WANT
check_flow() {
	local got
	got=$(sed -n "s/^$1=//p" "$2")
	[ "$got" = "$3" ] || fail "$1: got '$got', want '$3' ($4)"
}

for cc in "${CCS[@]}"; do
	for std in c11 gnu11; do
		what="$cc -std=$std"
		bin=$TMP/api-$(basename "$cc")-$std
		"$cc" -std=$std "${WARN[@]}" -I"$INC" "$SRC/pmc-test-api.c" -o "$bin" "${LINK[@]}" \
			-pthread 2>"$TMP/err" || { cat "$TMP/err" >&2; fail "$what: pmc-test-api.c"; }
		[ ! -s "$TMP/err" ] || { cat "$TMP/err" >&2; fail "$what: pmc-test-api.c warns"; }
		if [ -n "$RUN" ]; then
			LD_LIBRARY_PATH=$LIBDIR PMC_DISABLE=1 "$bin" flow 3 >"$TMP/out" 2>"$TMP/err" ||
				fail "$what: the program failed"
			[ ! -s "$TMP/err" ] || fail "$what: stderr: $(cat "$TMP/err")"
			check_flow scope_break "$TMP/out" "0 1" "$what"
			check_flow scope_continue "$TMP/out" "0 + 1 2 + 3" "$what"
			check_flow region_break "$TMP/out" "0 1 2 3 4" "$what"
		fi
		pass "$what ${WARN[*]}: PMC_SCOPE and PMC_REGION compile clean${RUN:+ and keep the control flow of C}"
	done
done

for cxx in "${CXXS[@]}"; do
	what="$cxx -std=c++17"
	for f in "$SRC/pmc-test-api-cxx.cpp" "$TMP/only-h.cpp"; do
		bin=$TMP/$(basename "$f" .cpp)-$(basename "$cxx")
		"$cxx" -std=c++17 "${WARN[@]}" -I"$INC" "$f" -o "$bin" "${LINK[@]}" 2>"$TMP/err" ||
			{ cat "$TMP/err" >&2; fail "$what: $(basename "$f")"; }
		[ ! -s "$TMP/err" ] || { cat "$TMP/err" >&2; fail "$what: $(basename "$f") warns"; }
	done
	if [ -n "$RUN" ]; then
		LD_LIBRARY_PATH=$LIBDIR PMC_DISABLE=1 "$TMP/pmc-test-api-cxx-$(basename "$cxx")" flow \
			>"$TMP/out" 2>"$TMP/err" || fail "$what: pmc-test-api-cxx failed"
		check_flow cxx_scope_break "$TMP/out" "0 1" "$what"
		check_flow cxx_region_break "$TMP/out" "0 1 2 3 4" "$what"
		LD_LIBRARY_PATH=$LIBDIR PMC_DISABLE=1 "$TMP/pmc-test-api-cxx-$(basename "$cxx")" throw 3 \
			>"$TMP/out" 2>"$TMP/err" || fail "$what: pmc-test-api-cxx throw failed"
		check_flow caught "$TMP/out" 15 "$what"
		LD_LIBRARY_PATH=$LIBDIR PMC_DISABLE=1 "$TMP/only-h-$(basename "$cxx")" ||
			fail "$what: the program of <pmc/pmc.h> alone failed"
	fi
	pass "$what ${WARN[*]}: <pmc/pmc.hpp>, and <pmc/pmc.h> alone with both macros, compile clean${RUN:+ and run}"
done
