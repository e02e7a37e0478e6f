#!/bin/bash
# `cmake --install` into a temporary DESTDIR puts every file where GNUInstallDirs says,
# and a program outside the tree builds against the installed tree both ways: with
# pkg-config (PKG_CONFIG_SYSROOT_DIR, as for any staged install) and with a CMake project
# calling find_package(pmcclient) (pmc::client, and pmc::client_static, which needs no
# libpmcclient.so). Both run with PMC_DISABLE=1 silently.
#   install.sh --daemon   also: the installed pmcdaemon and pmcctl, with each program
#                         run as uid 65534 counting exact page faults
. "$(dirname "$0")/../lib/lib-install.sh"
: "${PMC_CC:?set by ctest}"
command -v pkg-config >/dev/null || skip "pkg-config is missing"
command -v readelf >/dev/null || skip "readelf (binutils) is missing"
DAEMON=
if [ "${1:-}" = --daemon ]; then
	DAEMON=1
	[ "$(id -u)" = 0 ] || skip "needs root to run the daemon and switch to uid 65534"
	command -v setpriv >/dev/null || skip "setpriv (util-linux) is missing"
	command -v jq >/dev/null || skip "jq is missing"
	[ "$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo 4)" -le 3 ] ||
		skip "perf_event_open is disabled (perf_event_paranoid > 3)"
fi

for f in "$P_SBIN/pmcdaemon" "$P_BIN/pmcctl" "$P_LIB/libpmcclient.so.0" "$P_LIB/libpmcclient.so" \
	"$P_LIB/libpmcclient.a" "$P_INCLUDE/pmc/pmc.h" "$P_LIB/pkgconfig/pmcclient.pc" \
	"$P_LIB/cmake/pmcclient/pmcclientConfig.cmake" \
	"$P_LIB/cmake/pmcclient/pmcclientConfigVersion.cmake" \
	"$P_LIB/cmake/pmcclient/pmcTargets.cmake" "$P_MAN/man8/pmcdaemon.8" \
	"$P_MAN/man1/pmcctl.1" "$P_MAN/man3/libpmcclient.3"; do
	[ -e "$f" ] || fail "not installed: ${f#"$DEST"}"
done
[ -x "$P_SBIN/pmcdaemon" ] && [ -x "$P_BIN/pmcctl" ] || fail "pmcdaemon or pmcctl not executable"
expect_soname=libpmcclient.so.0
# (Output kept in variables: with pipefail, `cmd | grep -q` fails when grep exits first.)
dyn=$(readelf -d "$P_LIB/libpmcclient.so")
grep -q "(SONAME).*\[$expect_soname\]" <<<"$dyn" || fail "libpmcclient.so: SONAME is not $expect_soname"
# Installed files must not point into the build tree (RUNPATH, or paths in the package).
for f in "$P_SBIN/pmcdaemon" "$P_BIN/pmcctl" "$P_LIB/libpmcclient.so"; do
	dyn=$(readelf -d "$f")
	! grep -E "R(UN)?PATH" <<<"$dyn" | grep -F "$PMC_BUILD_DIR" >/dev/null ||
		fail "${f#"$DEST"} has a RUNPATH into the build tree"
done
! grep -rqF "$PMC_BUILD_DIR" "$P_LIB/pkgconfig" "$P_LIB/cmake" ||
	fail "the pkg-config or CMake files name the build tree"
pass "files installed where GNUInstallDirs says"

# A sanitized libpmcclient needs its sanitizer runtime in the program too.
SAN=()
[ -z "${PMC_SANITIZE:-}" ] || SAN=("-fsanitize=$PMC_SANITIZE")
SRC=$(cd "$(dirname "$0")" && pwd)
mkdir "$TMP/bin"

# pkg-config: the .pc names its prefix relative to itself (as packagers stage it, with a
# sysroot set, which pkg-config does not add twice).
export PKG_CONFIG_PATH=$P_LIB/pkgconfig PKG_CONFIG_SYSROOT_DIR=$DEST PKG_CONFIG_LIBDIR=
expect_eq "pkg-config --modversion" "$(pkg-config --modversion pmcclient)" "$PMC_VERSION"
flags=$(pkg-config --cflags --libs pmcclient)
# shellcheck disable=SC2086 # word splitting of the flags is meant
case " $(canon $flags) " in
*" -I$P_INCLUDE "*"-L$P_LIB "*) ;;
*) fail "pkg-config --cflags --libs pmcclient: $flags" ;;
esac
# shellcheck disable=SC2086 # word splitting of the flags is meant
"$PMC_CC" -Wall -Werror "${SAN[@]}" "$SRC/consumer.c" $flags -o "$TMP/bin/pmc-consumer-pc" ||
	fail "building against pkg-config pmcclient: $flags"
pass "built with pkg-config: $flags"

