/* pmc-test-hw: the application of the hardware suite (hw-counters.sh), linked with
 * libpmcclient like any other. Its regions run a loop of exactly 2 instructions per iteration
 * (x86-64: dec; jnz; arm64: subs; b.ne), so the instructions a region counts are 2N plus a
 * constant: what pmc_begin()/pmc_end() execute between their two counter reads. Each process
 * and thread runs one region "warm-up" first. Prints its ground truth as "key=value" lines.
 *
 *   loop NAME N K        K regions NAME of N iterations; prints instructions=2N and rdpmc=0|1
 *                        (pmc_thread_uses_rdpmc() after the last region)
 *   threads T NAME N K   T threads at once, each K regions NAME of N iterations; prints rdpmc=
 *                        the smallest pmc_thread_uses_rdpmc() of the T threads
 *   fork NAME N K        K regions NAME, then a child process does the same (its pmc state
 *                        is its own: the library closed the parent's counters in it) and
 *                        prints child_pid= and child_rdpmc=; the parent waits for it
 *   exec NAME N K        K regions NAME, pmc_flush(), prints exec_rdpmc=, then execs itself
 *                        as "loop NAME-exec N K" (same pid, new image, new registration)
 *   deep NAME N K        K regions NAME of N iterations, each inside 32 regions "deep-outer":
 *                        at depth 32, where the first one finds the thread's frames full and
 *                        grows them (each must still count the same constant)
 *   wall NAME N K        K regions NAME, each timed by CLOCK_MONOTONIC_RAW inside (after
 *                        pmc_begin, before pmc_end) and around it: prints inner_sum=,
 *                        inner_min=, outer_sum=, outer_max= (ns), the bounds of the wall
 *                        times pmc reports (its clock is the page's where it has one)
 *   pairs NAME P N K     K rounds of P pairs of nested regions: NAME-oI around NAME-iI around
 *                        N iterations, I from 0 to P-1 (many names: more paths than a cache)
 *   empty NAME K         K empty regions NAME (pmc_begin(); pmc_end()): what the library
 *                        counts of its own, which pmcctl's floor must equal
 *   cold MODE ...        MODE (loop or threads) without the warm-up: each thread registers in
 *                        the pmc_begin() of its first region NAME
 *   early MODE ...       MODE (loop or threads) without the warm-up, each thread registered
 *                        by pmc_enabled() before its first region NAME (the process's first
 *                        thread before it looks its name up), which follows 10 ms later
 *   early-now MODE ...   as early, the first region at once after pmc_enabled()
 *   busy NAME N K        loop's K regions beside a thread that spins on the same CPU (no
 *                        region of its own): the scheduler's ticks switch between them, some
 *                        inside a pass over a counter's page, which the kernel then updates
 *   names NAME N K       K regions of N iterations at one PMC_SCOPE call site whose name is
 *                        chosen at run time (a buffer): NAME-a or NAME-b, each after itself
 *                        and after the other (a a b b b a a b b b ...); then K regions
 *                        PMC_SCOPE("names-literal") of N iterations
 *
 * Exit 0 on success, 1 on a failure (said on stderr), 2 on a usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pmc/pmc.h>

#include "hw-loop.h"

struct work {
	const char *name;
	uint64_t n;
	long k;
	int rdpmc;
};

/* "cold": no warm-up region, the first region registers the thread; "early": no warm-up
 * region, pmc_enabled() registers the thread before its first region, 10 ms before it
 * ("early-now": at once before it, the thread not scheduled out in between). */
static int cold, early, early_now;

/* One region "warm-up", as each process and thread runs first (but "cold"). */
static void
warm_up(void)
{
	if (early) {
		pmc_enabled();
		if (!early_now)
			nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
	}
	if (cold || early)
		return;
	pmc_region_t warm = pmc_region("warm-up");

	pmc_begin(warm);
	hw_loop2(1);
	pmc_end(warm);
}

/* One warm-up region, then K regions of N iterations; keeps pmc_thread_uses_rdpmc(). */
static void
run_regions(struct work *w)
{
	pmc_region_t r = pmc_region(w->name);

	warm_up();
	for (long i = 0; i < w->k; i++) {
		pmc_begin(r);
		hw_loop2(w->n);
		pmc_end(r);
	}
	w->rdpmc = pmc_thread_uses_rdpmc();
}

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static _Atomic int spin_stop;

static void *
spin(void *arg)
{
	(void)arg;
	while (!atomic_load_explicit(&spin_stop, memory_order_relaxed))
		;
	return NULL;
}

