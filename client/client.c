/* libpmcclient: per-thread counters handed over by pmcdaemon, read in the thread
 * itself; region samples buffered per thread and sent in batches.
 *
 * Hot path (pmc_begin/pmc_end): thread-local state only. With rdpmc no lock, no
 * allocation, no syscall; otherwise one read() of the group per call. Names are found
 * in a hash table read without a lock. The global lock is taken only to intern a new
 * name, register a thread and send a batch. */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pmc/pmc.h>

#include "reader.h"
#include "util.h"
#include "wire.h"

#define PMC_DEFAULT_SOCKET "/run/pmcdaemon/pmc.sock"
#define PMC_MAX_REGIONS 4096
#define PMC_MAX_EVENTS 16
#define PMC_MAX_DEPTH 32
#define PMC_BATCH 512
/* Samples a thread keeps while the daemon is away (restarting), sent when it is back. */
#define PMC_GAP 4096
#define PMC_CALL_TIMEOUT_MS 2000
/* Open addressing over at most PMC_MAX_REGIONS names: never more than half full. */
#define PMC_NAME_SLOTS (2 * PMC_MAX_REGIONS)
/* Never handed out by pmc_region(): ids stay below PMC_MAX_REGIONS. */
#define PMC_WARMUP_REGION UINT32_MAX

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ST_LOST: was connected, the daemon went away; a background thread reconnects. */
enum { ST_NONE, ST_ON, ST_OFF, ST_LOST };

struct frame {
	pmc_region_t id;
	uint64_t t0;
	uint64_t *v; /* n values, then n enabled, then n running */
};

struct pmc_thread {
	/* G.threads: every registered thread of this generation, for fork() to close
	 * their fds in the child. Under G.lock. */
	struct pmc_thread *next, *prev;
	unsigned gen;
	int state;
	unsigned conn; /* G.conn when this thread last told the daemon about itself */
	char *ev_names[PMC_MAX_EVENTS];
	uint32_t ev_groups[PMC_MAX_EVENTS];
	pid_t tid;
	size_t n;
	int fds[PMC_MAX_EVENTS];
	struct perf_event_mmap_page *pages[PMC_MAX_EVENTS];
	int group_leader[PMC_MAX_EVENTS]; /* index of each event's leader */
	int rdpmc;
	int last_rdpmc; /* the last read_counters() took rdpmc */
	unsigned depth;
	unsigned overflow; /* begins not pushed (too deep, or a failed read): their ends skip */
	struct frame stack[PMC_MAX_DEPTH];
	uint64_t *frame_mem;
	uint64_t now[3 * PMC_MAX_EVENTS];
	/* Sample buffer, sent as one SampleBatch. */
	size_t n_samples, n_ratio;
	size_t cap;      /* samples the arrays below hold: PMC_BATCH, PMC_GAP after a loss */
	size_t flush_at; /* n_samples at which pmc_end() sends */
	uint64_t dropped;
	uint32_t *region;
	uint64_t *wall;
	uint32_t *scaled;
	float *ratio;     /* cap * n: running/enabled of each extrapolated value */
	uint64_t *values; /* cap * n */
};

static struct {
	pthread_mutex_t lock;
	_Atomic int state;
	_Atomic unsigned gen;
	int fd;
	pid_t pid;
	char *events_env;
	char *events[PMC_MAX_EVENTS];
	size_t n_events;
	pthread_key_t key;
	int key_ok;
	uint32_t n_regions;
	/* names[id] and hashes[id] are written once, under the lock, before the id is
	 * published (release) in name_slots; read without the lock after an acquire. */
	char *names[PMC_MAX_REGIONS];
	uint32_t hashes[PMC_MAX_REGIONS];
	_Atomic uint32_t name_slots[PMC_NAME_SLOTS];
	_Atomic int names_full;
	uint8_t announced[PMC_MAX_REGIONS];
	unsigned conn;       /* connections made so far */
	uint64_t sent_total; /* samples sent in batches, to any daemon */
	uint64_t orphans;    /* samples of exited threads that could not be sent */
	const char *path;
	int reconnecting;
	int disabled;               /* PMC_DISABLE: off on purpose */
	struct pmc_thread *threads; /* registered, this generation */
	struct pmc_thread *dead;    /* of threads that did not survive a fork() */
} G = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static __thread struct pmc_thread *T __attribute__((tls_model("initial-exec")));

