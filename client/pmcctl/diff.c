/* pmcctl diff BASE CURRENT: two files of `pmcctl dump --format json` or `pmcctl run --format
 * json --output FILE` compared region by region (call path by call path where both files
 * have call path trees; otherwise by region name) and event by event: calls, mean per call,
 * p50 and p99 before and after, the change of the mean in percent, and whether the change is
 * beyond the run-to-run noise the two files show. With --event E --fail-above PCT (or
 * --fail-below PCT) it is a CI gate.
 *
 * Noise: where both files carry histograms (dump and run write them), a Mann-Whitney rank
 * test over their buckets (each run counted at its bucket, runs of one bucket tied), normal
 * approximation with the ties' correction; otherwise Welch's z from count, mean and stddev.
 * |z| >= 3 is beyond the noise (two-sided p < 0.003). A count that is exact (an event that is
 * not a time) and did not vary within either file (min = max on both sides) needs no noise
 * model: any change of it is beyond the noise.
 *
 * Derived ratios (ipc, cache-miss-ratio, branch-miss-ratio) are compared without a noise
 * model: their change alone decides.
 *
 * Regions of several processes of one program (the same comm) are added up. */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "pmcctl/diff.h"
#include "pmcctl/hist.h"
#include "pmcctl/jread.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/query.h"

#define DIFF_EXIT_BAD_INPUT 2
#define DIFF_MAX_FILE (1ull << 30) /* a dump of 262,144 regions is far below */
#define DIFF_Z 3.0

/* One event (or the wall time) of a region, over the processes of its program. */
struct dstats {
	const char *name; /* borrowed from its diff_file (names_of) */
	double n, sum, sumsq;
	double min, max;
	double p50, p99; /* of the first process; from the buckets when several */
	struct hist h;   /* the buckets of every process */
	size_t procs;
	bool no_buckets; /* a process without: no rank test */
	bool ratio;      /* a derived ratio (ipc): its mean weighed by calls, no noise model */
};

struct dentry {
	char *key; /* "comm;outer;inner" */
	uint64_t calls;
	struct dstats *ev; /* [0]: the wall time ("wall") */
	size_t n_ev;
};

/* One view of a file: its regions by name, or its call path nodes. */
struct dfile {
	struct diff_file *file;
	struct dentry *e;
	size_t n, cap;
	bool by_path;
};

/* The names a file's figures borrow (events), kept until the file is freed: blocks of 64 KiB
 * and more, never moved. */
struct strstore {
	char **block;
	size_t n_block;
	char *at; /* room left in the last block */
	size_t left;
};

static const char *
strstore_add(struct strstore *s, const char *str, size_t n)
{
	if (n + 1 > s->left) {
		size_t size = n + 1 > 65536 ? n + 1 : 65536;
		char **b = reallocarray(s->block, s->n_block + 1, sizeof(*b));

		if (!b || !(s->at = malloc(size)))
			pmcctl_oom();
		s->block = b;
		s->block[s->n_block++] = s->at;
		s->left = size;
	}
	char *out = s->at;
	memcpy(out, str, n);
	out[n] = '\0';
	s->at += n + 1;
	s->left -= n + 1;
	return out;
}

static void
strstore_free(struct strstore *s)
{
	for (size_t i = 0; i < s->n_block; i++)
		free(s->block[i]);
	free(s->block);
}

struct diff_file {
	struct dfile names, paths;
	bool has_paths;           /* some node listed */
	char *why;                /* what is wrong with it */
	struct strstore names_of; /* the names its figures borrow */
};

/* A sentence saying what is wrong with a file, the caller's to free. */
static char *__attribute__((format(printf, 1, 2))) bad_text(const char *fmt, ...)
{
	va_list ap;
	char *why;

	va_start(ap, fmt);
	if (vasprintf(&why, fmt, ap) < 0)
		pmcctl_oom();
	va_end(ap);
	return why;
}

/* ---- a file read: its regions' figures as the JSON gives them ---- */

/* A STATS object (a "wall_ns", or an event's) as read: NAN where a figure is missing or not
 * a number. */
struct jstats {
	bool object;
	double sum, mean, sd, min, max, p50, p99;
	bool buckets;       /* it has a "buckets" array */
	bool bad_row;       /* a row of it is not [low, high, count] */
	size_t row, n_rows; /* its rows, in its jregion's */
};

/* An event (or a derived ratio) of a region as read: its name in the jregion's text. */
struct jevent {
	size_t name, len;
	struct jstats st;
	bool number; /* derived: a number (else null, or anything else) */
	double value;
};

/* A region object (or a call path node) as read, its figures ready for dfile_add(). */
struct jregion {
	bool object;
	bool has_name, has_comm, has_count, events_object;
	size_t name, comm; /* in @text */
	int64_t count;
	struct jstats wall;
	struct jevent *ev, *dv; /* events, derived ratios, in the file's order */
	size_t n_ev, cap_ev, n_dv, cap_dv;
	char *text; /* the names, each NUL-terminated */
	size_t n_text, cap_text;
	struct bucket *row;
	size_t n_row, cap_row;
};

static void
jregion_reset(struct jregion *g)
{
	g->object = g->has_name = g->has_comm = g->has_count = g->events_object = false;
	memset(&g->wall, 0, sizeof(g->wall));
	g->n_ev = g->n_dv = g->n_text = g->n_row = 0;
}

