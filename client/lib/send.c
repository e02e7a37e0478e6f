/* libpmcclient's sending, owner of G.sent and G.service: Define messages (call paths, region
 * names), batches of a thread's samples with the losses not reported yet, draining a ring while
 * the daemon's queue is full, the background thread that sends every ring periodically and
 * reconnects, pmc_flush(), a thread's exit (ThreadExit) and the process's (atexit). Locks and
 * states: client-internal.h. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/client-internal.h"

/* Called with G.conn.lock held: tells the daemon that thread @tid is gone (it closes its copies
 * of the thread's fds), waiting until @deadline for room in its queue (0: as an
 * application's thread waits, pmc__app_wait_room_locked(); @unlock: as
 * pmc__wait_room_locked()). Return: 0 or -errno. */
int
pmc__thread_exit_send_locked(pid_t tid, uint64_t deadline, bool unlock)
{
	Pmc__ThreadExit te = PMC__THREAD_EXIT__INIT;
	te.tid = tid;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_THREAD_EXIT;
	req.thread_exit = &te;
	int r;
	while ((r = pmc__send_msg_locked(&req.base)) == -EAGAIN &&
	       (deadline ? pmc__wait_room_locked(deadline, unlock)
	                 : pmc__app_wait_room_locked(unlock)) == 0 &&
	       atomic_load(&G.conn.state) == ST_ON)
		;
	return r;
}

/* Says once per reason that samples were lost (names are said where they are refused). */
static void
warn_losses(const struct pmc_thread *t, const uint64_t *loss)
{
	if (loss[PMC_LOSS_DEPTH])
		pmc__warn_loss(
		        PMC_LOSS_DEPTH,
		        "thread %d nests regions deeper than %d: the samples of the deeper ones "
		        "are dropped, counted by pmcdaemon (reason %s)",
		        (int)t->tid, PMC_LIMIT_DEPTH, pmc_loss_name(PMC_LOSS_DEPTH));
	if (loss[PMC_LOSS_NESTING])
		pmc__warn_loss(
		        PMC_LOSS_NESTING,
		        "thread %d ended a region while regions begun inside it were still open "
		        "(pmc_end() out of nesting order), or exited with regions open: their "
		        "samples are dropped, counted by pmcdaemon (reason %s)",
		        (int)t->tid, pmc_loss_name(PMC_LOSS_NESTING));
	if (loss[PMC_LOSS_FULL])
		pmc__warn_loss(PMC_LOSS_FULL,
		               "thread %d held %zu samples that pmcdaemon could not take (away or "
		               "behind): later ones are dropped, counted by pmcdaemon (reason %s)",
		               (int)t->tid, atomic_load(&t->ring)->cap,
		               pmc_loss_name(PMC_LOSS_FULL));
	if (loss[PMC_LOSS_READ])
		pmc__warn_loss(
		        PMC_LOSS_READ,
		        "reading the counters of thread %d failed: those regions are dropped, "
		        "counted by pmcdaemon (reason %s)",
		        (int)t->tid, pmc_loss_name(PMC_LOSS_READ));
	if (loss[PMC_LOSS_EXITED])
		pmc__warn_loss(
		        PMC_LOSS_EXITED,
		        "threads exited holding samples that could not be sent: dropped, counted "
		        "by pmcdaemon (reason %s)",
		        pmc_loss_name(PMC_LOSS_EXITED));
}

/* Called with G.conn.lock held: what define_locked() is putting in one Define. */
struct defs {
	Pmc__Define d;
	uint32_t def_id[PMC_DEFINE_MAX];
	char *def_name[PMC_DEFINE_MAX];
	uint32_t path_id[PMC_DEFINE_MAX], path_parent[PMC_DEFINE_MAX], path_region[PMC_DEFINE_MAX];
	uint32_t
	        first_p; /* the first path this message defines, or names the region of (0: none) */
};

/* Called with G.conn.lock held: sends @m's Define; on failure its paths and names are not
 * announced. Return: 0 or -errno. */
static int
defs_send_locked(struct defs *m)
{
	if (!m->d.n_def_id && !m->d.n_path_id)
		return 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_DEFINE;
	req.define = &m->d;
	int r = pmc__send_msg_locked(&req.base);
	if (r < 0) {
		for (size_t i = 0; i < m->d.n_def_id; i++)
			G.sent.announced[m->def_id[i]] = 0;
		if (m->first_p)
			G.sent.path_defined = m->first_p - 1;
	}
	m->first_p = 0;
	m->d.n_def_id = m->d.n_def_name = 0;
	m->d.n_path_id = m->d.n_path_parent = m->d.n_path_region = 0;
	return r;
}

