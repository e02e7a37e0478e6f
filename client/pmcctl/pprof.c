/* pmcctl's pprof output (dump, query and run with --format pprof): the call path trees as a
 * gzip-compressed profile.proto of google/pprof, for go tool pprof, Pyroscope, Parca and the
 * OpenTelemetry converter.
 *
 * Each call path node is a sample: its stack is the path, leaf first, then the program's
 * name as the root frame (one Function and Location per name), and its values are the
 * node's self figures (calls, wall time, each event), so that pprof's flat is self and its
 * cum inclusive. What the trees do not hold (regions of older clients, past path-limit) goes
 * in as single-frame stacks under the program's name, label call_path=untracked. pprof only
 * adds values up: percentiles stay in JSON.
 *
 * The encoder is written from the protocol buffer encoding and profile.proto's field
 * numbers (Profile, ValueType, Sample, Label, Location, Line, Function); nothing else of
 * protobuf is needed to write it. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/pprof.h"
#include "pmcctl/query.h"
#include "pmcctl/run-tasks.h"
#include "pmcctl/run-whole.h"
#include "pmcctl/tree.h"

/* The frame of run's whole-program samples, as its tables name the rows. */
#define PPROF_WHOLE_FRAME "(whole program)"

/* profile.proto's field numbers. */
enum {
	PROFILE_SAMPLE_TYPE = 1,
	PROFILE_SAMPLE = 2,
	PROFILE_LOCATION = 4,
	PROFILE_FUNCTION = 5,
	PROFILE_STRING_TABLE = 6,
	PROFILE_TIME_NANOS = 9,
	PROFILE_COMMENT = 13,
	PROFILE_DEFAULT_SAMPLE_TYPE = 14,
	VALUE_TYPE_TYPE = 1,
	VALUE_TYPE_UNIT = 2,
	SAMPLE_LOCATION_ID = 1,
	SAMPLE_VALUE = 2,
	SAMPLE_LABEL = 3,
	LABEL_KEY = 1,
	LABEL_STR = 2,
	LABEL_NUM = 3,
	LOCATION_ID = 1,
	LOCATION_LINE = 4,
	LINE_FUNCTION_ID = 1,
	FUNCTION_ID = 1,
	FUNCTION_NAME = 2,
	FUNCTION_SYSTEM_NAME = 3,
};

enum { WT_VARINT = 0, WT_LEN = 2 };

/* A growing buffer of encoded bytes. */
struct pb {
	uint8_t *p;
	size_t n, cap;
};

static void
pb_put(struct pb *b, const void *data, size_t len)
{
	if (b->n + len > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->n + len)
			cap *= 2;
		uint8_t *grown = realloc(b->p, cap);
		if (!grown)
			pmcctl_oom();
		b->p = grown;
		b->cap = cap;
	}
	if (len)
		memcpy(b->p + b->n, data, len);
	b->n += len;
}

static void
pb_varint(struct pb *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;

	do {
		tmp[n] = v & 0x7f;
		v >>= 7;
		if (v)
			tmp[n] |= 0x80;
		n++;
	} while (v);
	pb_put(b, tmp, n);
}

static void
pb_tag(struct pb *b, unsigned field, unsigned wt)
{
	pb_varint(b, (uint64_t)field << 3 | wt);
}

/* An integer field (int64 and uint64 are both plain varints); zero, the default, left out. */
static void
pb_int(struct pb *b, unsigned field, int64_t v)
{
	if (!v)
		return;
	pb_tag(b, field, WT_VARINT);
	pb_varint(b, (uint64_t)v);
}

static void
pb_bytes(struct pb *b, unsigned field, const void *data, size_t len)
{
	pb_tag(b, field, WT_LEN);
	pb_varint(b, len);
	pb_put(b, data, len);
}

/* Appends @sub as the message field @field of @b and empties @sub for the next one. */
static void
pb_msg(struct pb *b, unsigned field, struct pb *sub)
{
	pb_bytes(b, field, sub->p, sub->n);
	sub->n = 0;
}

/* The string table: index 0 is "", as profile.proto requires. */
struct strtab {
	char **s;
	size_t n, cap;
	uint32_t *slot; /* open addressing: index + 1, 0 free */
	size_t n_slots;
	uint8_t *fn; /* per string: bit 0 a region's function used, bit 1 a program's */
};

static uint64_t
str_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325u;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3u;
	return h;
}

