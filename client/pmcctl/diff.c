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
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmcctl/pmcctl.h"

#define DIFF_EXIT_BAD_INPUT 2
#define DIFF_MAX_FILE (1ull << 30) /* a dump of 262,144 regions is far below */
#define DIFF_Z 3.0

/* One event (or the wall time) of a region, over the processes of its program. */
struct dstats {
	const char *name; /* borrowed from the JSON */
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

struct diff_file {
	json_t *root;
	struct dfile names, paths;
	bool has_paths; /* some node listed */
	char *why;      /* what is wrong with it */
	jmp_buf bad;    /* where a reader that finds it wrong goes back to */
};

/* Says what is wrong with @f's file and leaves the reading (diff_file_parse()). */
static void __attribute__((noreturn, format(printf, 2, 3)))
bad_input(struct dfile *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vasprintf(&f->file->why, fmt, ap) < 0)
		oom();
	va_end(ap);
	longjmp(f->file->bad, 1);
}

static double
jnum(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Adds the STATS object @st of a region of @calls runs to @d. */
static void
dstats_add(struct dfile *f, struct dstats *d, const json_t *st, uint64_t calls)
{
	double sum = jnum(st, "sum"), mean = jnum(st, "mean"), sd = jnum(st, "stddev");
	double min = jnum(st, "min"), max = jnum(st, "max");

	if (!json_is_object(st) || !isfinite(sum) || !isfinite(mean) || !isfinite(min) ||
	    !isfinite(max) || sum < 0)
		bad_input(f, "a figure of '%s' has no sum, mean, min or max", d->name);
	if (!isfinite(sd))
		sd = 0;
	if (!d->procs || min < d->min)
		d->min = min;
	if (!d->procs || max > d->max)
		d->max = max;
	if (!d->procs) {
		d->p50 = jnum(st, "p50");
		d->p99 = jnum(st, "p99");
	}
	d->n += (double)calls;
	d->sum += sum;
	d->sumsq += (double)calls * (sd * sd + mean * mean);
	d->procs++;

	const json_t *b = json_object_get(st, "buckets");
	size_t i;
	const json_t *row;
	if (!json_is_array(b)) {
		d->no_buckets = true;
		return;
	}
	json_array_foreach(b, i, row)
	{
		const json_t *lo = json_array_get(row, 0), *hi = json_array_get(row, 1),
		             *c = json_array_get(row, 2);

		if (!json_is_integer(lo) || !json_is_integer(hi) || !json_is_integer(c) ||
		    json_integer_value(lo) < 0 || json_integer_value(hi) < json_integer_value(lo) ||
		    json_integer_value(c) < 0)
			bad_input(f, "a bucket of '%s' is not [low, high, count]", d->name);
		hist_push(&d->h, (uint64_t)json_integer_value(lo), (uint64_t)json_integer_value(hi),
		          (uint64_t)json_integer_value(c));
	}
}

static struct dstats *
dentry_event(struct dentry *e, const char *name)
{
	for (size_t i = 0; i < e->n_ev; i++)
		if (!strcmp(e->ev[i].name, name))
			return &e->ev[i];
	struct dstats *g = reallocarray(e->ev, e->n_ev + 1, sizeof(*g));
	if (!g)
		oom();
	e->ev = g;
	memset(&e->ev[e->n_ev], 0, sizeof(*e->ev));
	e->ev[e->n_ev].name = name;
	return &e->ev[e->n_ev++];
}

/* Adds a region object (or a call path node) @r of @f under "comm;@name". */
static void
dfile_add(struct dfile *f, const json_t *r, const char *name)
{
	const char *comm = json_string_value(json_object_get(r, "comm"));
	const json_t *count = json_object_get(r, "count");
	const json_t *events = json_object_get(r, "events");

	if (!name || !comm || !json_is_integer(count) || json_integer_value(count) < 0 ||
	    !json_is_object(events))
		bad_input(f, "a region without name, comm, count or events: not a file of "
		             "'pmcctl dump --format json'");
	if (f->n == f->cap) {
		f->cap = f->cap ? 2 * f->cap : 64;
		struct dentry *g = reallocarray(f->e, f->cap, sizeof(*g));
		if (!g)
			oom();
		f->e = g;
	}
	struct dentry *e = &f->e[f->n++];
	memset(e, 0, sizeof(*e));
	if (asprintf(&e->key, "%s;%s", comm, name) < 0)
		oom();
	e->calls = (uint64_t)json_integer_value(count);
	dstats_add(f, dentry_event(e, "wall"), json_object_get(r, "wall_ns"), e->calls);
	const char *ev;
	const json_t *st;
	json_object_foreach((json_t *)events, ev, st)
	        dstats_add(f, dentry_event(e, ev), st, e->calls);
	/* Derived ratios (ipc, miss ratios): one value per process. */
	json_object_foreach(json_object_get(r, "derived"), ev, st)
	{
		struct dstats *d = dentry_event(e, ev);

		if (!json_is_number(st))
			continue; /* null: not finite */
		d->ratio = d->no_buckets = true;
		d->n += (double)e->calls;
		d->sum += json_number_value(st) * (double)e->calls;
		d->p50 = d->p99 = NAN;
		d->procs++;
	}
}

static void
dfile_add_nodes(struct dfile *f, const json_t *nodes)
{
	size_t i;
	const json_t *nd;

	if (!json_is_array(nodes))
		return;
	json_array_foreach(nodes, i, nd)
	{
		dfile_add(f, nd, json_string_value(json_object_get(nd, "path")));
		dfile_add_nodes(f, json_object_get(nd, "children"));
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
			struct dstats *s = &e->ev[k], *d = dentry_event(to, s->name);

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
	json_decref(df->root);
	free(df->why);
	free(df);
}

/* Reads @df->root into its views; what is wrong goes back to diff_file_parse(). */
static void
diff_file_read(struct diff_file *df)
{
	struct dfile *f = &df->names;
	const json_t *regions = json_object_get(df->root, "regions");
	if (!json_is_array(regions))
		bad_input(f, "no \"regions\" array: not a file of 'pmcctl dump --format json' "
		             "or 'pmcctl run --format json'");
	const json_t *version = json_object_get(df->root, "format_version");
	if (version && (!json_is_integer(version) || json_integer_value(version) < 1))
		bad_input(f, "\"format_version\" is not a version number");
	if (version && json_integer_value(version) > PMC_JSON_FORMAT_VERSION)
		bad_input(f,
		          "written by a newer pmcctl (format version %" JSON_INTEGER_FORMAT
		          "; this one reads up to %d): compare it with that pmcctl",
		          json_integer_value(version), PMC_JSON_FORMAT_VERSION);

	size_t i;
	const json_t *t;
	json_array_foreach(regions, i, t)
	        dfile_add(f, t, json_string_value(json_object_get(t, "name")));
	dfile_merge(f);
	json_array_foreach(json_object_get(df->root, "tree"), i, t)
	        dfile_add_nodes(&df->paths, json_object_get(t, "tree"));
	df->has_paths = df->paths.n > 0;
	dfile_merge(&df->paths);
}

int
diff_file_parse(const void *buf, size_t len, struct diff_file **out, char **why)
{
	const unsigned char *c = buf;
	json_error_t err;
	struct diff_file *df = calloc(1, sizeof(*df));

	if (!df)
		oom();
	df->names.file = df->paths.file = df;
	df->paths.by_path = true;
	if (len > DIFF_MAX_FILE) {
		if (asprintf(&df->why, "%zu bytes, over the %llu that diff reads", len,
		             DIFF_MAX_FILE) < 0)
			oom();
	} else if (len >= 2 && c[0] == 0x1f && c[1] == 0x8b) {
		df->why = strdup("gzip-compressed (a pprof profile?): diff reads the JSON of "
		                 "'pmcctl dump --format json'; for pprof profiles: go tool pprof "
		                 "-diff_base");
		if (!df->why)
			oom();
	} else if (!(df->root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &err))) {
		if (asprintf(&df->why, "not valid JSON (line %d, column %d: %s)", err.line,
		             err.column, err.text) < 0)
			oom();
	} else if (!setjmp(df->bad)) {
		diff_file_read(df);
		*out = df;
		return 0;
	}
	*why = TAKE_PTR(df->why);
	diff_file_free(df);
	return -EBADMSG;
}

/* Reads the file at @path, or says why it cannot and exits 2. */
static struct diff_file *
diff_file_load(const char *path)
{
	_cleanup_free_ char *safe = escape_text(path), *why = NULL, *buf = NULL;
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
		oom();
	if (!why) {
		buf = malloc((size_t)st.st_size + 1);
		if (!buf)
			oom();
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
		oom();
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
	return !strcmp(name, "wall") || event_counts_ns(name);
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
	json_t *rows;
	bool failed;
	size_t n_failed;
};

static void
fmt_value(char *buf, size_t len, const char *event, double v)
{
	if (is_time(event))
		format_time(buf, len, v);
	else
		format_count(buf, len, v, false);
}

static void
out_pair(struct diff_out *d, const char *event, double a, double b)
{
	char x[32], y[32];

	fmt_value(x, sizeof(x), event, a);
	fmt_value(y, sizeof(y), event, b);
	table_add(&d->t, "%s -> %s", x, y);
}

/* One compared (region, event). @fails: this row trips the gate. */
static void
out_row(struct diff_out *d, const struct dentry *ea, const struct dentry *eb,
        const struct dstats *a, const struct dstats *b, const struct verdict *v, bool fails)
{
	const char *region = ea->key;

	if (d->o->format == FORMAT_JSON) {
		json_t *row = jobject(), *base = jobject(), *cur = jobject();

		jset(row, "status", jstr("both"));
		jset(row, "region", jstr(region));
		jset(row, "event", jstr(a->name));
		jset(base, "calls", ju64(ea->calls));
		jset(base, "mean", jreal(dstats_mean(a)));
		jset(base, "p50", jreal(a->p50));
		jset(base, "p99", jreal(a->p99));
		jset(cur, "calls", ju64(eb->calls));
		jset(cur, "mean", jreal(dstats_mean(b)));
		jset(cur, "p50", jreal(b->p50));
		jset(cur, "p99", jreal(b->p99));
		jset(row, "base", base);
		jset(row, "current", cur);
		jset(row, "change_pct", jreal(v->change_pct));
		jset(row, "z", jreal(v->z));
		jset(row, "test", jstr(v->test));
		jset(row, "beyond_noise", json_boolean(v->beyond));
		jset(row, "failed", json_boolean(fails));
		jappend(d->rows, row);
	} else if (d->o->format == FORMAT_CSV) {
		csv_str("both");
		csv_str(region);
		csv_str(a->name);
		csv_u64(ea->calls);
		csv_u64(eb->calls);
		csv_real(dstats_mean(a));
		csv_real(dstats_mean(b));
		csv_real(v->change_pct);
		csv_real(a->p50);
		csv_real(b->p50);
		csv_real(a->p99);
		csv_real(b->p99);
		csv_real(v->z);
		csv_str(v->test);
		csv_bool(v->beyond);
		csv_bool(fails);
		csv_end();
	} else {
		table_add(&d->t, "%s", region);
		table_add(&d->t, "%s", a->name);
		table_add(&d->t, "%" PRIu64 " -> %" PRIu64, ea->calls, eb->calls);
		out_pair(d, a->name, dstats_mean(a), dstats_mean(b));
		if (isfinite(v->change_pct))
			table_add(&d->t, "%+.1f%%", v->change_pct);
		else
			table_add(&d->t, "new");
		out_pair(d, a->name, a->p50, b->p50);
		out_pair(d, a->name, a->p99, b->p99);
		if (!strcmp(v->test, "none"))
			table_add(&d->t, "(ratio)%s", fails ? " FAIL" : "");
		else if (!strcmp(v->test, "exact"))
			table_add(&d->t, "%s (exact)%s", v->beyond ? "beyond" : "same",
			          fails ? " FAIL" : "");
		else
			table_add(&d->t, "%s (z %.1f)%s", v->beyond ? "beyond" : "within", v->z,
			          fails ? " FAIL" : "");
	}
}

/* A region of one side only. */
static void
out_alone(struct diff_out *d, const struct dentry *e, const char *status)
{
	if (d->o->format == FORMAT_JSON) {
		json_t *row = jobject();

		jset(row, "status", jstr(status));
		jset(row, "region", jstr(e->key));
		jset(row, "calls", ju64(e->calls));
		jappend(d->rows, row);
	} else if (d->o->format == FORMAT_CSV) {
		csv_str(status);
		csv_str(e->key);
		for (size_t i = 2; i < ARRAY_SIZE(diff_csv_head); i++)
			if (i == 3 && !strcmp(status, "gone"))
				csv_u64(e->calls);
			else if (i == 4 && !strcmp(status, "new"))
				csv_u64(e->calls);
			else
				csv_str("");
		csv_end();
	} else {
		table_add(&d->t, "%s", e->key);
		table_add(&d->t, "%s", status);
		if (!strcmp(status, "new"))
			table_add(&d->t, "- -> %" PRIu64, e->calls);
		else
			table_add(&d->t, "%" PRIu64 " -> -", e->calls);
		for (size_t i = 3; i < ARRAY_SIZE(diff_head); i++)
			table_add(&d->t, "%s", "");
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

int
diff_compare(const struct diff_file *base, const struct diff_file *cur, const struct opts *o)
{
	/* Call paths where both files have them. */
	bool by_path = base->has_paths && cur->has_paths;
	const struct dfile *a = by_path ? &base->paths : &base->names;
	const struct dfile *b = by_path ? &cur->paths : &cur->names;
	struct diff_out d = {
	        .o = o,
	        .t = {.ncols = ARRAY_SIZE(diff_head), .head = diff_head, .right = diff_right}};
	bool seen = false;

	if (o->format == FORMAT_JSON)
		d.rows = jarray();
	else if (o->format == FORMAT_CSV)
		csv_header(diff_csv_head, ARRAY_SIZE(diff_csv_head));
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
	if (o->event && !seen) {
		_cleanup_free_ char *ev = escape_text(o->event);

		fprintf(stderr,
		        "pmcctl: diff: no region of both files counted event '%s' (wall is the "
		        "wall time)\n",
		        ev);
		table_free(&d.t);
		json_decref(d.rows);
		return DIFF_EXIT_BAD_INPUT;
	}
	if (o->format == FORMAT_JSON) {
		json_t *root = jobject();

		jset(root, "format_version", json_integer(PMC_JSON_FORMAT_VERSION));
		jset(root, "by", jstr(by_path ? "call_path" : "name"));
		jset(root, "noise_z", jreal(DIFF_Z));
		jset(root, "regions", d.rows);
		jset(root, "failed", json_boolean(d.failed));
		json_print(root);
	} else if (o->format == FORMAT_TABLE) {
		printf("regions compared by %s: BASE -> CURRENT; beyond the noise: |z| >= %.0f "
		       "(rank test over the histograms), or any change of an exact count\n\n",
		       by_path ? "call path" : "name", DIFF_Z);
		if (d.t.n)
			table_print(&d.t, stdout);
		else
			puts("no region in either file");
		if (d.failed)
			printf("\n%zu figure%s past --fail-%s: exit 1\n", d.n_failed,
			       d.n_failed == 1 ? "" : "s", o->fail_above_set ? "above" : "below");
	}
	table_free(&d.t);
	return d.failed ? EXIT_FAIL : 0;
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
		fail("writing output: %s", strerror(errno));
	return r;
}
