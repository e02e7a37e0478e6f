/* session: decode and dispatch each datagram of one client connection. A datagram
 * that does not decode, names no request, or breaks the protocol closes this
 * connection only; a request the daemon refuses gets an error Response. */
#include "session.h"

#include <errno.h>
#include <event2/event.h>
#include <fnmatch.h>
#include <linux/perf_event.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch.h"
#include "creds.h"
#include "log.h"
#include "perf.h"
#include "server.h"
#include "util.h"
#include "wire.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#define SESSION_MAX_REGION_ID 65535
/* Bytes of replies a client may leave unread before its connection is closed. */
#define SESSION_MAX_UNREAD (256 * 1024)
#define REGION_NAME_MAX 127
/* Datagrams handled per wake-up before yielding to the other connections. */
#define SESSION_BURST 64

/* Samples not counted: the daemon's figure, the figure of the uid they came from, and its
 * process's for reason @why. */
static void
count_dropped(struct session *s, uint64_t n, enum drop_reason why)
{
	s->srv->dropped += n;
	s->user->dropped += n;
	if (s->proc)
		s->proc->dropped[why] += n;
}

static int
reply(struct session *s, Pmc__Response *resp, const int *fds, size_t n_fds)
{
	/* A client that asks and never reads pins the daemon's replies in kernel memory: at
	 * most SESSION_MAX_UNREAD bytes of them, then its connection is closed. */
	int queued = 0;
	if (ioctl(s->fd, SIOCOUTQ, &queued) == 0 && queued > SESSION_MAX_UNREAD) {
		log_warn_limited("pid %d (uid %d): leaves %d bytes of its replies unread: closing "
		                 "the connection",
		                 (int)s->pid, (int)s->uid, queued);
		return -ENOBUFS;
	}
	/* The send buffer grows to what a reply needs, no further (root may force it past
	 * wmem_max), and only for a connection that asks for such a reply. */
	size_t need = pmc__response__get_packed_size(resp) + 4096;
	if (need > s->sndbuf && need <= 2 * (size_t)WIRE_MAX_DATAGRAM) {
		int sz = (int)need;
		if (setsockopt(s->fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) == 0 ||
		    setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz)) == 0)
			s->sndbuf = need;
	}
	int r = wire_send(s->fd, &resp->base, fds, n_fds, MSG_DONTWAIT);
	if (r == -EAGAIN) {
		log_warn_limited("pid %d (uid %d): leaves its replies unread (its socket is full): "
		                 "closing the connection",
		                 (int)s->pid, (int)s->uid);
		return -ENOBUFS;
	}
	if (r < 0)
		log_debug("pid %d: cannot send reply: %s", (int)s->pid, strerror(-r));
	return r;
}

static int reply_error(struct session *s, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

static int
reply_error(struct session *s, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (s->no_reply) {
		/* Nowhere to say it: the client is told by the closed connection. */
		log_warn_limited("pid %d: refused, closing the connection: %s", (int)s->pid, msg);
		return err == EAGAIN || err == 0 ? -EPROTO : -err;
	}
	log_debug("pid %d: refused: %s", (int)s->pid, msg);
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.error = err;
	resp.message = msg;
	return reply(s, &resp, NULL, 0);
}

static int
handle_hello(struct session *s, const Pmc__Request *req)
{
	const Pmc__Hello *h = req->hello;
	if (h->version != PMC__PROTOCOL_VERSION__PROTOCOL_VERSION) {
		reply_error(s, EPROTO,
		            "protocol version %u is not supported (this daemon speaks %d)",
		            h->version, PMC__PROTOCOL_VERSION__PROTOCOL_VERSION);
		return -EPROTO;
	}
	s->hello = 1;
	if (s->hello_ev)
		event_del(s->hello_ev);
	Pmc__HelloReply hr = PMC__HELLO_REPLY__INIT;
	hr.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	hr.daemon_version = PMC_VERSION;
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_HELLO;
	resp.hello = &hr;
	return reply(s, &resp, NULL, 0);
}

static struct session_thread *
find_thread(struct session *s, pid_t tid)
{
	for (size_t i = 0; i < s->n_threads; i++)
		if (s->threads[i].tid == tid)
			return &s->threads[i];
	return NULL;
}

static void
thread_close(struct session *s, struct session_thread *t)
{
	struct server *srv = s->srv;
	s->proc->n_threads--;
	s->user->threads--;
	s->user->fds -= t->n_fds;
	for (size_t i = 0; i < t->n_fds; i++)
		close(t->fds[i]);
	free(t->fds);
	free(t->ev_id);
	srv->n_threads--;
	srv->n_fds -= t->n_fds;
}

/* Keeps @t (taken on success) in place of @old, or as a new thread of @s, and counts it;
 * thread_close() undoes the counting. Return: 0 or -ENOMEM (@t still the caller's). */
static int
thread_store(struct session *s, struct session_thread *old, struct session_thread *t)
{
	if (old) {
		thread_close(s, old);
		*old = *t;
	} else {
		struct session_thread *v = realloc(s->threads, (s->n_threads + 1) * sizeof(*v));
		if (!v)
			return -ENOMEM;
		s->threads = v;
		s->threads[s->n_threads++] = *t;
	}
	s->srv->n_threads++;
	s->srv->n_fds += t->n_fds;
	s->proc->n_threads++;
	s->user->threads++;
	s->user->fds += t->n_fds;
	return 0;
}

static void
drop_thread(struct session *s, struct session_thread *t)
{
	thread_close(s, t);
	*t = s->threads[--s->n_threads];
}

/* The pidfd names the very process that connected: once it has exited, its pid may
 * belong to another process, whose threads must not be counted for this peer. */
static bool
peer_alive(struct session *s)
{
	struct pollfd p = {.fd = s->pidfd, .events = POLLIN};
	return poll(&p, 1, 0) == 0;
}

static bool
thread_of(pid_t pid, pid_t tid)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)pid, (int)tid);
	return stat(path, &st) == 0;
}

static int register_thread(struct session *s, const Pmc__RegisterThread *rt);

/* Threads of @uid that ended without a ThreadExit (a client killed, or one that never says
 * it) hold their counter fds until their connection closes: free them, but never thread
 * @keep.
 * Only when @uid reaches its share of fds, so the scan costs nothing otherwise.
 * Return: the number of threads freed. */
static size_t
reap_dead_threads(struct server *srv, uid_t uid, pid_t keep)
{
	size_t n = 0;
	for (struct session *o = srv->sessions; o; o = o->next) {
		if (o->uid != uid)
			continue;
		for (size_t i = 0; i < o->n_threads;) {
			struct session_thread *t = &o->threads[i];
			if (t->tid != keep && t->n_fds && !thread_of(o->pid, t->tid)) {
				drop_thread(o, t);
				n++;
			} else {
				i++;
			}
		}
	}
	return n;
}

static int
handle_register(struct session *s, const Pmc__Request *req)
{
	const Pmc__RegisterThread *rt = req->register_thread;
	s->no_reply = rt->reattach;
	int r = register_thread(s, rt);
	s->no_reply = 0;
	/* A refused reattach has no reply to carry the refusal: remember the thread, and drop
	 * (counting them) its batches, rather than closing a connection the whole process
	 * shares, which it would only open again to be refused again. */
	if (r < 0 && rt->reattach && s->n_refused < ARRAY_SIZE(s->refused)) {
		s->refused[s->n_refused++] = rt->tid;
		return 0;
	}
	return r;
}

static bool
thread_refused(const struct session *s, pid_t tid)
{
	for (size_t i = 0; i < s->n_refused; i++)
		if (s->refused[i] == tid)
			return true;
	return false;
}

/* A thread that still holds counters from a daemon that restarted: record its events
 * (already checked, in the client's order and groups) without opening anything. */
static int
reattach_thread(struct session *s, struct session_thread *old, const Pmc__RegisterThread *rt,
                char *const *names)
{
	size_t n = rt->n_events;
	if (n == 0 || rt->n_groups != n)
		return reply_error(s, EINVAL, "reattach of thread %d names no events",
		                   (int)rt->tid);
	struct session_thread t = {.tid = rt->tid, .n = n};
	t.ev_id = malloc(n * sizeof(uint32_t));
	if (!t.ev_id)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int id = process_event_id(s->proc, names[i]);
		if (id < 0) {
			free(t.ev_id);
			return -ENOMEM;
		}
		t.ev_id[i] = (uint32_t)id;
	}
	if (thread_store(s, old, &t) < 0) {
		free(t.ev_id);
		return -ENOMEM;
	}
	log_debug("pid %d: thread %d reattached with %zu events", (int)s->pid, (int)rt->tid, n);
	return 0;
}

