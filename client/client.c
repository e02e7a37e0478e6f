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
 * and send. */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
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
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pmc/pmc.h>

#include "encoder.h"
#include "fdcheck.h"
#include "pmc-shared.h"
#include "reader.h"
#include "util.h"
#include "wire.h"

#define PMC_DEFAULT_SOCKET PMC_SOCKET_DEFAULT
/* Region ids 1..65535, as many as the daemon takes; its --max-regions then applies. */
#define PMC_MAX_REGIONS (PMC_LIMIT_REGION_ID + 1)
#define PMC_MAX_EVENTS 16
/* Regions open at once on a thread: frames for PMC_STACK_START, grown (doubled) the first
 * time a thread goes deeper, up to PMC_MAX_DEPTH; deeper ones are dropped ("depth"). */
#define PMC_STACK_START 32
#define PMC_MAX_DEPTH PMC_LIMIT_DEPTH
/* Call paths: the process interns each (parent path, region) pair it meets as a path id
 * (PMC_MAX_PATHS - 1 of them at most, in a small table first, as names); a thread caches
 * the pairs it met last in PMC_PCACHE slots. A path is at most PMC_PATH_DEPTH regions long:
 * a region begun deeper is sent as its region, flagged PMC_PATH_FLAG_DEEP (encoder.h). */
#define PMC_MAX_PATHS 65536
#define PMC_PATHS_SMALL 4096
#define PMC_PATH_SLOTS (2 * PMC_PATHS_SMALL)
#define PMC_PATH_SLOTS_BIG (2 * PMC_MAX_PATHS)
#define PMC_PATH_DEPTH PMC_LIMIT_PATH_DEPTH
#define PMC_PCACHE 64
/* Path definitions in one Define message at most. */
#define PMC_DEFINE_MAX 1024
/* Samples in one batch at most. */
#define PMC_BATCH 512
/* Samples in a thread's ring at which its region's end wakes the background thread to send
 * them (batch_due()), and again every PMC_KICK / 4 more while they wait; at 3/4 of the ring
 * the thread sends them itself. */
#define PMC_KICK (PMC_BATCH / 2)
/* A thread's ring (a power of two): room for a batch while the last one is on its way. */
#define PMC_RING 1024
/* What a ring grows to while the daemon is away or behind (restarting): sent when it is back. */
#define PMC_GAP 4096
/* Each sample reaches the daemon within this long of its region's end, by default. */
#define PMC_FLUSH_MS 1000
#define PMC_CALL_TIMEOUT_MS 2000
/* How often the background thread looks for a registration's late reply. */
#define PMC_LATE_POLL_MS 100
/* A thread whose registration failed for a while asks again after this, doubled at each
 * failure up to the second. */
#define PMC_RETRY_MS 500
#define PMC_RETRY_MAX_MS 16000
/* Asked for as the socket's send buffer (the kernel caps it at net.core.wmem_max, then
 * doubles it): batches the daemon has not read yet wait there. An AF_UNIX datagram is
 * charged to its sender until it is read, so the sender's buffer, not the daemon's receive
 * buffer, decides how many wait before a send meets a full queue (-EAGAIN). */
#define PMC_SNDBUF (1 << 20)
/* Fd numbers a thread's registration leaves above its fds under RLIMIT_NOFILE, for the
 * application. */
#define PMC_FD_RESERVE 16
/* How many events the daemon's default set has (hardware or software), until a reply says. */
#define PMC_DEFAULT_N_EVENTS 4
/* Open addressing, never more than half full: a table for the first 4,095 names, and one for
 * all of them, made when the first is full (so that a process of few names touches little). */
#define PMC_NAMES_SMALL 4096
#define PMC_NAME_SLOTS (2 * PMC_NAMES_SMALL)
#define PMC_NAME_SLOTS_BIG (2 * PMC_MAX_REGIONS)
/* Never handed out by pmc_region(): ids stay below PMC_MAX_REGIONS. */
#define PMC_WARMUP_REGION UINT32_MAX
/* Region windows, where the leader's page has no clock (read() path): the clock task-clock
 * keeps too, never slewed by NTP. */
#define PMC_WALL_CLOCK CLOCK_MONOTONIC_RAW

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* ST_LOST: no daemon now (it went away, or was not up at start); the background thread
 * connects once it is there. */
/* ST_FORKED: a registered thread's structure in a fork()ed child (the fork's thread), whose
 * counters were the parent's: no region on it is counted, its next begin starts over. So that
 * the hot path needs no generation check, only a thread's state. */
/* ST_RETRY: a thread whose registration failed for a while (no answer in time, the daemon's
 * queue full, a restart, EMFILE or EAGAIN from the daemon): it asks again at a region begun
 * after its back-off (thread_slow()); its regions meanwhile count as R_UNREGISTERED. */
enum { ST_NONE, ST_ON, ST_OFF, ST_LOST, ST_FORKED, ST_RETRY };

/* Why samples were not counted, as SampleBatch's dropped_* fields say it. The first ones are
 * counted per thread by its own thread; all are counted process-wide for those a thread
 * could not send before it exited, and for names pmc_region() refused. */
enum {
	R_DEPTH,   /* nested deeper than PMC_MAX_DEPTH */
	R_NESTING, /* left open when an enclosing region ended, or the thread exited */
	R_FULL,    /* the ring was full */
	R_READ,    /* reading the counters failed */
	R_THREAD_N,
	R_EXITED = R_THREAD_N, /* held by a thread that exited unsent */
	R_NAMES,               /* pmc_region(): the name table was full */
	R_LONG_NAMES,          /* pmc_region(): a name over PMC_REGION_NAME_MAX */
	R_FD_LIMIT,            /* regions of threads that had no room for their counter fds */
	R_UNREGISTERED,        /* regions of threads waiting to ask again (ST_RETRY) */
	R_NO_DAEMON,           /* regions begun while no daemon answered (ST_LOST) */
	R_N
};

/* The daemon's name of each reason (pmcctl shows them), for the warnings: pmc_loss_name(). */
_Static_assert((int)R_DEPTH == (int)PMC_LOSS_DEPTH && (int)R_NESTING == (int)PMC_LOSS_NESTING &&
                       (int)R_FULL == (int)PMC_LOSS_FULL && (int)R_READ == (int)PMC_LOSS_READ &&
                       (int)R_EXITED == (int)PMC_LOSS_EXITED &&
                       (int)R_NAMES == (int)PMC_LOSS_NAMES &&
                       (int)R_LONG_NAMES == (int)PMC_LOSS_LONG_NAMES &&
                       (int)R_FD_LIMIT == (int)PMC_LOSS_FD_LIMIT &&
                       (int)R_UNREGISTERED == (int)PMC_LOSS_UNREGISTERED &&
                       (int)R_NO_DAEMON == (int)PMC_LOSS_NO_DAEMON,
               "the library's reasons are the first of enum pmc_loss");

/* Sample k of a thread (k counts from 0 for the thread's life) is in slot k & (cap - 1): one
 * struct pmc_sample (encoder.h) of stride bytes, as the batch encoder reads them. */
struct ring {
	size_t cap; /* a power of two */
	size_t stride;
	uint8_t *slots;
};

static inline struct pmc_sample *
ring_slot(const struct ring *r, uint64_t k)
{
	return (struct pmc_sample *)(void *)(r->slots + (size_t)(k & (r->cap - 1)) * r->stride);
}

struct frame {
	pmc_region_t id;
	uint32_t path; /* the call path it began in: what its sample is sent as */
	uint64_t t0;
	uint64_t *v;      /* n values, then n enabled, then n running */
	uint64_t unused_; /* 32 bytes: a frame's address is one shift */
};

