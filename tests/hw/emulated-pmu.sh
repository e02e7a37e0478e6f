#!/bin/bash
# The hardware suite against a real kernel PMU, on a machine that has none: QEMU's TCG emulates
# the ARMv8 PMU, and Debian 12's arm64 kernel drives it (armv8_pmuv3). This script
#   1. installs what it needs on Debian 12 (qemu-system-arm, gcc-aarch64-linux-gnu, ...) and
#      fetches the arm64 .debs of the kernel, busybox, bash, jq, setpriv and every library pmc
#      links with (apt-get download, unpacked with dpkg -x into a sysroot: never a multiarch
#      install, which would remove the host's -dev packages that are not Multi-Arch);
#   2. cross-builds pmcdaemon, libpmcclient, pmcctl and the suite's programs with
#      tests/hw/emulated/aarch64-linux-gnu.cmake;
#   3. packs them, their shared-library closure and tests/hw/emulated/init into an initramfs;
#   4. boots it twice with qemu-system-aarch64 -M virt -smp 1 -icount shift=0 (exact, repeatable
#      counts): -cpu cortex-a57 (32-bit event counters; libpfm4 knows the core) and
#      -cpu max,pauth-impdef=on (64-bit counters), and reads each verdict from the console.
# Exit 0 only when the suite ran and passed on both (a skip is a failure); 1 otherwise.
#
# Usage: tests/hw/emulated-pmu.sh [WORKDIR]    (as root; default WORKDIR: build-emu in the tree)
# PMC_EMU_CPUS="cortex-a57" boots only the CPU models named (for a quicker look);
# PMC_EMU_ONLY="bench" (or "test-reader hw-counters") runs only the steps named in the guest
# (a look at one figure; a run with it is never a verdict on the suite: it says so and fails).
# WORKDIR keeps the .debs, the sysroot and the build between runs. About 2 minutes with the
# packages installed, 3 from scratch; every step is bounded by a timeout.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
W=${1:-$SRC/build-emu}
T0=$SECONDS
log() { echo "emulated-pmu: [$((SECONDS - T0)) s] $*"; }
die() { echo "emulated-pmu: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root: it installs packages"
[ "$(uname -m)" = x86_64 ] || die "written for an x86-64 Debian 12 host"
mkdir -p "$W"
W=$(cd "$W" && pwd)

# ---- 1. packages -------------------------------------------------------------------------
export DEBIAN_FRONTEND=noninteractive
HOST_PKGS=(qemu-system-arm gcc-aarch64-linux-gnu libc6-dev-arm64-cross cpio cmake pkg-config
	protobuf-c-compiler)
# arm64: what the guest runs (bash, jq, setpriv from util-linux), the libraries pmc links with
# (-dev for the build) and theirs, and the C library with its loader.
ARM_PKGS=(busybox-static bash libtinfo6 jq libjq1 libonig5 util-linux libcap-ng0 libc6 libgcc-s1
	libevent-dev libevent-2.1-7 libevent-core-2.1-7 libevent-extra-2.1-7
	libevent-pthreads-2.1-7 libevent-openssl-2.1-7 libprotobuf-c-dev libprotobuf-c1
	libsystemd-dev libsystemd0 libcap-dev libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1
	libpfm4-dev libpfm4 libjansson-dev libjansson4 zlib1g-dev zlib1g)
apt_updated=
apt_update() {
	[ -n "$apt_updated" ] && return 0
	log "apt-get update"
	timeout 300 apt-get update -qq >"$W/apt.log" 2>&1 || { cat "$W/apt.log" >&2; die "apt-get update"; }
	apt_updated=1
}
missing=()
for p in "${HOST_PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	log "dpkg --add-architecture arm64"
	dpkg --add-architecture arm64
	apt_update
fi
if [ ${#missing[@]} -gt 0 ]; then
	apt_update
	log "installing ${missing[*]}"
	timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$W/apt.log" 2>&1 ||
		{ cat "$W/apt.log" >&2; die "apt-get install ${missing[*]}"; }
fi

# The .debs: downloaded once into WORKDIR/debs (the list, with the kernel's exact package, in
# debs/list); a new list downloads again.
DEBS=$W/debs
mkdir -p "$DEBS"
kernel_pkg() {
	apt-cache depends linux-image-cloud-arm64:arm64 2>/dev/null |
		sed -n 's/.*Depends: \(linux-image-[0-9][^:]*\).*/\1/p' | head -1
}
KPKG=$(kernel_pkg)
if [ -z "$KPKG" ]; then
	apt_update
	KPKG=$(kernel_pkg)
fi
[ -n "$KPKG" ] || die "no arm64 kernel package (linux-image-cloud-arm64's dependency) in apt"
want="$KPKG ${ARM_PKGS[*]}"
if [ "$(cat "$DEBS/list" 2>/dev/null)" != "$want" ]; then
	log "downloading $(wc -w <<<"$want") arm64 packages"
	rm -f "$DEBS"/*.deb "$DEBS/list"
	args=()
	for p in $want; do args+=("$p:arm64"); done
	if ! (cd "$DEBS" && timeout 600 apt-get download -qq "${args[@]}") >"$W/apt.log" 2>&1; then
		apt_update
		(cd "$DEBS" && timeout 600 apt-get download -qq "${args[@]}") >"$W/apt.log" 2>&1 ||
			{ cat "$W/apt.log" >&2; die "apt-get download of the arm64 packages"; }
	fi
	echo "$want" >"$DEBS/list"
	rm -rf "$W/sysroot"
fi
SYSROOT=$W/sysroot
if [ ! -e "$SYSROOT/.done" ]; then
	log "unpacking $(ls "$DEBS"/*.deb | wc -l) .debs into $SYSROOT"
	rm -rf "$SYSROOT" && mkdir -p "$SYSROOT"
	for d in "$DEBS"/*.deb; do dpkg -x "$d" "$SYSROOT"; done
	touch "$SYSROOT/.done"
fi
VMLINUZ=$(ls "$SYSROOT"/boot/vmlinuz-* | head -1)

# ---- 2. cross build ----------------------------------------------------------------------
BUILD=$W/build
TARGETS=(pmcdaemon pmcctl pmcclient pmc-test-hw pmc-test-hw-ref test-reader pmc-bench-region)
log "cross-building ${TARGETS[*]} in $BUILD"
timeout 300 cmake -S "$SRC" -B "$BUILD" -DCMAKE_TOOLCHAIN_FILE="$SRC/tests/hw/emulated/aarch64-linux-gnu.cmake" \
	-DPMC_ARM64_SYSROOT="$SYSROOT" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPMC_WERROR=ON \
	-DPMC_BUILD_BENCH=ON >"$W/cmake.log" 2>&1 || { cat "$W/cmake.log" >&2; die "cmake (arm64)"; }
timeout 900 cmake --build "$BUILD" -j"$(nproc)" --target "${TARGETS[@]}" >"$W/build.log" 2>&1 ||
	{ tail -n 60 "$W/build.log" >&2; die "the arm64 build"; }

# ---- 3. initramfs --------------------------------------------------------------------------
ROOT=$W/rootfs
rm -rf "$ROOT"
mkdir -p "$ROOT"/{bin,usr/bin,lib/aarch64-linux-gnu,etc,root,pmc/bin,pmc/lib,pmc/tests/hw,pmc/tests/lib,pmc/bench}
LIBDIR=$ROOT/lib/aarch64-linux-gnu
# copy_closure BINARY...: the shared libraries each needs, recursively, from the sysroot (or
# the cross C library), into the guest's /lib/aarch64-linux-gnu.
copy_closure() {
	local todo=("$@") seen=" " f n p
	while [ ${#todo[@]} -gt 0 ]; do
		f=${todo[0]}
		todo=("${todo[@]:1}")
		for n in $(aarch64-linux-gnu-readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
			case $seen in *" $n "*) continue ;; esac
			seen="$seen$n "
			[ -e "$LIBDIR/$n" ] && continue
			p=
			for d in "$SYSROOT/lib/aarch64-linux-gnu" "$SYSROOT/usr/lib/aarch64-linux-gnu" \
				"$BUILD/client" /usr/aarch64-linux-gnu/lib; do
				[ -e "$d/$n" ] && { p=$d/$n; break; }
			done
			[ -n "$p" ] || die "$n (needed by $f) is in no arm64 package fetched"
			cp -L "$p" "$LIBDIR/$n"
			todo+=("$LIBDIR/$n")
		done
	done
}
cp "$SYSROOT/bin/busybox" "$SYSROOT/bin/bash" "$ROOT/bin/"
cp "$SYSROOT/usr/bin/jq" "$SYSROOT/usr/bin/setpriv" "$ROOT/usr/bin/"
for t in pmcdaemon:daemon pmcctl:client pmc-test-hw:tests pmc-test-hw-ref:tests \
	test-reader:tests pmc-bench-region:bench; do
	cp "$BUILD/${t#*:}/${t%%:*}" "$ROOT/pmc/bin/"
done
cp -a "$BUILD"/client/libpmcclient.so* "$ROOT/pmc/lib/"
cp "$SRC/tests/hw/hw-counters.sh" "$ROOT/pmc/tests/hw/"
cp "$SRC/tests/lib/lib.sh" "$ROOT/pmc/tests/lib/"
cp "$SRC/bench/emulated.sh" "$ROOT/pmc/bench/run"
cp -L "$SYSROOT/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1" "$LIBDIR/"
ln -s aarch64-linux-gnu/ld-linux-aarch64.so.1 "$ROOT/lib/ld-linux-aarch64.so.1"
copy_closure "$ROOT"/bin/bash "$ROOT"/usr/bin/* "$ROOT"/pmc/bin/* "$ROOT"/pmc/lib/libpmcclient.so
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ROOT/etc/group"
cp "$SRC/tests/hw/emulated/init" "$ROOT/init"
chmod 755 "$ROOT/init"
(cd "$ROOT" && find . | cpio -o -H newc --quiet | gzip -1 >"$W/initramfs.cpio.gz")
log "initramfs: $(du -h "$W/initramfs.cpio.gz" | cut -f1), $(ls "$LIBDIR" | wc -l) libraries; kernel $(basename "$VMLINUZ")"

# ---- 4. boot -------------------------------------------------------------------------------
# boot CPU: the suite on one emulated machine; QEMU exits 0 whatever the guest did, so the
# verdict is the console's last @@PMC line.
fail=0
PMC_EMU_ONLY_ARG=${PMC_EMU_ONLY:-}
PMC_EMU_ONLY_ARG=${PMC_EMU_ONLY_ARG// /,}
boot() {
	local cpu=$1 out=$W/console-${1%%,*}.log rc=0
	log "booting -cpu $cpu (the suite runs in the guest)"
	timeout 900 qemu-system-aarch64 -M virt -cpu "$cpu" -smp 1 -m 1024 -icount shift=0 \
		-display none -monitor none -serial stdio -no-reboot -nic none \
		-kernel "$VMLINUZ" -initrd "$W/initramfs.cpio.gz" \
		-append "console=ttyAMA0 panic=-1 loglevel=3 rdinit=/init pmc.cpu=$cpu pmc.only=${PMC_EMU_ONLY_ARG}" \
		</dev/null 2>&1 | tr -d '\r' >"$out" || rc=$?
	grep -E '^@@PMC (BOOT|PMU|SYSCTL|RESULT|VERDICT|END)|^@@PMC \| (ok|FAIL|SKIP|constant|caps|bench|note)' "$out" |
		sed 's/^@@PMC /  /' || true
	if [ "$rc" != 0 ]; then
		echo "emulated-pmu: qemu-system-aarch64 -cpu $cpu: exit status $rc (124: timed out); console: $out" >&2
		fail=1
	elif ! grep -qx "@@PMC VERDICT PASS cpu=$cpu" "$out"; then
		tail -n 40 "$out" >&2
		echo "emulated-pmu: -cpu $cpu: the suite did not pass (console: $out)" >&2
		fail=1
	fi
}
for cpu in ${PMC_EMU_CPUS:-cortex-a57 max,pauth-impdef=on}; do
	boot "$cpu"
done
[ "$fail" = 0 ] || die "the hardware suite failed on the emulated PMU"
[ -z "${PMC_EMU_ONLY:-}" ] || die "only $PMC_EMU_ONLY ran (PMC_EMU_ONLY): not the suite's verdict"
log "PASS: the hardware suite passed on -cpu ${PMC_EMU_CPUS:-cortex-a57 and -cpu max,pauth-impdef=on}"
