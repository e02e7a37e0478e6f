/* pmcctl query, dump and reset, and the printers of a query's reply (table, CSV, JSON,
 * and why it lists nothing), which top and run use too. */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pmcctl.h"

/* Orders regions by (pid, name). */
int
region_key_cmp(const void *a, const void *b)
{
	const Pmc__RegionStats *x = *(const Pmc__RegionStats *const *)a;
	const Pmc__RegionStats *y = *(const Pmc__RegionStats *const *)b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* "--pid 12 --comm 'x*'": the filters of @o, for messages; @names: --region too. */
static char *
filters_text(const struct opts *o, bool names)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		oom();
	if (o->pid)
		fprintf(f, " --pid %" PRId32, o->pid);
	for (size_t i = 0; i < o->n_comms; i++)
		fprintf(f, " --comm '%s'", o->comms[i]);
	for (size_t i = 0; names && i < o->n_regions; i++)
		fprintf(f, " --region '%s'", o->regions[i]);
	if (fclose(f))
		oom();
	char *safe = escape_text(text[0] ? text + 1 : text);
	free(text);
	return safe;
}

/* Why @q lists no region: its code for JSON ("no_match", "hidden", "nothing_recorded") and
 * a sentence in *@text (the caller frees it). */
const char *
empty_reason(const Pmc__QueryReply *q, const struct opts *o, char **text)
{
	_cleanup_free_ char *all = filters_text(o, true);
	_cleanup_free_ char *procs = filters_text(o, false);
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
		if (procs[0])
			r = asprintf(
			        text,
			        "no regions recorded for %s: no such process has sent samples to "
			        "this daemon since it started or was reset",
			        procs);
		else
			r = asprintf(text,
			             "no regions recorded: no program linked with libpmcclient "
			             "has sent samples to this daemon since it started or was "
			             "reset");
	}
	if (r < 0)
		oom();
	return code;
}

/* ---- query and dump ---- */

static json_t *
stats_json(const Pmc__Stats *s)
{
	json_t *o = jobject();

	s = stats_or_zero(s);
	jset(o, "sum", ju64(s->sum));
	jset(o, "min", ju64(s->min));
	jset(o, "max", ju64(s->max));
	jset(o, "mean", jreal(s->mean));
	jset(o, "stddev", jreal(s->stddev));
	jset(o, "p50", jreal(s->p50));
	jset(o, "p90", jreal(s->p90));
	jset(o, "p99", jreal(s->p99));
	return o;
}

/* One region's figures, as "regions" lists them. */
static json_t *
region_json(const Pmc__RegionStats *r)
{
	json_t *reg = jobject();
	json_t *events = jobject();
	json_t *wall = stats_json(r->wall_ns);

	/* Wall time is read from the clock, never extrapolated. */
	jset(wall, "scaled", json_false());
	if (r->wall_floor) {
		jset(wall, "floor", ju64(r->wall_floor));
		jset(wall, "too_short", json_boolean(r->wall_too_short));
	}
	jset(reg, "name", jstr(r->name));
	jset(reg, "pid", json_integer(r->pid));
	jset(reg, "comm", jstr(r->comm));
	jset(reg, "uid", json_integer(r->uid));
	jset(reg, "count", ju64(r->count));
	jset(reg, "wall_ns", wall);
	jset(reg, "events", events);
	for (size_t j = 0; j < r->n_events; j++) {
		const Pmc__EventStats *e = r->events[j];
		json_t *st = stats_json(e->stats);

		jset(st, "scaled", json_boolean(e->scaled_count > 0));
		/* What an empty region measures here (its thread's calibration). */
		if (r->wall_floor) {
			jset(st, "floor", ju64(e->floor));
			jset(st, "too_short", json_boolean(e->too_short));
		}
		if (e->scaled_count > 0) {
			jset(st, "scaled_samples", ju64(e->scaled_count));
			jset(st, "running_ratio", jreal(e->scaled_ratio));
		}
		jset(events, e->name, st);
	}
	/* Ratios of event sums, where both events were counted (ipc, miss ratios). */
	json_t *derived = jobject();
	jset(reg, "derived", derived);
	for (size_t j = 0; j < r->n_derived; j++)
		jset(derived, r->derived[j]->name, jreal(r->derived[j]->value));
	return reg;
}

static void
stats_write(struct jw *w, const char *key, const Pmc__Stats *s)
{
	s = stats_or_zero(s);
	jw_open(w, key);
	jw_u64(w, "sum", s->sum);
	jw_u64(w, "min", s->min);
	jw_u64(w, "max", s->max);
	jw_real(w, "mean", s->mean);
	jw_real(w, "stddev", s->stddev);
	jw_real(w, "p50", s->p50);
	jw_real(w, "p90", s->p90);
	jw_real(w, "p99", s->p99);
}

/* region_json() written as it goes: the same text, without building it first. */
static void
region_write(struct jw *w, const Pmc__RegionStats *r)
{
	jw_open(w, NULL);
	jw_str(w, "name", r->name);
	jw_int(w, "pid", r->pid);
	jw_str(w, "comm", r->comm);
	jw_int(w, "uid", r->uid);
	jw_u64(w, "count", r->count);
	stats_write(w, "wall_ns", r->wall_ns);
	/* Wall time is read from the clock, never extrapolated. */
	jw_bool(w, "scaled", false);
	if (r->wall_floor) {
		jw_u64(w, "floor", r->wall_floor);
		jw_bool(w, "too_short", r->wall_too_short);
	}
	jw_close(w);
	jw_open(w, "events");
	for (size_t j = 0; j < r->n_events; j++) {
		const Pmc__EventStats *e = r->events[j];

		stats_write(w, e->name, e->stats);
		jw_bool(w, "scaled", e->scaled_count > 0);
		if (r->wall_floor) {
			jw_u64(w, "floor", e->floor);
			jw_bool(w, "too_short", e->too_short);
		}
		if (e->scaled_count > 0) {
			jw_u64(w, "scaled_samples", e->scaled_count);
			jw_real(w, "running_ratio", e->scaled_ratio);
		}
		jw_close(w);
	}
	jw_close(w);
	jw_open(w, "derived");
	for (size_t j = 0; j < r->n_derived; j++)
		jw_real(w, r->derived[j]->name, r->derived[j]->value);
	jw_close(w);
	jw_close(w);
}