static void
jregion_free(struct jregion *g)
{
	free(g->ev);
	free(g->dv);
	free(g->text);
	free(g->row);
}

static void *
grow(void *v, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return v;
	size_t c = *cap ? 2 * *cap : 16;
	while (c < need)
		c *= 2;
	v = reallocarray(v, c, size);
	if (!v)
		pmcctl_oom();
	*cap = c;
	return v;
}

/* Keeps the @n bytes at @s in @g's text; return: where. */
static size_t
jregion_text(struct jregion *g, const char *s, size_t n)
{
	size_t at = g->n_text;

	g->text = grow(g->text, &g->cap_text, g->n_text + n + 1, 1);
	memcpy(g->text + at, s, n);
	g->text[at + n] = '\0';
	g->n_text += n + 1;
	return at;
}

static bool
key_is(const char *key, size_t n, const char *want)
{
	return strlen(want) == n && !memcmp(key, want, n);
}

/* The next value as a double, NAN when it is not a number (jnum()'s reading). */
static double
jr_figure(struct jr *r)
{
	int64_t i;
	double d;

	if (jread_peek(r) != JR_NUMBER) {
		jread_skip(r);
		return NAN;
	}
	return jread_number(r, &i, &d) == JR_NONE ? NAN : d;
}

/* The next value as an integer (jansson's json_is_integer()); false when it is not one. */
static bool
jr_integer(struct jr *r, int64_t *v)
{
	double d;

	if (jread_peek(r) != JR_NUMBER) {
		jread_skip(r);
		return false;
	}
	return jread_number(r, v, &d) == JR_INT;
}

/* "buckets": [[low, high, count], ...] into @g's rows. */
static void
read_buckets(struct jr *r, struct jregion *g, struct jstats *st)
{
	if (jread_peek(r) != JR_ARRAY) {
		jread_skip(r);
		return;
	}
	/* A key given twice (refused at the object's end, read before) reads as its last. */
	st->buckets = true;
	st->row = g->n_row;
	st->n_rows = 0;
	st->bad_row = false;
	jread_array(r);
	while (jread_element(r)) {
		int64_t v[3];
		size_t k = 0;
		bool ok = jread_peek(r) == JR_ARRAY;

		if (!ok) {
			jread_skip(r);
		} else {
			jread_array(r);
			for (; jread_element(r); k++)
				if (k >= 3)
					jread_skip(r);
				else if (!jr_integer(r, &v[k]))
					ok = false;
			ok = ok && k >= 3 && v[0] >= 0 && v[1] >= v[0] && v[2] >= 0;
		}
		if (!ok) {
			st->bad_row = true;
			continue;
		}
		if (st->bad_row)
			continue;
		g->row = grow(g->row, &g->cap_row, g->n_row + 1, sizeof(*g->row));
		g->row[g->n_row++] =
		        (struct bucket){(uint64_t)v[0], (uint64_t)v[1], (uint64_t)v[2]};
		st->n_rows++;
	}
}

/* A STATS value into @st (any value: a figure of it missing is NAN). */
static void
read_stats(struct jr *r, struct jregion *g, struct jstats *st)
{
	const char *key;
	size_t n;

	memset(st, 0, sizeof(*st));
	st->sum = st->mean = st->sd = st->min = st->max = st->p50 = st->p99 = NAN;
	if (jread_peek(r) != JR_OBJECT) {
		jread_skip(r);
		return;
	}
	st->object = true;
	jread_object(r);
	while (jread_member(r, &key, &n)) {
		if (key_is(key, n, "sum"))
			st->sum = jr_figure(r);
		else if (key_is(key, n, "mean"))
			st->mean = jr_figure(r);
		else if (key_is(key, n, "stddev"))
			st->sd = jr_figure(r);
		else if (key_is(key, n, "min"))
			st->min = jr_figure(r);
		else if (key_is(key, n, "max"))
			st->max = jr_figure(r);
		else if (key_is(key, n, "p50"))
			st->p50 = jr_figure(r);
		else if (key_is(key, n, "p99"))
			st->p99 = jr_figure(r);
		else if (key_is(key, n, "buckets"))
			read_buckets(r, g, st);
		else
			jread_skip(r);
	}
}

/* "events" (@derived false) or "derived": each member, in the file's order. */
static void
read_events(struct jr *r, struct jregion *g, bool derived)
{
	const char *key;
	size_t n;

	jread_object(r);
	while (jread_member(r, &key, &n)) {
		struct jevent *e;

		if (derived) {
			g->dv = grow(g->dv, &g->cap_dv, g->n_dv + 1, sizeof(*g->dv));
			e = &g->dv[g->n_dv++];
		} else {
			g->ev = grow(g->ev, &g->cap_ev, g->n_ev + 1, sizeof(*g->ev));
			e = &g->ev[g->n_ev++];
		}
		memset(e, 0, sizeof(*e));
		e->name = jregion_text(g, key, n);
		e->len = n;
		if (!derived) {
			read_stats(r, g, &e->st);
		} else if (jread_peek(r) == JR_NUMBER) {
			e->value = jr_figure(r);
			e->number = true;
		} else {
			jread_skip(r);
		}
	}
}

static bool
jr_text(struct jr *r, struct jregion *g, size_t *at)
{
	const char *s;
	size_t n;

	if (jread_peek(r) != JR_STRING) {
		jread_skip(r);
		return false;
	}
	if (!jread_string(r, &s, &n))
		return false;
	*at = jregion_text(g, s, n);
	return true;
}

