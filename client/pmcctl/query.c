/* pmcctl query and dump, and the printers of a query's reply (table, CSV, JSON,
 * and why it lists nothing), which top and run use too; tree-print.c prints a call path
 * node's figures with them. The call path trees of query --tree and of dump are
 * tree-print.c's. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/query.h"
#include "pmcctl/tree-print.h"

/* Orders regions by (pid, name). */
int
query_region_key_cmp(const void *a, const void *b)
{
	const Pmc__RegionStats *x = *(const Pmc__RegionStats *const *)a;
	const Pmc__RegionStats *y = *(const Pmc__RegionStats *const *)b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* "--pid 12 --comm 'x*'": the filters of @o, for messages; @names: --region too. */
char *
query_filters_text(const struct opts *o, bool names)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		pmcctl_oom();
	if (o->pid)
		fprintf(f, " --pid %" PRId32, o->pid);
	for (size_t i = 0; i < o->n_comms; i++)
		fprintf(f, " --comm '%s'", o->comms[i]);
	for (size_t i = 0; i < o->n_cgroups; i++)
		fprintf(f, " --cgroup '%s'", o->cgroups[i]);
	for (size_t i = 0; names && i < o->n_regions; i++)
		fprintf(f, " --region '%s'", o->regions[i]);
	if (fclose(f))
		pmcctl_oom();
	char *safe = output_escape_text(text[0] ? text + 1 : text);
	free(text);
	return safe;
}

/* Why @q lists no region: its code for JSON ("no_match", "hidden", "nothing_recorded") and
 * a sentence in *@text (the caller frees it). */
const char *
query_empty_reason(const Pmc__QueryReply *q, const struct opts *o, char **text)
{
	_cleanup_free_ char *all = query_filters_text(o, true);
	_cleanup_free_ char *procs = query_filters_text(o, false);
	const char *code;
	int r;

	if (q->visible) {
		code = "no_match";
		r = asprintf(
		        text,
		        "no region matches %s (%" PRIu32 " region%s recorded that you may see: "
		        "'pmcctl query' lists them)%s",
		        all, q->visible, q->visible == 1 ? "" : "s",
		        q->hidden ? "; other users' processes hold more, hidden from you" : "");
	} else if (q->hidden) {
		code = "hidden";
		r = asprintf(text,
		             "no region that you may see: %" PRIu32 " region%s of other users' "
		             "processes %s hidden%s%s (only root and members of the daemon's "
		             "--admin-group see them)",
		             q->hidden, q->hidden == 1 ? "" : "s", q->hidden == 1 ? "is" : "are",
		             procs[0] ? ", selected by " : "", procs);
	} else {
		code = "nothing_recorded";
		/* Without a pid the daemon counts no other user's regions (their activity is
		 * theirs to see): a user is told what "nothing" covers. */
		const char *mine = q->all_users ? "" : " of yours";
		const char *others =
		        q->all_users ? ""
		                     : "; other users' processes are not listed for you (root and "
		                       "members of the daemon's --admin-group see them; --pid PID "
		                       "counts a process's hidden regions)";
		if (procs[0])
			r = asprintf(text,
			             "no regions recorded for %s: no such process%s has sent "
			             "samples to this daemon since it started or was reset%s",
			             procs, mine, others);
		else if (q->all_users)
			r = asprintf(text,
			             "no regions recorded: no program linked with libpmcclient "
			             "has sent samples to this daemon since it started or was "
			             "reset");
		else
			r = asprintf(text,
			             "no regions recorded that you may see: no process of yours "
			             "has sent samples to this daemon since it started or was "
			             "reset%s",
			             others);
	}
	if (r < 0)
		pmcctl_oom();
	return code;
}

/* ---- query and dump ---- */

static json_t *
stats_json(const Pmc__Stats *s)
{
	json_t *o = output_jobject();

	s = call_stats_or_zero(s);
	output_jset(o, "sum", output_ju64(s->sum));
	output_jset(o, "min", output_ju64(s->min));
	output_jset(o, "max", output_ju64(s->max));
	output_jset(o, "mean", output_jreal(s->mean));
	output_jset(o, "stddev", output_jreal(s->stddev));
	output_jset(o, "p50", output_jreal(s->p50));
	output_jset(o, "p90", output_jreal(s->p90));
	output_jset(o, "p99", output_jreal(s->p99));
	if (s->n_buckets) {
		json_t *b = output_jarray();

		output_jset(o, "buckets", b);
		for (size_t i = 0; i < s->n_buckets; i++) {
			json_t *row = output_jarray();

			output_jappend(row, output_ju64(s->buckets[i]->low));
			output_jappend(row, output_ju64(s->buckets[i]->high));
			output_jappend(row, output_ju64(s->buckets[i]->count));
			output_jappend(b, row);
		}
	}
	return o;
}

