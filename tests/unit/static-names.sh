#!/bin/bash
# Every global symbol the static libpmcclient defines starts with pmc_ (STYLE.md's three
# tiers), so that no program's own function of the same name collides with it when linked
# statically; pmc-test-own-names, which defines wire_send, fdcheck_close and list_add of its
# own, links against it and runs (its build is the first check, its run the second).
set -euo pipefail
: "${PMC_CLIENT_STATIC_LIB:?}" "${PMC_TEST_OWN_NAMES_BIN:?}"
globals=$(nm -g --defined-only "$PMC_CLIENT_STATIC_LIB" | awk 'NF == 3 { print $3 }' | sort -u)
n=$(printf '%s\n' "$globals" | grep -c . || true)
[ "$n" -gt 20 ] || { echo "FAIL: nm found only $n globals in $PMC_CLIENT_STATIC_LIB"; exit 1; }
# The sanitizers' own globals (ASan's __odr_asan.NAME beside each global) are not the
# library's names.
foreign=$(printf '%s\n' "$globals" | grep -v '^pmc_' | grep -Ev '^__(odr_asan|asan|sancov|ubsan)' || true)
if [ -n "$foreign" ]; then
	echo "FAIL: $PMC_CLIENT_STATIC_LIB defines globals outside pmc_:" $foreign
	exit 1
fi
echo "ok - the $n globals of $(basename "$PMC_CLIENT_STATIC_LIB") all start with pmc_"
PMC_SOCKET=/nonexistent/pmc.sock "$PMC_TEST_OWN_NAMES_BIN"