struct pmc_thread {
	/* G.threads: every registered thread of this generation, for the background thread
	 * to send their samples and for fork() to close their fds in the child. Under
	 * G.lock. */
	struct pmc_thread *next, *prev;
	unsigned gen;
	int state;
	/* ST_OFF for want of fds (RLIMIT_NOFILE): each of its regions counts as R_FD_LIMIT. */
	int fd_starved;
	unsigned conn; /* G.conn when this thread last told the daemon about itself */
	char *ev_names[PMC_MAX_EVENTS];
	uint32_t ev_groups[PMC_MAX_EVENTS];
	/* What an empty region measured here (the last warm-up), told to the daemon once, with
	 * the first batch: the floor under every figure (ThreadFloor). Under G.lock. */
	uint64_t floor_v[PMC_MAX_EVENTS];
	uint64_t floor_wall;
	int floor_pending;
	pid_t tid;
	size_t n;
	int fds[PMC_MAX_EVENTS];
	struct perf_event_mmap_page *pages[PMC_MAX_EVENTS];
	int group_leader[PMC_MAX_EVENTS]; /* index of each event's leader */
	int one_group; /* every event in one group: the leader's times are everyone's */
	int rdpmc;
	int fast; /* rdpmc, one_group and the page's clock: read_counters() takes read_one_group()
	           */
	/* The last read of the general way took rdpmc; where it did not, head then (a later
	 * sample's end was read by the usual way, with rdpmc): see pmc_thread_uses_rdpmc(). */
	int last_rdpmc;
	uint64_t fallback_head;
	unsigned depth;
	/* pmc_begin() and pmc_end() take their usual way (frame_fast(), thread_fast_cap()) while
	 * depth < fast_cap (a begin) or depth - 1 < fast_cap (an end): begin_cap while the thread
	 * is ST_ON and fast, else 0; one compare for the state, the kind of thread, the frames'
	 * room and an overflow. */
	unsigned fast_cap;
	unsigned overflow;  /* begins not pushed (too deep, or a failed read): their ends skip */
	unsigned stack_cap; /* frames in stack (PMC_STACK_START, doubled up to PMC_MAX_DEPTH) */
	/* The depth below which a begin is pushed without begin_slow(): stack_cap, 0 while
	 * overflow (one compare in pmc_begin for both). */
	unsigned begin_cap;
	/* Each frame's v points into frame_mem; stack[-1] is a frame of path 0 and id 0 that is
	 * never begun: the parent of the outermost region, read with no branch. */
	struct frame *stack;
	uint64_t *frame_mem;
	/* The (parent path, region) -> path pairs this thread met last: slot
	 * pcache_slot(parent, region), key pcache_key(parent, region) (one compare); key 0
	 * (region 0, no region) is an empty slot. */
	struct pcache {
		uint64_t key;
		uint32_t path;
	} pcache[PMC_PCACHE];
	/* The path each region began in last on this thread: slot region & (memo_cap - 1),
	 * with the key and path of a pcache slot. memo_cap (a power of two) is kept above
	 * every region id begun + 1, so that no two regions share a slot (the warm-up's,
	 * UINT32_MAX, takes the last, which no region reaches): the usual begin finds its
	 * path with one load and one compare whatever the other paths are. It is grown
	 * before the counters are read, by begin_ready(). */
	struct pcache *memo;
	uint32_t memo_cap;
	uint32_t memo_mask; /* memo_cap - 1 */
	uint64_t now[3 * PMC_MAX_EVENTS];
	/*
	 * The ring of samples. The thread writes slot head, then publishes it by storing
	 * head + 1 (release); a reader, under G.lock, loads head (acquire), then the ring
	 * (acquire), reads slots [tail, head) and frees them by storing tail (release), which
	 * the thread loads (acquire) before it writes a slot again. The thread alone may
	 * replace the ring by a larger one (ring_grow()), once, without the lock: the old one
	 * stays until the thread is released, for a reader that loaded it before.
	 */
	_Atomic(struct ring *) ring;
	struct ring *old;
	_Atomic uint64_t head;
	_Atomic uint64_t tail;
	/* 1 + the last sample with an extrapolated value (written before head goes past it):
	 * a batch of samples before it has none to look for. */
	_Atomic uint64_t scaled_end;
	uint64_t retry_at; /* the thread's own: head before which it does not try to send again */
	/* Samples lost, by reason, since the thread started: written by the thread only; a
	 * reader sends what is new since reported[], its own (under G.lock). */
	_Atomic uint64_t lost[R_THREAD_N];
	uint64_t reported[R_THREAD_N];
	/* Under G.lock: the sample after the last one this connection was told of (each batch
	 * says how many it leaves behind): the daemon counts them as lost if the process goes
	 * without sending them. */
	uint64_t announced;
	uint64_t drain_to; /* under G.lock: the head drain_locked() waits for */
	/* ST_RETRY: when it may ask again (CLOCK_MONOTONIC_COARSE ns), and the back-off that
	 * set it (doubled at each failure, up to PMC_RETRY_MAX_MS). Last: the hot path's
	 * fields keep their places. */
	uint64_t retry_ns;
	unsigned backoff_ms;
	unsigned answered; /* G.reg_answered when it failed */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake; /* the background thread waits on it (CLOCK_MONOTONIC) */
	_Atomic int state;
	_Atomic unsigned gen;
	int fd;
	pid_t pid;
	char *events_env;
	char **events;
	size_t n_events;
	pthread_key_t key;
	int key_ok;
	unsigned flush_ms; /* PMC_FLUSH_MS; 0: no periodic send */
	uint32_t n_regions;
	/* names[id] and hashes[id] are written once, under the lock, before the id is
	 * published (release) in name_slots or name_slots_big; read without the lock after
	 * an acquire. */
	char *names[PMC_MAX_REGIONS];
	uint32_t hashes[PMC_MAX_REGIONS];
	_Atomic uint32_t name_slots[PMC_NAME_SLOTS];
	_Atomic uint32_t *_Atomic name_slots_big; /* PMC_NAME_SLOTS_BIG, never freed */
	_Atomic int names_full;
	char *name_pool; /* where the next name is copied: the rest of a chunk, touched */
	size_t name_pool_left;
	uint8_t announced[PMC_MAX_REGIONS];
	/* Call paths: path_parent[id] and path_region[id] are written once, under the lock,
	 * before the id is published (release) in path_slots or path_slots_big, as names are. */
	pthread_mutex_t path_lock; /* taken to intern a path: never held over a round trip */
	_Atomic uint32_t n_paths;  /* stored (release) after the new path's entries */
	_Atomic uint32_t path_max; /* the daemon's bound on path ids (HelloReply.max_path_id) */
	uint32_t path_parent[PMC_MAX_PATHS];
	pmc_region_t path_region[PMC_MAX_PATHS];
	_Atomic uint32_t path_slots[PMC_PATH_SLOTS];
	_Atomic uint32_t *_Atomic path_slots_big; /* PMC_PATH_SLOTS_BIG, never freed */
	/* Under the lock: paths 1 to path_defined are defined on this connection (ids grow, a
	 * parent's below its children's: each is defined after its parent). */
	uint32_t path_defined;
	/* Set once a sample carries a region flagged instead of a path: from then on each
	 * batch is searched for the names of such regions (they are in no path). */
	_Atomic int flagged;
	int call_paths;      /* under the lock: this connection's daemon takes call paths */
	unsigned conn;       /* connections made so far */
	uint64_t sent_total; /* samples sent in batches, to any daemon */
	size_t reply_events; /* events in the last RegisterReply (0: none yet) */
	int blocked;         /* a send met a full queue: the background thread waits for room */
	/* Under the lock: the thread whose RegisterThread on this connection went unanswered
	 * in time (0: none); no other is sent until its reply is read (late_reply_locked()). */
	pid_t reg_late;
	/* Late replies read so far: a thread that met one late asks again once this moves,
	 * without waiting out its back-off. */
	_Atomic unsigned reg_answered;
	/* Samples lost process-wide, by reason (any thread adds); reported[] is what batches
	 * have told the daemon of them (under the lock). */
	_Atomic uint64_t lost[R_N];
	uint64_t reported[R_N];
	atomic_flag warned[R_N]; /* each reason is said once on stderr */
	const char *path;
	int service;                /* the background thread runs */
	int disabled;               /* PMC_DISABLE: off on purpose */
	struct pmc_thread *threads; /* registered, this generation */
	struct pmc_thread *dead;    /* of threads that did not survive a fork() */
} G = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .path_lock = PTHREAD_MUTEX_INITIALIZER,
       .path_max = PMC_MAX_PATHS - 1,
       .fd = -1,
       .flush_ms = PMC_FLUSH_MS};

static __thread struct pmc_thread *T __attribute__((tls_model("initial-exec")));

static void thread_destroy(void *arg);
static void connection_failed_locked(int r);
static int reattach_locked(struct pmc_thread *t);
static void pmc_atexit(void);
static void thread_warm_up(struct pmc_thread *t);
static struct frame *frames_new(unsigned cap);

/* Sets @t->fast_cap from what it depends on: call after each change of state, fast or
 * begin_cap. */
static inline void
thread_fast_cap(struct pmc_thread *t)
{
	t->fast_cap = t->fast && t->state == ST_ON ? t->begin_cap : 0;
}
static int service_start_locked(void);
static char *name_copy_locked(const char *name, size_t len);

