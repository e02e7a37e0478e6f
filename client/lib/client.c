/* libpmcclient: per-thread counters handed over by pmcdaemon, read in the thread
 * itself; region samples kept per thread in a ring and sent to the daemon in batches.
 *
 * Hot path (pmc_begin/pmc_end): thread-local state only. With rdpmc no lock, no
 * allocation, no syscall; otherwise one read() of the group per call. Names are found
 * in a hash table read without a lock. Each thread's samples go into a ring of which it
 * is the only writer (head); whoever holds the global lock is its only reader (tail): a
 * background thread that sends every ring's samples every PMC_FLUSH_MS / 2 (and
 * reconnects a daemon that went away or was not up yet), or the thread itself when its
 * ring holds a batch (it tries the lock, never waits for it), at pmc_flush(), at thread
 * and process exit. The global lock is taken only to intern a new name, register a thread
 * and send.
 *
 * This file is the hot path and what the hot path inlines; client-internal.h says which file
 * holds the rest (connecting and registering, sending, the name and path tables). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/client-internal.h"
#include "lib/reader.h"

struct pmc_global G = {
        .conn = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .path_max = PMC_MAX_PATHS - 1},
        .env = {.flush_ms = PMC_FLUSH_MS},
        .wait = {.mu = PTHREAD_MUTEX_INITIALIZER},
        .heads = {.fd = -1},
        .names = {.lock = PTHREAD_MUTEX_INITIALIZER},
        .paths = {.lock = PTHREAD_MUTEX_INITIALIZER}};

__thread struct pmc_thread *T __attribute__((tls_model("initial-exec")));
__thread struct pmc_thread *TF __attribute__((tls_model("initial-exec")));

PMC_EXPORT int
pmc_thread_uses_rdpmc(void)
{
	struct pmc_thread *t = T;
	if (!t || t->state != ST_ON || t->gen != atomic_load(&G.threads.gen))
		return -1;
	/* The usual way reads with rdpmc and leaves last_rdpmc as it is: a sample published after
	 * the general way's last fallback to read() was the usual way's. */
	return t->rdpmc && (t->last_rdpmc || thread_published(t) > t->fallback_head);
}

/* read_counters() of a thread whose events are one group, through their pages: the leader
 * with its times and the page's clock (one clock read), each member's count alone; the
 * members' times are the leader's, left unwritten (t->one_group tells region_end() to take
 * the leader's). */
static inline __attribute__((always_inline)) int
read_one_group(const struct pmc_thread *t, uint64_t *v, uint64_t *clock)
{
	size_t n = t->n;
	struct pmc_reading rd;
	/* The reader's body inline (pmc_reader_read() and _count() may stay calls). */
	if (unlikely(pmc_reader_read_(t->pages[0], &pmc_reader_hw_ops, &rd, 2) < 0))
		return -1;
	v[0] = rd.value;
	v[n] = rd.enabled;
	v[2 * n] = rd.running;
	*clock = rd.clock;
	for (size_t i = 1; i < n; i++) {
		if (unlikely(pmc_reader_read_(t->pages[i], &pmc_reader_hw_ops, &rd, 0) < 0))
			return -1;
		v[i] = rd.value;
	}
	return 0;
}

/* The wall clock of read_counters_slow(): the leader's page's, as read_one_group() reads it,
 * where the page has it; else PMC_WALL_CLOCK, marked. */
static inline __attribute__((always_inline)) uint64_t
wall_clock(const struct pmc_thread *t)
{
	uint64_t ns;
	if (t->rdpmc && pmc_reader_clock(t->pages[0], &pmc_reader_hw_ops, &ns) == 0)
		return ns;
	return util_now_ns(PMC_WALL_CLOCK) | PMC_WALL_MARK;
}

/* The counters of read_counters_slow(): through the pages where the kernel lets the thread, else
 * with a read() of each group. */
static inline __attribute__((always_inline)) int
read_groups(struct pmc_thread *t, uint64_t *v)
{
	size_t n = t->n;
	if (t->rdpmc) {
		int ok = pmc_reader_read_groups(t->pages, t->group_leader, n, &pmc_reader_hw_ops,
		                                v) == 0;
		t->last_rdpmc = ok;
		if (ok)
			return 0;
		t->fallback_head = thread_published(t);
	}
	uint64_t buf[3 + PMC_LIMIT_EVENTS];
	for (size_t g = 0; g < n;) {
		size_t end = g + 1;
		while (end < n && t->group_leader[end] == (int)g)
			end++;
		size_t k = end - g;
		ssize_t r = read(t->fds[g], buf, (3 + k) * sizeof(uint64_t));
		if (r < 0)
			return -errno;
		if (pmc_reader_parse_group(buf, (size_t)r / sizeof(uint64_t), k, v + g, &v[n + g],
		                           &v[2 * n + g]) < 0)
			return -EBADMSG;
		for (size_t i = g + 1; i < end; i++) {
			v[n + i] = v[n + g];
			v[2 * n + i] = v[2 * n + g];
		}
		g = end;
	}
	return 0;
}

