#!/bin/bash
# Names that try to act on whoever reads them. An unprivileged client names its regions
# with ESC sequences, the C1 control CSI raw (0x9b, not UTF-8) and as U+009B (c2 9b),
# bidirectional overrides and isolates (U+202E, U+2066, U+200F, U+061C), tab, DEL and
# newline, and spreadsheet formulas (=HYPERLINK(...), +, -, @), and runs under a process
# name (comm) made of such bytes too. pmcctl's table (query, dump, top), CSV and JSON and the
# metrics page must carry none of those characters raw: each is a visible escape (\x1b,
# \x9b, \u009b, \u202e), the CSV field of a formula starts with a single quote, the JSON
# parses and gives back the escape's text, the page passes promtool, and a name that is
# merely not ASCII (héllo→) is left alone.
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"
command -v iconv >/dev/null || skip "iconv is missing (Debian package libc-bin)"
LC_ALL=C.UTF-8 grep -qP '\x{202e}' <<<$'\xe2\x80\xae' || skip "grep -P does not read UTF-8 here (no C.UTF-8 locale?)"

# no_hidden WHAT FILE: FILE is valid UTF-8 and holds no character the escaping hides
# (newline aside): C0 and C1 controls, DEL, bidirectional formatting characters
no_hidden() {
	iconv -f UTF-8 -t UTF-8 "$2" >/dev/null 2>&1 || fail "$1: not valid UTF-8: $(od -c "$2" | head -n 20 || true)"
	if LC_ALL=C.UTF-8 grep -naP '[\x{0}-\x{9}\x{b}-\x{1f}\x{7f}-\x{9f}\x{61c}\x{200e}\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}]' "$2" >"$TMP/hit"; then
		od -c "$TMP/hit" | head -n 20 >&2 || true
		fail "$1: a hidden character came through raw"
	fi
	pass "$1: nothing hidden, valid UTF-8"
}
# has WHAT FILE TEXT: FILE holds TEXT (fixed string)
has() { grep -qF -- "$3" "$2" || fail "$1: lacks '$3': $(head -c 3000 "$2")"; pass "$1: has '$3'"; }

start_daemon --metrics 127.0.0.1:0
PORT=$(metrics_port)

# name RAW VISIBLE: a region name and how every output must show it
NAMES=(
	$'esc\e[31mred\e[0m' 'esc\x1b[31mred\x1b[0m'
	$'raw\x9b31m' 'raw\x9b31m'
	$'utf\xc2\x9b31m' 'utf\u009b31m'
	$'bidi\xe2\x80\xaetxt.exe' 'bidi\u202etxt.exe'
	$'iso\xe2\x81\xa6x\xe2\x80\x8fy\xd8\x9c' 'iso\u2066x\u200fy\u061c'
	$'ctl\tx\x7fy\nz' 'ctl\x09x\x7fy\x0az'
	'=HYPERLINK("http://x")' '=HYPERLINK("http://x")'
	'+1+cmd' '+1+cmd'
	'-2-cmd' '-2-cmd'
	'@SUM(A1)' '@SUM(A1)'
	'héllo→' 'héllo→'
)
# The process name too: exec(2) takes comm from the file name, here a link's.
COMM_RAW=$'=c\e\x9b\xc2\x9b\xe2\x80\xae'
COMM_VISIBLE='=c\x1b\x9b\u009b\u202e'
ln -s "$(basename "$PMC_TEST_CLIENT_BIN")" "$TMP/bin/$COMM_RAW"

