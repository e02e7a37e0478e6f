#!/bin/bash
# Programs in containers and sandboxes, the daemon outside: pid namespaces (unshare, as
# root and as uid 65534, nested), a user namespace whose root is uid 65534 on the host
# (bwrap, as Flatpak runs programs), threads, fork and exec inside: exact page faults in
# each, filed under the host's uid. Denials: a sibling's thread (same namespace) and a host
# thread id, by pidfd and by id; a thread id reused by another process; fds attached where
# none belong (a lingering TCP socket: never waited for, by the daemon or by the library
# facing a hostile daemon); a daemon in a child pid namespace says the fix.
. "$(dirname "$0")/../lib/lib.sh"
command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
unshare --pid --fork --mount-proc true 2>/dev/null || skip "unshare --pid does not work here"
[ -n "${PMC_TEST_IDENTITY_BIN:-}" ] || fail "PMC_TEST_IDENTITY_BIN is not set"
cp "$PMC_TEST_IDENTITY_BIN" "$TMP/bin/"
ID=$TMP/bin/$(basename "$PMC_TEST_IDENTITY_BIN")
# Each run under its own process name, to find its figures from outside.
for n in ct-root ct-user ct-nested ct-bwrap ct-fork ct-exec; do
	cp "$PMC_TEST_CLIENT_BIN" "$TMP/bin/$n"
