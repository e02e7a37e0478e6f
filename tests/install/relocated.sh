#!/bin/bash
# An install into a prefix other than the configured one (`cmake --install --prefix P`), as
# a user without root installs: the examples of examples/ (C, C++, Fortran) build and link
# against P both ways the README says, with pkg-config (PKG_CONFIG_PATH=P/.../pkgconfig
# alone: the .pc files name their prefix relative to themselves, ${pcfiledir}) and with
# CMake's find_package(pmcclient) (CMAKE_PREFIX_PATH=P), and run as uid 65534 against P's
# pmcdaemon: exact page faults (touch-pages: PAGES fresh pages written per call) and the
# Fortran example's 400 regions.
. "$(dirname "$0")/../lib/lib-install.sh"
: "${PMC_CC:?set by ctest}"
command -v pkg-config >/dev/null || skip "pkg-config is missing"
[ -z "${PMC_SANITIZE:-}" ] || skip "a sanitized libpmcclient needs its runtime in every example"
[ "$(id -u)" = 0 ] || skip "needs root to run the daemon and switch to uid 65534"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is missing"
command -v jq >/dev/null || skip "jq is missing"
[ "$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo 4)" -le 3 ] ||
	skip "perf_event_open is disabled (perf_event_paranoid > 3)"
EX=$(cd "$(dirname "$0")/../../examples" && pwd)
P=$TMP/elsewhere
"$CMAKE_COMMAND" --install "$PMC_BUILD_DIR" --prefix "$P" >"$TMP/prefix.log" 2>&1 ||
	{ cat "$TMP/prefix.log" >&2; fail "cmake --install --prefix failed"; }
