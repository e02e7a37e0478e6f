/* pmc-test-client: an application for the integration tests, linked with
 * libpmcclient like any other. Each mode runs regions whose ground truth is known
 * and prints that truth as "key=value" lines for the test script to compare with
 * what pmcctl reports.
 *
 *   pages N K        region "pages": K calls, each writing N fresh pages
 *   cpu K            region "spin": K calls of busy arithmetic; prints the thread CPU
 *                    time (CLOCK_THREAD_CPUTIME_ID) spent inside the regions
 *   threads T N K    T threads, registered at once (region "mt-start"), then each:
 *                    region "mt-pages", K calls of N pages
 *   newpath K        K times region "a", then region "b" holding region "c" (a call path
 *                    new to the process begins inside "b" the first time)
 *   nested N K       region "outer" writes N pages and holds region "inner", which
 *                    writes N more: outer counts 2N per call, inner N
 *   named NAME N K   like pages, in a region called NAME (any bytes)
 *   fork N K         region "parent" K calls of N pages, then a child process runs
 *                    region "child" K calls of N pages while the parent runs region
 *                    "parent-after" (whose first calls also take the copy-on-write
 *                    faults fork() leaves): each process counts only its own pages.
 *                    A second registered thread lives across the fork, and region
 *                    "across" is open in the forking thread, ended in both processes
 *                    (the child's end is not counted); the child prints how many
 *                    perf_event fds it holds at its start (the parent's: must be 0)
 *                    and after its own regions (its own)
 *   fork-exit K [F]  region "parent" once, pmc_flush(), then a child process runs region
 *                    "child-exit" F times (default 0) and pmc_flush(), then K times and
 *                    _exit()s (no flush, no atexit: those never leave its ring); prints
 *                    child_pid, child_sent=F and child_unsent=K
 *   exec N K         region "before-exec" K calls of N pages, pmc_flush(), then exec
 *                    itself as "pages N K" (same pid, new image)
 *   loop ITER        region "loop": an x86-64 loop of exactly 2 instructions per
 *                    iteration (dec; jnz); prints instructions=2*ITER and rdpmc=0|1
 *   caps             opens instructions:u on itself (no daemon involved; needs the
 *                    right to, e.g. root) and prints the user page's cap_user_rdpmc and
 *                    cap_user_time: whether the library can take the rdpmc path here
 *   steady T K US [F]  T threads, each K calls of region "steady" writing 1 fresh page,
 *                    sleeping US microseconds between calls; prints the total and the
 *                    longest pmc_begin+pmc_end pair seen (the daemon may be killed and
 *                    restarted meanwhile: regions must never wait for it); with F, each
 *                    thread then waits (up to 120 s) for file F to exist before it exits
 *                    (the test restarts the daemon first: what the threads hold goes to it)
 *   deep D           region "deep" nested D levels deep (more than the 32 levels of a
 *                    call path, and of a thread's first frames), each level writing 1
 *                    fresh page before going deeper: every level is recorded (up to the
 *                    library's 1,024), level k with D - k page faults. A first run of
 *                    region "deep-warm" as deep lets the thread grow its frames before
 *   tree K           K times: "main" (1 page) holding "parse" (2 pages; holds "lex", 1),
 *                    "emit" (3 pages; holds "lex", 1) and "walk", recursive 3 deep (1 page
 *                    a level); prints each path's inclusive and self page faults
 *                    ("incl.main;parse=", "self.main;parse=") and the per-name totals
 *   paths N          regions p0 ... p(N-1), each once at the root and, inside it, each of
 *                    them once: N + N^2 call paths, each region run N + 1 times
 *   paths-again N F  the same, pmc_flush(), prints "first=done", waits (up to 60 s) for file
 *                    F to exist (the test restarts the daemon meanwhile), runs region "sync"
 *                    once and calls pmc_flush() until it returns 0 (up to 60 s: the
 *                    library reconnected; prints "reconnected=1", or 0), runs them again
 *                    and flushes
 *   block M          region "block": the thread blocks M times reading an empty pipe
 *                    that another thread fills one byte at a time; prints the switches
 *                    /proc/thread-self/status counted around the region and the
 *                    voluntary ones inside it (region "warm-up" registers first)
 *   ontime           a second thread runs region "blocked" 5 times (1 page each), then
 *                    blocks for good; this thread runs region "tick" 20 times (1 page
 *                    each) at 10 a second, prints "ticked=20", then runs region "tick-on"
 *                    10 times a second until killed: what ran must reach the daemon while
 *                    the process runs on
 *   late M           interns region "late" at once (before any daemon is up: prints
 *                    "late_id_nonzero=1"), waits (up to 60 s) until pmc_enabled() says 1,
 *                    then runs it M times (1 page each), prints "done=M" and waits until
 *                    killed
 *   orphan F N       region "orphan" once, pmc_flush() (fails unless it returns 0), prints
 *                    "first=done", waits (up to 60 s) for file F to exist (the test kills
 *                    the daemon meanwhile), runs it N times more and exits
 *   names N          N regions named n00001, n00002, ... (PMC_SCOPE on a buffer), once each
 *   longnames K      region "ok" once (1 page), then two names of 130 bytes that differ only
 *                    in their last byte, through PMC_SCOPE, K times each; prints "long_id="
 *                    (pmc_region() of one: 0)
 *   mismatch K       K times: begin "outer", begin "inner", end "outer", end "inner" (1 page
 *                    in each part): "outer" counts 2 pages a time, "inner" nothing
 *   window K         K regions "w0", "w1", ... once each, empty or spinning a little:
 *                    each sample's task-clock must be within its wall time
 *   serial T MS      T threads one after another, MS ms apart, each running region
 *                    "serial" once (1 page) and exiting; prints "thread=I enabled=0|1" for
 *                    each and "elapsed_ms=" (a daemon that never answers a registration
 *                    must cost the first of them one time-out, the others none)
 *   timed T K [F]    the time the process spends inside the library, for a daemon that may be
 *                    slow, hung or stopped: the main thread interns region "timed", then T
 *                    threads each run it once (their registration), [with F: meet, print
 *                    "ready", wait (up to 60 s) for file F to exist,] run it K times more
 *                    and pmc_flush(); every call is timed (CLOCK_MONOTONIC around it; but
 *                    the K on a registered thread: the hot path, which never waits), so
 *                    is each thread's exit (from its return to the end of the library's
 *                    destructor) and the process's exit() (to the end of the library's
 *                    atexit handler). Prints "runs=" (T (K + 1)), "enabled=" (threads
 *                    registered), "flush_failed=", and in ms: "calls_ms=" (all calls, all
 *                    threads), "max_call_ms=", "exits_ms=", "max_exit_ms=", "atexit_ms=",
 *                    "total_ms=" (the three sums), "calls_off_cpu_ms=" (of calls_ms, the time
 *                    off the CPU: CLOCK_THREAD_CPUTIME_ID around each call too), "waited_ms="
 *                    (calls_off_cpu_ms + exits_ms + atexit_ms: the calls' own work left out);
 *                    with PMC_TEST_ALARM_US=N set, a SIGALRM (a handler that does nothing)
 *                    every N us all along,
 *                    "union_ms=" (the time during which any thread was in a timed call, an
 *                    exit or exit(): the process's wait, however many waited together)
 *   retry K          (for a daemon with --max-threads 1) thread A runs region "a" once and
 *                    holds its registration; thread B then runs region "b" (refused:
 *                    EMFILE); A exits; B runs "b" every 20 ms until pmc_enabled() says 1
 *                    (at most 10 s), then K times more; prints "runs_b=" (all of B's runs)
 *                    and "b_enabled=0|1"
 */
