#!/bin/bash
# The Python package by pip (README, "Python"): `pip install --no-index --no-build-isolation
# client/python` into a fresh virtual environment (with the system's site packages, for
# setuptools and wheel: no index is reached) builds the extension with libpmcclient compiled
# in, from a copy of the source tree's CMakeLists.txt, client/ and proto/ alone; the module
# needs no libpmcclient.so (none on the loader's paths) and, as uid 65534 against a daemon,
# counts exactly the page faults of a region writing N fresh pages K times, in the main
# thread and in T threads.
. "$(dirname "$0")/../lib/lib.sh"
: "${PMC_SOURCE_DIR:?set by ctest}" "${PMC_VERSION:?set by ctest}"
[ -n "${PMC_PYTHON:-}" ] || skip "no Python development files (python3-dev): no extension to build"
[ -z "${PMC_SANITIZED:-}" ] || skip "pip builds the extension without the sanitizers of this build"
"$PMC_PYTHON" -c 'import ensurepip, setuptools, wheel' 2>/dev/null ||
	skip "$PMC_PYTHON lacks venv, setuptools or wheel (python3-venv, python3-setuptools, python3-wheel)"

# A copy of what the package builds from (nothing written in the source tree).
mkdir "$TMP/src"
cp -r "$PMC_SOURCE_DIR/CMakeLists.txt" "$PMC_SOURCE_DIR/client" "$PMC_SOURCE_DIR/proto" "$TMP/src/"
rm -rf "$TMP/src/client/python/build" "$TMP/src/client/python/"*.egg-info
"$PMC_PYTHON" -m venv --system-site-packages "$TMP/venv" || fail "python3 -m venv"
# (PIP_* from the caller's environment do not apply: no index, no configuration.)
env -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null PIP_NO_INPUT=1 \
	"$TMP/venv/bin/pip" install --no-index --no-build-isolation "$TMP/src/client/python" \
	>"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log" >&2; fail "pip install client/python"; }
grep -q "Successfully installed pmc-$PMC_VERSION" "$TMP/pip.log" ||
	fail "pip did not install pmc $PMC_VERSION: $(tail -3 "$TMP/pip.log")"
pass "pip install --no-index --no-build-isolation client/python: pmc $PMC_VERSION"
ext=$(find "$TMP/venv" -name '_pmc.*.so' -print -quit)
[ -n "$ext" ] || fail "no extension _pmc in the virtual environment"
dyn=$(readelf -d "$ext")
! grep -q "NEEDED.*libpmcclient" <<<"$dyn" || fail "the extension needs libpmcclient.so: $dyn"
pass "the extension has libpmcclient compiled in (no NEEDED libpmcclient)"

cp "$(dirname "$0")/../helpers/python-app.py" "$TMP/bin/"
chmod -R a+rX "$TMP/venv" "$TMP/bin"
start_daemon
N=8 K=50 T=4
# py OUT ARGS...: python-app.py of the venv as uid 65534, page-faults counted, with no
# LD_LIBRARY_PATH (nothing there for it to find); sets PID
py() {
	local out=$1
	shift
	setpriv --reuid=65534 --regid=65534 --clear-groups -- env -u LD_LIBRARY_PATH \
		PMC_SOCKET="$SOCK" PMC_EVENTS=page-faults PYTHONDONTWRITEBYTECODE=1 \
		"$TMP/venv/bin/python" "$TMP/bin/python-app.py" "$@" >"$out" 2>"$out.err" &
	PID=$!
	wait "$PID" || fail "python-app.py $* failed: $(cat "$out.err")"
	[ ! -s "$out.err" ] || fail "python-app.py $*: stderr: $(cat "$out.err")"
}
where=$(setpriv --reuid=65534 --regid=65534 --clear-groups -- env PMC_DISABLE=1 \
	"$TMP/venv/bin/python" -c 'import pmc._pmc; print(pmc._pmc.__file__)')
expect_eq "the venv's python imports the pip-built extension" "$where" "$ext"

py "$TMP/p" pages $N $K
expect_eq "pages: output" "$(tr '\n' ' ' <"$TMP/p")" "enabled=1 count=$K flush=0 "
j=$(region_json pages "$PID")
expect_eq "pages: count" "$(jq .count <<<"$j")" $K
expect_eq "pages: page-faults sum" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))
expect_eq "pages: page-faults max" "$(jq '.events["page-faults"].max' <<<"$j")" $N

py "$TMP/t" threads $T $N $K
expect_eq "threads: count" "$(kv count "$TMP/t")" $((T * K))
# As install-lang: threads share the interpreter's allocator, which may fault in a page a
# region then counts (one per thread at most); each region counts its N pages at least.
read -r c s m < <(region_json pages "$PID" |
	jq -r '[.count, .events["page-faults"].sum, .events["page-faults"].min] | @tsv')
[ "$c" = $((T * K)) ] && [ "$m" = "$N" ] && [ "$s" -ge $((T * K * N)) ] && [ "$s" -le $((T * K * N + T)) ] ||
	fail "threads: [count, page-faults sum, min] = [$c, $s, $m], want [$((T * K)), $((T * K * N)) + at most $T, $N]"
pass "threads: [count, page-faults sum, min] = [$c, $s, $m]"
expect_eq "nothing lost" "$(pmcctl query --format json | jq -c '[.losses[]?]')" "[]"
daemon_alive