static pid_t
gettid_(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* Every PMC_* variable: none in a process that changed its credentials at exec (AT_SECURE: a
 * setuid or setgid program, file capabilities), whose environment is its invoker's: such a
 * program speaks only to the system socket, with the daemon's default events. */
static const char *
env_get(const char *name)
{
	return secure_getenv(name);
}

static void warn_once(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
vwarn(const char *fmt, va_list ap)
{
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(stderr, "pmc: %s\n", line);
}

/* The one line about connecting or registering. */
static void
warn_once(const char *fmt, ...)
{
	static atomic_flag warned = ATOMIC_FLAG_INIT;
	if (atomic_flag_test_and_set(&warned))
		return;
	va_list ap;
	va_start(ap, fmt);
	vwarn(fmt, ap);
	va_end(ap);
}

static void warn_loss(unsigned why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The one line about samples lost for reason @why. */
static void
warn_loss(unsigned why, const char *fmt, ...)
{
	if (atomic_flag_test_and_set(&G.warned[why]))
		return;
	va_list ap;
	va_start(ap, fmt);
	vwarn(fmt, ap);
	va_end(ap);
}

/* The thread's own count of samples lost for @why: it is the only writer. */
static inline void
count_loss(struct pmc_thread *t, unsigned why, uint64_t n)
{
	atomic_store_explicit(&t->lost[why],
	                      atomic_load_explicit(&t->lost[why], memory_order_relaxed) + n,
	                      memory_order_relaxed);
}

/* Every name, also past PMC_MAX_EVENTS: the daemon refuses too many (E2BIG) and says so. */
static void
parse_events(void)
{
	const char *env = env_get("PMC_EVENTS");
	if (!env || !*env)
		return;
	G.events_env = strdup(env);
	size_t max = 1;
	for (const char *c = env; *c; c++)
		max += *c == ',';
	G.events = calloc(max, sizeof(*G.events));
	if (!G.events_env || !G.events) {
		free(G.events_env);
		free(G.events);
		G.events_env = NULL;
		G.events = NULL;
		return;
	}
	char *save = NULL;
	for (char *tok = strtok_r(G.events_env, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		if (*tok)
			G.events[G.n_events++] = tok;
	}
}

/* PMC_FLUSH_MS: milliseconds, 0 for no periodic send; anything else keeps the default. */
static void
parse_flush_ms(void)
{
	const char *env = env_get("PMC_FLUSH_MS");
	char *end;
	if (!env || !*env)
		return;
	errno = 0;
	unsigned long v = strtoul(env, &end, 10);
	if (*end || errno || v > 3600u * 1000u || *env == '-') {
		static atomic_flag warned = ATOMIC_FLAG_INIT;
		if (!atomic_flag_test_and_set(&warned))
			fprintf(stderr,
			        "pmc: PMC_FLUSH_MS=%s is not a number of milliseconds from 0 to "
			        "3600000: using %u\n",
			        env, PMC_FLUSH_MS);
		return;
	}
	G.flush_ms = (unsigned)v;
}

static void
wake_init(void)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&G.wake, &a);
	pthread_condattr_destroy(&a);
}

/* Holding the lock across fork() means the child never sees a half-done update. */
static void
on_fork_prepare(void)
{
	pthread_mutex_lock(&G.lock);
	pthread_mutex_lock(&G.path_lock);
}

static void
on_fork_parent(void)
{
	pthread_mutex_unlock(&G.path_lock);
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
	 * they stay shared with the parent, copy-on-write. Their samples are the parent's
	 * to send. */
	for (struct pmc_thread *t = G.threads, *next; t; t = next) {
		next = t->next;
		for (size_t i = 0; i < t->n; i++) {
			if (t->fds[i] >= 0)
				close(t->fds[i]);
			t->fds[i] = -1;
			t->pages[i] = NULL;
		}
		t->rdpmc = 0;
		t->fast = 0;
		t->fast_cap = 0;
		t->prev = NULL;
		t->next = NULL;
		if (t->state == ST_ON)
			t->state = ST_FORKED;
		if (t != T) {
			t->next = G.dead;
			G.dead = t;
		}
	}
	G.threads = NULL;
	/* A refused thread's structure (not on G.threads) goes at its next region too; it was
	 * short of fds in the parent, the child's fds are its own. */
	if (T)
		T->fd_starved = 0;
	pthread_mutex_init(&G.lock, NULL);
	pthread_mutex_init(&G.path_lock, NULL);
	wake_init();
	memset(G.announced, 0, sizeof(G.announced));
	G.path_defined = 0;
	/* The background thread did not survive the fork; the parent's losses are its own. */
	__atomic_store_n(&G.service, 0, __ATOMIC_RELAXED);
	G.blocked = 0;
	G.reg_late = 0;
	G.sent_total = 0;
	for (unsigned k = 0; k < R_N; k++) {
		atomic_store(&G.lost[k], 0);
		G.reported[k] = 0;
	}
	if (atomic_load(&G.state) == ST_ON || atomic_load(&G.state) == ST_LOST)
		atomic_store(&G.state, ST_NONE);
	atomic_fetch_add(&G.gen, 1);
}

/* Connects to the daemon at @path and says Hello.
 * Return: the socket (non-blocking), or -errno; *@hello_failed tells a failed Hello
 * from a failed connect, *@call_paths whether the daemon takes call paths, and @why holds
 * the daemon's words when it refused. */
static int
daemon_connect(const char *path, int *hello_failed, int *call_paths, char *why, size_t why_len)
{
	*hello_failed = 0;
	*call_paths = 0;
	*why = 0;
	/* Non-blocking: a daemon whose backlog is full fails the connect at once. */
	int fd = wire_connect_flags(path, SOCK_NONBLOCK);
	if (fd < 0)
		return fd;
	/* Room for a burst the daemon is behind on (back-pressure, not a loss): best effort. */
	int sndbuf = PMC_SNDBUF;
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.client = "libpmcclient";
	h.call_paths = 1;
	/* The pmcctl run this process runs under: how it finds the process, in whatever pid
	 * namespace (the daemon ignores a tag that is not one). */
	const char *tag = secure_getenv("PMC_RUN_TAG");
	if (tag && strlen(tag) <= 32)
		h.run_tag = (char *)tag;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	Pmc__Response *resp = NULL;
	int r = wire_call(fd, &req, PMC_CALL_TIMEOUT_MS, NULL, 0, NULL, &resp);
	if (r == 0 && resp->error) {
		snprintf(why, why_len, "%s", resp->message);
		r = -EPROTO;
	}
	if (r == 0 && resp->body_case == PMC__RESPONSE__BODY_HELLO && resp->hello)
		*call_paths = resp->hello->call_paths;
	if (r == 0 && resp->body_case == PMC__RESPONSE__BODY_HELLO && resp->hello &&
	    resp->hello->max_path_id)
		atomic_store(&G.path_max, resp->hello->max_path_id < PMC_MAX_PATHS - 1
		                                  ? resp->hello->max_path_id
		                                  : PMC_MAX_PATHS - 1);
	if (resp)
		pmc__response__free_unpacked(resp, NULL);
	if (r < 0) {
		wire_close_draining(fd, 0);
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
		const char *dis = env_get("PMC_DISABLE");
		if (dis && *dis && strcmp(dis, "0")) {
			G.disabled = 1;
			atomic_store(&G.state, ST_OFF);
			return;
		}
		parse_events();
		parse_flush_ms();
		/* Map the small name table now (32 KiB), so that a name first seen inside a
		 * region costs that region no page fault of it. */
		for (size_t i = 0; i < PMC_NAME_SLOTS; i += 1024)
			atomic_store_explicit(&G.name_slots[i], 0, memory_order_relaxed);
		/* The same for the small path table and the first 1,023 paths' entries. */
		for (size_t i = 0; i < PMC_PATH_SLOTS; i += 1024)
			atomic_store_explicit(&G.path_slots[i], 0, memory_order_relaxed);
		G.path_parent[0] = G.path_region[0] = 0;
		(void)name_copy_locked("", 0);
		wake_init();
		G.key_ok = pthread_key_create(&G.key, thread_destroy) == 0;
		pthread_atfork(on_fork_prepare, on_fork_parent, on_fork_child);
		atexit(pmc_atexit);
	}
	const char *path = env_get("PMC_SOCKET");
	if (!path || !*path)
		path = PMC_DEFAULT_SOCKET;
	G.pid = getpid();
	G.path = path;

	char why[256] = "";
	int hello_failed = 0, call_paths = 0;
	int fd = daemon_connect(path, &hello_failed, &call_paths, why, sizeof(why));
	if (fd < 0 && hello_failed && *why) {
		/* It answered no (a limit, another protocol): asking again would only be
		 * refused again. */
		warn_once("profiling disabled: pmcdaemon at %s refused: %s", path, why);
		atomic_store(&G.state, ST_OFF);
		return;
	}
	if (fd < 0) {
		/* Not up yet, or not answering: the background thread connects once it is. */
		int bg = service_start_locked() == 0;
		if (!hello_failed)
			warn_once("profiling disabled: cannot connect to pmcdaemon at %s: %s (is "
			          "pmcdaemon running? set PMC_SOCKET, or PMC_DISABLE=1 to silence "
			          "this)%s",
			          path, strerror(-fd),
			          bg ? "; profiling starts when it comes up" : "");
		else
			warn_once("profiling disabled: no answer from pmcdaemon at %s: %s%s", path,
			          strerror(-fd), bg ? "; profiling starts when it answers" : "");
		atomic_store(&G.state, bg ? ST_LOST : ST_OFF);
		return;
	}
	G.fd = fd;
	G.conn++;
	G.call_paths = call_paths;
	atomic_store(&G.state, ST_ON);
	(void)service_start_locked();
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
	/* The usual way reads with rdpmc and leaves last_rdpmc as it is: a sample published after
	 * the general way's last fallback to read() was the usual way's. */
	return t->rdpmc && (t->last_rdpmc || atomic_load_explicit(&t->head, memory_order_relaxed) >
	                                             t->fallback_head);
}

/* FNV-1a of @name, and its length in *@len; stops after PMC_REGION_NAME_MAX bytes (a name
 * still going there is refused). */
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

/* Whether interned name @id is @name (at most PMC_REGION_NAME_MAX bytes). */
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

/* Lock-free: the id of @name (hash @h) in the table @slots of @n (a power of two), or 0. */
static inline pmc_region_t
name_probe(_Atomic uint32_t *slots, uint32_t n, const char *name, uint32_t h)
{
	for (uint32_t i = h & (n - 1);; i = (i + 1) & (n - 1)) {
		uint32_t id = atomic_load_explicit(&slots[i], memory_order_acquire);
		if (!id)
			return 0;
		if (G.hashes[id] == h && name_is(id, name))
			return id;
	}
}

/* Lock-free: the id of @name (hash @h), or 0. */
static pmc_region_t
name_find(const char *name, uint32_t h)
{
	pmc_region_t id = name_probe(G.name_slots, PMC_NAME_SLOTS, name, h);
	if (likely(id))
		return id;
	_Atomic uint32_t *big = atomic_load_explicit(&G.name_slots_big, memory_order_acquire);
	return big ? name_probe(big, PMC_NAME_SLOTS_BIG, name, h) : 0;
}

/* Called with G.lock held: a copy of @name (@len bytes), in chunks of 4 KiB written through
 * when made (the first at start), so that a name first seen in a region costs it no page
 * fault of the allocator's. Never freed, as names are not. */
static char *
name_copy_locked(const char *name, size_t len)
{
	if (G.name_pool_left < len + 1) {
		size_t sz = 4096;
		char *chunk = malloc(sz);
		if (!chunk)
			return NULL;
		memset(chunk, 0, sz);
		G.name_pool = chunk;
		G.name_pool_left = sz;
	}
	char *copy = G.name_pool;
	memcpy(copy, name, len);
	copy[len] = 0;
	G.name_pool += len + 1;
	G.name_pool_left -= len + 1;
	return copy;
}

static void
name_insert(_Atomic uint32_t *slots, uint32_t n, uint32_t h, pmc_region_t id)
{
	uint32_t i = h & (n - 1);
	while (atomic_load_explicit(&slots[i], memory_order_relaxed))
		i = (i + 1) & (n - 1);
	atomic_store_explicit(&slots[i], id, memory_order_release);
}

/* Called with G.lock held: interns @name (not there yet), or 0 when the table is full (then
 * G.names_full) or memory is short. */
static pmc_region_t
name_add_locked(const char *name, size_t len, uint32_t h)
{
	if (G.n_regions + 1 >= PMC_MAX_REGIONS) {
		atomic_store(&G.names_full, 1);
		return 0;
	}
	_Atomic uint32_t *big = atomic_load_explicit(&G.name_slots_big, memory_order_relaxed);
	if (G.n_regions + 1 >= PMC_NAMES_SMALL && !big) {
		/* The small table is full: the big one takes every name from now on. */
		big = calloc(PMC_NAME_SLOTS_BIG, sizeof(*big));
		if (!big)
			return 0;
		for (pmc_region_t id = 1; id <= G.n_regions; id++)
			name_insert(big, PMC_NAME_SLOTS_BIG, G.hashes[id], id);
		atomic_store_explicit(&G.name_slots_big, big, memory_order_release);
	}
	char *copy = name_copy_locked(name, len);
	if (!copy)
		return 0;
	pmc_region_t id = ++G.n_regions;
	G.names[id] = copy;
	G.hashes[id] = h;
	if (big)
		name_insert(big, PMC_NAME_SLOTS_BIG, h, id);
	else
		name_insert(G.name_slots, PMC_NAME_SLOTS, h, id);
	return id;
}

/* pmc_region() said no to @name for @why: count it (the next batch tells the daemon), and
 * say so once. */
static pmc_region_t
name_refused(unsigned why, const char *name)
{
	atomic_fetch_add_explicit(&G.lost[why], 1, memory_order_relaxed);
	if (why == R_NAMES && !atomic_load(&G.names_full))
		warn_loss(why,
		          "out of memory interning region name '%.40s': refused (pmc_region() "
		          "returns 0), counted by pmcdaemon as a dropped sample (reason %s)",
		          name, pmc_loss_name(why));
	else if (why == R_LONG_NAMES)
		warn_loss(why,
		          "region name '%.40s...' is longer than PMC_REGION_NAME_MAX (%d bytes): "
		          "refused, as is every such name (pmc_region() returns 0); each refusal "
		          "is counted by pmcdaemon as a dropped sample (reason %s)",
		          name, PMC_REGION_NAME_MAX, pmc_loss_name(why));
	else
		warn_loss(why,
		          "more than %d region names in this process: '%.40s' and every later "
		          "new name refused (pmc_region() returns 0); each refusal is counted by "
		          "pmcdaemon as a dropped sample (reason %s)",
		          PMC_MAX_REGIONS - 1, name, pmc_loss_name(why));
	return 0;
}

PMC_EXPORT pmc_region_t
pmc_region(const char *name)
{
	/* Interned also while no daemon is up: the id stays good once one is. */
	if (!name || !*name || ensure_connected() == ST_OFF)
		return 0;
	size_t len;
	uint32_t h = name_hash(name, &len);
	/* Never cut short: two names that differ past the limit would be one region. */
	if (unlikely(len == PMC_REGION_NAME_MAX && name[len]))
		return name_refused(R_LONG_NAMES, name);
	pmc_region_t id = name_find(name, h);
	if (likely(id))
		return id;
	if (atomic_load_explicit(&G.names_full, memory_order_relaxed))
		return name_refused(R_NAMES, name);
	pthread_mutex_lock(&G.lock);
	id = name_find(name, h);
	if (!id)
		id = name_add_locked(name, len, h);
	pthread_mutex_unlock(&G.lock);
	return id ? id : name_refused(R_NAMES, name);
}

static void
ring_free(struct ring *r)
{
	if (!r)
		return;
	free(r->slots);
	free(r);
}

/* An empty ring of @cap samples (a power of two) of @n events, or NULL. */
static struct ring *
ring_new(size_t cap, size_t n)
{
	struct ring *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->cap = cap;
	r->stride = pmc_sample_size(n);
	r->slots = calloc(cap, r->stride);
	if (!r->slots) {
		ring_free(r);
		return NULL;
	}
	return r;
}

/*
 * By @t's own thread, without the lock: a ring of PMC_GAP samples in place of the present
 * one, holding what it holds (while the daemon is away or behind, or the lock is taken),
 * once. A reader that loaded the present ring before reads on in it: every sample it may
 * read (before the head it loaded) is in both, copied before the new ring is published, and
 * every head stored after that comes with the new ring.
 */
static void
ring_grow(struct pmc_thread *t)
{
	struct ring *r = atomic_load_explicit(&t->ring, memory_order_relaxed);
	if (t->old || r->cap >= PMC_GAP)
		return;
	struct ring *g = ring_new(PMC_GAP, t->n);
	if (!g)
		return;
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_relaxed);
	for (uint64_t k = atomic_load_explicit(&t->tail, memory_order_acquire); k < hd; k++)
		memcpy(ring_slot(g, k), ring_slot(r, k), r->stride);
	t->old = r;
	atomic_store_explicit(&t->ring, g, memory_order_release);
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
	if (t->stack)
		free(t->stack - 1);
	free(t->memo);
	ring_free(atomic_load(&t->ring));
	ring_free(t->old);
	free(t);
}

/* Milliseconds from now to @deadline (CLOCK_MONOTONIC ns), rounded up; 0 once it passed. */
static int
ms_left(uint64_t deadline)
{
	uint64_t now = util_now_ns(CLOCK_MONOTONIC);
	return now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
}

/* Called with G.lock held: waits until the daemon's queue has room for a datagram
 * (POLLOUT), or until @deadline, with G.lock released meanwhile when @unlock (then G.fd may
 * be another socket on return: the caller checks the state again).
 * Return: 0 (room, or an error the next send finds), -EAGAIN at @deadline. */
static int
wait_room_locked(uint64_t deadline, bool unlock)
{
	struct pollfd p = {.fd = G.fd, .events = POLLOUT};
	int ms = ms_left(deadline);
	if (!ms)
		return -EAGAIN;
	if (unlock)
		pthread_mutex_unlock(&G.lock);
	int n = poll(&p, 1, ms);
	if (unlock)
		pthread_mutex_lock(&G.lock);
	return n == 0 ? -EAGAIN : 0;
}

/* Called with G.lock held: tells the daemon that thread @tid is gone (it closes its copies
 * of the thread's fds), waiting until @deadline for room in its queue (@unlock: as
 * wait_room_locked()). Return: 0 or -errno. */
static int
thread_exit_send_locked(pid_t tid, uint64_t deadline, bool unlock)
{
	Pmc__ThreadExit te = PMC__THREAD_EXIT__INIT;
	te.tid = tid;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_THREAD_EXIT;
	req.thread_exit = &te;
	int r;
	while ((r = wire_send(G.fd, &req.base, NULL, 0, MSG_DONTWAIT)) == -EAGAIN &&
	       wait_room_locked(deadline, unlock) == 0 && atomic_load(&G.state) == ST_ON)
		;
	return r;
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
	int fds[PMC_MAX_EVENTS];
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
	warn_loss(R_FD_LIMIT,
	          "thread %d runs unprofiled: %s its %zu counter fds under RLIMIT_NOFILE %llu (the "
	          "library leaves %d more fds to the program); so do other threads short of "
	          "fds, while the process's other threads and its connection go on; their "
	          "regions are counted by pmcdaemon as dropped (reason %s); raise the limit "
	          "(ulimit -n, LimitNOFILE=)",
	          (int)tid,
	          truncated ? "the reply to its registration could not carry" : "no room for", n,
	          lim, PMC_FD_RESERVE, pmc_loss_name(R_FD_LIMIT));
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
 * Called with G.lock held (nothing else may read the socket meanwhile): sends the
 * RegisterThread @req and receives its reply before @deadline, with the fds it carries in
 * @fds (PMC_MAX_EVENTS slots). A full queue delays the request until then.
 * Return: 0 with *@out (freed by the caller) and *@n_fds fds, the caller's;
 * -EMFILE: the reply came with fewer fds than it carried (MSG_CTRUNC: no room for them
 * under RLIMIT_NOFILE), those that came are closed, *@out is the reply (NULL when it does
 * not decode); -EBADMSG: the reply does not decode or carries more than PMC_MAX_EVENTS
 * fds (closed). After these two the connection is in step: its one reply was read.
 * -EAGAIN: not sent (the queue stayed full); the connection is in step too.
 * Another -errno (-ETIMEDOUT: no reply in time): the connection is out of step.
 */
static int register_recv_locked(uint64_t deadline, int *fds, size_t *n_fds, Pmc__Response **out);

static int
register_call_locked(const Pmc__Request *req, int pidfd, uint64_t deadline, int *fds, size_t *n_fds,
                     Pmc__Response **out)
{
	int r;
	while ((r = wire_send(G.fd, &req->base, &pidfd, pidfd >= 0, MSG_DONTWAIT)) == -EAGAIN)
		if (wait_room_locked(deadline, false) < 0)
			return -EAGAIN;
	if (r < 0)
		return r;
	return register_recv_locked(deadline, fds, n_fds, out);
}

/* register_call_locked()'s receiving half: the reply to the one RegisterThread in flight,
 * waited for until @deadline (passed: only looked for). Return: as register_call_locked(),
 * -ETIMEDOUT when it did not come (the request is still in flight). */
static int
register_recv_locked(uint64_t deadline, int *fds, size_t *n_fds, Pmc__Response **out)
{
	int r;
	struct pollfd p = {.fd = G.fd, .events = POLLIN};
	for (;;) {
		r = poll(&p, 1, ms_left(deadline));
		if (r > 0)
			break;
		if (r == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
	ssize_t len;
	int resets = 0;
	/* As wire_wait(): a daemon that closed reports ECONNRESET once before its last words. */
	do
		len = recv(G.fd, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
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
	union {
		char buf[CMSG_SPACE(sizeof(int) * WIRE_RX_FDS)];
		struct cmsghdr align;
	} ctrl;
	struct iovec iov = {.iov_base = buf, .iov_len = (size_t)len};
	struct msghdr mh = {
	        .msg_iov = &iov,
	        .msg_iovlen = 1,
	        .msg_control = ctrl.buf,
	        .msg_controllen = sizeof(ctrl.buf),
	};
	ssize_t got;
	do
		got = recvmsg(G.fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	while (got < 0 && errno == EINTR);
	if (got < 0)
		return -errno;
	size_t nf = 0;
	bool bad = (mh.msg_flags & MSG_TRUNC) != 0, cut = (mh.msg_flags & MSG_CTRUNC) != 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			bad = true;
			continue;
		}
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (nf < PMC_MAX_EVENTS) {
				fds[nf++] = fd;
			} else {
				fdcheck_close(fd, 0);
				bad = true;
			}
		}
	}
	Pmc__Response *resp = NULL;
	bool decoded = wire_unpack_response(buf, (size_t)got, &resp) == 0;
	/* Only counters are expected: anything else (a daemon not to be trusted) is closed
	 * where its close cannot hold this thread, and the reply refused. */
	for (size_t i = 0; i < nf && !bad; i++)
		bad = fdcheck_kind(fds[i]) != FDCHECK_PERF;
	if (cut || bad || !decoded) {
		for (size_t i = 0; i < nf; i++)
			fdcheck_close(fds[i], 0);
		if (cut) {
			*out = resp;
			return -EMFILE;
		}
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

/* Called with G.lock held: registers the calling thread. Return: the thread, or NULL: then
 * *@fd_starved says whether for want of room for its fds (RLIMIT_NOFILE), *@transient whether
 * it may ask again later (see ST_RETRY). */
static struct pmc_thread *
register_locked(bool *fd_starved, bool *transient)
{
	pid_t tid = gettid_();
	*fd_starved = false;
	*transient = true;
	if (G.reg_late)
		return NULL;
	*transient = false;
	/* Before asking: a reply whose fds cannot all be taken costs the daemon an open of
	 * each, and this process the fds it already has. */
	size_t want = G.n_events       ? G.n_events
	              : G.reply_events ? G.reply_events
	                               : PMC_DEFAULT_N_EVENTS;
	if (want > PMC_MAX_EVENTS)
		want = PMC_MAX_EVENTS; /* the daemon refuses more (E2BIG) */
	if (!fd_room(G.fd, want)) {
		warn_fd_limit(tid, want, false);
		*fd_starved = true;
		return NULL;
	}
	struct pmc_thread *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->tid = tid;
	t->gen = atomic_load(&G.gen);

	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = t->tid;
	rt.n_events = G.n_events;
	rt.events = G.events;
	_cleanup_close_ int pidfd = thread_pidfd(t->tid);
	rt.pidfd = pidfd >= 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	Pmc__Response *resp = NULL;
	size_t n_fds = 0;
	uint64_t deadline = util_now_ns(CLOCK_MONOTONIC) + PMC_CALL_TIMEOUT_MS * UINT64_C(1000000);
	int r = register_call_locked(&req, pidfd, deadline, t->fds, &n_fds, &resp);
	bool is_reply =
	        resp && !resp->error && resp->body_case == PMC__RESPONSE__BODY_REGISTER_REPLY;
	if (is_reply)
		G.reply_events = resp->register_reply->n_events;
	if (r == -EMFILE || r == -EBADMSG) {
		/* The one reply was read: the connection stays, and so do the process's other
		 * threads. Only a reply that opened counters carries fds: the daemon forgets
		 * this thread again (ThreadExit of an unknown thread is a no-op). */
		(void)thread_exit_send_locked(tid, deadline, false);
		if (r == -EMFILE) {
			warn_fd_limit(tid, is_reply ? resp->register_reply->n_events : want, true);
			*fd_starved = true;
		} else {
			warn_once("thread %d not profiled: malformed reply from pmcdaemon",
			          (int)tid);
		}
		if (resp)
			pmc__response__free_unpacked(resp, NULL);
		free(t);
		return NULL;
	}
	if (r == -EAGAIN) {
		/* Nothing was sent: the connection is in step. */
		warn_once("thread %d not profiled for now: pmcdaemon took no request for %d ms "
		          "(its queue stayed full); it asks again later, its regions counted "
		          "meanwhile (reason %s)",
		          (int)tid, PMC_CALL_TIMEOUT_MS, pmc_loss_name(R_UNREGISTERED));
		*transient = true;
		free(t);
		return NULL;
	}
	if (r == -ETIMEDOUT) {
		/* A daemon this slow would make every thread wait as long: no thread asks again
		 * until this request is answered, which the background thread looks for (its
		 * reply is the next datagram: nothing else is asked meanwhile). */
		warn_once("thread %d not profiled for now: pmcdaemon did not answer its "
		          "registration within %d ms; no thread waits for it again until it "
		          "answers, and each asks again later, its regions counted meanwhile "
		          "(reason %s)",
		          (int)t->tid, PMC_CALL_TIMEOUT_MS, pmc_loss_name(R_UNREGISTERED));
		G.reg_late = tid;
		*transient = true;
		(void)service_start_locked();
		free(t);
		return NULL;
	}
	if (r < 0) {
		warn_once("thread %d not profiled: registering with pmcdaemon failed: %s",
		          (int)t->tid, strerror(-r));
		/* Out of step (a datagram cut short), or gone: start afresh (in the
		 * background). */
		connection_failed_locked(r == -ECONNRESET || r == -EPIPE ? r : -EPROTO);
		*transient = r == -ECONNRESET || r == -EPIPE;
		free(t);
		return NULL;
	}
	if (!is_reply || resp->register_reply->tid != t->tid ||
	    resp->register_reply->n_events != n_fds || n_fds == 0) {
		*transient =
		        resp->error && refusal_passes(resp->error < 0 ? -resp->error : resp->error);
		if (*transient)
			warn_once("thread %d not profiled for now: %s; it asks again later, its "
			          "regions counted meanwhile (reason %s)",
			          (int)t->tid, resp->message, pmc_loss_name(R_UNREGISTERED));
		else
			warn_once("thread %d not profiled: %s", (int)t->tid,
			          resp->error ? resp->message : "unexpected reply from pmcdaemon");
		for (size_t i = 0; i < n_fds; i++)
			close(t->fds[i]);
		if (is_reply)
			(void)thread_exit_send_locked(tid, deadline, false);
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
	t->one_group = leader == 0;
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
	/* The fast path takes the wall clock from the leader's page (cap_user_time_zero, set with
	 * cap_user_time by every kernel that has it). */
	t->fast = t->rdpmc && t->one_group && t->pages[0]->cap_user_time_zero;
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
	t->stack_cap = t->begin_cap = PMC_STACK_START;
	t->stack = frames_new(PMC_STACK_START);
	t->frame_mem = calloc(PMC_STACK_START * 3 * t->n, sizeof(uint64_t));
	t->memo_cap = PMC_PCACHE;
	t->memo_mask = PMC_PCACHE - 1;
	t->memo = calloc(t->memo_cap, sizeof(*t->memo));
	struct ring *ring = ring_new(PMC_RING, t->n);
	atomic_store(&t->ring, ring);
	if (!t->stack || !t->frame_mem || !t->memo || !ring) {
		thread_release(t);
		return NULL;
	}
	for (unsigned d = 0; d < PMC_STACK_START; d++)
		t->stack[d].v = t->frame_mem + d * 3 * t->n;
	t->state = ST_ON;
	thread_fast_cap(t);
	t->announced = 0;
	/* Before the background thread can see the ring: nothing of this is a sample. */
	thread_warm_up(t);
	t->next = G.threads;
	if (G.threads)
		G.threads->prev = t;
	G.threads = t;
	return t;
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

static void flush_try(struct pmc_thread *t);
static void batch_due(struct pmc_thread *t);
static void end_general(struct pmc_thread *t, pmc_region_t region);

/* Frees @t, the structure of a thread that goes or starts over. */
static void
thread_free(struct pmc_thread *t)
{
	if (t->state != ST_OFF && t->state != ST_RETRY)
		thread_release(t);
	else
		free(t);
}

static struct pmc_thread *
thread_slow(void)
{
	struct pmc_thread *t = T;
	/* Waiting to ask again: a coarse clock (no system call) until the back-off is over, or
	 * until the daemon answered the request that was late. */
	if (t && t->state == ST_RETRY && t->gen == atomic_load(&G.gen) &&
	    util_now_ns(CLOCK_MONOTONIC_COARSE) < t->retry_ns &&
	    atomic_load_explicit(&G.reg_answered, memory_order_relaxed) == t->answered)
		return NULL;
	if (ensure_connected() != ST_ON)
		return NULL;
	unsigned backoff = 0;
	if (t && (t->gen != atomic_load(&G.gen) || t->state == ST_RETRY)) {
		/* Inherited across fork() (the fds count the parent's thread), or asking
		 * again. */
		if (t->state == ST_RETRY && t->gen == atomic_load(&G.gen))
			backoff = t->backoff_ms;
		if (G.key_ok)
			pthread_setspecific(G.key, NULL);
		thread_free(t);
		T = t = NULL;
	}
	if (t)
		return t->state == ST_ON ? t : NULL;
	bool fd_starved = false, transient = false;
	pthread_mutex_lock(&G.lock);
	connect_locked();
	if (atomic_load(&G.state) == ST_ON)
		t = register_locked(&fd_starved, &transient);
	else
		transient = atomic_load(&G.state) == ST_LOST;
	/* Under the lock: a late reply read after this is one this thread may wait for. */
	unsigned answered = atomic_load(&G.reg_answered);
	pthread_mutex_unlock(&G.lock);
	if (!t) {
		/* Remember the failure so that this thread never retries on the hot path: for
		 * good when refused, until a deadline when the failure may pass. */
		t = calloc(1, sizeof(*t));
		if (!t)
			return NULL;
		t->gen = atomic_load(&G.gen);
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
	if (G.key_ok)
		pthread_setspecific(G.key, t);
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
	if (t && t->state == ST_OFF && t->gen == atomic_load(&G.gen))
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

/* Lock-free: the path id of (@parent, @region) (hash @h) in the table @slots of @n, or 0. */
static inline uint32_t
path_probe(_Atomic uint32_t *slots, uint32_t n, uint32_t parent, pmc_region_t region, uint32_t h)
{
	for (uint32_t i = h & (n - 1);; i = (i + 1) & (n - 1)) {
		uint32_t id = atomic_load_explicit(&slots[i], memory_order_acquire);
		if (!id)
			return 0;
		if (G.path_parent[id] == parent && G.path_region[id] == region)
			return id;
	}
}

static inline uint32_t
path_hash(uint32_t parent, pmc_region_t region)
{
	return (parent * 0x9e3779b1u) ^ (region * 0x85ebca6bu);
}

/* The path id of region @region begun in path @parent (0: none), interned on first use
 * (under G.path_lock, which no one holds for long); 0 when the table is full (or past the
 * daemon's bound) or memory is short. */
static uint32_t
path_intern(uint32_t parent, pmc_region_t region)
{
	uint32_t h = path_hash(parent, region);
	uint32_t id = path_probe(G.path_slots, PMC_PATH_SLOTS, parent, region, h);
	_Atomic uint32_t *big = atomic_load_explicit(&G.path_slots_big, memory_order_acquire);
	if (!id && big)
		id = path_probe(big, PMC_PATH_SLOTS_BIG, parent, region, h);
	if (id)
		return id;
	pthread_mutex_lock(&G.path_lock);
	big = atomic_load_explicit(&G.path_slots_big, memory_order_relaxed);
	id = big ? path_probe(big, PMC_PATH_SLOTS_BIG, parent, region, h)
	         : path_probe(G.path_slots, PMC_PATH_SLOTS, parent, region, h);
	uint32_t n = atomic_load_explicit(&G.n_paths, memory_order_relaxed);
	if (!id && n + 1 < PMC_MAX_PATHS && n + 1 <= atomic_load(&G.path_max)) {
		if (n + 1 >= PMC_PATHS_SMALL && !big &&
		    (big = calloc(PMC_PATH_SLOTS_BIG, sizeof(*big)))) {
			/* The small table is full: the big one takes every path from now on. */
			for (uint32_t k = 1; k <= n; k++)
				name_insert(big, PMC_PATH_SLOTS_BIG,
				            path_hash(G.path_parent[k], G.path_region[k]), k);
			atomic_store_explicit(&G.path_slots_big, big, memory_order_release);
		}
		if (big || n + 1 < PMC_PATHS_SMALL) {
			id = n + 1;
			G.path_parent[id] = parent;
			G.path_region[id] = region;
			/* Before the id is found (its slot) or defined (n_paths): its entries. */
			atomic_store_explicit(&G.n_paths, id, memory_order_release);
			name_insert(big ? big : G.path_slots,
			            big ? PMC_PATH_SLOTS_BIG : PMC_PATH_SLOTS, h, id);
		}
	}
	pthread_mutex_unlock(&G.path_lock);
	return id;
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
 * flagged; else interned (flagged PMC_PATH_FLAG_FULL when the table is full). Cached. */
static uint32_t __attribute__((noinline))
path_slow(struct pcache *c, uint32_t parent, pmc_region_t region, unsigned d)
{
	uint32_t path;
	if (region == PMC_WARMUP_REGION)
		path = 0; /* cached, so that the warm-up's begin is a usual one */
	else if (parent & PMC_PATH_FLAGS)
		path = (parent & PMC_PATH_FLAGS) | region;
	else if (d >= PMC_PATH_DEPTH)
		path = PMC_PATH_FLAG_DEEP | region;
	else if (!(path = path_intern(parent, region)))
		path = PMC_PATH_FLAG_FULL | region;
	/* Before the sample is published (release): its batch will look for the name. */
	if (path & PMC_PATH_FLAGS)
		atomic_store_explicit(&G.flagged, 1, memory_order_relaxed);
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
	return path_slow(c, parent, region, d);
}

/* @cap frames and, before them, the parent of the outermost (path 0, id 0), zeroed. Return:
 * the first frame (free() the one before it), or NULL. */
static struct frame *
frames_new(unsigned cap)
{
	struct frame *st = calloc((size_t)cap + 1, sizeof(*st));
	return st ? st + 1 : NULL;
}

/* Doubles @t's frames (a thread nesting deeper than ever before). Return: 0 or -ENOMEM. */
static int
stack_grow(struct pmc_thread *t)
{
	unsigned cap = 2 * t->stack_cap, w = 3 * (unsigned)t->n;
	struct frame *st = frames_new(cap);
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
	if (!t->overflow && t->stack_cap < PMC_MAX_DEPTH && stack_grow(t) == 0) {
		t->begin_cap = t->stack_cap;
		thread_fast_cap(t);
		return true;
	}
	count_loss(t, t->depth >= t->stack_cap ? R_DEPTH : R_READ, 1);
	t->overflow++;
	t->begin_cap = 0;
	thread_fast_cap(t);
	return false;
}

/* The memo slot of @region on @t, and in *@key what it holds when @region begins at depth
 * @d (in the open frame's path) in the same path as last time. */
static inline __attribute__((always_inline)) const struct pcache *
memo_at(const struct pmc_thread *t, unsigned d, pmc_region_t region, uint64_t *key)
{
	uint32_t parent = d ? t->stack[d - 1].path : 0;
	*key = pcache_key(parent, region);
	return &t->memo[region & (t->memo_cap - 1)];
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
	f->path = path_get(t, d ? f[-1].path : 0, region, d);
	struct reading x = fast_failed ? read_counters_slow(t, f->v, 0) : read_counters(t, f->v, 0);
	f->t0 = x.clock;
	if (unlikely(x.r < 0)) {
		count_loss(t, R_READ, 1);
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
		atomic_fetch_add_explicit(&G.lost[R_FD_LIMIT], 1, memory_order_relaxed);
	else if (t && t->state == ST_RETRY)
		atomic_fetch_add_explicit(&G.lost[R_UNREGISTERED], 1, memory_order_relaxed);
	else if ((!t || t->state != ST_OFF) &&
	         atomic_load_explicit(&G.state, memory_order_relaxed) == ST_LOST)
		/* No daemon answers (yet, or for now): said once it does, in the next batch. */
		atomic_fetch_add_explicit(&G.lost[R_NO_DAEMON], 1, memory_order_relaxed);
}

static void begin_other(pmc_region_t region);
static void begin_general(struct pmc_thread *t, pmc_region_t region);

/* The usual begin (pmc_begin(), and the macros' inline): a thread that reads its group through
 * the pages, with room in its frames, and a region that begins in the same path as last time
 * (its memo slot): one pass over each page (pmc_reader_pass_leader(), _count()) into the frame.
 * Every other case, and a pass that cannot be made, goes the general way (begin_general(),
 * region_begin_any()) with a tail call; a thread that registers, a path new to the memo or frames
 * that must grow are prepared there and begun again through this code, so that the instructions
 * after the read are the same for every region: what a region counts of the library's own is
 * one constant. */
static inline __attribute__((always_inline)) void
begin_fast(pmc_region_t region)
{
	struct pmc_thread *t = T;
	if (unlikely(!t)) {
		begin_other(region);
		return;
	}
	unsigned d = t->depth;
	if (unlikely(d >= t->fast_cap || !region)) {
		begin_general(t, region);
		return;
	}
	struct frame *f = &t->stack[d];
	const struct pcache *m = &t->memo[region & t->memo_mask];
	if (unlikely(m->key != pcache_key(f[-1].path, region))) {
		begin_general(t, region);
		return;
	}
	size_t n = t->n;
	uint64_t *v = f->v;
	struct pmc_reading rd;
	if (unlikely(pmc_reader_pass_leader(t->pages[0], &pmc_reader_hw_ops, &rd) < 0)) {
		region_begin_any(t, region, true);
		return;
	}
	v[0] = rd.value;
	v[n] = rd.enabled;
	v[2 * n] = rd.running;
	f->t0 = rd.clock;
	for (size_t i = 1; i < n; i++)
		if (unlikely(pmc_reader_pass_count(t->pages[i], &pmc_reader_hw_ops, &v[i]) < 0)) {
			region_begin_any(t, region, true);
			return;
		}
	f->path = m->path;
	f->id = region;
	t->depth = d + 1;
}

/* pmc_begin(), inlined into the macros' begin too (no call through the PLT). */
static inline __attribute__((always_inline)) void
begin_id(pmc_region_t region)
{
	begin_fast(region);
}

PMC_EXPORT void
pmc_begin(pmc_region_t region)
{
	begin_fast(region);
}

/* pmc_begin() itself, called from this library without the PLT. */
static __typeof__(pmc_begin) pmc_begin_again __attribute__((alias("pmc_begin")));

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
	if (unlikely(t->stack[d - 1].id != region)) {
		while (d > 0 && t->stack[d - 1].id != region)
			d--;
		if (unlikely(!d))
			return;
		/* Regions begun inside this one and not ended: their samples are lost. */
		count_loss(t, R_NESTING, t->depth - d);
	}
	t->depth = d - 1;
	if (unlikely(x.r < 0)) {
		count_loss(t, R_READ, 1);
		return;
	}
	struct frame *f = &t->stack[d - 1];
	uint64_t wall = 0;
	if (unlikely(pmc_wall_delta(f->t0, x.clock, &wall) < 0)) {
		/* The kernel took the page's clock away, or gave it, within the region. */
		count_loss(t, R_READ, 1);
		return;
	}
	struct ring *rg = atomic_load_explicit(&t->ring, memory_order_relaxed);
	uint64_t h = atomic_load_explicit(&t->head, memory_order_relaxed);
	uint64_t tl = atomic_load_explicit(&t->tail, memory_order_acquire);
	if (unlikely(h - tl >= rg->cap)) {
		/* Full: the daemon is away or behind. Send, or grow, then every 64 lost. */
		if (!(atomic_load_explicit(&t->lost[R_FULL], memory_order_relaxed) & 63)) {
			flush_try(t);
			rg = atomic_load_explicit(&t->ring, memory_order_relaxed);
			tl = atomic_load_explicit(&t->tail, memory_order_acquire);
		}
		if (h - tl >= rg->cap) {
			count_loss(t, R_FULL, 1);
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
	s->region = f->path;
	s->scaled = scaled;
	s->wall = wall;
	if (unlikely(scaled))
		atomic_store_explicit(&t->scaled_end, h + 1, memory_order_relaxed);
	atomic_store_explicit(&t->head, h + 1, memory_order_release);
	if (!t->last_rdpmc)
		t->fallback_head = h + 1;
	/* A batch's worth: the background thread sends it, or this one (batch_due()). */
	if (unlikely(h + 1 - tl >= PMC_KICK && h >= t->retry_at))
		batch_due(t);
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
	atomic_store_explicit(&t->head, h + 1, memory_order_release);
	/* A batch's worth: the background thread sends it, or this one (batch_due()). */
	if (unlikely(h + 1 - tl >= PMC_KICK && h >= t->retry_at))
		batch_due(t);
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
static void
thread_warm_up(struct pmc_thread *t)
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
	for (int k = 0; k < 2; k++) {
		pmc_begin(PMC_WARMUP_REGION);
		pmc_end(PMC_WARMUP_REGION);
	}
	T = self;
	/* The second, warm, one is the floor (none when a read failed). */
	uint64_t h = atomic_load(&t->head);
	if (h > h0) {
		const struct pmc_sample *s = ring_slot(r, h - 1);
		memcpy(t->floor_v, s->values, t->n * sizeof(uint64_t));
		t->floor_wall = s->wall;
		t->floor_pending = 1;
	}
	atomic_store(&t->head, h0);
	atomic_store(&t->scaled_end, 0);
	t->depth = t->overflow = 0;
	t->begin_cap = t->stack_cap;
	thread_fast_cap(t);
	for (unsigned k = 0; k < R_THREAD_N; k++)
		atomic_store(&t->lost[k], 0);
}

/* Says once per reason that samples were lost (names are said where they are refused). */
static void
warn_losses(const struct pmc_thread *t, const uint64_t *loss)
{
	if (loss[R_DEPTH])
		warn_loss(R_DEPTH,
		          "thread %d nests regions deeper than %d: the samples of the deeper ones "
		          "are dropped, counted by pmcdaemon (reason %s)",
		          (int)t->tid, PMC_MAX_DEPTH, pmc_loss_name(R_DEPTH));
	if (loss[R_NESTING])
		warn_loss(R_NESTING,
		          "thread %d ended a region while regions begun inside it were still open "
		          "(pmc_end() out of nesting order), or exited with regions open: their "
		          "samples are dropped, counted by pmcdaemon (reason %s)",
		          (int)t->tid, pmc_loss_name(R_NESTING));
	if (loss[R_FULL])
		warn_loss(R_FULL,
		          "thread %d held %zu samples that pmcdaemon could not take (away or "
		          "behind): later ones are dropped, counted by pmcdaemon (reason %s)",
		          (int)t->tid, atomic_load(&t->ring)->cap, pmc_loss_name(R_FULL));
	if (loss[R_READ])
		warn_loss(R_READ,
		          "reading the counters of thread %d failed: those regions are dropped, "
		          "counted by pmcdaemon (reason %s)",
		          (int)t->tid, pmc_loss_name(R_READ));
	if (loss[R_EXITED])
		warn_loss(R_EXITED,
		          "threads exited holding samples that could not be sent: dropped, counted "
		          "by pmcdaemon (reason %s)",
		          pmc_loss_name(R_EXITED));
}

/* Called with G.lock held: sends the @len bytes at @buf as one datagram, without waiting. */
static int
send_locked(const uint8_t *buf, size_t len)
{
	if (len > WIRE_MAX_DATAGRAM)
		return -EMSGSIZE;
	for (;;) {
		if (send(G.fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

/* Called with G.lock held: what define_locked() is putting in one Define. */
struct defs {
	Pmc__Define d;
	uint32_t def_id[PMC_DEFINE_MAX];
	char *def_name[PMC_DEFINE_MAX];
	uint32_t path_id[PMC_DEFINE_MAX], path_parent[PMC_DEFINE_MAX], path_region[PMC_DEFINE_MAX];
	uint32_t
	        first_p; /* the first path this message defines, or names the region of (0: none) */
};

/* Called with G.lock held: sends @m's Define; on failure its paths and names are not
 * announced. Return: 0 or -errno. */
static int
defs_send_locked(struct defs *m)
{
	if (!m->d.n_def_id && !m->d.n_path_id)
		return 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_DEFINE;
	req.define = &m->d;
	int r = wire_send(G.fd, &req.base, NULL, 0, MSG_DONTWAIT);
	if (r < 0) {
		for (size_t i = 0; i < m->d.n_def_id; i++)
			G.announced[m->def_id[i]] = 0;
		if (m->first_p)
			G.path_defined = m->first_p - 1;
	}
	m->first_p = 0;
	m->d.n_def_id = m->d.n_def_name = 0;
	m->d.n_path_id = m->d.n_path_parent = m->d.n_path_region = 0;
	return r;
}

/* Called with G.lock held: adds the name of region @id to @m unless announced. */
static int
defs_name_locked(struct defs *m, pmc_region_t id)
{
	if (G.announced[id])
		return 0;
	if (m->d.n_def_id == PMC_DEFINE_MAX) {
		int r = defs_send_locked(m);
		if (r < 0)
			return r;
	}
	G.announced[id] = 1;
	m->def_id[m->d.n_def_id++] = id;
	m->def_name[m->d.n_def_name++] = G.names[id];
	return 0;
}

/* Called with G.lock held: defines (Define) the paths interned since the last (each after
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
	uint32_t n_paths = atomic_load_explicit(&G.n_paths, memory_order_acquire);
	uint32_t keep = atomic_load(&G.path_max);
	while (r == 0 && G.path_defined < n_paths) {
		uint32_t p = G.path_defined + 1;
		r = defs_name_locked(&m, G.path_region[p]);
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
			m.path_parent[m.d.n_path_parent++] = G.path_parent[p];
			m.path_region[m.d.n_path_region++] = G.path_region[p];
		}
		G.path_defined = p;
	}
	if (atomic_load_explicit(&G.flagged, memory_order_relaxed)) {
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

/* Called with G.lock held: sends samples [@start, @end) of @t, which do not wrap around its
 * ring @rg, as one batch, with @loss (R_N counts, or NULL) as its losses. */
static int
send_slice_locked(struct pmc_thread *t, const struct ring *rg, uint64_t start, uint64_t end,
                  const uint64_t *loss)
{
	static uint8_t buf[PMC_BATCH_BOUND(PMC_BATCH, PMC_MAX_EVENTS, PMC_REGION_NAME_MAX)];
	uint32_t def_id[PMC_BATCH];
	size_t n = (size_t)(end - start);
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_acquire);
	if (G.call_paths) {
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
	        .announced = G.call_paths ? NULL : G.announced,
	        .names = G.names,
	        .path_region = G.path_region,
	        .path_keep = G.call_paths ? atomic_load(&G.path_max) : 0,
	        .paths = G.call_paths,
	        .def_id = def_id,
	        .sent_before = G.sent_total,
	        .pending = hd - end,
	};
	if (loss) {
		b.dropped_depth = loss[R_DEPTH];
		b.dropped_nesting = loss[R_NESTING];
		b.dropped_full = loss[R_FULL];
		b.dropped_read = loss[R_READ];
		b.dropped_exited = loss[R_EXITED];
		b.dropped_names = loss[R_NAMES];
		b.dropped_long_names = loss[R_LONG_NAMES];
		b.dropped_fd_limit = loss[R_FD_LIMIT];
		b.dropped_unregistered = loss[R_UNREGISTERED];
		b.dropped_no_daemon = loss[R_NO_DAEMON];
		for (unsigned r = 0; r < R_N; r++)
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
		if (wire_send(G.fd, &fr.base, NULL, 0, MSG_DONTWAIT) == 0)
			t->floor_pending = 0;
	}
	int r = send_locked(msg, len);
	if (r < 0) {
		for (size_t i = 0; i < b.n_def; i++)
			G.announced[def_id[i]] = 0;
		return r;
	}
	G.sent_total += n;
	t->announced = hd;
	return 0;
}

/* Called with G.lock held: sends what @t's ring holds, oldest first, in batches of at most
 * PMC_BATCH, and the losses not reported yet (its own, and the process's) with the first.
 * What is not sent stays in the ring. Return: 0, or -errno (-ENOTCONN: no daemon now;
 * -EAGAIN: its queue is full). */
static int
consume_locked(struct pmc_thread *t)
{
	if (atomic_load(&G.state) != ST_ON || t->gen != atomic_load(&G.gen))
		return -ENOTCONN;
	uint64_t tl = atomic_load_explicit(&t->tail, memory_order_relaxed);
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_acquire);
	const struct ring *rg = atomic_load_explicit(&t->ring, memory_order_acquire);
	uint64_t tloss[R_THREAD_N], gloss[R_N], loss[R_N];
	bool any = false;
	for (unsigned k = 0; k < R_N; k++) {
		gloss[k] = atomic_load_explicit(&G.lost[k], memory_order_relaxed) - G.reported[k];
		loss[k] = gloss[k];
		if (k < R_THREAD_N) {
			tloss[k] = atomic_load_explicit(&t->lost[k], memory_order_relaxed) -
			           t->reported[k];
			loss[k] += tloss[k];
		}
		any |= loss[k] != 0;
	}
	if (tl == hd && !any)
		return 0;
	if (t->conn != G.conn) {
		int r = reattach_locked(t);
		if (r < 0) {
			connection_failed_locked(r);
			return r;
		}
		t->announced = tl;
	}
	if (any)
		warn_losses(t, loss);
	do {
		uint64_t end = hd - tl > PMC_BATCH ? tl + PMC_BATCH : hd;
		uint64_t wrap = tl + (rg->cap - (size_t)(tl & (rg->cap - 1)));
		if (end > wrap)
			end = wrap;
		int r = send_slice_locked(t, rg, tl, end, any ? loss : NULL);
		if (r < 0) {
			/* A full queue: the samples stay; the background thread sends them as
			 * soon as it has room. */
			if (r == -EAGAIN && !G.blocked) {
				G.blocked = 1;
				pthread_cond_signal(&G.wake);
			}
			connection_failed_locked(r);
			return r;
		}
		if (any) {
			for (unsigned k = 0; k < R_N; k++) {
				G.reported[k] += gloss[k];
				if (k < R_THREAD_N)
					t->reported[k] += tloss[k];
			}
			any = false;
		}
		tl = end;
		atomic_store_explicit(&t->tail, tl, memory_order_release);
	} while (tl < hd);
	return 0;
}

/* Called with G.lock held: every registered thread's samples.
 * Return: 0, or -EAGAIN when some stayed for the daemon's queue was full. */
static int
consume_all_locked(void)
{
	int full = 0;
	for (struct pmc_thread *t = G.threads; t && atomic_load(&G.state) == ST_ON; t = t->next)
		full |= consume_locked(t) == -EAGAIN;
	return full ? -EAGAIN : 0;
}

/* Called with G.lock held: whether every thread sent what it held when drain_locked() began. */
static bool
drained_locked(void)
{
	for (struct pmc_thread *t = G.threads; t; t = t->next)
		if (atomic_load_explicit(&t->tail, memory_order_relaxed) < t->drain_to)
			return false;
	return true;
}

/*
 * Called with G.lock held: sends what @t holds (NULL: what every registered thread holds
 * now), waiting, with the lock released, while the daemon's queue is full: a daemon behind
 * (a burst of clients) is back-pressure, not a reason to drop. Gives up after
 * PMC_CALL_TIMEOUT_MS in which no sample went out (a daemon that stopped reading).
 * Return: 0, -EAGAIN (given up: the samples stay), or consume_locked()'s error.
 */
static int
drain_locked(struct pmc_thread *t)
{
	const uint64_t wait_ns = PMC_CALL_TIMEOUT_MS * UINT64_C(1000000);
	uint64_t deadline = util_now_ns(CLOCK_MONOTONIC) + wait_ns, sent = G.sent_total;
	if (!t)
		for (struct pmc_thread *o = G.threads; o; o = o->next)
			o->drain_to = atomic_load_explicit(&o->head, memory_order_acquire);
	for (;;) {
		int r = t ? consume_locked(t) : consume_all_locked();
		/* Threads that run on meanwhile add samples: only those of now are waited for. */
		if (r != -EAGAIN || (!t && drained_locked()))
			return r == -EAGAIN ? 0 : r;
		if (G.sent_total != sent) {
			sent = G.sent_total;
			deadline = util_now_ns(CLOCK_MONOTONIC) + wait_ns;
		}
		if (wait_room_locked(deadline, true) < 0)
			return -EAGAIN;
	}
}

/* Called with G.lock held while the reply to G.reg_late's registration is late: reads it if
 * it came. That thread gave up: the counters it carries are closed and the daemon told so
 * (it forgets them); registrations may go again. */
static void
late_reply_locked(void)
{
	int fds[PMC_MAX_EVENTS];
	size_t n_fds = 0;
	Pmc__Response *resp = NULL;
	int r = register_recv_locked(0, fds, &n_fds, &resp);
	if (r == -ETIMEDOUT)
		return;
	if (r < 0 && r != -EMFILE && r != -EBADMSG) {
		connection_failed_locked(r == -ECONNRESET || r == -EPIPE ? r : -EPROTO);
		return;
	}
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	/* As register_locked(): a reply that may have opened counters is answered ThreadExit. */
	if (r == -EMFILE || r == -EBADMSG || (resp && !resp->error))
		(void)thread_exit_send_locked(G.reg_late, util_now_ns(CLOCK_MONOTONIC), false);
	if (resp)
		pmc__response__free_unpacked(resp, NULL);
	G.reg_late = 0;
	atomic_fetch_add_explicit(&G.reg_answered, 1, memory_order_relaxed);
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
	pthread_mutex_lock(&G.lock);
	for (;;) {
		int st = atomic_load(&G.state);
		unsigned ms = st == ST_LOST ? backoff_ms : (G.flush_ms + 1) / 2;
		if (G.reg_late && (!ms || ms > PMC_LATE_POLL_MS))
			ms = PMC_LATE_POLL_MS;
		if (st == ST_ON && G.blocked) {
			/* The queue was full: send again once it has room, not a period later. */
			G.blocked = 0;
			(void)wait_room_locked(util_now_ns(CLOCK_MONOTONIC) +
			                               (ms ? ms : PMC_FLUSH_MS / 2) *
			                                       UINT64_C(1000000),
			                       true);
		} else if (st != ST_LOST && !G.flush_ms && !G.reg_late) {
			pthread_cond_wait(&G.wake, &G.lock);
		} else {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += ms / 1000;
			ts.tv_nsec += (long)(ms % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&G.wake, &G.lock, &ts);
		}
		if (atomic_load(&G.state) == ST_LOST) {
			const char *path = G.path;
			int hello_failed, call_paths;
			char why[256];
			pthread_mutex_unlock(&G.lock);
			int fd = daemon_connect(path, &hello_failed, &call_paths, why, sizeof(why));
			pthread_mutex_lock(&G.lock);
			if (fd < 0) {
				if (backoff_ms < 1000)
					backoff_ms = backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2;
				continue;
			}
			if (atomic_load(&G.state) != ST_LOST) {
				close(fd);
				continue;
			}
			G.fd = fd;
			G.conn++;
			G.call_paths = call_paths;
			memset(G.announced, 0, sizeof(G.announced));
			G.path_defined = 0;
			atomic_store(&G.state, ST_ON);
			backoff_ms = 100;
		}
		if (G.reg_late && atomic_load(&G.state) == ST_ON)
			late_reply_locked();
		(void)consume_all_locked();
	}
	return NULL;
}

/* Called with G.lock held: starts the background thread unless it runs. Return: 0 or -errno. */
static int
service_start_locked(void)
{
	if (G.service)
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
			__atomic_store_n(&G.service, 1, __ATOMIC_RELAXED);
			r = 0;
		}
		pthread_attr_destroy(&attr);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

/* Called with G.lock held after a send failed with @r. A full queue (-EAGAIN) only
 * delays the samples; a daemon that went away is reconnected in the background, so
 * that no region ever waits for it. */
static void
connection_failed_locked(int r)
{
	if (r == -EAGAIN || r == -EMSGSIZE || r == -ENOMEM || atomic_load(&G.state) != ST_ON)
		return;
	if (r != -ECONNRESET && r != -EPIPE) {
		/* Given up while the daemon may still serve it (no answer in time): at the
		 * hang-up it counts as lost what each thread said it held. Those are not sent
		 * again, so that none is counted twice. */
		for (struct pmc_thread *t = G.threads; t; t = t->next)
			if (t->conn == G.conn && t->announced > atomic_load(&t->tail))
				atomic_store_explicit(&t->tail, t->announced, memory_order_release);
	}
	/* What the daemon queued and nobody read: its fds closed where no close can hold
	 * this thread (a hostile daemon's lingering socket, a file that never flushes). */
	wire_close_draining(G.fd, 0);
	G.fd = -1;
	G.reg_late = 0; /* its reply went with the connection */
	atomic_store(&G.state, ST_LOST);
	if (service_start_locked() == 0)
		pthread_cond_signal(&G.wake);
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
	_cleanup_close_ int pidfd = thread_pidfd(t->tid);
	rt.pidfd = pidfd >= 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	int r = wire_send(G.fd, &req.base, &pidfd, pidfd >= 0, MSG_DONTWAIT);
	if (r == 0)
		t->conn = G.conn;
	return r;
}

/* A batch's worth in @t's ring (end_fast(), region_end_any()), by the ring's own thread: the
 * background thread is woken to encode and send it, so that neither is on the region's thread;
 * this thread sends it itself (flush_try()) where no background thread runs, or once the ring
 * is 3/4 full (the background thread behind, or not woken: it was busy when signalled). */
static void __attribute__((noinline)) batch_due(struct pmc_thread *t)
{
	uint64_t h = atomic_load_explicit(&t->head, memory_order_relaxed);
	uint64_t tl = atomic_load_explicit(&t->tail, memory_order_acquire);
	if (__atomic_load_n(&G.service, __ATOMIC_RELAXED) &&
	    h - tl < atomic_load_explicit(&t->ring, memory_order_relaxed)->cap / 4 * 3) {
		pthread_cond_signal(&G.wake);
		t->retry_at = h + PMC_KICK / 4;
		return;
	}
	flush_try(t);
}

/* From region_end(), by the ring's own thread, which must never wait: when another thread
 * holds the lock the samples stay for a later try (or for the background thread). */
static void
flush_try(struct pmc_thread *t)
{
	uint64_t hd = atomic_load_explicit(&t->head, memory_order_relaxed);
	if (pthread_mutex_trylock(&G.lock) == 0) {
		(void)consume_locked(t);
		pthread_mutex_unlock(&G.lock);
	}
	uint64_t left = hd - atomic_load_explicit(&t->tail, memory_order_acquire);
	/* The daemon away or behind, or the lock taken: hold more until it can be sent. */
	if (left >= atomic_load_explicit(&t->ring, memory_order_relaxed)->cap / 2)
		ring_grow(t);
	t->retry_at = left ? hd + 64 : 0;
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
	pthread_mutex_lock(&G.lock);
	int r = drain_locked(t);
	pthread_mutex_unlock(&G.lock);
	return r;
}

static void
thread_destroy(void *arg)
{
	struct pmc_thread *t = arg;
	if (!t)
		return;
	pthread_mutex_lock(&G.lock);
	/* Off G.threads first, so that the background thread never sees it again (unless a
	 * fork() emptied the list since: the child's starts empty). */
	if (t->prev || G.threads == t) {
		if (t->prev)
			t->prev->next = t->next;
		else
			G.threads = t->next;
		if (t->next)
			t->next->prev = t->prev;
	}
	if (t->state == ST_ON && t->gen == atomic_load(&G.gen)) {
		if (t->depth)
			count_loss(t, R_NESTING, t->depth);
		(void)drain_locked(t);
		int told = 0, on = atomic_load(&G.state) == ST_ON && t->conn == G.conn;
		if (on)
			told = thread_exit_send_locked(t->tid,
			                               util_now_ns(CLOCK_MONOTONIC) +
			                                       PMC_CALL_TIMEOUT_MS *
			                                               UINT64_C(1000000),
			                               true) == 0;
		/* What could not be sent is reported by a later batch of another thread; but
		 * what the daemon was told this thread held, and not that it exited, it counts
		 * itself as lost when the process goes. */
		uint64_t tl = atomic_load(&t->tail), left = atomic_load(&t->head) - tl;
		if (on && !told && t->announced > tl)
			left -= t->announced - tl < left ? t->announced - tl : left;
		atomic_fetch_add(&G.lost[R_EXITED], left);
		for (unsigned k = 0; k < R_THREAD_N; k++)
			atomic_fetch_add(&G.lost[k], atomic_load(&t->lost[k]) - t->reported[k]);
	}
	pthread_mutex_unlock(&G.lock);
	if (T == t)
		T = NULL;
	thread_free(t);
}

/* exit() runs no thread's destructor: send every thread's samples (those of threads that
 * still run too), so that none waits in a ring for a process that is going. */
static void
pmc_atexit(void)
{
	pthread_mutex_lock(&G.lock);
	(void)drain_locked(NULL);
	pthread_mutex_unlock(&G.lock);
}

/* The macros' begin. The call site's slot holds the id its name had last time: a name
 * that changes at run time (a buffer, a pointer to one of several names) is compared on
 * every call, never taken for the first one. Whatever id another thread left there is
 * checked, so the slot needs no lock. */
PMC_EXPORT pmc_region_t
pmc__scope_begin(pmc_region_t *slot, const char *name)
{
	pmc_region_t id = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	/* A name pmc_region() refused (0) takes it on every call, which counts each as a
	 * dropped sample: one per run of the region. */
	if (unlikely(!id || !name || strcmp(G.names[id], name))) {
		id = pmc_region(name);
		if (id)
			__atomic_store_n(slot, id, __ATOMIC_RELEASE);
	}
	begin_id(id);
	return id;
}

/* The macros' begin of a literal name: the slot, once it holds an id, is that name's. */
PMC_EXPORT pmc_region_t
pmc__scope_begin_literal(pmc_region_t *slot, const char *name)
{
	pmc_region_t id = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (unlikely(!id)) {
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