static void
strtab_rehash(struct strtab *t)
{
	size_t n = t->n_slots ? t->n_slots * 2 : 1024;
	uint32_t *slot = calloc(n, sizeof(*slot));

	if (!slot)
		pmcctl_oom();
	for (size_t i = 0; i < t->n; i++) {
		size_t h = str_hash(t->s[i]) & (n - 1);

		while (slot[h])
			h = (h + 1) & (n - 1);
		slot[h] = (uint32_t)i + 1;
	}
	free(t->slot);
	t->slot = slot;
	t->n_slots = n;
}

static int64_t
strtab_id(struct strtab *t, const char *s)
{
	if (2 * (t->n + 1) > t->n_slots)
		strtab_rehash(t);
	size_t h = str_hash(s) & (t->n_slots - 1);
	for (; t->slot[h]; h = (h + 1) & (t->n_slots - 1))
		if (!strcmp(t->s[t->slot[h] - 1], s))
			return t->slot[h] - 1;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 256;
		char **s2 = reallocarray(t->s, cap, sizeof(*s2));
		uint8_t *fn = realloc(t->fn, cap);

		if (!s2 || !fn)
			pmcctl_oom();
		memset(fn + t->cap, 0, cap - t->cap);
		t->s = s2;
		t->fn = fn;
		t->cap = cap;
	}
	t->s[t->n] = strdup(s);
	if (!t->s[t->n])
		pmcctl_oom();
	t->slot[h] = (uint32_t)++t->n;
	return (int64_t)t->n - 1;
}

/* The whole profile as it is built. */
struct pprof {
	struct strtab str;
	struct pb out; /* the Profile's samples, then the rest */
	struct pb smp; /* one Sample */
	struct pb tmp; /* one Label, or a packed field */
	char **events; /* the events of the sample types, after calls and wall */
	size_t n_events;
	int64_t *values; /* 2 + n_events */
	uint64_t *stack; /* location ids, leaf first */
	size_t stack_cap;
};

/* Location and Function ids: 2 per string, a region's and a program's (never 0). */
static uint64_t
pprof_frame(struct pprof *p, const char *name, bool program)
{
	int64_t s = strtab_id(&p->str, name[0] ? name : "?");

	p->str.fn[s] |= program ? 2 : 1;
	return 2 * (uint64_t)s + program;
}

static ssize_t
pprof_event_index(struct pprof *p, const char *name)
{
	for (size_t i = 0; i < p->n_events; i++)
		if (!strcmp(p->events[i], name))
			return (ssize_t)i;
	return -1;
}

static void
pprof_add_event(struct pprof *p, const char *name)
{
	if (pprof_event_index(p, name) >= 0)
		return;
	char **grown = reallocarray(p->events, p->n_events + 1, sizeof(*grown));
	if (!grown)
		pmcctl_oom();
	p->events = grown;
	p->events[p->n_events++] = (char *)name; /* borrowed from the reply */
}

static void
pprof_label_str(struct pprof *p, const char *key, const char *v)
{
	pb_int(&p->tmp, LABEL_KEY, strtab_id(&p->str, key));
	pb_int(&p->tmp, LABEL_STR, strtab_id(&p->str, v));
	pb_msg(&p->smp, SAMPLE_LABEL, &p->tmp);
}

static void
pprof_label_num(struct pprof *p, const char *key, int64_t v)
{
	pb_int(&p->tmp, LABEL_KEY, strtab_id(&p->str, key));
	pb_tag(&p->tmp, LABEL_NUM, WT_VARINT); /* 0 too: a pid or uid 0 is a value */
	pb_varint(&p->tmp, (uint64_t)v);
	pb_msg(&p->smp, SAMPLE_LABEL, &p->tmp);
}

/* Starts a Sample in p->smp: @depth location ids in p->stack, then p->values. */
static void
pprof_sample_values(struct pprof *p, size_t depth)
{
	for (size_t i = 0; i < depth; i++)
		pb_varint(&p->tmp, p->stack[i]);
	pb_msg(&p->smp, SAMPLE_LOCATION_ID, &p->tmp);
	for (size_t i = 0; i < 2 + p->n_events; i++)
		pb_varint(&p->tmp, (uint64_t)p->values[i]);
	pb_msg(&p->smp, SAMPLE_VALUE, &p->tmp);
}

/* Adds a Sample: @depth location ids in p->stack, p->values, the labels of @r's process and
 * of its multiplexed events. */
