/* libpmcclient's registration of a thread, owner of G.reg: RegisterThread and its reply, which
 * carries the thread's counter fds (checked: counters only, all of them, room for them under
 * RLIMIT_NOFILE), the thread's structure made from it (pages mapped, frames, ring, warm-up); a
 * registration's late reply, read by the background thread; reattaching a thread to a daemon
 * that restarted. Locks and states: client-internal.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/fdcheck.h"
#include "lib/client-internal.h"
#include "lib/reader.h"

static pid_t
gettid_(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* Frees @t, a thread whose registration failed, and gives back its word of the heads table. */
static void
thread_discard(struct pmc_thread *t)
{
	pmc__heads_give_back(t);
	free(t);
}

/*
 * Whether @n fds more fit under this process's RLIMIT_NOFILE now, with PMC_FD_RESERVE fd
 * numbers above them left to the application: takes @n fd numbers, each the lowest free one
 * as the kernel takes them for received fds (F_DUPFD_CLOEXEC of @sock, borrowed), gives them
 * back, and compares the highest with the limit. Exact for the @n whatever the limit is now
 * (setrlimit() at any time) and whatever the program opened and closed since, which a count
 * kept here could not be: 2 n + 1 system calls, once per thread, beside a registration's
 * round trip (70 us or more) and the daemon's opens.
 */
static bool
fd_room(int sock, size_t n)
{
	int fds[PMC_LIMIT_EVENTS];
	size_t got = 0;
	int err = 0;
	if (n > ARRAY_SIZE(fds))
		n = ARRAY_SIZE(fds);
	while (got < n) {
		int fd = fcntl(sock, F_DUPFD_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			break;
		}
		fds[got++] = fd;
	}
	/* Each the lowest free one while the earlier ones are held: the last is the highest. */
	long top = got ? fds[got - 1] : -1;
	for (size_t i = 0; i < got; i++)
		close(fds[i]);
	if (got < n)
		return err != EMFILE; /* on any other failure, let the daemon's reply tell */
	struct rlimit rl;
	return getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	       (rlim_t)top + 1 + PMC_FD_RESERVE <= rl.rlim_cur;
}

/* The one line about threads short of fds, and that their regions are counted. */
static void
warn_fd_limit(pid_t tid, size_t n, bool truncated)
{
	struct rlimit rl;
	unsigned long long lim =
	        getrlimit(RLIMIT_NOFILE, &rl) == 0 ? (unsigned long long)rl.rlim_cur : 0;
	pmc__warn_loss(
	        PMC_LOSS_FD_LIMIT,
	        "thread %d runs unprofiled: %s its %zu counter fds under RLIMIT_NOFILE %llu (the "
	        "library leaves %d more fds to the program); so do other threads short of "
	        "fds, while the process's other threads and its connection go on; their "
	        "regions are counted by pmcdaemon as dropped (reason %s); raise the limit "
	        "(ulimit -n, LimitNOFILE=)",
	        (int)tid,
	        truncated ? "the reply to its registration could not carry" : "no room for", n, lim,
	        PMC_FD_RESERVE, pmc_loss_name(PMC_LOSS_FD_LIMIT));
}

/* A pidfd of this process's thread @tid (PIDFD_THREAD, Linux 6.9), which proves to the
 * daemon which thread a registration is for whatever pid namespace either side is in; -1
 * where the kernel has none (the daemon then finds @tid among this process's threads by
 * the id this namespace gives it). */
static int
thread_pidfd(pid_t tid)
{
#ifdef SYS_pidfd_open
	int fd = (int)syscall(SYS_pidfd_open, tid, O_EXCL /* PIDFD_THREAD */);
	return fd < 0 ? -1 : fd;
#else
	(void)tid;
	return -1;
#endif
}