struct reader;
static void read_nodes(struct reader *rd, unsigned level);

/* ---- a file read into its views ---- */

/* What reading one file keeps: a jregion per level of call path nodes open (regions: 0). */
struct reader {
	struct jr r;
	struct diff_file *df;
	struct jregion **g; /* each allocated apart: a level's stays where it is */
	size_t n_g;
	char *regions_why; /* the first region found wrong (regions are read no further) */
	char *nodes_why;   /* the call path node found wrong first in the file's order */
	size_t nodes_why_at;
};

static void
reader_free(struct reader *rd)
{
	for (size_t i = 0; i < rd->n_g; i++) {
		jregion_free(rd->g[i]);
		free(rd->g[i]);
	}
	free(rd->g);
	free(rd->regions_why);
	free(rd->nodes_why);
	jread_free(&rd->r);
}

/* The jregion of nesting @level, emptied. */
static struct jregion *
reader_level(struct reader *rd, unsigned level)
{
	if (level >= rd->n_g) {
		struct jregion **g = reallocarray(rd->g, level + 1, sizeof(*g));

		if (!g)
			pmcctl_oom();
		rd->g = g;
		for (; rd->n_g <= level; rd->n_g++)
			if (!(rd->g[rd->n_g] = calloc(1, sizeof(**rd->g))))
				pmcctl_oom();
	}
	jregion_reset(rd->g[level]);
	return rd->g[level];
}

/* A region object (@node false) or a call path node: its members into @g, and a node's
 * children read (and added) as they come. */
static void
read_region(struct reader *rd, struct jregion *g, bool node, unsigned level)
{
	struct jr *r = &rd->r;
	const char *key;
	size_t n;

	if (jread_peek(r) != JR_OBJECT) {
		jread_skip(r);
		return;
	}
	g->object = true;
	jread_object(r);
	while (jread_member(r, &key, &n)) {
		if (key_is(key, n, node ? "path" : "name")) {
			g->has_name = jr_text(r, g, &g->name);
		} else if (key_is(key, n, "comm")) {
			g->has_comm = jr_text(r, g, &g->comm);
		} else if (key_is(key, n, "count")) {
			g->has_count = jr_integer(r, &g->count);
		} else if (key_is(key, n, "wall_ns")) {
			read_stats(r, g, &g->wall);
		} else if (key_is(key, n, "events") || key_is(key, n, "derived")) {
			bool derived = n == 7;

			bool object = jread_peek(r) == JR_OBJECT;

			if (object)
				read_events(r, g, derived);
			else
				jread_skip(r);
			if (!derived)
				g->events_object = object;
		} else if (node && key_is(key, n, "children")) {
			read_nodes(rd, level + 1);
		} else {
			jread_skip(r);
		}
	}
}

/* A STATS of @g read into the figures @d of a region of @calls runs. Return: NULL, or what is
 * wrong (the caller's to free). */
static char *
dstats_add(struct dstats *d, const struct jregion *g, const struct jstats *st, uint64_t calls)
{
	double sum = st->sum, mean = st->mean, sd = st->sd, min = st->min, max = st->max;

	if (!st->object || !isfinite(sum) || !isfinite(mean) || !isfinite(min) || !isfinite(max) ||
	    sum < 0)
		return bad_text("a figure of '%s' has no sum, mean, min or max", d->name);
	if (!isfinite(sd))
		sd = 0;
	if (!d->procs || min < d->min)
		d->min = min;
	if (!d->procs || max > d->max)
		d->max = max;
	if (!d->procs) {
		d->p50 = st->p50;
		d->p99 = st->p99;
	}
	d->n += (double)calls;
	d->sum += sum;
	d->sumsq += (double)calls * (sd * sd + mean * mean);
	d->procs++;
	if (!st->buckets) {
		d->no_buckets = true;
		return NULL;
	}
	for (size_t i = 0; i < st->n_rows; i++) {
		const struct bucket *b = &g->row[st->row + i];

		hist_push(&d->h, b->low, b->high, b->count);
	}
	if (st->bad_row)
		return bad_text("a bucket of '%s' is not [low, high, count]", d->name);
	return NULL;
}

static struct dstats *
dentry_event(struct dfile *f, struct dentry *e, const char *name, size_t len)
{
	for (size_t i = 0; i < e->n_ev; i++)
		if (strlen(e->ev[i].name) == len && !memcmp(e->ev[i].name, name, len))
			return &e->ev[i];
	struct dstats *g = reallocarray(e->ev, e->n_ev + 1, sizeof(*g));
	if (!g)
		pmcctl_oom();
	e->ev = g;
	memset(&e->ev[e->n_ev], 0, sizeof(*e->ev));
	e->ev[e->n_ev].name = strstore_add(&f->file->names_of, name, len);
	return &e->ev[e->n_ev++];
}

/* Adds the region (or call path node) @g read from @f's file as entry @slot, under
 * "comm;name". Return: NULL, or what is wrong (the caller's to free). */