static void
pprof_sample(struct pprof *p, size_t depth, const Pmc__RegionStats *r, bool untracked)
{
	pprof_sample_values(p, depth);
	pprof_label_num(p, "pid", r->pid);
	pprof_label_str(p, "comm", r->comm[0] ? r->comm : "?");
	pprof_label_num(p, "uid", r->uid);
	if (r->cgroup[0] && strcmp(r->cgroup, "/"))
		pprof_label_str(p, "container", r->cgroup);
	if (untracked)
		pprof_label_str(p, "call_path", "untracked");
	for (size_t i = 0; i < r->n_events; i++) {
		const Pmc__EventStats *e = r->events[i];
		char text[160];

		if (!e->scaled_count)
			continue;
		/* "cycles: 12 of 40 runs scaled, running 0.54 of the time" */
		snprintf(text, sizeof(text), "%.100s: %llu of %llu runs scaled, running %.2f",
		         e->name, (unsigned long long)e->scaled_count, (unsigned long long)r->count,
		         e->scaled_ratio);
		pprof_label_str(p, "multiplexed", text);
	}
	pb_msg(&p->out, PROFILE_SAMPLE, &p->smp);
}

static void
pprof_stack_room(struct pprof *p, size_t depth)
{
	if (depth <= p->stack_cap)
		return;
	uint64_t *grown = reallocarray(p->stack, depth, sizeof(*grown));
	if (!grown)
		pmcctl_oom();
	p->stack = grown;
	p->stack_cap = depth;
}

/* The selected nodes of @t as samples, @r the RegionStats of its nodes (node i: @r[i]). */
static void
pprof_tree(struct pprof *p, const struct tree *t, Pmc__RegionStats *const *r)
{
	for (size_t i = 0; i < t->n; i++) {
		const struct tree_node *nd = &t->node[i];
		size_t depth = 0;

		if (!nd->selected)
			continue;
		pprof_stack_room(p, nd->depth + 2);
		for (const struct tree_node *a = nd; a; a = tree_parent(t, a))
			p->stack[depth++] = pprof_frame(p, tree_name(t, a), false);
		p->stack[depth++] = pprof_frame(p, t->comm, true);

		memset(p->values, 0, (2 + p->n_events) * sizeof(*p->values));
		p->values[0] = (int64_t)r[i]->count;
		p->values[1] = nd->self_wall;
		for (size_t e = 0; e < nd->n_ev; e++)
			p->values[2 + pprof_event_index(p, tree_event_name(t, nd, e))] =
			        t->ev[nd->ev + e].self;
		pprof_sample(p, depth, r[i], false);
	}
}

/* What the call path nodes of a flat region do not hold: count, wall, then its events
 * (unsigned: a reply's figures may be anything, and its differences wrap, never overflow). */
struct rest {
	const Pmc__RegionStats *r;
	uint64_t *v;
};

static int
rest_cmp(const void *a, const void *b)
{
	return query_region_key_cmp(&((const struct rest *)a)->r, &((const struct rest *)b)->r);
}

static void
rest_take(struct rest *rest, size_t n, const Pmc__RegionStats *node)
{
	struct rest key = {.r = node};
	struct rest *f = bsearch(&key, rest, n, sizeof(*rest), rest_cmp);

	if (!f)
		return;
	f->v[0] -= node->count;
	f->v[1] -= call_stats_or_zero(node->wall_ns)->sum;
	for (size_t e = 0; e < node->n_events; e++) {
		/* The first of @f's events of that name. */
		for (size_t i = 0; i < f->r->n_events; i++) {
			if (strcmp(f->r->events[i]->name, node->events[e]->name))
				continue;
			f->v[2 + i] -= call_stats_or_zero(node->events[e]->stats)->sum;
			break;
		}
	}
}

/* Adds a "(whole program)" sample under the root frame @comm (a process name, borrowed):
 * @calls runs, @wall ns, @v the values of @w's events (by @w's index); labels pid @pid, comm,
 * uid (pmcctl's: the command runs as it) and multiplexed where @scaled. */
static void
pprof_whole_sample(struct pprof *p, const struct whole *w, const char *comm, int64_t pid,
                   int64_t calls, double wall, const double *v, bool scaled)
{
	pprof_stack_room(p, 2);
	p->stack[0] = pprof_frame(p, PPROF_WHOLE_FRAME, false);
	p->stack[1] = pprof_frame(p, comm[0] ? comm : "?", true);
	memset(p->values, 0, (2 + p->n_events) * sizeof(*p->values));
	p->values[0] = calls;
	p->values[1] = (int64_t)(wall + 0.5);
	for (size_t i = 0; i < w->n; i++)
		p->values[2 + pprof_event_index(p, w->names[i])] = (int64_t)(v[i] + 0.5);
	pprof_sample_values(p, 2);
	pprof_label_num(p, "pid", pid);
	pprof_label_str(p, "comm", comm[0] ? comm : "?");
	pprof_label_num(p, "uid", (int64_t)getuid());
	pprof_label_str(p, "call_path", "whole-program");
	if (scaled)
		pprof_label_str(p, "multiplexed",
		                "whole program: extrapolated by the kernel's "
		                "time running");
	pb_msg(&p->out, PROFILE_SAMPLE, &p->smp);
}