LIB=$P/${PMC_INSTALL_FULL_LIBDIR#"$PMC_INSTALL_PREFIX"/}
[ -f "$LIB/libpmcclient.so.0" ] || fail "libpmcclient.so.0 is not in $LIB"
mkdir "$TMP/pc" "$TMP/bin"

# pkg-config, from PKG_CONFIG_PATH alone (no sysroot, no other prefix).
export PKG_CONFIG_PATH=$LIB/pkgconfig PKG_CONFIG_LIBDIR= PKG_CONFIG_SYSROOT_DIR=
for pc in pmcclient ${PMC_FC:+pmcfortran}; do
	! grep -qF "$PMC_INSTALL_PREFIX" "$LIB/pkgconfig/$pc.pc" ||
		fail "$pc.pc names the configured prefix $PMC_INSTALL_PREFIX"
	for v in libdir includedir fmoddir; do
		d=$(pkg-config --variable=$v $pc)
		[ -z "$d" ] || [ -d "$d" ] || fail "pkg-config --variable=$v $pc: $d is not a directory"
		case $(realpath -m "$d") in "$P"/*) ;; "") ;; *) fail "$pc's $v $d is not in $P" ;; esac
	done
done
pass "pkg-config: pmcclient${PMC_FC:+ and pmcfortran} name directories inside $P"
# shellcheck disable=SC2046 # word splitting of the flags is meant
"$PMC_CC" -Wall -Werror "$EX/example.c" $(pkg-config --cflags --libs pmcclient) -o "$TMP/pc/example" ||
	fail "examples/example.c with pkg-config pmcclient"
if [ -n "${PMC_CXX:-}" ]; then
	# shellcheck disable=SC2046
	"$PMC_CXX" -Wall -Werror "$EX/example.cpp" $(pkg-config --cflags --libs pmcclient) \
		-o "$TMP/pc/example-cxx" || fail "examples/example.cpp with pkg-config pmcclient"
fi
if [ -n "${PMC_FC:-}" ]; then
	# shellcheck disable=SC2046
	"$PMC_FC" -fopenmp "$EX/example.f90" $(pkg-config --cflags --libs pmcfortran) \
		-o "$TMP/pc/example-f90" || fail "examples/example.f90 with pkg-config pmcfortran"
fi
pass "the examples built with pkg-config: $(ls "$TMP/pc" | xargs)"

# CMake: find_package(pmcclient) with CMAKE_PREFIX_PATH=P.
"$CMAKE_COMMAND" -S "$(dirname "$0")/examples" -B "$TMP/cmake" -DCMAKE_PREFIX_PATH="$P" \
	-DPMC_EXAMPLES="$EX" -DCMAKE_C_COMPILER="$PMC_CC" ${PMC_CXX:+-DCMAKE_CXX_COMPILER="$PMC_CXX"} \
	-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$TMP/cmake.log" 2>&1 &&
	"$CMAKE_COMMAND" --build "$TMP/cmake" >>"$TMP/cmake.log" 2>&1 ||
	{ cat "$TMP/cmake.log" >&2; fail "building the examples with find_package(pmcclient)"; }
expect_eq "find_package(pmcclient) found" \
	"$(sed -n 's/^pmcclient_DIR:PATH=//p' "$TMP/cmake/CMakeCache.txt")" "$LIB/cmake/pmcclient"
mkdir "$TMP/cm"
for e in example example-cxx example-f90; do
	[ ! -f "$TMP/cmake/$e" ] || cp "$TMP/cmake/$e" "$TMP/cm/"
done
expect_eq "the examples built with find_package" "$(ls "$TMP/cm" | xargs)" "$(ls "$TMP/pc" | xargs)"

# Run as uid 65534 against P's daemon (the library found through LD_LIBRARY_PATH, as for
# any library outside the loader's paths: pkg-config's Libs carry no RUNPATH).
chmod -R a+rX "$TMP"
SOCK=$TMP/pmc.sock
"$P/${PMC_INSTALL_FULL_SBINDIR#"$PMC_INSTALL_PREFIX"/}/pmcdaemon" --socket "$SOCK" --verbose \
	2>"$TMP/daemon.log" &
DAEMON_PID=$!
trap 'kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID"; rm -rf "$TMP"' EXIT
for _ in $(seq 200); do
	[ -S "$SOCK" ] && grep -q "listening on" "$TMP/daemon.log" && break
	kill -0 "$DAEMON_PID" 2>/dev/null || fail "$P's pmcdaemon exited: $(cat "$TMP/daemon.log")"
	sleep 0.05
done
[ -S "$SOCK" ] || fail "$P's pmcdaemon did not create $SOCK"
PMCCTL=$P/${PMC_INSTALL_FULL_BINDIR#"$PMC_INSTALL_PREFIX"/}/pmcctl
# run WHAT DIR PROG ARGS...: PROG as uid 65534 with page-faults counted; sets PID
run() {
	local what=$1 dir=$2 prog=$3
	shift 3
	setpriv --reuid=65534 --regid=65534 --clear-groups -- env LD_LIBRARY_PATH="$LIB" \
		PMC_SOCKET="$SOCK" PMC_EVENTS=page-faults OMP_NUM_THREADS=2 "$dir/$prog" "$@" \
		>"$TMP/out" 2>"$TMP/err" &
	PID=$!
	wait "$PID" || fail "$what failed: $(cat "$TMP/err")"
	[ ! -s "$TMP/err" ] || fail "$what wrote on stderr: $(cat "$TMP/err")"
}
# region WHAT PID NAME: [count, page-faults sum] of region NAME of PID
region() {
	"$PMCCTL" --socket "$SOCK" query --pid "$2" --region "$3" --format json |
		jq -c '[.regions[0].count, .regions[0].events["page-faults"].sum]'
}
for how in pc cm; do
	run "$how example" "$TMP/$how" example 20 16
	expect_eq "$how: examples/example.c: touch-pages [count, page-faults]" \
		"$(region x "$PID" touch-pages)" "[20,320]"
	if [ -f "$TMP/$how/example-cxx" ]; then
		run "$how example-cxx" "$TMP/$how" example-cxx 20 16
		expect_eq "$how: examples/example.cpp: touch-pages [count, page-faults]" \
			"$(region x "$PID" touch-pages)" "[20,320]"
	fi
	if [ -f "$TMP/$how/example-f90" ]; then
		run "$how example-f90" "$TMP/$how" example-f90
		expect_eq "$how: examples/example.f90: output" "$(cat "$TMP/out")" "total= 8.020E+09 counted=T"
		expect_eq "$how: examples/example.f90: region dot's count" \
			"$(region x "$PID" dot | jq '.[0]')" 400
	fi
done