PIDS=()
for ((i = 0; i < ${#NAMES[@]}; i += 2)); do
	# Through sh: env(1) would take a path with '=' for a variable.
	run_client "$TMP/c$i" env PMC_EVENTS=page-faults sh -c 'exec "$0" "$@"' "$TMP/bin/$COMM_RAW" \
		named "${NAMES[i]}" 1 3
	PIDS+=("$CLIENT_PID")
done
comm=$(pmcctl query --pid "${PIDS[0]}" --format json | jq -r '.regions[0].comm')
expect_eq "comm in JSON" "$comm" "$COMM_VISIBLE"

# --- the table: query, dump, top ---
pmcctl dump >"$TMP/table"
no_hidden "dump table" "$TMP/table"
for ((i = 1; i < ${#NAMES[@]}; i += 2)); do
	has "dump table" "$TMP/table" "${NAMES[i]}"
done
has "dump table" "$TMP/table" "$COMM_VISIBLE"
pmcctl query --pid "${PIDS[1]}" >"$TMP/query"
no_hidden "query table" "$TMP/query"
has "query table" "$TMP/query" 'raw\x9b31m'
pmcctl top --interval 0.1 --iterations 1 >"$TMP/top"
no_hidden "top" "$TMP/top"
has "top" "$TMP/top" 'bidi\u202etxt.exe'

# --- CSV ---
pmcctl dump --format csv >"$TMP/csv"
no_hidden "CSV" "$TMP/csv"
has "CSV" "$TMP/csv" ",\"'=HYPERLINK(\"\"http://x\"\")\","
has "CSV" "$TMP/csv" ",'+1+cmd,"
has "CSV" "$TMP/csv" ",'-2-cmd,"
has "CSV" "$TMP/csv" ",'@SUM(A1),"
has "CSV" "$TMP/csv" ",'$COMM_VISIBLE,"
has "CSV" "$TMP/csv" ',esc\x1b[31mred\x1b[0m,'
# No field (bare, or just inside its quotes) starts with what a spreadsheet evaluates.
if grep -nE '(^|,)"?[=+@-]' "$TMP/csv" >"$TMP/hit"; then
	fail "a CSV field starts like a formula: $(cat "$TMP/hit")"
fi
pass "no CSV field starts like a formula"
expect_eq "CSV rows per name (wall_ns and page-faults)" "$(grep -c ",'-2-cmd," "$TMP/csv")" 2

# --- JSON ---
pmcctl dump --format json >"$TMP/json"
jq empty "$TMP/json" || fail "pmcctl's JSON does not parse"
no_hidden "JSON" "$TMP/json"
# jq -r turns JSON escapes back into characters: still nothing hidden.
jq -r '.regions[] | .name, .comm' "$TMP/json" >"$TMP/json-text"
no_hidden "JSON decoded by jq -r" "$TMP/json-text"
for ((i = 0; i < ${#NAMES[@]}; i += 2)); do
	pid=${PIDS[i / 2]}
	expect_eq "JSON name of pid $pid" \
		"$(jq -r --argjson p "$pid" '.regions[] | select(.pid == $p) | .name' "$TMP/json")" "${NAMES[i + 1]}"
	expect_eq "JSON count of pid $pid" \
		"$(jq -r --argjson p "$pid" '.regions[] | select(.pid == $p) | .count' "$TMP/json")" 3
done
expect_eq "JSON regions of that comm" \
	"$(jq --arg c "$COMM_VISIBLE" '[.regions[] | select(.comm == $c)] | length' "$TMP/json")" $((${#NAMES[@]} / 2))

# --- the metrics page ---
curl -sS -f -o "$TMP/metrics" "http://127.0.0.1:$PORT/metrics" || fail "GET /metrics"
no_hidden "metrics page" "$TMP/metrics"
if LC_ALL=C grep -q $'\e' "$TMP/metrics"; then fail "the metrics page has a raw ESC"; fi
# On the page each escape's backslash is escaped in turn: Prometheus reads \x1b.
L="comm=\"=c\\\\x1b\\\\x9b\\\\u009b\\\\u202e\""
L="$L,uid=\"65534\""
has "metrics page" "$TMP/metrics" "pmc_region_count_total{$L,region=\"esc\\\\x1b[31mred\\\\x1b[0m\"} 3"
has "metrics page" "$TMP/metrics" "region=\"raw\\\\x9b31m\"} 3"
has "metrics page" "$TMP/metrics" "region=\"utf\\\\u009b31m\"} 3"
has "metrics page" "$TMP/metrics" "region=\"bidi\\\\u202etxt.exe\"} 3"
has "metrics page" "$TMP/metrics" "region=\"iso\\\\u2066x\\\\u200fy\\\\u061c\"} 3"
has "metrics page" "$TMP/metrics" "region=\"ctl\\\\x09x\\\\x7fy\\nz\"} 3"
has "metrics page" "$TMP/metrics" "region=\"=HYPERLINK(\\\"http://x\\\")\"} 3"
has "metrics page" "$TMP/metrics" "region=\"héllo→\"} 3"
if command -v promtool >/dev/null; then
	if ! promtool check metrics <"$TMP/metrics" >"$TMP/promtool.out" 2>&1; then
		cat "$TMP/promtool.out" >&2
		fail "promtool check metrics refused the page"
	fi
	[ ! -s "$TMP/promtool.out" ] || fail "promtool check metrics: $(cat "$TMP/promtool.out")"
	pass "promtool check metrics"
else
	echo "note: promtool is missing (Debian package prometheus): the page was not linted"
fi
daemon_alive