static int
register_thread(struct session *s, const Pmc__RegisterThread *rt)
{
	pid_t tid = rt->tid;
	char *const *names = rt->events;
	size_t n = rt->n_events;

	if (s->pidfd >= 0 && !peer_alive(s))
		return reply_error(s, ESRCH,
		                   "process %d has exited: its connection may not register threads",
		                   (int)s->pid);
	if (tid <= 0 || !thread_of(s->pid, tid))
		return reply_error(s, EPERM,
		                   "thread %d is not a thread of the calling process %d: a process "
		                   "may only register its own threads",
		                   (int)tid, (int)s->pid);
	char why[384];
	int r = creds_may_count(&s->creds, s->pid, tid, why, sizeof(why));
	if (r == -ESRCH)
		return reply_error(s, ESRCH, "thread %d has exited", (int)tid);
	if (r < 0) {
		log_warn_limited("pid %d: refused: %s", (int)s->pid, why);
		return reply_error(s, EPERM, "%s", why);
	}
	if (!n)
		names = perf_default_events(&n);
	if (n > PERF_MAX_EVENTS)
		return reply_error(s, E2BIG, "%zu events asked for; at most %d per thread", n,
		                   PERF_MAX_EVENTS);
	/* Every name in its one spelling: "cs", "cs:uk" and "context-switches" are one event,
	 * kept once per process. */
	char canon[PERF_MAX_EVENTS][PERF_NAME_MAX];
	char *cn[PERF_MAX_EVENTS];
	struct perf_event_attr attrs[PERF_MAX_EVENTS];
	for (size_t i = 0; i < n; i++) {
		r = perf_canonical(names[i], canon[i], sizeof(canon[i]), &attrs[i]);
		if (r == -ENOENT) {
			const char *hint = perf_suggest(names[i]);
			return reply_error(s, ENOENT,
			                   "unknown event '%.64s'%s%s%s; 'pmcctl events' lists the "
			                   "events this machine can count",
			                   names[i], hint ? " (did you mean '" : "",
			                   hint ? hint : "", hint ? "'?)" : "");
		}
		if (r < 0)
			return reply_error(s, -r,
			                   "bad event name '%.64s': use NAME, NAME:u, NAME:k or "
			                   "NAME:uk (libpfm4 names: PMU::EVENT[:UMASK...] with "
			                   "the same modes; no other modifier)",
			                   names[i]);
		cn[i] = canon[i];
		for (size_t j = 0; j < i; j++)
			if (!strcmp(canon[j], canon[i]) ||
			    (attrs[j].type == attrs[i].type && attrs[j].config == attrs[i].config &&
			     attrs[j].config1 == attrs[i].config1 &&
			     attrs[j].config2 == attrs[i].config2 &&
			     attrs[j].exclude_user == attrs[i].exclude_user &&
			     attrs[j].exclude_kernel == attrs[i].exclude_kernel))
				return reply_error(s, EINVAL,
				                   "event '%.64s' is asked for twice ('%.64s' and "
				                   "'%.64s'): each event may be named once",
				                   canon[i], names[j], names[i]);
	}
	names = cn;

	const struct policy *pol = &s->srv->policy;
	bool kernel_ok = policy_may_count_kernel(pol, s->pid, s->uid, s->gid);
	for (size_t i = 0; i < n; i++) {
		const struct perf_event_attr *attr = &attrs[i];
		if (!policy_event_allowed(pol, attr))
			return reply_error(s, EACCES,
			                   "event '%.64s' is not allowed here: the operator set "
			                   "--allow-events",
			                   names[i]);
		/* Software events of one's own thread count kernel activity the process
		 * can already see (/proc/self/status); hardware ones would observe the
		 * kernel itself. */
		if (!attr->exclude_kernel && attr->type != PERF_TYPE_SOFTWARE && !kernel_ok) {
			/* The name without its mode: "perf::CYCLES:k" -> "perf::CYCLES". */
			size_t base = strlen(names[i]);
			if (base > 2 && names[i][base - 2] == ':' && names[i][base - 1] == 'k')
				base -= 2;
			else if (base > 3 && !strcmp(names[i] + base - 3, ":uk"))
				base -= 3;
			else if (base > 4 && !strcmp(names[i] + base - 4, ":u:k"))
				base -= 4;
			return reply_error(
			        s, EACCES,
			        "counting kernel mode ('%.64s') is not allowed for uid "
			        "%d: use '%.*s:u', or ask the operator for --allow-kernel",
			        names[i], (int)s->uid, (int)base, names[i]);
		}
	}

	/* The process gets its aggregates with its first thread: a connection that only
	 * queries (pmcctl) leaves nothing behind. */
	if (!s->proc) {
		s->proc = registry_process(&s->srv->reg, s->pid, s->uid);
		if (!s->proc)
			return reply_error(s, ESRCH, "process %d is gone", (int)s->pid);
		s->proc->connections++;
	}
	struct session_thread *old = find_thread(s, tid);
	if (!old && s->proc->n_threads >= pol->max_threads)
		return reply_error(s, EMFILE,
		                   "process %d already has %u registered threads, the daemon's "
		                   "limit (--max-threads)",
		                   (int)s->pid, pol->max_threads);
	if (!old && process_event_room(s->proc, names, n) < 0)
		return reply_error(s, EMFILE,
		                   "process %d already counts %d distinct events, the daemon's "
		                   "limit per process",
		                   (int)s->pid, PROCESS_MAX_EVENTS);
	if (rt->reattach)
		return reattach_thread(s, old, rt, names);

	size_t order[PERF_MAX_EVENTS];
	uint32_t group[PERF_MAX_EVENTS];
	char *ordered[PERF_MAX_EVENTS];
	r = perf_plan(names, n, order, group);
	if (r < 0)
		return reply_error(s, -r, "cannot group the events: %s", strerror(-r));
	for (size_t i = 0; i < n; i++)
		ordered[i] = names[order[i]];

	int fds[PERF_MAX_EVENTS];
	size_t failed = 0;
	if (s->srv->n_fds + n + SERVER_FD_RESERVE > s->srv->fd_limit)
		return reply_error(s, EMFILE,
		                   "pmcdaemon holds %zu counter fds, near its limit of %zu: raise "
		                   "its LimitNOFILE or lower --max-threads",
		                   s->srv->n_fds, s->srv->fd_limit);
	size_t held = s->user->fds - (old ? old->n_fds : 0);
	if (held + n > pol->max_fds_per_user && reap_dead_threads(s->srv, s->uid, tid) > 0) {
		old = find_thread(s, tid); /* the threads moved */
		held = s->user->fds - (old ? old->n_fds : 0);
	}
	if (held + n > pol->max_fds_per_user)
		return reply_error(s, EMFILE,
		                   "uid %d holds %zu counter fds for its threads, its share "
		                   "(--max-fds-per-user %u): this thread runs unprofiled; end "
		                   "profiled threads, or ask the operator to raise the share",
		                   (int)s->uid, held, pol->max_fds_per_user);
	r = perf_open_group(tid, ordered, group, n, fds, &failed);
	/* The tid was checked before the open: if the thread ended meanwhile, the number may
	 * already name a thread of another process. Check again now that it is counted. */
	if (r == 0 && !thread_of(s->pid, tid)) {
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		return reply_error(s, ESRCH, "thread %d ended while it was being registered",
		                   (int)tid);
	}
	/* And its credentials: it may have exec'd a setuid program since the check (the
	 * kernel detaches counters opened before such an exec, not those opened after). */
	if (r == 0 && (r = creds_may_count(&s->creds, s->pid, tid, why, sizeof(why))) < 0) {
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		if (r == -ESRCH)
			return reply_error(s, ESRCH, "thread %d has exited", (int)tid);
		log_warn_limited("pid %d: refused after the open: %s", (int)s->pid, why);
		return reply_error(s, EPERM, "%s", why);
	}
	if (r < 0) {
		const char *hint = r == -ENOENT || r == -EOPNOTSUPP
		                           ? " (this machine cannot count it: no hardware PMU? the "
		                             "software events task-clock, page-faults, "
		                             "context-switches and cpu-migrations always work)"
		                   : (r == -EACCES || r == -EPERM) && !perf_privileged()
		                           ? " (pmcdaemon runs without CAP_PERFMON, so the kernel "
		                             "lets it count only its own user's threads: the "
		                             "operator runs it as root or with CAP_PERFMON, as "
		                             "pmcdaemon.service does)"
		                           : "";
		return reply_error(s, -r, "cannot count '%.64s' on thread %d: %s%s",
		                   ordered[failed], (int)tid, strerror(-r), hint);
	}

	struct session_thread t = {.tid = tid, .n = n, .n_fds = n};
	t.fds = malloc(n * sizeof(int));
	t.ev_id = malloc(n * sizeof(uint32_t));
	Pmc__EventDesc descs[PERF_MAX_EVENTS], *dp[PERF_MAX_EVENTS];
	r = t.fds && t.ev_id ? 0 : -ENOMEM;
	for (size_t i = 0; r == 0 && i < n; i++) {
		int id = process_event_id(s->proc, ordered[i]);
		if (id < 0)
			r = id;
		else
			t.ev_id[i] = (uint32_t)id;
		pmc__event_desc__init(&descs[i]);
		descs[i].name = ordered[i];
		descs[i].group = group[i];
		dp[i] = &descs[i];
	}
	if (r < 0) {
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		free(t.fds);
		free(t.ev_id);
		return reply_error(s, ENOMEM, "out of memory");
	}
	memcpy(t.fds, fds, n * sizeof(int));

	if (thread_store(s, old, &t) < 0) {
		for (size_t i = 0; i < n; i++)
			close(t.fds[i]);
		free(t.fds);
		free(t.ev_id);
		return reply_error(s, ENOMEM, "out of memory");
	}

	Pmc__RegisterReply rr = PMC__REGISTER_REPLY__INIT;
	rr.tid = tid;
	rr.n_events = n;
	rr.events = dp;
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_REGISTER_REPLY;
	resp.register_reply = &rr;
	log_debug("pid %d: registered thread %d with %zu events", (int)s->pid, (int)tid, n);
	return reply(s, &resp, fds, n);
}

