/* registry: per-process, per-region aggregates of the samples clients send. */
#include "registry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int
process_read_start(pid_t pid, uint64_t *start, char comm[17])
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -ESRCH;
	buf[n] = 0;
	/* comm is in parentheses and may itself hold spaces and ')'. */
	char *open_p = strchr(buf, '(');
	char *close_p = strrchr(buf, ')');
	if (!open_p || !close_p || close_p < open_p)
		return -EIO;
	size_t cl = (size_t)(close_p - open_p - 1);
	if (cl > 16)
		cl = 16;
	memcpy(comm, open_p + 1, cl);
	comm[cl] = 0;
	/* Fields after comm: state is field 3; starttime is field 22. */
	char *s = close_p + 2;
	for (int field = 3; field < 22; field++) {
		s = strchr(s, ' ');
		if (!s)
			return -EIO;
		s++;
	}
	*start = strtoull(s, NULL, 10);
	return 0;
}

struct process *
registry_process(struct registry *reg, pid_t pid, uid_t uid)
{
	uint64_t start;
	char comm[17];
	if (process_read_start(pid, &start, comm) < 0)
		return NULL;
	for (struct process *p = reg->procs; p; p = p->next)
		if (p->pid == pid && p->start == start) {
			p->ended = 0;
			return p;
		}
	struct process *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->pid = pid;
	p->uid = uid;
	p->start = start;
	memcpy(p->comm, comm, sizeof(comm));
	p->next = reg->procs;
	reg->procs = p;
	reg->n_procs++;
	return p;
}

struct region_agg *
region_find(struct process *p, const char *name)
{
	for (size_t i = 0; i < p->n_regions; i++)
		if (!strcmp(p->regions[i]->name, name))
			return p->regions[i];
	return NULL;
}

struct region_agg *
process_region(struct registry *reg, struct process *p, const char *name)
{
	struct region_agg *found = region_find(p, name);
	if (found)
		return found;
	struct region_agg **v = realloc(p->regions, (p->n_regions + 1) * sizeof(*v));
	if (!v)
		return NULL;
	p->regions = v;
	struct region_agg *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->name = strdup(name);
	if (!r->name) {
		free(r);
		return NULL;
	}
	stats_init(&r->wall);
	p->regions[p->n_regions++] = r;
	reg->n_regions++;
	return r;
}

int
process_event_id(struct process *p, const char *name)
{
	for (size_t i = 0; i < p->n_events; i++)
		if (!strcmp(p->events[i], name))
			return (int)i;
	char **v = realloc(p->events, (p->n_events + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	p->events = v;
	v[p->n_events] = strdup(name);
	if (!v[p->n_events])
		return -ENOMEM;
	return (int)p->n_events++;
}

struct event_agg *
region_event(struct region_agg *r, size_t id)
{
	if (id >= r->n_ev) {
		size_t n = id + 1;
		struct event_agg *ev = realloc(r->ev, n * sizeof(*ev));
		if (!ev)
			return NULL;
		r->ev = ev;
		bool *seen = realloc(r->seen, n * sizeof(*seen));
		if (!seen)
			return NULL;
		r->seen = seen;
		for (size_t i = r->n_ev; i < n; i++) {
			memset(&ev[i], 0, sizeof(ev[i]));
			stats_init(&ev[i].st);
			seen[i] = false;
		}
		r->n_ev = n;
	}
	r->seen[id] = true;
	return &r->ev[id];
}

/* The sum of the first counted event of @r whose base name is @base. */
static bool
event_sum(const struct process *p, const struct region_agg *r, const char *base, uint64_t *sum)
{
	size_t len = strlen(base);
	for (size_t i = 0; i < r->n_ev && i < p->n_events; i++) {
		const char *name = p->events[i];
		if (!r->seen[i] || strncmp(name, base, len) || (name[len] && name[len] != ':'))
			continue;
		*sum = r->ev[i].st.sum;
		return true;
	}
	return false;
}

size_t
region_derived(const struct process *p, const struct region_agg *r, struct derived *out)
{
	static const struct {
		const char *name, *num, *den;
	} metrics[DERIVED_MAX] = {
	        {"ipc", "instructions", "cycles"},
	        {"cache-miss-ratio", "cache-misses", "cache-references"},
	        {"branch-miss-ratio", "branch-misses", "branches"},
	};
	size_t n = 0;
	for (size_t i = 0; i < DERIVED_MAX; i++) {
		uint64_t num, den;
		if (!event_sum(p, r, metrics[i].num, &num) ||
		    !event_sum(p, r, metrics[i].den, &den) || den == 0)
			continue;
		out[n].name = metrics[i].name;
		out[n++].value = (double)num / (double)den;
	}
	return n;
}

static void
region_clear(struct region_agg *r)
{
	r->count = 0;
	stats_reset(&r->wall);
	for (size_t i = 0; i < r->n_ev; i++) {
		stats_reset(&r->ev[i].st);
		r->ev[i].scaled = 0;
		r->ev[i].ratio_sum = 0;
	}
}

unsigned
registry_reset(struct registry *reg, pid_t pid, const char *region)
{
	unsigned n = 0;
	for (struct process *p = reg->procs; p; p = p->next) {
		if (pid && p->pid != pid)
			continue;
		for (size_t i = 0; i < p->n_regions; i++) {
			if (region && *region && strcmp(region, p->regions[i]->name))
				continue;
			region_clear(p->regions[i]);
			n++;
		}
	}
	return n;
}

static void region_free(struct region_agg *r);

static void
process_free(struct registry *reg, struct process *p)
{
	reg->n_regions -= p->n_regions;
	for (size_t i = 0; i < p->n_regions; i++)
		region_free(p->regions[i]);
	free(p->regions);
	for (size_t i = 0; i < p->n_events; i++)
		free(p->events[i]);
	free(p->events);
	free(p);
}

void
registry_process_ended(struct registry *reg, struct process *p, uint64_t now)
{
	p->ended = now ? now : 1;
	size_t n_ended = 0;
	for (struct process *q = reg->procs; q; q = q->next)
		n_ended += q->ended != 0;
	while (n_ended > reg->max_ended) {
		struct process **oldest = NULL;
		for (struct process **q = &reg->procs; *q; q = &(*q)->next)
			if ((*q)->ended && (!oldest || (*q)->ended < (*oldest)->ended))
				oldest = q;
		struct process *victim = *oldest;
		*oldest = victim->next;
		reg->n_procs--;
		reg->evicted++;
		process_free(reg, victim);
		n_ended--;
	}
}

static void
region_free(struct region_agg *r)
{
	stats_free(&r->wall);
	for (size_t i = 0; i < r->n_ev; i++)
		stats_free(&r->ev[i].st);
	free(r->ev);
	free(r->seen);
	free(r->name);
	free(r);
}

void
registry_free(struct registry *reg)
{
	struct process *p = reg->procs;
	while (p) {
		struct process *next = p->next;
		process_free(reg, p);
		p = next;
	}
	reg->procs = NULL;
	reg->n_procs = reg->n_regions = 0;
}
