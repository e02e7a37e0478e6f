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

PMC_EXPORT int
pmc_thread_uses_rdpmc(void)
{
	struct pmc_thread *t = T;
	if (!t || t->state != ST_ON || t->gen != atomic_load(&G.threads.gen))
		return -1;
	/* The usual way reads with rdpmc and leaves last_rdpmc as it is: a sample published after
	 * the general way's last fallback to read() was the usual way's. */
	return t->rdpmc && (t->last_rdpmc || atomic_load_explicit(&t->head, memory_order_relaxed) >
	                                             t->fallback_head);
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
		t->fallback_head = atomic_load_explicit(&t->head, memory_order_relaxed);
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

static void end_general(struct pmc_thread *t, pmc_region_t region);

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
		T = t = NULL;
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

static inline uint32_t
pcache_slot(uint32_t parent, pmc_region_t region)
{
	return ((parent * 0x9e3779b1u) ^ region) & (PMC_PCACHE - 1);
}

static inline uint64_t
pcache_key(uint32_t parent, pmc_region_t region)
{
	return (uint64_t)parent << 32 | region;
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
	uint32_t path;
	if (region == PMC_WARMUP_REGION)
		path = 0; /* cached, so that the warm-up's begin is a usual one */
	else if (parent & PMC_PATH_FLAGS)
		path = (parent & PMC_PATH_FLAGS) | region;
	else if (d >= PMC_PATH_DEPTH)
		path = PMC_PATH_FLAG_DEEP | region;
	else if (!(path = pmc__path_intern(parent, region)))
		path = PMC_PATH_FLAG_FULL | region;
	/* Before the sample is published (release): its batch will look for the name. */
	if (path & PMC_PATH_FLAGS)
		atomic_store_explicit(&G.paths.flagged, 1, memory_order_relaxed);
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
		thread_fast_cap(t);
		return true;
	}
	count_loss(t, t->depth >= t->stack_cap ? PMC_LOSS_DEPTH : PMC_LOSS_READ, 1);
	t->overflow++;
	t->begin_cap = 0;
	thread_fast_cap(t);
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

/* Before a fast thread's begin reads its counters, the first time it nests this deep or
 * begins its region in another path than last time: grows the frames (begin_slow()) and puts
 * the path in the memo (path_get(): the cache, else the table). Return: 1 when the region may
 * be begun through the usual code, 0 when it may be pushed but the memo could not grow (no
 * memory: region_begin_any()), -1 when it may not be pushed (counted as lost). */
static int __attribute__((noinline)) begin_ready(struct pmc_thread *t, pmc_region_t region)
{
	unsigned d = t->depth;
	if (d >= t->begin_cap && !begin_slow(t))
		return -1;
	uint32_t parent = d ? t->stack[d - 1].path : 0;
	return memo_put(t, parent, region, path_get(t, parent, region, d));
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
		thread_fast_cap(t);
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

static void begin_other(pmc_region_t region);
static void begin_general(struct pmc_thread *t, pmc_region_t region);
static void begin_again(struct pmc_thread *t, pmc_region_t region);

/* The usual begin (pmc_begin(), and the macros' scope_begin_id()): a thread that reads its group
 * through the pages, with room in its frames, and a region that begins in the same path as last
 * time (its memo slot): one pass over each page (pmc_reader_pass_leader(), _count()) into the
 * frame. Every other case, and a pass the page refuses, goes the general way (begin_general(),
 * region_begin_any()) with a tail call; a thread that registers, a path new to the memo or frames
 * that must grow are prepared there, and a pass the kernel interrupted is retried (begin_again()),
 * each begun again through this code, so that the instructions after the read are the same for
 * every region: what a region counts of the library's own is one constant. */
enum { BEGUN, BEGIN_GENERAL, BEGIN_REREAD, BEGIN_AGAIN };

/* Whether a begin's pass of @t's that the kernel's update of a page interrupted (-EAGAIN: it
 * does as it schedules the thread in again, or on a counter's overflow) is made again from the
 * start of the begin, the same code, so that what runs after the reads that stand is what runs
 * after any: a begin so interrupted counts the constant (the general way ran 85 or so
 * instructions more after its read). PMC_PASS_TRIES times at most for one begin. An end so
 * interrupted reads again the general way (region_end_any()): its extra instructions are inside
 * the region however it reads again, and that way costs fewest (88 on the emulated arm64 PMU;
 * made again from pmc_end()'s start, 111). */
static bool __attribute__((noinline)) pass_retry(struct pmc_thread *t)
{
	/* A begin is known by the head and the depth it began at (nested begins share a head). */
	uint64_t h = (atomic_load_explicit(&t->head, memory_order_relaxed) + 1) ^ (uint64_t)t->depth
	                                                                                  << 56;
	if (t->retry_h != h) {
		t->retry_h = h;
		t->retry_n = 0;
	}
	return t->retry_n++ < PMC_PASS_TRIES;
}

/* begin_fast() on registered @t: BEGUN; BEGIN_GENERAL where it is not the usual way (nothing
 * read: begin_general()); BEGIN_REREAD where a pass could not be made (region_begin_any() with
 * fast_failed); BEGIN_AGAIN where the kernel's update of a page interrupted one (begun again
 * from the start, or BEGIN_REREAD's way after PMC_PASS_TRIES: begin_again()). */
static inline __attribute__((always_inline)) int
begin_try(struct pmc_thread *t, pmc_region_t region)
{
	unsigned d = t->depth;
	if (unlikely(d >= t->fast_cap || !region))
		return BEGIN_GENERAL;
	struct frame *f = &t->stack[d];
	const struct pcache *m = &t->memo[region & t->memo_mask];
	if (unlikely(m->key != pcache_key(f[-1].path, region)))
		return BEGIN_GENERAL;
	size_t n = t->n;
	uint64_t *v = f->v;
	struct pmc_reading rd;
	int r = pmc_reader_pass_leader(t->pages[0], &pmc_reader_hw_ops, &rd);
	if (unlikely(r < 0))
		return r == -EAGAIN ? BEGIN_AGAIN : BEGIN_REREAD;
	v[0] = rd.value;
	v[n] = rd.enabled;
	v[2 * n] = rd.running;
	f->t0 = rd.clock;
	for (size_t i = 1; i < n; i++)
		if (unlikely((r = pmc_reader_pass_count(t->pages[i], &pmc_reader_hw_ops, &v[i])) <
		             0))
			return r == -EAGAIN ? BEGIN_AGAIN : BEGIN_REREAD;
	f->path = m->path;
	f->id = region;
	t->depth = d + 1;
	return BEGUN;
}

static inline __attribute__((always_inline)) void
begin_fast(pmc_region_t region)
{
	struct pmc_thread *t = T;
	if (unlikely(!t)) {
		begin_other(region);
		return;
	}
	int r = begin_try(t, region);
	if (unlikely(r == BEGIN_GENERAL))
		begin_general(t, region);
	else if (unlikely(r == BEGIN_REREAD))
		region_begin_any(t, region, true);
	else if (unlikely(r == BEGIN_AGAIN))
		begin_again(t, region);
}

PMC_EXPORT void
pmc_begin(pmc_region_t region)
{
	begin_fast(region);
}

/* pmc_begin() itself, called from this library without the PLT. */
static __typeof__(pmc_begin) pmc_begin_again __attribute__((alias("pmc_begin")));

/* pmc_begin() whose pass the kernel's update of a page interrupted: begun again through
 * pmc_begin() (pass_retry()). */
static void __attribute__((noinline)) begin_again(struct pmc_thread *t, pmc_region_t region)
{
	if (pass_retry(t))
		pmc_begin_again(region);
	else
		region_begin_any(t, region, true);
}

/* pmc_begin() of a thread not registered yet, or not profiled: a thread that registers here
 * begins its first region through pmc_begin() again (a tail call), as every other region
 * begins: the instructions after the read are the same for its first region too. */
static void __attribute__((noinline)) begin_other(pmc_region_t region)
{
	if (unlikely(!region))
		return;
	if (likely(thread_get() != NULL))
		pmc_begin_again(region);
	else
		unprofiled_region();
}

/* pmc_begin() of a thread that is not on the usual way (begin_fast()): not ST_ON (registers
 * here, or runs unprofiled), read with read(), past its frames, inside a begin that was not
 * pushed, or of a path not in its memo. A fast thread's begin is prepared (begin_ready()) and
 * begun again through pmc_begin(). */
static void __attribute__((noinline)) begin_general(struct pmc_thread *t, pmc_region_t region)
{
	if (unlikely(!region))
		return;
	if (t->state != ST_ON) {
		begin_other(region);
		return;
	}
	if (!t->fast) {
		region_begin_any(t, region, false);
		return;
	}
	int r = begin_ready(t, region);
	thread_fast_cap(t);
	if (r > 0 && t->depth < t->fast_cap)
		pmc_begin_again(region);
	else if (r >= 0)
		region_begin_any(t, region, false);
}

/* A sample of a group multiplexed during the region (enabled @de, running @dr ns): every
 * value extrapolated with the same ratio. Return: the sample's scaled marks. */
static uint32_t __attribute__((noinline))
region_scale(struct pmc_sample *s, size_t n, uint64_t de, uint64_t dr)
{
	float ratio = de ? (float)dr / (float)de : 0.0f;
	for (size_t j = 0; j < n; j++) {
		pmc_sample_ratio(s, n)[j] = ratio;
		s->values[j] = pmc_scale(s->values[j], de, dr);
	}
	return (UINT32_C(1) << n) - 1;
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
			scaled = region_scale(s, n, de, dr);
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

/* The usual end (pmc_end(), and the macros' inline): the innermost region of a thread on the
 * usual way, with room in its ring: one pass over each page (the ring's slot takes the
 * deltas), and a group that was not multiplexed within the region. Every other case, before
 * the read, goes the general way (end_general()); after it, a pass that could not be made or a
 * multiplexed group reads again there (region_end_any()). */
static inline __attribute__((always_inline)) void
end_fast(pmc_region_t region)
{
	struct pmc_thread *t = T;
	if (unlikely(!t))
		return;
	unsigned d = t->depth;
	if (unlikely(d - 1 >= t->fast_cap)) {
		end_general(t, region);
		return;
	}
	struct frame *f = &t->stack[d - 1];
	struct ring *rg = atomic_load_explicit(&t->ring, memory_order_relaxed);
	uint64_t h = atomic_load_explicit(&t->head, memory_order_relaxed);
	uint64_t tl = atomic_load_explicit(&t->tail, memory_order_acquire);
	if (unlikely(f->id != region || h - tl >= rg->cap)) {
		end_general(t, region);
		return;
	}
	size_t n = t->n;
	const uint64_t *v0 = f->v;
	struct pmc_sample *s = ring_slot(rg, h);
	struct pmc_reading rd;
	if (unlikely(pmc_reader_pass_leader(t->pages[0], &pmc_reader_hw_ops, &rd) < 0)) {
		region_end_any(t, region, (struct reading){0, 0}, true);
		return;
	}
	uint64_t wall = rd.clock - f->t0;
	/* Multiplexed within the region (the group's enabled and running times grew apart), or a
	 * wall time pmc_wall_delta() would not take as it is: read again the general way. Checked
	 * before the members are read, so that none of the leader's values is held across. */
	if (unlikely((rd.enabled - v0[n] != rd.running - v0[2 * n]) | (wall >> 62))) {
		region_end_any(t, region, (struct reading){0, 0}, true);
		return;
	}
	s->values[0] = rd.value - v0[0];
	s->region = f->path;
	s->scaled = 0;
	s->wall = wall;
	for (size_t i = 1; i < n; i++) {
		uint64_t c;
		if (unlikely(pmc_reader_pass_count(t->pages[i], &pmc_reader_hw_ops, &c) < 0)) {
			region_end_any(t, region, (struct reading){0, 0}, true);
			return;
		}
		s->values[i] = c - v0[i];
	}
	t->depth = d - 1;
	thread_head_publish(t, h + 1);
	/* A batch's worth: the background thread sends it, or this one (pmc__batch_due()). */
	if (unlikely(h + 1 - tl >= PMC_KICK && h >= t->retry_at))
		pmc__batch_due(t);
}

/* pmc_end(), inlined into the macros' end too. */
static inline __attribute__((always_inline)) void
end_id(pmc_region_t region)
{
	end_fast(region);
}

PMC_EXPORT void
pmc_end(pmc_region_t region)
{
	end_fast(region);
}

/* pmc_end() of a thread not on the usual way (end_fast()), of a region that is not the
 * innermost, or with a full ring. ST_FORKED: a region open across fork(), ending in the child:
 * its counters were the parent's, no sample. */
static void __attribute__((noinline)) end_general(struct pmc_thread *t, pmc_region_t region)
{
	if (unlikely(!region || t->state != ST_ON))
		return;
	/* The end of a begin that was not pushed: leave the open frames alone. */
	if (unlikely(t->overflow)) {
		if (!--t->overflow) {
			t->begin_cap = t->stack_cap;
			thread_fast_cap(t);
		}
		return;
	}
	if (unlikely(!t->depth))
		return;
	region_end_any(t, region, (struct reading){0, 0}, true);
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
	/* Through the exported functions, called through this library's PLT as a program calls
	 * them through its own, and with no instruction between them but the argument's: the
	 * floor is what a program's empty region counts. The thread is in no list yet: no one
	 * reads its ring, whose samples are taken back after. */
	struct pmc_thread *self = T;
	uint64_t h0 = atomic_load(&t->head);
	T = t;
	for (int k = 0; k < PMC_WARMUP_RUNS; k++) {
		pmc_begin(PMC_WARMUP_REGION);
		pmc_end(PMC_WARMUP_REGION);
	}
	T = self;
	/* The floor: the least of the warm ones, value by value (the first touches this
	 * library's code and buffers; one warm pass alone can still be slowed, by a cache miss
	 * or, on the read() path, a first system call's: issue 24 saw 5.2 us over an empty
	 * region measuring 3.5 us). None when a read failed. */
	uint64_t h = atomic_load(&t->head);
	if (h > h0 + 1) {
		for (uint64_t k = h0 + 1; k < h; k++) {
			const struct pmc_sample *s = ring_slot(r, k);
			for (size_t j = 0; j < t->n; j++)
				if (k == h0 + 1 || s->values[j] < t->floor_v[j])
					t->floor_v[j] = s->values[j];
			if (k == h0 + 1 || s->wall < t->floor_wall)
				t->floor_wall = s->wall;
		}
		t->floor_pending = 1;
	}
	thread_head_publish(t, h0);
	t->retry_h = 0;            /* (a warm-up begin's retries, at a head that comes again) */
	if (t->fallback_head > h0) /* a read() of the warm-up's: a sample that is no more */
		t->fallback_head = h0;
	atomic_store(&t->scaled_end, 0);
	t->depth = t->overflow = 0;
	t->begin_cap = t->stack_cap;
	thread_fast_cap(t);
	for (unsigned k = 0; k < PMC_LOSS_THREAD_N; k++)
		atomic_store(&t->lost[k], 0);
}

static pmc_region_t scope_begin_slow(struct pmc_thread *t, pmc_region_t region);
static pmc_region_t scope_begin_again(struct pmc_thread *t, pmc_region_t region);

/* scope_begin_id() where a pass could not be made: a tail call, so that the usual way saves no
 * register. */
static pmc_region_t __attribute__((noinline))
scope_begin_reread(struct pmc_thread *t, pmc_region_t region)
{
	region_begin_any(t, region, true);
	return region;
}

/* The macros' begin of @region, however their call site found its id: one copy of the usual
 * begin for every call site, name and way to the id (inlined into scope_begin(), gcc gave each
 * way to the id a copy of its own, whose registers differ: a name chosen at run time counted
 * one instruction more in the samples that looked it up than in the others), and every case
 * the usual begin does not take is prepared by scope_begin_slow() and begun again here (a
 * tail call), so that what runs after the read, the return of the id included, is the same
 * for every sample: a region's first on the thread too. Return: @region. */
#ifdef __clang__
#define SCOPE_BEGIN_ATTRS noinline /* clang has no noclone */
#else
#define SCOPE_BEGIN_ATTRS noinline, noclone
#endif
static pmc_region_t __attribute__((SCOPE_BEGIN_ATTRS)) scope_begin_id(pmc_region_t region)
{
	struct pmc_thread *t = T;
	if (likely(t)) {
		int r = begin_try(t, region);
		if (likely(r == BEGUN))
			return region;
		if (r == BEGIN_REREAD)
			return scope_begin_reread(t, region);
		if (r == BEGIN_AGAIN)
			return scope_begin_again(t, region);
	}
	return scope_begin_slow(t, region);
}

/* scope_begin_id() whose pass the kernel's update of a page interrupted: begun again by
 * scope_begin_id() (pass_retry()). */
static pmc_region_t __attribute__((noinline))
scope_begin_again(struct pmc_thread *t, pmc_region_t region)
{
	if (pass_retry(t))
		return scope_begin_id(region);
	region_begin_any(t, region, true);
	return region;
}

/* scope_begin_id() off the usual way: begin_general() and begin_other(), but a begin they
 * prepare is made again by scope_begin_id(). */
static pmc_region_t __attribute__((noinline))
scope_begin_slow(struct pmc_thread *t, pmc_region_t region)
{
	if (unlikely(!region))
		return region;
	if (!t || t->state != ST_ON) {
		if (likely(thread_get() != NULL))
			return scope_begin_id(region);
		unprofiled_region();
		return region;
	}
	if (!t->fast) {
		region_begin_any(t, region, false);
		return region;
	}
	int r = begin_ready(t, region);
	thread_fast_cap(t);
	if (r > 0 && t->depth < t->fast_cap)
		return scope_begin_id(region);
	if (r >= 0)
		region_begin_any(t, region, false);
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
		if (id)
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
	end_id(s->id);
}