/*
 * Called with G.conn.lock held (nothing else may read the socket meanwhile): sends the
 * RegisterThread @req (with *@pidfd attached when >= 0, closed and set to -1 once sent: the
 * close overlaps the daemon's work, not added to the wait) and receives its reply within the
 * wait bound, with the fds it carries in @fds (PMC_LIMIT_EVENTS slots). A full queue delays
 * the request, within the bound too.
 * Return: 0 with *@out (freed by the caller) and *@n_fds fds, the caller's;
 * -EMFILE: the reply came with fewer fds than it carried (MSG_CTRUNC: no room for them
 * under RLIMIT_NOFILE), those that came are closed, *@out is the reply (NULL when it does
 * not decode); -EBADMSG: the reply does not decode or carries more than PMC_LIMIT_EVENTS
 * fds (closed). After these two the connection is in step: its one reply was read.
 * -EAGAIN: not sent (the queue stayed full); the connection is in step too.
 * Another -errno (-ETIMEDOUT: no reply in time): the connection is out of step.
 */
static int register_recv_locked(bool wait, int *fds, size_t *n_fds, Pmc__Response **out);

static int
register_call_locked(const Pmc__Request *req, int *pidfd, int *fds, size_t *n_fds,
                     Pmc__Response **out)
{
	int r;
	while ((r = pmc__send_fds_locked(&req->base, pidfd, *pidfd >= 0)) == -EAGAIN)
		if (pmc__app_wait_room_locked(false) < 0)
			return -EAGAIN;
	if (r < 0)
		return r;
	/* In flight, the datagram holds its own reference. */
	if (*pidfd >= 0)
		close(TAKE_FD(*pidfd));
	G.conn.room_late = 0; /* the daemon takes datagrams again */
	return register_recv_locked(true, fds, n_fds, out);
}

/* register_call_locked()'s receiving half: the reply to the one RegisterThread in flight,
 * waited for within the wait bound when @wait (else only looked for). Return: as
 * register_call_locked(), -ETIMEDOUT when it did not come (the request is still in flight). */
static int
register_recv_locked(bool wait, int *fds, size_t *n_fds, Pmc__Response **out)
{
	int r;
	if (wait) {
		r = pmc__wait_fd(G.conn.fd, POLLIN, false);
	} else {
		struct pollfd p = {.fd = G.conn.fd, .events = POLLIN};
		while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR)
			;
		r = r < 0 ? -errno : r;
	}
	if (r < 0)
		return r;
	if (r == 0)
		return -ETIMEDOUT;
	ssize_t len;
	int resets = 0;
	/* As pmc_wire_wait(): a daemon that closed reports ECONNRESET once before its last
	 * words. */
	do
		len = recv(G.conn.fd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
	while (len < 0 && (errno == EINTR || (errno == ECONNRESET && resets++ == 0)));
	if (len < 0)
		return -errno;
	if (len == 0)
		return -ECONNRESET;
	if ((size_t)len > WIRE_MAX_DATAGRAM)
		return -EMSGSIZE;
	_cleanup_free_ uint8_t *buf = malloc((size_t)len);
	if (!buf)
		return -ENOMEM;
	size_t nf = 0;
	bool cut;
	ssize_t got = pmc_wire_recv_cut(G.conn.fd, buf, (size_t)len, fds, PMC_LIMIT_EVENTS, &nf,
	                                MSG_DONTWAIT, &cut);
	/* More than PMC_LIMIT_EVENTS fds, another control message, the datagram cut short: its
	 * fds are closed already. */
	if (got == -EBADMSG || got == -EMSGSIZE)
		return -EBADMSG;
	if (got < 0)
		return (int)got;
	Pmc__Response *resp = NULL;
	bool decoded = pmc_wire_unpack_response(buf, (size_t)got, &resp) == 0;
	if (cut) {
		/* Its fds, fewer than it carried, are closed already. */
		*out = resp;
		return -EMFILE;
	}
	/* Only counters are expected: anything else (a daemon not to be trusted) is closed
	 * where its close cannot hold this thread, and the reply refused. */
	bool bad = !decoded;
	for (size_t i = 0; i < nf && !bad; i++)
		bad = pmc_fdcheck_kind(fds[i]) != FDCHECK_PERF;
	if (bad) {
		for (size_t i = 0; i < nf; i++)
			pmc_fdcheck_close(fds[i], 0);
		if (resp)
			pmc__response__free_unpacked(resp, NULL);
		return -EBADMSG;
	}
	*out = resp;
	*n_fds = nf;
	return 0;
}