/* run's whole-program figures @w as samples (pprof_write()): one per process of a single run
 * where the command ran several and each one's figures came, else one of the sums over the
 * runs, named after @argv0's base name. */
static void
pprof_whole(struct pprof *p, const struct whole *w, const char *argv0)
{
	double v[WHOLE_MAX_EVENTS];
	struct whole_proc *procs = NULL;
	size_t n_procs = 0;
	bool scaled = false;

	if (!w || !w->n || !w->runs)
		return;
	if (w->runs == 1 && !w->lost)
		run_tasks_processes(w, &procs, &n_procs);
	if (n_procs > 1) {
		for (size_t k = 0; k < n_procs; k++)
			pprof_whole_sample(p, w, procs[k].comm, procs[k].pid, 1,
			                   (pid_t)procs[k].pid == w->child ? w->wall.sum : 0,
			                   procs[k].v, procs[k].scaled);
		free(procs);
		return;
	}
	free(procs);
	/* The command's name as the kernel keeps it (15 bytes), as the regions' root frame. */
	const char *base = strrchr(argv0, '/');
	char comm[16];
	snprintf(comm, sizeof(comm), "%s", base ? base + 1 : argv0);
	for (size_t i = 0; i < w->n; i++) {
		v[i] = w->ev[i].sum;
		scaled |= w->scaled[i];
	}
	pprof_whole_sample(p, w, comm, w->child, w->runs, w->wall.sum, v, scaled);
}