/* The samples not counted, per process listed and reason, appended to @losses. */
static void
losses_json(json_t *losses, const Pmc__QueryReply *q)
{
	for (size_t i = 0; i < q->n_losses; i++) {
		json_t *l = jobject();
		jset(l, "pid", json_integer(q->losses[i]->pid));
		jset(l, "reason", jstr(q->losses[i]->reason));
		jset(l, "count", ju64(q->losses[i]->count));
		jappend(losses, l);
	}
}

/* Why nothing is listed, in @root: "empty", "message", "hidden_regions". */
static void
empty_json(json_t *root, const Pmc__QueryReply *q, const char *why_code, const char *why)
{
	jset(root, "empty", jstr(why_code));
	jset(root, "message", jstr(why));
	jset(root, "hidden_regions", ju64(q->hidden));
}

/* {"regions":[...],"losses":[...]}, and when it is empty, why ("empty", "message",
 * "hidden_regions"); @why NULL: the caller says why itself. */
json_t *
query_json(const Pmc__QueryReply *q, const char *why_code, const char *why)
{
	json_t *root = jobject();
	json_t *regions = jarray();

	jset(root, "regions", regions);
	for (size_t i = 0; i < q->n_regions; i++)
		jappend(regions, region_json(q->regions[i]));
	json_t *losses = jarray();
	jset(root, "losses", losses);
	losses_json(losses, q);
	if (!q->n_regions && why)
		empty_json(root, q, why_code, why);
	return root;
}

static const char *const query_csv_head[] = {
        "pid", "comm",   "region",        "count",  "event",     "sum",
        "min", "max",    "mean",          "stddev", "p50",       "p90",
        "p99", "scaled", "running_ratio", "floor",  "too_short",
};

/* The fields of a row, its end aside; @e is NULL for the wall-clock row. */
static void
query_csv_fields(const Pmc__RegionStats *r, const Pmc__EventStats *e)
{
	const Pmc__Stats *s = stats_or_zero(e ? e->stats : r->wall_ns);
	bool scaled = e && e->scaled_count > 0;

	csv_i64(r->pid);
	csv_str(r->comm);
	csv_str(r->name);
	csv_u64(r->count);
	csv_str(e ? e->name : "wall_ns");
	csv_u64(s->sum);
	csv_u64(s->min);
	csv_u64(s->max);
	csv_real(s->mean);
	csv_real(s->stddev);
	csv_real(s->p50);
	csv_real(s->p90);
	csv_real(s->p99);
	csv_bool(scaled);
	if (scaled)
		csv_real(e->scaled_ratio);
	else
		csv_str("");
	if (r->wall_floor) {
		csv_u64(e ? e->floor : r->wall_floor);
		csv_bool(e ? e->too_short : r->wall_too_short);
	} else {
		csv_str("");
		csv_str("");
	}
}

static void
query_csv_row(const Pmc__RegionStats *r, const Pmc__EventStats *e)
{
	query_csv_fields(r, e);
	csv_end();
}

/* The fields of a derived metric's row: "derived:NAME" in the event column, its value in the
 * mean column; its end aside. */
static void
query_csv_derived_fields(const Pmc__RegionStats *r, const Pmc__Derived *d)
{
	csv_i64(r->pid);
	csv_str(r->comm);
	csv_str(r->name);
	csv_u64(r->count);
	char name[96];
	snprintf(name, sizeof(name), "derived:%s", d->name);
	csv_str(name);
	csv_str("");
	csv_str("");
	csv_str("");
	csv_real(d->value);
	for (int k = 0; k < 4; k++)
		csv_str("");
	csv_bool(false);
	csv_str("");
	csv_str("");
	csv_str("");
}

static void
query_csv_derived(const Pmc__RegionStats *r, const Pmc__Derived *d)
{
	query_csv_derived_fields(r, d);
	csv_end();
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
	csv_header(query_csv_head, ARRAY_SIZE(query_csv_head));
	query_csv_rows(q);
}

bool
event_counts_ns(const char *name)
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

	*rounded |=
	        ns ? format_time(buf, sizeof(buf), v) : format_count(buf, sizeof(buf), v, whole);
	table_add(t, "%s", buf);
}

static void
query_table_row(struct table *t, const Pmc__RegionStats *r, const Pmc__EventStats *e, bool *rounded)
{
	const Pmc__Stats *s = stats_or_zero(e ? e->stats : r->wall_ns);
	bool ns = !e || event_counts_ns(e->name);
	char count[64];

	*rounded |= format_count(count, sizeof(count), (double)r->count, true);
	table_add(t, "%" PRId32, r->pid);
	table_add(t, "%s", r->comm);
	table_add(t, "%s", r->name);
	table_add(t, "%s", count);
	if (e)
		table_add(t, "%s%s%s", e->name, e->scaled_count > 0 ? "*" : "",
		          e->too_short ? "~" : "");
	else
		table_add(t, "wall%s", r->wall_too_short ? "~" : "");
	table_add_value(t, (double)s->sum, true, ns, rounded);
	table_add_value(t, s->mean, false, ns, rounded);
	table_add_value(t, (double)s->min, true, ns, rounded);
	table_add_value(t, (double)s->max, true, ns, rounded);
	table_add_value(t, s->p50, false, ns, rounded);
	table_add_value(t, s->p90, false, ns, rounded);
	table_add_value(t, s->p99, false, ns, rounded);
}