static char *
dfile_add(struct dfile *f, const struct jregion *g, size_t slot)
{
	char *why = NULL;

	if (!g->object || !g->has_name || !g->has_comm || !g->has_count || g->count < 0 ||
	    !g->events_object)
		return bad_text("a region without name, comm, count or events: not a file of "
		                "'pmcctl dump --format json'");
	struct dentry *e = &f->e[slot];
	if (asprintf(&e->key, "%s;%s", g->text + g->comm, g->text + g->name) < 0)
		pmcctl_oom();
	e->calls = (uint64_t)g->count;
	why = dstats_add(dentry_event(f, e, "wall", 4), g, &g->wall, e->calls);
	for (size_t i = 0; i < g->n_ev && !why; i++)
		why = dstats_add(dentry_event(f, e, g->text + g->ev[i].name, g->ev[i].len), g,
		                 &g->ev[i].st, e->calls);
	/* Derived ratios (ipc, miss ratios): one value per process. */
	for (size_t i = 0; i < g->n_dv && !why; i++) {
		struct dstats *d = dentry_event(f, e, g->text + g->dv[i].name, g->dv[i].len);

		if (!g->dv[i].number)
			continue; /* null: not finite */
		d->ratio = d->no_buckets = true;
		d->n += (double)e->calls;
		d->sum += g->dv[i].value * (double)e->calls;
		d->p50 = d->p99 = NAN;
		d->procs++;
	}
	return why;
}

/* A new entry of @f, its place taken in the file's order (parents before their children). */
static size_t
dfile_slot(struct dfile *f)
{
	if (f->n == f->cap) {
		f->cap = f->cap ? 2 * f->cap : 64;
		struct dentry *g = reallocarray(f->e, f->cap, sizeof(*g));
		if (!g)
			pmcctl_oom();
		f->e = g;
	}
	memset(&f->e[f->n], 0, sizeof(*f->e));
	return f->n++;
}

/* The array of call path nodes next (anything else is left out), at nesting @level. */
static void
read_nodes(struct reader *rd, unsigned level)
{
	struct jr *r = &rd->r;
	struct dfile *f = &rd->df->paths;

	if (jread_peek(r) != JR_ARRAY) {
		jread_skip(r);
		return;
	}
	jread_array(r);
	while (jread_element(r)) {
		/* Its place before its children's: a node is added after them, in its own. */
		size_t slot = dfile_slot(f);
		struct jregion *g = reader_level(rd, level);

		read_region(rd, g, true, level);
		char *why = dfile_add(f, g, slot);
		/* What is wrong with a node is said before what is wrong below it. */
		if (why && (!rd->nodes_why || slot < rd->nodes_why_at)) {
			free(rd->nodes_why);
			rd->nodes_why = why;
			rd->nodes_why_at = slot;
		} else {
			free(why);
		}
	}
}

/* The member "tree": an array of processes, each with its "tree" of nodes. */
static void
read_trees(struct reader *rd)
{
	struct jr *r = &rd->r;
	const char *key;
	size_t n;

	if (jread_peek(r) != JR_ARRAY) {
		jread_skip(r);
		return;
	}
	jread_array(r);
	while (jread_element(r)) {
		if (jread_peek(r) != JR_OBJECT) {
			jread_skip(r);
			continue;
		}
		jread_object(r);
		while (jread_member(r, &key, &n))
			if (key_is(key, n, "tree"))
				read_nodes(rd, 0);
			else
				jread_skip(r);
	}
}

static int
dentry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dentry *)a)->key, ((const struct dentry *)b)->key);
}

/* The @p quantile of @d's runs, from its buckets: the middle of the bucket it falls in. */
static double
dstats_quantile(const struct dstats *d, double p)
{
	const struct hist *h = &d->h;
	uint64_t rank = (uint64_t)ceil(p * (double)h->count), seen = 0;

	if (!rank)
		rank = 1;
	for (size_t i = 0; i < h->n; i++) {
		seen += h->v[i].count;
		if (seen >= rank)
			return ((double)h->v[i].low + (double)h->v[i].high) / 2;
	}
	return NAN;
}

/* Entries of one key (several processes of a program) added up into the first. */
static void
dfile_merge(struct dfile *f)
{
	size_t n = 0;

	if (f->n)
		qsort(f->e, f->n, sizeof(*f->e), dentry_cmp);
	for (size_t i = 0; i < f->n; i++) {
		struct dentry *e = &f->e[i];

		if (!n || strcmp(f->e[n - 1].key, e->key)) {
			f->e[n++] = *e;
			continue;
		}
		struct dentry *to = &f->e[n - 1];
		to->calls += e->calls;
		for (size_t k = 0; k < e->n_ev; k++) {
			struct dstats *s = &e->ev[k],
			              *d = dentry_event(f, to, s->name, strlen(s->name));

			if (!d->procs) {
				*d = *s;
				continue;
			}
			d->min = fmin(d->min, s->min);
			d->max = fmax(d->max, s->max);
			d->n += s->n;
			d->sum += s->sum;
			d->sumsq += s->sumsq;
			d->procs += s->procs;
			d->no_buckets |= s->no_buckets;
			for (size_t j = 0; j < s->h.n; j++)
				hist_push(&d->h, s->h.v[j].low, s->h.v[j].high, s->h.v[j].count);
			free(s->h.v);
		}
		free(e->ev);
		free(e->key);
	}
	f->n = n;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < f->e[i].n_ev; k++) {
			struct dstats *d = &f->e[i].ev[k];

			if (d->h.n)
				hist_merge(&d->h);
			if (d->procs > 1 && !d->no_buckets && d->h.n) {
				d->p50 = dstats_quantile(d, 0.5);
				d->p99 = dstats_quantile(d, 0.99);
			}
		}
}