/* One region's figures, as "regions" lists them. */
json_t *
query_region_json(const Pmc__RegionStats *r)
{
	json_t *reg = output_jobject();
	json_t *events = output_jobject();
	json_t *wall = stats_json(r->wall_ns);

	/* Wall time is read from the clock, never extrapolated. */
	output_jset(wall, "scaled", json_false());
	if (r->wall_floor) {
		output_jset(wall, "floor", output_ju64(r->wall_floor));
		output_jset(wall, "too_short", json_boolean(r->wall_too_short));
	}
	output_jset(reg, "name", output_jstr(r->name));
	output_jset(reg, "pid", json_integer(r->pid));
	output_jset(reg, "comm", output_jstr(r->comm));
	output_jset(reg, "cgroup", output_jstr(r->cgroup));
	output_jset(reg, "ns_pid", json_integer(r->ns_pid));
	output_jset(reg, "uid", json_integer(r->uid));
	output_jset(reg, "count", output_ju64(r->count));
	/* Kept out of count and every figure: a region's samples that counted the look-up of a
	 * call path new to their thread. */
	if (r->first_path_samples)
		output_jset(reg, "first_path_samples", output_ju64(r->first_path_samples));
	output_jset(reg, "wall_ns", wall);
	output_jset(reg, "events", events);
	for (size_t j = 0; j < r->n_events; j++) {
		const Pmc__EventStats *e = r->events[j];
		json_t *st = stats_json(e->stats);

		output_jset(st, "scaled", json_boolean(e->scaled_count > 0));
		/* What an empty region measures here (its thread's calibration). */
		if (r->wall_floor) {
			output_jset(st, "floor", output_ju64(e->floor));
			output_jset(st, "too_short", json_boolean(e->too_short));
		}
		if (e->scaled_count > 0) {
			output_jset(st, "scaled_samples", output_ju64(e->scaled_count));
			output_jset(st, "running_ratio", output_jreal(e->scaled_ratio));
		}
		output_jset(events, e->name, st);
	}
	/* Ratios of event sums, where both events were counted (ipc, miss ratios). */
	json_t *derived = output_jobject();
	output_jset(reg, "derived", derived);
	for (size_t j = 0; j < r->n_derived; j++)
		output_jset(derived, r->derived[j]->name, output_jreal(r->derived[j]->value));
	return reg;
}

static void
stats_write(struct jw *w, const char *key, const Pmc__Stats *s)
{
	s = call_stats_or_zero(s);
	output_jw_open(w, key);
	output_jw_u64(w, "sum", s->sum);
	output_jw_u64(w, "min", s->min);
	output_jw_u64(w, "max", s->max);
	output_jw_real(w, "mean", s->mean);
	output_jw_real(w, "stddev", s->stddev);
	output_jw_real(w, "p50", s->p50);
	output_jw_real(w, "p90", s->p90);
	output_jw_real(w, "p99", s->p99);
	/* [[low, high, count], ...]: the histogram's non-empty buckets (dump, for diff) */
	if (s->n_buckets) {
		output_jw_key(w, "buckets");
		output_jw_raw(w, "[");
		for (size_t i = 0; i < s->n_buckets; i++) {
			output_jw_raw(w, i ? ", [" : "[");
			output_jw_u64_value(w, s->buckets[i]->low);
			output_jw_raw(w, ", ");
			output_jw_u64_value(w, s->buckets[i]->high);
			output_jw_raw(w, ", ");
			output_jw_u64_value(w, s->buckets[i]->count);
			output_jw_raw(w, "]");
		}
		output_jw_raw(w, "]");
	}
}