/* Called with G.conn.lock held: adds the name of region @id to @m unless announced. */
static int
defs_name_locked(struct defs *m, pmc_region_t id)
{
	if (G.sent.announced[id])
		return 0;
	if (m->d.n_def_id == PMC_DEFINE_MAX) {
		int r = defs_send_locked(m);
		if (r < 0)
			return r;
	}
	G.sent.announced[id] = 1;
	m->def_id[m->d.n_def_id++] = id;
	m->def_name[m->d.n_def_name++] = G.names.name[id];
	return 0;
}

/* Called with G.conn.lock held: defines (Define) the paths interned since the last (each after
 * its parent, with their regions' names), and the names of the regions that samples [@start,
 * @end) of ring @rg carry flagged (in no path), before the batch that uses them. Costs nothing
 * per sample while no sample was flagged (paths deeper than 32 regions, or past the table).
 * Return: 0 or -errno (then what was not sent is not marked defined). */
static int
define_locked(const struct ring *rg, uint64_t start, uint64_t end)
{
	static struct defs m;
	pmc__define__init(&m.d);
	m.first_p = 0;
	m.d.def_id = m.def_id;
	m.d.def_name = m.def_name;
	m.d.path_id = m.path_id;
	m.d.path_parent = m.path_parent;
	m.d.path_region = m.path_region;
	int r = 0;
	/* Paths past the daemon's bound (interned for an earlier daemon, whose bound was
	 * higher) go as their regions, flagged (the encoder): only their names are defined. */
	uint32_t n_paths = atomic_load_explicit(&G.paths.n, memory_order_acquire);
	uint32_t keep = atomic_load(&G.conn.path_max);
	while (r == 0 && G.sent.path_defined < n_paths) {
		uint32_t p = G.sent.path_defined + 1;
		r = defs_name_locked(&m, G.paths.region[p]);
		if (r == 0 && !m.first_p)
			m.first_p = p;
		if (r == 0 && p <= keep && m.d.n_path_id == PMC_DEFINE_MAX)
			r = defs_send_locked(&m);
		if (r < 0)
			break;
		if (!m.first_p)
			m.first_p = p;
		if (p <= keep) {
			m.path_id[m.d.n_path_id++] = p;
			m.path_parent[m.d.n_path_parent++] = G.paths.parent[p];
			m.path_region[m.d.n_path_region++] = G.paths.region[p];
		}
		G.sent.path_defined = p;
	}
	if (atomic_load_explicit(&G.paths.flagged, memory_order_relaxed)) {
		uint32_t last = 0;
		for (uint64_t k = start; k < end && r == 0; k++) {
			uint32_t id = ring_slot(rg, k)->region;
			if (id != last && (id & PMC_PATH_FLAGS))
				r = defs_name_locked(&m, id & PMC_PATH_REGION_MASK);
			last = id;
		}
	}
	int r2 = defs_send_locked(&m);
	return r < 0 ? r : r2;
}

/* Called with G.conn.lock held: sends samples [@start, @end) of @t, which do not wrap around its
 * ring @rg, as one batch, with @loss (PMC_LOSS_LIB_N counts, or NULL) as its losses. */