static void
pprof_encode_tail(struct pprof *p)
{
	/* Sample types: calls, wall, then each event; the wall time shown by default. */
	const char *unit;

	for (size_t i = 0; i < 2 + p->n_events; i++) {
		const char *type = i == 0 ? "calls" : i == 1 ? "wall" : p->events[i - 2];

		unit = i == 0                                              ? "count"
		       : i == 1 || query_event_counts_ns(p->events[i - 2]) ? "nanoseconds"
		                                                           : "count";
		pb_int(&p->tmp, VALUE_TYPE_TYPE, strtab_id(&p->str, type));
		pb_int(&p->tmp, VALUE_TYPE_UNIT, strtab_id(&p->str, unit));
		pb_msg(&p->out, PROFILE_SAMPLE_TYPE, &p->tmp);
	}
	int64_t comment = strtab_id(&p->str, "pmc: per region self figures summed over its "
	                                     "runs; percentiles: pmcctl --format json");
	int64_t wall = strtab_id(&p->str, "wall");
	for (size_t s = 0; s < p->str.n; s++) {
		for (unsigned program = 0; program < 2; program++) {
			if (!(p->str.fn[s] & (1u << program)))
				continue;
			uint64_t id = 2 * s + program;
			pb_int(&p->tmp, FUNCTION_ID, (int64_t)id);
			pb_int(&p->tmp, FUNCTION_NAME, (int64_t)s);
			pb_int(&p->tmp, FUNCTION_SYSTEM_NAME, (int64_t)s);
			pb_msg(&p->out, PROFILE_FUNCTION, &p->tmp);
			/* Location: its id and one Line naming the function. */
			struct pb line = {0};
			pb_int(&line, LINE_FUNCTION_ID, (int64_t)id);
			pb_int(&p->tmp, LOCATION_ID, (int64_t)id);
			pb_msg(&p->tmp, LOCATION_LINE, &line);
			pb_msg(&p->out, PROFILE_LOCATION, &p->tmp);
			free(line.p);
		}
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	pb_int(&p->out, PROFILE_TIME_NANOS, (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
	pb_int(&p->out, PROFILE_COMMENT, comment);
	pb_int(&p->out, PROFILE_DEFAULT_SAMPLE_TYPE, wall);
	for (size_t s = 0; s < p->str.n; s++)
		pb_bytes(&p->out, PROFILE_STRING_TABLE, p->str.s[s], strlen(p->str.s[s]));
}

/* Writes @data gzip-compressed to @fd (borrowed). */
static int
gzip_write(int fd, const void *data, size_t len)
{
	int dupfd = dup(fd);
	if (dupfd < 0)
		return -errno;
	gzFile gz = gzdopen(dupfd, "wb");
	if (!gz) {
		close(dupfd);
		return -ENOMEM;
	}
	const uint8_t *c = data;
	while (len) {
		unsigned step = len > (1u << 30) ? 1u << 30 : (unsigned)len;
		if (gzwrite(gz, c, step) != (int)step) {
			gzclose(gz);
			return -EIO;
		}
		c += step;
		len -= step;
	}
	return gzclose(gz) == Z_OK ? 0 : -EIO;
}

void
pprof_write(const Pmc__QueryReply *flat, const Pmc__QueryReply *tree, const struct opts *o,
            bool (*keep)(int32_t pid, void *ctx), void *ctx, const struct whole *whole)
{
	struct pprof p = {0};
	size_t n_rest = 0;
	_cleanup_free_ struct rest *rest = calloc(flat->n_regions + 1, sizeof(*rest));

	if (!rest)
		pmcctl_oom();
	strtab_id(&p.str, "");
	for (size_t i = 0; i < flat->n_regions; i++) {
		const Pmc__RegionStats *r = flat->regions[i];

		if (keep && !keep(r->pid, ctx))
			continue;
		rest[n_rest].r = r;
		rest[n_rest].v = calloc(2 + r->n_events, sizeof(uint64_t));
		if (!rest[n_rest].v)
			pmcctl_oom();
		rest[n_rest].v[0] = r->count;
		rest[n_rest].v[1] = call_stats_or_zero(r->wall_ns)->sum;
		for (size_t e = 0; e < r->n_events; e++) {
			rest[n_rest].v[2 + e] = call_stats_or_zero(r->events[e]->stats)->sum;
			pprof_add_event(&p, r->events[e]->name);
		}
		n_rest++;
	}
	qsort(rest, n_rest, sizeof(*rest), rest_cmp);
	for (size_t i = 0; tree && i < tree->n_regions; i++)
		for (size_t e = 0; e < tree->regions[i]->n_events; e++)
			pprof_add_event(&p, tree->regions[i]->events[e]->name);
	for (size_t i = 0; whole && i < whole->n; i++)
		pprof_add_event(&p, whole->names[i]);
	p.values = calloc(2 + p.n_events, sizeof(*p.values));
	if (!p.values)
		pmcctl_oom();
	if (whole)
		pprof_whole(&p, whole, o->argv[0]);

	for (size_t i = 0; tree && i < tree->n_regions;) {
		struct tree t;
		Pmc__RegionStats *const *r = tree->regions + i;

		i += tree_build(&t, r, tree->n_regions - i, false);
		if ((!keep || keep(t.pid, ctx)) &&
		    tree_select(&t, (const char *const *)o->regions, o->n_regions)) {
			pprof_tree(&p, &t, r);
			for (size_t k = 0; k < t.n; k++)
				rest_take(rest, n_rest, r[k]);
		}
		tree_free(&t);
	}
	for (size_t i = 0; i < n_rest; i++) {
		const Pmc__RegionStats *r = rest[i].r;

		if ((int64_t)rest[i].v[0] > 0) {
			pprof_stack_room(&p, 2);
			p.stack[0] = pprof_frame(&p, r->name, false);
			p.stack[1] = pprof_frame(&p, r->comm, true);
			memset(p.values, 0, (2 + p.n_events) * sizeof(*p.values));
			p.values[0] = (int64_t)rest[i].v[0];
			p.values[1] = (int64_t)rest[i].v[1];
			for (size_t e = 0; e < r->n_events; e++)
				p.values[2 + pprof_event_index(&p, r->events[e]->name)] =
				        (int64_t)rest[i].v[2 + e];
			pprof_sample(&p, 2, r, true);
		}
		free(rest[i].v);
	}
	pprof_encode_tail(&p);

	fflush(stdout);
	int r = gzip_write(STDOUT_FILENO, p.out.p, p.out.n);
	if (r < 0)
		pmcctl_fail("writing the pprof profile: %s", strerror(-r));

	for (size_t s = 0; s < p.str.n; s++)
		free(p.str.s[s]);
	free(p.str.s);
	free(p.str.slot);
	free(p.str.fn);
	free(p.out.p);
	free(p.smp.p);
	free(p.tmp.p);
	free(p.events);
	free(p.values);
	free(p.stack);
}

int
pprof_cmd(int sock, const struct command *cmd, const struct opts *o)
{
	Pmc__Query q;

	call_query_init(&q, o);
	_cleanup_response_ Pmc__Response *flat = call_query(sock, cmd->name, &q, o);
	call_query_init(&q, o);
	q.tree = true;
	_cleanup_response_ Pmc__Response *tree = call_query(sock, cmd->name, &q, o);
	pprof_write(flat->query, tree->query, o, NULL, NULL, NULL);
	return 0;
}