static const char *const query_table_head[] = {"PID",  "COMM", "REGION", "COUNT", "EVENT", "SUM",
                                               "MEAN", "MIN",  "MAX",    "P50",   "P90",   "P99"};
static const bool query_table_right[] = {true, false, false, true, false, true,
                                         true, true,  true,  true, true,  true};

/* What the notes under a query's table say: which marks its rows used, and its losses. */
struct table_notes {
	bool any_scaled, rounded, any_short;
	char *losses; /* lines, one per process and reason */
	size_t losses_len;
	FILE *f;
};

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

			n->rounded |= format_count(count, sizeof(count), (double)r->count, true);
			table_add(t, "%" PRId32, r->pid);
			table_add(t, "%s", r->comm);
			table_add(t, "%s", r->name);
			table_add(t, "%s", count);
			table_add(t, "(%s)", r->derived[j]->name);
			table_add(t, "-");
			table_add(t, "%.3f", r->derived[j]->value);
			for (int k = 0; k < 5; k++)
				table_add(t, "-");
		}
	}
	if (!q->n_losses)
		return;
	if (!n->f && !(n->f = open_memstream(&n->losses, &n->losses_len)))
		oom();
	for (size_t i = 0; i < q->n_losses; i++)
		fprintf(n->f, "pid %" PRId32 ": %" PRIu64 " samples not counted (%s)\n",
		        q->losses[i]->pid, q->losses[i]->count, q->losses[i]->reason);
}

/* The notes under a table, and forgets them. */
static void
query_table_notes(struct table_notes *n)
{
	if (n->rounded)
		puts("figures rounded to 3 significant digits (k, M, G: 10^3, 10^6, 10^9): "
		     "--format json or csv has them exact");
	if (n->any_scaled)
		puts("* scaled: counts were multiplexed and extrapolated (running/enabled < 1)");
	if (n->f) {
		if (fclose(n->f))
			oom();
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
		_cleanup_free_ char *safe = escape_text(why);

		puts(safe);
		return;
	}
	query_table_rows(&t, q, &n);
	table_print(&t, stdout);
	query_table_notes(&n);
}

/* ---- call path trees: query --tree, dump, flamegraph ---- */

/* A reason of QueryReply.untracked in words, or NULL for one this pmcctl does not know. */
static const char *
untracked_text(const char *reason)
{
	if (!strcmp(reason, "path-depth"))
		return "begun deeper than 32 regions: counted in the self figures of the node "
		       "above them";
	if (!strcmp(reason, "path-limit"))
		return "past the daemon's or the library's limit on call paths";
	if (!strcmp(reason, "older-client"))
		return "sent by a libpmcclient that sends no call paths";
	return NULL;
}

/* Samples of a process in no node, by reason (QueryReply.untracked), kept until its tree is
 * printed. */
struct untracked {
	int32_t pid;
	char *reason;
	uint64_t count;
};

/* A tree reply printed (or folded) process by process as its parts arrive. The nodes of the
 * process not finished yet are kept, copied since each part is freed after its callback,
 * until a node of another process or the end of the reply; a process's untracked samples
 * come in the part that lists its last node, as its losses do. */
struct tree_printer {
	const struct opts *o;
	bool dump;                  /* after dump's regions (JSON: the member "tree") */
	bool fold;                  /* flamegraph: folded stacks, printed at the end */
	bool old_daemon;            /* a node without an id: the daemon knows no Query.tree */
	Pmc__RegionStats **pending; /* the nodes of the process not finished yet */
	bool *owned;                /* each: a copy, to free */
	size_t n_pending, cap_pending;
	struct untracked *untracked;
	size_t n_untracked, cap_untracked;
	size_t n_nodes, n_selected; /* listed, and in the subtrees --region selects */
	size_t n_procs;             /* printed */
	bool csv_head;              /* CSV: the header printed */
	struct table_notes notes;
	bool any_negative;
	struct folded folded;
	size_t n_counted; /* flamegraph: selected nodes that counted --event */
	char **events;    /* flamegraph: the events of the selected nodes, for messages */
	size_t n_events;
};

static const char *const tree_csv_head[] = {
        "pid",           "comm",  "region",    "count", "event", "sum", "min",
        "max",           "mean",  "stddev",    "p50",   "p90",   "p99", "scaled",
        "running_ratio", "floor", "too_short", "path",  "self",
};

/* What a part of a reply lives on in: a deep copy of @r, which the caller frees. */
static Pmc__RegionStats *
region_copy(const Pmc__RegionStats *r)
{
	size_t n = pmc__region_stats__get_packed_size(r);
	_cleanup_free_ uint8_t *buf = malloc(n ? n : 1);
	Pmc__RegionStats *copy;

	if (!buf)
		oom();
	pmc__region_stats__pack(r, buf);
	copy = pmc__region_stats__unpack(NULL, n, buf);
	if (!copy)
		oom();
	return copy;
}

/* Forgets the pending nodes, freeing the copies. */
static void
pending_clear(struct tree_printer *p)
{
	for (size_t i = 0; i < p->n_pending; i++)
		if (p->owned[i])
			pmc__region_stats__free_unpacked(p->pending[i], NULL);
	p->n_pending = 0;
}

static void
pending_add(struct tree_printer *p, Pmc__RegionStats *r)
{
	if (p->n_pending == p->cap_pending) {
		size_t cap = p->cap_pending ? 2 * p->cap_pending : 64;
		Pmc__RegionStats **v = reallocarray(p->pending, cap, sizeof(*v));
		bool *owned = v ? reallocarray(p->owned, cap, sizeof(*owned)) : NULL;

		if (v)
			p->pending = v;
		if (!owned)
			oom();
		p->owned = owned;
		p->cap_pending = cap;
	}
	p->owned[p->n_pending] = false;
	p->pending[p->n_pending++] = r;
}

