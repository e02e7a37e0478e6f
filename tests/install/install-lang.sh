#!/bin/bash
# The Python package and the Fortran module as users meet them: `cmake --install` into a
# temporary DESTDIR, then programs using the installed tree only (the package through
# PYTHONPATH, the extension finding libpmcclient by its RUNPATH; the Fortran program built
# with gfortran and pkg-config pmcfortran), run as uid 65534 against the installed daemon:
# exact page faults (a region writing N fresh pages of an mmap, K times) from the main
# thread, from threads (Python threads, OpenMP), a multiprocessing child, a decorator; an
# exception through a region; and with no daemon: the program runs, one warning line.
. "$(dirname "$0")/../lib/lib-install.sh"
[ -n "${PMC_PYTHON:-}${PMC_FC:-}" ] || skip "neither the Python package nor the Fortran module is built"
[ -z "${PMC_SANITIZE:-}" ] || skip "a sanitized libpmcclient needs its runtime preloaded into python3 and gfortran's programs"
[ "$(id -u)" = 0 ] || skip "needs root to run the daemon and switch to uid 65534"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is missing"
command -v jq >/dev/null || skip "jq is missing"
[ "$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo 4)" -le 3 ] ||
	skip "perf_event_open is disabled (perf_event_paranoid > 3)"

SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir "$TMP/bin"
N=8 K=50 T=4
start_installed_daemon --verbose
USER=(setpriv --reuid=65534 --regid=65534 --clear-groups -- env PMC_SOCKET="$SOCK")
as_user() { "${USER[@]}" "$@"; }
# run WHAT OUT CMD...: run CMD as uid 65534 with page-faults counted; sets PID
run() {
	local what=$1 out=$2
	shift 2
	# (Not through a function: $! must be the program's pid, not a subshell's.)
	"${USER[@]}" PMC_EVENTS=page-faults "$@" >"$out" 2>"$out.err" &
	PID=$!
	wait "$PID" || fail "$what failed: $(cat "$out.err")"
	[ ! -s "$out.err" ] || fail "$what wrote on stderr: $(cat "$out.err")"
}
kv() { sed -n "s/^$1=//p" "$2"; }
# expect_region WHAT PID REGION COUNT PAGES: the region's count, page-faults sum and max
expect_region() {
	local q j
	q=$("$P_BIN/pmcctl" --socket "$SOCK" query --pid "$2" --region "$3" --format json)
	j=$(jq -c --arg r "$3" '.regions[] | select(.name == $r) |
		[.count, .events["page-faults"].sum, .events["page-faults"].max]' <<<"$q")
	[ -n "$j" ] || fail "$1: no region $3 of pid $2: $q"
	expect_eq "$1: region $3 [count, page-faults sum, max]" "$j" "[$4,$(($4 * $5)),$5]"
}
# expect_threads WHAT PID N: the daemon registered N threads of process PID
expect_threads() {
	expect_eq "$1: threads registered" "$(grep -c "pid $2: registered thread" "$TMP/daemon.log")" "$3"
}
# expect_nodaemon WHAT CMD...: runs to completion with no daemon, one warning line
expect_nodaemon() {
	local what=$1
	shift
	as_user PMC_SOCKET="$TMP/nobody-listens.sock" "$@" >"$TMP/nd.out" 2>"$TMP/nd.err" ||
		fail "$what without a daemon failed: $(cat "$TMP/nd.err")"
	expect_eq "$what, no daemon: count" "$(kv count "$TMP/nd.out")" "$K"
	expect_eq "$what, no daemon: enabled" "$(kv enabled "$TMP/nd.out")" 0
	expect_eq "$what, no daemon: stderr lines" "$(wc -l <"$TMP/nd.err")" 1
	grep -q "^pmc: profiling disabled: cannot connect to pmcdaemon" "$TMP/nd.err" ||
		fail "$what, no daemon: the warning: $(cat "$TMP/nd.err")"
}

if [ -n "${PMC_PYTHON:-}" ]; then
	PYDIR=$DEST$PMC_INSTALL_PREFIX/$PMC_INSTALL_PYTHONDIR
	ext=$(find "$PYDIR/pmc" -name '_pmc.*.so' -print -quit)
	[ -f "$PYDIR/pmc/__init__.py" ] && [ -n "$ext" ] ||
		fail "the package pmc is not installed in ${PYDIR#"$DEST"}"
	dyn=$(readelf -d "$ext")
	! grep -E "R(UN)?PATH" <<<"$dyn" | grep -F "$PMC_BUILD_DIR" >/dev/null ||
		fail "${ext#"$DEST"} has a RUNPATH into the build tree"
	pass "package pmc installed in ${PYDIR#"$DEST"}"
	cp "$SRC/helpers/python-app.py" "$TMP/bin/"
	chmod -R a+rX "$TMP/bin" "$DEST"
	# No LD_LIBRARY_PATH: the extension finds the installed libpmcclient by its RUNPATH.
	PY=(env PYTHONPATH="$PYDIR" PYTHONDONTWRITEBYTECODE=1 "$PMC_PYTHON" "$TMP/bin/python-app.py")
	# Which package ran: the installed one.
	where=$(as_user PYTHONPATH="$PYDIR" PMC_DISABLE=1 "$PMC_PYTHON" -c 'import pmc, pmc._pmc; print(pmc._pmc.__file__)')
	expect_eq "python imports the installed extension" "$where" "$ext"

	run "python pages" "$TMP/py" "${PY[@]}" pages $N $K
	expect_eq "python pages: output" "$(tr '\n' ' ' <"$TMP/py")" "enabled=1 count=$K flush=0 "
	expect_region "python pages" "$PID" pages $K $N

	run "python threads" "$TMP/py" "${PY[@]}" threads $T $N $K
	expect_eq "python threads: count" "$(kv count "$TMP/py")" $((T * K))
	# Threads share the interpreter's allocator: a region may fault in a page the
	# interpreter itself first writes there (seen once in CI: 1601 of 1600, one region 9).
	# Each region counts its N pages at least; the interpreter's own, one per thread at
	# most, are said.
	q=$("$P_BIN/pmcctl" --socket "$SOCK" query --pid "$PID" --region pages --format json)
	j=$(jq -c '.regions[] | select(.name == "pages") | [.count, .events["page-faults"].sum, .events["page-faults"].min]' <<<"$q")
	read -r c s m < <(jq -r '@tsv' <<<"$j")
	[ "$c" = $((T * K)) ] && [ "$m" = "$N" ] && [ "$s" -ge $((T * K * N)) ] && [ "$s" -le $((T * K * N + T)) ] ||
		fail "python threads: region pages [count, page-faults sum, min]: $j, want [$((T * K)), $((T * K * N)) + at most $T, $N]"
	pass "python threads: region pages $j ($((s - T * K * N)) page(s) the interpreter faulted in itself)"
	expect_threads "python threads (and the main thread)" "$PID" $((T + 1))

	run "python multiprocessing" "$TMP/py" "${PY[@]}" fork $N $K
	child=$(kv child "$TMP/py")
	[ -n "$child" ] && [ "$child" != "$PID" ] || fail "python fork: no child pid: $(cat "$TMP/py")"
	expect_region "python multiprocessing parent" "$PID" pages $K $N
	expect_region "python multiprocessing child (a process of its own)" "$child" pages $K $N

	run "python decorator" "$TMP/py" "${PY[@]}" deco $N $K
	expect_region "python decorator" "$PID" deco $K $N

	run "python exception" "$TMP/py" "${PY[@]}" exc $K
	expect_eq "python exception: caught" "$(kv count "$TMP/py")" $K
	expect_region "python exception through a region: ended each time" "$PID" exc $K 0
	# Not nested in an unended "exc": the next region's call path is itself alone.
	paths=$("$P_BIN/pmcctl" --socket "$SOCK" query --pid "$PID" --tree --format json |
		jq -c '[.. | objects | select(.name? == "after") | .path] | unique')
	expect_eq "python exception: the next region's call path" "$paths" '["after"]'

	# A name with a NUL is refused (ValueError), never cut short; a refused name (1 MiB) is
	# counted at each run, 2 K runs (with, and a decorated function). Before: "nul\0hidden"
	# was counted as "nul", and 10 runs of a 1 MiB name counted 1 drop.
	"${USER[@]}" PMC_EVENTS=page-faults "${PY[@]}" refused $K >"$TMP/py" 2>"$TMP/py.err" &
	PID=$!
	wait "$PID" || fail "python refused failed: $(cat "$TMP/py.err")"
	expect_eq "python: a name with a NUL" "$(kv nul "$TMP/py")" ValueError
	expect_eq "python refused: runs" "$(kv count "$TMP/py")" $((2 * K))
	expect_eq "python refused: each run counted (name-too-long)" \
		"$("$P_BIN/pmcctl" --socket "$SOCK" query --pid "$PID" --format json |
			jq '[.losses[]? | select(.reason == "name-too-long") | .count] | add')" $((2 * K))

	expect_nodaemon "python" "${PY[@]}" pages $N $K

	# The README's example, as it is written.
	cp "$SRC/../examples/example.py" "$TMP/bin/"
	chmod a+r "$TMP/bin/example.py"
	run "examples/example.py" "$TMP/ex" env PYTHONPATH="$PYDIR" "$PMC_PYTHON" "$TMP/bin/example.py"
	expect_eq "examples/example.py: output" "$(cat "$TMP/ex")" "pid=$PID total=2000 counted=True"
	expect_eq "examples/example.py: regions [name, count]" "$("$P_BIN/pmcctl" --socket "$SOCK" \
		query --pid "$PID" --format json | jq -c '[.regions[] | [.name, .count]] | sort')" \
		'[["load",100],["step",100]]'
