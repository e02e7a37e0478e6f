#!/bin/bash
# nspawn.sh DEBDIR CLIENT: pmc's packages in a real Debian 12 whose PID 1 is systemd:
# `systemd-nspawn --boot` over the cached debootstrapped tree (lib-guest.sh), then
# guest-checks.sh full inside it: install of the previous version with apt, socket
# activation by an ordinary user's program with exact figures, the daemon's capabilities and
# `systemd-analyze security`, systemctl restart and an upgrade to this version under a
# running client (no sample unaccounted for, the figures of before kept), apt purge.
#   DEBDIR  build-debs.sh's output (new/, prev/)
#   CLIENT  tests/helpers' pmc-test-client, from any build (it finds libpmcclient.so.0 of the
#           packages in the guest: its RUNPATH names a build tree the guest does not have)
# The guest shares this host's kernel (perf_event_paranoid as here, read-only inside):
# qemu.sh boots Debian's own. About 20 s with the tree cached.
#
# The flags nspawn needs on a host whose PID 1 is not systemd (found by
# ../shared/systemd-boot-probe/probe.sh): --register=no --keep-unit (no machined, no
# system bus to ask for a scope); a cgroup of its own, in each hierarchy (two guests in the
# root cgroup would collide); --capability=CAP_PERFMON and --system-call-filter=
# perf_event_open (nspawn withholds both by default: the unit's AmbientCapabilities= would
# be empty, and perf_event_open EPERM even for root); --volatile=overlay (every write goes
# to a tmpfs: the cached tree stays pristine). Commands run through nsenter into the
# guest's namespaces (machinectl needs machined); programs that must run as a guest user
# runs them go through the guest's own systemd-run (guest-checks.sh).
. "$(dirname "$0")/lib-guest.sh"
DEBDIR=$(realpath "${1:?usage: nspawn.sh DEBDIR CLIENT}")
CLIENT=$(realpath "${2:?usage: nspawn.sh DEBDIR CLIENT}")
need_cmds systemd-nspawn nsenter
ensure_rootfs

MACHINE=pmc-pkg-$$
CG=pmc-pkg-$$
PAYLOAD=$(mktemp -d /tmp/pmc-nspawn.XXXXXX)
stage_payload "$PAYLOAD/pmc" "$DEBDIR" "$CLIENT"
NSPAWN_PID= LEADER=

boot_guest() {
	(
		for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do
			[ -f "$h/cgroup.procs" ] || continue
			mkdir -p "$h/$CG" && echo $BASHPID >"$h/$CG/cgroup.procs"
			[ "$h" != /sys/fs/cgroup ] || break # cgroup2 alone: one hierarchy
		done
		exec systemd-nspawn --quiet --directory="$ROOTFS" --machine="$MACHINE" --boot \
			--register=no --keep-unit --volatile=overlay --console=pipe \
			--capability=CAP_PERFMON --system-call-filter=perf_event_open \
			--bind-ro="$PAYLOAD/pmc:/mnt/pmc" </dev/null
	) >"$PAYLOAD/nspawn.log" 2>&1 &
	NSPAWN_PID=$!
	# The guest's PID 1 is nspawn's only child: wait until its systemd says it is up.
	local state= i
	for i in $(seq 600); do
		LEADER=$(pgrep -P "$NSPAWN_PID" | head -1 || true)
		if [ -n "$LEADER" ]; then
			state=$(nsenter -t "$LEADER" -a systemctl is-system-running 2>/dev/null || true)
			case $state in
			running) return 0 ;;
			degraded)
				nsenter -t "$LEADER" -a systemctl --failed --no-pager
				return 0
				;;
			esac
		fi
		kill -0 "$NSPAWN_PID" 2>/dev/null || { cat "$PAYLOAD/nspawn.log" >&2; fail "systemd-nspawn exited"; }
		sleep 0.1
	done
	cat "$PAYLOAD/nspawn.log" >&2
	fail "guest's systemd not running or degraded within 60 s (state: ${state:-none})"
}

poweroff_guest() {
	if [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
		nsenter -t "$LEADER" -a systemctl poweroff 2>/dev/null || kill -TERM "$NSPAWN_PID"
		local i
		for i in $(seq 300); do
			kill -0 "$NSPAWN_PID" 2>/dev/null || break
			sleep 0.1
		done
		# A second SIGTERM ends nspawn's guest at once.
		kill -0 "$NSPAWN_PID" 2>/dev/null && kill -TERM "$NSPAWN_PID" 2>/dev/null
		wait "$NSPAWN_PID" 2>/dev/null || true
	fi
	NSPAWN_PID=
	local h
	for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do
		[ -d "$h/$CG" ] && find "$h/$CG" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	rm -rf "$PAYLOAD"
}
trap poweroff_guest EXIT

log "booting Debian 12 (systemd-nspawn --boot, host kernel $(uname -r))"
boot_guest
log "guest up: $(nsenter -t "$LEADER" -a systemd-analyze time 2>/dev/null | head -1)"
rc=0
nsenter -t "$LEADER" -a -- /mnt/pmc/guest-checks.sh full || rc=$?
if [ $rc != 0 ]; then
	echo "--- the guest's journal of pmcdaemon:" >&2
	nsenter -t "$LEADER" -a journalctl -u pmcdaemon.service -u pmcdaemon.socket -o short-monotonic --no-pager >&2 || true
	fail "guest-checks.sh full: exit status $rc"
fi
poweroff_guest
log "passed"
