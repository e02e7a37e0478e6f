#!/bin/bash
# The demo from a fresh Debian 12 machine, as root: installs the dependencies,
# builds, starts pmcdaemon on a temporary socket, runs the example application as an
# unprivileged user (uid 65534) and prints the daemon's region table.
# Usage: examples/demo.sh [CALLS [PAGES]]   (default 200 calls of 16 fresh pages)
set -euo pipefail
cd "$(dirname "$0")/.."
.ci/deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null

calls=${1:-200} pages=${2:-16}
tmp=$(mktemp -d /tmp/pmc-demo.XXXXXX)
chmod 755 "$tmp"
sock=$tmp/pmc.sock
build/daemon/pmcdaemon --socket "$sock" 2>"$tmp/daemon.log" &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done

# uid 65534 may not reach the build tree (a checkout under /root): run a copy.
mkdir "$tmp/bin"
cp build/examples/pmc-example "$tmp/bin/"
cp -a build/client/libpmcclient.so* "$tmp/bin/"
chmod -R a+rX "$tmp/bin"

echo "== pmc-example $calls $pages, as uid 65534 (events: page-faults, task-clock, context-switches)"
setpriv --reuid=65534 --regid=65534 --clear-groups -- \
	env LD_LIBRARY_PATH="$tmp/bin" PMC_SOCKET="$sock" \
	PMC_EVENTS=page-faults,task-clock,context-switches \
	"$tmp/bin/pmc-example" "$calls" "$pages"
echo
echo "== pmcctl query (touch-pages writes $pages fresh pages per call)"
build/client/pmcctl --socket "$sock" query
# The table rounds to 3 digits; JSON has the exact figure.
pf=$(build/client/pmcctl --socket "$sock" query --region touch-pages --format json |
	jq '.regions[0].events["page-faults"].sum')
echo
echo "== touch-pages page-faults, exact (pmcctl query --format json): $pf, for $calls calls x $pages fresh pages = $((calls * pages))"
