/* pmcctl hist: one region's distribution (its wall time, or an event's counts per run) as a
 * bar chart drawn from the daemon's histogram, over every process the filters select. */

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/event-name.h"
#include "pmcctl/hist.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/query.h"
#include "pmcctl/tree.h"

/* Columns of the longest bar. */
#define BAR_WIDTH 50
/* More buckets than this are shown a power of two to a row. */
#define FINE_ROWS 24

static int
bucket_cmp(const void *a, const void *b)
{
	const struct bucket *x = a, *y = b;

	return x->low < y->low ? -1 : x->low > y->low;
}

void
hist_push(struct hist *h, uint64_t low, uint64_t high, uint64_t count)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 4;
		struct bucket *v = reallocarray(h->v, cap, sizeof(*v));

		if (!v)
			pmcctl_oom();
		h->v = v;
		h->cap = cap;
	}
	h->v[h->n++] = (struct bucket){low, high, count};
	h->count += count;
}

static void
hist_add(struct hist *h, const Pmc__Stats *s)
{
	for (size_t i = 0; i < s->n_buckets; i++)
		hist_push(h, s->buckets[i]->low, s->buckets[i]->high, s->buckets[i]->count);
}

/* Sorts the buckets and adds up those of the same bounds (every daemon has the same). */
void
hist_merge(struct hist *h)
{
	size_t k = 0;

	qsort(h->v, h->n, sizeof(*h->v), bucket_cmp);
	for (size_t i = 0; i < h->n; i++) {
		if (k && h->v[k - 1].low == h->v[i].low)
			h->v[k - 1].count += h->v[i].count;
		else
			h->v[k++] = h->v[i];
	}
	h->n = k;
}

/* The figures of @r that @event names (event_name_index()): its wall time when @event is
 * NULL, "wall" or "wall_ns" (tree_is_wall()). */
static const Pmc__Stats *
pick(const Pmc__RegionStats *r, const char *event)
{
	ssize_t j;

	if (tree_is_wall(event))
		return r->wall_ns;
	j = event_name_index(r, event);
	return j < 0 ? NULL : r->events[j]->stats;
}

static void
value_text(char *buf, size_t len, uint64_t v, bool ns)
{
	if (ns)
		output_format_time(buf, len, (double)v);
	else
		output_format_count(buf, len, (double)v, true);
}

static void
print_chart(const struct hist *h, bool ns)
{
	/* Rows: each bucket, or each power of two when there are many. */
	struct bucket *rows = calloc(h->n + 1, sizeof(*rows));
	size_t n = 0;
	uint64_t most = 0;

	if (!rows)
		pmcctl_oom();
	for (size_t i = 0; i < h->n; i++) {
		const struct bucket *b = &h->v[i];
		int k = b->low ? 63 - __builtin_clzll(b->low) : -1;

		if (h->n > FINE_ROWS && n && rows[n - 1].high >= b->low) {
			rows[n - 1].count += b->count;
			continue;
		}
		rows[n] = *b;
		if (h->n > FINE_ROWS)
			rows[n].high = k < 0 ? 0 : (k == 63 ? UINT64_MAX : (UINT64_C(2) << k) - 1);
		n++;
	}
	for (size_t i = 0; i < n; i++)
		most = rows[i].count > most ? rows[i].count : most;
	struct table t = {.ncols = 4,
	                  .head = (const char *const[]){"FROM", "TO", "RUNS", "%"},
	                  .right = (const bool[]){true, true, true, true}};
	char **bars = calloc(n + 1, sizeof(*bars));
	if (!bars)
		pmcctl_oom();
	for (size_t i = 0; i < n; i++) {
		char lo[64], hi[64];
		size_t w = most ? (size_t)((rows[i].count * BAR_WIDTH + most - 1) / most) : 0;

		value_text(lo, sizeof(lo), rows[i].low, ns);
		value_text(hi, sizeof(hi), rows[i].high, ns);
		output_table_add(&t, "%s", lo);
		output_table_add(&t, "%s", hi);
		output_table_add(&t, "%" PRIu64, rows[i].count);
		output_table_add(&t, "%.1f", 100.0 * (double)rows[i].count / (double)h->count);
		bars[i] = malloc(w + 1);
		if (!bars[i])
			pmcctl_oom();
		memset(bars[i], '#', w);
		bars[i][w] = '\0';
	}
	/* The table's rows, each with its bar after it. */
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		pmcctl_oom();
	output_table_print(&t, f);
	if (fclose(f))
		pmcctl_oom();
	char *line = text, *end = strchr(line, '\n');

	if (end) {
		fwrite(line, 1, (size_t)(end - line + 1), stdout); /* the header */
		line = end + 1;
	}
	for (size_t i = 0; i < n && (end = strchr(line, '\n')); i++, line = end + 1)
		printf("%.*s  %s\n", (int)(end - line), line, bars[i]);
	for (size_t i = 0; i < n; i++)
		free(bars[i]);
	free(bars);
	free(text);
	free(rows);
}

