#!/bin/bash
# pmcdaemon --metrics-token-file: the daemon refuses to start with a token file that is not
# a regular file of root's, that group or others may read or write, or that is empty, and
# says which file, its mode or owner and the fix; with a good one, a request without
# 'Authorization: Bearer TOKEN', or with another token, is 401 with WWW-Authenticate, and
# one with it gets the page. (e2e-prometheus scrapes with the token from a real Prometheus.)
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"

# refused WHAT FILE WANT...: the daemon exits 1 before it listens, its message has each WANT
refused() {
	local what=$1 file=$2 rc
	shift 2
	set +e
	"$PMCDAEMON_BIN" --socket "$TMP/refused.sock" --metrics 127.0.0.1:0 --metrics-token-file "$file" 2>"$TMP/err"
	rc=$?
	set -e
	expect_eq "$what: exit" $rc 1
	[ ! -e "$TMP/refused.sock" ] || fail "$what: the refused daemon created its socket"
	for want in "--metrics-token-file $file" "$@"; do
		grep -qF -- "$want" "$TMP/err" || fail "$what: message lacks '$want': $(cat "$TMP/err")"
	done
	pass "$what: refused ($(cat "$TMP/err"))"
}

TOKEN=s3cret-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$TOKEN" >"$TMP/token"

chmod 644 "$TMP/token"
refused "mode 0644" "$TMP/token" "mode 0644" "chmod 600 $TMP/token"
chmod 640 "$TMP/token"
refused "mode 0640" "$TMP/token" "mode 0640" "its group" "chmod 600 $TMP/token"
chmod 602 "$TMP/token"
refused "mode 0602" "$TMP/token" "mode 0602" "chmod 600 $TMP/token"
chmod 600 "$TMP/token"
chown 65534 "$TMP/token"
refused "owned by uid 65534" "$TMP/token" "owned by uid 65534" "chown root $TMP/token"
chown 0 "$TMP/token"
: >"$TMP/empty"
chmod 600 "$TMP/empty"
refused "an empty file" "$TMP/empty" "empty"
printf '\n' >"$TMP/empty"
refused "a lone newline" "$TMP/empty" "empty"
printf 'two words\n' >"$TMP/spaced"
chmod 600 "$TMP/spaced"
refused "a token with a space" "$TMP/spaced" "space or a control character"
mkdir -m 700 "$TMP/dir"
refused "a directory" "$TMP/dir" "not a regular file"
refused "a missing file" "$TMP/missing" "No such file or directory"
set +e
"$PMCDAEMON_BIN" --socket "$TMP/refused.sock" --metrics-token-file "$TMP/token" 2>"$TMP/err"
expect_eq "--metrics-token-file without --metrics exit" $? 2
set -e

T0=$SECONDS
start_daemon --metrics 127.0.0.1:0 --metrics-token-file "$TMP/token"
PORT=$(metrics_port)
URL=http://127.0.0.1:$PORT/metrics
! grep -q "no access control" "$TMP/daemon.log" || fail "warned of an open page although it has a token"
grep -qF -- "$TOKEN" "$TMP/daemon.log" && fail "the daemon logged the token"
run_client "$TMP/a" env PMC_EVENTS=page-faults "$PMC_TEST_CLIENT_BIN" pages 2 4
A=$CLIENT_PID
expect_eq "query count" "$(region_json pages "$A" | jq .count)" 4

# code ARGS...: the status of a GET of the page with curl ARGS (as uid 65534, any local
# user); the body and headers in $U/body and $U/headers
U=$TMP/user
mkdir "$U"
chown 65534:65534 "$U"
code() { as_user curl -s -o "$U/body" -D "$U/headers" -w '%{http_code}' "$@" "$URL"; }

expect_eq "no Authorization" "$(code)" 401
grep -qi '^WWW-Authenticate: Bearer realm="pmcdaemon"' "$U/headers" ||
	fail "401 without WWW-Authenticate: $(cat "$U/headers")"
! grep -q pmc_region "$U/body" || fail "a 401 shows the page"
expect_eq "wrong token" "$(code -H "Authorization: Bearer not-$TOKEN")" 401
grep -qi '^WWW-Authenticate: Bearer realm="pmcdaemon"' "$U/headers" || fail "401 without WWW-Authenticate"
expect_eq "the token less its last byte" "$(code -H "Authorization: Bearer ${TOKEN%?}")" 401
expect_eq "the token and one byte more" "$(code -H "Authorization: Bearer ${TOKEN}x")" 401
expect_eq "an empty token" "$(code -H "Authorization: Bearer ")" 401
expect_eq "the token as Basic" "$(code -u "x:$TOKEN")" 401
expect_eq "the token without a scheme" "$(code -H "Authorization: $TOKEN")" 401
expect_eq "the token in the query" "$(as_user curl -s -o /dev/null -w '%{http_code}' "$URL?token=$TOKEN")" 401
expect_eq "another path, no token" \
	"$(as_user curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/")" 401
expect_eq "HEAD, no token" "$(as_user curl -s -o /dev/null -w '%{http_code}' -I "$URL")" 401

expect_eq "the right token" "$(code -H "Authorization: Bearer $TOKEN")" 200
for fam in pmc_build_info pmc_clients pmc_samples_total pmc_region_count_total pmc_region_event; do
	grep -q "^# TYPE $fam " "$U/body" || fail "the page lacks family $fam: $(head -c 2000 "$U/body")"
done
grep -q "^pmc_region_count_total{comm=\"pmc-test-client\",uid=\"65534\",region=\"pages\"} 4$" "$U/body" ||
	fail "the page lacks the client's region"
pass "the page with the token has every family and the client's region"
expect_eq "scheme in lower case" "$(code -H "authorization: bearer $TOKEN")" 200
expect_eq "another path, the right token" \
	"$(as_user curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PORT/")" 404

# The refusals above (9 or so) came in a burst: logged at most once per 10 s, not once each:
# once, or once more per 10 s a loaded machine stretched them over (a soak under load took 38
# s and logged 2, the second "8 more since the last such line").
n=$(grep -c 'metrics: refused a request from 127.0.0.1' "$TMP/daemon.log" || true)
[ "$n" -ge 1 ] && [ "$n" -le $(((SECONDS - T0) / 10 + 1)) ] ||
	fail "refusal lines in the log: $n in $((SECONDS - T0)) s (once per 10 s at most)"
pass "refusal lines in the log: $n in $((SECONDS - T0)) s"
daemon_alive
