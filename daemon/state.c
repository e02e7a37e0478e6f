/* state: protobuf-encoded snapshots of the registry (pmc.State in proto/pmc.proto). */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmc.pb-c.h"
#include "server.h"
#include "util.h"

#define STATE_VERSION 1
#define STATE_MAX_BYTES (1u << 30)

/* Everything one snapshot allocates, freed at once. */
struct arena {
	void **p;
	size_t n, cap;
	int oom;
};

static void *
arena_alloc(struct arena *a, size_t size)
{
	if (a->oom)
		return NULL;
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 256;
		void **v = realloc(a->p, cap * sizeof(*v));
		if (!v) {
			a->oom = 1;
			return NULL;
		}
		a->p = v;
		a->cap = cap;
	}
	void *x = calloc(1, size ? size : 1);
	if (!x) {
		a->oom = 1;
		return NULL;
	}
	return a->p[a->n++] = x;
}

static void
arena_free(struct arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->p[i]);
	free(a->p);
}

static Pmc__StatsState *
save_stats(struct arena *a, const struct stats *st)
{
	Pmc__StatsState *o = arena_alloc(a, sizeof(*o));
	if (!o)
		return NULL;
	pmc__stats_state__init(o);
	o->count = st->count;
	o->sum = st->sum;
	o->min = st->min;
	o->max = st->max;
	o->mean = st->mean;
	o->m2 = st->m2;
	if (!st->hist)
		return o;
	size_t n = 0;
	for (unsigned i = 0; i < STATS_BUCKETS; i++)
		n += stats_hist_get(st, i) != 0;
	Pmc__HistBucket *b = arena_alloc(a, n * sizeof(*b));
	Pmc__HistBucket **bp = arena_alloc(a, n * sizeof(*bp));
	if (!b || !bp)
		return NULL;
	for (unsigned i = 0, k = 0; i < STATS_BUCKETS; i++) {
		uint64_t count = stats_hist_get(st, i);
		if (!count)
			continue;
		pmc__hist_bucket__init(&b[k]);
		b[k].index = i;
		b[k].count = count;
		bp[k] = &b[k];
		k++;
	}
	o->n_hist = n;
	o->hist = bp;
	return o;
}