static void
dfile_free(struct dfile *f)
{
	for (size_t i = 0; i < f->n; i++) {
		for (size_t k = 0; k < f->e[i].n_ev; k++)
			free(f->e[i].ev[k].h.v);
		free(f->e[i].ev);
		free(f->e[i].key);
	}
	free(f->e);
}

void
diff_file_free(struct diff_file *df)
{
	if (!df)
		return;
	dfile_free(&df->names);
	dfile_free(&df->paths);
	strstore_free(&df->names_of);
	free(df->why);
	free(df);
}

/* Reads @rd's text into its file's views; what is wrong is said in df->why, in the order
 * the file's parts were checked in before: its top, its regions, its call path nodes. Return:
 * false when the text is not JSON as jansson takes it (nothing said). */
static bool
diff_file_read(struct reader *rd)
{
	struct jr *r = &rd->r;
	struct diff_file *df = rd->df;
	struct dfile *f = &df->names;
	bool regions = false, has_version = false, version_int = false;
	int64_t version = 0;
	const char *key;
	size_t n;

	if (jread_peek(r) == JR_ARRAY) {
		jread_skip(r);
	} else if (jread_object(r)) {
		while (jread_member(r, &key, &n)) {
			if (key_is(key, n, "regions") && jread_peek(r) == JR_ARRAY) {
				regions = true;
				jread_array(r);
				while (jread_element(r)) {
					struct jregion *g = reader_level(rd, 0);

					read_region(rd, g, false, 0);
					if (!rd->regions_why)
						rd->regions_why = dfile_add(f, g, dfile_slot(f));
				}
			} else if (key_is(key, n, "format_version")) {
				has_version = true;
				version_int = jr_integer(r, &version);
			} else if (key_is(key, n, "tree")) {
				read_trees(rd);
			} else {
				jread_skip(r);
			}
		}
	}
	if (!jread_end(r))
		return false;
	if (!regions)
		df->why =
		        bad_text("no \"regions\" array: not a file of 'pmcctl dump --format json' "
		                 "or 'pmcctl run --format json'");
	else if (has_version && (!version_int || version < 1))
		df->why = bad_text("\"format_version\" is not a version number");
	else if (has_version && version > PMC_JSON_FORMAT_VERSION)
		df->why = bad_text("written by a newer pmcctl (format version %" PRId64
		                   "; this one reads up to %d): compare it with that pmcctl",
		                   version, PMC_JSON_FORMAT_VERSION);
	else if (rd->regions_why)
		df->why = TAKE_PTR(rd->regions_why);
	else if (rd->nodes_why)
		df->why = TAKE_PTR(rd->nodes_why);
	if (df->why)
		return true;
	dfile_merge(f);
	df->has_paths = df->paths.n > 0;
	dfile_merge(&df->paths);
	return true;
}

int
diff_file_parse(const void *buf, size_t len, struct diff_file **out, char **why)
{
	const unsigned char *c = buf;
	struct diff_file *df = calloc(1, sizeof(*df));

	if (!df)
		pmcctl_oom();
	df->names.file = df->paths.file = df;
	df->paths.by_path = true;
	if (len > DIFF_MAX_FILE) {
		df->why = bad_text("%zu bytes, over the %llu that diff reads", len, DIFF_MAX_FILE);
	} else if (len >= 2 && c[0] == 0x1f && c[1] == 0x8b) {
		df->why = bad_text("gzip-compressed (a pprof profile?): diff reads the JSON of "
		                   "'pmcctl dump --format json'; for pprof profiles: go tool pprof "
		                   "-diff_base");
	} else {
		struct reader rd = {.df = df};
		json_error_t err;

		jread_init(&rd.r, buf, len);
		bool json = diff_file_read(&rd);
		reader_free(&rd);
		/* What is wrong with text that is not JSON, in jansson's words; but a NUL byte
		 * is never JSON, and jansson's reader skips one after a number. */
		const char *nul = json ? NULL : memchr(buf, 0, len);
		json_t *root =
		        json || nul ? NULL : json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err);
		if (nul)
			df->why = bad_text("not valid JSON (byte %zu is a NUL)",
			                   (size_t)(nul - (const char *)buf) + 1);
		else if (root)
			df->why = bad_text("not JSON as pmcctl reads it");
		else if (!json)
			df->why = bad_text("not valid JSON (line %d, column %d: %s)", err.line,
			                   err.column, err.text);
		json_decref(root);
		if (!df->why) {
			*out = df;
			return 0;
		}
	}
	*why = TAKE_PTR(df->why);
	diff_file_free(df);
	return -EBADMSG;
}