/* query_region_json() written as it goes: the same text, without building it first. */
void
query_region_write(struct jw *w, const Pmc__RegionStats *r)
{
	output_jw_open(w, NULL);
	output_jw_str(w, "name", r->name);
	output_jw_int(w, "pid", r->pid);
	output_jw_str(w, "comm", r->comm);
	output_jw_str(w, "cgroup", r->cgroup);
	output_jw_int(w, "ns_pid", r->ns_pid);
	output_jw_int(w, "uid", r->uid);
	output_jw_u64(w, "count", r->count);
	if (r->first_path_samples)
		output_jw_u64(w, "first_path_samples", r->first_path_samples);
	stats_write(w, "wall_ns", r->wall_ns);
	/* Wall time is read from the clock, never extrapolated. */
	output_jw_bool(w, "scaled", false);
	if (r->wall_floor) {
		output_jw_u64(w, "floor", r->wall_floor);
		output_jw_bool(w, "too_short", r->wall_too_short);
	}
	output_jw_close(w);
	output_jw_open(w, "events");
	for (size_t j = 0; j < r->n_events; j++) {
		const Pmc__EventStats *e = r->events[j];

		stats_write(w, e->name, e->stats);
		output_jw_bool(w, "scaled", e->scaled_count > 0);
		if (r->wall_floor) {
			output_jw_u64(w, "floor", e->floor);
			output_jw_bool(w, "too_short", e->too_short);
		}
		if (e->scaled_count > 0) {
			output_jw_u64(w, "scaled_samples", e->scaled_count);
			output_jw_real(w, "running_ratio", e->scaled_ratio);
		}
		output_jw_close(w);
	}
	output_jw_close(w);
	output_jw_open(w, "derived");
	for (size_t j = 0; j < r->n_derived; j++)
		output_jw_real(w, r->derived[j]->name, r->derived[j]->value);
	output_jw_close(w);
	output_jw_close(w);
}

/* The samples not counted, per process listed and reason, appended to @losses. */
static void
losses_json(json_t *losses, const Pmc__QueryReply *q)
{
	for (size_t i = 0; i < q->n_losses; i++) {
		json_t *l = output_jobject();
		output_jset(l, "pid", json_integer(q->losses[i]->pid));
		output_jset(l, "reason", output_jstr(q->losses[i]->reason));
		output_jset(l, "count", output_ju64(q->losses[i]->count));
		output_jappend(losses, l);
	}
}

/* Why nothing is listed, in @root: "empty", "message", "hidden_regions". */
static void
empty_json(json_t *root, const Pmc__QueryReply *q, const char *why_code, const char *why)
{
	output_jset(root, "empty", output_jstr(why_code));
	output_jset(root, "message", output_jstr(why));
	output_jset(root, "hidden_regions", output_ju64(q->hidden));
}

/* {"regions":[...],"losses":[...]}, and when it is empty, why ("empty", "message",
 * "hidden_regions"); @why NULL: the caller says why itself. */
json_t *
query_json(const Pmc__QueryReply *q, const char *why_code, const char *why)
{
	json_t *root = output_jobject();
	json_t *regions = output_jarray();

	output_jset(root, "regions", regions);
	for (size_t i = 0; i < q->n_regions; i++)
		output_jappend(regions, query_region_json(q->regions[i]));
	json_t *losses = output_jarray();
	output_jset(root, "losses", losses);
	losses_json(losses, q);
	if (!q->n_regions && why)
		empty_json(root, q, why_code, why);
	return root;
}

static const char *const query_csv_head[] = {
        "pid",           "comm",  "region",    "count",  "event",  "sum", "min",
        "max",           "mean",  "stddev",    "p50",    "p90",    "p99", "scaled",
        "running_ratio", "floor", "too_short", "cgroup", "ns_pid",
};

/* Where the process of @r runs: its cgroup path and its pid in its own namespace (empty
 * when unknown), the last fields of each row (a reader of the columns before them is
 * unchanged). */
static void
query_csv_origin(const Pmc__RegionStats *r)
{
	output_csv_str(r->cgroup);
	if (r->ns_pid)
		output_csv_i64(r->ns_pid);
	else
		output_csv_str("");
}