static int
load_stats(struct stats *st, const Pmc__StatsState *o)
{
	stats_init(st);
	if (!o)
		return 0;
	st->count = o->count;
	st->sum = o->sum;
	st->min = o->min;
	st->max = o->max;
	st->mean = o->mean;
	st->m2 = o->m2;
	/* Blocks only for the groups with a nonzero count; a later pair for an index wins. */
	for (size_t i = 0; i < o->n_hist; i++) {
		if (o->hist[i]->index >= STATS_BUCKETS)
			return -EBADMSG;
		if (stats_hist_set(st, o->hist[i]->index, o->hist[i]->count) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int
write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int
write_atomically(const char *path, const uint8_t *buf, size_t len)
{
	char tmp[4096];
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int r = write_all(fd, buf, len);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	/* The rename itself must reach the disk too. */
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s", path);
	_cleanup_close_ int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0)
		(void)fsync(dfd);
	return 0;
}

/* This boot's id, or "" where the kernel does not say. */
static void
boot_id(char out[64])
{
	out[0] = 0;
	_cleanup_close_ int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, out, 63);
	if (n <= 0) {
		out[0] = 0;
		return;
	}
	out[n] = 0;
	out[strcspn(out, "\n")] = 0;
}

int
state_save(struct server *srv, const char *path)
{
	char boot[64];
	boot_id(boot);
	_cleanup_(arena_free) struct arena a = {0};
	struct registry *reg = &srv->reg;
	Pmc__State st = PMC__STATE__INIT;
	st.version = STATE_VERSION;
	st.saved_ns = util_now_ns(CLOCK_REALTIME);
	st.samples = srv->samples;
	st.batches = srv->batches;
	st.dropped = srv->dropped;
	st.lost = srv->lost;
	st.boot_id = boot;
	st.processes = arena_alloc(&a, reg->n_procs * sizeof(*st.processes));
	for (struct process *p = reg->procs; p && !a.oom; p = p->next) {
		Pmc__ProcessState *ps = arena_alloc(&a, sizeof(*ps));
		if (!ps)
			break;
		pmc__process_state__init(ps);
		st.processes[st.n_processes++] = ps;
		ps->pid = p->pid;
		ps->uid = p->uid;
		ps->start = p->start;
		ps->comm = p->comm;
		ps->received = p->received;
		ps->regions = arena_alloc(&a, p->n_regions * sizeof(*ps->regions));
		for (size_t i = 0; i < p->n_regions && !a.oom; i++) {
			struct region_agg *r = p->regions[i];
			Pmc__RegionState *rs = arena_alloc(&a, sizeof(*rs));
			if (!rs)
				break;
			pmc__region_state__init(rs);
			ps->regions[ps->n_regions++] = rs;
			rs->name = r->name;
			rs->count = r->count;
			rs->wall = save_stats(&a, &r->wall);
			rs->events = arena_alloc(&a, r->n_ev * sizeof(*rs->events));
			for (size_t j = 0; j < r->n_ev && !a.oom; j++) {
				if (!r->seen[j])
					continue;
				Pmc__EventState *es = arena_alloc(&a, sizeof(*es));
				if (!es)
					break;
				pmc__event_state__init(es);
				rs->events[rs->n_events++] = es;
				es->name = p->events[j];
				es->stats = save_stats(&a, &r->ev[j].st);
				es->scaled = r->ev[j].scaled;
				es->ratio_sum = r->ev[j].ratio_sum;
			}
		}
	}
	if (a.oom)
		return -ENOMEM;
	size_t len = pmc__state__get_packed_size(&st);
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	pmc__state__pack(&st, buf);
	int r = write_atomically(path, buf, len);
	if (r == 0)
		srv->state_saved_ns = st.saved_ns;
	return r;
}

static void
state_freep(Pmc__State **s)
{
	if (*s)
		pmc__state__free_unpacked(*s, NULL);
}

static int
load_process(struct server *srv, const Pmc__ProcessState *ps)
{
	struct registry *reg = &srv->reg;
	struct process *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->pid = ps->pid;
	p->uid = ps->uid;
	p->start = ps->start;
	p->received = ps->received;
	p->ended = 1; /* not connected; the first to go if too many have ended */
	snprintf(p->comm, sizeof(p->comm), "%s", ps->comm);
	p->next = reg->procs;
	reg->procs = p;
	reg->n_procs++;
	for (size_t i = 0; i < ps->n_regions; i++) {
		const Pmc__RegionState *rs = ps->regions[i];
		struct region_agg *r = process_region(reg, p, rs->name);
		if (!r)
			return -ENOMEM;
		r->count = rs->count;
		stats_free(&r->wall);
		int e = load_stats(&r->wall, rs->wall);
		if (e < 0)
			return e;
		for (size_t j = 0; j < rs->n_events; j++) {
			const Pmc__EventState *es = rs->events[j];
			int id = process_event_id(p, es->name);
			if (id < 0)
				return id;
			struct event_agg *ev = region_event(r, (size_t)id);
			if (!ev)
				return -ENOMEM;
			stats_free(&ev->st);
			if ((e = load_stats(&ev->st, es->stats)) < 0)
				return e;
			ev->scaled = es->scaled;
			ev->ratio_sum = es->ratio_sum;
		}
	}
	return 0;
}

int
state_load(struct server *srv, const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat sb;
	if (fstat(fd, &sb) < 0)
		return -errno;
	if (sb.st_size > (off_t)STATE_MAX_BYTES)
		return -EFBIG;
	size_t len = (size_t)sb.st_size;
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	for (size_t got = 0; got < len;) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EBADMSG;
		got += (size_t)n;
	}
	_cleanup_(state_freep) Pmc__State *st = pmc__state__unpack(NULL, len, buf);
	if (!st || st->version != STATE_VERSION)
		return -EBADMSG;
	char boot[64];
	boot_id(boot);
	bool rebooted = strcmp(boot, st->boot_id) != 0;
	for (size_t i = 0; i < st->n_processes; i++) {
		/* Saved before a reboot: keep the figures, but let no new process match them. */
		if (rebooted)
			st->processes[i]->start = UINT64_MAX;
		int r = load_process(srv, st->processes[i]);
		if (r < 0) {
			registry_free(&srv->reg);
			return r;
		}
	}
	srv->samples = st->samples;
	srv->batches = st->batches;
	srv->dropped = st->dropped;
	srv->lost = st->lost;
	srv->state_saved_ns = st->saved_ns;
	return 0;
}