/* run_regions() beside a thread that spins on this thread's CPU. */
static void
run_busy(struct work *w)
{
	cpu_set_t one;
	pthread_t th;

	CPU_ZERO(&one);
	CPU_SET(sched_getcpu(), &one);
	if (pthread_setaffinity_np(pthread_self(), sizeof(one), &one) ||
	    pthread_create(&th, NULL, spin, NULL) ||
	    pthread_setaffinity_np(th, sizeof(one), &one)) {
		fprintf(stderr, "pmc-test-hw: busy: cannot start the spinning thread\n");
		exit(1);
	}
	run_regions(w);
	atomic_store(&spin_stop, 1);
	pthread_join(th, NULL);
}

/* K regions of N iterations, each timed inside and around by CLOCK_MONOTONIC_RAW. */
static void
run_walls(const struct work *w)
{
	pmc_region_t r = pmc_region(w->name);
	uint64_t in_sum = 0, in_min = UINT64_MAX, out_sum = 0, out_max = 0;

	warm_up();
	for (long i = 0; i < w->k; i++) {
		uint64_t a = now_ns();
		pmc_begin(r);
		uint64_t b = now_ns();
		hw_loop2(w->n);
		uint64_t c = now_ns();
		pmc_end(r);
		uint64_t d = now_ns();
		in_sum += c - b;
		out_sum += d - a;
		if (c - b < in_min)
			in_min = c - b;
		if (d - a > out_max)
			out_max = d - a;
	}
	printf("inner_sum=%" PRIu64 "\ninner_min=%" PRIu64 "\nouter_sum=%" PRIu64
	       "\nouter_max=%" PRIu64 "\nrdpmc=%d\n",
	       in_sum, in_min, out_sum, out_max, pmc_thread_uses_rdpmc());
}

/* K regions of N iterations at depth 32 (inside 32 others), the first one growing the frames. */
static void
run_deep(const struct work *w)
{
	pmc_region_t outer = pmc_region("deep-outer");
	pmc_region_t r = pmc_region(w->name);

	warm_up();
	for (long i = 0; i < w->k; i++) {
		for (int d = 0; d < 32; d++)
			pmc_begin(outer);
		pmc_begin(r);
		hw_loop2(w->n);
		pmc_end(r);
		for (int d = 0; d < 32; d++)
			pmc_end(outer);
	}
	printf("rdpmc=%d\n", pmc_thread_uses_rdpmc());
}

/* K rounds of P pairs of nested regions (NAME-oI { NAME-iI { N iterations } }). */
static int
run_pairs(const struct work *w, long p)
{
	pmc_region_t(*r)[2] = calloc((size_t)p, sizeof(*r));
	if (!r) {
		fprintf(stderr, "pmc-test-hw: out of memory\n");
		return 1;
	}
	for (long i = 0; i < p; i++) {
		char name[256];
		snprintf(name, sizeof(name), "%s-o%ld", w->name, i);
		r[i][0] = pmc_region(name);
		snprintf(name, sizeof(name), "%s-i%ld", w->name, i);
		r[i][1] = pmc_region(name);
	}
	warm_up();
	for (long k = 0; k < w->k; k++) {
		for (long i = 0; i < p; i++) {
			pmc_begin(r[i][0]);
			pmc_begin(r[i][1]);
			hw_loop2(w->n);
			pmc_end(r[i][1]);
			pmc_end(r[i][0]);
		}
		/* Each round's samples sent between rounds: a round of fewer than 128 pairs
		 * never wakes the background thread (at 256 samples) inside a region. */
		pmc_flush();
	}
	free(r);
	printf("rdpmc=%d\n", pmc_thread_uses_rdpmc());
	return 0;
}

/* K regions at one call site whose name is chosen at run time, then K of a literal name. */
static void
run_names(const struct work *w)
{
	char name[2][128];

	snprintf(name[0], sizeof(name[0]), "%s-a", w->name);
	snprintf(name[1], sizeof(name[1]), "%s-b", w->name);
	warm_up();
	for (long i = 0; i < w->k; i++) {
		PMC_SCOPE(name[i % 5 >= 2]);
		hw_loop2(w->n);
	}
	for (long i = 0; i < w->k; i++) {
		PMC_SCOPE("names-literal");
		hw_loop2(w->n);
	}
	printf("rdpmc=%d\n", pmc_thread_uses_rdpmc());
}

/* K empty regions. */
static void
run_empty(const char *name, long k)
{
	pmc_region_t r = pmc_region(name);

	warm_up();
	/* A volatile count: its update stays after pmc_end() (the compiler put the loop's
	 * increment between the calls), so that the region is the usual pmc_begin(r);
	 * pmc_end(r), one instruction between the calls (r into the argument register). */
	for (volatile long i = 0; i < k; i++) {
		pmc_begin(r);
		pmc_end(r);
	}
	printf("rdpmc=%d\n", pmc_thread_uses_rdpmc());
}