/* What an empty region measured on a registered thread: the process keeps the smallest
 * figure of any thread, per event, as the floor under its regions' figures. A floor that
 * names a thread it never registered, or the wrong number of values, closes the
 * connection. */
static int
handle_thread_floor(struct session *s, const Pmc__Request *req)
{
	const Pmc__ThreadFloor *f = req->thread_floor;
	struct session_thread *t = find_thread(s, f->tid);
	if (!t || f->n_values != t->n)
		return -EBADMSG;
	struct process *p = s->proc;
	if (f->wall_ns && (!p->wall_floor || f->wall_ns < p->wall_floor))
		p->wall_floor = f->wall_ns;
	for (size_t i = 0; i < t->n; i++) {
		uint32_t id = t->ev_id[i];
		if (id >= PROCESS_MAX_EVENTS)
			continue;
		if (!(p->has_floor >> id & 1) || f->values[i] < p->floor[id])
			p->floor[id] = f->values[i];
		p->has_floor |= UINT64_C(1) << id;
	}
	return 0;
}

/* A figure whose mean is within 10x of what an empty region measures (@floor > 0) says
 * more about the measurement than about the code measured. */
static bool
too_short(const struct stats *st, uint64_t floor)
{
	return floor && st->count && st->mean < 10.0 * (double)floor;
}

static int
handle_thread_exit(struct session *s, const Pmc__Request *req)
{
	struct session_thread *t = find_thread(s, req->thread_exit->tid);
	if (t)
		drop_thread(s, t);
	return 0;
}

/* Ids of regions over --max-regions map here: their samples are dropped, counted. */
static struct region_agg refused_region;

/* Client ids are dense from 1: one far above the region limit would only make the id table
 * large (8 bytes an id, per connection). Ids past this bound are refused regions, kept in no
 * table. */
static uint32_t
session_max_id(const struct session *s)
{
	return s->srv->policy.max_regions > 4096 ? s->srv->policy.max_regions : 4096;
}

/* The aggregate of client region @id; &refused_region for every id past the table's bound;
 * NULL for an id never defined. */
static struct region_agg *
session_region(const struct session *s, uint32_t id)
{
	if (id < s->n_ids && s->ids[id])
		return s->ids[id];
	return id > session_max_id(s) && id <= SESSION_MAX_REGION_ID ? &refused_region : NULL;
}

static int
define_regions(struct session *s, const Pmc__SampleBatch *b)
{
	if (b->n_def_id != b->n_def_name)
		return -EBADMSG;
	for (size_t i = 0; i < b->n_def_id; i++) {
		uint32_t id = b->def_id[i];
		const char *name = b->def_name[i];
		size_t len = strlen(name);
		if (id == 0 || id > SESSION_MAX_REGION_ID || len == 0 || len > REGION_NAME_MAX)
			return -EBADMSG;
		struct process *p = s->proc;
		if (id > session_max_id(s)) {
			/* More names than --max-regions allows: the library may hold more. */
			if (!p->warned_regions)
				log_warn_limited(
				        "pid %d: over %u regions (--max-regions): samples of "
				        "region '%s' and later new ones are dropped",
				        (int)s->pid, s->srv->policy.max_regions, name);
			p->warned_regions = true;
			continue;
		}
		if (id >= s->n_ids) {
			size_t n = id + 1 > 2 * s->n_ids ? id + 1 : 2 * s->n_ids;
			struct region_agg **v = realloc(s->ids, n * sizeof(*v));
			if (!v)
				return -ENOMEM;
			memset(v + s->n_ids, 0, (n - s->n_ids) * sizeof(*v));
			s->ids = v;
			s->n_ids = n;
		}
		struct region_agg *r = region_find(p, name);
		if (!r && p->n_regions >= s->srv->policy.max_regions) {
			if (!p->warned_regions)
				log_warn_limited(
				        "pid %d: over %u regions (--max-regions): samples of "
				        "region '%s' and later new ones are dropped",
				        (int)s->pid, s->srv->policy.max_regions, name);
			p->warned_regions = true;
			s->ids[id] = &refused_region;
			continue;
		}
		if (!r && !registry_user_room(&s->srv->reg, p->uid, p,
		                              s->srv->policy.max_regions_per_user)) {
			if (!p->warned_user)
				log_warn_limited("pid %d: uid %d holds %u regions, its share "
				                 "(--max-regions-per-user): samples of region '%s' "
				                 "and later new ones are dropped",
				                 (int)s->pid, (int)p->uid,
				                 s->srv->policy.max_regions_per_user, name);
			p->warned_user = true;
			s->ids[id] = &refused_region;
			continue;
		}
		if (!r && !registry_room(&s->srv->reg, p)) {
			if (!p->warned_total)
				log_warn_limited(
				        "pid %d: the daemon holds %u regions of running processes, "
				        "its limit (--max-total-regions): samples of region '%s' "
				        "and later new ones are dropped",
				        (int)s->pid, s->srv->policy.max_total_regions, name);
			p->warned_total = true;
			s->ids[id] = &refused_region;
			continue;
		}
		if (!r)
			r = process_region(&s->srv->reg, p, name);
		if (!r)
			return -ENOMEM;
		s->ids[id] = r;
	}
	return 0;
}

/* What the process says it sent before this batch, against what this daemon (or the
 * state it restarted from) received: the difference was lost by a daemon that died. */
static void
account_sent(struct session *s, const Pmc__SampleBatch *b)
{
	struct process *p = s->proc;
	if (b->sent_before > p->received) {
		uint64_t lost = b->sent_before - p->received;
		p->lost += lost;
		s->srv->lost += lost;
		s->user->lost += lost;
		log_warn_limited("pid %d: %llu samples it sent were lost by an earlier daemon",
		                 (int)s->pid, (unsigned long long)lost);
	}
	/* A smaller figure is a new image (exec): its count starts again. */
	p->received = b->sent_before + b->n_region;
}

/* At most --max-batch-rate batches a second per connection; the rest are dropped. */
static bool
over_rate(struct session *s)
{
	uint64_t sec = util_now_ns(CLOCK_MONOTONIC) / 1000000000u;
	if (sec != s->rate_window) {
		s->rate_window = sec;
		s->rate_batches = 0;
	}
	if (++s->rate_batches <= s->srv->policy.max_batch_rate)
		return false;
	if (!s->warned_rate)
		log_warn_limited(
		        "pid %d: over %u sample batches a second (--max-batch-rate): dropping "
		        "the excess",
		        (int)s->pid, s->srv->policy.max_batch_rate);
	s->warned_rate = 1;
	return true;
}

/* The extrapolated values (bits of @scaled) of one sample of @reg; @k indexes the next ratio. */
static void
count_scaled(const struct session_thread *t, const Pmc__SampleBatch *b, struct region_agg *reg,
             uint32_t scaled, size_t *k)
{
	for (size_t j = 0; scaled; j++, scaled >>= 1) {
		if (!(scaled & 1))
			continue;
		struct event_agg *e = &reg->ev[t->ev_id[j]];
		float ratio = b->scale_ratio[(*k)++];
		e->scaled++;
		e->ratio_sum += ratio >= 0 && ratio <= 1 ? ratio : 0;
	}
}

/* Counts a checked batch sample by sample with stats_add(): the way for values over
 * STATS_ACC_MAX_VALUE, or when count_accumulated() cannot allocate. 0 or -ENOMEM. */
static int
count_samples(struct session *s, const struct session_thread *t, const Pmc__SampleBatch *b,
              size_t *counted)
{
	struct region_agg *last = NULL;
	size_t k = 0, ne = t->n;
	for (size_t i = 0; i < b->n_region; i++) {
		struct region_agg *reg = session_region(s, b->region[i]);
		uint32_t scaled = b->n_scaled ? b->scaled[i] : 0;
		if (reg == &refused_region) {
			k += (size_t)__builtin_popcount(scaled);
			count_dropped(s, 1, DROP_MAX_REGIONS);
			continue;
		}
		(*counted)++;
		if (reg != last) {
			/* Create every slot first: creating one may move the others. */
			for (size_t j = 0; j < ne; j++)
				if (!region_event(reg, t->ev_id[j]))
					return -ENOMEM;
			last = reg;
		}
		reg->count++;
		stats_add(&reg->wall, b->wall_ns[i]);
		for (size_t j = 0; j < ne; j++)
			stats_add(&reg->ev[t->ev_id[j]].st, b->values[i * ne + j]);
		if (scaled)
			count_scaled(t, b, reg, scaled, &k);
	}
	return 0;
}