static void thread_destroy(void *arg);
static void connection_failed_locked(int r);
static int reattach_locked(struct pmc_thread *t);
static void pmc_atexit(void);
static void thread_warm_up(struct pmc_thread *t);

static pid_t
gettid_(void)
{
	return (pid_t)syscall(SYS_gettid);
}

static void warn_once(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
warn_once(const char *fmt, ...)
{
	static atomic_flag warned = ATOMIC_FLAG_INIT;
	if (atomic_flag_test_and_set(&warned))
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "pmc: %s\n", line);
}

static void
parse_events(void)
{
	const char *env = getenv("PMC_EVENTS");
	if (!env || !*env)
		return;
	G.events_env = strdup(env);
	if (!G.events_env)
		return;
	char *save = NULL;
	for (char *tok = strtok_r(G.events_env, ",", &save); tok && G.n_events < PMC_MAX_EVENTS;
	     tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		if (*tok)
			G.events[G.n_events++] = tok;
	}
}

/* Holding the lock across fork() means the child never sees a half-done update. */
static void
on_fork_prepare(void)
{
	pthread_mutex_lock(&G.lock);
}

static void
on_fork_parent(void)
{
	pthread_mutex_unlock(&G.lock);
}

static void
on_fork_child(void)
{
	/* The child shares the parent's socket and counts nothing of its own: start over
	 * lazily, with a new connection and fresh registrations. */
	if (G.fd >= 0)
		close(G.fd);
	G.fd = -1;
	/* Every registered thread's counters count the parent's threads: close the fds
	 * now, before the child can reuse their numbers. The user pages are not mapped
	 * here (the kernel maps perf buffers VM_DONTCOPY): forget them, never munmap()
	 * what the child may map at those addresses later. The calling thread's structure
	 * goes at its next region (its generation is old). Those of the threads that did
	 * not survive the fork stay, as their stacks do, on G.dead: their owners may have
	 * been half-way through changing them, so freeing them is not safe, and untouched
	 * they stay shared with the parent, copy-on-write. */
	for (struct pmc_thread *t = G.threads, *next; t; t = next) {
		next = t->next;
		for (size_t i = 0; i < t->n; i++) {
			if (t->fds[i] >= 0)
				close(t->fds[i]);
			t->fds[i] = -1;
			t->pages[i] = NULL;
		}
		t->rdpmc = 0;
		t->prev = NULL;
		t->next = NULL;
		if (t != T) {
			t->next = G.dead;
			G.dead = t;
		}
	}
	G.threads = NULL;
	pthread_mutex_init(&G.lock, NULL);
	memset(G.announced, 0, sizeof(G.announced));
	/* The reconnecting thread, if any, did not survive the fork. */
	G.reconnecting = 0;
	G.sent_total = 0;
	if (atomic_load(&G.state) == ST_ON || atomic_load(&G.state) == ST_LOST)
		atomic_store(&G.state, ST_NONE);
	atomic_fetch_add(&G.gen, 1);
}

/* Connects to the daemon at @path and says Hello.
 * Return: the socket (non-blocking), or -errno; *@hello_failed tells a failed Hello
 * from a failed connect, and @why holds the daemon's words when it refused. */
static int
daemon_connect(const char *path, int *hello_failed, char *why, size_t why_len)
{
	*hello_failed = 0;
	*why = 0;
	/* Non-blocking: a daemon whose backlog is full fails the connect at once. */
	int fd = wire_connect_flags(path, SOCK_NONBLOCK);
	if (fd < 0)
		return fd;
	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.client = "libpmcclient";
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	Pmc__Response *resp = NULL;
	int r = wire_call(fd, &req, PMC_CALL_TIMEOUT_MS, NULL, 0, NULL, &resp);
	if (r == 0 && resp->error) {
		snprintf(why, why_len, "%s", resp->message);
		r = -EPROTO;
	}
	if (resp)
		pmc__response__free_unpacked(resp, NULL);
	if (r < 0) {
		close(fd);
		*hello_failed = 1;
		return r;
	}
	return fd;
}