/* Whether the daemon's refusal @err (positive errno) may pass: a limit that a thread's exit
 * frees, a resource short for now. Any other is its policy, and stays. */
static bool
refusal_passes(int err)
{
	return err == EMFILE || err == ENFILE || err == EAGAIN || err == ENOMEM || err == EBUSY ||
	       err == EINTR || err == ETIMEDOUT;
}

/* One registration: what was asked, and what came back. */
struct attempt {
	pid_t tid;
	size_t want;          /* the fds its reply is to carry */
	struct pmc_thread *t; /* the thread's structure, with a word of the heads table */
	int r;                /* register_call_locked()'s */
	Pmc__Response *resp;  /* the reply (NULL: none, or none that decodes) */
	size_t n_fds;         /* the fds it carried, in t->fds */
	int waited_ms;        /* for it, within the wait bound */
	bool is_reply;        /* resp is a RegisterReply */
};

/* Before asking: whether the fds the reply is to carry (a->want) fit under RLIMIT_NOFILE, said
 * once when not. A reply whose fds cannot all be taken costs the daemon an open of each, and
 * this process the fds it already has. */
static bool
register_fds_fit(struct attempt *a)
{
	size_t want = G.env.n_events       ? G.env.n_events
	              : G.reg.reply_events ? G.reg.reply_events
	                                   : PMC_DEFAULT_N_EVENTS;
	if (want > PMC_LIMIT_EVENTS)
		want = PMC_LIMIT_EVENTS; /* the daemon refuses more (E2BIG) */
	a->want = want;
	if (fd_room(G.conn.fd, want))
		return true;
	warn_fd_limit(a->tid, want, false);
	return false;
}

/* Called with G.conn.lock held: a structure for thread @tid, with a word of the heads table
 * where there is one, or NULL. */
static struct pmc_thread *
register_thread_new_locked(pid_t tid)
{
	struct pmc_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->tid = tid;
	t->gen = atomic_load(&G.threads.gen);
	t->head_mirror = &t->head_sink;
	pmc__heads_take_locked(t);
	return t;
}

/* Called with G.conn.lock held: sends @a's RegisterThread and reads its reply, within the
 * wait bound (register_call_locked()). */
static void
register_ask_locked(struct attempt *a)
{
	struct pmc_thread *t = a->t;
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = t->tid;
	rt.n_events = G.env.n_events;
	rt.events = G.env.events;
	if (G.conn.heads)
		rt.head_slot = t->head_slot;
	rt.next_sample = 0;
	_cleanup_close_ int pidfd = G.conn.takes_pidfd ? thread_pidfd(t->tid) : -1;
	rt.pidfd = pidfd >= 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	uint64_t start = util_now_ns(CLOCK_MONOTONIC);
	a->r = register_call_locked(&req, &pidfd, t->fds, &a->n_fds, &a->resp);
	a->waited_ms = (int)((util_now_ns(CLOCK_MONOTONIC) - start) / 1000000);
	a->is_reply = a->resp && !a->resp->error &&
	              a->resp->body_case == PMC__RESPONSE__BODY_REGISTER_REPLY;
	if (a->is_reply)
		G.reg.reply_events = a->resp->register_reply->n_events;
}

/* Called with G.conn.lock held: whether @a failed. If so, it is said once, the daemon told to
 * forget the thread where it may have opened counters, the connection given up where it is out
 * of step, the fds that came closed, the reply freed, and *@fd_starved and *@transient say why;
 * if not, the reply is a RegisterReply for this thread with a counter fd per event. */
