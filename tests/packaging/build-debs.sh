#!/bin/bash
# build-debs.sh OUT: pmc's Debian packages, built as an operator builds them, and checked by
# lintian. From a copy of the tree (its tracked files and the untracked ones git does not
# ignore: a clean clone plus the changes at hand), `dpkg-buildpackage -us -uc -b`; then
# lintian, which must report no error and no warning.
#   OUT/new/   this version's packages (debian/changelog's first entry, 0.2.0-1)
#   OUT/prev/  the "previous version", for the upgrade test: NOT an older release of pmc
#              but the same build packaged again after a changelog entry of a lower
#              version (0.1.0-1) was put on top, in the copy only. It upgrades the way a
#              real one would (dpkg, maintainer scripts, units, a restart of a running
#              daemon), but its binaries are today's.
# About 2.5 minutes on an idle 2-core machine (the build 85 s, lintian 20 s, the second
# packaging 30 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: build-debs.sh OUT}
PREV_VERSION=${PMC_PREV_VERSION:-0.1.0-1}
T0=$SECONDS
log() { echo "build-debs: [$((SECONDS - T0)) s] $*"; }
fail() { echo "build-debs: FAIL: $*" >&2; exit 1; }

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /tmp/pmc-debs.XXXXXX)
trap 'rm -rf "$W"' EXIT

# buildpkg LOG [ARGS]: dpkg-buildpackage -us -uc -b ARGS in $W/pmc; the packages land in $W
buildpkg() {
	local log=$1
	shift
	(cd "$W/pmc" && DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
		dpkg-buildpackage -us -uc -b "$@") >"$W/$log" 2>&1 ||
		{ tail -40 "$W/$log" >&2; fail "dpkg-buildpackage $* (log: $W/$log)"; }
}
# keep DIR: the packages built (not their debug symbols, which nothing installs) to OUT/DIR
keep() {
	rm -rf "${OUT:?}/$1"
	mkdir -p "$OUT/$1"
	find "$W" -maxdepth 1 -name '*.deb' ! -name '*-dbgsym_*' -exec mv -t "$OUT/$1" {} +
	rm -f "$W"/*.deb
}

mkdir -p "$W/pmc"
git ls-files -z --cached --others --exclude-standard |
	tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$W/pmc"
NEW_VERSION=$(dpkg-parsechangelog -l "$W/pmc/debian/changelog" -S Version)
log "dpkg-buildpackage -us -uc -b: $NEW_VERSION"
buildpkg build.log
log "lintian"
lintian --fail-on error,warning "$W/pmc_${NEW_VERSION}_"*.changes 2>&1 | tee "$W/lintian.log" ||
	fail "lintian reports errors or warnings (above)"
if grep -qE '^[EW]: ' "$W/lintian.log"; then
	fail "lintian reports errors or warnings (above)"
fi
log "lintian: no error, no warning"
keep new

# The previous version: a changelog entry of its own above the real ones, in the copy, and
# the packages made again from the same build (-nc: nothing is compiled again).
log "dpkg-buildpackage -us -uc -b -nc: $PREV_VERSION (the same build, a lower version)"
{
	printf 'pmc (%s) unstable; urgency=medium\n\n' "$PREV_VERSION"
	printf '  * The "previous version" of tests/packaging: this tree with a lower version.\n\n'
	printf ' -- %s  %s\n\n' "$(dpkg-parsechangelog -l "$W/pmc/debian/changelog" -S Maintainer)" \
		"$(dpkg-parsechangelog -l "$W/pmc/debian/changelog" -S Date)"
	cat "$W/pmc/debian/changelog"
} >"$W/changelog"
mv "$W/changelog" "$W/pmc/debian/changelog"
buildpkg build-prev.log -nc
keep prev
log "packages: $(cd "$OUT" && ls new/*.deb prev/*.deb | tr '\n' ' ')"