static int
send_slice_locked(struct pmc_thread *t, const struct ring *rg, uint64_t start, uint64_t end,
                  const uint64_t *loss)
{
	static uint8_t buf[PMC_BATCH_BOUND(PMC_BATCH, PMC_LIMIT_EVENTS, PMC_REGION_NAME_MAX)];
	uint32_t def_id[PMC_BATCH];
	size_t n = (size_t)(end - start);
	/* The samples the thread holds (not its ends: on a thread that writes records, those not
	 * turned into samples yet are not announced, so that a connection given up (its tail set
	 * to what was announced) never leaves the tail past the head). */
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_acquire);
	if (G.conn.call_paths) {
		int r = define_locked(rg, start, end);
		if (r < 0)
			return r;
	}
	/* Announce each region once per connection; the lock orders this batch before any
	 * later one that relies on the names. */
	struct pmc_batch b = {
	        .tid = t->tid,
	        .samples = ring_slot(rg, start),
	        .n = n,
	        .k = t->n,
	        .maybe_scaled = atomic_load_explicit(&t->scaled_end, memory_order_relaxed) > start,
	        .announced = G.conn.call_paths ? NULL : G.sent.announced,
	        .names = G.names.name,
	        .path_region = G.paths.region,
	        .path_keep = G.conn.call_paths ? atomic_load(&G.conn.path_max) : 0,
	        .paths = G.conn.call_paths,
	        .fixed = G.conn.ring.hdr != NULL, /* a frame: the daemon counts it as it lies */
	        .def_id = def_id,
	        .sent_before = G.sent.total,
	        .pending = hd - end,
	        .end = G.conn.heads ? end : 0, /* an older daemon's fast decoder stops at 21 */
	};
	if (loss) {
		b.dropped_depth = loss[PMC_LOSS_DEPTH];
		b.dropped_nesting = loss[PMC_LOSS_NESTING];
		b.dropped_full = loss[PMC_LOSS_FULL];
		b.dropped_read = loss[PMC_LOSS_READ];
		b.dropped_exited = loss[PMC_LOSS_EXITED];
		b.dropped_names = loss[PMC_LOSS_NAMES];
		b.dropped_long_names = loss[PMC_LOSS_LONG_NAMES];
		b.dropped_fd_limit = loss[PMC_LOSS_FD_LIMIT];
		b.dropped_unregistered = loss[PMC_LOSS_UNREGISTERED];
		b.dropped_no_daemon = loss[PMC_LOSS_NO_DAEMON];
		for (unsigned r = 0; r < PMC_LOSS_LIB_N; r++)
			b.dropped += loss[r];
	}
	uint8_t *msg;
	size_t len = pmc_batch_encode(&b, buf, &msg);
	if (t->floor_pending) {
		/* Before its first batch: the daemon shows the floor beside every figure. */
		Pmc__ThreadFloor f = PMC__THREAD_FLOOR__INIT;
		f.tid = t->tid;
		f.wall_ns = t->floor_wall;
		f.n_values = t->n;
		f.values = t->floor_v;
		Pmc__Request fr = PMC__REQUEST__INIT;
		fr.body_case = PMC__REQUEST__BODY_THREAD_FLOOR;
		fr.thread_floor = &f;
		if (pmc__send_msg_locked(&fr.base) == 0)
			t->floor_pending = 0;
	}
	int r = pmc__send_locked(msg, len);
	if (r < 0) {
		for (size_t i = 0; i < b.n_def; i++)
			G.sent.announced[def_id[i]] = 0;
		return r;
	}
	G.sent.total += n;
	t->announced = hd;
	return 0;
}

/* Called with G.conn.lock held: sends what @t's ring holds, oldest first, in batches of at most
 * PMC_BATCH, and the losses not reported yet (its own, and the process's) with the first; a
 * thread that writes records has them turned into samples first, and again each time its ring
 * is emptied, up to the ends it had published when this began (no daemon: turned as far as the
 * ring takes, sent later). What is not sent stays in the ring. Return: 0, or -errno (-ENOTCONN: no
 * daemon now; -EAGAIN: its queue is full). */
