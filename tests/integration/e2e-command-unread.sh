#!/bin/bash
# OpenCommand replies left unread (issue 31, item 2). Each OpenCommand makes events x CPUs
# + 1 perf events and sends them; a client that reads no reply left them all in flight:
# with 100 sockets, 583,788 perf events pinned under a root daemon, and, under a daemon run
# as the unit runs it (a uid of its own, CAP_PERFMON only), its uid's limit of fds in flight
# (RLIMIT_NOFILE) reached, so that every other user's registration reply failed. Now a
# connection has at most one reply with fds unread (the next request is refused, EBUSY),
# and a uid's unread fds are a share of the daemon's fd limit (EMFILE past it): the victim
# registers and is counted exactly while the attacker's replies stay unread, and the
# attacker is served again once it has read them.
. "$(dirname "$0")/../lib/lib.sh"
DUID=61235 ATTACKER=65532
[[ $(setpriv --help) == *--ambient-caps* ]] || skip "this setpriv has no --ambient-caps"
setpriv --inh-caps=+perfmon true 2>/dev/null ||
	skip "setpriv does not know CAP_PERFMON (util-linux or kernel older than 5.8)"
command -v prlimit >/dev/null || skip "prlimit (util-linux) is missing"
! id -u "$DUID" >/dev/null 2>&1 || skip "uid $DUID belongs to a user here; the test needs it unused"

mkdir "$TMP/run" && chown "$DUID:$DUID" "$TMP/run"
SOCK=$TMP/run/pmc.sock
USER_ENV=(env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$SOCK")
as_attacker() { setpriv --reuid=$ATTACKER --regid=$ATTACKER --clear-groups -- "${USER_ENV[@]}" "$@"; }

# The daemon as the unit runs it, with 1,024 fds: 960 for counters and replies in flight
# (less SERVER_FD_RESERVE), 240 (a quarter) each uid's share.
LIMIT=1024 CAP=$((1024 - 64)) SHARE=$(((1024 - 64) / 4))
prlimit --nofile=$LIMIT:$LIMIT -- setpriv --reuid="$DUID" --regid="$DUID" --clear-groups \
	--no-new-privs --inh-caps=-all,+perfmon --ambient-caps=-all,+perfmon \
	--bounding-set=-all,+perfmon -- "$PMCDAEMON_BIN" --socket "$SOCK" --verbose \
	>"$TMP/daemon.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 2400); do
	grep -q "listening on $SOCK" "$TMP/daemon.log" && break
	daemon_alive
	sleep 0.05
done
grep -q "listening on $SOCK" "$TMP/daemon.log" || fail "pmcdaemon did not listen within 120 s"

# 100 connections x 5 OpenCommands, no reply read: 4,500 perf events on a 2-CPU machine.
CONNS=100 REQS=5
mkfifo "$TMP/go"
as_attacker "$PMC_TEST_RAW_BIN" "$SOCK" command-unread $CONNS $REQS <"$TMP/go" >"$TMP/att" 2>&1 &
ATT=$!
exec 3>"$TMP/go"
for _ in $(seq 2400); do
	grep -qx ready "$TMP/att" && break
	kill -0 $ATT 2>/dev/null || fail "the attacker ended: $(cat "$TMP/att")"
	sleep 0.05
done
grep -qx ready "$TMP/att" || fail "the attacker's $((CONNS * REQS)) requests not answered in 120 s"

# The victim, while all those replies stay unread: registered, counted exactly.
N=5 K=40
run_client "$TMP/out" env PMC_EVENTS=page-faults,task-clock "$PMC_TEST_CLIENT_BIN" pages $N $K
expect_eq "victim enabled beside $CONNS sockets of unread replies" "$(kv enabled "$TMP/out")" 1
[ ! -s "$TMP/out.err" ] || fail "victim warned: $(cat "$TMP/out.err")"
j=$(region_json pages "$CLIENT_PID")
expect_eq "victim's count" "$(jq .count <<<"$j")" $K
expect_faults "victim's page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" $((N * K))

echo go >&3
exec 3>&-
wait $ATT || fail "the attacker: $(cat "$TMP/att")"
ok=$(kv ok "$TMP/att") fds=$(kv fds "$TMP/att") ebusy=$(kv ebusy "$TMP/att")
emfile=$(kv emfile "$TMP/att") other=$(kv other "$TMP/att") unsent=$(kv unsent "$TMP/att")
echo "attacker: ok=$ok fds=$fds ebusy=$ebusy emfile=$emfile other=$other unsent=$unsent"
[ "$ok" -ge 1 ] || fail "the attacker was never served: $(cat "$TMP/att")"
per=$((fds / ok))
expect_eq "each reply served carried the same fds" $((per * ok)) "$fds"
[ "$fds" -le $((CAP - SHARE)) ] ||
	fail "$fds fds unread at once, past what one uid may hold ($CAP - $SHARE for a newcomer)"
pass "$fds fds unread at once (at most $((CAP - SHARE)): $CAP less one share)"
expect_eq "every request answered: served, refused or not taken" \
	$((ok + ebusy + emfile + other + unsent)) $((CONNS * REQS))
expect_eq "no refusal other than EBUSY and EMFILE" "$other" 0
expect_eq "each served connection's later requests refused, its reply unread (EBUSY)" \
	"$ebusy" $((ok * (REQS - 1)))
[ "$emfile" -ge 1 ] || fail "the uid's share never refused anything ($ok served)"
grep -q "uid $ATTACKER leaves [0-9]* file descriptors of its replies unread, past its share" \
	"$TMP/daemon.log" || fail "the daemon did not log the refused uid"

# Read now, the attacker is served again: the bound follows what is unread.
as_attacker "$PMC_TEST_RAW_BIN" "$SOCK" command-unread 10 1 <<<go >"$TMP/att2" 2>&1 ||
	fail "the attacker, second time: $(cat "$TMP/att2")"
expect_eq "once read, 10 connections x 1 request: served" "$(kv ok "$TMP/att2")" 10
daemon_alive
