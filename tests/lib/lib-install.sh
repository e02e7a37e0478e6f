# Shared by the install tests: `cmake --install` of the build tree under test into a
# temporary DESTDIR, as a packager does. $DEST is that root; $P_* are the installed
# paths inside it (the configured GNUInstallDirs and unit directories).
set -euo pipefail

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok - $*"; }
# canon FLAGS...: the flags with the paths of -I and -L made canonical (realpath -m), as
# pkg-config gives them relative to the .pc file (${pcfiledir}/../..)
canon() {
	local f out=()
	for f in "$@"; do
		case $f in -I/* | -L/*) out+=("${f:0:2}$(realpath -m "${f:2}")") ;; *) out+=("$f") ;; esac
	done
	echo "${out[*]}"
}
# expect_eq WHAT GOT WANT
expect_eq() { [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"; pass "$1 = $3"; }

: "${PMC_BUILD_DIR:?set by ctest}" "${CMAKE_COMMAND:?set by ctest}"

TMP=$(mktemp -d /tmp/pmc-install.XXXXXX)
chmod 755 "$TMP"
trap 'rm -rf "$TMP"' EXIT
DEST=$TMP/dest
DESTDIR=$DEST "$CMAKE_COMMAND" --install "$PMC_BUILD_DIR" >"$TMP/install.log" 2>&1 ||
	{ cat "$TMP/install.log" >&2; fail "cmake --install failed"; }
P_SBIN=$DEST$PMC_INSTALL_FULL_SBINDIR
P_BIN=$DEST$PMC_INSTALL_FULL_BINDIR
P_LIB=$DEST$PMC_INSTALL_FULL_LIBDIR
P_INCLUDE=$DEST$PMC_INSTALL_FULL_INCLUDEDIR
P_MAN=$DEST$PMC_INSTALL_FULL_MANDIR
P_PREFIX=$DEST$PMC_INSTALL_PREFIX
P_UNITS=${PMC_SYSTEMD_UNITDIR:+$DEST$PMC_SYSTEMD_UNITDIR}

# start_installed_daemon [ARGS...]: the installed pmcdaemon on $SOCK ($TMP/pmc.sock), its
# log in $TMP/daemon.log; $DAEMON_PID, stopped at exit.
start_installed_daemon() {
	SOCK=$TMP/pmc.sock
	"$P_SBIN/pmcdaemon" --socket "$SOCK" "$@" 2>"$TMP/daemon.log" &
	DAEMON_PID=$!
	trap 'kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID"; rm -rf "$TMP"' EXIT
	for _ in $(seq 100); do
		[ -S "$SOCK" ] && grep -q "listening on" "$TMP/daemon.log" && return 0
		kill -0 "$DAEMON_PID" 2>/dev/null ||
			fail "the installed pmcdaemon exited: $(cat "$TMP/daemon.log")"
		sleep 0.05
	done
	fail "the installed pmcdaemon did not create $SOCK"
}
