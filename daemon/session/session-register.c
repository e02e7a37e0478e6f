/* session-register: a connection's threads: registering one (its counters opened as the
 * kernel would let the peer open them, and passed to it), reattaching one after a restart,
 * its floor, its exit, and the fds of threads that ended unannounced. */
#include "session/session-internal.h"

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

#include "common/util.h"
#include "kernel/creds.h"
#include "kernel/log.h"
#include "kernel/perf.h"
#include "kernel/threadid.h"
#include "model/batch.h"
#include "model/share.h"
#include "session/server.h"
#include "wire/wire.h"

struct session_thread *
session_register_find_thread(struct session *s, pid_t tid)
{
	for (size_t i = 0; i < s->n_threads; i++)
		if (s->threads[i].tid == tid)
			return &s->threads[i];
	return NULL;
}

void
session_register_thread_close(struct session *s, struct session_thread *t)
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
 * session_register_thread_close() undoes the counting. Return: 0 or -ENOMEM (@t still the
 * caller's). */
static int
thread_store(struct session *s, struct session_thread *old, struct session_thread *t)
{
	if (old) {
		session_register_thread_close(s, old);
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
	session_register_thread_close(s, t);
	*t = s->threads[--s->n_threads];
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

/* Whether @s's uid, holding @held counter fds (less those of @old, replaced), may hold @n
 * more: its share, or more while the other uids' shares and one for a newcomer stay free
 * of the daemon's fd limit. */
static bool
fds_allowed(const struct session *s, size_t held, size_t n, const struct session_thread *old)
{
	const struct server *srv = s->srv;
	size_t share = srv->policy.max_fds_per_user;
	size_t cap = srv->fd_limit > SERVER_FD_RESERVE ? srv->fd_limit - SERVER_FD_RESERVE : 0;
	size_t total = srv->n_fds - (old ? old->n_fds : 0);
	return share_allows(held, n, share, total, cap,
	                    users_others_unused(&srv->model.users, s->uid, USERS_FDS, share));
}

/* Threads of @uid that ended without a ThreadExit (a client killed, or one that never says
 * it) hold their counter fds until their connection closes: free them, but never thread
 * @keep.
 * Only when @uid reaches its share of fds, so the scan costs nothing otherwise.
 * Return: the number of threads freed. */
#define REAP_AGAIN_NS (100 * 1000 * 1000)

static size_t
reap_dead_threads(struct server *srv, uid_t uid, pid_t keep)
{
	size_t n = 0;
	struct session *o;
	pmc_list_for_each(o, &srv->sessions, link) {
		if (o->uid != uid)
			continue;
		for (size_t i = 0; i < o->n_threads;) {
			struct session_thread *t = &o->threads[i];
			if (t->host_tid != keep && t->n_fds && !thread_of(o->pid, t->host_tid)) {
				drop_thread(o, t);
				n++;
			} else {
				i++;
			}
		}
	}
	return n;
}

static bool reattach_of_gone(struct session *s, const Pmc__RegisterThread *rt);
static int register_checked(struct session *s, const Pmc__RegisterThread *rt, pid_t ctid, pid_t tid,
                            int pidfd, char *why, size_t why_len);

int
session_register_handle(struct session *s, const Pmc__Request *req)
{
	const Pmc__RegisterThread *rt = req->register_thread;
	s->no_reply = rt->reattach;
	int r = register_thread(s, rt);
	/* Refused as its process ended meanwhile (after the look at its pidfd): a reattach,
	 * which got no reply, is taken as one of a process gone after all. */
	if (r < 0 && reattach_of_gone(s, rt)) {
		char why[384];
		r = register_checked(s, rt, rt->tid, 0, -1, why, sizeof(why));
	}
	s->no_reply = 0;
	/* A refused reattach has no reply to carry the refusal: remember the thread, and
	 * drop (counting them) its batches, rather than closing a connection the whole process
	 * shares, which it would only open again to be refused again. */
	if (r < 0 && rt->reattach && s->n_refused < ARRAY_SIZE(s->refused)) {
		s->refused[s->n_refused++] = rt->tid;
		return 0;
	}
	return r;
}

bool
session_register_thread_refused(const struct session *s, pid_t tid)
{
	for (size_t i = 0; i < s->n_refused; i++)
		if (s->refused[i] == tid)
			return true;
	return false;
}

/* The thread's word in the connection's heads table, where it names one the table has (a
 * table the daemon could not map has none). */
static uint32_t
head_slot(const struct session *s, const Pmc__RegisterThread *rt)
{
	return s->heads && rt->head_slot <= s->n_heads ? rt->head_slot : 0;
}

/* A thread that still holds counters from a daemon that restarted: record its events
 * (already checked, in the client's order and groups) without opening anything. */
static int
reattach_thread(struct session *s, struct session_thread *old, const Pmc__RegisterThread *rt,
                pid_t host_tid, char *const *names)
{
	size_t n = rt->n_events;
	if (n == 0 || rt->n_groups != n)
		return session_reply_error(s, EINVAL, "reattach of thread %d names no events",
		                           (int)rt->tid);
	struct session_thread t = {.tid = rt->tid,
	                           .host_tid = host_tid,
	                           .n = n,
	                           .head_slot = head_slot(s, rt),
	                           .next_sample = rt->next_sample};
	t.ev_id = malloc(n * sizeof(uint32_t));
	if (!t.ev_id)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int id = registry_process_event_id(s->proc, names[i]);
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

struct process *
session_register_process(struct session *s)
{
	if (s->proc)
		return s->proc;
	struct registry *reg = &s->srv->model.reg;
	struct process *p = NULL;
	if (!s->peer_start) {
		/* Not known as it connected (no pidfd, an older kernel): as /proc says now. */
		if (s->pidfd < 0 || session_peer_alive(s))
			p = registry_process(reg, s->pid, s->uid);
	} else {
		/* Its identity as it connected, when its pidfd said the pid was its own. While it
		 * lives (the same start time read again), read afresh: its comm now, its cgroup.
		 * Once gone, that identity alone, nothing read from /proc (the pid may name
		 * another process by now). */
		uint64_t start = 0;
		char comm[17];
		if (session_peer_alive(s) &&
		    registry_process_read_start(s->pid, &start, comm) == 0 &&
		    start == s->peer_start && session_peer_alive(s))
			p = registry_process_at(reg, s->pid, start, comm, s->uid, true);
		if (!p)
			p = registry_process_at(reg, s->pid, s->peer_start, s->peer_comm, s->uid,
			                        false);
	}
	if (!p)
		return NULL;
	s->proc = p;
	p->connections++;
	session_tag_process(s);
	return p;
}

/* A reattach opens nothing: one read after its process ended (its queue read late) is still
 * that process's, which its connection identified as it connected, and so are the batches
 * behind it: counted, not refused (e2e-loss: a program that reconnects and exits at once).
 * Whether @rt is one such. */
static bool
reattach_of_gone(struct session *s, const Pmc__RegisterThread *rt)
{
	if (!rt->reattach || rt->tid <= 0 || !s->peer_start || session_peer_alive(s))
		return false;
	log_debug("pid %d: reattach of thread %d read after the process ended: taken as its own",
	          (int)s->pid, (int)rt->tid);
	return true;
}

/* The refusal of a registration on a connection whose process has exited. */
static int
orphan_refused(struct session *s)
{
	return session_reply_error(s, ESRCH,
	                           "process %d has exited: its connection may not register threads",
	                           (int)s->pid);
}

/* The thread @rt is for, in the daemon's pid namespace: proven by the pidfd it carries,
 * or found among the peer's own threads by the id it claims (threadid.h). Return: the
 * thread id, or 0 once the refusal is sent (*@refused: what the handler returns). */
static pid_t
thread_identify(struct session *s, const Pmc__RegisterThread *rt, char *why, size_t len,
                int *refused)
{
	if (!rt->pidfd && s->same_ns < 0)
		s->same_ns = threadid_same_ns(s->pid);
	pid_t tid = rt->pidfd     ? threadid_from_pidfd(s->rx_fd, s->pid, why, len)
	            : rt->tid > 0 ? threadid_claimed(s->pid, s->same_ns > 0, rt->tid, why, len)
	                          : (snprintf(why, len, "thread id %d is not valid", (int)rt->tid),
	                             -EPERM);
	/* A pidfd refused: the peer may have exited (a child registering on the connection it
	 * inherited), which the refusal says. */
	if (tid < 0 && rt->pidfd && s->pidfd >= 0 && !session_peer_alive(s)) {
		*refused = orphan_refused(s);
		return 0;
	}
	if (tid == -ESRCH) {
		*refused = session_reply_error(s, ESRCH, "thread %d has exited", (int)rt->tid);
		return 0;
	}
	if (tid < 0) {
		log_warn_limited("pid %d (uid %d): registration refused: %s", (int)s->pid,
		                 (int)s->uid, why);
		*refused = session_reply_error(s, EPERM, "%s", why);
		return 0;
	}
	return tid;
}

/* After the open: @tid still the thread the registration named (by @pidfd, when >= 0), of
 * the peer process. */
static bool
thread_still(struct session *s, int pidfd, pid_t tid)
{
	if (pidfd >= 0)
		return threadid_check(pidfd, s->pid, tid) == 0;
	return thread_of(s->pid, tid);
}

static bool
events_refused(int *refused, int r)
{
	*refused = r;
	return false;
}

bool
session_register_events_check(struct session *s, char *const *names, size_t n,
                              struct session_events *ev, int *refused)
{
	if (!n)
		names = perf_default_events(&n);
	if (n > PMC_LIMIT_EVENTS)
		return events_refused(
		        refused,
		        session_reply_error(s, E2BIG, "%zu events asked for; at most %d per thread",
		                            n, PMC_LIMIT_EVENTS));
	/* Every name in its one spelling: "cs", "cs:uk" and "context-switches" are one event,
	 * kept once per process. */
	for (size_t i = 0; i < n; i++) {
		int r = perf_canonical(names[i], ev->canon[i], sizeof(ev->canon[i]), &ev->attrs[i]);
		if (r == -ENOENT) {
			const char *hint = perf_suggest(names[i]);
			return events_refused(
			        refused,
			        session_reply_error(
			                s, ENOENT,
			                "unknown event '%.64s'%s%s%s; 'pmcctl events' lists the "
			                "events this machine can count",
			                names[i], hint ? " (did you mean '" : "", hint ? hint : "",
			                hint ? "'?)" : ""));
		}
		if (r < 0)
			return events_refused(
			        refused,
			        session_reply_error(
			                s, -r,
			                "bad event name '%.64s': use NAME, NAME:u, NAME:k or "
			                "NAME:uk (libpfm4 names: PMU::EVENT[:UMASK...] with "
			                "the same modes; no other modifier)",
			                names[i]));
		ev->cn[i] = ev->canon[i];
		for (size_t j = 0; j < i; j++)
			if (!strcmp(ev->canon[j], ev->canon[i]) ||
			    (ev->attrs[j].type == ev->attrs[i].type &&
			     ev->attrs[j].config == ev->attrs[i].config &&
			     ev->attrs[j].config1 == ev->attrs[i].config1 &&
			     ev->attrs[j].config2 == ev->attrs[i].config2 &&
			     ev->attrs[j].exclude_user == ev->attrs[i].exclude_user &&
			     ev->attrs[j].exclude_kernel == ev->attrs[i].exclude_kernel))
				return events_refused(
				        refused,
				        session_reply_error(
				                s, EINVAL,
				                "event '%.64s' is asked for twice ('%.64s' and "
				                "'%.64s'): each event may be named once",
				                ev->canon[i], names[j], names[i]));
	}
	ev->n = n;
	const struct policy *pol = &s->srv->policy;
	/* A gone process's reattach opens nothing: its groups (/proc) are not read, nor
	 * needed. */
	bool kernel_ok = s->reattach_gone || policy_may_count_kernel(pol, s->pid, s->uid, s->gid);
	for (size_t i = 0; i < n; i++) {
		const struct perf_event_attr *attr = &ev->attrs[i];
		if (!policy_event_allowed(pol, attr))
			return events_refused(
			        refused,
			        session_reply_error(
			                s, EACCES,
			                "event '%.64s' is not allowed here: the operator set "
			                "--allow-events",
			                ev->cn[i]));
		/* Software events of one's own thread count kernel activity the process
		 * can already see (/proc/self/status); hardware ones would observe the
		 * kernel itself. */
		if (!attr->exclude_kernel && attr->type != PERF_TYPE_SOFTWARE && !kernel_ok) {
			/* The name without its mode: "perf::CYCLES:k" -> "perf::CYCLES". */
			size_t base = strlen(ev->cn[i]);
			if (base > 2 && ev->cn[i][base - 2] == ':' && ev->cn[i][base - 1] == 'k')
				base -= 2;
			else if (base > 3 && !strcmp(ev->cn[i] + base - 3, ":uk"))
				base -= 3;
			else if (base > 4 && !strcmp(ev->cn[i] + base - 4, ":u:k"))
				base -= 4;
			return events_refused(
			        refused,
			        session_reply_error(
			                s, EACCES,
			                "counting kernel mode ('%.64s') is not allowed for uid "
			                "%d: use '%.*s:u', or ask the operator for --allow-kernel",
			                ev->cn[i], (int)s->uid, (int)base, ev->cn[i]));
		}
	}

	return true;
}

static int register_checked(struct session *s, const Pmc__RegisterThread *rt, pid_t ctid, pid_t tid,
                            int pidfd, char *why, size_t why_len);

static int
register_thread(struct session *s, const Pmc__RegisterThread *rt)
{
	char why[384];

	if (reattach_of_gone(s, rt))
		return register_checked(s, rt, rt->tid, 0, -1, why, sizeof(why));
	/* A live thread of the peer, which a pidfd proves (threadid_from_pidfd()), proves the
	 * peer alive: its pidfd is polled first only for a registration by id. */
	if (!rt->pidfd && s->pidfd >= 0 && !session_peer_alive(s))
		return orphan_refused(s);
	/* tid: the thread in the daemon's namespace; ctid: as the client names it. */
	int r = 0;
	pid_t ctid = rt->tid, tid = thread_identify(s, rt, why, sizeof(why), &r);
	if (tid <= 0)
		return r;
	/* A pidfd, now known to be one: its close cannot block. */
	int pidfd = rt->pidfd ? TAKE_FD(s->rx_fd) : -1;
	r = register_checked(s, rt, ctid, tid, pidfd, why, sizeof(why));
	if (pidfd >= 0)
		close(pidfd);
	return r;
}

/* register_thread() once the thread is identified: @tid (daemon's namespace; 0: unknown, a
 * reattach of a process that has exited, which opens nothing), @ctid (the client's), @pidfd
 * (borrowed; -1: none). */
static int
register_checked(struct session *s, const Pmc__RegisterThread *rt, pid_t ctid, pid_t tid, int pidfd,
                 char *why, size_t why_len)
{
	char *const *names = rt->events;
	size_t n = rt->n_events;
	/* A peer that may count anyone needs only its thread alive, which a pidfd proved
	 * (thread_identify(), then thread_still() after the open): creds_may_count() would
	 * only look again. */
	bool proven = (pidfd >= 0 && s->creds.ptrace_capable) || !tid;
	int r = proven ? 0 : creds_may_count(&s->creds, s->pid, tid, why, why_len);
	if (r == -ESRCH)
		return session_reply_error(s, ESRCH, "thread %d has exited", (int)ctid);
	if (r < 0) {
		log_warn_limited("pid %d: refused: %s", (int)s->pid, why);
		return session_reply_error(s, EPERM, "%s", why);
	}
	struct session_events ev;
	s->reattach_gone = !tid;
	bool checked = session_register_events_check(s, names, n, &ev, &r);
	s->reattach_gone = false;
	if (!checked)
		return r;
	names = ev.cn;
	n = ev.n;
	const struct policy *pol = &s->srv->policy;

	/* The process gets its aggregates with its first thread: a connection that only
	 * queries (pmcctl) leaves nothing behind. */
	if (!session_register_process(s))
		return session_reply_error(s, ESRCH, "process %d is gone", (int)s->pid);
	struct session_thread *old = session_register_find_thread(s, ctid);
	if (!old && s->proc->n_threads >= pol->max_threads)
		return session_reply_error(
		        s, EMFILE,
		        "process %d already has %u registered threads, the daemon's "
		        "limit (--max-threads)",
		        (int)s->pid, pol->max_threads);
	if (!old && registry_process_event_room(s->proc, names, n) < 0)
		return session_reply_error(
		        s, EMFILE,
		        "process %d already counts %d distinct events, the daemon's "
		        "limit per process",
		        (int)s->pid, PROCESS_MAX_EVENTS);
	if (rt->reattach)
		return reattach_thread(s, old, rt, tid, names);

	size_t order[PMC_LIMIT_EVENTS];
	uint32_t group[PMC_LIMIT_EVENTS];
	char *ordered[PMC_LIMIT_EVENTS];
	r = perf_plan(names, n, order, group);
	if (r < 0)
		return session_reply_error(s, -r, "cannot group the events: %s", strerror(-r));
	for (size_t i = 0; i < n; i++)
		ordered[i] = names[order[i]];

	int fds[PMC_LIMIT_EVENTS];
	size_t failed = 0;
	if (s->srv->n_fds + n + SERVER_FD_RESERVE > s->srv->fd_limit)
		return session_reply_error(
		        s, EMFILE,
		        "pmcdaemon holds %zu counter fds, near its limit of %zu: raise "
		        "its LimitNOFILE or lower --max-threads",
		        s->srv->n_fds, s->srv->fd_limit);
	/* The reply's copies are in flight until the client reads them (a re-registration
	 * opens new counters while the unread ones stay pinned). */
	if (!session_inflight_check(s, n, &r))
		return r;
	size_t held = s->user->fds - (old ? old->n_fds : 0);
	/* At its share: threads of its that ended unannounced give their fds back first. A
	 * search that found none is not made again for REAP_AGAIN_NS (while a uid stays at its
	 * share, each refused registration would look at every thread it holds). */
	uint64_t now = util_now_ns(CLOCK_MONOTONIC);
	if (!fds_allowed(s, held, n, old) &&
	    (!s->user->reaped_ns || now - s->user->reaped_ns >= REAP_AGAIN_NS)) {
		if (reap_dead_threads(s->srv, s->uid, tid) > 0) {
			old = session_register_find_thread(s, ctid); /* the threads moved */
			held = s->user->fds - (old ? old->n_fds : 0);
		} else {
			s->user->reaped_ns = now;
		}
	}
	if (!fds_allowed(s, held, n, old))
		return session_reply_error(
		        s, EMFILE,
		        "uid %d holds %zu counter fds for its threads, past its share "
		        "(--max-fds-per-user %u) as far as the other users' shares allow: "
		        "this thread runs unprofiled; end profiled threads, or ask the "
		        "operator to raise the limits",
		        (int)s->uid, held, pol->max_fds_per_user);
	r = perf_open_group(tid, ordered, group, n, fds, &failed);
	/* The tid was checked before the open: if the thread ended meanwhile, the number may
	 * already name a thread of another process. Check again now that it is counted. */
	if (r == 0 && !thread_still(s, pidfd, tid)) {
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		return session_reply_error(
		        s, ESRCH, "thread %d ended while it was being registered", (int)ctid);
	}
	/* And its credentials: it may have exec'd a setuid program since the check (the
	 * kernel detaches counters opened before such an exec, not those opened after). */
	if (r == 0 && !proven && (r = creds_may_count(&s->creds, s->pid, tid, why, why_len)) < 0) {
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		if (r == -ESRCH)
			return session_reply_error(s, ESRCH, "thread %d has exited", (int)ctid);
		log_warn_limited("pid %d: refused after the open: %s", (int)s->pid, why);
		return session_reply_error(s, EPERM, "%s", why);
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
		return session_reply_error(s, -r, "cannot count '%.64s' on thread %d: %s%s",
		                           ordered[failed], (int)ctid, strerror(-r), hint);
	}

	struct session_thread t = {.tid = ctid,
	                           .host_tid = tid,
	                           .n = n,
	                           .n_fds = n,
	                           .head_slot = head_slot(s, rt),
	                           .next_sample = rt->next_sample};
	t.fds = malloc(n * sizeof(int));
	t.ev_id = malloc(n * sizeof(uint32_t));
	Pmc__EventDesc descs[PMC_LIMIT_EVENTS], *dp[PMC_LIMIT_EVENTS];
	r = t.fds && t.ev_id ? 0 : -ENOMEM;
	for (size_t i = 0; r == 0 && i < n; i++) {
		int id = registry_process_event_id(s->proc, ordered[i]);
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
		return session_reply_error(s, ENOMEM, "out of memory");
	}
	memcpy(t.fds, fds, n * sizeof(int));

	if (thread_store(s, old, &t) < 0) {
		for (size_t i = 0; i < n; i++)
			close(t.fds[i]);
		free(t.fds);
		free(t.ev_id);
		return session_reply_error(s, ENOMEM, "out of memory");
	}

	Pmc__RegisterReply rr = PMC__REGISTER_REPLY__INIT;
	rr.tid = ctid;
	rr.n_events = n;
	rr.events = dp;
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_REGISTER_REPLY;
	resp.register_reply = &rr;
	log_debug("pid %d: registered thread %d (%d in its namespace) with %zu events", (int)s->pid,
	          (int)tid, (int)ctid, n);
	return session_reply(s, &resp, fds, n);
}

/* What an empty region measured on a registered thread: the process keeps the smallest
 * figure of any thread, per event, as the floor under its regions' figures. A floor that
 * names a thread it never registered, or the wrong number of values, closes the
 * connection. */
int
session_register_thread_floor(struct session *s, const Pmc__Request *req)
{
	const Pmc__ThreadFloor *f = req->thread_floor;
	struct session_thread *t = session_register_find_thread(s, f->tid);
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

int
session_register_thread_exit(struct session *s, const Pmc__Request *req)
{
	struct session_thread *t = session_register_find_thread(s, req->thread_exit->tid);
	if (t)
		drop_thread(s, t);
	return 0;
}
