/* libpmcclient: per-thread counters handed over by pmcdaemon, read in the thread
 * itself; region samples buffered per thread and sent in batches.
 *
 * Hot path (pmc_begin/pmc_end): thread-local state only. With rdpmc no lock, no
 * allocation, no syscall; otherwise one read() of the group per call. The global
 * lock is taken only to intern names, register a thread and send a batch. */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#define PMC_CALL_TIMEOUT_MS 2000
/* Never handed out by pmc_region(): ids stay below PMC_MAX_REGIONS. */
#define PMC_WARMUP_REGION UINT32_MAX

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

enum { ST_NONE, ST_ON, ST_OFF };

struct frame {
	pmc_region_t id;
	uint64_t t0;
	uint64_t *v; /* n values, then n enabled, then n running */
};

struct pmc_thread {
	unsigned gen;
	int state;
	pid_t tid;
	size_t n;
	int fds[PMC_MAX_EVENTS];
	void *pages[PMC_MAX_EVENTS];
	int group_leader[PMC_MAX_EVENTS]; /* index of each event's leader */
	int rdpmc;
	unsigned depth;
	struct frame stack[PMC_MAX_DEPTH];
	uint64_t *frame_mem;
	uint64_t now[3 * PMC_MAX_EVENTS];
	/* Sample buffer, sent as one SampleBatch. */
	size_t n_samples, n_ratio, n_scaled_samples;
	uint64_t dropped;
	uint32_t region[PMC_BATCH];
	uint64_t wall[PMC_BATCH];
	uint32_t scaled[PMC_BATCH];
	float *ratio;     /* PMC_BATCH * n: running/enabled of each extrapolated value */
	uint64_t *values; /* PMC_BATCH * n */
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
	char *names[PMC_MAX_REGIONS];
	uint8_t announced[PMC_MAX_REGIONS];
} G = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

static __thread struct pmc_thread *T __attribute__((tls_model("initial-exec")));

static void thread_destroy(void *arg);
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

static void
on_fork_child(void)
{
	/* The child shares the parent's socket and counts nothing of its own: start over
	 * lazily, with a new connection and fresh registrations. */
	if (G.fd >= 0)
		close(G.fd);
	G.fd = -1;
	pthread_mutex_init(&G.lock, NULL);
	memset(G.announced, 0, sizeof(G.announced));
	if (atomic_load(&G.state) == ST_ON)
		atomic_store(&G.state, ST_NONE);
	atomic_fetch_add(&G.gen, 1);
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
			atomic_store(&G.state, ST_OFF);
			return;
		}
		parse_events();
		G.key_ok = pthread_key_create(&G.key, thread_destroy) == 0;
		pthread_atfork(NULL, NULL, on_fork_child);
		atexit(pmc_atexit);
	}
	const char *path = getenv("PMC_SOCKET");
	if (!path || !*path)
		path = PMC_DEFAULT_SOCKET;

	int fd = wire_connect(path);
	if (fd < 0) {
		warn_once("profiling disabled: cannot connect to pmcdaemon at %s: %s (is pmcdaemon "
		          "running? set PMC_SOCKET, or PMC_DISABLE=1 to silence this)",
		          path, strerror(-fd));
		atomic_store(&G.state, ST_OFF);
		return;
	}
	(void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);

	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.client = "libpmcclient";
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	Pmc__Response *resp = NULL;
	int r = wire_call(fd, &req, PMC_CALL_TIMEOUT_MS, NULL, 0, NULL, &resp);
	if (r == 0 && resp->error) {
		warn_once("profiling disabled: pmcdaemon at %s refused: %s", path, resp->message);
		r = -1;
	} else if (r < 0) {
		warn_once("profiling disabled: no answer from pmcdaemon at %s: %s", path,
		          strerror(-r));
	}
	if (resp)
		pmc__response__free_unpacked(resp, NULL);
	if (r < 0) {
		close(fd);
		atomic_store(&G.state, ST_OFF);
		return;
	}
	G.fd = fd;
	G.pid = getpid();
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
pmc_enabled(void)
{
	return atomic_load(&G.state) == ST_ON;
}

PMC_EXPORT int
pmc_thread_uses_rdpmc(void)
{
	struct pmc_thread *t = T;
	if (!t || t->state != ST_ON || t->gen != atomic_load(&G.gen))
		return -1;
	return t->rdpmc;
}