/* What a batch may have without allocating: distinct region ids, accumulators (one per
 * region and column: the wall time, then each event), samples. */
#define BATCH_STACK_REGIONS 32
#define BATCH_STACK_ACCS 160
#define BATCH_STACK_SAMPLES 2048

struct batch_region {
	struct region_agg *reg; /* NULL: refused (--max-regions) */
	uint32_t id;
	uint32_t n;          /* its samples in the batch */
	uint32_t start, end; /* where they are in the grouped order */
};

/* Client region id -> 1 + its index in count_accumulated()'s regions; all 0 outside it (the
 * daemon is one thread, and no batch is handled inside another). */
static uint16_t batch_slot[SESSION_MAX_REGION_ID + 1];
_Static_assert(SESSION_MAX_REGION_ID <= UINT16_MAX, "batch_slot holds 1 + a region index");

/* @b fits the accumulators: no value over STATS_ACC_MAX_VALUE, not too many samples. */
static bool
batch_fits_acc(const Pmc__SampleBatch *b)
{
	uint64_t all = 0, x[4] = {0, 0, 0, 0};
	size_t i = 0;
	if (b->n_region > STATS_ACC_MAX_COUNT)
		return false;
	for (i = 0; i < b->n_wall_ns; i++)
		all |= b->wall_ns[i];
	/* Four chains: one would take a cycle per value. */
	for (i = 0; i + 4 <= b->n_values; i += 4)
		for (size_t j = 0; j < 4; j++)
			x[j] |= b->values[i + j];
	for (; i < b->n_values; i++)
		all |= b->values[i];
	return (all | x[0] | x[1] | x[2] | x[3]) <= STATS_ACC_MAX_VALUE;
}

/*
 * Counts a checked batch region by region: the samples are grouped by region (a counting
 * sort), then the values of each region and column go through one stats_acc, opened on the
 * aggregate before anything is counted and folded in at the end. Per value: no lookup, no
 * division, no allocation but a histogram block the first time a value falls in its power of
 * two, and one histogram in use at a time. Returns 0, -ENOMEM, or -EAGAIN (nothing counted)
 * when the batch does not fit the accumulators or memory is short.
 */
static int
count_accumulated(struct session *s, const struct session_thread *t, const Pmc__SampleBatch *b,
                  size_t *counted)
{
	struct batch_region stack_br[BATCH_STACK_REGIONS], *br = stack_br;
	struct stats_acc stack_acc[BATCH_STACK_ACCS], *acc = stack_acc;
	uint32_t stack_order[BATCH_STACK_SAMPLES], *order = stack_order;
	size_t n = b->n_region, ne = t->n, na = ne + 1, nr = 0, cap = BATCH_STACK_REGIONS;
	int r = -EAGAIN;

	if (!batch_fits_acc(b))
		return -EAGAIN;
	for (size_t i = 0; i < n; i++) {
		uint32_t id = b->region[i];
		if (batch_slot[id]) {
			br[batch_slot[id] - 1u].n++;
			continue;
		}
		if (nr == cap) {
			struct batch_region *v = br == stack_br ? malloc(2 * cap * sizeof(*v))
			                                        : realloc(br, 2 * cap * sizeof(*v));
			if (!v)
				goto out;
			if (br == stack_br)
				memcpy(v, stack_br, sizeof(stack_br));
			br = v;
			cap *= 2;
		}
		struct region_agg *reg = session_region(s, id);
		br[nr] = (struct batch_region){reg == &refused_region ? NULL : reg, id, 1, 0, 0};
		batch_slot[id] = (uint16_t)++nr;
	}
	if (n > BATCH_STACK_SAMPLES && !(order = malloc(n * sizeof(*order))))
		goto out;
	if (nr * na > BATCH_STACK_ACCS && !(acc = malloc(nr * na * sizeof(*acc))))
		goto out;
	/* Create every slot first: creating one may move the others. */
	for (size_t x = 0; x < nr; x++)
		for (size_t j = 0; br[x].reg && j < ne; j++)
			if (!region_event(br[x].reg, t->ev_id[j])) {
				r = -ENOMEM;
				goto out;
			}
	/* The samples grouped by region, each group in batch order. */
	for (size_t x = 0, at = 0; x < nr; x++) {
		br[x].start = br[x].end = (uint32_t)at;
		at += br[x].n;
	}
	for (size_t i = 0; i < n; i++)
		order[br[batch_slot[b->region[i]] - 1u].end++] = (uint32_t)i;
	/*
	 * Nothing fails from here on, so the batch is counted whole: a histogram block that
	 * cannot be allocated only misses its samples, which every other figure still counts,
	 * as with stats_add() (stats.h).
	 */
	for (size_t x = 0; x < nr; x++) {
		struct region_agg *reg = br[x].reg;
		struct stats_acc *a = acc + x * na;
		size_t i = order[br[x].start];
		if (!reg)
			continue;
		stats_acc_begin(&a[0], &reg->wall, b->wall_ns[i]);
		for (size_t j = 0; j < ne; j++)
			stats_acc_begin(&a[1 + j], &reg->ev[t->ev_id[j]].st, b->values[i * ne + j]);
	}

	for (size_t x = 0; x < nr; x++) {
		struct region_agg *reg = br[x].reg;
		struct stats_acc *a = acc + x * na;
		const uint32_t *rows = order + br[x].start;
		if (!reg) {
			count_dropped(s, br[x].n, DROP_MAX_REGIONS);
			continue;
		}
		*counted += br[x].n;
		reg->count += br[x].n;
		stats_acc_gather(&a[0], b->wall_ns, 1, rows, br[x].n);
		for (size_t j = 0; j < ne; j++)
			stats_acc_gather(&a[1 + j], b->values + j, ne, rows, br[x].n);
	}
	for (size_t i = 0, k = 0; i < b->n_scaled; i++) {
		uint32_t scaled = b->scaled[i];
		struct region_agg *reg = br[batch_slot[b->region[i]] - 1u].reg;
		if (!scaled)
			continue;
		if (reg)
			count_scaled(t, b, reg, scaled, &k);
		else
			k += (size_t)__builtin_popcount(scaled);
	}
	for (size_t x = 0; x < nr; x++) {
		struct region_agg *reg = br[x].reg;
		const struct stats_acc *a = acc + x * na;
		if (!reg)
			continue;
		stats_acc_fold(&reg->wall, &a[0]);
		for (size_t j = 0; j < ne; j++)
			stats_acc_fold(&reg->ev[t->ev_id[j]].st, &a[1 + j]);
	}
	r = 0;
out:
	for (size_t x = 0; x < nr; x++)
		batch_slot[br[x].id] = 0;
	if (br != stack_br)
		free(br);
	if (acc != stack_acc)
		free(acc);
	if (order != stack_order)
		free(order);
	return r;
}

/* What the library says it dropped, by reason; `dropped` is their total, and what it holds
 * beyond their sum (an older library's) is "other". */
static void
count_reported(struct session *s, const Pmc__SampleBatch *b)
{
	const uint64_t by[] = {
	        [DROP_DEPTH] = b->dropped_depth,
	        [DROP_NESTING] = b->dropped_nesting,
	        [DROP_FULL] = b->dropped_full,
	        [DROP_READ] = b->dropped_read,
	        [DROP_EXITED] = b->dropped_exited,
	        [DROP_NAMES] = b->dropped_names,
	        [DROP_LONG_NAMES] = b->dropped_long_names,
	};
	uint64_t sum = 0;
	for (size_t k = 0; k < ARRAY_SIZE(by); k++) {
		if (by[k])
			count_dropped(s, by[k], (enum drop_reason)k);
		sum += by[k];
	}
	if (b->dropped > sum)
		count_dropped(s, b->dropped - sum, DROP_OTHER);
}