/* Called with G.lock held. */
static void
connect_locked(void)
{
	if (atomic_load(&G.state) != ST_NONE)
		return;
	static int once;
	if (!once) {
		once = 1;
		const char *dis = getenv("PMC_DISABLE");
		if (dis && *dis && strcmp(dis, "0")) {
			G.disabled = 1;
			atomic_store(&G.state, ST_OFF);
			return;
		}
		parse_events();
		G.key_ok = pthread_key_create(&G.key, thread_destroy) == 0;
		pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
		atexit(pmc_atexit);
	}
	const char *path = getenv("PMC_SOCKET");
	if (!path || !*path)
		path = PMC_DEFAULT_SOCKET;

	char why[256] = "";
	int hello_failed = 0;
	int fd = daemon_connect(path, &hello_failed, why, sizeof(why));
	if (fd < 0) {
		if (!hello_failed)
			warn_once("profiling disabled: cannot connect to pmcdaemon at %s: %s (is "
			          "pmcdaemon running? set PMC_SOCKET, or PMC_DISABLE=1 to silence "
			          "this)",
			          path, strerror(-fd));
		else if (*why)
			warn_once("profiling disabled: pmcdaemon at %s refused: %s", path, why);
		else
			warn_once("profiling disabled: no answer from pmcdaemon at %s: %s", path,
			          strerror(-fd));
		atomic_store(&G.state, ST_OFF);
		return;
	}
	G.fd = fd;
	G.pid = getpid();
	G.path = path;
	G.conn++;
	atomic_store(&G.state, ST_ON);
}

static int
ensure_connected(void)
{
	int st = atomic_load_explicit(&G.state, memory_order_acquire);
	if (likely(st != ST_NONE))
		return st;
	pthread_mutex_lock(&G.lock);
	connect_locked();
	pthread_mutex_unlock(&G.lock);
	return atomic_load(&G.state);
}

PMC_EXPORT int
pmc_thread_uses_rdpmc(void)
{
	struct pmc_thread *t = T;
	if (!t || t->state != ST_ON || t->gen != atomic_load(&G.gen))
		return -1;
	return t->rdpmc && t->last_rdpmc;
}

/* FNV-1a of the first PMC_REGION_NAME_MAX bytes of @name (what is interned of it). */
static inline uint32_t
name_hash(const char *name, size_t *len)
{
	uint32_t h = 2166136261u;
	size_t i = 0;
	for (; i < PMC_REGION_NAME_MAX && name[i]; i++)
		h = (h ^ (unsigned char)name[i]) * 16777619u;
	*len = i;
	return h;
}

/* Whether interned name @id is @name, truncated as pmc_region() truncates it. */
static inline bool
name_is(pmc_region_t id, const char *name)
{
	const char *s = G.names[id];
	for (size_t i = 0; i < PMC_REGION_NAME_MAX; i++) {
		if (s[i] != name[i])
			return false;
		if (!s[i])
			return true;
	}
	return true;
}

/* Lock-free: the id of @name (hash @h), or 0. */
static pmc_region_t
name_find(const char *name, uint32_t h)
{
	for (uint32_t i = h & (PMC_NAME_SLOTS - 1);; i = (i + 1) & (PMC_NAME_SLOTS - 1)) {
		uint32_t id = atomic_load_explicit(&G.name_slots[i], memory_order_acquire);
		if (!id)
			return 0;
		if (G.hashes[id] == h && name_is(id, name))
			return id;
	}
}

/* Called with G.lock held: interns @name (not there yet), or 0 when the table is full. */
static pmc_region_t
name_add_locked(const char *name, size_t len, uint32_t h)
{
	if (G.n_regions + 1 >= PMC_MAX_REGIONS) {
		atomic_store(&G.names_full, 1);
		return 0;
	}
	char *copy = malloc(len + 1);
	if (!copy)
		return 0;
	memcpy(copy, name, len);
	copy[len] = 0;
	pmc_region_t id = ++G.n_regions;
	G.names[id] = copy;
	G.hashes[id] = h;
	uint32_t i = h & (PMC_NAME_SLOTS - 1);
	while (atomic_load_explicit(&G.name_slots[i], memory_order_relaxed))
		i = (i + 1) & (PMC_NAME_SLOTS - 1);
	atomic_store_explicit(&G.name_slots[i], id, memory_order_release);
	return id;
}

PMC_EXPORT pmc_region_t
pmc_region(const char *name)
{
	if (!name || !*name || ensure_connected() == ST_OFF)
		return 0;
	size_t len;
	uint32_t h = name_hash(name, &len);
	pmc_region_t id = name_find(name, h);
	if (likely(id) || atomic_load_explicit(&G.names_full, memory_order_relaxed))
		return id;
	pthread_mutex_lock(&G.lock);
	id = name_find(name, h);
	if (!id)
		id = name_add_locked(name, len, h);
	pthread_mutex_unlock(&G.lock);
	return id;
}