static int
consume_locked(struct pmc_thread *t)
{
	if (t->gen != atomic_load(&G.threads.gen))
		return -ENOTCONN;
	/* A thread that writes records: its samples, also while no daemon takes them. */
	pmc__records_convert(t);
	if (atomic_load(&G.conn.state) != ST_ON)
		return -ENOTCONN;
	uint64_t tl = atomic_load_explicit(&t->tail, memory_order_relaxed);
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_acquire);
	uint64_t e0 = thread_published(t);
	const struct ring *rg = atomic_load_explicit(&t->ring, memory_order_acquire);
	uint64_t tloss[PMC_LOSS_THREAD_N], cl[PMC_LOSS_THREAD_N], gloss[PMC_LOSS_LIB_N];
	uint64_t loss[PMC_LOSS_LIB_N];
	bool any = false;
	for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++) {
		gloss[k] = atomic_load_explicit(&G.loss.lost[k], memory_order_relaxed) -
		           G.loss.reported[k];
		loss[k] = gloss[k];
		if (k < PMC_LOSS_THREAD_N) {
			tloss[k] = atomic_load_explicit(&t->lost[k], memory_order_relaxed) -
			           t->reported[k];
			cl[k] = t->closs[k];
			loss[k] += tloss[k] + cl[k];
		}
		any |= loss[k] != 0;
	}
	if (tl == hd && !any)
		return 0;
	if (t->conn != G.conn.n) {
		int r = pmc__reattach_locked(t);
		if (r < 0) {
			pmc__connection_failed_locked(r);
			return r;
		}
		t->announced = tl;
	}
	if (any)
		warn_losses(t, loss);
	do {
		/* Tombstones first (records.c): the batch that reaches past them says their
		 * losses; a run of samples stops at the next. */
		uint64_t st = tl, tomb[PMC_LOSS_LIB_N] = {0};
		bool tany = false;
		for (; st < hd && st < t->tomb_end; st++) {
			const struct pmc_sample *s = ring_slot(rg, st);
			if (!(s->scaled & PMC_SAMPLE_TOMB))
				break;
			unsigned why = s->scaled & 0xff;
			if (why < PMC_LOSS_LIB_N) {
				tomb[why]++;
				tany = true;
			}
		}
		uint64_t end = hd - st > PMC_BATCH ? st + PMC_BATCH : hd;
		uint64_t wrap = st + (rg->cap - (size_t)(st & (rg->cap - 1)));
		if (end > wrap)
			end = wrap;
		for (uint64_t k = st; k < end && k < t->tomb_end; k++)
			if (ring_slot(rg, k)->scaled & PMC_SAMPLE_TOMB) {
				end = k;
				break;
			}
		uint64_t bl[PMC_LOSS_LIB_N];
		for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++)
			bl[k] = (any ? loss[k] : 0) + tomb[k];
		if (tany)
			warn_losses(t, tomb);
		int r = send_slice_locked(t, rg, st, end, any || tany ? bl : NULL);
		if (r < 0) {
			/* A full queue: the samples stay; the background thread sends them as
			 * soon as it has room. */
			if (r == -EAGAIN && !G.service.blocked) {
				G.service.blocked = 1;
				pthread_cond_signal(&G.service.wake);
			}
			pmc__connection_failed_locked(r);
			return r;
		}
		if (any) {
			for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++) {
				G.loss.reported[k] += gloss[k];
				if (k < PMC_LOSS_THREAD_N) {
					t->reported[k] += tloss[k];
					t->closs[k] -= cl[k];
				}
			}
			any = false;
		}
		tl = end;
		atomic_store_explicit(&t->tail, tl, memory_order_release);
		if (tl == hd && hd < e0) {
			/* A thread that writes records, whose sample ring was full: its later ends
			 * (those published when this began, at least) into samples, now that it has
			 * room. */
			pmc__records_convert(t);
			hd = atomic_load_explicit(&t->head, memory_order_acquire);
			rg = atomic_load_explicit(&t->ring, memory_order_acquire);
		}
	} while (tl < hd);
	return 0;
}

/* Called with G.conn.lock held: every registered thread's samples.
 * Return: 0, or -EAGAIN when some stayed for the daemon's queue was full. */
static int
consume_all_locked(void)
{
	int full = 0;
	struct pmc_thread *t;
	pmc_list_for_each(t, &G.threads.list, link) {
		if (atomic_load(&G.conn.state) != ST_ON)
			break;
		full |= consume_locked(t) == -EAGAIN;
	}
	return full ? -EAGAIN : 0;
}

/* Called with G.conn.lock held: whether every thread sent what it held when drain_locked() began.
 */
static bool
drained_locked(void)
{
	struct pmc_thread *t;
	pmc_list_for_each(t, &G.threads.list, link)
		if (atomic_load_explicit(&t->tail, memory_order_relaxed) < t->drain_to)
			return false;
	return true;
}

/*
 * Called with G.conn.lock held, by an application's thread: sends what @t holds (NULL: what every
 * registered thread holds now), waiting, with the lock released, while the daemon's queue is
 * full: a daemon behind (a burst of clients) is back-pressure, not a reason to drop. Each
 * wait for room is bounded and charged as a round trip is (pmc__app_wait_room_locked()):
 * given up, no thread waits for room again until a send goes through.
 * Return: 0, -EAGAIN (given up: the samples stay), or consume_locked()'s error.
 */