static void *
thread_main(void *p)
{
	run_regions(p);
	return NULL;
}

static uint64_t
parse_u64(const char *s, uint64_t min)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end || v < min) {
		fprintf(stderr, "pmc-test-hw: bad number '%s'\n", s);
		exit(2);
	}
	return v;
}

static int
usage(void)
{
	fprintf(stderr,
	        "usage: pmc-test-hw [cold|early|early-now] loop|fork|exec|deep|wall|busy|names "
	        "NAME N K "
	        "| "
	        "[cold|early|early-now] threads T NAME N K | pairs NAME P N K | empty NAME K\n");
	return 2;
}

int
main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "cold") || !strcmp(argv[1], "early") ||
	    !strcmp(argv[1], "early-now")) {
		cold = !strcmp(argv[1], "cold");
		early = !cold;
		early_now = !strcmp(argv[1], "early-now");
		if (early)
			pmc_enabled();
		argv++;
		argc--;
		if (argc < 2)
			return usage();
	}
	const char *mode = argv[1];
	long threads = 0;

	if (!strcmp(mode, "empty")) {
		if (argc != 4)
			return usage();
		run_empty(argv[2], (long)parse_u64(argv[3], 1));
		return 0;
	}
	if (!strcmp(mode, "pairs")) {
		if (argc != 6)
			return usage();
		long p = (long)parse_u64(argv[3], 1);
		struct work w = {.name = argv[2],
		                 .n = parse_u64(argv[4], 1),
		                 .k = (long)parse_u64(argv[5], 1)};
		printf("instructions=%" PRIu64 "\n", 2 * w.n);
		return run_pairs(&w, p);
	}

	if (!strcmp(mode, "threads")) {
		if (argc != 6)
			return usage();
		threads = (long)parse_u64(argv[2], 1);
		argv++;
		argc--;
	} else if (argc != 5) {
		return usage();
	}
	struct work w = {
	        .name = argv[2], .n = parse_u64(argv[3], 1), .k = (long)parse_u64(argv[4], 1)};

	if (!strcmp(mode, "wall")) {
		run_walls(&w);
		return 0;
	}
	if (!strcmp(mode, "names")) {
		printf("instructions=%" PRIu64 "\n", 2 * w.n);
		run_names(&w);
		return 0;
	}
	if (!strcmp(mode, "deep")) {
		printf("instructions=%" PRIu64 "\n", 2 * w.n);
		run_deep(&w);
		return 0;
	}
	if (!strcmp(mode, "busy")) {
		printf("instructions=%" PRIu64 "\n", 2 * w.n);
		run_busy(&w);
		printf("rdpmc=%d\n", w.rdpmc);
		return 0;
	}
	if (strcmp(mode, "exec"))
		printf("instructions=%" PRIu64 "\n", 2 * w.n);
	if (threads) {
		pthread_t tid[64];
		struct work tw[64];
		int rdpmc = 1;

		if (threads > 64)
			return usage();
		for (long i = 0; i < threads; i++) {
			tw[i] = w;
			if (pthread_create(&tid[i], NULL, thread_main, &tw[i])) {
				fprintf(stderr, "pmc-test-hw: pthread_create failed\n");
				return 1;
			}
		}
		for (long i = 0; i < threads; i++) {
			pthread_join(tid[i], NULL);
			if (tw[i].rdpmc < rdpmc)
				rdpmc = tw[i].rdpmc;
		}
		printf("rdpmc=%d\n", rdpmc);
		return 0;
	}
	run_regions(&w);
	if (!strcmp(mode, "exec")) {
		char name[256];

		snprintf(name, sizeof(name), "%s-exec", w.name);
		pmc_flush();
		printf("exec_rdpmc=%d\n", w.rdpmc);
		execl("/proc/self/exe", argv[0], "loop", name, argv[3], argv[4], (char *)NULL);
		perror("pmc-test-hw: exec");
		return 1;
	}
	printf("rdpmc=%d\n", w.rdpmc);
	if (!strcmp(mode, "loop"))
		return 0;
	if (!strcmp(mode, "fork")) {
		pid_t pid = fork();
		if (pid < 0) {
			perror("pmc-test-hw: fork");
			return 1;
		}
		if (pid == 0) {
			run_regions(&w);
			printf("child_pid=%d\nchild_rdpmc=%d\n", (int)getpid(), w.rdpmc);
			exit(0);
		}
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "pmc-test-hw: the child failed\n");
			return 1;
		}
		return 0;
	}
	return usage();
}