#include <dirent.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pmc/pmc.h>

static size_t pagesz;

/* How many perf_event fds this process holds. */
static int
count_perf_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));) {
		char path[300], link[64];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		ssize_t l = readlink(path, link, sizeof(link) - 1);
		if (l > 0) {
			link[l] = 0;
			n += !strcmp(link, "anon_inode:[perf_event]");
		}
	}
	closedir(d);
	return n;
}

/* A registered thread that waits, across a fork, until the pipe closes. */
static void *
fork_helper_main(void *p)
{
	int *fds = p;
	char c;
	PMC_REGION("helper")
	{
		c = 0;
	}
	if (write(fds[1], &c, 1) != 1) /* registered */
		return NULL;
	while (read(fds[0], &c, 1) > 0)
		;
	return NULL;
}

/* The mapping is made outside the region so that only the writes are counted. */
static unsigned char *
map_pages(long n)
{
	unsigned char *m = mmap(NULL, (size_t)n * pagesz, PROT_READ | PROT_WRITE,
	                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	return m;
}

static void
write_pages(unsigned char *m, long n)
{
	for (long i = 0; i < n; i++)
		((volatile unsigned char *)m)[(size_t)i * pagesz] = 1;
}

static void
run_pages(const char *name, long n, long k)
{
	pmc_region_t r = pmc_region(name);
	for (long c = 0; c < k; c++) {
		unsigned char *m = map_pages(n);
		pmc_begin(r);
		write_pages(m, n);
		pmc_end(r);
		munmap(m, (size_t)n * pagesz);
	}
}

static uint64_t
thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct mt_arg {
	long n, k;
	pthread_barrier_t start;
};

static void *
mt_main(void *p)
{
	struct mt_arg *a = p;
	/* Register (region "mt-start"), then wait for the others: all threads are
	 * registered at once, whatever the scheduling. */
	pmc_region_t r = pmc_region("mt-start");
	pmc_begin(r);
	pmc_end(r);
	pthread_barrier_wait(&a->start);
	run_pages("mt-pages", a->n, a->k);
	return NULL; /* the final partial batch goes out at thread exit */
}

/* timed: sums of ns spent inside the library. */
static _Atomic uint64_t timed_calls, timed_exits, timed_max_call, timed_max_exit, timed_off;
static _Atomic long timed_enabled, timed_flush_failed;
static uint64_t timed_main_end;
static pthread_key_t timed_key;
static const char *timed_file;
static pthread_barrier_t timed_meet;

static uint64_t mono_ns(void);
static uint64_t thread_cpu_ns(void);

/* Every timed interval, for the time during which any thread was inside the library (their
 * union: "the whole process", however many threads waited together). */
#define TIMED_IV (1 << 17)
static struct timed_iv {
	uint64_t t0, t1;
} timed_iv[TIMED_IV];
static _Atomic size_t timed_n_iv;

static void
timed_add(_Atomic uint64_t *sum, _Atomic uint64_t *max, uint64_t t0)
{
	uint64_t t1 = mono_ns(), d = t1 - t0, m = atomic_load(max);
	atomic_fetch_add(sum, d);
	while (d > m && !atomic_compare_exchange_weak(max, &m, d))
		;
	size_t i = atomic_fetch_add(&timed_n_iv, 1);
	if (i < TIMED_IV)
		timed_iv[i] = (struct timed_iv){t0, t1};
}

static int
timed_iv_cmp(const void *a, const void *b)
{
	const struct timed_iv *x = a, *y = b;
	return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* The union of the timed intervals, in ns (UINT64_MAX: more than were kept). */
static uint64_t
timed_union_ns(void)
{
	size_t n = atomic_load(&timed_n_iv);
	if (n > TIMED_IV)
		return UINT64_MAX;
	qsort(timed_iv, n, sizeof(*timed_iv), timed_iv_cmp);
	uint64_t sum = 0, a = 0, b = 0;
	for (size_t i = 0; i < n; i++) {
		if (i && timed_iv[i].t0 <= b) {
			if (timed_iv[i].t1 > b)
				b = timed_iv[i].t1;
			continue;
		}
		sum += b - a;
		a = timed_iv[i].t0;
		b = timed_iv[i].t1;
	}
	return sum + (b - a);
}

/* Runs after the library's destructor (a key made after the library's: glibc runs them in
 * the order the keys were made). */
static void
timed_thread_gone(void *p)
{
	uint64_t *t_return = p;
	timed_add(&timed_exits, &timed_max_exit, *t_return);
	free(t_return);
}

/* Registered before the library's atexit handler: runs after it. */
static void
timed_report(void)
{
	if (!timed_main_end)
		return;
	uint64_t now = mono_ns(), ax = now - timed_main_end;
	size_t i = atomic_fetch_add(&timed_n_iv, 1);
	if (i < TIMED_IV)
		timed_iv[i] = (struct timed_iv){timed_main_end, now};
	uint64_t u = timed_union_ns();
	uint64_t calls = atomic_load(&timed_calls), exits = atomic_load(&timed_exits);
	uint64_t off = atomic_load(&timed_off);
	printf("enabled=%ld\nflush_failed=%ld\ncalls_ms=%.1f\nmax_call_ms=%.1f\nexits_ms=%.1f\n"
	       "max_exit_ms=%.1f\natexit_ms=%.1f\ntotal_ms=%.1f\ncalls_off_cpu_ms=%.1f\n"
	       "waited_ms=%.1f\n",
	       atomic_load(&timed_enabled), atomic_load(&timed_flush_failed), calls / 1e6,
	       atomic_load(&timed_max_call) / 1e6, exits / 1e6, atomic_load(&timed_max_exit) / 1e6,
	       ax / 1e6, (calls + exits + ax) / 1e6, off / 1e6, (off + exits + ax) / 1e6);
	if (u != UINT64_MAX)
		printf("union_ms=%.1f\n", u / 1e6);
	fflush(stdout);
}

/* The wall time of @call, and of it the time off the CPU (waiting, or preempted). */
#define TIMED(call)                                                                                \
	do {                                                                                       \
		uint64_t c0_ = thread_cpu_ns(), t0_ = mono_ns();                                   \
		call;                                                                              \
		uint64_t w_ = mono_ns() - t0_, c_ = thread_cpu_ns() - c0_;                         \
		timed_add(&timed_calls, &timed_max_call, t0_);                                     \
		atomic_fetch_add(&timed_off, w_ > c_ ? w_ - c_ : 0);                               \
	} while (0)

static void
timed_on_alarm(int sig)
{
	(void)sig;
}

static void *
timed_main(void *p)
{
	long k = *(long *)p;
	pmc_region_t r;
	int on, rc;
	TIMED(r = pmc_region("timed"));
	TIMED(pmc_begin(r));
	TIMED(pmc_end(r));
	TIMED(on = pmc_enabled());
	atomic_fetch_add(&timed_enabled, on);
	if (timed_file) {
		pthread_barrier_wait(&timed_meet);
		for (int w = 0; w < 600 && access(timed_file, F_OK); w++)
			usleep(100000);
	}
	/* A registered thread's begin and end are the hot path, which never waits (no lock,
	 * no system call but a batch's send that never blocks): timed only on a thread that
	 * is not registered, whose begin may ask again. */
	for (long i = 0; i < k; i++) {
		if (on) {
			pmc_begin(r);
			pmc_end(r);
			continue;
		}
		TIMED(pmc_begin(r));
		TIMED(pmc_end(r));
	}
	TIMED(rc = pmc_flush());
	if (rc < 0)
		atomic_fetch_add(&timed_flush_failed, 1);
	uint64_t *t_return = malloc(sizeof(*t_return));
	if (t_return) {
		*t_return = mono_ns();
		pthread_setspecific(timed_key, t_return);
	}
	return NULL;
}

struct steady_arg {
	long k, us;
	uint64_t max_ns;
	const char *hold;
};

static uint64_t
mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *
steady_main(void *p)
{
	struct steady_arg *a = p;
	pmc_region_t r = pmc_region("steady");
	for (long c = 0; c < a->k; c++) {
		unsigned char *m = map_pages(1);
		uint64_t t0 = mono_ns();
		pmc_begin(r);
		write_pages(m, 1);
		pmc_end(r);
		uint64_t d = mono_ns() - t0;
		if (d > a->max_ns)
			a->max_ns = d;
		munmap(m, pagesz);
		if (a->us)
			usleep((useconds_t)a->us);
	}
	for (int w = 0; a->hold && w < 1200 && access(a->hold, F_OK); w++)
		usleep(100000);
	return NULL;
}

/* Voluntary plus involuntary context switches of the calling thread, from the kernel's
 * own per-thread counters: the ground truth around a region. */
static long
thread_switches(bool voluntary_only)
{
	FILE *f = fopen("/proc/thread-self/status", "re");
	char line[256];
	long v, total = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1 ||
		    (!voluntary_only && sscanf(line, "nonvoluntary_ctxt_switches: %ld", &v) == 1))
			total += v;
	fclose(f);
	return total;
}

static void
deep(pmc_region_t r, long level, long d)
{
	if (level == d)
		return;
	unsigned char *m = map_pages(1);
	pmc_begin(r);
	write_pages(m, 1);
	deep(r, level + 1, d);
	pmc_end(r);
	munmap(m, pagesz);
}

/* Region @name writing @n fresh pages, then running @inner (may be NULL) inside. */
static void
tree_leaf(const char *name, long n, void (*inner)(void))
{
	unsigned char *m = map_pages(n);
	PMC_SCOPE(name);
	write_pages(m, n);
	if (inner)
		inner();
	munmap(m, (size_t)n * pagesz);
}

static void
tree_lex(void)
{
	tree_leaf("lex", 1, NULL);
}

static void
tree_walk(long level)
{
	if (level == 3)
		return;
	unsigned char *m = map_pages(1);
	PMC_SCOPE("walk");
	write_pages(m, 1);
	tree_walk(level + 1);
	munmap(m, pagesz);
}

static void
tree_main(void)
{
	unsigned char *m = map_pages(1);
	PMC_SCOPE("main");
	write_pages(m, 1);
	tree_leaf("parse", 2, tree_lex);
	tree_leaf("emit", 3, tree_lex);
	tree_walk(0);
	munmap(m, pagesz);
}

/* One fresh page written inside region @r. */
static void
run_one_page(pmc_region_t r)
{
	unsigned char *m = map_pages(1);
	pmc_begin(r);
	write_pages(m, 1);
	pmc_end(r);
	munmap(m, pagesz);
}

/* Region "blocked" 5 times, then blocks until the pipe @p (its read end) closes: never. */
static void *
blocked_main(void *p)
{
	int fd = *(int *)p;
	char c;
	pmc_region_t r = pmc_region("blocked");
	for (int i = 0; i < 5; i++)
		run_one_page(r);
	while (read(fd, &c, 1) > 0)
		;
	return NULL;
}

struct feeder_arg {
	int fd;
	long m;
};

/* Writes one byte every 2 ms, so that the reader finds the pipe empty each time. */
static void *
feeder(void *p)
{
	struct feeder_arg *a = p;
	struct timespec ts = {0, 2 * 1000 * 1000};
	for (long i = 0; i < a->m; i++) {
		nanosleep(&ts, NULL);
		if (write(a->fd, "x", 1) != 1)
			break;
	}
	return NULL;
}

/* Region "serial" once; pmc_enabled() afterwards in *@p. */
static void *
serial_main(void *p)
{
	run_one_page(pmc_region("serial"));
	*(int *)p = pmc_enabled();
	return NULL;
}

struct retry_arg {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int a_ready, a_go;
	long k, runs_b;
	int b_enabled;
};

/* retry's thread A: registered (region "a"), it exits when told to. */
static void *
retry_a(void *p)
{
	struct retry_arg *a = p;
	run_one_page(pmc_region("a"));
	pthread_mutex_lock(&a->lock);
	a->a_ready = 1;
	pthread_cond_broadcast(&a->cond);
	while (!a->a_go)
		pthread_cond_wait(&a->cond, &a->lock);
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

/* retry's thread B: refused while A holds the daemon's one thread, registered once A is gone
 * and its back-off is over. */
static void *
retry_b(void *p)
{
	struct retry_arg *a = p;
	pmc_region_t r = pmc_region("b");
	struct timespec ts = {0, 20 * 1000 * 1000};
	run_one_page(r);
	a->runs_b = 1;
	pthread_mutex_lock(&a->lock);
	a->a_go = 1;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->lock);
	for (int i = 0; i < 500 && !(a->b_enabled = pmc_enabled()); i++) {
		nanosleep(&ts, NULL);
		run_one_page(r);
		a->runs_b++;
	}
	for (long i = 0; i < a->k; i++, a->runs_b++)
		run_one_page(r);
	return NULL;
}

/* fork() once stdout is flushed (else the child's copy of the buffer is printed twice); -1
 * with the reason on stderr. */
static pid_t
fork_flushed(void)
{
	fflush(stdout);
	pid_t p = fork();
	if (p < 0)
		perror("fork");
	return p;
}

int
main(int argc, char **argv)
{
	pagesz = (size_t)sysconf(_SC_PAGESIZE);
	if (argc < 2) {
		fprintf(stderr, "usage: see the top of pmc-test-client.c\n");
		return 2;
	}
	const char *mode = argv[1];
	if (!strcmp(mode, "pages") && argc == 4) {
		long n = atol(argv[2]), k = atol(argv[3]);
		run_pages("pages", n, k);
		printf("count=%ld\npage_faults=%ld\n", k, n * k);
	} else if (!strcmp(mode, "cpu") && argc == 3) {
		long k = atol(argv[2]);
		pmc_region_t r = pmc_region("spin");
		uint64_t cpu = 0;
		volatile uint64_t x = 1;
		unsigned char *warm = map_pages(1);
		write_pages(warm, 1);
		munmap(warm, pagesz);
		/* Registered before the first measured region: its round trip and warm-up are
		 * no region's (4 ms of CPU under sanitizers, 2 % of the truth). */
		(void)pmc_enabled();
		for (long c = 0; c < k; c++) {
			uint64_t c0 = thread_cpu_ns();
			pmc_begin(r);
			for (int i = 0; i < 2000000; i++)
				x = x * 6364136223846793005u + 1442695040888963407u;
			pmc_end(r);
			cpu += thread_cpu_ns() - c0;
		}
		printf("count=%ld\nthread_cpu_ns=%llu\n", k, (unsigned long long)cpu);
	} else if (!strcmp(mode, "threads") && argc == 5) {
		long t = atol(argv[2]);
		struct mt_arg a = {.n = atol(argv[3]), .k = atol(argv[4])};
		pthread_t th[64];
		if (t < 1 || t > 64)
			return 2;
		pthread_barrier_init(&a.start, NULL, (unsigned)t);
		for (long i = 0; i < t; i++)
			if (pthread_create(&th[i], NULL, mt_main, &a)) {
				perror("pthread_create");
				return 1;
			}
		for (long i = 0; i < t; i++)
			pthread_join(th[i], NULL);
		printf("count=%ld\npage_faults=%ld\n", t * a.k, t * a.n * a.k);
	} else if (!strcmp(mode, "newpath") && argc == 3) {
		long k = atol(argv[2]);
		pmc_region_t a = pmc_region("a"), b = pmc_region("b"), c = pmc_region("c");
		for (long i = 0; i < k; i++) {
			pmc_begin(a);
			pmc_end(a);
			pmc_begin(b);
			pmc_begin(c);
			pmc_end(c);
			pmc_end(b);
		}
		printf("enabled=%d\ncount=%ld\n", pmc_enabled(), 3 * k);
	} else if (!strcmp(mode, "nested") && argc == 4) {
		long n = atol(argv[2]), k = atol(argv[3]);
		pmc_region_t outer = pmc_region("outer"), inner = pmc_region("inner");
		for (long c = 0; c < k; c++) {
			unsigned char *a = map_pages(n), *b = map_pages(n);
			pmc_begin(outer);
			write_pages(a, n);
			pmc_begin(inner);
			write_pages(b, n);
			pmc_end(inner);
			pmc_end(outer);
			munmap(a, (size_t)n * pagesz);
			munmap(b, (size_t)n * pagesz);
		}
		/* The scoped form too, with an early break out of the block. */
		for (long c = 0; c < k; c++) {
			unsigned char *a = map_pages(n);
			PMC_REGION("scoped")
			{
				write_pages(a, n);
				if (c >= 0)
					break;
				write_pages(a, n); /* never reached */
			}
			munmap(a, (size_t)n * pagesz);
		}
		printf("outer_page_faults=%ld\ninner_page_faults=%ld\nscoped_page_faults=%ld\n",
		       2 * n * k, n * k, n * k);
	} else if (!strcmp(mode, "fork") && argc == 4) {
		long n = atol(argv[2]), k = atol(argv[3]);
		int ready[2], hold[2];
		pthread_t helper;
		char c;
		if (pipe(ready) || pipe(hold))
			return 1;
		int helper_fds[2] = {hold[0], ready[1]};
		if (pthread_create(&helper, NULL, fork_helper_main, helper_fds) ||
		    read(ready[0], &c, 1) != 1)
			return 1;
		run_pages("parent", n, k);
		pmc_region_t across = pmc_region("across");
		pmc_begin(across);
		pid_t child = fork_flushed();
		if (child < 0)
			return 1;
		if (child == 0) {
			printf("child_inherited_perf_fds=%d\n", count_perf_fds());
			pmc_end(across); /* the parent's counters: not counted here */
			run_pages("child", n, k);
			printf("child_own_perf_fds=%d\n", count_perf_fds());
			exit(0); /* the child's samples go out at exit */
		}
		run_pages("parent-after", n, k);
		int st;
		if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st))
			return 1;
		pmc_end(across);
		close(hold[1]);
		pthread_join(helper, NULL);
		printf("child_pid=%d\nparent_page_faults=%ld\nchild_page_faults=%ld\n", (int)child,
		       n * k, n * k);
	} else if (!strcmp(mode, "fork-exit") && (argc == 3 || argc == 4)) {
		long k = atol(argv[2]), f = argc == 4 ? atol(argv[3]) : 0;
		run_pages("parent", 1, 1);
		pmc_flush();
		pid_t child = fork_flushed();
		if (child < 0)
			return 1;
		if (child == 0) {
			pmc_region_t r = pmc_region("child-exit");
			for (long i = 0; i < f; i++) {
				pmc_begin(r);
				pmc_end(r);
			}
			if (f)
				pmc_flush();
			for (long i = 0; i < k; i++) {
				pmc_begin(r);
				pmc_end(r);
			}
			_exit(0);
		}
		int st;
		if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st))
			return 1;
		printf("child_pid=%d\nchild_sent=%ld\nchild_unsent=%ld\n", (int)child, f, k);
	} else if (!strcmp(mode, "exec") && argc == 4) {
		run_pages("before-exec", atol(argv[2]), atol(argv[3]));
		/* exec runs no atexit handler: send what is buffered first. */
		if (pmc_flush() < 0)
			return 1;
		fflush(stdout);
		execl("/proc/self/exe", argv[0], "pages", argv[2], argv[3], (char *)NULL);
		perror("exec");
		return 1;
	} else if (!strcmp(mode, "caps") && argc == 2) {
		struct perf_event_attr attr = {.size = sizeof(attr),
		                               .type = PERF_TYPE_HARDWARE,
		                               .config = PERF_COUNT_HW_INSTRUCTIONS,
		                               .exclude_kernel = 1,
		                               .exclude_hv = 1};
		int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
		if (fd < 0) {
			perror("perf_event_open instructions:u");
			return 1;
		}
		const struct perf_event_mmap_page *pg =
		        mmap(NULL, pagesz, PROT_READ, MAP_SHARED, fd, 0);
		if (pg == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		printf("cap_user_rdpmc=%d\ncap_user_time=%d\n", (int)pg->cap_user_rdpmc,
		       (int)pg->cap_user_time);
	} else if (!strcmp(mode, "loop") && argc == 3) {
		unsigned long iter = strtoul(argv[2], NULL, 10);
		pmc_region_t r = pmc_region("loop");
		pmc_begin(r); /* registers the thread */
		pmc_end(r);
		pmc_begin(r);
#if defined(__x86_64__)
		unsigned long i = iter;
		__asm__ __volatile__("1: dec %0\n\tjnz 1b" : "+r"(i) : : "cc");
#endif
		pmc_end(r);
		printf("instructions=%lu\nrdpmc=%d\n", 2 * iter, pmc_thread_uses_rdpmc());
	} else if (!strcmp(mode, "steady") && (argc == 5 || argc == 6)) {
		long t = atol(argv[2]);
		struct steady_arg a[64];
		pthread_t th[64];
		if (t < 1 || t > 64)
			return 2;
		for (long i = 0; i < t; i++) {
			a[i] = (struct steady_arg){.k = atol(argv[3]),
			                           .us = atol(argv[4]),
			                           .hold = argc == 6 ? argv[5] : NULL};
			if (pthread_create(&th[i], NULL, steady_main, &a[i]))
				return 1;
		}
		uint64_t max = 0;
		for (long i = 0; i < t; i++) {
			pthread_join(th[i], NULL);
			if (a[i].max_ns > max)
				max = a[i].max_ns;
		}
		printf("count=%ld\npage_faults=%ld\nmax_region_ns=%llu\n", t * a[0].k, t * a[0].k,
		       (unsigned long long)max);
	} else if (!strcmp(mode, "deep") && argc == 3) {
		long d = atol(argv[2]), want = 0;
		/* The thread's frames grow the first time it goes deeper than 32 (an
		 * allocation): in regions of their own, so that "deep" counts only its pages. */
		deep(pmc_region("deep-warm"), 0, d);
		/* The mappings of deeper levels are made inside the outer regions: pre-fault
		 * nothing of them, so each level counts its own page and its inner levels'. */
		deep(pmc_region("deep"), 0, d);
		for (long k = 0; k < d && k < 1024; k++)
			want += d - k;
		printf("count=%ld\npage_faults=%ld\n", d < 1024 ? d : 1024, want);
	} else if ((!strcmp(mode, "paths") && argc == 3) ||
	           (!strcmp(mode, "paths-again") && argc == 4)) {
		long n = atol(argv[2]);
		int again = argc == 4;
		pmc_region_t *r = calloc((size_t)n, sizeof(*r));
		for (long i = 0; r && i < n; i++) {
			char name[32];
			snprintf(name, sizeof(name), "p%ld", i);
			r[i] = pmc_region(name);
		}
		for (int round = 0; round <= again; round++) {
			if (round) {
				pmc_flush();
				printf("first=done\n");
				fflush(stdout);
				for (int w = 0; w < 600 && access(argv[3], F_OK); w++)
					usleep(100000);
				/* pmc_enabled() says 1 throughout (the thread keeps its counters
				 * while the library reconnects): the library learns that the daemon
				 * went away at its next send, and a round run meanwhile fills the
				 * ring (4,096) before the reconnection, faster than a loaded
				 * machine reconnects. Wait for a sample to go through instead. */
				pmc_region_t sync = pmc_region("sync");
				int w = 0;
				pmc_begin(sync);
				pmc_end(sync);
				while (w < 600 && pmc_flush() != 0) {
					usleep(100000);
					w++;
				}
				printf("reconnected=%d\n", w < 600);
				fflush(stdout);
			}
			for (long i = 0; r && i < n; i++) {
				pmc_begin(r[i]);
				for (long j = 0; j < n; j++) {
					pmc_begin(r[j]);
					pmc_end(r[j]);
				}
				pmc_end(r[i]);
				/* Sent as they come, waiting for room (pmc_flush()): the 17,030
				 * samples of a round, made in a few ms, outran a daemon on a loaded
				 * machine, the thread's 4,096 filled and the rest dropped
				 * (buffer-full, counted: e2e-tree's "every run counted" saw 112 of
				 * 131), what the library does by design for a region's thread,
				 * which never waits. */
				pmc_flush();
			}
		}
		pmc_flush();
		free(r);
		printf("paths=%ld\nruns=%ld\n", n + n * n, n + 1);
	} else if (!strcmp(mode, "tree") && argc == 3) {
		long k = atol(argv[2]);
		for (long c = 0; c < k; c++)
			tree_main();
		static const struct {
			const char *path;
			long incl, self;
		} truth[] = {
		        {"main", 11, 1},          {"main;parse", 3, 2},
		        {"main;parse;lex", 1, 1}, {"main;emit", 4, 3},
		        {"main;emit;lex", 1, 1},  {"main;walk", 3, 1},
		        {"main;walk;walk", 2, 1}, {"main;walk;walk;walk", 1, 1},
		};
		for (size_t i = 0; i < sizeof(truth) / sizeof(truth[0]); i++)
			printf("incl.%s=%ld\nself.%s=%ld\n", truth[i].path, truth[i].incl * k,
			       truth[i].path, truth[i].self * k);
		printf("name.lex.count=%ld\nname.lex.sum=%ld\nname.walk.count=%ld\n"
		       "name.walk.sum=%ld\n",
		       2 * k, 2 * k, 3 * k, 6 * k);
	} else if (!strcmp(mode, "block") && argc == 3) {
		long m = atol(argv[2]);
		int p[2];
		pthread_t th;
		if (pipe(p) < 0)
			return 1;
		struct feeder_arg fa = {p[1], m};
		pmc_region_t r = pmc_region("block");
		char c;
		/* Register first: the registration's round trip with the daemon blocks too. */
		PMC_REGION("warm-up")
		{
			c = 0;
		}
		/* Bounds that hold however busy the machine is: the region's switches are at
		 * least the voluntary ones counted inside it (each read that blocked), and at
		 * most all of them counted around it (preemption may land anywhere). */
		long cs0 = thread_switches(false);
		pmc_begin(r);
		long v0 = thread_switches(true);
		if (pthread_create(&th, NULL, feeder, &fa))
			return 1;
		for (long i = 0; i < m; i++)
			if (read(p[0], &c, 1) != 1)
				return 1;
		long v1 = thread_switches(true);
		pmc_end(r);
		long cs1 = thread_switches(false);
		pthread_join(th, NULL);
		printf("switches_around=%ld\n", cs1 - cs0);
		printf("voluntary_inside=%ld\n", v1 - v0);
		printf("blocks=%ld\n", m);
	} else if (!strcmp(mode, "ontime") && argc == 2) {
		pthread_t th;
		int hold[2];
		if (pipe(hold) < 0 || pthread_create(&th, NULL, blocked_main, &hold[0]))
			return 1;
		pmc_region_t tick = pmc_region("tick"), on = pmc_region("tick-on");
		struct timespec tenth = {0, 100 * 1000 * 1000};
		for (int i = 0; i < 20; i++) {
			run_one_page(tick);
			nanosleep(&tenth, NULL);
		}
		printf("ticked=20\n");
		fflush(stdout);
		for (;;) {
			run_one_page(on);
			nanosleep(&tenth, NULL);
		}
	} else if (!strcmp(mode, "late") && argc == 3) {
		long m = atol(argv[2]);
		pmc_region_t r = pmc_region("late");
		printf("late_id_nonzero=%d\n", r != 0);
		fflush(stdout);
		struct timespec tenth = {0, 100 * 1000 * 1000};
		for (int i = 0; i < 600 && !pmc_enabled(); i++)
			nanosleep(&tenth, NULL);
		for (long i = 0; i < m; i++)
			run_one_page(r);
		printf("done=%ld\n", m);
		fflush(stdout);
		for (;;)
			pause();
	} else if (!strcmp(mode, "orphan") && argc == 4) {
		long n = atol(argv[3]);
		pmc_region_t r = pmc_region("orphan");
		pmc_begin(r);
		pmc_end(r);
		if (pmc_flush() != 0)
			return 1;
		printf("first=done\n");
		fflush(stdout);
		for (int w = 0; w < 600 && access(argv[2], F_OK); w++)
			usleep(100000);
		for (long i = 0; i < n; i++) {
			pmc_begin(r);
			pmc_end(r);
		}
		printf("count=%ld\n", n);
	} else if (!strcmp(mode, "names") && argc == 3) {
		long n = atol(argv[2]);
		char name[32];
		for (long i = 1; i <= n; i++) {
			snprintf(name, sizeof(name), "n%05ld", i);
			PMC_SCOPE(name);
			/* Sent as they come (as "paths" does): 65,540 in a burst outran a daemon
			 * on a loaded machine (a buffer-full line besides the names' one). */
			if (i % 1024 == 0)
				pmc_flush();
		}
		printf("count=%ld\n", n);
	} else if (!strcmp(mode, "longnames") && argc == 3) {
		long k = atol(argv[2]);
		char a[131], b[131];
		memset(a, 'x', 130);
		a[130] = 0;
		memcpy(b, a, sizeof(b));
		a[129] = 'A';
		b[129] = 'B';
		run_one_page(pmc_region("ok")); /* a region counted: the thread registers */
		for (long i = 0; i < k; i++) {
			const char *names[2] = {a, b};
			for (int j = 0; j < 2; j++) {
				PMC_SCOPE(names[j]);
			}
		}
		printf("long_id=%u\n", pmc_region(a));
	} else if (!strcmp(mode, "mismatch") && argc == 3) {
		long k = atol(argv[2]);
		pmc_region_t outer = pmc_region("outer"), inner = pmc_region("inner");
		for (long c = 0; c < k; c++) {
			unsigned char *a = map_pages(1), *b = map_pages(1);
			pmc_begin(outer);
			write_pages(a, 1);
			pmc_begin(inner);
			write_pages(b, 1);
			pmc_end(outer); /* out of order: "inner" is still open */
			pmc_end(inner);
			munmap(a, pagesz);
			munmap(b, pagesz);
		}
		printf("outer_count=%ld\nouter_page_faults=%ld\ndropped=%ld\n", k, 2 * k, k);
	} else if (!strcmp(mode, "window") && argc == 3) {
		long k = atol(argv[2]);
		char name[32];
		volatile uint64_t x = 1;
		for (long i = 0; i < k; i++) {
			snprintf(name, sizeof(name), "w%ld", i);
			pmc_region_t r = pmc_region(name);
			pmc_begin(r);
			for (long j = 0; j < (i % 4) * 1000 * i; j++)
				x = x * 6364136223846793005u + 1442695040888963407u;
			pmc_end(r);
		}
		printf("count=%ld\n", k);
	} else if (!strcmp(mode, "serial") && argc == 4) {
		long t = atol(argv[2]), ms = atol(argv[3]);
		struct timespec gap = {ms / 1000, (ms % 1000) * 1000000L};
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (long i = 0; i < t; i++) {
			pthread_t th;
			int on = -1;
			if (i)
				nanosleep(&gap, NULL);
			if (pthread_create(&th, NULL, serial_main, &on) || pthread_join(th, NULL))
				return 1;
			printf("thread=%ld enabled=%d\n", i, on);
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("elapsed_ms=%ld\n", (long)((t1.tv_sec - t0.tv_sec) * 1000 +
		                                  (t1.tv_nsec - t0.tv_nsec) / 1000000));
	} else if (!strcmp(mode, "timed") && (argc == 4 || argc == 5)) {
		long t = atol(argv[2]), k = atol(argv[3]);
		pthread_t th[64];
		pmc_region_t r;
		if (t < 1 || t > 64)
			return 2;
		atexit(timed_report);
		/* A program's periodic signal (a profiler's SIGPROF, a runtime's timer): every
		 * wait of the library's must end in its bound all the same. */
		const char *alarm_us = getenv("PMC_TEST_ALARM_US");
		if (alarm_us && atol(alarm_us) > 0) {
			struct sigaction sa = {.sa_handler = timed_on_alarm};
			sigemptyset(&sa.sa_mask);
			sigaction(SIGALRM, &sa, NULL);
			struct itimerval it = {{0, atol(alarm_us)}, {0, atol(alarm_us)}};
			setitimer(ITIMER_REAL, &it, NULL);
		}
		TIMED(r = pmc_region("timed"));
		(void)r;
		if (pthread_key_create(&timed_key, timed_thread_gone))
			return 1;
		if (argc == 5) {
			timed_file = argv[4];
			pthread_barrier_init(&timed_meet, NULL, (unsigned)t + 1);
		}
		for (long i = 0; i < t; i++)
			if (pthread_create(&th[i], NULL, timed_main, &k))
				return 1;
		if (timed_file) {
			pthread_barrier_wait(&timed_meet);
			printf("ready\n");
			fflush(stdout);
		}
		for (long i = 0; i < t; i++)
			pthread_join(th[i], NULL);
		printf("runs=%ld\n", t * (k + 1));
		timed_main_end = mono_ns();
		return 0;
	} else if (!strcmp(mode, "retry") && argc == 3) {
		struct retry_arg a = {.lock = PTHREAD_MUTEX_INITIALIZER,
		                      .cond = PTHREAD_COND_INITIALIZER,
		                      .k = atol(argv[2])};
		pthread_t ta, tb;
		if (pthread_create(&ta, NULL, retry_a, &a))
			return 1;
		pthread_mutex_lock(&a.lock);
		while (!a.a_ready)
			pthread_cond_wait(&a.cond, &a.lock);
		pthread_mutex_unlock(&a.lock);
		if (pthread_create(&tb, NULL, retry_b, &a) || pthread_join(ta, NULL) ||
		    pthread_join(tb, NULL))
			return 1;
		printf("runs_b=%ld\nb_enabled=%d\n", a.runs_b, a.b_enabled);
	} else if (!strcmp(mode, "named") && argc == 5) {
		long n = atol(argv[3]), k = atol(argv[4]);
		run_pages(argv[2], n, k);
		printf("count=%ld\npage_faults=%ld\n", k, n * k);
	} else {
		fprintf(stderr, "pmc-test-client: bad arguments\n");
		return 2;
	}
	printf("enabled=%d\n", pmc_enabled());
	return 0;
}