static bool
register_failed_locked(struct attempt *a, bool *fd_starved, bool *transient)
{
	pid_t tid = a->tid;
	int r = a->r;
	Pmc__Response *resp = a->resp;
	if (r == -EMFILE || r == -EBADMSG) {
		/* The one reply was read: the connection stays, and so do the process's other
		 * threads. Only a reply that opened counters carries fds: the daemon forgets
		 * this thread again (ThreadExit of an unknown thread is a no-op). */
		(void)pmc__thread_exit_send_locked(tid, util_now_ns(CLOCK_MONOTONIC), false);
		if (r == -EMFILE) {
			warn_fd_limit(tid, a->is_reply ? resp->register_reply->n_events : a->want,
			              true);
			*fd_starved = true;
		} else {
			pmc__warn_once("thread %d not profiled: malformed reply from pmcdaemon",
			               (int)tid);
		}
		if (resp)
			pmc__response__free_unpacked(resp, NULL);
		return true;
	}
	if (r == -EAGAIN) {
		/* Nothing was sent: the connection is in step. */
		pmc__warn_once(
		        "thread %d not profiled for now: pmcdaemon took no request for %d ms "
		        "(its queue stayed full); no thread waits for room again until it takes "
		        "one, and each asks again later, its regions counted meanwhile (reason %s)",
		        (int)tid, a->waited_ms, pmc_loss_name(PMC_LOSS_UNREGISTERED));
		*transient = true;
		return true;
	}
	if (r == -ETIMEDOUT) {
		/* A daemon this slow would make every thread wait as long: no thread asks again
		 * until this request is answered, which the background thread looks for (its
		 * reply is the next datagram: nothing else is asked meanwhile). */
		pmc__warn_once("thread %d not profiled for now: pmcdaemon did not answer its "
		               "registration within %d ms; no thread waits for it again until it "
		               "answers, and each asks again later, its regions counted meanwhile "
		               "(reason %s)",
		               (int)tid, a->waited_ms, pmc_loss_name(PMC_LOSS_UNREGISTERED));
		G.reg.late = tid;
		*transient = true;
		(void)pmc__service_start_locked();
		return true;
	}
	if (r < 0) {
		pmc__warn_once("thread %d not profiled: registering with pmcdaemon %s failed "
		               "(libpmcclient " PMC_VERSION "): %s",
		               (int)tid, G.conn.daemon_version, strerror(-r));
		/* Out of step (a datagram cut short), or gone: start afresh (in the
		 * background). */
		pmc__connection_failed_locked(r == -ECONNRESET || r == -EPIPE ? r : -EPROTO);
		*transient = r == -ECONNRESET || r == -EPIPE;
		return true;
	}
	if (!a->is_reply || resp->register_reply->tid != tid ||
	    resp->register_reply->n_events != a->n_fds || a->n_fds == 0) {
		*transient =
		        resp->error && refusal_passes(resp->error < 0 ? -resp->error : resp->error);
		if (*transient)
			pmc__warn_once(
			        "thread %d not profiled for now: %s; it asks again later, its "
			        "regions counted meanwhile (reason %s)",
			        (int)tid, resp->message, pmc_loss_name(PMC_LOSS_UNREGISTERED));
		else
			pmc__warn_once("thread %d not profiled: %s", (int)tid,
			               resp->error ? resp->message
			                           : "unexpected reply from pmcdaemon");
		for (size_t i = 0; i < a->n_fds; i++)
			close(a->t->fds[i]);
		if (a->is_reply)
			(void)pmc__thread_exit_send_locked(tid, util_now_ns(CLOCK_MONOTONIC),
			                                   false);
		pmc__response__free_unpacked(resp, NULL);
		return true;
	}
	return false;
}

/* @t's @n events as @rr says them (their fds in t->fds already): each one's group, name and
 * group leader. A name that could not be copied is NULL (thread_alloc() checks). */