static int
drain_locked(struct pmc_thread *t)
{
	struct pmc_thread *o;
	if (!t)
		pmc_list_for_each(o, &G.threads.list, link)
			o->drain_to = thread_published(o);
	for (;;) {
		int r = t ? consume_locked(t) : consume_all_locked();
		/* Threads that run on meanwhile add samples: only those of now are waited for. */
		if (r != -EAGAIN || (!t && drained_locked()))
			return r == -EAGAIN ? 0 : r;
		if (pmc__app_wait_room_locked(true) < 0)
			return -EAGAIN;
	}
}

/* The background thread: every PMC_FLUSH_MS / 2 it sends what every thread's ring holds,
 * so that a sample reaches the daemon within PMC_FLUSH_MS of its region's end whether its
 * thread runs more regions or not; with no daemon (gone, or not up yet) it connects, after
 * 0.1 s and then at least once a second. It never takes the application's signals. */
static void *
service_main(void *arg)
{
	(void)arg;
	unsigned backoff_ms = 100;
	pthread_mutex_lock(&G.conn.lock);
	for (;;) {
		int st = atomic_load(&G.conn.state);
		unsigned ms = st == ST_LOST ? backoff_ms : (G.env.flush_ms + 1) / 2;
		bool owed = G.reg.late || (st == ST_ON && G.conn.wake_owed);
		if (owed && (!ms || ms > PMC_LATE_POLL_MS))
			ms = PMC_LATE_POLL_MS;
		if (st == ST_ON && G.service.blocked) {
			/* The queue was full: send again once it has room, not a period later. */
			G.service.blocked = 0;
			(void)pmc__wait_room_locked(util_now_ns(CLOCK_MONOTONIC) +
			                                    (ms ? ms : PMC_FLUSH_MS / 2) *
			                                            UINT64_C(1000000),
			                            true);
		} else if (st != ST_LOST && !G.env.flush_ms && !owed) {
			pthread_cond_wait(&G.service.wake, &G.conn.lock);
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += ms / 1000;
			ts.tv_nsec += (long)(ms % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&G.service.wake, &G.conn.lock, &ts);
		}
		if (atomic_load(&G.conn.state) == ST_LOST) {
			const char *path = G.env.path;
			struct pmc_hello h;
			pthread_mutex_unlock(&G.conn.lock);
			int fd = pmc__daemon_connect(path, false, &h);
			pthread_mutex_lock(&G.conn.lock);
			if (fd < 0) {
				if (backoff_ms < 1000)
					backoff_ms = backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2;
				continue;
			}
			if (atomic_load(&G.conn.state) != ST_LOST) {
				close(fd);
				pmc_ring_unmap(&h.ring);
				continue;
			}
			pmc__connection_set_locked(fd, &h);
			memset(G.sent.announced, 0, sizeof(G.sent.announced));
			G.sent.path_defined = 0;
			atomic_store(&G.conn.state, ST_ON);
			backoff_ms = 100;
		}
		if (G.reg.late && atomic_load(&G.conn.state) == ST_ON)
			pmc__late_reply_locked();
		/* An owed wake that finds the daemon gone gives the connection up, as a send
		 * would (the application may send nothing more). */
		if (atomic_load(&G.conn.state) == ST_ON && pmc__wake_owed_locked() < 0 &&
		    G.conn.ring_err)
			pmc__connection_failed_locked(G.conn.ring_err);
		(void)consume_all_locked();
	}
	return NULL;
}

/* At the first connect: the condition the background thread waits on (CLOCK_MONOTONIC). */
void
pmc__service_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&G.service.wake, &a);
	pthread_condattr_destroy(&a);
}

/* Called with G.conn.lock held: starts the background thread unless it runs. Return: 0 or -errno.
 */