else
	echo "ok - no Python package built (python3-dev missing): its checks skipped"
fi

if [ -n "${PMC_FC:-}" ]; then
	FMOD=$DEST$PMC_INSTALL_PREFIX/$PMC_INSTALL_FMODDIR
	[ -f "$FMOD/pmc.mod" ] || fail "pmc.mod is not installed in ${FMOD#"$DEST"}"
	[ -f "$P_LIB/pkgconfig/pmcfortran.pc" ] || fail "pmcfortran.pc is not installed"
	export PKG_CONFIG_PATH=$P_LIB/pkgconfig PKG_CONFIG_SYSROOT_DIR=$DEST PKG_CONFIG_LIBDIR=
	# shellcheck disable=SC2046 # word splitting of the flags is meant
	expect_eq "pkg-config --cflags pmcfortran" "$(canon $(pkg-config --cflags pmcfortran))" "-I$FMOD"
	# The README's compile line.
	# shellcheck disable=SC2046 # word splitting of the flags is meant
	"$PMC_FC" -Wall -Werror -fopenmp "$SRC/install/fortran-app.f90" \
		$(pkg-config --cflags --libs pmcfortran) -o "$TMP/bin/fortran-app" ||
		fail "building against pkg-config pmcfortran"
	pass "built with $PMC_FC -fopenmp app.f90 \$(pkg-config --cflags --libs pmcfortran)"
	chmod -R a+rX "$TMP/bin" "$DEST"
	F=(env LD_LIBRARY_PATH="$P_LIB" "$TMP/bin/fortran-app")

	run "fortran pages" "$TMP/f" "${F[@]}" pages $N $K
	expect_eq "fortran pages: output" "$(tr '\n' ' ' <"$TMP/f")" "enabled=1 count=$K flush=0 "
	expect_region "fortran pages" "$PID" pages $K $N

	run "fortran OpenMP" "$TMP/f" env OMP_NUM_THREADS=$T "${F[@]}" omp $T $N $K
	expect_eq "fortran OpenMP: count" "$(kv count "$TMP/f")" $((T * K))
	expect_region "fortran OpenMP" "$PID" pages $((T * K)) $N
	# The team's first thread is the main one, registered by pmc_enabled() before it.
	expect_threads "fortran OpenMP threads" "$PID" $T

	expect_nodaemon "fortran" "${F[@]}" pages $N $K

	# The README's example, built with the README's line.
	# shellcheck disable=SC2046 # word splitting of the flags is meant
	"$PMC_FC" -fopenmp "$SRC/../examples/example.f90" $(pkg-config --cflags --libs pmcfortran) \
		-o "$TMP/bin/example" || fail "building examples/example.f90"
	chmod a+rx "$TMP/bin/example"
	run "examples/example.f90" "$TMP/ex" env LD_LIBRARY_PATH="$P_LIB" OMP_NUM_THREADS=2 "$TMP/bin/example"
	expect_eq "examples/example.f90: output" "$(cat "$TMP/ex")" "total= 8.020E+09 counted=T"
	expect_eq "examples/example.f90: region dot's count" "$("$P_BIN/pmcctl" --socket "$SOCK" \
		query --pid "$PID" --region dot --format json | jq '.regions[0].count')" 400
else
	echo "ok - no Fortran module built (no Fortran compiler): its checks skipped"
fi