/* What read_counters() returns, in two registers: 0 or -errno, and the wall clock (see
 * wall_clock()). */
struct reading {
	int64_t r;
	uint64_t clock;
};

/* read_counters() of any other thread, or when read_one_group() failed; the clock read before
 * the counters at a region's begin, after them at its @end. */
static inline __attribute__((always_inline)) struct reading
read_counters_slow(struct pmc_thread *t, uint64_t *v, int end)
{
	struct reading x;
	if (!end)
		x.clock = wall_clock(t);
	x.r = read_groups(t, v);
	if (end)
		x.clock = wall_clock(t);
	return x;
}

/* Reads every counter of @t into v[0..n) with enabled/running in v[n..2n), v[2n..3n) (of a
 * thread of one group, the leader's alone: v[n] and v[2n]), and the wall clock, for a region's
 * begin or its @end. */
static inline __attribute__((always_inline)) struct reading
read_counters(struct pmc_thread *t, uint64_t *v, int end)
{
	struct reading x = {0, 0};
	if (likely(t->fast && read_one_group(t, v, &x.clock) == 0)) {
		t->last_rdpmc = 1;
		return x;
	}
	return read_counters_slow(t, v, end);
}

static struct pmc_thread *
thread_slow(void)
{
	struct pmc_thread *t = T;
	/* Waiting to ask again: a coarse clock (no system call) until the back-off is over, or
	 * until the daemon answered the request that was late. */
	if (t && t->state == ST_RETRY && t->gen == atomic_load(&G.threads.gen) &&
	    util_now_ns(CLOCK_MONOTONIC_COARSE) < t->retry_ns &&
	    atomic_load_explicit(&G.reg.answered, memory_order_relaxed) == t->answered)
		return NULL;
	if (ensure_connected() != ST_ON)
		return NULL;
	unsigned backoff = 0;
	if (t && (t->gen != atomic_load(&G.threads.gen) || t->state == ST_RETRY)) {
		/* Inherited across fork() (the fds count the parent's thread), or asking
		 * again. */
		if (t->state == ST_RETRY && t->gen == atomic_load(&G.threads.gen))
			backoff = t->backoff_ms;
		if (G.threads.key_ok)
			pthread_setspecific(G.threads.key, NULL);
		pmc__thread_free(t);
		T = TF = t = NULL;
	}
	if (t)
		return t->state == ST_ON ? t : NULL;
	bool fd_starved = false, transient = false;
	pthread_mutex_lock(&G.conn.lock);
	pmc__connect_locked();
	if (atomic_load(&G.conn.state) == ST_ON)
		t = pmc__register_locked(&fd_starved, &transient);
	else
		transient = atomic_load(&G.conn.state) == ST_LOST;
	/* Under the lock: a late reply read after this is one this thread may wait for. */
	unsigned answered = atomic_load(&G.reg.answered);
	pthread_mutex_unlock(&G.conn.lock);
	if (!t) {
		/* Remember the failure so that this thread never retries on the hot path: for
		 * good when refused, until a deadline when the failure may pass. */
		t = calloc(1, sizeof(*t));
		if (!t)
			return NULL;
		t->gen = atomic_load(&G.threads.gen);
		t->state = transient ? ST_RETRY : ST_OFF;
		t->fd_starved = fd_starved;
		if (transient) {
			t->backoff_ms = !backoff                          ? PMC_RETRY_MS
			                : backoff >= PMC_RETRY_MAX_MS / 2 ? PMC_RETRY_MAX_MS
			                                                  : 2 * backoff;
			t->retry_ns = util_now_ns(CLOCK_MONOTONIC_COARSE) +
			              t->backoff_ms * UINT64_C(1000000);
			t->answered = answered;
		}
	}
	T = t;
	TF = t->rec && t->state == ST_ON ? t : NULL;
	if (G.threads.key_ok)
		pthread_setspecific(G.threads.key, t);
	return t->state == ST_ON ? t : NULL;
}

/* The calling thread, registered, or NULL. A structure ST_ON is of this generation (a fork
 * makes the child's ST_FORKED); one ST_OFF (refused) is never retried in its generation. */
static inline struct pmc_thread *
thread_get(void)
{
	struct pmc_thread *t = T;
	if (likely(t && t->state == ST_ON))
		return t;
	if (t && t->state == ST_OFF && t->gen == atomic_load(&G.threads.gen))
		return NULL;
	return thread_slow();
}

/* Per thread, registering it as its first region would: the process may be connected
 * while this thread was refused (an unknown event, --max-threads). */
PMC_EXPORT int
pmc_enabled(void)
{
	return thread_get() != NULL;
}

