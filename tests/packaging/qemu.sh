#!/bin/bash
# qemu.sh DEBDIR CLIENT: pmc's packages on Debian 12's own kernel: the cached tree
# (lib-guest.sh) with linux-image-cloud-amd64's kernel and modules, booted by
# qemu-system-x86_64 (TCG: no KVM needed) with systemd as PID 1; guest-checks.sh paranoid
# runs once multi-user.target is reached: this version's packages installed with apt, and
# an ordinary user's region exact at the kernel's own perf_event_paranoid (3 on Debian's
# kernels, a Debian patch that wants CAP_SYS_ADMIN where upstream's 2 wants CAP_PERFMON:
# the one thing nspawn.sh, on the host's kernel, cannot show).
#   DEBDIR, CLIENT  as nspawn.sh's
# The kernel package is downloaded once into $PMC_TEST_CACHE/kernel (lib-guest.sh). 4.5
# minutes measured on 2 cores shared with other builds (load 20-80): image 16-38 s, the
# guest at multi-user after 70-80 s, apt's install of 3 packages under TCG 100 s, the rest
# the checks; ../shared/systemd-boot-probe measured 51-105 s for as much on a quieter host.
# After ../shared/systemd-boot-probe/qemu-probe.sh: no initramfs (the cloud kernel has
# NVMe built in, so the disk is an emulated NVMe); the job's output on a second serial
# port (a file here), apart from the kernel's console.
. "$(dirname "$0")/lib-guest.sh"
DEBDIR=$(realpath "${1:?usage: qemu.sh DEBDIR CLIENT}")
CLIENT=$(realpath "${2:?usage: qemu.sh DEBDIR CLIENT}")
need_cmds qemu-system-x86_64 mkfs.ext4 depmod apt-get
ensure_rootfs

# ---- Debian 12's cloud kernel, cached ----------------------------------------------------
K=$CACHE/kernel
KPKG=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
	sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*\).*/\1/p' | head -1)
if [ -z "$KPKG" ]; then
	KPKG=$(sed -n 's/^kpkg=//p' "$K/done" 2>/dev/null || true)
	[ -n "$KPKG" ] || skip "no linux-image-cloud-amd64 known to apt (apt-get update?) and none cached"
fi
if [ "$(sed -n 's/^kpkg=//p' "$K/done" 2>/dev/null)" != "$KPKG" ]; then
	log "apt-get download $KPKG into $K"
	rm -rf "$K"
	mkdir -p "$K"
	(cd "$K" && apt-get download "$KPKG" >download.log 2>&1 && dpkg-deb -x ./*.deb x) ||
		fail "apt-get download $KPKG ($(tail -1 "$K/download.log" 2>/dev/null))"
	rm -f "$K"/*.deb
	echo "kpkg=$KPKG" >"$K/done"
fi
KVER=$(ls "$K/x/lib/modules")

# ---- the disk image ----------------------------------------------------------------------
W=$(mktemp -d /tmp/pmc-qemu.XXXXXX)
trap 'rm -rf "$W"' EXIT
S=$W/stage
cp -a "$ROOTFS" "$S"
cp -a "$K/x/lib/modules" "$S/lib/"
depmod -b "$S" "$KVER"
stage_payload "$S/mnt/pmc" "$DEBDIR" "$CLIENT"
cat >"$S/usr/local/bin/pmc-guest-job" <<'EOF'
#!/bin/bash
exec >/dev/ttyS1 2>&1
/mnt/pmc/guest-checks.sh paranoid
echo "=== GUEST-RC $?"
systemctl poweroff
EOF
chmod 755 "$S/usr/local/bin/pmc-guest-job"
cat >"$S/etc/systemd/system/pmc-guest-job.service" <<'EOF'
[Unit]
Description=pmc's package checks (tests/packaging/qemu.sh), output on ttyS1, then power off
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/usr/local/bin/pmc-guest-job
EOF
mkdir -p "$S/etc/systemd/system/multi-user.target.wants"
ln -s ../pmc-guest-job.service "$S/etc/systemd/system/multi-user.target.wants/"
ln -s /dev/null "$S/etc/systemd/system/serial-getty@ttyS0.service"
echo "/dev/nvme0n1 / ext4 rw,errors=remount-ro 0 1" >"$S/etc/fstab"
# Under TCG apt takes seconds to parse the package lists, which a local .deb whose
# dependencies are in the tree does not need; dpkg's fsyncs are slow on an emulated disk
# (a throwaway guest: unsafe-io).
rm -rf "$S"/var/lib/apt/lists/* "$S"/var/cache/apt/*.bin
echo force-unsafe-io >"$S/etc/dpkg/dpkg.cfg.d/unsafe-io"
mkfs.ext4 -q -F -L root -d "$S" "$W/disk.img" 2G
rm -rf "$S"
log "disk image ready; booting $KVER (qemu-system-x86_64, TCG, 2 vCPUs)"

# ---- boot ----------------------------------------------------------------------------------
: >"$W/job.txt"
rc=0
timeout "${PMC_QEMU_TIMEOUT:-420}" qemu-system-x86_64 -M q35 -accel tcg,thread=multi -cpu max \
	-smp 2 -m 2G -nographic -no-reboot -nic none \
	-kernel "$K/x/boot/vmlinuz-$KVER" \
	-append "console=ttyS0 root=/dev/nvme0n1 rw quiet panic=-1" \
	-drive file="$W/disk.img",if=none,id=d0,format=raw,cache=unsafe -device nvme,drive=d0,serial=pmc \
	-serial mon:stdio -serial file:"$W/job.txt" </dev/null >"$W/console.log" 2>&1 || rc=$?
tr -d '\r' <"$W/job.txt" | grep -v '^=== GUEST-RC'
# The kernel's console (boot messages, systemd's), kept for a look after a failure.
cp "$W/console.log" "$CACHE/qemu-console.log"
log "guest powered off (its console: $CACHE/qemu-console.log)"
if [ $rc != 0 ]; then
	tail -30 "$W/console.log" >&2
	fail "qemu-system-x86_64 exited with status $rc (124: not powered off within ${PMC_QEMU_TIMEOUT:-420} s)"
fi
grc=$(tr -d '\r' <"$W/job.txt" | sed -n 's/^=== GUEST-RC \([0-9]*\)$/\1/p')
if [ -z "$grc" ]; then
	tail -30 "$W/console.log" >&2
	fail "the guest's job did not finish"
fi
[ "$grc" = 0 ] || fail "guest-checks.sh paranoid: exit status $grc"
log "passed"
