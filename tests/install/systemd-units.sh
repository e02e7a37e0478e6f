#!/bin/bash
# The units as installed pass `systemd-analyze verify`: every directive known, the
# ExecStart= binary installed where the unit says, the man pages of Documentation=
# installed; a unit with a wrong ExecStart= fails the same check. The service's
# exposure (systemd-analyze security) stays rated OK, and it asks for CAP_PERFMON only.
. "$(dirname "$0")/../lib/lib-install.sh"
[ -n "$P_UNITS" ] || skip "built with PMC_WITH_SYSTEMD=OFF: no units"
command -v systemd-analyze >/dev/null || skip "systemd-analyze is missing (Debian package systemd)"
command -v man >/dev/null || skip "man is missing (Debian package man-db): Documentation= cannot be checked"

for u in pmcdaemon.socket pmcdaemon.service; do
	[ -f "$P_UNITS/$u" ] || fail "$u not installed in $PMC_SYSTEMD_UNITDIR"
done
exec_start=$(sed -n 's/^ExecStart=\([^ ]*\).*$/\1/p' "$P_UNITS/pmcdaemon.service")
expect=$PMC_INSTALL_FULL_SBINDIR/pmcdaemon
[ "$exec_start" = "$expect" ] || fail "ExecStart=$exec_start..., want $expect"
pass "ExecStart=$exec_start ..."

# `verify --root` reads the units, and checks ExecStart=, inside $DEST; the units they
# depend on (sockets.target, sysinit.target...) come from this machine.
mkdir -p "$DEST/usr/lib/systemd"
cp -a /usr/lib/systemd/system "$DEST/usr/lib/systemd/"
rm -f "$DEST"/usr/lib/systemd/system/pmcdaemon.*
# verify() NAME: systemd-analyze verify of both units; output in $TMP/verify.log
verify() {
	(cd "$DEST" && MANPATH="$P_MAN" systemd-analyze verify --root="$DEST" \
		pmcdaemon.socket pmcdaemon.service) >"$TMP/verify.log" 2>&1
}
verify || { cat "$TMP/verify.log" >&2; fail "systemd-analyze verify"; }
# Warnings (an unknown key, say) do not change the exit status: there must be none.
! grep -q pmcdaemon "$TMP/verify.log" || { cat "$TMP/verify.log" >&2; fail "systemd-analyze verify warns"; }
pass "systemd-analyze verify pmcdaemon.socket pmcdaemon.service"

cp "$P_UNITS/pmcdaemon.service" "$TMP/good.service"
sed -i "s|^ExecStart=.*|ExecStart=$PMC_INSTALL_FULL_SBINDIR/no-such-daemon|" "$P_UNITS/pmcdaemon.service"
! verify || fail "verify accepts an ExecStart= that does not exist"
grep -q "no-such-daemon is not executable" "$TMP/verify.log" || fail "verify: $(cat "$TMP/verify.log")"
pass "verify rejects a missing ExecStart= binary"
cp "$TMP/good.service" "$P_UNITS/pmcdaemon.service"

sec=$(systemd-analyze security --offline=yes --root="$DEST" pmcdaemon.service 2>&1 |
	sed -n 's/^.*Overall exposure level for pmcdaemon.service: \([0-9.]*\) \([A-Z]*\).*$/\1 \2/p')
[ "${sec#* }" = OK ] || fail "systemd-analyze security: exposure '$sec', want rated OK"
pass "exposure $sec"

sed -n 's/^\(AmbientCapabilities\|CapabilityBoundingSet\)=//p' "$P_UNITS/pmcdaemon.service" |
	sort -u >"$TMP/caps"
# CAP_SYS_ADMIN for kernels at perf_event_paranoid 3 (Debian's, Ubuntu's), kept in the
# permitted set only or dropped at start, and CAP_SETPCAP to drop it from the bounding set:
# the daemon's effective set is CAP_PERFMON alone (systemd-caps checks that).
expect_caps="CAP_PERFMON CAP_SYS_ADMIN CAP_SETPCAP"
[ "$(cat "$TMP/caps")" = "$expect_caps" ] || fail "capabilities: $(tr '\n' ' ' <"$TMP/caps")"
pass "capabilities: $expect_caps"