/* The path of @region begun on @t at depth @d (open frames) in path @parent, past the
 * thread's cache: deeper than PMC_PATH_DEPTH, or in a path that is not one, it is its region
 * flagged; else interned (flagged PMC_PATH_FLAG_FULL when the table is full). Cached. The
 * regions open on @t counted this look-up: each one's sample is kept out of the figures, as a
 * first sample of a new path (PMC_FRAME_FIRST_PATH). */
static uint32_t __attribute__((noinline))
path_slow(struct pmc_thread *t, struct pcache *c, uint32_t parent, pmc_region_t region, unsigned d)
{
	for (unsigned i = 0; i < d; i++)
		t->stack[i].id |= PMC_FRAME_FIRST_PATH;
	/* The warm-up's is 0, cached, so that the warm-up's begin is a usual one. */
	uint32_t path = pmc__path_resolve(parent, region, d);
	c->key = pcache_key(parent, region);
	c->path = path;
	return path;
}

/* The path of @region begun on @t at depth @d in path @parent: a look-up in the thread's
 * cache after the first time. */
static inline uint32_t
path_get(struct pmc_thread *t, uint32_t parent, pmc_region_t region, unsigned d)
{
	struct pcache *c = &t->pcache[pcache_slot(parent, region)];
	if (likely(c->key == pcache_key(parent, region)))
		return c->path;
	return path_slow(t, c, parent, region, d);
}

/* Whether @f is the frame of @region (PMC_FRAME_FIRST_PATH aside). */
static inline bool
frame_is(const struct frame *f, pmc_region_t region)
{
	return !((f->id ^ region) & ~PMC_FRAME_FIRST_PATH);
}

/* @cap frames and, before them, the parent of the outermost (path 0, id 0), zeroed. Return:
 * the first frame (free() the one before it), or NULL. */
struct frame *
pmc__frames_new(unsigned cap)
{
	struct frame *st = calloc((size_t)cap + 1, sizeof(*st));
	return st ? st + 1 : NULL;
}

/* Doubles @t's frames (a thread nesting deeper than ever before). Return: 0 or -ENOMEM. */
static int
stack_grow(struct pmc_thread *t)
{
	unsigned cap = 2 * t->stack_cap, w = 3 * (unsigned)t->n;
	struct frame *st = pmc__frames_new(cap);
	uint64_t *mem = calloc((size_t)cap * w, sizeof(uint64_t));
	if (!st || !mem) {
		if (st)
			free(st - 1);
		free(mem);
		return -ENOMEM;
	}
	memcpy(st, t->stack, t->stack_cap * sizeof(*st));
	memcpy(mem, t->frame_mem, (size_t)t->stack_cap * w * sizeof(uint64_t));
	for (unsigned d = 0; d < cap; d++)
		st[d].v = mem + (size_t)d * w;
	free(t->stack - 1);
	free(t->frame_mem);
	t->stack = st;
	t->frame_mem = mem;
	t->stack_cap = cap;
	return 0;
}

/* A begin past @t's frames, or inside a begin that was not pushed. Return: whether it may be
 * pushed (the frames grown); if not, counted as lost, for the same reason as the begin not
 * pushed around it. */
static bool __attribute__((noinline)) begin_slow(struct pmc_thread *t)
{
	if (!t->overflow && t->stack_cap < PMC_LIMIT_DEPTH && stack_grow(t) == 0) {
		t->begin_cap = t->stack_cap;
		return true;
	}
	count_loss(t, t->depth >= t->stack_cap ? PMC_LOSS_DEPTH : PMC_LOSS_READ, 1);
	t->overflow++;
	t->begin_cap = 0;
	return false;
}

/* Remembers @path as the path @region began in (in @parent) on @t, the memo grown first so
 * that @region has its own slot. Return: whether it is remembered (no memory: not). */
static bool
memo_put(struct pmc_thread *t, uint32_t parent, pmc_region_t region, uint32_t path)
{
	if (region != PMC_WARMUP_REGION && region + 1 >= t->memo_cap) {
		uint32_t cap = t->memo_cap;
		while (region + 1 >= cap)
			cap *= 2;
		struct pcache *m = calloc(cap, sizeof(*m));
		if (!m)
			return false;
		/* Each region's slot moves (the warm-up's is forgotten). */
		for (uint32_t i = 0; i + 1 < t->memo_cap; i++)
			if (t->memo[i].key)
				m[(uint32_t)t->memo[i].key & (cap - 1)] = t->memo[i];
		free(t->memo);
		t->memo = m;
		t->memo_cap = cap;
		t->memo_mask = cap - 1;
	}
	struct pcache *c = &t->memo[region & (t->memo_cap - 1)];
	c->key = pcache_key(parent, region);
	c->path = path;
	return true;
}

/* The wall clock is the leader's page's where it has one, read in the same pass as the
 * counters (see read_one_group()); else it is read before the counters at the begin and after
 * them at the end, so that the sample's wall time encloses the window its counters saw.
 *
 * region_begin() in full, for any thread and any case; @fast_failed: read_one_group() failed
 * just before (region_begin()), so the pages are not tried again. */