static void
thread_events_take(struct pmc_thread *t, const Pmc__RegisterReply *rr, size_t n)
{
	int leader = 0;
	unsigned last_group = UINT32_MAX;
	t->n = n;
	for (size_t i = 0; i < n; i++) {
		unsigned g = rr->events[i]->group;
		t->ev_groups[i] = g;
		t->ev_names[i] = strdup(rr->events[i]->name);
		if (g != last_group)
			leader = (int)i;
		last_group = g;
		t->group_leader[i] = leader;
	}
	t->one_group = leader == 0;
}

/* The daemon opens leaders disabled; enabling them here, on the counted thread, costs no
 * interrupt of another CPU. Return: whether every leader of @t was enabled. */
static bool
thread_enable(struct pmc_thread *t)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->group_leader[i] == (int)i &&
		    ioctl(t->fds[i], PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP) < 0)
			return false;
	return true;
}

/* Maps @t's counters' pages, and sets how the thread reads them: with rdpmc (t->rdpmc) where
 * every page lets it (none stays mapped where not), the usual way (t->fast) where its events
 * are also one group and the leader's page has the clock. */
static void
thread_pages_map(struct pmc_thread *t)
{
	long pagesz = sysconf(_SC_PAGESIZE);
	t->rdpmc = PMC_HAVE_RDPMC;
	for (size_t i = 0; i < t->n && t->rdpmc; i++) {
		void *p = mmap(NULL, (size_t)pagesz, PROT_READ, MAP_SHARED, t->fds[i], 0);
		t->pages[i] = p == MAP_FAILED ? NULL : p;
		if (!t->pages[i]) {
			/* Each page counts against perf_event_mlock_kb, then RLIMIT_MEMLOCK. */
			pmc__warn_once(
			        "thread %d reads its counters with read() (slower): mmap of a "
			        "counter failed: %s (raise kernel.perf_event_mlock_kb or "
			        "RLIMIT_MEMLOCK)",
			        (int)t->tid, strerror(errno));
			t->rdpmc = 0;
		} else if (!t->pages[i]->cap_user_rdpmc) {
			t->rdpmc = 0;
		} else if (t->group_leader[i] == (int)i && !t->pages[i]->cap_user_time) {
			/* Without the clock (a sched_clock other than the TSC: kvm-clock
			 * guests), the page's times are those of the last update: a
			 * multiplexed count would be scaled over the wrong window, and an
			 * rdpmc reading would not match a read() one. */
			t->rdpmc = 0;
		}
	}
	/* The fast path takes the wall clock from the leader's page (cap_user_time_zero, set with
	 * cap_user_time by every kernel that has it). */
	t->fast = t->rdpmc && t->one_group && t->pages[0]->cap_user_time_zero;
	if (!t->rdpmc)
		for (size_t i = 0; i < t->n; i++)
			if (t->pages[i]) {
				munmap(t->pages[i], (size_t)pagesz);
				t->pages[i] = NULL;
			}
}

/* @t's memory: its events' names (copied already), its frames, memo and ring. Return: whether
 * it has all of it. */
static bool
thread_alloc(struct pmc_thread *t)
{
	for (size_t i = 0; i < t->n; i++)
		if (!t->ev_names[i])
			return false;
	t->stack_cap = t->begin_cap = PMC_STACK_START;
	t->stack = pmc__frames_new(PMC_STACK_START);
	t->frame_mem = calloc(PMC_STACK_START * 3 * t->n, sizeof(uint64_t));
	t->memo_cap = PMC_PCACHE;
	t->memo_mask = PMC_PCACHE - 1;
	t->memo = calloc(t->memo_cap, sizeof(*t->memo));
	struct ring *ring = pmc__ring_new(PMC_RING, t->n);
	atomic_store(&t->ring, ring);
	if (!t->stack || !t->frame_mem || !t->memo || !ring)
		return false;
	for (unsigned d = 0; d < PMC_STACK_START; d++)
		t->stack[d].v = t->frame_mem + d * 3 * t->n;
	/* Read through its pages: its begins and ends write records (records.c). */
	return !t->fast || pmc__records_alloc(t);
}