static int
handle_batch(struct session *s, const Pmc__SampleBatch *b)
{
	struct session_thread *t = find_thread(s, b->tid);
	if (!t && thread_refused(s, b->tid)) {
		count_dropped(s, b->n_region, DROP_REFUSED);
		count_reported(s, b);
		return 0;
	}
	if (!t)
		return -EBADMSG;
	size_t n = b->n_region, ne = t->n;
	if (b->n_wall_ns != n || b->n_values != n * ne || (b->n_scaled && b->n_scaled != n))
		return -EBADMSG;
	int r = define_regions(s, b);
	if (r < 0)
		return r;
	/* Check the whole batch before counting any of it. */
	size_t n_ratio = 0;
	uint32_t valid = ne >= 32 ? UINT32_MAX : (UINT32_C(1) << ne) - 1;
	for (size_t i = 0; i < n; i++) {
		uint32_t id = b->region[i];
		if (!session_region(s, id))
			return -EBADMSG;
		if (b->n_scaled) {
			if (b->scaled[i] & ~valid)
				return -EBADMSG;
			n_ratio += (size_t)__builtin_popcount(b->scaled[i]);
		}
	}
	if (b->n_scale_ratio != n_ratio)
		return -EBADMSG;

	count_reported(s, b);
	account_sent(s, b);
	t->pending = b->pending;
	if (over_rate(s)) {
		count_dropped(s, n, DROP_BATCH_RATE);
		return 0;
	}

	size_t counted = 0;
	uint64_t missed = s->user->hist.missed;
	stats_charge_to(&s->user->hist);
	r = count_accumulated(s, t, b, &counted);
	if (r == -EAGAIN)
		r = count_samples(s, t, b, &counted);
	stats_charge_to(NULL);
	if (s->user->hist.missed != missed && !s->user->warned_memory) {
		log_warn_limited(
		        "uid %d: its processes' histograms hold %zu bytes, its share "
		        "(--max-memory-per-user): further samples in new value ranges miss "
		        "the percentiles (every other figure still counts them)",
		        (int)s->uid, s->user->hist.used);
		s->user->warned_memory = true;
	}
	if (r < 0)
		return r;
	s->srv->samples += counted;
	s->srv->batches++;
	s->user->samples += counted;
	s->user->batches++;
	return 0;
}

static int
handle_sample_batch(struct session *s, const Pmc__Request *req)
{
	int r = handle_batch(s, req->sample_batch);
	if (r == -EBADMSG)
		log_warn_limited("pid %d: malformed sample batch (tid %d): closing the connection",
		                 (int)s->pid, (int)req->sample_batch->tid);
	return r;
}

static void
fill_stats(Pmc__Stats *out, const struct stats *st)
{
	pmc__stats__init(out);
	out->sum = st->sum;
	out->min = st->count ? st->min : 0;
	out->max = st->max;
	out->mean = st->mean;
	out->stddev = stats_stddev(st);
	out->p50 = stats_quantile(st, 0.50);
	out->p90 = stats_quantile(st, 0.90);
	out->p99 = stats_quantile(st, 0.99);
}

struct query_buf {
	Pmc__Derived *dv, **dvp;
	Pmc__RegionStats *rs, **rsp;
	Pmc__Stats *st;
	Pmc__EventStats *es, **esp;
	size_t n_rs, n_st, n_es, n_dv;
};

static void
query_buf_free(struct query_buf *q)
{
	free(q->dv);
	free(q->dvp);
	free(q->rs);
	free(q->rsp);
	free(q->st);
	free(q->es);
	free(q->esp);
}

/* Whether the filters of @q select region @r of @p; @r NULL: whether they select @p, its
 * regions' names aside. Who may see @p is the caller's to check. */
static bool
query_match(const Pmc__Query *q, const struct process *p, const struct region_agg *r)
{
	bool any = !q->n_comms;

	if (q->pid && p->pid != q->pid)
		return false;
	if (q->min_start && p->start < q->min_start)
		return false;
	for (size_t i = 0; !any && i < q->n_comms; i++)
		any = !fnmatch(q->comms[i], p->comm, 0);
	if (!any || !r)
		return any;
	if (!q->n_regions)
		return !*q->region || !strcmp(q->region, r->name);
	for (size_t i = 0; i < q->n_regions; i++)
		if (!fnmatch(q->regions[i], r->name, 0))
			return true;
	return false;
}

static int session_dispatch_one(struct session *s);
static void session_close(struct session *s, int r);

/* Read what other connections have already queued, so that a query made after a
 * client exited sees that client's last batch (the kernel queued it before the
 * client's exit, but the loop may not have read it yet). Bounded: only what is
 * queued now, never recursively, only the connections of the uid whose figures the
 * caller sees (@self's, or all for an admin), and never past @budget_ns (checked every 16
 * datagrams): another user's flood never delays the answer. @self NULL: every connection,
 * no time bound. */
#define DRAIN_BUDGET_NS (2 * 1000 * 1000)
/* A Status reads less: its answer is due in about a millisecond whatever the load. */
#define DRAIN_STATUS_NS (300 * 1000)

static void
drain_others(struct server *srv, struct session *self, uint64_t budget_ns)
{
	if (srv->draining)
		return;
	srv->draining = 1;
	uint64_t deadline = self ? util_now_ns(CLOCK_MONOTONIC) + budget_ns : UINT64_MAX;
	struct session *next;
	for (struct session *o = srv->sessions; o; o = next) {
		next = o->next;
		/* One that streams a reply reads nothing until it is sent. */
		if (o == self || o->qs || (self && !self->admin && o->uid != self->uid))
			continue;
		int r = 0;
		bool late = false;
		/* The clock read every 16 datagrams: a batch takes a few microseconds. */
		for (int i = 0; i < SESSION_BURST * 16 && !late; i++) {
			if ((r = session_dispatch_one(o)) < 0)
				break;
			late = i % 16 == 15 && util_now_ns(CLOCK_MONOTONIC) > deadline;
		}
		if (r < 0 && r != -EAGAIN)
			session_close(o, r);
		if (late || util_now_ns(CLOCK_MONOTONIC) > deadline)
			break;
	}
	srv->draining = 0;
}

/* A query's walk over the registry, part by part: the processes there were when it began
 * (pointers, checked again whenever a process has been forgotten since), and where the walk
 * stands in them. */
struct query_stream {
	Pmc__Query *q; /* the request's filters (owned copy) */
	struct process **procs;
	size_t n_procs;
	size_t next_proc;   /* into procs */
	size_t next_region; /* into procs[next_proc]->regions */
	bool listed;        /* a region of procs[next_proc] is listed already */
	uint64_t evicted;   /* the registry's count of forgotten processes at the last check */
	uint32_t visible, hidden;
	uint8_t *pending; /* an encoded part the socket had no room for */
	size_t pending_len;
	bool last; /* pending is the last part */
	struct event *wev;
};

/* Bytes a part of a streamed reply holds, about: a region more past them starts the next. */
#define QUERY_PART_BYTES (64 * 1024)
/* Daemon time a streamed reply takes before the loop serves others again. */
#define QUERY_STEP_NS (1000 * 1000)

static void
query_stream_free(struct query_stream *qs)
{
	if (!qs)
		return;
	if (qs->q)
		pmc__query__free_unpacked(qs->q, NULL);
	if (qs->wev)
		event_free(qs->wev);
	free(qs->procs);
	free(qs->pending);
	free(qs);
}

static int
proc_ptr_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t) * (struct process *const *)a;
	uintptr_t y = (uintptr_t) * (struct process *const *)b;
	return x < y ? -1 : x > y;
}

/* Forgets the processes of @qs the registry has forgotten since the last check. */
static int
query_stream_check(struct query_stream *qs, struct registry *reg)
{
	if (reg->evicted == qs->evicted)
		return 0;
	struct process **live = malloc((reg->n_procs + 1) * sizeof(*live));
	if (!live)
		return -ENOMEM;
	size_t n = 0;
	for (struct process *p = reg->procs; p; p = p->next)
		live[n++] = p;
	qsort(live, n, sizeof(*live), proc_ptr_cmp);
	for (size_t i = qs->next_proc; i < qs->n_procs; i++)
		if (qs->procs[i] && !bsearch(&qs->procs[i], live, n, sizeof(*live), proc_ptr_cmp))
			qs->procs[i] = NULL;
	free(live);
	qs->evicted = reg->evicted;
	return 0;
}

/* Per region listed: its figures, one Stats for the wall time and each event, and the
 * derived ratios. */
static size_t
region_estimate(const struct process *p, const struct region_agg *r)
{
	size_t n = 64 + strlen(r->name) + strlen(p->comm) + DERIVED_MAX * 24;
	for (size_t j = 0; j < r->n_ev; j++)
		n += r->seen[j] ? 96 + strlen(p->events[j]) : 0;
	return n + 96;
}

/* Whether @s may see the figures of @p. */
static bool
query_mine(const struct session *s, const struct process *p)
{
	return s->admin || p->uid == s->uid;
}

/* Walks @qs from where it stands, counting what the caller may see and choosing what this
 * part lists: up to @max_bytes (at least one region). Leaves @qs where the part ends and
 * says, in *@n_rs, *@n_es and *@n_pl, how many regions, events and process losses it
 * lists. @from_proc/@from_region: where it began. */
