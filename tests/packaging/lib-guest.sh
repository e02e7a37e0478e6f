# Shared by nspawn.sh and qemu.sh, sourced: the Debian 12 tree both boot, cached.
#
# The cache: $PMC_TEST_CACHE (default /var/cache/pmc-tests), kept between runs:
#   debcache/        the .debs debootstrap downloaded (about 60 MB)
#   bookworm/        the debootstrapped tree (about 260 MB), rebuilt when the package list
#                    or the host's apt sources change (its .stamp says what it was built from)
#   kernel/          Debian 12's cloud kernel, unpacked (qemu.sh)
# Delete the directory to start afresh. The first run downloads (about 2.5 minutes here);
# the next ones only copy and boot.
set -euo pipefail

CACHE=${PMC_TEST_CACHE:-/var/cache/pmc-tests}
ROOTFS=$CACHE/bookworm
T0=$SECONDS
log() { echo "$(basename "$0"): [$((SECONDS - T0)) s] $*"; }
fail() { echo "$(basename "$0"): FAIL: $*" >&2; exit 1; }
skip() { echo "$(basename "$0"): SKIP: $*"; exit 77; }

[ "$(id -u)" = 0 ] || skip "needs root (debootstrap, systemd-nspawn, qemu's disk image)"

# need_cmds CMD...: skip (77) where a tool is missing; .ci/deps installs them all.
need_cmds() {
	local c
	for c in "$@"; do
		command -v "$c" >/dev/null || skip "$c is missing (.ci/deps installs it)"
	done
}

# ensure_rootfs: $ROOTFS, a minimal Debian 12 with systemd as init, what the packages depend
# on (so that apt installs them with no network, as in qemu.sh's guest), jq, and an ordinary
# user alice (uid 1000).
ensure_rootfs() {
	need_cmds debootstrap
	# kmod: modprobe (qemu.sh boots the tree with a kernel and its modules); procps: pidof,
	# sysctl; the rest: pmcdaemon's, libpmcclient0's and pmcctl's dependencies, and jq.
	local include=systemd,systemd-sysv,dbus,kmod,procps,jq
	include+=,libevent-core-2.1-7,libevent-extra-2.1-7,libprotobuf-c1,libjansson4,libpfm4,zlib1g
	local stamp
	stamp="bookworm minbase $include $({ cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null || true; } | sha1sum | cut -c1-12)"
	[ "$(cat "$ROOTFS/.stamp" 2>/dev/null)" != "$stamp" ] || return 0
	rm -rf "$ROOTFS" "$ROOTFS.new"
	mkdir -p "$CACHE/debcache"
	local mirror
	mirror=$(sed -n 's/^URIs: *\([^ ]*debian\/*\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
	log "debootstrap bookworm into $ROOTFS (minbase + $include; ~2.5 min the first time)"
	timeout 900 debootstrap --variant=minbase --include="$include" --cache-dir="$CACHE/debcache" \
		bookworm "$ROOTFS.new" "${mirror:-http://deb.debian.org/debian}" >"$CACHE/debootstrap.log" 2>&1 ||
		{ tail -20 "$CACHE/debootstrap.log" >&2; fail "debootstrap (log: $CACHE/debootstrap.log)"; }
	echo pmc-guest >"$ROOTFS.new/etc/hostname"
	chroot "$ROOTFS.new" useradd -m -u 1000 -s /bin/bash alice
	# An empty machine-id: each boot makes its own.
	: >"$ROOTFS.new/etc/machine-id"
	chroot "$ROOTFS.new" apt-get clean
	echo "$stamp" >"$ROOTFS.new/.stamp"
	mv "$ROOTFS.new" "$ROOTFS"
	log "rootfs ready: $(du -sh "$ROOTFS" | cut -f1)"
}

# stage_payload DIR DEBDIR CLIENT: what the guest sees at /mnt/pmc: DEBDIR's new/ and prev/
# packages, the test client and guest-checks.sh, readable by alice.
stage_payload() {
	local d=$1
	rm -rf "$d"
	mkdir -p "$d/new" "$d/prev"
	cp "$2"/new/*.deb "$d/new/"
	cp "$2"/prev/*.deb "$d/prev/"
	cp "$3" "$d/pmc-test-client"
	cp "$(dirname "${BASH_SOURCE[0]}")/guest-checks.sh" "$d/"
	chmod -R a+rX "$d"
	chmod 755 "$d/pmc-test-client" "$d/guest-checks.sh"
}