/* (Re)sizes the sample arrays to @cap samples; on failure they keep their size. */
static int
buffers_resize(struct pmc_thread *t, size_t cap)
{
	uint32_t *region = realloc(t->region, cap * sizeof(*region));
	if (region)
		t->region = region;
	uint64_t *wall = realloc(t->wall, cap * sizeof(*wall));
	if (wall)
		t->wall = wall;
	uint32_t *scaled = realloc(t->scaled, cap * sizeof(*scaled));
	if (scaled)
		t->scaled = scaled;
	float *ratio = realloc(t->ratio, cap * t->n * sizeof(*ratio));
	if (ratio)
		t->ratio = ratio;
	uint64_t *values = realloc(t->values, cap * t->n * sizeof(*values));
	if (values)
		t->values = values;
	if (!region || !wall || !scaled || !ratio || !values)
		return -ENOMEM;
	t->cap = cap;
	t->flush_at = PMC_BATCH;
	return 0;
}

static void
thread_release(struct pmc_thread *t)
{
	for (size_t i = 0; i < t->n; i++) {
		if (t->pages[i])
			munmap(t->pages[i], (size_t)sysconf(_SC_PAGESIZE));
		if (t->fds[i] >= 0)
			close(t->fds[i]);
	}
	for (size_t i = 0; i < t->n; i++)
		free(t->ev_names[i]);
	free(t->frame_mem);
	free(t->values);
	free(t->ratio);
	free(t->region);
	free(t->wall);
	free(t->scaled);
	free(t);
}