/* Reads the file at @path, or says why it cannot and exits 2. */
static struct diff_file *
diff_file_load(const char *path)
{
	_cleanup_free_ char *safe = output_escape_text(path), *why = NULL, *buf = NULL;
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct diff_file *df;
	struct stat st;
	size_t len = 0;

	if (fd < 0 || fstat(fd, &st) < 0)
		why = strdup(strerror(errno));
	else if (!S_ISREG(st.st_mode))
		why = strdup("not a regular file");
	else if ((uint64_t)st.st_size > DIFF_MAX_FILE &&
	         asprintf(&why, "%" PRIu64 " bytes, over the %llu that diff reads",
	                  (uint64_t)st.st_size, DIFF_MAX_FILE) < 0)
		pmcctl_oom();
	if (!why) {
		buf = malloc((size_t)st.st_size + 1);
		if (!buf)
			pmcctl_oom();
		while (len < (size_t)st.st_size) {
			ssize_t r = read(fd, buf + len, (size_t)st.st_size - len);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				why = strdup(r < 0 ? strerror(errno) : "it shrank while read");
				break;
			}
			len += (size_t)r;
		}
	}
	if (!why && diff_file_parse(buf, len, &df, &why) == 0)
		return df;
	if (!why)
		pmcctl_oom();
	fprintf(stderr, "pmcctl: diff: %s: %s\n", safe, why);
	exit(DIFF_EXIT_BAD_INPUT);
}

/* ---- comparing ---- */

static double
dstats_mean(const struct dstats *d)
{
	return d->n > 0 ? d->sum / d->n : 0;
}

static bool
is_time(const char *name)
{
	return !strcmp(name, "wall") || query_event_counts_ns(name);
}

/* Mann-Whitney over the buckets of @a and @b: z of b's rank sum (> 0: b larger). */
static double
rank_z(const struct dstats *a, const struct dstats *b)
{
	double na = 0, nb = 0, u = 0, below_a = 0, ties = 0;
	size_t i = 0, j = 0;

	const struct hist *ha = &a->h, *hb = &b->h;

	na = (double)ha->count;
	nb = (double)hb->count;
	while (i < ha->n || j < hb->n) {
		uint64_t low = i < ha->n && (j >= hb->n || ha->v[i].low <= hb->v[j].low)
		                       ? ha->v[i].low
		                       : hb->v[j].low;
		double ca = 0, cb = 0;

		if (i < ha->n && ha->v[i].low == low)
			ca = (double)ha->v[i++].count;
		if (j < hb->n && hb->v[j].low == low)
			cb = (double)hb->v[j++].count;
		u += cb * (below_a + ca / 2);
		below_a += ca;
		double t = ca + cb;
		ties += t * t * t - t;
	}
	double n = na + nb;
	if (na < 1 || nb < 1 || n < 2)
		return 0;
	double var = na * nb / 12 * ((n + 1) - ties / (n * (n - 1)));
	return var > 0 ? (u - na * nb / 2) / sqrt(var) : 0;
}

/* Welch's z of the means, from counts, means and standard deviations. */
static double
welch_z(const struct dstats *a, const struct dstats *b)
{
	double ma = dstats_mean(a), mb = dstats_mean(b);
	double va = a->n > 0 ? fmax(0, a->sumsq / a->n - ma * ma) : 0;
	double vb = b->n > 0 ? fmax(0, b->sumsq / b->n - mb * mb) : 0;
	double se = sqrt((a->n > 1 ? va / (a->n - 1) : 0) + (b->n > 1 ? vb / (b->n - 1) : 0));

	return se > 0 ? (mb - ma) / se : 0;
}

struct verdict {
	double change_pct; /* of the mean per call; INFINITY from 0 */
	double z;
	const char *test; /* "exact", "rank", "welch" */
	bool beyond;
};

static struct verdict
compare(const struct dstats *a, const struct dstats *b)
{
	struct verdict v = {0};
	double ma = dstats_mean(a), mb = dstats_mean(b);

	v.change_pct = ma != 0 ? (mb - ma) / ma * 100 : mb != 0 ? INFINITY : 0;
	if (a->ratio || b->ratio) {
		v.test = "none";
		v.beyond = ma != mb;
		v.z = NAN;
		return v;
	}
	if (!is_time(a->name) && a->min == a->max && b->min == b->max) {
		v.test = "exact";
		v.beyond = ma != mb;
		v.z = ma == mb ? 0 : mb > ma ? INFINITY : -INFINITY;
		return v;
	}
	if (!a->no_buckets && !b->no_buckets && a->h.n && b->h.n) {
		v.test = "rank";
		v.z = rank_z(a, b);
	} else {
		v.test = "welch";
		v.z = welch_z(a, b);
	}
	v.beyond = fabs(v.z) >= DIFF_Z && ma != mb;
	return v;
}

/* Whether event @name is the one --event @want names: exactly, or "page-faults" for
 * "page-faults:u". */
static bool
event_is(const char *name, const char *want)
{
	size_t n = strlen(want);

	if (!strcmp(want, "wall_ns"))
		want = "wall";
	return !strcmp(name, want) || (!strncmp(name, want, n) && name[n] == ':');
}

static const struct dstats *
find_event(const struct dentry *e, const char *name)
{
	for (size_t i = 0; i < e->n_ev; i++)
		if (!strcmp(e->ev[i].name, name))
			return &e->ev[i];
	return NULL;
}

/* ---- output ---- */

static const char *const diff_head[] = {"REGION", "EVENT", "CALLS", "MEAN",
                                        "CHANGE", "P50",   "P99",   "NOISE"};
static const bool diff_right[] = {false, false, true, true, true, true, true, false};
static const char *const diff_csv_head[] = {"status",   "region",    "event",        "base_calls",
                                            "calls",    "base_mean", "mean",         "change_pct",
                                            "base_p50", "p50",       "base_p99",     "p99",
                                            "z",        "test",      "beyond_noise", "failed"};

struct diff_out {
	const struct opts *o;
	struct table t;
	struct jw w;   /* JSON: the rows written as they come */
	size_t n_rows; /* JSON: written */
	bool failed;
	size_t n_failed;
};