static void __attribute__((noinline))
region_begin_any(struct pmc_thread *t, pmc_region_t region, bool fast_failed)
{
	unsigned d = t->depth;
	if (unlikely(d >= t->begin_cap) && !begin_slow(t))
		return;
	struct frame *f = &t->stack[d];
	/* The path as the usual begin finds it, in the memo (one load and one compare, whatever
	 * other paths there are), put there first where it is not. */
	uint32_t parent = f[-1].path, path;
	const struct pcache *m = &t->memo[region & t->memo_mask];
	if (likely(m->key == pcache_key(parent, region))) {
		path = m->path;
	} else {
		path = path_get(t, parent, region, d);
		memo_put(t, parent, region, path); /* no memory: looked up again next time */
	}
	f->path = path;
	struct reading x = fast_failed ? read_counters_slow(t, f->v, 0) : read_counters(t, f->v, 0);
	f->t0 = x.clock;
	if (unlikely(x.r < 0)) {
		count_loss(t, PMC_LOSS_READ, 1);
		t->overflow++;
		t->begin_cap = 0;
		return;
	}
	f->id = region;
	t->depth++;
}

/* A region of a thread that runs unprofiled: one dropped sample, by its reason, when it is
 * so for want of fds, while its registration waits to be asked again, or while no daemon
 * answers (the next batch of any thread of the process tells the daemon). */
static void __attribute__((noinline)) unprofiled_region(void)
{
	struct pmc_thread *t = T;
	if (t && t->fd_starved)
		atomic_fetch_add_explicit(&G.loss.lost[PMC_LOSS_FD_LIMIT], 1, memory_order_relaxed);
	else if (t && t->state == ST_RETRY)
		atomic_fetch_add_explicit(&G.loss.lost[PMC_LOSS_UNREGISTERED], 1,
		                          memory_order_relaxed);
	else if ((!t || t->state != ST_OFF) &&
	         atomic_load_explicit(&G.conn.state, memory_order_relaxed) == ST_LOST)
		/* No daemon answers (yet, or for now): said once it does, in the next batch. */
		atomic_fetch_add_explicit(&G.loss.lost[PMC_LOSS_NO_DAEMON], 1,
		                          memory_order_relaxed);
}

/* region_end() in full, for any thread and any case: the counters read into t->now with
 * read_counters_slow() (@read), or read already (@x: how that went, and the clock). */
static void __attribute__((noinline))
region_end_any(struct pmc_thread *t, pmc_region_t region, struct reading x, bool read)
{
	uint64_t *now = t->now;
	if (read)
		x = read_counters_slow(t, now, 1);
	unsigned d = t->depth;
	if (unlikely(!frame_is(&t->stack[d - 1], region))) {
		while (d > 0 && !frame_is(&t->stack[d - 1], region))
			d--;
		if (unlikely(!d))
			return;
		/* Regions begun inside this one and not ended: their samples are lost. */
		count_loss(t, PMC_LOSS_NESTING, t->depth - d);
	}
	t->depth = d - 1;
	if (unlikely(x.r < 0)) {
		count_loss(t, PMC_LOSS_READ, 1);
		return;
	}
	struct frame *f = &t->stack[d - 1];
	uint64_t wall = 0;
	if (unlikely(pmc_wall_delta(f->t0, x.clock, &wall) < 0)) {
		/* The kernel took the page's clock away, or gave it, within the region. */
		count_loss(t, PMC_LOSS_READ, 1);
		return;
	}
	struct ring *rg = atomic_load_explicit(&t->ring, memory_order_relaxed);
	uint64_t h = atomic_load_explicit(&t->head, memory_order_relaxed);
	uint64_t tl = atomic_load_explicit(&t->tail, memory_order_acquire);
	if (unlikely(h - tl >= rg->cap)) {
		/* Full: the daemon is away or behind. Send, or grow, then every 64 lost. */
		if (!(atomic_load_explicit(&t->lost[PMC_LOSS_FULL], memory_order_relaxed) & 63)) {
			pmc__flush_try(t);
			rg = atomic_load_explicit(&t->ring, memory_order_relaxed);
			tl = atomic_load_explicit(&t->tail, memory_order_acquire);
		}
		if (h - tl >= rg->cap) {
			count_loss(t, PMC_LOSS_FULL, 1);
			return;
		}
	}
	size_t n = t->n;
	struct pmc_sample *s = ring_slot(rg, h);
	const uint64_t *v0 = f->v;
	uint32_t scaled = 0;
	if (likely(t->one_group)) {
		/* The group's times are the leader's. */
		uint64_t de = now[n] - v0[n], dr = now[2 * n] - v0[2 * n];
		for (size_t j = 0; j < n; j++)
			s->values[j] = now[j] - v0[j];
		if (unlikely(dr != de))
			scaled = pmc__sample_scale(s, n, de, dr);
	} else {
		for (size_t j = 0; j < n; j++) {
			uint64_t dv = now[j] - v0[j];
			uint64_t de = now[n + j] - v0[n + j];
			uint64_t dr = now[2 * n + j] - v0[2 * n + j];
			if (unlikely(dr != de)) {
				/* Multiplexed during the region: extrapolate, and say so. */
				scaled |= UINT32_C(1) << j;
				pmc_sample_ratio(s, n)[j] = de ? (float)dr / (float)de : 0.0f;
				dv = pmc_scale(dv, de, dr);
			}
			s->values[j] = dv;
		}
	}
	/* A region inside which a path began for the first time on the thread: kept out. */
	if (unlikely(f->id != region))
		scaled |= PMC_SAMPLE_FIRST_PATH;
	s->region = f->path;
	s->scaled = scaled;
	s->wall = wall;
	if (unlikely(scaled))
		atomic_store_explicit(&t->scaled_end, h + 1, memory_order_relaxed);
	thread_head_publish(t, h + 1);
	if (!t->last_rdpmc)
		t->fallback_head = h + 1;
	/* A batch's worth: the background thread sends it, or this one (pmc__batch_due()). */
	if (unlikely(h + 1 - tl >= PMC_KICK && h >= t->retry_at))
		pmc__batch_due(t);
}

