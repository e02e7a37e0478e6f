#!/bin/bash
# The man pages: mandoc -T lint (warnings and worse) and man --warnings (groff) say nothing,
# and two mistakes neither sees: an alternating-font macro (.BR, .IR, ...) given words that
# it joins without spaces (".BR losses ): the number" renders "losses):thenumber"), and a
# .B or .I whose last argument is punctuation (".B read\-failed ," renders "read-failed ,").
# The library's region depth limit is the one the pages state.
set -euo pipefail
SRC=${PMC_SOURCE_DIR:?}
mapfile -t pages < <(cd "$SRC" && git ls-files '*.[1-8]' 2>/dev/null ||
	printf '%s\n' client/pmcctl/pmcctl.1 client/lib/libpmcclient.3 daemon/pmcdaemon.8)
[ ${#pages[@]} -gt 0 ] || { echo "FAIL: no man pages found" >&2; exit 1; }
rc=0
for p in "${pages[@]}"; do
	f=$SRC/$p
	if command -v mandoc >/dev/null; then
		out=$(mandoc -T lint -W warning "$f" 2>&1) || true
		[ -z "$out" ] || { echo "FAIL: mandoc -T lint $p:"; echo "$out"; rc=1; }
	fi
	if command -v man >/dev/null; then
		out=$(LC_ALL=C.UTF-8 MANWIDTH=100 man --warnings -l "$f" 2>&1 >/dev/null) || true
		[ -z "$out" ] || { echo "FAIL: man --warnings $p:"; echo "$out"; rc=1; }
	fi
	out=$(awk '
		/^\.(BR|RB|IR|RI|BI|IB) / {
			# Unquoted lines only: two plain words in a row are joined.
			if ($0 !~ /"/)
				for (i = 2; i < NF; i++)
					if ($i ~ /^[A-Za-z][a-z]+$/ && $(i + 1) ~ /^[A-Za-z][a-z]+$/) {
						print FILENAME ":" FNR ": words joined: " $0
						break
					}
		}
		/^\.(B|I) .* [,;:.)]+$/ { print FILENAME ":" FNR ": space before punctuation: " $0 }
	' "$f")
	[ -z "$out" ] || { echo "FAIL: $out"; rc=1; }
	[ $rc != 0 ] || echo "ok - $p"
done
depth=$(sed -n 's/^#define PMC_LIMIT_DEPTH \([0-9]*\).*/\1/p' "$SRC/proto/wire/pmc-shared.h")
if grep -n "nested deeper than" "$SRC/client/pmcctl/pmcctl.1" | grep -v "deeper than $depth" ; then
	echo "FAIL: pmcctl.1 states a depth limit other than PMC_LIMIT_DEPTH ($depth)"
	rc=1
fi
exit $rc