static void
query_plan(struct session *s, struct query_stream *qs, size_t max_bytes, size_t *n_rs, size_t *n_es,
           size_t *n_pl)
{
	const Pmc__Query *q = qs->q;
	size_t bytes = 0;
	*n_rs = *n_es = *n_pl = 0;
	for (; qs->next_proc < qs->n_procs; qs->next_proc++, qs->next_region = 0) {
		struct process *p = qs->procs[qs->next_proc];
		if (!p)
			continue;
		bool mine = query_mine(s, p);
		bool selected = query_match(q, p, NULL) && (mine || q->pid);
		if (qs->next_region == 0)
			qs->listed = false;
		for (; qs->next_region < p->n_regions; qs->next_region++) {
			struct region_agg *r = p->regions[qs->next_region];
			if (!r->count)
				continue;
			if (!mine) {
				qs->hidden += selected;
				continue;
			}
			if (!selected || !query_match(q, p, r)) {
				qs->visible++;
				continue;
			}
			size_t need = region_estimate(p, r);
			if (*n_rs && bytes + need > max_bytes)
				return; /* the next part starts with it */
			qs->visible++;
			bytes += need;
			(*n_rs)++;
			qs->listed = true;
			for (size_t j = 0; j < r->n_ev; j++)
				*n_es += r->seen[j];
		}
		if (qs->listed)
			for (unsigned k = 0; k < DROP_N; k++)
				*n_pl += p->dropped[k] != 0;
	}
}

/* Fills @qr with the part @query_plan chose from (@from_proc, @from_region) to where @qs
 * stands now; its parts in @b and @pl. */
static int
query_fill(struct session *s, const struct query_stream *qs, size_t from_proc, size_t from_region,
           bool from_listed, size_t n_rs, size_t n_es, size_t n_pl, struct query_buf *b,
           Pmc__ProcessLoss **pl, Pmc__ProcessLoss ***plp, Pmc__QueryReply *qr)
{
	const Pmc__Query *q = qs->q;
	b->rs = calloc(n_rs + 1, sizeof(*b->rs));
	b->rsp = calloc(n_rs + 1, sizeof(*b->rsp));
	b->st = calloc(n_rs + n_es + 1, sizeof(*b->st));
	b->es = calloc(n_es + 1, sizeof(*b->es));
	b->esp = calloc(n_es + 1, sizeof(*b->esp));
	b->dv = calloc(DERIVED_MAX * n_rs + 1, sizeof(*b->dv));
	b->dvp = calloc(DERIVED_MAX * n_rs + 1, sizeof(*b->dvp));
	*pl = calloc(n_pl + 1, sizeof(**pl));
	*plp = calloc(n_pl + 1, sizeof(**plp));
	if (!b->rs || !b->rsp || !b->st || !b->es || !b->esp || !b->dv || !b->dvp || !*pl || !*plp)
		return -ENOMEM;

	for (size_t pi = from_proc; pi <= qs->next_proc && pi < qs->n_procs; pi++) {
		struct process *p = qs->procs[pi];
		if (!p)
			continue;
		size_t first = pi == from_proc ? from_region : 0;
		size_t end = pi == qs->next_proc ? qs->next_region : p->n_regions;
		bool listed = pi == from_proc && from_listed;
		if (!query_mine(s, p) || !query_match(q, p, NULL))
			continue;
		for (size_t i = first; i < end && i < p->n_regions && b->n_rs < n_rs; i++) {
			struct region_agg *r = p->regions[i];
			if (!r->count || !query_match(q, p, r))
				continue;
			listed = true;
			Pmc__RegionStats *rs = &b->rs[b->n_rs];
			b->rsp[b->n_rs++] = rs;
			pmc__region_stats__init(rs);
			rs->pid = p->pid;
			rs->uid = p->uid;
			rs->comm = p->comm;
			rs->name = r->name;
			rs->count = r->count;
			rs->wall_ns = &b->st[b->n_st++];
			fill_stats(rs->wall_ns, &r->wall);
			rs->events = &b->esp[b->n_es];
			for (size_t j = 0; j < r->n_ev && b->n_es < n_es; j++) {
				if (!r->seen[j])
					continue;
				Pmc__EventStats *es = &b->es[b->n_es];
				b->esp[b->n_es++] = es;
				rs->n_events++;
				pmc__event_stats__init(es);
				es->name = p->events[j];
				es->stats = &b->st[b->n_st++];
				fill_stats(es->stats, &r->ev[j].st);
				es->scaled_count = r->ev[j].scaled;
				es->scaled_ratio = r->ev[j].scaled ? r->ev[j].ratio_sum /
				                                             (double)r->ev[j].scaled
				                                   : 0.0;
				if (j < PROCESS_MAX_EVENTS && (p->has_floor >> j & 1)) {
					es->floor = p->floor[j];
					es->too_short = too_short(&r->ev[j].st, p->floor[j]);
				}
			}
			rs->wall_floor = p->wall_floor;
			rs->wall_too_short = too_short(&r->wall, p->wall_floor);
			struct derived d[DERIVED_MAX];
			size_t nd = region_derived(p, r, d);
			rs->derived = &b->dvp[b->n_dv];
			rs->n_derived = nd;
			for (size_t j = 0; j < nd; j++) {
				Pmc__Derived *dv = &b->dv[b->n_dv];
				b->dvp[b->n_dv++] = dv;
				pmc__derived__init(dv);
				dv->name = (char *)d[j].name;
				dv->value = d[j].value;
			}
		}
		/* The process's losses, once: in the part that finishes its regions. */
		if (pi == qs->next_proc || !listed)
			continue;
		for (unsigned k = 0; k < DROP_N && qr->n_losses < n_pl; k++) {
			if (!p->dropped[k])
				continue;
			Pmc__ProcessLoss *x = &(*pl)[qr->n_losses];
			pmc__process_loss__init(x);
			x->pid = p->pid;
			x->reason = (char *)drop_reason_name(k);
			x->count = p->dropped[k];
			(*plp)[qr->n_losses++] = x;
		}
	}
	qr->n_regions = b->n_rs;
	qr->regions = b->rsp;
	qr->losses = *plp;
	return 0;
}

/* The next part of @s's reply, encoded in @qs->pending (the last when @qs->last); or, when
 * @direct, the whole reply, sent at once. */
static int
query_next_part(struct session *s, struct query_stream *qs, size_t max_bytes, bool direct)
{
	int r = query_stream_check(qs, &s->srv->reg);
	if (r < 0)
		return r;
	size_t from_proc = qs->next_proc, from_region = qs->next_region;
	bool from_listed = qs->listed;
	size_t n_rs, n_es, n_pl;
	query_plan(s, qs, max_bytes, &n_rs, &n_es, &n_pl);
	_cleanup_(query_buf_free) struct query_buf b = {0};
	_cleanup_free_ Pmc__ProcessLoss *pl = NULL;
	_cleanup_free_ Pmc__ProcessLoss **plp = NULL;
	Pmc__QueryReply qr = PMC__QUERY_REPLY__INIT;
	r = query_fill(s, qs, from_proc, from_region, from_listed, n_rs, n_es, n_pl, &b, &pl, &plp,
	               &qr);
	if (r < 0)
		return r;
	qs->last = qs->next_proc >= qs->n_procs;
	qr.more = !qs->last;
	if (qs->last) {
		qr.visible = qs->visible;
		qr.hidden = qs->hidden;
	}
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_QUERY;
	resp.query = &qr;
	size_t len = pmc__response__get_packed_size(&resp);
	if (len > WIRE_MAX_DATAGRAM)
		return -EMSGSIZE;
	if (direct)
		return reply(s, &resp, NULL, 0);
	qs->pending = malloc(len ? len : 1);
	if (!qs->pending)
		return -ENOMEM;
	qs->pending_len = pmc__response__pack(&resp, qs->pending);
	return 0;
}

static void query_stream_on_writable(evutil_socket_t fd, short what, void *arg);

/* Sends what is left of @s's streamed reply, for up to QUERY_STEP_NS; then, or when the
 * socket is full, waits until it is writable. Return: 0, or < 0 to close the connection. */