done
chmod -R a+rX "$TMP/bin"
start_daemon
N=8 K=50
USER=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
ENVS=(env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$SOCK" PMC_EVENTS=page-faults)
in_ns() { unshare --pid --fork --mount-proc "$@"; }

# comm_json COMM REGION: that region of the process named COMM
comm_json() {
	pmcctl query --comm "$1" --region "$2" --format json | jq -e '.regions[0]'
}
check_pages() { # WHAT COMM REGION COUNT FAULTS UID
	local j
	j=$(comm_json "$2" "$3") || fail "$1: no region $3 of $2: $(pmcctl query --comm "$2")"
	expect_eq "$1: count" "$(jq .count <<<"$j")" "$4"
	expect_faults "$1: page-faults" "$(jq '.events["page-faults"].sum' <<<"$j")" "$5"
	expect_eq "$1: uid" "$(jq .uid <<<"$j")" "$6"
}

# A pid namespace of its own, as root and as uid 65534; threads.
in_ns "${ENVS[@]}" "$TMP/bin/ct-root" pages $N $K >"$TMP/root.out" 2>&1 || fail "in a pid namespace: $(cat "$TMP/root.out")"
expect_eq "pid namespace, root: enabled" "$(kv enabled "$TMP/root.out")" 1
check_pages "pid namespace, root" ct-root pages $K $((N * K)) 0
in_ns "${USER[@]}" "${ENVS[@]}" "$TMP/bin/ct-user" threads 4 $N $K >"$TMP/user.out" 2>&1 || fail "as uid 65534: $(cat "$TMP/user.out")"
check_pages "pid namespace, uid 65534, 4 threads" ct-user mt-pages $((4 * K)) $((4 * N * K)) 65534
# Two pid namespaces, one inside the other.
in_ns unshare --pid --fork --mount-proc "${USER[@]}" "${ENVS[@]}" "$TMP/bin/ct-nested" pages $N $K >"$TMP/nested.out" 2>&1 ||
	fail "nested namespaces: $(cat "$TMP/nested.out")"
check_pages "two nested pid namespaces" ct-nested pages $K $((N * K)) 65534
# fork and exec inside.
in_ns "${USER[@]}" "${ENVS[@]}" "$TMP/bin/ct-fork" fork $N $K >"$TMP/fork.out" 2>&1 || fail "fork inside: $(cat "$TMP/fork.out")"
check_pages "fork inside: parent" ct-fork parent $K $((N * K)) 65534
check_pages "fork inside: child" ct-fork child $K $((N * K)) 65534
in_ns "${USER[@]}" "${ENVS[@]}" "$TMP/bin/ct-exec" exec $N $K >"$TMP/exec.out" 2>&1 || fail "exec inside: $(cat "$TMP/exec.out")"
check_pages "exec inside: before" ct-exec before-exec $K $((N * K)) 65534
check_pages "exec inside: after" ct-exec pages $K $((N * K)) 65534

# A user namespace too, started by uid 65534, whose root it is (bwrap --uid 0): its figures
# are uid 65534's, and its root is no admin.
if command -v bwrap >/dev/null && "${USER[@]}" bwrap --unshare-user --unshare-pid --uid 0 --ro-bind / / true 2>/dev/null; then
	BW=("${USER[@]}" bwrap --unshare-user --unshare-pid --unshare-ipc --uid 0 --gid 0 --ro-bind / /
		--proc /proc --dev /dev --bind "$TMP" "$TMP")
	"${BW[@]}" "${ENVS[@]}" "$TMP/bin/ct-bwrap" pages $N $K >"$TMP/bwrap.out" 2>&1 || fail "bwrap: $(cat "$TMP/bwrap.out")"
	expect_eq "bwrap, uid 0 inside: enabled" "$(kv enabled "$TMP/bwrap.out")" 1
	check_pages "bwrap --unshare-user --uid 0 by uid 65534" ct-bwrap pages $K $((N * K)) 65534
	if "${BW[@]}" "$PMCCTL_BIN" --socket "$SOCK" reset >"$TMP/reset.out" 2>&1; then
		fail "reset by a user namespace's root was allowed"
	fi
	grep -q "uid 65534 is neither" "$TMP/reset.out" || fail "reset refusal: $(cat "$TMP/reset.out")"
	pass "reset refused to the root of a user namespace (uid 65534 on the host)"
	expect_eq "its figures kept" "$(comm_json ct-bwrap pages | jq .count)" $K
	# Nor may it count kernel mode with a hardware event: uid 65534 may not (the policy
	# answers before any open, PMU or not).
	"${BW[@]}" env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$SOCK" PMC_EVENTS=cycles:k \
		"$TMP/bin/ct-bwrap" pages 1 1 >"$TMP/bwk.out" 2>&1 || fail "bwrap, cycles:k: $(cat "$TMP/bwk.out")"
	grep -q "counting kernel mode ('cycles:k') is not allowed for uid 65534" "$TMP/bwk.out" ||
		fail "kernel mode in a user namespace: $(cat "$TMP/bwk.out")"
	pass "the root of a user namespace may not count kernel mode: uid 65534 may not"
	expect_eq "pmcctl inside sees its own user only" \
		"$("${BW[@]}" "$PMCCTL_BIN" --socket "$SOCK" status --format json | jq -c '[.all_users, .uid]')" '[false,65534]'
	q=$("${BW[@]}" "$PMCCTL_BIN" --socket "$SOCK" query --format json | jq -c '[.regions[].uid] | unique')
	expect_eq "pmcctl query inside: uid 65534's regions only" "$q" '[65534]'
else
	echo "SKIP (part): bwrap is missing or cannot make a user namespace here"
fi

# pmcctl run inside a pid namespace: the command's processes, found by the run's tag (their
# pids inside mean nothing to the daemon), exact; nothing of other runs.
cp "$PMC_TEST_CLIENT_BIN" "$TMP/bin/ct-run"
in_ns "${USER[@]}" env LD_LIBRARY_PATH="$TMP/bin" "$PMCCTL_BIN" --socket "$SOCK" --format json \
	run --events page-faults -- sh -c "$TMP/bin/ct-run pages $N $K >/dev/null; $TMP/bin/ct-run pages 3 $K >/dev/null" \
	>"$TMP/run.json" 2>"$TMP/run.err" || fail "pmcctl run inside: $(cat "$TMP/run.err")"
expect_eq "pmcctl run inside: processes" "$(jq '[.regions[] | select(.name == "pages") | .pid] | unique | length' "$TMP/run.json")" 2
sums=($(jq '[.regions[] | .events["page-faults"].sum] | sort | .[]' "$TMP/run.json"))
expect_faults "pmcctl run inside: the smaller process's page faults" "${sums[0]}" $((3 * K))
expect_faults "pmcctl run inside: the larger's" "${sums[1]}" $((N * K))
expect_eq "pmcctl run inside: comms" "$(jq -c '[.regions[].comm] | unique' "$TMP/run.json")" '["ct-run"]'

# Podman (rootful, the host's / as the container's root, a pid namespace of its own).
if command -v podman >/dev/null; then
	cp "$PMC_TEST_CLIENT_BIN" "$TMP/bin/ct-podman"
	if podman run --rm --rootfs / --pid private --network none -v "$TMP:$TMP" \
		-e LD_LIBRARY_PATH="$TMP/bin" -e PMC_SOCKET="$SOCK" -e PMC_EVENTS=page-faults \
		"$TMP/bin/ct-podman" pages $N $K >"$TMP/podman.out" 2>&1; then
		check_pages "podman run --rootfs" ct-podman pages $K $((N * K)) 0
	elif grep -q "OCI\|crun\|runc\|cannot" "$TMP/podman.out" && [ ! -s "$TMP/podman.err" ] &&
		! grep -q "^count=" "$TMP/podman.out"; then
		echo "SKIP (part): podman cannot start a container here: $(head -1 "$TMP/podman.out")"
	else
		fail "podman: $(cat "$TMP/podman.out")"
	fi
else
	echo "SKIP (part): podman is not installed"
fi

# Identity: this thread served by pidfd and by its id alone, inside a namespace.
in_ns "${USER[@]}" "$ID" "$SOCK" self >"$TMP/self.out" 2>&1 || fail "self by pidfd: $(cat "$TMP/self.out")"
pass "a thread in a pid namespace registers by its pidfd"
in_ns "${USER[@]}" "$ID" "$SOCK" self-claim >"$TMP/claim.out" 2>&1 || fail "self by id: $(cat "$TMP/claim.out")"
pass "a thread in a pid namespace registers by its id alone (the kernels without PIDFD_THREAD)"
# A sibling in the same container: by a pidfd of it, and by its id.
cat >"$TMP/sibling.sh" <<EOS
sleep 30 & s=\$!
"$ID" "$SOCK" pidfd-of \$s || exit 1
"$ID" "$SOCK" claim \$s || exit 1
kill \$s
EOS
in_ns "${USER[@]}" bash "$TMP/sibling.sh" >"$TMP/sibling.out" 2>&1 || fail "a sibling's thread: $(cat "$TMP/sibling.out")"
grep -q "not a thread of the calling process" "$TMP/sibling.out" || fail "sibling refusal: $(cat "$TMP/sibling.out")"
pass "a sibling's thread in the same container is refused, by pidfd and by id"
# A host thread's id, from inside (the daemon's own, and this shell's).
in_ns "${USER[@]}" "$ID" "$SOCK" claim "$DAEMON_PID" >"$TMP/host.out" 2>&1 || fail "a host thread: $(cat "$TMP/host.out")"
in_ns "${USER[@]}" "$ID" "$SOCK" claim $$ >>"$TMP/host.out" 2>&1 || fail "a host thread: $(cat "$TMP/host.out")"
pass "host thread ids claimed from a container are refused"
# An ended thread's pidfd, and its id reused by another process (as root in the namespace,
# which may set ns_last_pid).
in_ns "$ID" "$SOCK" stale >"$TMP/stale.out" 2>&1 || fail "stale pidfd / reused id: $(cat "$TMP/stale.out")"
grep -q "^reused=1" "$TMP/stale.out" || fail "the id was not reused: $(cat "$TMP/stale.out")"
pass "an ended thread's pidfd: ESRCH; its id reused by another process: refused by id and by pidfd"
# Fds that are not pidfds, or where none belongs.
as_user "$ID" "$SOCK" not-pidfd >"$TMP/np.out" 2>&1 || fail "not a pidfd: $(cat "$TMP/np.out")"
grep -q "not a pidfd" "$TMP/np.out" || fail "not-a-pidfd message: $(cat "$TMP/np.out")"
as_user "$ID" "$SOCK" no-pidfd >"$TMP/nop.out" 2>&1 || fail "missing pidfd: $(cat "$TMP/nop.out")"
pass "a registration whose pidfd is no pidfd is refused; one missing its pidfd closes its connection"
# A TCP socket whose close would linger 30 s, attached to a Hello: the daemon closes the
# connection without waiting, and answers the next client (within 10 s).
as_user "$ID" "$SOCK" linger >"$TMP/linger.out" 2>&1 || fail "lingering socket: $(cat "$TMP/linger.out")"
pass "an fd attached to a Hello (TCP, SO_LINGER 30 s) holds no one"
# The daemon stopped while the program sends and closes its copies: the daemon's copy is
# then the last, whose close would linger (had the daemon taken and closed its copy first,
# the program's close would have been the last, and lingered 30 s in the program: about a
# quarter of the runs on a fast host, the daemon never tested). A failed wait leaves the
# daemon stopped: cleanup() resumes it.
linger_step() { # MODE OUT
	local h
	exec 9<>"$TMP/step.fifo"
	PMC_TEST_STEP=1 as_user "$ID" "$SOCK" "$1" <&9 >"$2" 2>&1 &
	h=$!
	wait_until "$1 to connect" 60 grep -q ready "$2"
	kill -STOP "$DAEMON_PID"
	echo go >&9
	wait_until "$1 to send" 60 grep -q sent "$2"
	kill -CONT "$DAEMON_PID"
	exec 9>&-
	wait $h
}
mkfifo "$TMP/step.fifo"
linger_step linger-many "$TMP/lm.out" || fail "69 fds, the lingering one last: $(cat "$TMP/lm.out")"
linger_step linger-nested "$TMP/ln.out" || fail "a Unix socket holding a lingering one: $(cat "$TMP/ln.out")"
as_user "$ID" "$SOCK" linger-behind-empty >"$TMP/lbe.out" 2>&1 || fail "a lingering socket queued behind empty datagrams: $(cat "$TMP/lbe.out")"
pass "nor one past the 64 fds a datagram may carry, nor one queued inside a Unix socket sent, nor one queued behind empty datagrams when the connection closes"
# The library facing a hostile daemon that sends such a socket as a counter: the program
# runs unprofiled and ends (timeout 20 s < the 30 s linger).
"$ID" "$TMP/hostile.sock" fake-daemon 40 >"$TMP/fake.out" 2>&1 &
FAKE=$!
for _ in $(seq 1200); do grep -q listening "$TMP/fake.out" && break; sleep 0.1; done
timeout 20 "${USER[@]}" env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$TMP/hostile.sock" \
	"$PMC_TEST_CLIENT_BIN" pages 2 3 >"$TMP/hostile.out" 2>&1 || fail "against a hostile daemon (rc $?): $(cat "$TMP/hostile.out")"
kill $FAKE 2>/dev/null || true
expect_eq "against a daemon that sends a socket as a counter: not profiled" "$(kv enabled "$TMP/hostile.out")" 0
# A daemon that queues such a socket, unasked, behind a real registration reply, and hangs
# up: the library finds it gone at its next send and closes the connection without letting
# that socket's close (30 s of linger) hold the thread that closes it, nor, through the
# library's lock, the program's exit (timeout 20 s).
"$ID" "$TMP/queue.sock" fake-daemon-queue 40 >"$TMP/fakeq.out" 2>&1 &
FAKE=$!
for _ in $(seq 1200); do grep -q listening "$TMP/fakeq.out" && break; sleep 0.1; done
timeout 20 "${USER[@]}" env LD_LIBRARY_PATH="$TMP/bin" PMC_SOCKET="$TMP/queue.sock" \
	"$PMC_TEST_CLIENT_BIN" steady 1 40 50000 >"$TMP/queue.out" 2>&1 || fail "a daemon that queued a lingering socket held the program (rc $?): $(cat "$TMP/queue.out")"
kill $FAKE 2>/dev/null || true
grep -q queued "$TMP/fakeq.out" || fail "the hostile daemon queued nothing: $(cat "$TMP/fakeq.out")"
expect_eq "regions run beside a daemon that queued a lingering socket" "$(kv count "$TMP/queue.out")" 40

# A daemon in a child pid namespace cannot see its clients: it says the fix.
in_ns "$PMCDAEMON_BIN" --socket "$TMP/inner.sock" >"$TMP/inner.log" 2>&1 &
INNER=$!
for _ in $(seq 2400); do [ -S "$TMP/inner.sock" ] && break; sleep 0.05; done
"$PMCCTL_BIN" --socket "$TMP/inner.sock" status >"$TMP/inner.out" 2>&1 && fail "a daemon that cannot see its client answered"
# The daemon, not only unshare, which does not pass SIGTERM on to it.
pkill -f -- "--socket $TMP/inner.sock" || true
wait $INNER 2>/dev/null || true
grep -q "host's pid namespace" "$TMP/inner.out" || fail "no fix named: $(cat "$TMP/inner.out")"
pass "a daemon in a pid namespace of its own names the fix: $(head -1 "$TMP/inner.out")"
daemon_alive
