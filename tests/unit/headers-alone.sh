#!/bin/bash
# Every header of proto/, daemon/ and client/ compiles alone, as the first include of a file
# (each includes what it uses), by the include name the code uses for it ("kernel/perf.h",
# "wire/wire.h", "pmc/pmc.h"), with the build's warnings as errors.
set -euo pipefail
: "${PMC_SOURCE_DIR:?}" "${PMC_GEN:?}" "${PMC_CC:?}"
cd "$PMC_SOURCE_DIR"
n=0 bad=0
for h in $(git ls-files 'proto/*.h' 'daemon/*.h' 'client/*.h' 2>/dev/null ||
	find proto daemon client -name '*.h'); do
	case $h in
	client/include/*) inc=${h#client/include/} ;;
	*) inc=${h#*/} ;;
	esac
	n=$((n + 1))
	if ! printf '#include "%s"\n' "$inc" | "$PMC_CC" -std=gnu11 -D_GNU_SOURCE -fsyntax-only \
		-Wall -Wextra -Wshadow -Wno-unused-parameter -Wno-unused-function -Werror \
		-Iproto -Idaemon -Iclient -Iclient/include -I"$PMC_GEN" -x c - 2>"${TMPDIR:-/tmp}/hdr.$$"; then
		echo "FAIL: $h does not compile alone:"
		head -5 "${TMPDIR:-/tmp}/hdr.$$"
		bad=$((bad + 1))
	fi
done
rm -f "${TMPDIR:-/tmp}/hdr.$$"
[ "$n" -gt 30 ] || { echo "FAIL: only $n headers found"; exit 1; }
[ "$bad" = 0 ] || { echo "FAIL: $bad of $n headers do not compile alone"; exit 1; }
echo "ok - $n headers compile alone"