int
cmd_hist(int sock, const struct command *cmd, const struct opts *o)
{
	Pmc__Query q;
	struct hist h = {0};
	const char *event = o->event;
	bool ns = tree_is_wall(event) || query_event_counts_ns(event);

	if (!o->n_regions)
		pmcctl_usage_error(
		        "'hist' needs --region NAME: the region whose distribution to draw");
	call_query_init(&q, o);
	q.hist = true;
	_cleanup_response_ Pmc__Response *resp = call_query(sock, cmd->name, &q, o);
	const Pmc__QueryReply *qr = resp->query;

	struct event_names counted = {0}, drawn = {0};
	_cleanup_free_ int32_t *pids = calloc(qr->n_regions + 1, sizeof(*pids));
	size_t n_pids = 0;
	uint64_t kept = 0; /* first samples of new paths: runs, not in the histogram */

	if (!pids)
		pmcctl_oom();
	for (size_t i = 0; i < qr->n_regions; i++) {
		const Pmc__RegionStats *r = qr->regions[i];
		const Pmc__Stats *s = pick(r, event);
		size_t k = 0;

		for (size_t j = 0; j < r->n_events; j++)
			event_name_add(&counted, r->events[j]->name);
		if (!s)
			continue;
		hist_add(&h, s);
		h.regions++;
		kept += r->first_path_samples;
		/* What the aggregates are: regions of names, in processes. */
		event_name_add(&drawn, r->name);
		while (k < n_pids && pids[k] != r->pid)
			k++;
		if (k == n_pids)
			pids[n_pids++] = r->pid;
	}
	if (!qr->n_regions) {
		_cleanup_free_ char *why = NULL;

		query_empty_reason(qr, o, &why);
		_cleanup_free_ char *safe = output_escape_text(why);
		pmcctl_fail("%s", safe);
	}
	if (!h.regions)
		event_name_not_counted(event, qr->n_regions, "region", &counted);
	event_name_free(&counted);
	hist_merge(&h);
	if (o->format == FORMAT_JSON) {
		struct jw w = {.f = stdout};

		output_jw_open(&w, NULL);
		output_jw_str(&w, "event", tree_is_wall(event) ? "wall" : event);
		output_jw_str(&w, "unit", ns ? "ns" : "count");
		output_jw_u64(&w, "regions", h.regions);
		output_jw_u64(&w, "region_names", drawn.n);
		output_jw_u64(&w, "processes", n_pids);
		output_jw_u64(&w, "count", h.count);
		if (kept)
			output_jw_u64(&w, "first_path_samples", kept);
		output_jw_key(&w, "buckets");
		output_jw_raw(&w, "[");
		for (size_t i = 0; i < h.n; i++) {
			output_jw_raw(&w, i ? ",\n    " : "\n    ");
			w.indent = 4;
			output_jw_open(&w, NULL);
			output_jw_u64(&w, "low", h.v[i].low);
			output_jw_u64(&w, "high", h.v[i].high);
			output_jw_u64(&w, "count", h.v[i].count);
			output_jw_close(&w);
			w.indent = 2;
		}
		output_jw_raw(&w, h.n ? "\n  ]" : "]");
		output_jw_close(&w);
		output_jw_raw(&w, "\n");
	} else if (o->format == FORMAT_CSV) {
		static const char *const head[] = {"low", "high", "count"};

		output_csv_header(head, 3);
		for (size_t i = 0; i < h.n; i++) {
			output_csv_u64(h.v[i].low);
			output_csv_u64(h.v[i].high);
			output_csv_u64(h.v[i].count);
			output_csv_end();
		}
	} else {
		char names[256] = "";

		for (size_t i = 0; i < o->n_regions; i++)
			snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s'%s'",
			         i ? ", " : "", o->regions[i]);
		_cleanup_free_ char *safe = output_escape_text(names);
		printf("%s of region %s: %" PRIu64 " runs of %zu region%s in %zu process%s (",
		       tree_is_wall(event) ? "wall time" : event, safe, h.count + kept, drawn.n,
		       drawn.n == 1 ? "" : "s", n_pids, n_pids == 1 ? "" : "es");
		if (kept)
			printf("%" PRIu64
			       " of them first samples of new paths, kept out of the chart; ",
			       kept);
		printf("bounds of the daemon's histogram: exact below 16, then 16 to each power of "
		       "two)\n\n");
		print_chart(&h, ns);
	}
	event_name_free(&drawn);
	free(h.v);
	return 0;
}
