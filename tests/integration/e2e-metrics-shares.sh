#!/bin/bash
# --metrics-max-series is shared out per uid: each uid with regions is guaranteed
# max-series / (uids with regions), and what the shares leave goes to the regions with the
# most runs, whoever's. Without shares, the many busier regions of one user pushed every
# series of another off the page (20 regions of one user took all 67 series of another).
# Each region of pmc-test-raw here has 77 series; the cap is 1000:
#   - uid 65533 alone ("greedy": 40 regions of 2 runs): the whole cap is its, 12 regions
#     (924 series);
#   - with uid 65534 ("victim": 3 regions of 1 run, 231 series) beside it: each share is
#     500; the victim's 3 regions stay (231), greedy's share holds 6 (462), and the 307
#     series left take 3 more of greedy's, the busiest: 9 (693). 924 series in all.
. "$(dirname "$0")/../lib/lib.sh"
command -v curl >/dev/null || skip "curl is missing (Debian package curl)"

GREEDY_UID=65533
as_greedy() { setpriv --reuid=$GREEDY_UID --regid=$GREEDY_UID --clear-groups -- "${USER_ENV[@]}" "$@"; }
cp "$PMC_TEST_RAW_BIN" "$TMP/bin/greedy"
cp "$PMC_TEST_RAW_BIN" "$TMP/bin/victim"
chmod a+rx "$TMP/bin/greedy" "$TMP/bin/victim"

start_daemon --metrics 127.0.0.1:0 --metrics-max-series 1000
PORT=$(metrics_port)
page() { curl -sS -f -o "$TMP/metrics" "http://127.0.0.1:$PORT/metrics" || fail "GET /metrics"; }
regions_of() { grep -c "^pmc_region_count_total{comm=\"$1\",uid=\"$2\"," "$TMP/metrics" || true; }
dropped() { sed -n 's/^pmc_metrics_series_dropped //p' "$TMP/metrics"; }

for _ in 1 2; do
	as_greedy "$TMP/bin/greedy" "$SOCK" regions 40 0 >"$TMP/greedy.out" 2>&1 ||
		fail "greedy: $(cat "$TMP/greedy.out")"
done
pmcctl status >/dev/null
page
expect_eq "greedy alone: its regions on the page" "$(regions_of greedy $GREEDY_UID)" 12
expect_eq "greedy alone: series dropped" "$(dropped)" $((40 * 77 - 12 * 77))

run_client "$TMP/victim.out" "$TMP/bin/victim" "$SOCK" regions 3 0
pmcctl status >/dev/null
page
expect_eq "the victim's regions, all on the page" "$(regions_of victim 65534)" 3
expect_eq "greedy's regions beside them" "$(regions_of greedy $GREEDY_UID)" 9
expect_eq "series dropped" "$(dropped)" $((40 * 77 - 9 * 77))
if command -v promtool >/dev/null; then
	promtool check metrics <"$TMP/metrics" >"$TMP/promtool.out" 2>&1 || fail "promtool: $(cat "$TMP/promtool.out")"
	pass "promtool accepts the page"
fi
daemon_alive