# CMake: find_package(pmcclient) from the staged prefix.
"$CMAKE_COMMAND" -S "$SRC" -B "$TMP/cmake" -DCMAKE_PREFIX_PATH="$P_PREFIX" \
	-DCMAKE_C_COMPILER="$PMC_CC" -DCMAKE_C_FLAGS="${SAN[*]}" \
	-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$TMP/cmake.log" 2>&1 &&
	"$CMAKE_COMMAND" --build "$TMP/cmake" >>"$TMP/cmake.log" 2>&1 ||
	{ cat "$TMP/cmake.log" >&2; fail "building with find_package(pmcclient)"; }
found=$(sed -n 's/^pmcclient_DIR:PATH=//p' "$TMP/cmake/CMakeCache.txt")
expect_eq "find_package(pmcclient) found" "$found" "$P_LIB/cmake/pmcclient"
cp "$TMP/cmake/pmc-consumer" "$TMP/bin/pmc-consumer-cmake"
cp "$TMP/cmake/pmc-consumer-static" "$TMP/bin/pmc-consumer-static"
dyn=$(readelf -d "$TMP/bin/pmc-consumer-cmake")
grep -q "(NEEDED).*\[libpmcclient.so.0\]" <<<"$dyn" ||
	fail "pmc::client: the program does not link libpmcclient.so.0"
dyn=$(readelf -d "$TMP/bin/pmc-consumer-static")
! grep -q "(NEEDED).*libpmcclient" <<<"$dyn" ||
	fail "pmc::client_static: the program still needs libpmcclient.so"
pass "built with find_package(pmcclient): pmc::client and pmc::client_static"

# Both ways, the program binds libpmcclient's functions at load (-z now): not lazily, inside
# the first region, on its first pmc_end().
for p in pmc-consumer-pc pmc-consumer-cmake; do
	dyn=$(readelf -d "$TMP/bin/$p")
	grep -Eq "\((FLAGS|FLAGS_1)\).*(BIND_NOW|NOW)" <<<"$dyn" ||
		fail "$p: not linked with -z now (no BIND_NOW in its dynamic section)"
done
pass "pkg-config's and find_package's programs bind at load (BIND_NOW)"

PROGS=(pmc-consumer-pc pmc-consumer-cmake pmc-consumer-static)
chmod -R a+rX "$TMP/bin" "$DEST"
for p in "${PROGS[@]}"; do
	env LD_LIBRARY_PATH="$P_LIB" PMC_DISABLE=1 "$TMP/bin/$p" 3 5 >"$TMP/out" 2>"$TMP/err" ||
		fail "$p with PMC_DISABLE=1 failed: $(cat "$TMP/err")"
	# (pmc_flush()'s value is not checked here: pmc.h promises 0 when profiling is off,
	# the library answers -ENOTCONN under PMC_DISABLE=1.)
	expect_eq "$p, PMC_DISABLE=1: output" "$(grep -v '^flush=' "$TMP/out" | tr '\n' ' ')" \
		"count=5 enabled=0 "
	expect_eq "$p, PMC_DISABLE=1: stderr lines" "$(wc -l <"$TMP/err")" 0
done
# The dynamically linked ones load the installed library, not some other one.
libs=$(LD_LIBRARY_PATH="$P_LIB" ldd "$TMP/bin/pmc-consumer-pc")
grep -qF "$P_LIB/libpmcclient.so.0" <<<"$libs" ||
	fail "pmc-consumer-pc does not load $P_LIB/libpmcclient.so.0: $libs"
[ -n "$DAEMON" ] || exit 0

# The installed daemon and pmcctl, with each program as uid 65534.
start_installed_daemon
N=6 K=30
for p in "${PROGS[@]}"; do
	setpriv --reuid=65534 --regid=65534 --clear-groups -- env LD_LIBRARY_PATH="$P_LIB" \
		PMC_SOCKET="$SOCK" PMC_EVENTS=page-faults "$TMP/bin/$p" $N $K >"$TMP/out" 2>"$TMP/err" &
	pid=$!
	wait "$pid" || fail "$p failed: $(cat "$TMP/err")"
	expect_eq "$p: output" "$(tr '\n' ' ' <"$TMP/out")" "count=$K enabled=1 flush=0 "
	j=$("$P_BIN/pmcctl" --socket "$SOCK" query --pid "$pid" --region consumer --format json)
	sum=$(jq '.regions[0].events["page-faults"].sum' <<<"$j")
	if [ -n "${PMC_SANITIZE:-}" ]; then
		# Sanitizer shadow memory faults in pages of its own inside the region.
		[ "$sum" -ge $((N * K)) ] && [ "$sum" -le $((N * K + N * K / 50 + 8)) ] ||
			fail "$p: page-faults $sum, want $((N * K)) (sanitized: up to 2 % + 8 more)"
		pass "$p: page-faults $sum (want $((N * K)); sanitized build)"
	else
		expect_eq "$p: page-faults" "$sum" $((N * K))
		expect_eq "$p: page-faults max" "$(jq '.regions[0].events["page-faults"].max' <<<"$j")" $N
	fi
done
kill -TERM "$DAEMON_PID"
rc=0
wait "$DAEMON_PID" || rc=$?
trap 'rm -rf "$TMP"' EXIT
expect_eq "the installed pmcdaemon's exit status on SIGTERM" "$rc" 0