static void
untracked_add(struct tree_printer *p, const Pmc__ProcessLoss *l)
{
	if (p->n_untracked == p->cap_untracked) {
		size_t cap = p->cap_untracked ? 2 * p->cap_untracked : 16;
		struct untracked *v = reallocarray(p->untracked, cap, sizeof(*v));

		if (!v)
			oom();
		p->untracked = v;
		p->cap_untracked = cap;
	}
	struct untracked *u = &p->untracked[p->n_untracked++];
	u->pid = l->pid;
	u->count = l->count;
	if (!(u->reason = strdup(l->reason)))
		oom();
}

/* Forgets the untracked samples of @pid, once its tree is printed. */
static void
untracked_forget(struct tree_printer *p, int32_t pid)
{
	size_t k = 0;

	for (size_t i = 0; i < p->n_untracked; i++) {
		if (p->untracked[i].pid == pid)
			free(p->untracked[i].reason);
		else
			p->untracked[k++] = p->untracked[i];
	}
	p->n_untracked = k;
}

static void
tree_printer_free(struct tree_printer *p)
{
	pending_clear(p);
	free(p->pending);
	free(p->owned);
	for (size_t i = 0; i < p->n_untracked; i++)
		free(p->untracked[i].reason);
	free(p->untracked);
	folded_free(&p->folded);
	for (size_t i = 0; i < p->n_events; i++)
		free(p->events[i]);
	free(p->events);
}

/* ---- a tree as a table ---- */

/* The event columns of @t's table, the caller's to free: every event name of its selected
 * nodes, first seen first. */
static const char **
tree_event_columns(const struct tree *t, size_t *n)
{
	const char **names = NULL;

	*n = 0;
	for (size_t i = 0; i < t->n; i++) {
		const Pmc__RegionStats *r = t->node[i].r;

		for (size_t j = 0; t->node[i].selected && j < r->n_events; j++) {
			size_t k = 0;

			while (k < *n && strcmp(names[k], r->events[j]->name))
				k++;
			if (k < *n)
				continue;
			const char **grown = reallocarray(names, *n + 1, sizeof(*names));
			if (!grown)
				oom();
			names = grown;
			names[(*n)++] = r->events[j]->name;
		}
	}
	return names;
}

/* A whole figure as a table shows it, in @buf: a time when @ns; sets *@rounded when it
 * lost digits. */
static void
figure_text(char *buf, size_t len, double v, bool ns, bool *rounded)
{
	*rounded |= ns ? format_time(buf, len, v) : format_count(buf, len, v, true);
}

/* A signed figure (a self sum), with @mark after it; sets *@rounded when it lost digits. */
static void
table_add_signed(struct table *t, int64_t v, bool ns, const char *mark, bool *rounded)
{
	char buf[64];

	figure_text(buf, sizeof(buf), v < 0 ? -(double)v : (double)v, ns, rounded);
	table_add(t, "%s%s%s", v < 0 ? "-" : "", buf, mark);
}

/* Whether @nd's self figure of event @name was extrapolated: its own, or a child's. */
static bool
self_scaled(const struct tree_node *nd, const char *name)
{
	for (const struct tree_node *c = nd->child; c; c = c->next) {
		ssize_t k = tree_event_named(c->r, name);

		if (k >= 0 && c->r->events[k]->scaled_count > 0)
			return true;
	}
	ssize_t k = tree_event_named(nd->r, name);
	return k >= 0 && nd->r->events[k]->scaled_count > 0;
}

/* The cells of event @name in @nd's row: its inclusive sum (marked '*' when extrapolated,
 * '~' when too short) and its self sum ('*' when its own or a child's was extrapolated);
 * "-" where @nd did not count it. */
static void
tree_table_event(struct tree_printer *p, struct table *t, const struct tree_node *nd,
                 const char *name)
{
	ssize_t j = tree_event_named(nd->r, name);
	bool ns = event_counts_ns(name);
	char sum[64];

	if (j < 0) {
		table_add(t, "-");
		table_add(t, "-");
		return;
	}
	const Pmc__EventStats *e = nd->r->events[j];
	bool scaled = self_scaled(nd, name);

	figure_text(sum, sizeof(sum), (double)stats_or_zero(e->stats)->sum, ns, &p->notes.rounded);
	table_add(t, "%s%s%s", sum, e->scaled_count > 0 ? "*" : "", e->too_short ? "~" : "");
	table_add_signed(t, nd->self[j], ns, scaled ? "*" : "", &p->notes.rounded);
	p->notes.any_scaled |= scaled;
	p->notes.any_short |= e->too_short;
	p->any_negative |= nd->self[j] < 0;
}

/* The row of @nd, @top the top of its subtree shown: its name indented by its depth below
 * @top, or @top's whole path where it has ancestors (--region); then its count, and the
 * inclusive and self sums of the wall time and of each event of @ev. */
static void
tree_table_row(struct tree_printer *p, struct table *t, const struct tree_node *nd,
               const struct tree_node *top, const char *const *ev, size_t n_ev)
{
	const Pmc__RegionStats *r = nd->r;
	char count[64];

	if (nd == top && nd->parent) {
		_cleanup_free_ char *path = tree_path(nd);
		table_add(t, "%s", path);
	} else {
		table_add(t, "%*s%s", (int)(2 * (nd->depth - top->depth)), "", r->name);
	}
	figure_text(count, sizeof(count), (double)r->count, false, &p->notes.rounded);
	table_add(t, "%s", count);
	figure_text(count, sizeof(count), (double)stats_or_zero(r->wall_ns)->sum, true,
	            &p->notes.rounded);
	table_add(t, "%s%s", count, r->wall_too_short ? "~" : "");
	table_add_signed(t, nd->self_wall, true, "", &p->notes.rounded);
	p->notes.any_short |= r->wall_too_short;
	p->any_negative |= nd->self_wall < 0;
	for (size_t c = 0; c < n_ev; c++)
		tree_table_event(p, t, nd, ev[c]);
}