/* The fields of a row, its end aside; @e is NULL for the wall-clock row. */
void
query_csv_fields(const Pmc__RegionStats *r, const Pmc__EventStats *e)
{
	const Pmc__Stats *s = call_stats_or_zero(e ? e->stats : r->wall_ns);
	bool scaled = e && e->scaled_count > 0;

	output_csv_i64(r->pid);
	output_csv_str(r->comm);
	output_csv_str(r->name);
	output_csv_u64(r->count);
	output_csv_str(e ? e->name : "wall_ns");
	output_csv_u64(s->sum);
	output_csv_u64(s->min);
	output_csv_u64(s->max);
	output_csv_real(s->mean);
	output_csv_real(s->stddev);
	output_csv_real(s->p50);
	output_csv_real(s->p90);
	output_csv_real(s->p99);
	output_csv_bool(scaled);
	if (scaled)
		output_csv_real(e->scaled_ratio);
	else
		output_csv_str("");
	if (r->wall_floor) {
		output_csv_u64(e ? e->floor : r->wall_floor);
		output_csv_bool(e ? e->too_short : r->wall_too_short);
	} else {
		output_csv_str("");
		output_csv_str("");
	}
	query_csv_origin(r);
}

static void
query_csv_row(const Pmc__RegionStats *r, const Pmc__EventStats *e)
{
	query_csv_fields(r, e);
	output_csv_end();
}

/* The fields of a derived metric's row: "derived:NAME" in the event column, its value in the
 * mean column; its end aside. */
void
query_csv_derived_fields(const Pmc__RegionStats *r, const Pmc__Derived *d)
{
	output_csv_i64(r->pid);
	output_csv_str(r->comm);
	output_csv_str(r->name);
	output_csv_u64(r->count);
	char name[96];
	snprintf(name, sizeof(name), "derived:%s", d->name);
	output_csv_str(name);
	output_csv_str("");
	output_csv_str("");
	output_csv_str("");
	output_csv_real(d->value);
	for (int k = 0; k < 4; k++)
		output_csv_str("");
	output_csv_bool(false);
	output_csv_str("");
	output_csv_str("");
	output_csv_str("");
	query_csv_origin(r);
}

static void
query_csv_derived(const Pmc__RegionStats *r, const Pmc__Derived *d)
{
	query_csv_derived_fields(r, d);
	output_csv_end();
}

/* The rows of @q's regions, the header aside. */
static void
query_csv_rows(const Pmc__QueryReply *q)
{
	for (size_t i = 0; i < q->n_regions; i++) {
		query_csv_row(q->regions[i], NULL);
		for (size_t j = 0; j < q->regions[i]->n_events; j++)
			query_csv_row(q->regions[i], q->regions[i]->events[j]);
		for (size_t j = 0; j < q->regions[i]->n_derived; j++)
			query_csv_derived(q->regions[i], q->regions[i]->derived[j]);
	}
}

void
query_csv(const Pmc__QueryReply *q)
{
	output_csv_header(query_csv_head, ARRAY_SIZE(query_csv_head));
	query_csv_rows(q);
}

bool
query_event_counts_ns(const char *name)
{
	static const char *const clocks[] = {"task-clock", "cpu-clock", "perf::task-clock",
	                                     "perf::cpu-clock"};

	for (size_t i = 0; i < ARRAY_SIZE(clocks); i++) {
		size_t n = strlen(clocks[i]);

		if (!strncasecmp(name, clocks[i], n) && (!name[n] || name[n] == ':'))
			return true;
	}
	return false;
}

/* One cell of a statistic; sets *@rounded when the figure lost digits. */
static void
table_add_value(struct table *t, double v, bool whole, bool ns, bool *rounded)
{
	char buf[64];

	*rounded |= ns ? output_format_time(buf, sizeof(buf), v)
	               : output_format_count(buf, sizeof(buf), v, whole);
	output_table_add(t, "%s", buf);
}

static void
query_table_row(struct table *t, const Pmc__RegionStats *r, const Pmc__EventStats *e, bool *rounded)
{
	const Pmc__Stats *s = call_stats_or_zero(e ? e->stats : r->wall_ns);
	bool ns = !e || query_event_counts_ns(e->name);
	char count[64];

	*rounded |= output_format_count(count, sizeof(count), (double)r->count, true);
	output_table_add(t, "%" PRId32, r->pid);
	output_table_add(t, "%s", r->comm);
	output_table_add_container(t, r);
	output_table_add(t, "%s", r->name);
	output_table_add(t, "%s", count);
	if (e)
		output_table_add(t, "%s%s%s", e->name, e->scaled_count > 0 ? "*" : "",
		                 e->too_short ? "~" : "");
	else
		output_table_add(t, "wall%s", r->wall_too_short ? "~" : "");
	table_add_value(t, (double)s->sum, true, ns, rounded);
	table_add_value(t, s->mean, false, ns, rounded);
	table_add_value(t, (double)s->min, true, ns, rounded);
	table_add_value(t, (double)s->max, true, ns, rounded);
	table_add_value(t, s->p50, false, ns, rounded);
	table_add_value(t, s->p90, false, ns, rounded);
	table_add_value(t, s->p99, false, ns, rounded);
}