/* Called with G.lock held; returns a registered thread or NULL. */
static struct pmc_thread *
register_locked(void)
{
	struct pmc_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->tid = gettid_();
	t->gen = atomic_load(&G.gen);

	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = t->tid;
	rt.n_events = G.n_events;
	rt.events = G.events;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	Pmc__Response *resp = NULL;
	size_t n_fds = 0;
	int r = wire_call(G.fd, &req, PMC_CALL_TIMEOUT_MS, t->fds, PMC_MAX_EVENTS, &n_fds, &resp);
	if (r < 0) {
		warn_once("thread %d not profiled: registering with pmcdaemon failed: %s",
		          (int)t->tid, strerror(-r));
		/* A late reply would answer the next thread's request: this connection is
		 * out of step for good. Start afresh (in the background). */
		connection_failed_locked(r == -EAGAIN ? -ETIMEDOUT : r);
		free(t);
		return NULL;
	}
	if (resp->error || resp->body_case != PMC__RESPONSE__BODY_REGISTER_REPLY ||
	    resp->register_reply->tid != t->tid || resp->register_reply->n_events != n_fds ||
	    n_fds == 0) {
		warn_once("thread %d not profiled: %s", (int)t->tid,
		          resp->error ? resp->message : "unexpected reply from pmcdaemon");
		for (size_t i = 0; i < n_fds; i++)
			close(t->fds[i]);
		pmc__response__free_unpacked(resp, NULL);
		free(t);
		return NULL;
	}
	t->n = n_fds;
	int leader = 0;
	unsigned last_group = UINT32_MAX;
	t->conn = G.conn;
	for (size_t i = 0; i < n_fds; i++) {
		unsigned g = resp->register_reply->events[i]->group;
		t->ev_groups[i] = g;
		t->ev_names[i] = strdup(resp->register_reply->events[i]->name);
		if (g != last_group)
			leader = (int)i;
		last_group = g;
		t->group_leader[i] = leader;
	}
	pmc__response__free_unpacked(resp, NULL);

	/* The daemon opens leaders disabled; enabling them here, on the counted thread,
	 * costs no interrupt of another CPU. */
	for (size_t i = 0; i < t->n; i++)
		if (t->group_leader[i] == (int)i &&
		    ioctl(t->fds[i], PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP) < 0) {
			thread_release(t);
			return NULL;
		}

	long pagesz = sysconf(_SC_PAGESIZE);
	t->rdpmc = PMC_HAVE_RDPMC;
	for (size_t i = 0; i < t->n && t->rdpmc; i++) {
		void *p = mmap(NULL, (size_t)pagesz, PROT_READ, MAP_SHARED, t->fds[i], 0);
		t->pages[i] = p == MAP_FAILED ? NULL : p;
		if (!t->pages[i]) {
			/* Each page counts against perf_event_mlock_kb, then RLIMIT_MEMLOCK. */
			warn_once("thread %d reads its counters with read() (slower): mmap of a "
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
	if (!t->rdpmc)
		for (size_t i = 0; i < t->n; i++)
			if (t->pages[i]) {
				munmap(t->pages[i], (size_t)pagesz);
				t->pages[i] = NULL;
			}
	for (size_t i = 0; i < t->n; i++)
		if (!t->ev_names[i]) {
			thread_release(t);
			return NULL;
		}
	t->frame_mem = calloc(PMC_MAX_DEPTH * 3 * t->n, sizeof(uint64_t));
	if (!t->frame_mem || buffers_resize(t, PMC_BATCH) < 0) {
		thread_release(t);
		return NULL;
	}
	for (unsigned d = 0; d < PMC_MAX_DEPTH; d++)
		t->stack[d].v = t->frame_mem + d * 3 * t->n;
	t->state = ST_ON;
	t->next = G.threads;
	if (G.threads)
		G.threads->prev = t;
	G.threads = t;
	return t;
}

/* Reads every counter of @t into v[0..n) with enabled/running in v[n..2n), v[2n..3n). */
static inline int
read_counters(struct pmc_thread *t, uint64_t *v)
{
	size_t n = t->n;
	if (t->rdpmc) {
		int ok = pmc_reader_read_groups(t->pages, t->group_leader, n, &pmc_reader_hw_ops,
		                                v) == 0;
		t->last_rdpmc = ok;
		if (ok)
			return 0;
	}
	uint64_t buf[3 + PMC_MAX_EVENTS];
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

static int flush_thread(struct pmc_thread *t, bool may_wait);

static struct pmc_thread *
thread_slow(void)
{
	if (ensure_connected() != ST_ON)
		return NULL;
	struct pmc_thread *t = T;
	if (t && t->gen != atomic_load(&G.gen)) {
		/* Inherited across fork(): the fds count the parent's thread. */
		if (G.key_ok)
			pthread_setspecific(G.key, NULL);
		if (t->state == ST_ON)
			thread_release(t);
		else
			free(t);
		T = t = NULL;
	}
	if (t)
		return t->state == ST_ON ? t : NULL;
	pthread_mutex_lock(&G.lock);
	connect_locked();
	if (atomic_load(&G.state) == ST_ON)
		t = register_locked();
	pthread_mutex_unlock(&G.lock);
	if (t)
		thread_warm_up(t);
	if (!t) {
		/* Remember the failure so that this thread never retries on the hot path. */
		t = calloc(1, sizeof(*t));
		if (!t)
			return NULL;
		t->gen = atomic_load(&G.gen);
		t->state = ST_OFF;
	}
	T = t;
	if (G.key_ok)
		pthread_setspecific(G.key, t);
	return t->state == ST_ON ? t : NULL;
}

static inline struct pmc_thread *
thread_get(void)
{
	struct pmc_thread *t = T;
	if (likely(t && t->gen == atomic_load_explicit(&G.gen, memory_order_relaxed)))
		return t->state == ST_ON ? t : NULL;
	return thread_slow();
}

/* Per thread, registering it as its first region would: the process may be connected
 * while this thread was refused (an unknown event, --max-threads). */
PMC_EXPORT int
pmc_enabled(void)
{
	return thread_get() != NULL;
}

static inline void
region_begin(struct pmc_thread *t, pmc_region_t region)
{
	if (unlikely(t->depth >= PMC_MAX_DEPTH || t->overflow)) {
		t->dropped++;
		t->overflow++;
		return;
	}
	struct frame *f = &t->stack[t->depth];
	if (unlikely(read_counters(t, f->v) < 0)) {
		t->overflow++;
		return;
	}
	f->id = region;
	f->t0 = util_now_ns(CLOCK_MONOTONIC);
	t->depth++;
}

/* pmc_begin(), inlined into the macros' begin too (no call through the PLT). */
static inline void
begin_id(pmc_region_t region)
{
	if (unlikely(!region))
		return;
	struct pmc_thread *t = thread_get();
	if (t)
		region_begin(t, region);
}

PMC_EXPORT void
pmc_begin(pmc_region_t region)
{
	begin_id(region);
}

static inline void
region_end(struct pmc_thread *t, pmc_region_t region)
{
	uint64_t t1 = util_now_ns(CLOCK_MONOTONIC);
	uint64_t *now = t->now;
	if (unlikely(read_counters(t, now) < 0))
		return;
	unsigned d = t->depth;
	while (d > 0 && t->stack[d - 1].id != region)
		d--;
	if (unlikely(!d))
		return;
	t->depth = d - 1;
	struct frame *f = &t->stack[d - 1];
	size_t n = t->n, i = t->n_samples;
	uint64_t *out = t->values + i * n;
	uint32_t scaled = 0;
	size_t n_ratio = t->n_ratio;
	for (size_t j = 0; j < n; j++) {
		uint64_t dv = now[j] - f->v[j];
		uint64_t de = now[n + j] - f->v[n + j];
		uint64_t dr = now[2 * n + j] - f->v[2 * n + j];
		if (unlikely(dr != de)) {
			/* Multiplexed during the region: extrapolate, and say so. */
			scaled |= UINT32_C(1) << j;
			t->ratio[n_ratio++] = de ? (float)dr / (float)de : 0.0f;
			dv = pmc_scale(dv, de, dr);
		}
		out[j] = dv;
	}
	t->region[i] = region;
	t->wall[i] = t1 - f->t0;
	t->scaled[i] = scaled;
	if (unlikely(region == PMC_WARMUP_REGION))
		return;
	t->n_ratio = n_ratio;
	if (unlikely(++t->n_samples == t->flush_at))
		flush_thread(t, false);
}

/* pmc_end(), inlined into the macros' end too. */
static inline void
end_id(pmc_region_t region)
{
	struct pmc_thread *t = T;
	if (unlikely(!region || !t || t->state != ST_ON))
		return;
	/* A region open across fork(), ending in the child: its counters were the
	 * parent's. */
	if (unlikely(t->gen != atomic_load_explicit(&G.gen, memory_order_relaxed)))
		return;
	/* The end of a begin that was not pushed: leave the open frames alone. */
	if (unlikely(t->overflow)) {
		t->overflow--;
		return;
	}
	if (unlikely(!t->depth))
		return;
	region_end(t, region);
}

PMC_EXPORT void
pmc_end(pmc_region_t region)
{
	end_id(region);
}

/* One unrecorded region through the same code, so that the first real region does not
 * count the page faults of first touching this library's code and buffers. */
static void
thread_warm_up(struct pmc_thread *t)
{
	memset(t->frame_mem, 0, PMC_MAX_DEPTH * 3 * t->n * sizeof(uint64_t));
	memset(t->values, 0, t->cap * t->n * sizeof(uint64_t));
	memset(t->region, 0, t->cap * sizeof(*t->region));
	memset(t->wall, 0, t->cap * sizeof(*t->wall));
	memset(t->scaled, 0, t->cap * sizeof(*t->scaled));
	memset(t->ratio, 0, t->cap * t->n * sizeof(float));
	memset(t->now, 0, sizeof(t->now));
	region_begin(t, PMC_WARMUP_REGION);
	region_end(t, PMC_WARMUP_REGION);
}

static void *
reconnect_main(void *arg)
{
	(void)arg;
	unsigned delay_ms = 100;
	for (;;) {
		struct timespec ts = {delay_ms / 1000, (long)(delay_ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
		if (delay_ms < 1000)
			delay_ms *= 2;
		pthread_mutex_lock(&G.lock);
		if (atomic_load(&G.state) != ST_LOST) {
			G.reconnecting = 0;
			pthread_mutex_unlock(&G.lock);
			return NULL;
		}
		const char *path = G.path;
		pthread_mutex_unlock(&G.lock);

		int hello_failed;
		char why[256];
		int fd = daemon_connect(path, &hello_failed, why, sizeof(why));
		if (fd < 0)
			continue;
		pthread_mutex_lock(&G.lock);
		if (atomic_load(&G.state) == ST_LOST) {
			G.fd = fd;
			G.conn++;
			memset(G.announced, 0, sizeof(G.announced));
			atomic_store(&G.state, ST_ON);
		} else {
			close(fd);
		}
		G.reconnecting = 0;
		pthread_mutex_unlock(&G.lock);
		return NULL;
	}
}

/* Called with G.lock held after a send failed with @r. A full queue (-EAGAIN) only
 * costs these samples; a daemon that went away is reconnected in the background, so
 * that no region ever waits for it. */
static void
connection_failed_locked(int r)
{
	if (r == -EAGAIN || r == -EMSGSIZE || r == -ENOMEM || atomic_load(&G.state) != ST_ON)
		return;
	close(G.fd);
	G.fd = -1;
	atomic_store(&G.state, ST_LOST);
	if (G.reconnecting)
		return;
	pthread_attr_t attr;
	pthread_t th;
	sigset_t all, old;
	/* The reconnecting thread must never take one of the application's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (pthread_attr_init(&attr) == 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &attr, reconnect_main, NULL) == 0)
			G.reconnecting = 1;
		pthread_attr_destroy(&attr);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Called with G.lock held: tell a daemon that restarted about this thread, which
 * still holds its counters. No reply: the daemon closes the connection if it refuses. */
static int
reattach_locked(struct pmc_thread *t)
{
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = t->tid;
	rt.n_events = t->n;
	rt.events = t->ev_names;
	rt.reattach = 1;
	rt.n_groups = t->n;
	rt.groups = t->ev_groups;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	int r = wire_send(G.fd, &req.base, NULL, 0, MSG_DONTWAIT);
	if (r == 0)
		t->conn = G.conn;
	return r;
}

/* Called with G.lock held: sends samples [@start, @end) of @t as one batch. */
static int
send_slice_locked(struct pmc_thread *t, size_t start, size_t end, size_t rstart, size_t nr,
                  uint64_t dropped)
{
	size_t n = end - start;
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.tid = t->tid;
	b.n_region = n;
	b.region = t->region + start;
	b.n_wall_ns = n;
	b.wall_ns = t->wall + start;
	b.n_values = n * t->n;
	b.values = t->values + start * t->n;
	if (nr) {
		b.n_scaled = n;
		b.scaled = t->scaled + start;
		b.n_scale_ratio = nr;
		b.scale_ratio = t->ratio + rstart;
	}
	b.dropped = dropped + G.orphans;
	b.sent_before = G.sent_total;
	/* Announce each region once per connection; the lock orders this batch before any
	 * later one that relies on the names. */
	uint32_t def_id[PMC_BATCH];
	char *def_name[PMC_BATCH];
	size_t nd = 0;
	for (size_t i = start; i < end; i++) {
		uint32_t id = t->region[i];
		if (!G.announced[id]) {
			G.announced[id] = 1;
			def_id[nd] = id;
			def_name[nd++] = G.names[id];
		}
	}
	b.n_def_id = b.n_def_name = nd;
	b.def_id = def_id;
	b.def_name = def_name;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = &b;
	int r = wire_send(G.fd, &req.base, NULL, 0, MSG_DONTWAIT);
	if (r < 0) {
		for (size_t i = 0; i < nd; i++)
			G.announced[def_id[i]] = 0;
		return r;
	}
	G.sent_total += n;
	G.orphans = 0;
	return 0;
}

/* @may_wait: false from pmc_end(), which must never wait: when another thread holds the
 * lock (registering, for up to PMC_CALL_TIMEOUT_MS), the samples stay for a later try. */
static int
flush_thread(struct pmc_thread *t, bool may_wait)
{
	if (!t->n_samples && !t->dropped)
		return 0;
	size_t start = 0, rstart = 0, n = t->n_samples;
	int r = 0, busy = 0;

	if (may_wait)
		pthread_mutex_lock(&G.lock);
	else if (pthread_mutex_trylock(&G.lock) != 0)
		busy = 1;
	if (busy)
		r = -EBUSY;
	else if (atomic_load(&G.state) != ST_ON || t->gen != atomic_load(&G.gen))
		r = -ENOTCONN;
	else if (t->conn != G.conn && (r = reattach_locked(t)) < 0)
		connection_failed_locked(r);
	/* In slices of one batch: after an outage the buffer holds up to PMC_GAP. */
	do {
		if (r < 0)
			break;
		size_t end = n - start > PMC_BATCH ? start + PMC_BATCH : n, nr = 0;
		for (size_t i = start; i < end; i++)
			nr += (size_t)__builtin_popcount(t->scaled[i]);
		r = send_slice_locked(t, start, end, rstart, nr, start ? 0 : t->dropped);
		if (r < 0) {
			connection_failed_locked(r);
			break;
		}
		start = end;
		rstart += nr;
	} while (start < n);
	int lost = busy || atomic_load(&G.state) == ST_LOST;
	if (!busy)
		pthread_mutex_unlock(&G.lock);

	if (start > 0)
		t->dropped = 0;
	if (r < 0 && lost && t->cap < PMC_GAP)
		(void)buffers_resize(t, PMC_GAP);
	if (r < 0 && lost && n < t->cap) {
		/* Keep what is unsent for the daemon that comes back, within PMC_GAP; try
		 * again every 64 samples (cheap: the lock and a state check). */
		size_t left = n - start, rleft = t->n_ratio - rstart, k = t->n;
		memmove(t->region, t->region + start, left * sizeof(*t->region));
		memmove(t->wall, t->wall + start, left * sizeof(*t->wall));
		memmove(t->scaled, t->scaled + start, left * sizeof(*t->scaled));
		memmove(t->values, t->values + start * k, left * k * sizeof(*t->values));
		memmove(t->ratio, t->ratio + rstart, rleft * sizeof(*t->ratio));
		t->n_samples = left;
		t->n_ratio = rleft;
		t->flush_at = left + 64 < t->cap ? left + 64 : t->cap;
		return r;
	}
	if (r < 0)
		t->dropped += n - start;
	t->n_samples = t->n_ratio = 0;
	t->flush_at = PMC_BATCH;
	return r;
}

PMC_EXPORT int
pmc_flush(void)
{
	struct pmc_thread *t = T;
	if (!t || t->state != ST_ON) {
		int st = atomic_load(&G.state);
		return st == ST_ON || st == ST_NONE || G.disabled ? 0 : -ENOTCONN;
	}
	if (t->gen != atomic_load(&G.gen))
		return -ENOTCONN;
	return flush_thread(t, true);
}

static void
thread_destroy(void *arg)
{
	struct pmc_thread *t = arg;
	if (!t)
		return;
	if (t->state == ST_ON && t->gen == atomic_load(&G.gen)) {
		flush_thread(t, true);
		/* What the daemon could not take now is reported by the next batch sent. */
		pthread_mutex_lock(&G.lock);
		G.orphans += t->n_samples + t->dropped;
		pthread_mutex_unlock(&G.lock);
		Pmc__ThreadExit te = PMC__THREAD_EXIT__INIT;
		te.tid = t->tid;
		Pmc__Request req = PMC__REQUEST__INIT;
		req.body_case = PMC__REQUEST__BODY_THREAD_EXIT;
		req.thread_exit = &te;
		pthread_mutex_lock(&G.lock);
		if (atomic_load(&G.state) == ST_ON && t->conn == G.conn)
			(void)wire_send(G.fd, &req.base, NULL, 0, MSG_DONTWAIT);
		pthread_mutex_unlock(&G.lock);
	}
	if (T == t)
		T = NULL;
	/* On G.threads unless a fork() emptied it since (the child's list starts empty). */
	pthread_mutex_lock(&G.lock);
	if (t->prev || G.threads == t) {
		if (t->prev)
			t->prev->next = t->next;
		else
			G.threads = t->next;
		if (t->next)
			t->next->prev = t->prev;
	}
	pthread_mutex_unlock(&G.lock);
	if (t->state == ST_ON)
		thread_release(t);
	else
		free(t);
}

static void
pmc_atexit(void)
{
	struct pmc_thread *t = T;
	if (t && t->state == ST_ON && t->gen == atomic_load(&G.gen))
		flush_thread(t, true);
}

/* The macros' begin. The call site's slot holds the id its name had last time: a name
 * that changes at run time (a buffer, a pointer to one of several names) is compared on
 * every call, never taken for the first one. Whatever id another thread left there is
 * checked, so the slot needs no lock. */
PMC_EXPORT pmc_region_t
pmc__scope_begin(pmc_region_t *slot, const char *name)
{
	pmc_region_t id = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	/* strcmp: a name over PMC_REGION_NAME_MAX bytes never equals its interned prefix,
	 * so it takes pmc_region() every time, which truncates it. */
	if (unlikely(!id || !name || strcmp(G.names[id], name))) {
		id = pmc_region(name);
		if (id)
			__atomic_store_n(slot, id, __ATOMIC_RELEASE);
	}
	begin_id(id);
	return id;
}

PMC_EXPORT void
pmc__scope_end(struct pmc__scope *s)
{
	end_id(s->id);
}
