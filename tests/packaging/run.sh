#!/bin/bash
# run.sh OUT CLIENT: tests/run.sh's packaging stage. build-debs.sh (the packages, this
# version and a "previous" one, lintian-clean) into OUT; nspawn.sh (Debian 12 with systemd
# as PID 1 on this host's kernel: install, socket activation, restart and upgrade under a
# running client, purge); qemu.sh (Debian 12's own kernel at its perf_event_paranoid 3).
#   CLIENT  tests/helpers' pmc-test-client of any build (build-test/tests/pmc-test-client)
# Downloads are cached in $PMC_TEST_CACHE (default /var/cache/pmc-tests; lib-guest.sh).
# 11 min 19 s measured with the cache warm on 2 cores shared with other builds (load 20-80):
# packages and lintian 345 s, nspawn 66 s, QEMU 267 s; less on an idle machine.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:?usage: run.sh OUT CLIENT}
CLIENT=${2:?usage: run.sh OUT CLIENT}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
t=$SECONDS
"$HERE/build-debs.sh" "$OUT"
echo "packages built and lintian-clean in $((SECONDS - t)) s"
# boot WAY SCRIPT: SCRIPT's result; 77 (a tool or root missing) is a skip, said as such
boot() {
	local rc=0 t=$SECONDS
	"$HERE/$2" "$OUT" "$CLIENT" || rc=$?
	case $rc in
	0) echo "$1: passed in $((SECONDS - t)) s" ;;
	77) echo "$1: SKIPPED (above)" ;;
	*)
		echo "$1: FAILED in $((SECONDS - t)) s" >&2
		exit $rc
		;;
	esac
}
boot "nspawn (systemd as PID 1, this host's kernel)" nspawn.sh
boot "QEMU (Debian 12's own kernel, perf_event_paranoid as it boots: 3)" qemu.sh