/* Each reason of @pid's untracked samples, a line. */
static void
untracked_lines(const struct tree_printer *p, int32_t pid)
{
	for (size_t i = 0; i < p->n_untracked; i++) {
		const struct untracked *u = &p->untracked[i];
		_cleanup_free_ char *reason = escape_text(u->reason);
		const char *why = untracked_text(u->reason);

		if (u->pid != pid)
			continue;
		printf("%" PRIu64 " sample%s of this process %s in no path: %s%s%s%s\n", u->count,
		       u->count == 1 ? "" : "s", u->count == 1 ? "is" : "are", reason,
		       why ? " (" : "", why ? why : "", why ? ")" : "");
	}
}

/* The header of a tree's table with event columns @ev: each its name (escaped: the caller
 * frees those, head[4], head[6]...) and "SELF". */
static const char **
tree_table_head(const char *const *ev, size_t n_ev)
{
	const char **head = calloc(4 + 2 * n_ev, sizeof(*head));

	if (!head)
		oom();
	head[0] = "REGION";
	head[1] = "COUNT";
	head[2] = "WALL";
	head[3] = "SELF";
	for (size_t c = 0; c < n_ev; c++) {
		/* Event names come from the programs: the header reaches the terminal too. */
		head[4 + 2 * c] = escape_text(ev[c]);
		head[5 + 2 * c] = "SELF";
	}
	return head;
}

/* @t as a table, under a line naming its process, its untracked samples after it. */
static void
tree_table(struct tree_printer *p, const struct tree *t)
{
	size_t n_ev;
	_cleanup_free_ const char **ev = tree_event_columns(t, &n_ev);
	_cleanup_free_ const char **head = tree_table_head(ev, n_ev);
	_cleanup_free_ bool *right = calloc(4 + 2 * n_ev, sizeof(*right));
	_cleanup_free_ char *comm = escape_text(t->comm);
	struct table tab = {.ncols = 4 + 2 * n_ev, .head = head, .right = right};

	if (!right)
		oom();
	for (size_t c = 1; c < tab.ncols; c++)
		right[c] = true;
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *top = &t->node[i];

		if (!tree_is_top(top))
			continue;
		for (const struct tree_node *nd = top; nd; nd = tree_next(nd, top))
			tree_table_row(p, &tab, nd, top, ev, n_ev);
	}
	printf("%spid %" PRId32 " (%s), uid %" PRIu32 "\n", p->n_procs || p->dump ? "\n" : "",
	       t->pid, comm, t->uid);
	table_print(&tab, stdout);
	for (size_t c = 0; c < n_ev; c++)
		free((char *)head[4 + 2 * c]);
	untracked_lines(p, t->pid);
}

/* The notes under the tables of a tree reply, once. */
static void
tree_table_notes(struct tree_printer *p)
{
	if (!p->n_selected)
		return; /* processes without nodes only */
	puts("\nSELF: the node's own share, its sum less the sums of its children");
	if (p->any_negative)
		puts("a negative SELF: its children measured more than it did (it is still open, "
		     "or samples of it were lost)");
	query_table_notes(&p->notes);
}

/* ---- a tree as JSON and CSV ---- */

/* The object query prints for @nd's region, with its "path", "self" and "children" (empty). */
static json_t *
tree_node_json(const struct tree_node *nd)
{
	json_t *o = region_json(nd->r);
	json_t *self = jobject();
	_cleanup_free_ char *path = tree_path(nd);

	jset(o, "path", jstr(path));
	jset(self, "wall_ns", json_integer(nd->self_wall));
	for (size_t j = 0; j < nd->r->n_events; j++)
		jset(self, nd->r->events[j]->name, json_integer(nd->self[j]));
	jset(o, "self", self);
	jset(o, "children", jarray());
	return o;
}

/* {"pid","comm","uid","untracked":{reason:count},"tree":[node...]} of @t. */
static json_t *
tree_json(const struct tree_printer *p, const struct tree *t)
{
	json_t *proc = jobject();
	json_t *untracked = jobject();
	json_t *tops = jarray();
	_cleanup_free_ json_t **obj = calloc(t->n + 1, sizeof(*obj));

	if (!obj)
		oom();
	jset(proc, "pid", json_integer(t->pid));
	jset(proc, "comm", jstr(t->comm));
	jset(proc, "uid", json_integer(t->uid));
	for (size_t i = 0; i < p->n_untracked; i++)
		if (p->untracked[i].pid == t->pid)
			jset(untracked, p->untracked[i].reason, ju64(p->untracked[i].count));
	jset(proc, "untracked", untracked);
	jset(proc, "tree", tops);
	/* Parents come first: each node goes into its parent's "children", made before it. */
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *nd = &t->node[i];

		if (!nd->selected)
			continue;
		obj[i] = tree_node_json(nd);
		jappend(tree_is_top(nd) ? tops
		                        : json_object_get(obj[nd->parent - t->node], "children"),
		        obj[i]);
	}
	return proc;
}

/* Where the JSON of a tree reply begins: an array, or dump's member "tree". */
static const char *
tree_json_open(const struct tree_printer *p)
{
	return p->dump ? ",\n  \"tree\": [" : "[";
}

/* The rows of @nd: query's, each with the path and the self sum of its figure after them. */
static void
tree_csv_node(const struct tree_node *nd)
{
	const Pmc__RegionStats *r = nd->r;
	_cleanup_free_ char *path = tree_path(nd);

	query_csv_fields(r, NULL);
	csv_str(path);
	csv_i64(nd->self_wall);
	csv_end();
	for (size_t j = 0; j < r->n_events; j++) {
		query_csv_fields(r, r->events[j]);
		csv_str(path);
		csv_i64(nd->self[j]);
		csv_end();
	}
	for (size_t j = 0; j < r->n_derived; j++) {
		query_csv_derived_fields(r, r->derived[j]);
		csv_str(path);
		csv_str("");
		csv_end();
	}
}

