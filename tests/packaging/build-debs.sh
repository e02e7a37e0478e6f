#!/bin/bash
# build-debs.sh OUT: pmc's Debian packages, built as an operator builds them, and checked by
# lintian. From a copy of the tree (its tracked files and the untracked ones git does not
# ignore: a clean clone plus the changes at hand), `dpkg-buildpackage -us -uc -b`; then
# lintian, which must report no error and no warning.
#   OUT/new/   this version's packages (debian/changelog's first entry, 0.2.0-1)
#   OUT/prev/  the "previous version", for the upgrade test: NOT an older release of pmc
#              but the same tree built again with its changelog given a lower version
#              first (0.1.0-1), in the copy only. It upgrades the way a real one would
#              (dpkg, maintainer scripts, units, a restart of a running daemon), but its
#              binaries are today's.
# About 3 minutes on 2 cores (two builds of about 80 s, lintian 20 s).
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

# build DIR VERSION: the tree copied to DIR/pmc, its changelog's first entry at VERSION,
# built: the packages land in DIR.
build() {
	local dir=$1 version=$2
	mkdir -p "$dir/pmc"
	git ls-files -z --cached --others --exclude-standard |
		tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$dir/pmc"
	if [ "$(dpkg-parsechangelog -l "$dir/pmc/debian/changelog" -S Version)" != "$version" ]; then
		# A changelog entry of its own above the real ones, written in the copy.
		local entry
		entry=$(printf 'pmc (%s) unstable; urgency=medium\n\n  * The "previous version" of tests/packaging: this tree built with a lower version.\n\n -- %s  %s\n\n' \
			"$version" "$(dpkg-parsechangelog -l "$dir/pmc/debian/changelog" -S Maintainer)" \
			"$(dpkg-parsechangelog -l "$dir/pmc/debian/changelog" -S Date)")
		printf '%s\n' "$entry" | cat - "$dir/pmc/debian/changelog" >"$dir/changelog"
		mv "$dir/changelog" "$dir/pmc/debian/changelog"
	fi
	(cd "$dir/pmc" && DEB_BUILD_OPTIONS="parallel=$(nproc) ${DEB_BUILD_OPTIONS:-}" \
		dpkg-buildpackage -us -uc -b) >"$dir/build.log" 2>&1 ||
		{ tail -40 "$dir/build.log" >&2; fail "dpkg-buildpackage $version (log: $dir/build.log)"; }
}

NEW_VERSION=$(dpkg-parsechangelog -S Version)
log "dpkg-buildpackage -us -uc -b: $NEW_VERSION"
build "$W/new" "$NEW_VERSION"
log "lintian"
lintian --fail-on error,warning \
	"$W/new/pmc_${NEW_VERSION}_"*.changes 2>&1 | tee "$W/lintian.log" ||
	fail "lintian reports errors or warnings (above)"
grep -qE '^[EW]: ' "$W/lintian.log" && fail "lintian reports errors or warnings (above)"
log "lintian: no error, no warning"

log "dpkg-buildpackage -us -uc -b: $PREV_VERSION (the same tree, a lower version)"
build "$W/prev" "$PREV_VERSION"

rm -rf "$OUT/new" "$OUT/prev"
mkdir -p "$OUT/new" "$OUT/prev"
for v in new prev; do
	# The debug symbols stay behind: nothing installs them.
	find "$W/$v" -maxdepth 1 -name '*.deb' ! -name '*-dbgsym_*' -exec mv -t "$OUT/$v" {} +
done
log "packages: $(cd "$OUT" && ls new/*.deb prev/*.deb | tr '\n' ' ')"