/* Called with G.conn.lock held: registers the calling thread. Return: the thread, or NULL: then
 * *@fd_starved says whether for want of room for its fds (RLIMIT_NOFILE), *@transient whether
 * it may ask again later (see ST_RETRY). */
struct pmc_thread *
pmc__register_locked(bool *fd_starved, bool *transient)
{
	struct attempt a = {.tid = gettid_()};
	*fd_starved = false;
	*transient = true;
	if (G.reg.late)
		return NULL;
	*transient = false;
	if (!register_fds_fit(&a)) {
		*fd_starved = true;
		return NULL;
	}
	a.t = register_thread_new_locked(a.tid);
	if (!a.t)
		return NULL;
	register_ask_locked(&a);
	if (register_failed_locked(&a, fd_starved, transient)) {
		thread_discard(a.t);
		return NULL;
	}
	struct pmc_thread *t = a.t;
	t->conn = G.conn.n;
	thread_events_take(t, a.resp->register_reply, a.n_fds);
	pmc__response__free_unpacked(a.resp, NULL);
	if (!thread_enable(t)) {
		pmc__thread_release(t);
		return NULL;
	}
	thread_pages_map(t);
	if (!thread_alloc(t)) {
		pmc__thread_release(t);
		return NULL;
	}
	t->state = ST_ON;
	t->announced = 0;
	/* Before the background thread can see the ring: nothing of this is a sample. */
	pmc__thread_warm_up(t);
	pmc_list_prepend(&G.threads.list, &t->link);
	return t;
}

/* Called with G.conn.lock held while the reply to G.reg.late's registration is late: reads it if
 * it came. That thread gave up: the counters it carries are closed and the daemon told so
 * (it forgets them); registrations may go again. */
void
pmc__late_reply_locked(void)
{
	int fds[PMC_LIMIT_EVENTS];
	size_t n_fds = 0;
	Pmc__Response *resp = NULL;
	int r = register_recv_locked(false, fds, &n_fds, &resp);
	if (r == -ETIMEDOUT)
		return;
	if (r < 0 && r != -EMFILE && r != -EBADMSG) {
		pmc__connection_failed_locked(r == -ECONNRESET || r == -EPIPE ? r : -EPROTO);
		return;
	}
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	/* As pmc__register_locked(): a reply that may have opened counters is answered
	 * ThreadExit. */
	if (r == -EMFILE || r == -EBADMSG || (resp && !resp->error))
		(void)pmc__thread_exit_send_locked(G.reg.late, util_now_ns(CLOCK_MONOTONIC), false);
	if (resp)
		pmc__response__free_unpacked(resp, NULL);
	G.reg.late = 0;
	atomic_fetch_add_explicit(&G.reg.answered, 1, memory_order_relaxed);
}

/* Called with G.conn.lock held: tell a daemon that restarted about this thread, which
 * still holds its counters. No reply: the daemon closes the connection if it refuses. */
int
pmc__reattach_locked(struct pmc_thread *t)
{
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = t->tid;
	rt.n_events = t->n;
	rt.events = t->ev_names;
	rt.reattach = 1;
	rt.n_groups = t->n;
	rt.groups = t->ev_groups;
	if (G.conn.heads)
		rt.head_slot = t->head_slot;
	/* What this connection is to get: the samples not sent, or given up, before. */
	rt.next_sample = atomic_load_explicit(&t->tail, memory_order_acquire);
	_cleanup_close_ int pidfd = G.conn.takes_pidfd ? thread_pidfd(t->tid) : -1;
	rt.pidfd = pidfd >= 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	int r = pmc__send_fds_locked(&req.base, &pidfd, pidfd >= 0);
	if (r == 0)
		t->conn = G.conn.n;
	return r;
}

/* In a fork()ed child: no registration is in flight there. */
void
pmc__reg_fork_child(void)
{
	G.reg.late = 0;
}