static const char *const query_table_head[] = {"PID",   "COMM", "CONTAINER", "REGION", "COUNT",
                                               "EVENT", "SUM",  "MEAN",      "MIN",    "MAX",
                                               "P50",   "P90",  "P99"};
static const bool query_table_right[] = {true, false, false, false, true, false, true,
                                         true, true,  true,  true,  true, true};

/* Adds the rows of @q's regions to @t, and what their notes need to @n. */
static void
query_table_rows(struct table *t, const Pmc__QueryReply *q, struct table_notes *n)
{
	for (size_t i = 0; i < q->n_regions; i++) {
		const Pmc__RegionStats *r = q->regions[i];

		query_table_row(t, r, NULL, &n->rounded);
		n->any_short |= r->wall_too_short;
		for (size_t j = 0; j < r->n_events; j++) {
			query_table_row(t, r, r->events[j], &n->rounded);
			n->any_scaled |= r->events[j]->scaled_count > 0;
			n->any_short |= r->events[j]->too_short;
		}
		/* Derived ratios: the value in the MEAN column. */
		for (size_t j = 0; j < r->n_derived; j++) {
			char count[64];

			n->rounded |=
			        output_format_count(count, sizeof(count), (double)r->count, true);
			output_table_add(t, "%" PRId32, r->pid);
			output_table_add(t, "%s", r->comm);
			output_table_add_container(t, r);
			output_table_add(t, "%s", r->name);
			output_table_add(t, "%s", count);
			output_table_add(t, "(%s)", r->derived[j]->name);
			output_table_add(t, "-");
			output_table_add(t, "%.3f", r->derived[j]->value);
			for (int k = 0; k < 5; k++)
				output_table_add(t, "-");
		}
	}
	/* Under the table, with the losses: each region's samples kept out of its figures. */
	for (size_t i = 0; i < q->n_regions; i++) {
		const Pmc__RegionStats *r = q->regions[i];
		if (!r->first_path_samples)
			continue;
		if (!n->f && !(n->f = open_memstream(&n->losses, &n->losses_len)))
			pmcctl_oom();
		_cleanup_free_ char *safe = output_escape_text(r->name);
		fprintf(n->f,
		        "pid %" PRId32 ": %s: %" PRIu64 " first samples of new paths, kept out of "
		        "its figures (each counted a call path's first look-up on its thread)\n",
		        r->pid, safe, r->first_path_samples);
	}
	if (!q->n_losses)
		return;
	if (!n->f && !(n->f = open_memstream(&n->losses, &n->losses_len)))
		pmcctl_oom();
	for (size_t i = 0; i < q->n_losses; i++)
		fprintf(n->f, "pid %" PRId32 ": %" PRIu64 " samples not counted (%s)\n",
		        q->losses[i]->pid, q->losses[i]->count, q->losses[i]->reason);
}

/* The notes under a table, and forgets them. */
void
query_table_notes(struct table_notes *n)
{
	if (n->rounded)
		puts("figures rounded to 3 significant digits (k, M, G: 10^3, 10^6, 10^9): "
		     "--format json or csv has them exact");
	if (n->any_scaled)
		puts("* scaled: counts were multiplexed and extrapolated (running/enabled < 1)");
	if (n->f) {
		if (fclose(n->f))
			pmcctl_oom();
		fputs(n->losses, stdout);
		free(n->losses);
	}
	if (n->any_short)
		puts("~ too short to trust: the mean is within 10x of what an empty region "
		     "measures in that process (its floor: --format json shows it; nothing is "
		     "subtracted)");
	memset(n, 0, sizeof(*n));
}

/* @why: printed instead of an empty table. */
void
query_table(const Pmc__QueryReply *q, const char *why)
{
	struct table t = {.ncols = ARRAY_SIZE(query_table_head),
	                  .head = query_table_head,
	                  .right = query_table_right};
	struct table_notes n = {0};

	if (!q->n_regions) {
		_cleanup_free_ char *safe = output_escape_text(why);

		puts(safe);
		return;
	}
	query_table_rows(&t, q, &n);
	output_table_print(&t, stdout);
	query_table_notes(&n);
}