static int
query_stream_step(struct session *s)
{
	struct query_stream *qs = s->qs;
	uint64_t deadline = util_now_ns(CLOCK_MONOTONIC) + QUERY_STEP_NS;
	for (;;) {
		if (!qs->pending) {
			int r = query_next_part(s, qs, QUERY_PART_BYTES, false);
			if (r < 0)
				return r;
		}
		ssize_t n = send(s->fd, qs->pending, qs->pending_len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return -errno;
		if (n >= 0) {
			free(qs->pending);
			qs->pending = NULL;
			if (qs->last) {
				/* Done: the connection is read again. */
				query_stream_free(qs);
				s->qs = NULL;
				return event_add(s->ev, NULL) < 0 ? -ENOMEM : 0;
			}
			if (util_now_ns(CLOCK_MONOTONIC) < deadline)
				continue;
		}
		/* The socket is full, or this step took its time: go on when it has room. */
		if (!qs->wev) {
			qs->wev = event_new(s->srv->base, s->fd, EV_WRITE, query_stream_on_writable,
			                    s);
			if (!qs->wev)
				return -ENOMEM;
		}
		return event_add(qs->wev, NULL) < 0 ? -ENOMEM : 0;
	}
}

static void
query_stream_on_writable(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	int r = query_stream_step(s);
	if (r < 0)
		session_close(s, r);
}

/* A Query's filters, copied out of the request (which is freed after the handler). */
static Pmc__Query *
query_copy(const Pmc__Query *q)
{
	size_t len = pmc__query__get_packed_size(q);
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
	if (!buf)
		return NULL;
	pmc__query__pack(q, buf);
	return pmc__query__unpack(NULL, len, buf);
}

static int
handle_query(struct session *s, const Pmc__Request *req)
{
	struct registry *reg = &s->srv->reg;
	drain_others(s->srv, s, DRAIN_BUDGET_NS);

	/* A region with no samples (reset, or defined and never run) is not listed. Users see
	 * their own processes; root and --admin-group see all. The others' regions are only
	 * counted (hidden), and only for a query that names their pid, which the caller
	 * knows already: never by name (a count by glob would tell their names), never over
	 * all processes (another user's activity is theirs to see, as in Status). */
	struct query_stream *qs = calloc(1, sizeof(*qs));
	if (!qs)
		return reply_error(s, ENOMEM, "out of memory");
	qs->q = query_copy(req->query);
	qs->procs = malloc((reg->n_procs + 1) * sizeof(*qs->procs));
	if (!qs->q || !qs->procs) {
		query_stream_free(qs);
		return reply_error(s, ENOMEM, "out of memory");
	}
	for (struct process *p = reg->procs; p; p = p->next)
		qs->procs[qs->n_procs++] = p;
	qs->evicted = reg->evicted;

	if (req->query->stream) {
		/* Part by part, as the socket takes them; nothing else is read meanwhile. */
		s->qs = qs;
		event_del(s->ev);
		return query_stream_step(s);
	}
	/* One reply: an older client's, or one that wants the whole at once. */
	int r = query_next_part(s, qs, SIZE_MAX, true);
	query_stream_free(qs);
	if (r == -EMSGSIZE)
		return reply_error(s, EMSGSIZE,
		                   "the regions asked for do not fit in one reply: narrow the "
		                   "query with --pid, --comm or --region, or use a pmcctl that "
		                   "streams (1.1 or later)");
	if (r == -ENOMEM)
		return reply_error(s, ENOMEM, "out of memory");
	return r;
}

static int
handle_reset(struct session *s, const Pmc__Request *req)
{
	if (!s->admin)
		return reply_error(s, EPERM,
		                   "reset needs root or a member of the daemon's --admin-group "
		                   "(uid %d is neither)",
		                   (int)s->uid);
	drain_others(s->srv, s, DRAIN_BUDGET_NS);
	Pmc__ResetReply rr = PMC__RESET_REPLY__INIT;
	rr.cleared = registry_reset(&s->srv->reg, req->reset->pid, req->reset->region);
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_RESET;
	resp.reset = &rr;
	return reply(s, &resp, NULL, 0);
}

static int
handle_status(struct session *s, const Pmc__Request *req)
{
	struct server *srv = s->srv;
	drain_others(s->srv, s, DRAIN_STATUS_NS);
	Pmc__StatusReply st = PMC__STATUS_REPLY__INIT;
	st.daemon_version = PMC_VERSION;
	st.protocol_version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	st.uptime_ns = util_now_ns(CLOCK_MONOTONIC) - srv->started_ns;
	st.all_users = s->admin;
	st.uid = (uint32_t)s->uid;
	if (s->admin) {
		st.clients = srv->n_sessions - 1; /* the caller's own connection left out */
		st.threads = srv->n_threads;
		st.processes = (uint32_t)srv->reg.n_procs;
		st.regions = (uint32_t)srv->reg.n_regions;
		st.samples = srv->samples;
		st.batches = srv->batches;
		st.dropped = srv->dropped;
		st.rejected = srv->rejected;
		st.lost = srv->lost;
		st.evicted = srv->reg.evicted;
		st.histogram_bytes = srv->hist_budget.used;
		for (size_t i = 0; i < srv->users.n; i++)
			st.histogram_missed += srv->users.v[i]->hist.missed;
	} else {
		/* A user sees its own figures only, as in queries: what its processes sent,
		 * dropped and lost, never another user's activity. */
		const struct user_share *u = s->user;
		st.clients = u->connections - 1; /* the caller's own connection left out */
		st.threads = u->threads;
		for (const struct process *p = srv->reg.procs; p; p = p->next)
			if (p->uid == s->uid) {
				st.processes++;
				st.regions += (uint32_t)p->n_regions;
			}
		st.samples = u->samples;
		st.batches = u->batches;
		st.dropped = u->dropped;
		st.rejected = u->rejected;
		st.lost = u->lost;
		st.evicted = u->evicted;
		st.histogram_bytes = u->hist.used;
		st.histogram_missed = u->hist.missed;
	}
	/* The losses by reason, over the processes the caller sees. */
	uint64_t by[DROP_N] = {0};
	Pmc__Loss loss[DROP_N], *lossp[DROP_N];
	for (const struct process *p = srv->reg.procs; p; p = p->next)
		if (s->admin || p->uid == s->uid)
			for (unsigned r = 0; r < DROP_N; r++)
				by[r] += p->dropped[r];
	for (unsigned r = 0; r < DROP_N; r++) {
		if (!by[r])
			continue;
		pmc__loss__init(&loss[st.n_losses]);
		loss[st.n_losses].reason = (char *)drop_reason_name(r);
		loss[st.n_losses].count = by[r];
		lossp[st.n_losses] = &loss[st.n_losses];
		st.n_losses++;
	}
	st.losses = lossp;
	st.pid = getpid();
	st.state_file = (char *)(srv->state_path ? srv->state_path : "");
	st.state_saved_ns = srv->state_saved_ns;
	const char *hint;
	st.user_reads = perf_user_reads(&hint);
	st.user_reads_hint = (char *)(hint ? hint : "");
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_STATUS;
	resp.status = &st;
	return reply(s, &resp, NULL, 0);
}

struct event_list {
	Pmc__EventInfo *info;
	size_t n, cap;
	int oom;
};

static void
event_list_add(void *ctx, const char *name, const char *desc)
{
	struct event_list *l = ctx;
	if (l->oom)
		return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		Pmc__EventInfo *v = realloc(l->info, cap * sizeof(*v));
		if (!v) {
			l->oom = 1;
			return;
		}
		l->info = v;
		l->cap = cap;
	}
	Pmc__EventInfo *e = &l->info[l->n];
	pmc__event_info__init(e);
	struct perf_event_attr attr;
	int r = perf_resolve(name, &attr);
	bool hardware = r == 0 && attr.type != PERF_TYPE_SOFTWARE;
	if (r == 0)
		r = perf_probe(name);
	e->name = strdup(name);
	e->description = strdup(desc);
	e->error = strdup(r ? strerror(-r) : "");
	e->usable = r == 0;
	e->hardware = hardware;
	if (!e->name || !e->description || !e->error) {
		free(e->name);
		free(e->description);
		free(e->error);
		l->oom = 1;
		return;
	}
	l->n++;
}

static void
event_list_free(struct event_list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->info[i].name);
		free(l->info[i].description);
		free(l->info[i].error);
	}
	free(l->info);
}

static int
handle_list_events(struct session *s, const Pmc__Request *req)
{
	size_t n, n_def;
	const struct perf_known *k = perf_known_events(&n);
	char *const *def = perf_default_events(&n_def);
	_cleanup_(event_list_free) struct event_list l = {0};

	/* Each name is opened once on the daemon itself to tell whether it counts here. */
	for (size_t i = 0; i < n; i++)
		event_list_add(&l, k[i].name, k[i].description);
	perf_pfm_events(event_list_add, &l);
	if (l.oom)
		return reply_error(s, ENOMEM, "out of memory");
	_cleanup_free_ Pmc__EventInfo **ip = calloc(l.n + 1, sizeof(*ip));
	if (!ip)
		return reply_error(s, ENOMEM, "out of memory");
	for (size_t i = 0; i < l.n; i++)
		ip[i] = &l.info[i];
	Pmc__EventsReply er = PMC__EVENTS_REPLY__INIT;
	er.n_events = l.n;
	er.events = ip;
	er.hardware_pmu = perf_hardware_pmu();
	er.n_default_events = n_def;
	er.default_events = (char **)def;
	const char *hint;
	er.user_reads = perf_user_reads(&hint);
	er.user_reads_hint = (char *)(hint ? hint : "");
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_EVENTS;
	resp.events = &er;
	return reply(s, &resp, NULL, 0);
}

typedef int (*handler_fn)(struct session *s, const Pmc__Request *req);

