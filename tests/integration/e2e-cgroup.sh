#!/bin/bash
# Which container: a program put in a cgroup this test makes (named as Docker names its
# containers' scopes) carries that cgroup in JSON and CSV, the container's short name in
# the table; --cgroup selects it for query, dump, reset, top and flamegraph, and nothing
# else; another program outside it keeps its own cgroup and figures.
. "$(dirname "$0")/../lib/lib.sh"

# The cgroup v2 hierarchy: /sys/fs/cgroup, or the "unified" one of a hybrid host.
MNT=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$MNT" ] || skip "no cgroup v2 hierarchy is mounted"
ID=3f4e2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f
TOP=$MNT/pmc-test-$$
CG=$TOP/docker-$ID.scope
mkdir "$TOP" 2>/dev/null && mkdir "$CG" 2>/dev/null ||
	{ rmdir "$TOP" 2>/dev/null; skip "cgroup v2 at $MNT is not writable here (cannot mkdir $CG)"; }
C=
cg_cleanup() {
	local rc=$?
	set +e
	[ -n "$C" ] && kill "$C" 2>/dev/null && wait "$C" 2>/dev/null
	# Whatever this test left in its cgroup, and only that.
	# ... and once its processes are gone (not after a fixed 0.2 s: rmdir fails before).
	if [ -e "$CG/cgroup.kill" ] && echo 1 >"$CG/cgroup.kill"; then
		for _ in $(seq 300); do [ -s "$CG/cgroup.procs" ] || break; sleep 0.1; done
	fi
	rmdir "$CG" "$TOP" 2>/dev/null
	(exit $rc)
	cleanup
}
trap cg_cleanup EXIT
# The path as the daemon's /proc/PID/cgroup gives it (the mount's root may not be "/").
PATH_CG=$(sh -c "echo \$\$ > '$CG/cgroup.procs' && sed -n 's/^0:://p' /proc/self/cgroup")
case "$PATH_CG" in */pmc-test-$$/docker-$ID.scope) ;; *) fail "cgroup of a process moved in: '$PATH_CG'" ;; esac
PATH_OUT=$(sed -n 's/^0:://p' /proc/self/cgroup)
start_daemon --metrics 127.0.0.1:0 --metrics-labels container
URL=http://127.0.0.1:$(metrics_port)/metrics
# metric SERIES: its value on the page (none: empty)
metric() { curl -sf "$URL" | awk -v k="$1" '$1 == k { print $2 }'; }

# in_cgroup ARGS...: ARGS as uid 65534, in $CG (moved there as root, before dropping it);
# each program execs the next, so that "$IN_CG[@]" ARGS & gives the client's pid in $!.
IN_CG=(sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$CG"
	setpriv --reuid=65534 --regid=65534 --clear-groups -- "${USER_ENV[@]}")
in_cgroup() { "${IN_CG[@]}" "$@"; }
in_cgroup env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named inside 10 3 >"$TMP/in" 2>&1 ||
	fail "client in the cgroup: $(cat "$TMP/in")"
run_client "$TMP/out" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" named outside 10 3
OUT_PID=$CLIENT_PID

# --- JSON and CSV: the full cgroup path and the pid in the process's namespace ---
j=$(region_json inside 0 2>/dev/null || pmcctl query --region inside --format json | jq '.regions[0]')
expect_eq "JSON cgroup" "$(jq -r .cgroup <<<"$j")" "$PATH_CG"
# No pid namespace of its own: it sees itself as the daemon does.
expect_eq "JSON ns_pid = pid outside containers" "$(jq '.ns_pid == .pid and .ns_pid > 0' <<<"$j")" true
IN_PID=$(jq .pid <<<"$j")
expect_eq "JSON cgroup of the program outside" \
	"$(pmcctl query --region outside --format json | jq -r '.regions[0].cgroup')" "$PATH_OUT"
csv=$(pmcctl query --region inside --format csv)
expect_eq "CSV header ends with cgroup,ns_pid" "$(head -1 <<<"$csv" | awk -F, '{ print $(NF-1) "," $NF }')" cgroup,ns_pid
expect_eq "CSV cgroup and ns_pid" "$(sed -n 2p <<<"$csv" | awk -F, '{ print $(NF-1) "," $NF }')" "$PATH_CG,$IN_PID"

# --- the table: the container's short name (Docker's id cut to 12 hex digits) ---
pmcctl query --region inside --region outside >"$TMP/t"
grep -qE '^ *PID +COMM +CONTAINER +REGION ' "$TMP/t" || fail "table heads: $(head -1 "$TMP/t")"
expect_eq "table: container of inside" "$(awk '$4 == "inside" && $6 ~ /^wall/ { print $3 }' "$TMP/t")" "${ID:0:12}"
want_out=$(basename "$PATH_OUT")
[ "$PATH_OUT" = / ] && want_out=-
expect_eq "table: container of outside" "$(awk '$4 == "outside" && $6 ~ /^wall/ { print $3 }' "$TMP/t")" "$want_out"