/* Opens the next row of the JSON's "regions", as jansson lays out an array of objects. */
static struct jw *
json_row(struct diff_out *d)
{
	output_jw_raw(&d->w, d->n_rows++ ? ",\n    " : "\n    ");
	d->w.indent = 4;
	output_jw_open(&d->w, NULL);
	return &d->w;
}

static void
fmt_value(char *buf, size_t len, const char *event, double v)
{
	if (is_time(event))
		output_format_time(buf, len, v);
	else
		output_format_count(buf, len, v, false);
}

static void
out_pair(struct diff_out *d, const char *event, double a, double b)
{
	char x[32], y[32];

	fmt_value(x, sizeof(x), event, a);
	fmt_value(y, sizeof(y), event, b);
	output_table_add(&d->t, "%s -> %s", x, y);
}

/* One compared (region, event). @fails: this row trips the gate. */
static void
out_row(struct diff_out *d, const struct dentry *ea, const struct dentry *eb,
        const struct dstats *a, const struct dstats *b, const struct verdict *v, bool fails)
{
	const char *region = ea->key;

	if (d->o->format == FORMAT_JSON) {
		struct jw *w = json_row(d);

		output_jw_str(w, "status", "both");
		output_jw_str(w, "region", region);
		output_jw_str(w, "event", a->name);
		output_jw_open(w, "base");
		output_jw_u64(w, "calls", ea->calls);
		output_jw_real(w, "mean", dstats_mean(a));
		output_jw_real(w, "p50", a->p50);
		output_jw_real(w, "p99", a->p99);
		output_jw_close(w);
		output_jw_open(w, "current");
		output_jw_u64(w, "calls", eb->calls);
		output_jw_real(w, "mean", dstats_mean(b));
		output_jw_real(w, "p50", b->p50);
		output_jw_real(w, "p99", b->p99);
		output_jw_close(w);
		output_jw_real(w, "change_pct", v->change_pct);
		output_jw_real(w, "z", v->z);
		output_jw_str(w, "test", v->test);
		output_jw_bool(w, "beyond_noise", v->beyond);
		output_jw_bool(w, "failed", fails);
		output_jw_close(w);
	} else if (d->o->format == FORMAT_CSV) {
		output_csv_str("both");
		output_csv_str(region);
		output_csv_str(a->name);
		output_csv_u64(ea->calls);
		output_csv_u64(eb->calls);
		output_csv_real(dstats_mean(a));
		output_csv_real(dstats_mean(b));
		output_csv_real(v->change_pct);
		output_csv_real(a->p50);
		output_csv_real(b->p50);
		output_csv_real(a->p99);
		output_csv_real(b->p99);
		output_csv_real(v->z);
		output_csv_str(v->test);
		output_csv_bool(v->beyond);
		output_csv_bool(fails);
		output_csv_end();
	} else {
		output_table_add(&d->t, "%s", region);
		output_table_add(&d->t, "%s", a->name);
		output_table_add(&d->t, "%" PRIu64 " -> %" PRIu64, ea->calls, eb->calls);
		out_pair(d, a->name, dstats_mean(a), dstats_mean(b));
		if (isfinite(v->change_pct))
			output_table_add(&d->t, "%+.1f%%", v->change_pct);
		else
			output_table_add(&d->t, "new");
		out_pair(d, a->name, a->p50, b->p50);
		out_pair(d, a->name, a->p99, b->p99);
		if (!strcmp(v->test, "none"))
			output_table_add(&d->t, "(ratio)%s", fails ? " FAIL" : "");
		else if (!strcmp(v->test, "exact"))
			output_table_add(&d->t, "%s (exact)%s", v->beyond ? "beyond" : "same",
			                 fails ? " FAIL" : "");
		else
			output_table_add(&d->t, "%s (z %.1f)%s", v->beyond ? "beyond" : "within",
			                 v->z, fails ? " FAIL" : "");
	}
}

/* A region of one side only. */
static void
out_alone(struct diff_out *d, const struct dentry *e, const char *status)
{
	if (d->o->format == FORMAT_JSON) {
		struct jw *w = json_row(d);

		output_jw_str(w, "status", status);
		output_jw_str(w, "region", e->key);
		output_jw_u64(w, "calls", e->calls);
		output_jw_close(w);
	} else if (d->o->format == FORMAT_CSV) {
		output_csv_str(status);
		output_csv_str(e->key);
		for (size_t i = 2; i < ARRAY_SIZE(diff_csv_head); i++)
			if (i == 3 && !strcmp(status, "gone"))
				output_csv_u64(e->calls);
			else if (i == 4 && !strcmp(status, "new"))
				output_csv_u64(e->calls);
			else
				output_csv_str("");
		output_csv_end();
	} else {
		output_table_add(&d->t, "%s", e->key);
		output_table_add(&d->t, "%s", status);
		if (!strcmp(status, "new"))
			output_table_add(&d->t, "- -> %" PRIu64, e->calls);
		else
			output_table_add(&d->t, "%" PRIu64 " -> -", e->calls);
		for (size_t i = 3; i < ARRAY_SIZE(diff_head); i++)
			output_table_add(&d->t, "%s", "");
	}
}