static const struct {
	handler_fn fn;
	bool needs_hello;
} handlers[] = {
        [PMC__REQUEST__BODY_HELLO] = {handle_hello, false},
        [PMC__REQUEST__BODY_REGISTER_THREAD] = {handle_register, true},
        [PMC__REQUEST__BODY_SAMPLE_BATCH] = {handle_sample_batch, true},
        [PMC__REQUEST__BODY_THREAD_EXIT] = {handle_thread_exit, true},
        [PMC__REQUEST__BODY_QUERY] = {handle_query, true},
        [PMC__REQUEST__BODY_RESET] = {handle_reset, true},
        [PMC__REQUEST__BODY_STATUS] = {handle_status, true},
        [PMC__REQUEST__BODY_LIST_EVENTS] = {handle_list_events, true},
        [PMC__REQUEST__BODY_THREAD_FLOOR] = {handle_thread_floor, true},
};

/* Returns 0 to go on reading, -EAGAIN when drained, other < 0 to drop the peer. */
static int
session_dispatch_one(struct session *s)
{
	int fds[1];
	size_t n_fds = 0;
	ssize_t len =
	        wire_recv(s->fd, s->srv->rxbuf, SERVER_MAX_REQUEST, fds, 0, &n_fds, MSG_DONTWAIT);
	if (len < 0) {
		if (len == -EMSGSIZE)
			log_warn_limited("pid %d: request over %u bytes: closing the connection",
			                 (int)s->pid, SERVER_MAX_REQUEST);
		else if (len == -EBADMSG)
			log_warn_limited(
			        "pid %d: unexpected file descriptors: closing the connection",
			        (int)s->pid);
		return (int)len;
	}
	/* The hot request, a plain SampleBatch, is decoded by hand; the rest by protobuf-c. */
	Pmc__Request *req = NULL, fast = PMC__REQUEST__INIT;
	Pmc__SampleBatch fast_batch;
	int r = 0;
	if (batch_decode(s->srv->rxbuf, (size_t)len, &fast_batch) == 0) {
		fast.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
		fast.sample_batch = &fast_batch;
		req = &fast;
	} else if ((r = wire_unpack_request(s->srv->rxbuf, (size_t)len, &req)) < 0) {
		log_warn_limited("pid %d: malformed request (%zd bytes): closing the connection",
		                 (int)s->pid, len);
		return r;
	}
	unsigned c = req->body_case;
	if (c >= ARRAY_SIZE(handlers) || !handlers[c].fn) {
		r = -EBADMSG;
	} else if (handlers[c].needs_hello && !s->hello) {
		log_warn_limited("pid %d: request before Hello: closing the connection",
		                 (int)s->pid);
		r = -EPROTO;
	} else {
		r = handlers[c].fn(s, req);
	}
	if (req != &fast)
		pmc__request__free_unpacked(req, NULL);
	return r == -EAGAIN ? -EPIPE : r;
}

static void
session_on_hello_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	log_warn_limited("pid %d (uid %d): no Hello within %u s (--hello-timeout): closing the "
	                 "connection",
	                 (int)s->pid, (int)s->uid, s->srv->policy.hello_timeout_s);
	session_close(s, -ETIMEDOUT);
}

static void
session_on_readable(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	int r = session_pump(s, SESSION_BURST);
	if (r < 0)
		session_close(s, r);
}

/* The daemon stops: its connections close from its side, and the samples their clients hold
 * are not lost but kept for the next daemon. */
static bool stopping;

void
session_drain_all(struct server *srv, bool final)
{
	/* Before a final drain, refuse further datagrams: a client's send then fails and
	 * it keeps the samples for the next daemon, instead of queueing them here to be
	 * dropped unread. */
	stopping |= final;
	if (final)
		for (struct session *s = srv->sessions; s; s = s->next)
			shutdown(s->fd, SHUT_RD);
	drain_others(srv, NULL, 0);
}

int
session_pump(struct session *s, unsigned max)
{
	for (unsigned i = 0; i < max && !s->qs; i++) {
		int r = session_dispatch_one(s);
		if (r == -EAGAIN)
			return 0;
		if (r < 0)
			return r;
	}
	return 0;
}

/* The client hung up: its process ended or exec'd (the library never closes a working
 * connection; it drops what it announced on one it gives up on), so what its threads still
 * held, as each one's last batch said, never comes: lost. A thread that said ThreadExit is
 * gone from the list (its library counted what it could not send as dropped). */
static void
count_unsent(struct session *s)
{
	uint64_t n = 0;
	if (stopping || !s->proc)
		return;
	for (size_t i = 0; i < s->n_threads; i++)
		n += s->threads[i].pending;
	if (!n)
		return;
	s->proc->dropped[LOST_UNSENT] += n;
	s->srv->lost += n;
	s->user->lost += n;
	log_warn_limited("pid %d: ended holding %llu samples it had announced and not sent: "
	                 "counted as lost",
	                 (int)s->pid, (unsigned long long)n);
}

static void
session_close(struct session *s, int r)
{
	if (r == -EBADMSG || r == -EPROTO || r == -EMSGSIZE || r == -ETIMEDOUT) {
		s->srv->rejected++;
		s->user->rejected++;
	}
	if (r == -ECONNRESET)
		count_unsent(s);
	if (r != -ECONNRESET)
		log_debug("pid %d: closing connection: %s", (int)s->pid, strerror(-r));
	session_free(s);
}

int
session_new(struct server *srv, int fd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid <= 0) {
		close(fd);
		return -EPERM;
	}
	struct session *s = calloc(1, sizeof(*s));
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	s->srv = srv;
	s->fd = fd;
	s->pid = cred.pid;
	s->uid = cred.uid;
	s->gid = cred.gid;
	len = sizeof(s->pidfd);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &s->pidfd, &len) < 0)
		s->pidfd = -1;
	/* Unreadable (the peer is gone): no capabilities, which only narrows what it may do. */
	if (creds_read_peer(s->pid, s->uid, s->gid, &s->creds) < 0 ||
	    (s->pidfd >= 0 && !peer_alive(s)))
		s->creds = (struct creds_peer){.uid = s->uid, .gid = s->gid};
	s->admin = policy_is_admin(&srv->policy, s->pid, s->uid, s->gid);
	s->user = users_get(&srv->users, s->uid);
	if (s->user && s->user->connections >= srv->policy.max_clients_per_user) {
		char msg[200];
		snprintf(msg, sizeof(msg),
		         "uid %d holds %u connections, its share (--max-clients-per-user %u): "
		         "close some, or ask the operator to raise the share",
		         (int)s->uid, s->user->connections, srv->policy.max_clients_per_user);
		if (!s->user->warned)
			log_warn_limited("refusing connections of uid %d: %s", (int)s->uid, msg);
		s->user->warned = true;
		Pmc__Response resp = PMC__RESPONSE__INIT;
		resp.error = EUSERS;
		resp.message = msg;
		(void)wire_send(fd, &resp.base, NULL, 0, MSG_DONTWAIT);
		s->user = NULL;
	}
	/* A connection that says nothing holds a slot every user needs: it has
	 * --hello-timeout seconds to say Hello. */
	struct timeval hello_tv = {.tv_sec = srv->policy.hello_timeout_s};
	s->ev = s->user ? event_new(srv->base, fd, EV_READ | EV_PERSIST, session_on_readable, s)
	                : NULL;
	s->hello_ev = s->ev ? evtimer_new(srv->base, session_on_hello_timeout, s) : NULL;
	if (!s->hello_ev || event_add(s->ev, NULL) < 0 || event_add(s->hello_ev, &hello_tv) < 0) {
		int r = s->user ? -ENOMEM : -EUSERS;
		if (s->ev)
			event_free(s->ev);
		if (s->hello_ev)
			event_free(s->hello_ev);
		if (s->pidfd >= 0)
			close(s->pidfd);
		free(s);
		close(fd);
		return r;
	}
	s->user->connections++;
	int sndbuf = 0;
	len = sizeof(sndbuf);
	if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) == 0 && sndbuf > 0)
		s->sndbuf = (size_t)sndbuf / 2; /* the kernel reports twice what was set */
	s->next = srv->sessions;
	if (srv->sessions)
		srv->sessions->prev = s;
	srv->sessions = s;
	srv->n_sessions++;
	log_debug("pid %d (uid %d): connected", (int)s->pid, (int)s->uid);
	return 0;
}

void
session_free(struct session *s)
{
	if (!s)
		return;
	struct server *srv = s->srv;
	query_stream_free(s->qs);
	for (size_t i = 0; i < s->n_threads; i++)
		thread_close(s, &s->threads[i]);
	free(s->threads);
	free(s->ids);
	if (s->prev)
		s->prev->next = s->next;
	else
		srv->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	srv->n_sessions--;
	if (s->proc && --s->proc->connections == 0)
		registry_process_ended(&srv->reg, s->proc, util_now_ns(CLOCK_MONOTONIC));
	event_free(s->ev);
	event_free(s->hello_ev);
	s->user->connections--;
	if (s->pidfd >= 0)
		close(s->pidfd);
	close(s->fd);
	free(s);
}