/* The header of a tree reply's CSV, once. */
static void
tree_csv_head_print(struct tree_printer *p)
{
	if (!p->csv_head)
		csv_header(tree_csv_head, ARRAY_SIZE(tree_csv_head));
	p->csv_head = true;
}

static void
tree_csv(struct tree_printer *p, const struct tree *t)
{
	tree_csv_head_print(p);
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *top = &t->node[i];

		if (!tree_is_top(top))
			continue;
		for (const struct tree_node *nd = top; nd; nd = tree_next(nd, top))
			tree_csv_node(nd);
	}
}

/* ---- a tree folded, and the reply's flow ---- */

/* Adds @t's folded stacks to @p, and the names of the events its selected nodes counted. */
static void
tree_fold_events(struct tree_printer *p, const struct tree *t)
{
	p->n_counted += tree_fold(t, p->o->event, &p->folded);
	for (size_t i = 0; i < t->n; i++) {
		const Pmc__RegionStats *r = t->node[i].r;

		for (size_t j = 0; t->node[i].selected && j < r->n_events; j++) {
			size_t k = 0;

			while (k < p->n_events && strcmp(p->events[k], r->events[j]->name))
				k++;
			if (k < p->n_events)
				continue;
			char **grown = reallocarray(p->events, p->n_events + 1, sizeof(*grown));
			if (!grown)
				oom();
			p->events = grown;
			if (!(p->events[p->n_events++] = strdup(r->events[j]->name)))
				oom();
		}
	}
}

/* Prints (or folds) @t, which has selected nodes, in @p's format. */
static void
tree_emit(struct tree_printer *p, const struct tree *t)
{
	if (t->n_orphans)
		fprintf(stderr,
		        "pmcctl: pid %" PRId32 ": %zu call path node%s named a parent not listed "
		        "before them: shown as roots\n",
		        t->pid, t->n_orphans, t->n_orphans == 1 ? "" : "s");
	if (p->fold) {
		tree_fold_events(p, t);
	} else if (p->o->format == FORMAT_JSON) {
		if (p->n_procs)
			fputs(",\n", stdout);
		else
			printf("%s\n", tree_json_open(p));
		json_print_indented(tree_json(p, t), p->dump ? 4 : 2);
	} else if (p->o->format == FORMAT_CSV) {
		tree_csv(p, t);
	} else {
		tree_table(p, t);
	}
	p->n_procs++;
}

/* A process with untracked samples but no node (an older client's): its pid and those lines
 * in a table, {"pid","untracked","tree":[]} in JSON (its comm and uid are not known);
 * nothing in CSV and folded stacks, nor with --region. */
static void
tree_emit_bare(struct tree_printer *p, int32_t pid)
{
	if (p->fold || p->o->n_regions || p->o->format == FORMAT_CSV)
		return;
	if (p->o->format == FORMAT_JSON) {
		json_t *proc = jobject();
		json_t *untracked = jobject();

		jset(proc, "pid", json_integer(pid));
		for (size_t i = 0; i < p->n_untracked; i++)
			if (p->untracked[i].pid == pid)
				jset(untracked, p->untracked[i].reason,
				     ju64(p->untracked[i].count));
		jset(proc, "untracked", untracked);
		jset(proc, "tree", jarray());
		if (p->n_procs)
			fputs(",\n", stdout);
		else
			printf("%s\n", tree_json_open(p));
		json_print_indented(proc, p->dump ? 4 : 2);
	} else {
		printf("%spid %" PRId32 ": no call path node\n", p->n_procs || p->dump ? "\n" : "",
		       pid);
		untracked_lines(p, pid);
	}
	p->n_procs++;
}

/* Shows the processes whose untracked samples are listed but no node, and forgets them:
 * those of every pid but @pending's (the process whose nodes may go on in the next part;
 * NULL: none). A process's untracked samples come after its nodes. */
static void
untracked_flush(struct tree_printer *p, const int32_t *pending)
{
	while (p->n_untracked) {
		size_t i = 0;

		while (i < p->n_untracked && pending && p->untracked[i].pid == *pending)
			i++;
		if (i == p->n_untracked)
			return;
		int32_t pid = p->untracked[i].pid;
		tree_emit_bare(p, pid);
		untracked_forget(p, pid);
	}
}

/* Builds the trees of the pending nodes (one process, or several of one pid) and prints
 * those with nodes --region selects; forgets them. */
static void
tree_flush(struct tree_printer *p)
{
	for (size_t i = 0; i < p->n_pending;) {
		struct tree t;

		i += tree_build(&t, p->pending + i, p->n_pending - i);
		size_t selected = tree_select(&t, p->o->regions, p->o->n_regions);

		p->n_nodes += t.n;
		p->n_selected += selected;
		if (selected)
			tree_emit(p, &t);
		untracked_forget(p, t.pid);
		tree_free(&t);
	}
	pending_clear(p);
}

static void
tree_part(const Pmc__QueryReply *q, void *ctx)
{
	struct tree_printer *p = ctx;

	if (p->old_daemon)
		return;
	for (size_t i = 0; i < q->n_untracked; i++)
		untracked_add(p, q->untracked[i]);
	for (size_t i = 0; i < q->n_regions; i++) {
		Pmc__RegionStats *r = q->regions[i];

		if (!r->path) {
			p->old_daemon = true;
			pending_clear(p);
			return;
		}
		if (p->n_pending && r->pid != p->pending[0]->pid)
			tree_flush(p);
		pending_add(p, r);
	}
	untracked_flush(p, p->n_pending ? &p->pending[0]->pid : NULL);
	/* The part is freed after this: what is still pending lives on in copies. */
	for (size_t i = 0; i < p->n_pending; i++) {
		if (!p->owned[i]) {
			p->pending[i] = region_copy(p->pending[i]);
			p->owned[i] = true;
		}
	}
}

/* Asks for the call path nodes of the processes @o selects and prints (or folds) their
 * trees as @p says, process by process. Return: the reply's last part (visible, hidden),
 * the caller's to free. */