/* pmc_begin() and pmc_end() themselves, called from this library without the PLT. */
static __typeof__(pmc_begin) pmc_begin_again __attribute__((alias("pmc_begin")));
static __typeof__(pmc_end) pmc_end_again __attribute__((alias("pmc_end")));

/* ---- The usual way: a thread read through its pages writes records (client-internal.h,
 * PMC_REC_BYTES). pmc_begin() and pmc_end() each read the counters in one pass over each page
 * (pmc_reader_pass_leader(), _count()) into the next record's slot, and nothing more: the
 * nesting, the call paths, the deltas and the checks are the reader's (records.c). Every
 * other case goes the general way, and a begin it prepares (the thread registered, room made
 * in the ring, an interrupted pass) is made again through the same code (a tail call), so
 * that the instructions after the read are the same for every region: what a region counts of
 * the library's own is one constant. */

/* How a begin or an end of the usual way went. */
enum { REC_DONE, REC_FULL, REC_REREAD, REC_AGAIN };

/* One pass over each of @t's pages into record @q, with @hdr. Return: REC_DONE; REC_AGAIN where
 * the kernel's update of a page interrupted a pass; REC_REREAD where a page refused. */
static inline __attribute__((always_inline)) int
rec_read(struct pmc_thread *t, uint64_t *q, uint64_t hdr)
{
	struct pmc_reading rd;
	int r = pmc_reader_pass_leader(t->pages[0], &pmc_reader_hw_ops, &rd);
	if (unlikely(r < 0))
		return r == -EAGAIN ? REC_AGAIN : REC_REREAD;
	q[0] = hdr;
	q[1] = rd.clock;
	q[2] = rd.enabled;
	q[3] = rd.running;
	q[4] = rd.value;
	for (size_t i = 1, n = t->n; i < n; i++)
		if (unlikely((r = pmc_reader_pass_count(t->pages[i], &pmc_reader_hw_ops,
		                                        &q[4 + i])) < 0))
			return r == -EAGAIN ? REC_AGAIN : REC_REREAD;
	return REC_DONE;
}

/* The usual begin of @region on @t (TF): its record, where the ring has room. */
static inline __attribute__((always_inline)) int
rec_begin_try(struct pmc_thread *t, pmc_region_t region)
{
	uint8_t *w = t->rw;
	if (unlikely(w == t->rlim))
		return REC_FULL;
	int r = rec_read(t, (uint64_t *)(void *)w, region);
	if (likely(r == REC_DONE))
		t->rw = rec_next(w, t->rs);
	return r;
}

/* After an end's record at @w: the next slot, and the thread's E (its head word, release: the
 * reader reads up to the E-th end); at the kick point, the reader is woken. */
static inline __attribute__((always_inline)) void
rec_publish(struct pmc_thread *t, uint8_t *w)
{
	t->rw = rec_next(w, t->rs);
	_Atomic uint64_t *m = t->head_mirror;
	uint64_t e = atomic_load_explicit(m, memory_order_relaxed) + 1;
	atomic_store_explicit(m, e, memory_order_release);
	if (unlikely(e >= t->ekick))
		pmc__records_due(t, e);
}

/* TF for @t, the calling thread's: @t while it writes records the usual way. */
static inline void
rec_gate(struct pmc_thread *t)
{
	if (T == t)
		TF = t->rec && t->state == ST_ON && !t->skip && !t->pops ? t : NULL;
}

/* Whether a begin's pass of @t's that the kernel's update of a page interrupted (-EAGAIN: it
 * does as it schedules the thread in again, or on a counter's overflow) is made again from the
 * start of the begin, the same code, so that what runs after the reads that stand is what runs
 * after any: a begin so interrupted counts the constant. PMC_PASS_TRIES times at most for one
 * begin, known by its slot and E. An end so interrupted reads again the general way
 * (end_reread()): its extra instructions are inside the region however it reads again. */
