#!/bin/bash
# pmcctl's numbers a user can trust: human units in tables with the exact figures in JSON and
# CSV; no rows of zeros after a reset; why nothing is listed (nothing yet, another user's,
# no match); --comm and --region as repeatable globs, matched by the daemon, for query,
# dump, reset and top (and an old client's single --region); status leaves pmcctl's own
# connection out of its clients.
. "$(dirname "$0")/../lib/lib.sh"
MAN=$(cd "$(dirname "$0")/../../client/pmcctl" && pwd)/pmcctl.1
start_daemon
ROOT_ENV=(env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$SOCK")
user_ctl() { as_user "$PMCCTL_BIN" "$@"; }

# --- why nothing is listed: nothing yet ---
j=$(pmcctl query --format json) || fail "query of an empty daemon"
expect_eq "empty daemon: why" "$(jq -r .empty <<<"$j")" nothing_recorded
expect_eq "empty daemon: regions" "$(jq '.regions | length' <<<"$j")" 0
out=$(pmcctl query) || fail "query of an empty daemon exits $?"
grep -q "^no regions recorded: no program linked with libpmcclient has sent samples" <<<"$out" ||
	fail "empty daemon message: $out"
pass "nothing recorded: $out"

# --- status: pmcctl's own connection is not a client ---
expect_eq "clients, root, none connected" "$(pmcctl status --format json | jq .clients)" 0
expect_eq "clients, user, none connected" "$(user_ctl status --format json | jq .clients)" 0
as_user env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" steady 1 300 10000 >"$TMP/steady" 2>&1 &
S=$!
wait_status threads 1
expect_eq "clients, root, one client" "$(pmcctl status --format json | jq .clients)" 1
expect_eq "clients, user, its one client" "$(user_ctl status --format json | jq .clients)" 1
grep -Eq "^clients: +1$" <<<"$(pmcctl status)" || fail "status table clients: $(pmcctl status)"
wait "$S" || fail "steady client failed: $(cat "$TMP/steady")"

# --- another user's regions: hidden, counted for a query naming its pid, never named ---
"${ROOT_ENV[@]}" PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named secret-root 1 2 >/dev/null &
RP=$!
wait $RP || fail "root client"
# The steady client above was uid 65534's: reset it, so that the user has nothing of its own.
pmcctl reset --region steady >/dev/null
# Over all processes, another user's activity is not the caller's to see (as in status).
j=$(user_ctl query --format json) || fail "user query"
expect_eq "only root's, no pid asked: why" "$(jq -r .empty <<<"$j")" nothing_recorded
# ... but the user is not told that no program sent samples (issue 24): what it sees is its own.
out=$(user_ctl query) || fail "user query exits $?"
grep -q "^no regions recorded that you may see: no process of yours has sent samples" <<<"$out" ||
	fail "user's nothing-recorded message: $out"
grep -q "other users' processes are not listed for you" <<<"$out" ||
	fail "user's nothing-recorded message does not say others are not listed: $out"
grep -q "no program linked" <<<"$out" && fail "user told that no program sent samples: $out"
grep -q secret <<<"$out" && fail "a hidden region's name leaked: $out"
pass "nothing of the user's own: $out"
j=$(user_ctl query --pid $RP --format json) || fail "user query"
expect_eq "only root's: why" "$(jq -r .empty <<<"$j")" hidden
expect_eq "only root's: hidden count" "$(jq .hidden_regions <<<"$j")" 1
grep -q secret <<<"$j" && fail "a hidden region's name leaked: $j"
out=$(user_ctl query --pid $RP) || fail "user query exits $?"
grep -q "^no region that you may see: 1 region of other users' processes is hidden" <<<"$out" ||
	fail "hidden message: $out"
pass "hidden: $out"
# A glob cannot probe the hidden names: the count is the same whatever it matches.
for g in 'secret*' 'nothing-like-it*'; do
	expect_eq "hidden count with --region '$g'" \
		"$(user_ctl query --pid $RP --region "$g" --format json | jq -c '[.empty, .hidden_regions]')" '["hidden",1]'
done

# --- the user's own clients ---
run_client "$TMP/a" env PMC_EVENTS=page-faults,task-clock "$PMC_TEST_CLIENT_BIN" pages 4 10
A=$CLIENT_PID
run_client "$TMP/b" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named parse_a 2 3
B=$CLIENT_PID
run_client "$TMP/c" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named parse_b 2 4
C=$CLIENT_PID
run_client "$TMP/d" env PMC_EVENTS=page-faults "$PMC_EXAMPLE_BIN" 20 16
D=$CLIENT_PID
run_client "$TMP/e" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 300 5
E=$CLIENT_PID
run_client "$TMP/f" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named 'x*y' 1 1

# --- why nothing is listed: no match ---
j=$(user_ctl query --region nope --format json) || fail "no-match query exits $?"
expect_eq "no match: why" "$(jq -r .empty <<<"$j")" no_match
out=$(user_ctl query --region nope) || fail "no-match table exits $?"
grep -Eq "^no region matches --region 'nope' \([0-9]+ regions recorded that you may see" <<<"$out" ||
	fail "no-match message: $out"
pass "no match: $out"
user_ctl query --region nope --format csv >"$TMP/csv" 2>"$TMP/csv.err" || fail "no-match csv exits $?"
expect_eq "no match: csv is its header" "$(cat "$TMP/csv")" \
	"pid,comm,region,count,event,sum,min,max,mean,stddev,p50,p90,p99,scaled,running_ratio,floor,too_short,cgroup,ns_pid"
grep -q "^pmcctl: no region matches --region 'nope'" "$TMP/csv.err" || fail "csv reason: $(cat "$TMP/csv.err")"

# --- units: the table for people, JSON and CSV exact ---
pmcctl query --pid $A >"$TMP/t" || fail "table"
row() { awk -v e="$1" '$6 == e' "$TMP/t"; }
expect_faults "table: 40 page faults, exact" "$(row page-faults | awk '{print $7}')" 40
row wall | awk '{ for (i = 7; i <= 13; i++) if ($i !~ /^[0-9.]+(ns|us|ms|s)$/) exit 1 }' ||
	fail "wall time not in time units: $(row wall)"
row task-clock | awk '{ for (i = 7; i <= 13; i++) if ($i !~ /^[0-9.]+(ns|us|ms|s)$/) exit 1 }' ||
	fail "task-clock not in time units: $(row task-clock)"
pass "times in ns/us/ms/s: $(row wall)"
j=$(region_json pages $A)
expect_eq "json: wall_ns keys" "$(jq -c '.wall_ns | keys_unsorted' <<<"$j")" \
	'["sum","min","max","mean","stddev","p50","p90","p99","scaled","floor","too_short"]'
expect_eq "json: wall_ns not scaled" "$(jq .wall_ns.scaled <<<"$j")" false
expect_eq "json: wall_ns.sum in whole ns" "$(jq '.wall_ns.sum | . == floor and . > 0' <<<"$j")" true
pmcctl query --pid $E >"$TMP/t" || fail "table"
grep -q "rounded to 3 significant digits" "$TMP/t" || fail "no note of rounding: $(cat "$TMP/t")"
sum_json=$(region_json pages $E | jq '.events["page-faults"].sum')
sum_csv=$(pmcctl query --pid $E --format csv | awk -F, '$5 == "page-faults" {print $6}')
expect_faults "json: 1500 page faults, exact" "$sum_json" 1500
expect_eq "csv: the same exact sum" "$sum_csv" "$sum_json"
want=$(awk -v v="$sum_json" 'BEGIN { printf "%.2fk", v / 1000 }')
expect_eq "table: page faults in k" "$(row page-faults | awk '{print $7}')" "$want"
grep -q '^\.B ipc$' "$MAN" && grep -q '^\.B branch\\-miss\\-ratio$' "$MAN" &&
	grep -q '\\(dqderived\\(dq' "$MAN" || fail "pmcctl(1) does not document derived"
pass "pmcctl(1) documents derived metrics"
"$PMCCTL_BIN" --help >"$TMP/help.txt" && grep -q "(ipc) instructions per cycle" "$TMP/help.txt" || fail "--help does not explain (ipc)"

# --- filters: globs, repeated, --comm; the daemon matches ---
names() { jq -r '[.regions[].name] | sort | join(" ")'; }
expect_eq "--region glob" "$(user_ctl query --region 'parse_*' --format json | names)" "parse_a parse_b"
expect_eq "--region twice" "$(user_ctl query --region parse_a --region pages --format json | names)" \
	"pages pages parse_a"
expect_eq "--region, a glob quoted" "$(user_ctl query --region 'x\*y' --format json | names)" 'x*y'
expect_eq "--comm" "$(user_ctl query --comm pmc-example --format json | jq -c '[.regions[].pid] | unique')" "[$D]"
expect_eq "--comm glob, twice" \
	"$(user_ctl query --comm 'pmc-ex*' --comm nope --format json | jq -c '[.regions[].pid] | unique')" "[$D]"
expect_eq "--comm, a long name cut to 15 bytes as the kernel does" \
	"$(user_ctl query --comm pmc-test-client-and-more --region parse_a --format json | names)" parse_a
j=$(user_ctl query --comm pmc-example --region 'parse*' --format json)
expect_eq "--comm and --region: both must hold" "$(jq -r '.empty' <<<"$j")" no_match
expect_eq "dump takes filters" "$(pmcctl dump --region 'parse_*' --format json | names)" "parse_a parse_b"
pmcctl top --iterations 1 --interval 0.1 --region 'parse_*' --comm 'pmc-test-*' >"$TMP/top" || fail "top"
expect_eq "top takes filters" "$(awk '$4 ~ /^parse_/' "$TMP/top" | wc -l)" 2
expect_eq "top: no other rows" "$(awk '$1 ~ /^[0-9]+$/ && $4 !~ /^parse_/' "$TMP/top" | wc -l)" 0
pmcctl top --iterations 1 --interval 0.1 --region nope >"$TMP/top" || fail "top --region nope"
grep -q "^no region matches --region 'nope'" "$TMP/top" || fail "top: why empty: $(cat "$TMP/top")"

# An old client's Query names one region in its single field: still exact.
if command -v python3 >/dev/null; then
	names_old=$(as_user python3 - "$SOCK" parse_a <<'EOF'
import socket, sys
def ld(tag, b): return bytes([tag, len(b)]) + b
def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1; v |= (c & 0x7f) << s; s += 7
        if c < 0x80: return v, i
def fields(b):
    i = 0
    while i < len(b):
        k, i = varint(b, i)
        if k & 7 == 0: v, i = varint(b, i)
        elif k & 7 == 2: n, i = varint(b, i); v = b[i:i + n]; i += n
        elif k & 7 == 1: v = b[i:i + 8]; i += 8
        elif k & 7 == 5: v = b[i:i + 4]; i += 4
        yield k >> 3, v
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
s.send(ld(0x0a, b'\x08\x01' + ld(0x12, b'old')))
s.recv(65536)
s.send(ld(0x2a, ld(0x12, sys.argv[2].encode())))
r = s.recv(1 << 20)
out = []
for f, v in fields(r):
    if f == 12:
        for g, reg in fields(v):
            if g == 1:
                out += [w.decode() for h, w in fields(reg) if h == 3]
print(" ".join(sorted(out)))
EOF
)
	expect_eq "old client: one exact --region" "$names_old" parse_a
else
	echo "python3 is missing: the old client's Query is not tried"
fi

# --- reset: no rows of zeros afterwards, in any format; filters as for query ---
expect_eq "reset --pid" "$(pmcctl reset --pid $A --format json | jq .cleared)" 1
j=$(pmcctl query --pid $A --format json)
expect_eq "after reset: no region listed" "$(jq '.regions | length' <<<"$j")" 0
expect_eq "after reset: why" "$(jq -r .empty <<<"$j")" no_match
expect_eq "after reset: no csv rows" "$(pmcctl query --pid $A --format csv | wc -l)" 1
expect_eq "after reset: no table rows" "$(pmcctl query | awk -v p=$A '$1 == p' | wc -l)" 0
expect_eq "after reset: not in dump" "$(pmcctl dump --format json | jq --argjson p $A '[.regions[] | select(.pid == $p)] | length')" 0
set +e
out=$(user_ctl reset --region 'parse_*' 2>&1)
rc=$?
set -e
expect_eq "reset with a glob by a user exits" $rc 1
grep -q "reset needs root or a member of the daemon's --admin-group" <<<"$out" || fail "refusal: $out"
expect_eq "reset --region glob" "$(pmcctl reset --region 'parse_*' --format json | jq .cleared)" 2
expect_eq "after the glob reset" "$(pmcctl query --region 'parse_*' --format json | jq -r .empty)" no_match
expect_eq "the rest untouched" "$(region_json touch-pages $D | jq .count)" 20
expect_eq "reset --comm (touch-pages and checksum)" "$(pmcctl reset --comm pmc-example --format json | jq .cleared)" 2
expect_eq "after reset --comm" "$(pmcctl query --comm pmc-example --format json | jq '.regions | length')" 0
expect_eq "reset --comm matching nothing" "$(pmcctl reset --comm nope --format json | jq .cleared)" 0
daemon_alive