static Pmc__Response *
tree_stream(int sock, const char *what, const struct opts *o, struct tree_printer *p)
{
	Pmc__Query q;

	query_init(&q, o);
	/* The daemon lists every node of each process: --region picks the subtrees here. */
	q.tree = true;
	q.n_regions = 0;
	q.regions = NULL;
	q.region = (char *)protobuf_c_empty_string;
	Pmc__Response *last = query_stream(sock, what, &q, o, tree_part, p);
	tree_flush(p);
	if (!p->old_daemon)
		untracked_flush(p, NULL);
	return last;
}

/* Exits 1: the daemon answered Query.tree with regions (it knows no trees). */
static void tree_old_daemon(const char *what) __attribute__((noreturn));

static void
tree_old_daemon(const char *what)
{
	fail("%s: this pmcdaemon is older than pmcctl: it records no call paths; upgrade it", what);
}

/* Why @p shows nothing, @end the reply's last part: no node with samples in the subtrees of
 * --region, none with samples at all, or no node listed. Return: a sentence, the caller's
 * to free. */
static char *
tree_empty_reason(const struct tree_printer *p, const Pmc__QueryReply *end)
{
	struct opts procs = *p->o;
	char *why;
	int r;

	procs.n_regions = 0;
	if (p->n_nodes && p->o->n_regions) {
		_cleanup_free_ char *all = filters_text(p->o, true);

		r = asprintf(&why,
		             "no call path node with samples matches %s (%zu node%s listed: "
		             "without --region 'pmcctl query --tree' shows them)",
		             all, p->n_nodes, p->n_nodes == 1 ? "" : "s");
	} else if (p->n_nodes) {
		_cleanup_free_ char *sel = filters_text(&procs, false);

		r = asprintf(&why,
		             "no call path node has samples%s%s: the %zu listed were reset, and "
		             "have not run since",
		             sel[0] ? " for " : "", sel, p->n_nodes);
	} else if (end->visible) {
		_cleanup_free_ char *sel = filters_text(&procs, false);

		r = asprintf(&why,
		             "no call path node of a process that matches %s (%" PRIu32 " node%s "
		             "recorded that you may see: 'pmcctl query --tree' lists them)",
		             sel, end->visible, end->visible == 1 ? "" : "s");
	} else if (end->hidden) {
		empty_reason(end, &procs, &why);
		return why;
	} else {
		_cleanup_free_ char *sel = filters_text(&procs, false);

		r = asprintf(&why,
		             "no call paths recorded%s%s: no program has sent call paths to this "
		             "daemon since it started or was reset (a libpmcclient older than call "
		             "paths sends none: 'pmcctl query' lists its regions)",
		             sel[0] ? " for " : "", sel);
	}
	if (r < 0)
		oom();
	return why;
}

/* query --tree: the call path tree of each process @o selects, in @o's format. */
static void
tree_query(int sock, const char *what, const struct opts *o)
{
	struct tree_printer p = {.o = o};
	_cleanup_response_ Pmc__Response *last = tree_stream(sock, what, o, &p);

	if (p.old_daemon)
		tree_old_daemon(what);
	_cleanup_free_ char *why = p.n_procs ? NULL : tree_empty_reason(&p, last->query);
	_cleanup_free_ char *safe = why ? escape_text(why) : NULL;
	if (o->format == FORMAT_JSON) {
		fputs(p.n_procs ? "\n]\n" : "[]\n", stdout);
	} else if (o->format == FORMAT_CSV) {
		tree_csv_head_print(&p);
	} else if (!why) {
		tree_table_notes(&p);
	}
	/* JSON and CSV stay what their readers parse; the reason is for the person. */
	if (why && o->format != FORMAT_TABLE)
		fprintf(stderr, "pmcctl: %s\n", safe);
	else if (why)
		puts(safe);
	tree_printer_free(&p);
}

/* dump's call path trees, after its regions, in @o's format (JSON or a table): JSON the
 * member "tree" (the document's last member written before, without its end), a table per
 * process. Nothing (JSON: "tree": []) where the daemon lists none. */
static void
dump_tree(int sock, const char *what, const struct opts *o)
{
	struct tree_printer p = {.o = o, .dump = true};

	pmc__response__free_unpacked(tree_stream(sock, what, o, &p), NULL);
	if (o->format == FORMAT_JSON) {
		if (!p.n_procs)
			fputs(tree_json_open(&p), stdout);
		fputs(p.n_procs ? "\n  ]" : "]", stdout);
	} else if (p.n_procs) {
		tree_table_notes(&p);
	}
	tree_printer_free(&p);
}

/* Exits 1: no node that @p selected counted --event; names the events they did. */
static void fold_unknown_event(const struct tree_printer *p) __attribute__((noreturn));

static void
fold_unknown_event(const struct tree_printer *p)
{
	char *list = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&list, &len);

	if (!f)
		oom();
	fputs("wall", f);
	for (size_t i = 0; i < p->n_events; i++)
		fprintf(f, ", %s", p->events[i]);
	if (fclose(f))
		oom();
	_cleanup_free_ char *safe = escape_text(list);
	_cleanup_free_ char *event = escape_text(p->o->event);
	free(list);
	fail("event '%s' was not counted in the %zu call path node%s selected: they have %s", event,
	     p->n_selected, p->n_selected == 1 ? "" : "s", safe);
}