static bool __attribute__((noinline)) pass_retry(struct pmc_thread *t)
{
	uint64_t h = (uint64_t)(uintptr_t)t->rw ^
	             atomic_load_explicit(t->head_mirror, memory_order_relaxed) << 32;
	if (t->retry_h != h) {
		t->retry_h = h;
		t->retry_n = 0;
	}
	return t->retry_n++ < PMC_PASS_TRIES;
}

/* A record of @t's at its slot rw (room checked), @hdr's, read the general way
 * (read_counters_slow(): the pages where they let, else read()); marked PMC_REC_FAIL where
 * that failed. */
static void
rec_write_slow(struct pmc_thread *t, uint64_t hdr, int end)
{
	uint64_t *q = (uint64_t *)(void *)t->rw, *v = t->now;
	size_t n = t->n;
	struct reading x = read_counters_slow(t, v, end);
	q[0] = x.r < 0 ? hdr | PMC_REC_FAIL : hdr;
	q[1] = x.clock;
	q[2] = v[n];
	q[3] = v[2 * n];
	for (size_t j = 0; j < n; j++)
		q[4 + j] = v[j];
}

/* Whether @t's ring has room for a record: else it is sent if it can be (every 64 lost). */
static bool __attribute__((noinline)) rec_room(struct pmc_thread *t)
{
	if (t->rw != __atomic_load_n(&t->rlim, __ATOMIC_ACQUIRE))
		return true;
	if (!(atomic_load_explicit(&t->lost[PMC_LOSS_FULL], memory_order_relaxed) & 63))
		pmc__flush_try(t);
	return t->rw != __atomic_load_n(&t->rlim, __ATOMIC_ACQUIRE);
}

/* A begin of @t's that its full ring cannot take: lost, and its end records nothing either. */
static void
rec_drop_begin(struct pmc_thread *t)
{
	count_loss(t, PMC_LOSS_FULL, 1);
	t->skip++;
	rec_gate(t);
}

/* An end of @t's that its full ring cannot take: lost, and told to the reader before the next
 * record (rec_pops()). */
static void
rec_drop_end(struct pmc_thread *t)
{
	count_loss(t, PMC_LOSS_FULL, 1);
	t->pops++;
	rec_gate(t);
}

/* Tells the reader of @t's ends not recorded (t->pops), room permitting, in a record that the
 * next end publishes. Return: whether none is left to tell. */
static bool
rec_pops(struct pmc_thread *t)
{
	if (!t->pops)
		return true;
	if (!rec_room(t))
		return false;
	uint64_t *q = (uint64_t *)(void *)t->rw;
	q[0] = PMC_REC_POP | t->pops;
	t->rw = rec_next(t->rw, t->rs);
	t->pops = 0;
	return true;
}

/* A usual begin of @region on @t that did not go (@why, rec_begin_try()). Return: whether to
 * make it again through the usual way. */
static int __attribute__((noinline))
rec_begin_other(struct pmc_thread *t, pmc_region_t region, int why)
{
	if (unlikely(!region))
		return 0; /* pmc_begin(0) does nothing: no skip for pmc_end(0) to leave */
	if (why == REC_AGAIN && pass_retry(t))
		return 1;
	if (why != REC_FULL) {
		rec_write_slow(t, region, 0);
		t->rw = rec_next(t->rw, t->rs);
		return 0;
	}
	if (rec_room(t))
		return 1;
	rec_drop_begin(t);
	return 0;
}

/* A begin with TF NULL: a thread not registered yet, not profiled, read with read() (not
 * through its pages), or one whose records have dropped begins or ends to tell. Return:
 * whether to begin @region again through the usual way (the thread registered, or told). */
static int __attribute__((noinline)) begin_off(pmc_region_t region)
{
	if (unlikely(!region))
		return 0;
	struct pmc_thread *t = T;
	if (!t || t->state != ST_ON) {
		if (!(t = thread_get())) {
			unprofiled_region();
			return 0;
		}
		if (TF)
			return 1;
	}
	if (!t->rec) {
		region_begin_any(t, region, false);
		return 0;
	}
	if (!t->skip && rec_pops(t)) {
		rec_gate(t);
		return TF != NULL;
	}
	rec_drop_begin(t);
	return 0;
}

/* pmc_begin()'s begin_off(), and its begin made again: so that every call pmc_begin() makes is a
 * tail call (it saves no register). */
static void __attribute__((noinline)) begin_off_again(pmc_region_t region)
{
	if (begin_off(region))
		pmc_begin_again(region);
}

/* pmc_begin()'s rec_begin_other(), and its begin made again. */
static void __attribute__((noinline))
begin_other_again(struct pmc_thread *t, pmc_region_t region, int why)
{
	if (rec_begin_other(t, region, why))
		pmc_begin_again(region);
}

