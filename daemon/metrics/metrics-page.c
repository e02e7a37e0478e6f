/* metrics-page: the text exposition format (version 0.0.4) of the metrics page: label
 * values escaped, numbers, each family's HELP and TYPE, the daemon's own figures, and the
 * series of the entries a scrape kept (WRITE, see metrics-scrape.c), a chunk at a time. */
#include <errno.h>
#include <event2/buffer.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "metrics/metrics-internal.h"
#include "session/server.h"

static void page_printf(struct page *pg, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static void
page_printf(struct page *pg, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (evbuffer_add_vprintf(pg->b, fmt, ap) < 0)
		pg->err = -ENOMEM;
	va_end(ap);
}

static void
page_add(struct page *pg, const void *data, size_t len)
{
	if (len && evbuffer_add(pg->b, data, len) < 0)
		pg->err = -ENOMEM;
}

static void
page_str(struct page *pg, const char *s)
{
	page_add(pg, s, strlen(s));
}

/* A label value: backslash, double quote and newline escaped, as the format asks. Region
 * names and comm come from the clients: every other hidden character becomes a visible
 * escape, "\x1b" for a byte below 0x80, "\u202e" for a code point above, and so does a
 * byte that is not UTF-8 ("\xff"), which Prometheus would refuse. The escape's backslash is
 * itself escaped on the page: Prometheus reads the label as the text \x1b. */
static void
page_label_value(struct page *pg, const char *s)
{
	const char *p = s, *run = s, *end = s + strlen(s);

	while (p < end) {
		char esc[ESCAPE_MAX];
		size_t n = escape_next(p, (size_t)(end - p), esc);
		const char *quoted = NULL;

		if (*p == '\\')
			quoted = "\\\\";
		else if (*p == '"')
			quoted = "\\\"";
		else if (*p == '\n')
			quoted = "\\n";
		if (quoted || *esc) {
			page_add(pg, run, (size_t)(p - run));
			/* The escape's own backslash, escaped as the format asks. */
			page_str(pg, quoted ? quoted : "\\");
			if (!quoted)
				page_str(pg, esc);
			run = p + n;
		}
		p += n;
	}
	page_add(pg, run, (size_t)(p - run));
}

static void
page_double(struct page *pg, double v)
{
	char buf[40];

	if (isnan(v)) {
		page_str(pg, "NaN");
		return;
	}
	if (isinf(v)) {
		page_str(pg, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	snprintf(buf, sizeof(buf), "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, sizeof(buf), "%.17g", v);
	page_str(pg, buf);
}

static void
family_head(struct page *pg, const char *name, const char *type, const char *help)
{
	page_printf(pg, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
daemon_u64(struct page *pg, const char *name, const char *type, const char *help, uint64_t v)
{
	family_head(pg, name, type, help);
	page_printf(pg, "%s %" PRIu64 "\n", name, v);
}

void
metrics_page_render_daemon(struct page *pg, const struct server *srv, const struct model *model)
{
	family_head(pg, "pmc_build_info", "gauge", "Version of this pmcdaemon (always 1).");
	page_str(pg, "pmc_build_info{version=\"");
	page_label_value(pg, PMC_VERSION);
	page_str(pg, "\"} 1\n");
	family_head(pg, "pmc_uptime_seconds", "gauge", "Seconds since pmcdaemon started.");
	page_str(pg, "pmc_uptime_seconds ");
	page_double(pg, (double)(util_now_ns(CLOCK_MONOTONIC) - srv->started_ns) / 1e9);
	page_str(pg, "\n");
	daemon_u64(pg, "pmc_clients", "gauge", "Client connections open now.", srv->n_sessions);
	daemon_u64(pg, "pmc_threads", "gauge", "Threads registered now (their counters are open).",
	           srv->n_threads);
	daemon_u64(pg, "pmc_processes", "gauge",
	           "Processes with aggregates, connected or not (pmcctl reset keeps them).",
	           model->reg.n_procs);
	daemon_u64(pg, "pmc_regions", "gauge", "Regions with aggregates, over every process.",
	           model->reg.n_regions);
	daemon_u64(pg, "pmc_samples_total", "counter", "Region samples received.", model->samples);
	daemon_u64(pg, "pmc_batches_total", "counter", "Sample batches received.", model->batches);
	daemon_u64(pg, "pmc_dropped_samples_total", "counter",
	           "Samples dropped: by clients whose buffer was full (reported), or by the "
	           "daemon over --max-batch-rate, --max-regions or --max-total-regions.",
	           model->dropped);
	daemon_u64(pg, "pmc_evicted_processes_total", "counter",
	           "Exited processes whose figures were forgotten to stay within "
	           "--keep-exited, --keep-exited-per-user or --max-total-regions (on this "
	           "page they count on, in their program's retired figures).",
	           model->reg.evicted);
	daemon_u64(pg, "pmc_retired_regions", "gauge",
	           "Regions of the retired figures, per (uid, program): what forgotten processes "
	           "counted, kept for this page's counters.",
	           model->reg.n_retired);
	daemon_u64(pg, "pmc_retired_dropped_total", "counter",
	           "Regions of forgotten processes whose figures the retired figures could not "
	           "keep (over --metrics-max-series / 4 regions, or a uid's quarter of them; or "
	           "out of memory): their series went down.",
	           model->reg.retired_dropped);
	daemon_u64(pg, "pmc_rejected_connections_total", "counter",
	           "Connections closed for a malformed or out-of-protocol request.",
	           model->rejected);
}

/* The le label of bound @k: 2^k - 1, in seconds (of nanoseconds) when @seconds. Built
 * once: the same text on every scrape and every daemon. */
static const char *
bound_label(bool seconds, unsigned k)
{
	static char text[2][COUNT_TOP + 1][32];
	static bool made;

	if (!made) {
		for (unsigned i = 0; i <= COUNT_TOP; i++) {
			uint64_t v = (UINT64_C(1) << i) - 1;
			double d = (double)v / 1e9;

			snprintf(text[0][i], sizeof(text[0][i]), "%" PRIu64, v);
			snprintf(text[1][i], sizeof(text[1][i]), "%.15g", d);
			if (strtod(text[1][i], NULL) != d)
				snprintf(text[1][i], sizeof(text[1][i]), "%.17g", d);
		}
		made = true;
	}
	return text[seconds][k];
}

/* s->labels = '{comm="..",uid=".."[,container=".."],region=".."[,event=".."]' for the lines
 * of one series. */
static int
make_labels(struct scrape *s, const struct oentry *o, const char *event)
{
	struct page pg = {.b = s->labels};

	evbuffer_drain(s->labels, evbuffer_get_length(s->labels));
	page_str(&pg, "{comm=\"");
	page_label_value(&pg, s->groups[o->group].comm);
	page_printf(&pg, "\",uid=\"%u", (unsigned)s->groups[o->group].uid);
	if (s->m->label_container) {
		page_str(&pg, "\",container=\"");
		page_label_value(&pg, s->groups[o->group].container);
	}
	page_str(&pg, "\",region=\"");
	page_label_value(&pg, o->name);
	if (event) {
		page_str(&pg, "\",event=\"");
		page_label_value(&pg, event);
	}
	page_str(&pg, "\"");
	if (!pg.err && !evbuffer_pullup(s->labels, -1))
		pg.err = -ENOMEM;
	return pg.err;
}

/* NAME SUFFIX {labels [,le="LE"]} */
static void
line_start(struct page *pg, struct scrape *s, const char *name, const char *suffix, const char *le)
{
	size_t n = evbuffer_get_length(s->labels);

	page_str(pg, name);
	page_str(pg, suffix);
	page_add(pg, evbuffer_pullup(s->labels, -1), n);
	if (le) {
		page_str(pg, ",le=\"");
		page_str(pg, le);
		page_str(pg, "\"");
	}
	page_str(pg, "} ");
}

static void
write_hist(struct page *pg, struct scrape *s, const char *name, const struct ohist *h)
{
	bool seconds = h->event == NO_EVENT;

	for (unsigned i = 0; i < h->nb; i++) {
		line_start(pg, s, name, "_bucket", bound_label(seconds, h->k0 + i));
		page_printf(pg, "%" PRIu64 "\n", h->cum[i]);
	}
	/* Every run, those the histogram missed (--max-memory) included: +Inf is _count. */
	line_start(pg, s, name, "_bucket", "+Inf");
	page_printf(pg, "%" PRIu64 "\n", h->count);
	line_start(pg, s, name, "_sum", NULL);
	if (seconds)
		page_double(pg, (double)h->sum / 1e9);
	else
		page_printf(pg, "%" PRIu64, h->sum);
	page_str(pg, "\n");
	line_start(pg, s, name, "_count", NULL);
	page_printf(pg, "%" PRIu64 "\n", h->count);
}

static const struct {
	const char *name, *type, *help;
} families[] = {
        [F_COUNT] = {"pmc_region_count_total", "counter",
                     "Runs of the region in the processes of the program (comm) of one user "
                     "(uid), running, exited or forgotten: the samples received for it."},
        [F_WALL] = {"pmc_region_wall_seconds", "histogram",
                    "Wall-clock time of one run of the region, in seconds; bucket bounds "
                    "(2^k - 1) ns, the same on every pmcdaemon."},
        [F_EVENT] = {"pmc_region_event", "histogram",
                     "Count of the event over one run of the region (label event: its name); "
                     "bucket bounds 2^k - 1, the same on every pmcdaemon."},
        [F_SCALED] = {"pmc_region_event_scaled_samples_total", "counter",
                      "Runs of the region whose count of the event was extrapolated from a "
                      "multiplexed counter."},
};

int
metrics_page_write_some(struct scrape *s, struct page *pg)
{
	while (s->fam < F_END && evbuffer_get_length(pg->b) < METRICS_CHUNK_BYTES && !pg->err &&
	       !metrics_past_deadline(s)) {
		const struct oentry *o = s->idx < s->n_kept ? &s->kept[s->idx] : NULL;
		const char *name = families[s->fam].name;

		if (s->fam == F_DAEMON) {
			metrics_page_render_daemon(pg, s->m->srv, s->m->model);
			family_head(
			        pg, "pmc_metrics_series_dropped", "gauge",
			        "Series of regions left off this page to stay within "
			        "--metrics-max-series: those of the regions with the fewest runs.");
			page_printf(pg, "pmc_metrics_series_dropped %" PRIu64 "\n",
			            s->total_series - s->kept_series);
			s->fam++;
			continue;
		}
		if (!s->headed) {
			family_head(pg, name, families[s->fam].type, families[s->fam].help);
			s->headed = true;
		}
		if (!o) {
			s->fam++;
			s->idx = s->sub = 0;
			s->headed = false;
		} else if (s->fam == F_COUNT || s->fam == F_WALL) {
			if (make_labels(s, o, NULL) < 0)
				return -ENOMEM;
			if (s->fam == F_COUNT) {
				line_start(pg, s, name, "", NULL);
				page_printf(pg, "%" PRIu64 "\n", o->count);
			} else {
				write_hist(pg, s, name, &o->h[0]);
			}
			s->idx++;
		} else if (s->sub + 1 >= o->n_hist) {
			s->idx++;
			s->sub = 0;
		} else {
			const struct ohist *h = &o->h[++s->sub];

			if (make_labels(s, o, s->groups[o->group].events[h->event]) < 0)
				return -ENOMEM;
			if (s->fam == F_EVENT) {
				write_hist(pg, s, name, h);
			} else {
				line_start(pg, s, name, "", NULL);
				page_printf(pg, "%" PRIu64 "\n", h->scaled);
			}
		}
	}
	if (pg->err)
		return pg->err;
	return s->fam == F_END;
}