int
pmc__service_start_locked(void)
{
	if (G.service.running)
		return 0;
	pthread_attr_t attr;
	pthread_t th;
	sigset_t all, old;
	int r = -EAGAIN;
	/* The background thread must never take one of the application's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_attr_init(&attr) == 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &attr, service_main, NULL) == 0) {
			__atomic_store_n(&G.service.running, 1, __ATOMIC_RELAXED);
			r = 0;
		}
		pthread_attr_destroy(&attr);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

/* A batch's worth in @t's ring (the end of a region), by the ring's own thread: the
 * background thread is woken to encode and send it, so that neither is on the region's thread;
 * this thread sends it itself (pmc__flush_try()) where no background thread runs, or once the
 * ring is 3/4 full (the background thread behind, or not woken: it was busy when signalled). */
void
pmc__batch_due(struct pmc_thread *t)
{
	uint64_t h = atomic_load_explicit(&t->head, memory_order_relaxed);
	uint64_t tl = atomic_load_explicit(&t->tail, memory_order_acquire);
	if (__atomic_load_n(&G.service.running, __ATOMIC_RELAXED) &&
	    h - tl < atomic_load_explicit(&t->ring, memory_order_relaxed)->cap / 4 * 3) {
		pthread_cond_signal(&G.service.wake);
		t->retry_at = h + PMC_KICK / 4;
		return;
	}
	pmc__flush_try(t);
}

/* From the end of a region, by the ring's own thread, which must never wait: when another
 * thread holds the lock the samples stay for a later try (or for the background thread). */
void
pmc__flush_try(struct pmc_thread *t)
{
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_relaxed);
	if (pthread_mutex_trylock(&G.conn.lock) == 0) {
		(void)consume_locked(t);
		pthread_mutex_unlock(&G.conn.lock);
	} else if (t->rec && pmc__records_convert_own(t) &&
	           __atomic_load_n(&G.service.running, __ATOMIC_RELAXED)) {
		/* Its records into samples all the same (the sample ring grows): the lock's holder
		 * may be a thread the scheduler keeps from running on, while this one fills its
		 * ring of records. The background thread sends them once it has the lock (its
		 * kick counts records not yet samples: these would wait for the next). */
		pthread_cond_signal(&G.service.wake);
	}
	if (t->rec)
		return; /* its ring is the reader's (records.c) */
	uint64_t left = hd - atomic_load_explicit(&t->tail, memory_order_acquire);
	/* The daemon away or behind, or the lock taken: hold more until it can be sent. */
	if (left >= atomic_load_explicit(&t->ring, memory_order_relaxed)->cap / 2)
		pmc__ring_grow(t);
	t->retry_at = left ? hd + 64 : 0;
}

PMC_EXPORT int
pmc_flush(void)
{
	struct pmc_thread *t = T;
	if (!t || t->state != ST_ON) {
		int st = atomic_load(&G.conn.state);
		return st == ST_ON || st == ST_NONE || G.env.disabled ? 0 : -ENOTCONN;
	}
	if (t->gen != atomic_load(&G.threads.gen))
		return -ENOTCONN;
	pthread_mutex_lock(&G.conn.lock);
	int r = drain_locked(t);
	pthread_mutex_unlock(&G.conn.lock);
	return r;
}

/* The tombstones (records.c) among @t's samples [@from, @to) already made (below its head):
 * ends that gave no sample, each added to @why[its reason] (none for an end of no region).
 * Called with G.conn.lock held. Return: how many. */
static uint64_t
tombs_locked(const struct pmc_thread *t, uint64_t from, uint64_t to, uint64_t *why)
{
	/* The head, then the ring (as consume_locked()): the thread may turn records meanwhile. */
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_acquire), n = 0;
	const struct ring *rg = atomic_load_explicit(&t->ring, memory_order_acquire);
	if (to > hd)
		to = hd;
	if (to > t->tomb_end)
		to = t->tomb_end;
	for (uint64_t k = from; k < to; k++) {
		uint32_t sc = ring_slot(rg, k)->scaled;
		if (!(sc & PMC_SAMPLE_TOMB))
			continue;
		n++;
		if ((sc & 0xff) < PMC_LOSS_LIB_N)
			why[sc & 0xff]++;
	}
	return n;
}