# --- /metrics with --metrics-labels container: a program's series per container ---
if command -v curl >/dev/null; then
	L='comm="pmc-test-client",uid="65534",container="'${ID:0:12}'",region="inside"'
	expect_eq "metrics: runs in the container" "$(metric "pmc_region_count_total{$L}")" 3
	expect_eq "metrics: runs outside it" \
		"$(metric "pmc_region_count_total{comm=\"pmc-test-client\",uid=\"65534\",container=\"$want_out\",region=\"outside\"}")" 3
	expect_eq "metrics: no series without the label" "$(curl -sf "$URL" | grep -c '^pmc_region_count_total{comm="[^"]*",uid="[0-9]*",region=')" 0
else
	echo "curl is missing: the metrics label is not checked"
fi

# --- --cgroup: matched by the daemon on the full path, globs, any of several ---
names() { jq -r '[.regions[].name] | sort | unique | join(" ")'; }
expect_eq "query --cgroup PATH" "$(pmcctl query --cgroup "$PATH_CG" --format json | names)" inside
expect_eq "query --cgroup glob" "$(pmcctl query --cgroup '*/docker-*.scope' --format json | names)" inside
expect_eq "query --cgroup, two: any" \
	"$(pmcctl query --cgroup '*/docker-*.scope' --cgroup "$PATH_OUT" --format json | names)" "inside outside"
expect_eq "query --cgroup and --region: both" \
	"$(pmcctl query --cgroup '*/docker-*' --region outside --format json | jq -r .empty)" no_match
expect_eq "query --cgroup of no process" "$(pmcctl query --cgroup /nope --format json | jq -r .empty)" no_match
expect_eq "a user's query --cgroup" "$(as_user "$PMCCTL_BIN" query --cgroup '*docker-*' --format json | names)" inside
expect_eq "dump --cgroup" "$(pmcctl dump --cgroup '*/docker-*' --format json | names)" inside
expect_eq "dump --cgroup: the tree's process carries it" \
	"$(pmcctl dump --cgroup '*/docker-*' --format json | jq -r '[.tree[].cgroup] | unique | join(" ")')" "$PATH_CG"
pmcctl flamegraph --cgroup '*/docker-*' >"$TMP/folded" || fail "flamegraph --cgroup"
expect_eq "flamegraph --cgroup: its stacks only" "$(sed 's/ [0-9]*$//' "$TMP/folded" | sort -u | tr '\n' '|')" "pmc-test-client (uid 65534);inside|"
expect_eq "hist --cgroup: the runs of its processes" \
	"$(pmcctl hist --region inside --cgroup '*/docker-*' --format json | jq '[.buckets[].count] | add')" 3
pmcctl hist --region inside --cgroup /nope >"$TMP/err" 2>&1 && fail "hist --cgroup of no process"
grep -q "^pmcctl: no region matches .*--cgroup '/nope'" "$TMP/err" || fail "hist --cgroup /nope: $(cat "$TMP/err")"
pass "hist --cgroup of no process: $(cat "$TMP/err")"
# top: a program running in the cgroup, one outside it.
"${IN_CG[@]}" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" threads 1 1 1000000000 >"$TMP/c" 2>&1 &
C=$!
for _ in $(seq 1200); do
	pmcctl query --region mt-pages --format json | jq -e '.regions[0].count > 0' >/dev/null && break
	sleep 0.1
done
pmcctl top --iterations 1 --interval 0.2 --cgroup '*/docker-*' >"$TMP/top" || fail "top --cgroup"
expect_eq "top --cgroup: rows of its container only" \
	"$(awk '$1 ~ /^[0-9]+$/ { print $3 }' "$TMP/top" | sort -u)" "${ID:0:12}"
expect_eq "top --cgroup: the running program's region" "$(awk '$4 == "mt-pages"' "$TMP/top" | wc -l)" 1
expect_eq "top --cgroup: not the program outside" "$(awk '$4 == "outside"' "$TMP/top" | wc -l)" 0
pmcctl top --iterations 1 --interval 0.2 --cgroup /nope >"$TMP/top" || fail "top --cgroup /nope"
expect_eq "top --cgroup /nope: no rows" "$(awk '$1 ~ /^[0-9]+$/' "$TMP/top" | wc -l)" 0
kill "$C"
wait "$C" 2>/dev/null || true
C=

# --- reset --cgroup: only the processes in it ---
# inside, and the running program's mt-start and mt-pages.
expect_eq "reset --cgroup" "$(pmcctl reset --cgroup '*/docker-*' --format json | jq .cleared)" 3
expect_eq "after reset: none in the cgroup" "$(pmcctl query --cgroup '*/docker-*' --format json | jq '.regions | length')" 0
expect_eq "after reset: outside kept" \
	"$(pmcctl query --region outside --format json | jq '.regions[0].count')" 3
# A reset of some processes moves their figures to the retired ones of their (uid, program,
# cgroup): the container's series counts on.
if command -v curl >/dev/null; then
	expect_eq "metrics after reset --cgroup: the container's series counts on" \
		"$(metric "pmc_region_count_total{$L}")" 3
fi
expect_eq "usage: --cgroup with events" "$(pmcctl events --cgroup x >/dev/null 2>&1; echo $?)" 2
expect_eq "query --tree: the container beside the process" \
	"$(pmcctl query --tree --region outside | grep -c "^pid $OUT_PID (pmc-test-client), container $want_out, uid 65534$")" 1