PMC_EXPORT pmc_region_t
pmc_region(const char *name)
{
	if (!name || !*name || ensure_connected() == ST_OFF)
		return 0;
	char buf[PMC_REGION_NAME_MAX + 1];
	snprintf(buf, sizeof(buf), "%s", name);
	pmc_region_t id = 0;
	pthread_mutex_lock(&G.lock);
	for (uint32_t i = 1; i <= G.n_regions; i++)
		if (!strcmp(G.names[i], buf)) {
			id = i;
			break;
		}
	if (!id && G.n_regions + 1 < PMC_MAX_REGIONS) {
		char *copy = strdup(buf);
		if (copy) {
			id = ++G.n_regions;
			G.names[id] = copy;
		}
	}
	pthread_mutex_unlock(&G.lock);
	return id;
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
	free(t->frame_mem);
	free(t->values);
	free(t->ratio);
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
		free(t);
		return NULL;
	}
	if (resp->error || resp->body_case != PMC__RESPONSE__BODY_REGISTER_REPLY ||
	    resp->register_reply->n_events != n_fds || n_fds == 0) {
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
	for (size_t i = 0; i < n_fds; i++) {
		unsigned g = resp->register_reply->events[i]->group;
		if (g != last_group)
			leader = (int)i;
		last_group = g;
		t->group_leader[i] = leader;
	}
	pmc__response__free_unpacked(resp, NULL);

	long pagesz = sysconf(_SC_PAGESIZE);
	t->rdpmc = PMC_HAVE_RDPMC;
	for (size_t i = 0; i < t->n; i++) {
		void *p = mmap(NULL, (size_t)pagesz, PROT_READ, MAP_SHARED, t->fds[i], 0);
		t->pages[i] = p == MAP_FAILED ? NULL : p;
		if (!t->pages[i] ||
		    !((const struct perf_event_mmap_page *)t->pages[i])->cap_user_rdpmc)
			t->rdpmc = 0;
	}
	if (!t->rdpmc)
		for (size_t i = 0; i < t->n; i++)
			if (t->pages[i]) {
				munmap(t->pages[i], (size_t)pagesz);
				t->pages[i] = NULL;
			}
	t->frame_mem = calloc(PMC_MAX_DEPTH * 3 * t->n, sizeof(uint64_t));
	t->values = calloc(PMC_BATCH * t->n, sizeof(uint64_t));
	t->ratio = calloc(PMC_BATCH * t->n, sizeof(float));
	if (!t->frame_mem || !t->values || !t->ratio) {
		thread_release(t);
		return NULL;
	}
	for (unsigned d = 0; d < PMC_MAX_DEPTH; d++)
		t->stack[d].v = t->frame_mem + d * 3 * t->n;
	t->state = ST_ON;
	return t;
}