int
cmd_flamegraph(int sock, const struct command *cmd, const struct opts *o)
{
	struct tree_printer p = {.o = o, .fold = true};
	_cleanup_response_ Pmc__Response *last = tree_stream(sock, cmd->name, o, &p);

	if (p.old_daemon)
		tree_old_daemon(cmd->name);
	if (!p.n_selected) {
		_cleanup_free_ char *why = tree_empty_reason(&p, last->query);
		_cleanup_free_ char *safe = escape_text(why);

		fail("%s", safe);
	}
	if (!p.n_counted)
		fold_unknown_event(&p);
	folded_merge(&p.folded);
	for (size_t i = 0; i < p.folded.n; i++)
		printf("%s %" PRIu64 "\n", p.folded.v[i].stack, p.folded.v[i].weight);
	tree_printer_free(&p);
	if (fflush(stdout) || ferror(stdout))
		fail("cannot write the output: %s", strerror(errno));
	return 0;
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

static void
query_print_part(const Pmc__QueryReply *q, void *ctx)
{
	struct query_printer *p = ctx;

	if (p->o->format == FORMAT_JSON) {
		struct jw w = {.f = stdout, .indent = 4};

		flockfile(stdout);
		for (size_t i = 0; i < q->n_regions; i++) {
			fputs_unlocked(p->n_regions + i ? ",\n    " : "\n    ", stdout);
			region_write(&w, q->regions[i]);
		}
		funlockfile(stdout);
		losses_json(p->losses, q);
	} else if (p->o->format == FORMAT_CSV) {
		query_csv_rows(q);
	} else {
		query_table_rows(&p->t, q, &p->notes);
		if (p->t.n)
			table_print_part(&p->t, stdout, p->width, !p->n_regions);
	}
	p->n_regions += q->n_regions;
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
		p.losses = jarray();
		fputs("{\n  \"regions\": [", stdout);
	} else if (o->format == FORMAT_CSV) {
		csv_header(query_csv_head, ARRAY_SIZE(query_csv_head));
	}
	_cleanup_response_ Pmc__Response *last =
	        query_stream(sock, what, q, o, query_print_part, &p);
	const Pmc__QueryReply *end = last->query;
	_cleanup_free_ char *why = NULL;
	const char *code = p.n_regions ? NULL : empty_reason(end, o, &why);

	if (o->format == FORMAT_JSON) {
		json_t *tail = jobject();

		fputs(p.n_regions ? "\n  ],\n" : "],\n", stdout);
		jset(tail, "losses", p.losses);
		if (why)
			empty_json(tail, end, code, why);
		/* The tail's members, its "{" left out: the root's are the regions'. */
		_cleanup_free_ char *text = json_dumps(tail, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		json_decref(tail);
		if (!text)
			fail("cannot write JSON");
		if (!tree) {
			puts(text + 2);
		} else {
			/* Its "\n}" too: the trees are the root's last member. */
			text[strlen(text) - 2] = '\0';
			fputs(text + 2, stdout);
			dump_tree(sock, what, o);
			puts("\n}");
		}
	} else if (o->format == FORMAT_CSV) {
		if (why) {
			/* The CSV stays a table for the program reading it; the reason is for
			 * the person running it. */
			_cleanup_free_ char *safe = escape_text(why);

			fprintf(stderr, "pmcctl: %s\n", safe);
		}
	} else if (why) {
		_cleanup_free_ char *safe = escape_text(why);

		puts(safe);
	} else {
		query_table_notes(&p.notes);
	}
	if (tree && o->format == FORMAT_TABLE)
		dump_tree(sock, what, o);
}

int
cmd_query(int sock, const struct command *cmd, const struct opts *o)
{
	Pmc__Query q;

	if (o->tree) {
		tree_query(sock, cmd->name, o);
	} else {
		query_init(&q, o);
		query_print_stream(sock, cmd->name, &q, o, cmd->tree);
	}
	if (fflush(stdout) || ferror(stdout))
		fail("cannot write the output: %s", strerror(errno));
	return 0;
}

/* ---- reset ---- */

static uint32_t
reset_one(int sock, int32_t pid, const char *region)
{
	Pmc__Reset rs = PMC__RESET__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;

	rs.pid = pid;
	rs.region = (char *)(region ? region : "");
	req.body_case = PMC__REQUEST__BODY_RESET;
	req.reset = &rs;

	_cleanup_response_ Pmc__Response *resp =
	        call(sock, "reset", &req, PMC__RESPONSE__BODY_RESET);
	return resp->reset->cleared;
}

/* Pids are at most 2^22 (PID_MAX_LIMIT): a reset of this one clears nothing, and is refused
 * like any other to whoever may not reset. */
#define RESET_NO_PID INT32_MAX

int
cmd_reset(int sock, const struct command *cmd, const struct opts *o)
{
	uint32_t cleared = 0;

	if (!new_filters(o, 0)) {
		cleared = reset_one(sock, o->pid, o->n_regions ? o->regions[0] : NULL);
	} else {
		/* Reset names one exact region: the daemon matches the filters in a query,
		 * then each region it lists is cleared. Asking first whether we may reset at
		 * all words a refusal the same for every filter, even one that matches
		 * nothing. */
		Pmc__Query q;

		reset_one(sock, RESET_NO_PID, NULL);
		query_init(&q, o);
		_cleanup_response_ Pmc__Response *resp = query_call(sock, cmd->name, &q, o);
		Pmc__QueryReply *qr = resp->query;

		/* A pid may be listed twice (a process that exec'd a setuid program, or a
		 * recycled pid), and one reset of it clears both: once each. */
		if (qr->n_regions) /* (none: no array at all) */
			qsort(qr->regions, qr->n_regions, sizeof(*qr->regions), region_key_cmp);
		for (size_t i = 0; i < qr->n_regions; i++)
			if (!i || region_key_cmp(&qr->regions[i - 1], &qr->regions[i]))
				cleared +=
				        reset_one(sock, qr->regions[i]->pid, qr->regions[i]->name);
	}

	if (o->format == FORMAT_JSON) {
		json_t *root = jobject();

		jset(root, "cleared", ju64(cleared));
		json_print(root);
	} else if (o->format == FORMAT_CSV) {
		static const char *const head[] = {"cleared"};

		csv_header(head, ARRAY_SIZE(head));
		csv_u64(cleared);
		csv_end();
	} else {
		printf("cleared %" PRIu32 " aggregate(s)\n", cleared);
	}
	return 0;
}