PMC_EXPORT void
pmc_begin(pmc_region_t region)
{
	struct pmc_thread *t = TF;
	if (unlikely(!t)) {
		begin_off_again(region);
		return;
	}
	int r = rec_begin_try(t, region);
	if (unlikely(r != REC_DONE))
		begin_other_again(t, region, r);
}

/* A usual end of @region on @t whose pass could not be made: read again the general way, its
 * record published as the usual end's. */
static void __attribute__((noinline)) end_reread(struct pmc_thread *t, pmc_region_t region)
{
	rec_write_slow(t, region | PMC_REC_END, 1);
	rec_publish(t, t->rw);
	if (!t->last_rdpmc)
		t->fallback_head = atomic_load_explicit(t->head_mirror, memory_order_relaxed);
}

/* A usual end of @region on @t with no room in its ring: ended again through the usual way
 * once there is, else lost, and told to the reader before the next record. */
static void __attribute__((noinline)) end_full(struct pmc_thread *t, pmc_region_t region)
{
	if (unlikely(!region))
		return; /* pmc_end(0) does nothing: no frame to pop */
	if (rec_room(t)) {
		pmc_end_again(region);
		return;
	}
	rec_drop_end(t);
}

/* pmc_end() of a thread read with read() (not through its pages): the frames' way. */
static void
end_frames(struct pmc_thread *t, pmc_region_t region)
{
	/* The end of a begin that was not pushed: leave the open frames alone. */
	if (unlikely(t->overflow)) {
		if (!--t->overflow) {
			t->begin_cap = t->stack_cap;
		}
		return;
	}
	if (unlikely(!t->depth))
		return;
	region_end_any(t, region, (struct reading){0, 0}, true);
}

/* An end with TF NULL (see begin_off()). ST_FORKED: a region open across fork(), ending in the
 * child: its counters were the parent's, no sample. */
static void __attribute__((noinline)) end_off(pmc_region_t region)
{
	struct pmc_thread *t = T;
	if (unlikely(!region || !t || t->state != ST_ON))
		return;
	if (!t->rec) {
		end_frames(t, region);
		return;
	}
	/* The end of a begin not recorded. */
	if (t->skip) {
		if (!--t->skip)
			rec_gate(t);
		return;
	}
	if (!rec_pops(t)) {
		rec_drop_end(t);
		return;
	}
	rec_gate(t);
	if (TF)
		pmc_end_again(region);
}

/* The usual end (pmc_end(), and the macros' end). */
static inline __attribute__((always_inline)) void
end_id(pmc_region_t region)
{
	struct pmc_thread *t = TF;
	if (unlikely(!t)) {
		end_off(region);
		return;
	}
	uint8_t *w = t->rw;
	if (unlikely(w == t->rlim)) {
		end_full(t, region);
		return;
	}
	if (unlikely(rec_read(t, (uint64_t *)(void *)w, region | PMC_REC_END) != REC_DONE)) {
		end_reread(t, region);
		return;
	}
	rec_publish(t, w);
}

PMC_EXPORT void
pmc_end(pmc_region_t region)
{
	end_id(region);
}

/* Unrecorded regions through the same code, so that the first real region does not count
 * the page faults of first touching this library's code and buffers. No sample is
 * published, and no loss is counted. */
void
pmc__thread_warm_up(struct pmc_thread *t)
{
	memset(t->frame_mem, 0, t->stack_cap * 3 * t->n * sizeof(uint64_t));
	memset(t->pcache, 0, sizeof(t->pcache));
	memset(t->memo, 0, t->memo_cap * sizeof(*t->memo));
	struct ring *r = atomic_load(&t->ring);
	memset(r->slots, 0, r->cap * r->stride);
	memset(t->now, 0, sizeof(t->now));
	uint64_t h0 = atomic_load(&t->head);
	if (t->rec) {
		pmc__records_reset(t);
		atomic_store(t->head_mirror, h0);
		__atomic_store_n(&t->ekick, UINT64_MAX, __ATOMIC_RELAXED);
	}
	/* Through the exported functions, called through this library's PLT as a program calls
	 * them through its own, and with no instruction between them but the argument's: the
	 * floor is what a program's empty region counts. The thread is in no list yet: no one
	 * reads its ring, whose samples are taken back after. */
	struct pmc_thread *self = T, *self_f = TF;
	T = t;
	rec_gate(t);
	for (int k = 0; k < PMC_WARMUP_RUNS; k++) {
		pmc_begin(PMC_WARMUP_REGION);
		pmc_end(PMC_WARMUP_REGION);
	}
	T = self;
	TF = self_f;
	/* Records into samples: the caller holds G.conn.lock. */
	pmc__records_convert(t);
	/* The floor: the least of the warm ones, value by value (the first touches this
	 * library's code and buffers; one warm pass alone can still be slowed, by a cache miss
	 * or, on the read() path, a first system call's: issue 24 saw 5.2 us over an empty
	 * region measuring 3.5 us). None when a read failed. */
	uint64_t h = atomic_load(&t->head);
	bool got = false;
	for (uint64_t k = h0 + 1; k < h; k++) {
		const struct pmc_sample *s = ring_slot(r, k);
		if (s->scaled & PMC_SAMPLE_TOMB)
			continue;
		for (size_t j = 0; j < t->n; j++)
			if (!got || s->values[j] < t->floor_v[j])
				t->floor_v[j] = s->values[j];
		if (!got || s->wall < t->floor_wall)
			t->floor_wall = s->wall;
		got = true;
	}
	if (got)
		t->floor_pending = 1;
	thread_head_publish(t, h0);
	t->retry_h = 0;            /* (a warm-up begin's retries, at a head that comes again) */
	if (t->fallback_head > h0) /* a read() of the warm-up's: a sample that is no more */
		t->fallback_head = h0;
	atomic_store(&t->scaled_end, 0);
	t->depth = t->overflow = 0;
	t->begin_cap = t->stack_cap;
	if (t->rec) {
		pmc__records_reset(t);
		memset(t->pcache, 0, sizeof(t->pcache));
		__atomic_store_n(&t->ekick, h0 + PMC_REC_KICK(t->rs), __ATOMIC_RELAXED);
	}
	for (unsigned k = 0; k < PMC_LOSS_THREAD_N; k++)
		atomic_store(&t->lost[k], 0);
}

