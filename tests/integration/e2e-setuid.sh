#!/bin/bash
# A setuid program linked with libpmcclient ignores PMC_SOCKET (and every PMC_* variable):
# under AT_SECURE its environment is its invoker's. Before, a setuid-root copy of a client
# run by uid 65534 connected to a socket of uid 65534's choosing and sent it its region
# names and wall times. pmc-fake-daemon silent listens there and prints each connection.
. "$(dirname "$0")/../lib/lib.sh"

# The copy lives where uid 65534 can run it and the kernel honours the setuid bit.
if findmnt -no OPTIONS -T "$TMP" | tr ',' '\n' | grep -qx nosuid; then
	skip "$TMP is on a nosuid file system: a setuid program cannot be tried there"
fi
FAKE=$TMP/fake.sock
start_helper "$TMP/fake.out" listening "$PMC_FAKE_DAEMON_BIN" silent "$FAKE"

cp "$PMC_TEST_CLIENT_STATIC_BIN" "$TMP/bin/plain-client"
cp "$PMC_TEST_CLIENT_STATIC_BIN" "$TMP/bin/suid-client"
chown root:root "$TMP/bin/suid-client"
chmod 4755 "$TMP/bin/suid-client"
chmod 755 "$TMP/bin/plain-client"

accepts() { grep -c '^accept$' "$TMP/fake.out" || true; }

# The same program without the bit: it does connect there (the test can see a connection).
as_user env PMC_SOCKET="$FAKE" PMC_FLUSH_MS=0 "$TMP/bin/plain-client" pages 1 1 >"$TMP/plain" 2>&1 ||
	fail "plain client: $(cat "$TMP/plain")"
# (One, or more: its Hello unanswered for 2 s, the library connects again in the background
# 0.1 s later, before the program ends if a loaded machine holds it up: 2 in a sanitized soak.
# So the setuid copy is tried against a fake daemon of its own, which sees none.)
[ "$(accepts)" -ge 1 ] || fail "no connection from the plain copy"
pass "connections from the plain copy: $(accepts)"
FAKE=$TMP/fake2.sock
start_helper "$TMP/fake2.out" listening "$PMC_FAKE_DAEMON_BIN" silent "$FAKE"
accepts() { grep -c '^accept$' "$TMP/fake2.out" || true; }
# Connections made: accepted, or waiting in the listening socket's queue (ss: Recv-Q).
made() { echo $(($(accepts) + $(ss -xlnH | awk -v s="$FAKE" '$5 == s { print $3 }'))); }

# Setuid root, run by uid 65534 with PMC_SOCKET (and the others) set: no connection there.
as_user env PMC_SOCKET="$FAKE" PMC_EVENTS=page-faults PMC_FLUSH_MS=0 \
	"$TMP/bin/suid-client" pages 1 1 >"$TMP/suid" 2>&1 || fail "setuid client: $(cat "$TMP/suid")"
grep -q '^page_faults=1$' "$TMP/suid" || fail "the setuid client did not run: $(cat "$TMP/suid")"
expect_eq "connections from the setuid copy" "$(made)" 0
if grep -q "$FAKE" "$TMP/suid"; then
	fail "the setuid client names PMC_SOCKET's path: $(cat "$TMP/suid")"
fi
pass "the setuid copy ignored PMC_SOCKET: $(head -c 300 "$TMP/suid" | tr '\n' ' ')"