/* The rows of entries @ea and @eb, one key; sets d->failed where the gate trips. */
static void
diff_entry(struct diff_out *d, const struct dentry *ea, const struct dentry *eb, bool *seen)
{
	const struct opts *o = d->o;

	for (size_t k = 0; k < ea->n_ev; k++) {
		const struct dstats *a = &ea->ev[k], *b = find_event(eb, a->name);
		bool fails = false;

		if (!b)
			continue;
		struct verdict v = compare(a, b);
		if (o->event && event_is(a->name, o->event)) {
			*seen = true;
			if (v.beyond && o->fail_above_set && v.change_pct > o->fail_above)
				fails = true;
			if (v.beyond && o->fail_below_set && v.change_pct < -o->fail_below)
				fails = true;
		}
		if (o->event && !event_is(a->name, o->event) && d->o->format == FORMAT_TABLE &&
		    strcmp(a->name, "wall"))
			continue; /* the table shows the event gated and the wall time */
		if (fails) {
			d->failed = true;
			d->n_failed++;
		}
		out_row(d, ea, eb, a, b, &v, fails);
	}
}

/* Whether a region of both @a and @b counted --event (diff_entry()'s "seen"). */
static bool
diff_seen(const struct dfile *a, const struct dfile *b, const char *event)
{
	size_t i = 0, j = 0;

	while (i < a->n && j < b->n) {
		int c = strcmp(a->e[i].key, b->e[j].key);

		if (c) {
			i += c < 0;
			j += c > 0;
			continue;
		}
		for (size_t k = 0; k < a->e[i].n_ev; k++)
			if (event_is(a->e[i].ev[k].name, event) &&
			    find_event(&b->e[j], a->e[i].ev[k].name))
				return true;
		i++;
		j++;
	}
	return false;
}

int
diff_compare(const struct diff_file *base, const struct diff_file *cur, const struct opts *o)
{
	/* Call paths where both files have them. */
	bool by_path = base->has_paths && cur->has_paths;
	const struct dfile *a = by_path ? &base->paths : &base->names;
	const struct dfile *b = by_path ? &cur->paths : &cur->names;
	static char buf[1 << 16];
	struct diff_out d = {
	        .o = o,
	        .t = {.ncols = ARRAY_SIZE(diff_head), .head = diff_head, .right = diff_right},
	        .w = {.f = stdout, .buf = buf, .cap = sizeof(buf)}};
	bool seen = false;

	/* JSON is written as it goes: nothing at all when the event is not found. */
	if (o->format == FORMAT_JSON && o->event && !diff_seen(a, b, o->event))
		goto not_seen;
	if (o->format == FORMAT_JSON) {
		output_jw_open(&d.w, NULL);
		output_jw_int(&d.w, "format_version", PMC_JSON_FORMAT_VERSION);
		output_jw_str(&d.w, "by", by_path ? "call_path" : "name");
		output_jw_real(&d.w, "noise_z", DIFF_Z);
		output_jw_key(&d.w, "regions");
		output_jw_raw(&d.w, "[");
	} else if (o->format == FORMAT_CSV) {
		output_csv_header(diff_csv_head, ARRAY_SIZE(diff_csv_head));
	}
	size_t i = 0, j = 0;
	while (i < a->n || j < b->n) {
		int c = i >= a->n ? 1 : j >= b->n ? -1 : strcmp(a->e[i].key, b->e[j].key);

		if (c < 0)
			out_alone(&d, &a->e[i++], "gone");
		else if (c > 0)
			out_alone(&d, &b->e[j++], "new");
		else
			diff_entry(&d, &a->e[i++], &b->e[j++], &seen);
	}
	if (o->event && !seen)
		goto not_seen;
	if (o->format == FORMAT_JSON) {
		output_jw_raw(&d.w, d.n_rows ? "\n  ]" : "]");
		d.w.indent = 2;
		d.w.first = false;
		output_jw_bool(&d.w, "failed", d.failed);
		output_jw_close(&d.w);
		output_jw_raw(&d.w, "\n");
		output_jw_flush(&d.w);
	} else if (o->format == FORMAT_TABLE) {
		printf("regions compared by %s: BASE -> CURRENT; beyond the noise: |z| >= %.0f "
		       "(rank test over the histograms), or any change of an exact count\n\n",
		       by_path ? "call path" : "name", DIFF_Z);
		if (d.t.n)
			output_table_print(&d.t, stdout);
		else
			puts("no region in either file");
		if (d.failed)
			printf("\n%zu figure%s past --fail-%s: exit 1\n", d.n_failed,
			       d.n_failed == 1 ? "" : "s", o->fail_above_set ? "above" : "below");
	}
	output_table_free(&d.t);
	return d.failed ? EXIT_FAIL : 0;

not_seen:;
	_cleanup_free_ char *ev = output_escape_text(o->event);

	fprintf(stderr,
	        "pmcctl: diff: no region of both files counted event '%s' (wall is the wall "
	        "time)\n",
	        ev);
	output_table_free(&d.t);
	return DIFF_EXIT_BAD_INPUT;
}

int
cmd_diff(int sock, const struct command *cmd, const struct opts *o)
{
	struct diff_file *a = diff_file_load(o->files[0]);
	struct diff_file *b = diff_file_load(o->files[1]);
	int r = diff_compare(a, b, o);

	diff_file_free(a);
	diff_file_free(b);
	if (fflush(stdout) || ferror(stdout))
		pmcctl_fail("writing output: %s", strerror(errno));
	return r;
}