static pmc_region_t scope_begin_other(struct pmc_thread *t, pmc_region_t region, int why);
static pmc_region_t scope_begin_off(pmc_region_t region);

/* The macros' begin of @region, however their call site found its id: one copy of the usual
 * begin for every call site, name and way to the id (inlined into scope_begin(), gcc gave each
 * way to the id a copy of its own, whose registers differ: a name chosen at run time counted
 * one instruction more in the samples that looked it up than in the others), and every case
 * the usual begin does not take is prepared by scope_begin_other() or _off() and begun again
 * here (a tail call), so that what runs after the read, the return of the id included, is the
 * same for every sample: a region's first on the thread too. Return: @region. */
#ifdef __clang__
#define SCOPE_BEGIN_ATTRS noinline /* clang has no noclone */
#else
#define SCOPE_BEGIN_ATTRS noinline, noclone
#endif
static pmc_region_t __attribute__((SCOPE_BEGIN_ATTRS)) scope_begin_id(pmc_region_t region)
{
	struct pmc_thread *t = TF;
	if (likely(t)) {
		int r = rec_begin_try(t, region);
		if (likely(r == REC_DONE))
			return region;
		return scope_begin_other(t, region, r);
	}
	return scope_begin_off(region);
}

/* scope_begin_id()'s rec_begin_other(). */
static pmc_region_t __attribute__((noinline))
scope_begin_other(struct pmc_thread *t, pmc_region_t region, int why)
{
	if (rec_begin_other(t, region, why))
		return scope_begin_id(region);
	return region;
}

/* scope_begin_id()'s begin_off(). */
static pmc_region_t __attribute__((noinline)) scope_begin_off(pmc_region_t region)
{
	if (begin_off(region))
		return scope_begin_id(region);
	return region;
}

/* The macros' begin. The call site's slot holds the id its name had last time: a name
 * that changes at run time (a buffer, a pointer to one of several names) is compared on
 * every call, never taken for the first one. Whatever id another thread left there is
 * checked, so the slot needs no lock. */
static inline __attribute__((always_inline)) pmc_region_t
scope_begin(pmc_region_t *slot, const char *name, bool literal)
{
	pmc_region_t id = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	/* A name pmc_region() refused (0) takes it on every call, which counts each as a
	 * dropped sample: one per run of the region. */
	if (unlikely(!id || (!literal && (!name || strcmp(G.names.name[id], name))))) {
		id = pmc_region(name);
		if (!id)
			return 0; /* nothing to begin, nor to end (pmc__scope_end()) */
		__atomic_store_n(slot, id, __ATOMIC_RELEASE);
	}
	return scope_begin_id(id);
}

PMC_EXPORT pmc_region_t
pmc__scope_begin(pmc_region_t *slot, const char *name)
{
	return scope_begin(slot, name, false);
}

/* The macros' begin of a literal name: the slot, once it holds an id, is that name's. */
PMC_EXPORT pmc_region_t
pmc__scope_begin_literal(pmc_region_t *slot, const char *name)
{
	return scope_begin(slot, name, true);
}

PMC_EXPORT void
pmc__scope_end(struct pmc__scope *s)
{
	/* A refused name's scope: nothing begun. (The usual end records pmc_end(0), which its
	 * reader makes a tombstone of no reason, cutting a batch there: not for every run of a
	 * scope.) */
	if (unlikely(!s->id))
		return;
	end_id(s->id);
}