void
pmc__thread_destroy(void *arg)
{
	struct pmc_thread *t = arg;
	if (!t)
		return;
	if (t->state != ST_ON) {
		/* Never registered here (refused, asking again, a fork()'s): on no list, nothing
		 * to send; its exit takes no lock, so never waits for another thread's. */
		if (T == t)
			T = TF = NULL;
		pmc__thread_free(t);
		return;
	}
	pthread_mutex_lock(&G.conn.lock);
	/* Off G.threads.list first, so that the background thread never sees it again (unless a
	 * fork() emptied the list since: the child's starts empty). */
	if (pmc_list_linked(&G.threads.list, &t->link))
		pmc_list_remove(&G.threads.list, &t->link);
	if (t->state == ST_ON && t->gen == atomic_load(&G.threads.gen)) {
		if (t->depth)
			count_loss(t, PMC_LOSS_NESTING, t->depth);
		(void)drain_locked(t);
		/* Regions left open (once every record is a sample: else their ends may be among
		 * those not turned, counted as the thread's exit's), but those whose end the
		 * thread dropped (counted as buffer-full). */
		if (t->rec && atomic_load(&t->head) == thread_published(t))
			t->closs[PMC_LOSS_NESTING] += pmc__records_open(t);
		int told = 0, on = atomic_load(&G.conn.state) == ST_ON && t->conn == G.conn.n;
		if (on)
			told = pmc__thread_exit_send_locked(t->tid, 0, true) == 0;
		/* What could not be sent is reported by a later batch of another thread; but
		 * what the daemon was told this thread held, and not that it exited, it counts
		 * itself as lost when the process goes. */
		uint64_t tl = atomic_load(&t->tail), pub = thread_published(t), left = pub - tl;
		if (on && !told && t->announced > tl)
			left -= t->announced - tl < left ? t->announced - tl : left;
		/* Of those, ends that gave no sample: lost for their own reason, not the exit. */
		uint64_t why[PMC_LOSS_LIB_N] = {0};
		left -= tombs_locked(t, pub - left, pub, why);
		for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++)
			atomic_fetch_add(&G.loss.lost[k], why[k]);
		atomic_fetch_add(&G.loss.lost[PMC_LOSS_EXITED], left);
		/* The daemon keeps a thread it was not told of, and reads its word when the
		 * process goes: the word says what it was told (so that nothing counts twice),
		 * and stays this thread's (never reused under the daemon's stale entry). */
		if (on && !told && t->head_slot) {
			atomic_store_explicit(t->head_mirror, t->announced > tl ? t->announced : tl,
			                      memory_order_relaxed);
			t->head_slot = 0;
		}
		for (unsigned k = 0; k < PMC_LOSS_THREAD_N; k++)
			atomic_fetch_add(&G.loss.lost[k],
			                 atomic_load(&t->lost[k]) - t->reported[k] + t->closs[k]);
	}
	pthread_mutex_unlock(&G.conn.lock);
	if (T == t)
		T = TF = NULL;
	pmc__thread_free(t);
}

/* exit() runs no thread's destructor: send every thread's samples (those of threads that
 * still run too), so that none waits in a ring for a process that is going. What then reaches
 * no daemon's figures, in a process that was connected once, is said on stderr, not lost in
 * silence: what the rings hold with no daemon connected (it went away, or did not answer, and
 * none is back), and the regions dropped that no batch reported (a batch of a registered
 * thread carries the process's: there may be none). A process that never reached a daemon
 * said at its start that profiling was disabled. */
void
pmc__atexit(void)
{
	pthread_mutex_lock(&G.conn.lock);
	(void)drain_locked(NULL);
	if (G.conn.n) {
		uint64_t held = 0, dropped = 0;
		bool on = atomic_load(&G.conn.state) == ST_ON;
		struct pmc_thread *t;
		pmc_list_for_each(t, &G.threads.list, link) {
			if (!on) {
				/* Its records into samples first (no batch did it), the ends that
				 * gave no sample lost for their own reason. */
				pmc__records_convert(t);
				uint64_t tl = atomic_load(&t->tail), pub = thread_published(t);
				uint64_t why[PMC_LOSS_LIB_N] = {0};
				held += pub - tl - tombs_locked(t, tl, pub, why);
				for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++)
					dropped += why[k];
			}
			for (unsigned k = 0; k < PMC_LOSS_THREAD_N; k++)
				dropped += atomic_load(&t->lost[k]) - t->reported[k] + t->closs[k];
		}
		for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++)
			dropped += atomic_load(&G.loss.lost[k]) - G.loss.reported[k];
		/* Its own line (at exit, once), beside the one about connecting. */
		if (held || dropped)
			fprintf(stderr,
			        "pmc: at exit, %llu samples not sent and %llu dropped reached no "
			        "pmcdaemon (it went away, or did not answer): lost, counted "
			        "nowhere\n",
			        (unsigned long long)held, (unsigned long long)dropped);
	}
	pthread_mutex_unlock(&G.conn.lock);
}

/* In a fork()ed child: the background thread did not survive the fork (it starts again with
 * the child's connection), and no connection was sent anything yet. */
void
pmc__send_fork_child(void)
{
	pmc__service_init();
	__atomic_store_n(&G.service.running, 0, __ATOMIC_RELAXED);
	G.service.blocked = 0;
	memset(G.sent.announced, 0, sizeof(G.sent.announced));
	G.sent.path_defined = 0;
	G.sent.total = 0;
}
