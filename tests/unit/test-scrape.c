/* The metrics page's scrape (daemon/metrics/metrics-scrape.c, metrics-page.c) over a registry this
 * test builds by hand, as test-registry.c does, without HTTP or the loop (metrics_scrape_page()):
 * the series of each (program, uid, region), label values escaped, a forgotten process's
 * figures kept in its program's series, and --metrics-max-series leaving off the regions
 * with the fewest runs, counted in pmc_metrics_series_dropped. */
#include <event2/buffer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics/metrics-internal.h"
#include "pmc-test-registry.h"
#include "pmc-test.h"
#include "session/server.h"

/* The page of @srv with at most @max_series series of regions, NUL-terminated (free() it). */
static char *
page_of(struct server *srv, size_t max_series)
{
	struct metrics m = {.srv = srv, .model = &srv->model, .max_series = max_series};
	struct evbuffer *b = evbuffer_new();
	CHECK(b);
	CHECK(metrics_scrape_page(&m, b) == 0);
	CHECK(m.n_scrapes == 0 && pmc_list_empty(&m.scrapes) && !m.building);
	size_t n = evbuffer_get_length(b);
	char *text = malloc(n + 1);
	CHECK(text);
	CHECK(evbuffer_remove(b, text, n) == (int)n);
	text[n] = '\0';
	evbuffer_free(b);
	return text;
}

/* A server whose registry keeps no ended process (--keep-exited 0) and retires them, as
 * metrics_new() sets it up. */
struct fixture {
	struct stats_budget daemon;
	struct users users;
	struct server srv;
};

static struct server *
fixture_init(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	f->daemon.limit = SIZE_MAX;
	f->users.parent = &f->daemon;
	f->srv.model.reg.users = &f->users;
	CHECK(registry_retire_enable(&f->srv.model.reg, 100) == 0);
	return &f->srv;
}

static void
fixture_free(struct fixture *f)
{
	registry_free(&f->srv.model.reg);
	users_free(&f->users);
}

static void
want_line(const char *page, const char *line)
{
	char *l;
	CHECK(asprintf(&l, "\n%s\n", line) > 0);
	if (!strstr(page, l)) {
		fprintf(stderr, "not on the page: %s\n--- page ---\n%s", line, page);
		CHECK(0);
	}
	free(l);
}

static unsigned
lines_with(const char *page, const char *what)
{
	unsigned n = 0;
	for (const char *l = page; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		const char *end = strchr(l, '\n');
		const char *hit = strstr(l, what);
		if (hit && (!end || hit < end))
			n++;
	}
	return n;
}

#define LABELS(uid, region) "{comm=\"test-scrape\",uid=\"" uid "\",region=\"" region "\""

static void
test_scrape_series(void)
{
	struct fixture f;
	struct server *srv = fixture_init(&f);

	/* One program, two users; a region name with an escape sequence, a quote and a
	 * byte that is not UTF-8. */
	struct process *p = registry_process(&srv->model.reg, getpid(), 1000);
	struct process *q = registry_process(&srv->model.reg, getpid(), 2000);
	CHECK(p && q && p != q && !strcmp(p->comm, "test-scrape"));
	pmc_test_add_runs(&srv->model.reg, p, "parse", 3, 2);
	pmc_test_add_runs(&srv->model.reg, p, "a\x1b\"b\xff", 1, 5);
	pmc_test_add_runs(&srv->model.reg, q, "parse", 2, 8);

	char *page = page_of(srv, 10000);
	want_line(page, "pmc_processes 2");
	want_line(page, "pmc_regions 3");
	want_line(page, "pmc_metrics_series_dropped 0");
	want_line(page, "pmc_region_count_total" LABELS("1000", "parse") "} 3");
	want_line(page, "pmc_region_count_total" LABELS("2000", "parse") "} 2");
	want_line(page, "pmc_region_count_total" LABELS("1000", "a\\\\x1b\\\"b\\\\xff") "} 1");
	/* Bounds 2^k - 1 from the power of two of the smallest value (2: k = 1) up. */
	want_line(page, "pmc_region_event_bucket" LABELS("1000", "parse") ",event=\"page-faults\","
	                                                                  "le=\"1\"} 0");
	want_line(page, "pmc_region_event_bucket" LABELS("1000", "parse") ",event=\"page-faults\","
	                                                                  "le=\"3\"} 3");
	CHECK(!strstr(page, LABELS("1000", "parse") ",event=\"page-faults\",le=\"0\""));
	want_line(page, "pmc_region_event_bucket" LABELS("1000", "parse") ",event=\"page-faults\","
	                                                                  "le=\"+Inf\"} 3");
	want_line(page, "pmc_region_event_sum" LABELS("1000", "parse") ",event=\"page-faults\"} 6");
	want_line(page, "pmc_region_wall_seconds_sum" LABELS("1000", "parse") "} 3e-07");
	want_line(page, "pmc_region_wall_seconds_count" LABELS("1000", "parse") "} 3");
	want_line(page, "pmc_region_event_scaled_samples_total" LABELS(
	                        "1000", "parse") ",event=\"page-faults\"} 0");
	free(page);

	/* The process of uid 1000 is forgotten: its figures go on in the retired aggregate of
	 * its program, the same series with the same values. */
	registry_process_ended(&srv->model.reg, p, 1);
	CHECK(srv->model.reg.n_procs == 1 && srv->model.reg.n_retired >= 1);
	page = page_of(srv, 10000);
	want_line(page, "pmc_processes 1");
	want_line(page, "pmc_region_count_total" LABELS("1000", "parse") "} 3");
	want_line(page, "pmc_region_event_sum" LABELS("1000", "parse") ",event=\"page-faults\"} 6");
	want_line(page, "pmc_region_count_total" LABELS("2000", "parse") "} 2");
	free(page);
	fixture_free(&f);
}

/* A page of fewer series than the regions have keeps those with the most runs. */
static void
test_scrape_max_series(void)
{
	struct fixture f;
	struct server *srv = fixture_init(&f);
	struct process *p = registry_process(&srv->model.reg, getpid(), 1000);
	CHECK(p);
	pmc_test_add_runs(&srv->model.reg, p, "busy", 5, 2);
	pmc_test_add_runs(&srv->model.reg, p, "rare", 1, 2);

	char *all = page_of(srv, 10000);
	unsigned busy = lines_with(all, "region=\"busy\""),
	         rare = lines_with(all, "region=\"rare\"");
	CHECK(busy > 0 && busy == rare);
	free(all);

	/* Room for one region's series: the busy one's. */
	char *page = page_of(srv, busy);
	char want[64];
	snprintf(want, sizeof(want), "pmc_metrics_series_dropped %u", rare);
	want_line(page, want);
	want_line(page, "pmc_region_count_total" LABELS("1000", "busy") "} 5");
	CHECK(lines_with(page, "region=\"busy\"") == busy);
	CHECK(lines_with(page, "region=\"rare\"") == 0);
	free(page);
	fixture_free(&f);
}

int
main(void)
{
	int fds = pmc_test_count_fds();
	PMC_TEST_RUN(test_scrape_series);
	PMC_TEST_RUN(test_scrape_max_series);
	CHECK(pmc_test_count_fds() == fds);
	return 0;
}