/* A query's reply printed as its parts arrive: nothing but the table's notes and the
 * losses is kept from one part to the next. */
struct query_printer {
	const struct opts *o;
	size_t n_regions; /* listed so far */
	struct table t;
	size_t width[ARRAY_SIZE(query_table_head)];
	struct table_notes notes;
	json_t *losses; /* JSON: every part's, printed after the regions */
};

/* Prints @q, a part of the reply; holds nothing of it after. */
static uint64_t
query_print_part(const Pmc__QueryReply *q, void *ctx)
{
	struct query_printer *p = ctx;

	if (p->o->format == FORMAT_JSON) {
		static char buf[1 << 16];
		struct jw w = {.f = stdout, .indent = 4, .buf = buf, .cap = sizeof(buf)};

		flockfile(stdout);
		for (size_t i = 0; i < q->n_regions; i++) {
			output_jw_raw(&w, p->n_regions + i ? ",\n    " : "\n    ");
			query_region_write(&w, q->regions[i]);
		}
		output_jw_flush(&w);
		funlockfile(stdout);
		losses_json(p->losses, q);
	} else if (p->o->format == FORMAT_CSV) {
		query_csv_rows(q);
	} else {
		query_table_rows(&p->t, q, &p->notes);
		if (p->t.n)
			output_table_print_part(&p->t, stdout, p->width, !p->n_regions);
	}
	p->n_regions += q->n_regions;
	return 0;
}

/* Asks for @q's reply in parts and prints each as it arrives, in @o's format; when it lists
 * nothing, a line says why. @tree: then the call path trees (dump), in JSON and tables: a
 * CSV stays one table, as its readers (and scripts counting its rows) take it. */
static void
query_print_stream(int sock, const char *what, Pmc__Query *q, const struct opts *o, bool tree)
{
	struct query_printer p = {.o = o,
	                          .t = {.ncols = ARRAY_SIZE(query_table_head),
	                                .head = query_table_head,
	                                .right = query_table_right}};

	if (o->format == FORMAT_JSON) {
		p.losses = output_jarray();
		fputs("{\n  \"regions\": [", stdout);
	} else if (o->format == FORMAT_CSV) {
		output_csv_header(query_csv_head, ARRAY_SIZE(query_csv_head));
	}
	_cleanup_response_ Pmc__Response *last =
	        call_query_stream(sock, what, q, o, query_print_part, &p);
	const Pmc__QueryReply *end = last->query;
	_cleanup_free_ char *why = NULL;
	const char *code = p.n_regions ? NULL : query_empty_reason(end, o, &why);

	if (o->format == FORMAT_JSON) {
		json_t *tail = output_jobject();

		fputs(p.n_regions ? "\n  ],\n" : "],\n", stdout);
		output_jset(tail, "losses", p.losses);
		output_jset(tail, "format_version", json_integer(PMC_JSON_FORMAT_VERSION));
		if (why)
			empty_json(tail, end, code, why);
		/* The tail's members, its "{" left out: the root's are the regions'. */
		_cleanup_free_ char *text = json_dumps(tail, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		json_decref(tail);
		if (!text)
			pmcctl_fail("cannot write JSON");
		if (!tree) {
			puts(text + 2);
		} else {
			/* Its "\n}" too: the trees are the root's last member. */
			text[strlen(text) - 2] = '\0';
			fputs(text + 2, stdout);
			tree_print_dump(sock, what, o);
			puts("\n}");
		}
	} else if (o->format == FORMAT_CSV) {
		if (why) {
			/* The CSV stays a table for the program reading it; the reason is for
			 * the person running it. */
			_cleanup_free_ char *safe = output_escape_text(why);

			fprintf(stderr, "pmcctl: %s\n", safe);
		}
	} else if (why) {
		_cleanup_free_ char *safe = output_escape_text(why);

		puts(safe);
	} else {
		query_table_notes(&p.notes);
	}
	if (tree && o->format == FORMAT_TABLE)
		tree_print_dump(sock, what, o);
}

int
cmd_query(int sock, const struct command *cmd, const struct opts *o)
{
	Pmc__Query q;

	if (o->tree) {
		tree_print_query(sock, cmd->name, o);
	} else {
		call_query_init(&q, o);
		query_print_stream(sock, cmd->name, &q, o, cmd->tree);
	}
	if (fflush(stdout) || ferror(stdout))
		pmcctl_fail("cannot write the output: %s", strerror(errno));
	return 0;
}