/* Reads every counter of @t into v[0..n) with enabled/running in v[n..2n), v[2n..3n). */
static inline int
read_counters(struct pmc_thread *t, uint64_t *v)
{
	size_t n = t->n;
	if (t->rdpmc) {
		size_t i;
		for (i = 0; i < n; i++) {
			struct pmc_reading rd;
			if (pmc_reader_read(t->pages[i], &pmc_reader_hw_ops, &rd) < 0)
				break;
			v[i] = rd.value;
			v[n + i] = rd.enabled;
			v[2 * n + i] = rd.running;
		}
		if (i == n)
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

static int flush_thread(struct pmc_thread *t);

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

static inline void
region_begin(struct pmc_thread *t, pmc_region_t region)
{
	if (unlikely(t->depth >= PMC_MAX_DEPTH)) {
		t->dropped++;
		return;
	}
	struct frame *f = &t->stack[t->depth];
	if (unlikely(read_counters(t, f->v) < 0))
		return;
	f->id = region;
	f->t0 = util_now_ns(CLOCK_MONOTONIC);
	t->depth++;
}

PMC_EXPORT void
pmc_begin(pmc_region_t region)
{
	if (unlikely(!region))
		return;
	struct pmc_thread *t = thread_get();
	if (t)
		region_begin(t, region);
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
	if (unlikely(scaled)) {
		t->n_ratio = n_ratio;
		t->n_scaled_samples++;
	}
	if (unlikely(++t->n_samples == PMC_BATCH))
		flush_thread(t);
}

PMC_EXPORT void
pmc_end(pmc_region_t region)
{
	struct pmc_thread *t = T;
	if (unlikely(!region || !t || t->state != ST_ON || !t->depth))
		return;
	region_end(t, region);
}

/* One unrecorded region through the same code, so that the first real region does not
 * count the page faults of first touching this library's code and buffers. */
static void
thread_warm_up(struct pmc_thread *t)
{
	memset(t->frame_mem, 0, PMC_MAX_DEPTH * 3 * t->n * sizeof(uint64_t));
	memset(t->values, 0, PMC_BATCH * t->n * sizeof(uint64_t));
	memset(t->region, 0, sizeof(t->region));
	memset(t->wall, 0, sizeof(t->wall));
	memset(t->scaled, 0, sizeof(t->scaled));
	memset(t->ratio, 0, PMC_BATCH * t->n * sizeof(float));
	memset(t->now, 0, sizeof(t->now));
	region_begin(t, PMC_WARMUP_REGION);
	region_end(t, PMC_WARMUP_REGION);
}

static int
flush_thread(struct pmc_thread *t)
{
	if (!t->n_samples && !t->dropped)
		return 0;
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.tid = t->tid;
	b.n_region = t->n_samples;
	b.region = t->region;
	b.n_wall_ns = t->n_samples;
	b.wall_ns = t->wall;
	b.n_values = t->n_samples * t->n;
	b.values = t->values;
	if (t->n_scaled_samples) {
		b.n_scaled = t->n_samples;
		b.scaled = t->scaled;
		b.n_scale_ratio = t->n_ratio;
		b.scale_ratio = t->ratio;
	}
	b.dropped = t->dropped;
	uint32_t def_id[PMC_BATCH];
	char *def_name[PMC_BATCH];
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = &b;

	int r;
	pthread_mutex_lock(&G.lock);
	if (atomic_load(&G.state) != ST_ON || t->gen != atomic_load(&G.gen)) {
		r = -ENOTCONN;
	} else {
		/* Announce each region once per connection; the lock orders this batch
		 * before any later one that relies on the names. */
		size_t nd = 0;
		for (size_t i = 0; i < t->n_samples; i++) {
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
		r = wire_send(G.fd, &req.base, NULL, 0, MSG_DONTWAIT);
		if (r < 0)
			for (size_t i = 0; i < nd; i++)
				G.announced[def_id[i]] = 0;
	}
	pthread_mutex_unlock(&G.lock);
	if (r < 0)
		t->dropped += t->n_samples;
	else
		t->dropped = 0;
	t->n_samples = t->n_ratio = t->n_scaled_samples = 0;
	return r;
}

PMC_EXPORT int
pmc_flush(void)
{
	struct pmc_thread *t = T;
	if (!t || t->state != ST_ON)
		return atomic_load(&G.state) == ST_ON || atomic_load(&G.state) == ST_NONE
		               ? 0
		               : -ENOTCONN;
	if (t->gen != atomic_load(&G.gen))
		return -ENOTCONN;
	return flush_thread(t);
}

static void
thread_destroy(void *arg)
{
	struct pmc_thread *t = arg;
	if (!t)
		return;
	if (t->state == ST_ON && t->gen == atomic_load(&G.gen)) {
		flush_thread(t);
		Pmc__ThreadExit te = PMC__THREAD_EXIT__INIT;
		te.tid = t->tid;
		Pmc__Request req = PMC__REQUEST__INIT;
		req.body_case = PMC__REQUEST__BODY_THREAD_EXIT;
		req.thread_exit = &te;
		pthread_mutex_lock(&G.lock);
		if (atomic_load(&G.state) == ST_ON)
			(void)wire_send(G.fd, &req.base, NULL, 0, MSG_DONTWAIT);
		pthread_mutex_unlock(&G.lock);
	}
	if (T == t)
		T = NULL;
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
		flush_thread(t);
}

PMC_EXPORT pmc_region_t
pmc__scope_begin(pmc_region_t *slot, const char *name)
{
	pmc_region_t id = __atomic_load_n(slot, __ATOMIC_RELAXED);
	if (unlikely(!id)) {
		id = pmc_region(name);
		__atomic_store_n(slot, id, __ATOMIC_RELAXED);
	}
	pmc_begin(id);
	return id;
}

PMC_EXPORT void
pmc__scope_end(struct pmc__scope *s)
{
	pmc_end(s->id);
}
