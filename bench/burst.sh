#!/bin/bash
# bench/burst.sh: a new client's Hello and registration round trip (p50, p99, max of 200),
# on an idle daemon and beside a burst of 25 processes of 8 threads, each running 4,000
# empty regions of 4 events as fast as they can (tests/integration/e2e-burst.sh's load), in
# one run. The daemon serves control (Hello, registration, status) before bulk (batches):
# a burst must not push a registration past the library's 2 s time-out.
# Usage: sudo bench/burst.sh BUILD_DIR      (built with -DPMC_BUILD_BENCH=ON)
set -euo pipefail
B=${1:?usage: bench/burst.sh BUILD_DIR}
[ "$(id -u)" = 0 ] || { echo "bench/burst.sh: run as root" >&2; exit 1; }
T=$(mktemp -d /tmp/pmc-burst.XXXXXX)
trap 'kill $D 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
"$B/daemon/pmcdaemon" --socket "$T/s" 2>"$T/d.log" &
D=$!
for _ in $(seq 100); do [ -S "$T/s" ] && break; sleep 0.05; done
lat() { "$B/bench/pmc-bench-ingest" register-lat "$T/s" 200 5000; }
echo "idle:"
lat | sed 's/^/  /'
echo "beside the burst (25 processes x 8 threads x 4,000 regions, started at once, twice):"
burst() {
	for _ in $(seq 25); do
		LD_LIBRARY_PATH="$B/client" PMC_SOCKET="$T/s" \
			PMC_EVENTS=page-faults,task-clock,context-switches,cpu-migrations \
			"$B/tests/pmc-test-burst" burst 8 4000 >/dev/null 2>&1 &
	done
	wait
}
(burst; burst) &
bp=$!
lat | sed 's/^/  /'
wait $bp || true
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
