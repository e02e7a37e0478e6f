/* pmc-bench-region: what a region costs an application, and what a registered thread costs it
 * in memory, measured through libpmcclient against a running pmcdaemon.
 *
 *   pmc-bench-region time [REPS [ITERS]]
 *	One region (begin + end around an empty body) through pmc_begin()/pmc_end() with an id
 *	interned beforehand, through PMC_REGION, through PAPI's high-level API
 *	(PAPI_hl_region_begin/end, when built with PAPI and PAPI can count these events here),
 *	and the floor for the same path: what reading the same counters costs with nothing
 *	around it. The floor opens its own group of the same events (the daemon's attributes)
 *	on this thread and does what a region must do at the least: where the counters' user
 *	pages allow rdpmc, two inline rdpmc sequences (client/lib/reader.h) over every event;
 *	otherwise two read()s of the group (PERF_FORMAT_GROUP | TOTAL_TIME_ENABLED |
 *	TOTAL_TIME_RUNNING); plus two clock_gettime(CLOCK_MONOTONIC) for the wall time, in the
 *	order the library does them. The variants alternate in blocks of ITERS regions, REPS
 *	times (the starting variant rotates); each prints the median ns per region of the
 *	thread's CPU time (CLOCK_THREAD_CPUTIME_ID: the time other processes take the CPU is
 *	not the region's cost; the wall-time median is printed too) and the median of its
 *	per-repetition ratio to the floor measured in the same repetition.
 *	Events: PMC_EVENTS (default: the four software events); PAPI gets the same ones through
 *	PAPI_EVENTS (set here).
 *
 *   pmc-bench-region instructions [REPS [ITERS]]
 *	The same regions (pmc_begin/pmc_end, PMC_REGION, the floor), their cost counted in
 *	instructions by the PMU itself: the thread's own instruction counters (user mode and
 *	kernel mode, pinned, read with read()) around ITERS regions, less the same loop empty,
 *	divided by ITERS: everything the application pays per region, the amortized encoding and
 *	sending of its batches included (ITERS a multiple of the library's batch of 512). Exact
 *	and repeatable where the PMU counts exactly (QEMU's emulated arm64 PMU under -icount:
 *	tests/hw/emulated-pmu.sh); elsewhere the smallest of REPS blocks. Needs a hardware PMU and
 *	the right to count itself (root). The floor runs on a thread of its own, so that neither
 *	thread's counters multiplex. Where the leader's page has the clock (cap_user_time_zero),
 *	which the library then takes the wall time from instead of clock_gettime(), a second
 *	floor does the same (floor_page_*: the two reader passes alone, the leader's with the
 *	page's clock) and pmc_instr_*_page_ratio says what the library adds to it. Where every
 *	page gives its counter and the leader's the clock, the minimal floor (floor_min_*,
 *	bench/floor-min.h, written apart from the library's reader): one seqlock pass per event
 *	and region end, the leader's with the clock and its enabled/running times, and the
 *	deltas; pmc_instr_*_min_ratio is the library against it. And F3 (floor_f3_*,
 *	bench/floor-f3.h): issue 33's floor, the same passes with compiler barriers only, the
 *	counter by a computed branch, the deltas into an accumulator; pmc_instr_*_f3_ratio.
 *
 *   pmc-bench-region memory NTHREADS
 *	Heap (malloc accounting, one arena) and resident memory that NTHREADS threads add while
 *	alive when each has registered with the daemon (one region each), minus the same
 *	threads that did not: the client library's memory per registered thread.
 *
 * Output: key=value lines on stdout for bench/run; diagnostics on stderr; exit 1 on failure.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <pmc/pmc.h>

#include "bench.h"
#include "floor-f3.h"
#include "floor-min.h"
#include "lib/reader.h"

#ifdef PMC_BENCH_PAPI
#include <papi.h>
#endif

enum { V_FLOOR, V_PMC, V_MACRO, V_PAPI, V_COUNT };

static const char *const variant_key[V_COUNT] = {"floor", "pmc", "macro", "papi"};

#define MAX_REPS 101

struct floor {
	int n;
	int fds[BENCH_MAX_EVENTS];
	const struct perf_event_mmap_page *pages[BENCH_MAX_EVENTS];
	int rdpmc;
	int page_clock; /* rdpmc, and the leader's page has the clock (cap_user_time_zero) */
};

/* Keeps the compiler from dropping what the loops compute. */
static volatile uint64_t sink;

static int
floor_open(struct floor *f, const struct bench_event *const *ev, int n)
{
	long pagesz = sysconf(_SC_PAGESIZE);
	int r = bench_open_group(ev, n, f->fds);

	if (r < 0)
		return r;
	f->n = n;
	/* The same test as the client library: rdpmc only when every page allows it and the
	 * leader's page has the clock (cap_user_time). */
	f->rdpmc = PMC_HAVE_RDPMC;
	for (int i = 0; i < n; i++) {
		void *p = mmap(NULL, (size_t)pagesz, PROT_READ, MAP_SHARED, f->fds[i], 0);

		f->pages[i] = p == MAP_FAILED ? NULL : p;
		struct pmc_reading rd;
		if (!f->pages[i] || pmc_reader_read(f->pages[i], &pmc_reader_hw_ops, &rd) < 0 ||
		    (i == 0 && !f->pages[i]->cap_user_time))
			f->rdpmc = 0;
	}
	f->page_clock = f->rdpmc && f->pages[0]->cap_user_time_zero;
	return 0;
}

/* One read of every counter, as the client library does it at begin and at end. */
static inline void
floor_read(const struct floor *f, uint64_t *buf)
{
	if (f->rdpmc) {
		/* One group: the leader with its times (brought up to date with rdtsc), the
		 * members' counts alone, each checked, as the library does it. */
		struct pmc_reading rd;
		if (pmc_reader_read(f->pages[0], &pmc_reader_hw_ops, &rd) == 0) {
			buf[1] = rd.enabled;
			buf[2] = rd.running;
			buf[3] = rd.value;
		} else {
			buf[3] = 0;
		}
		for (int i = 1; i < f->n; i++)
			if (pmc_reader_read_count(f->pages[i], &pmc_reader_hw_ops, &buf[3 + i]) < 0)
				buf[3 + i] = 0;
		return;
	}
	if (read(f->fds[0], buf, (3 + (size_t)f->n) * sizeof(uint64_t)) < 0)
		buf[3] = 0;
}

/* floor_read() through the pages, the leader's with the page's clock (a floor->page_clock). */
static inline uint64_t
floor_read_page(const struct floor *f, uint64_t *buf)
{
	struct pmc_reading rd;
	uint64_t clock = 0;
	if (pmc_reader_read_clocked(f->pages[0], &pmc_reader_hw_ops, &rd) == 0) {
		buf[1] = rd.enabled;
		buf[2] = rd.running;
		buf[3] = rd.value;
		clock = rd.clock;
	} else {
		buf[3] = 0;
	}
	for (int i = 1; i < f->n; i++)
		if (pmc_reader_read_count(f->pages[i], &pmc_reader_hw_ops, &buf[3 + i]) < 0)
			buf[3 + i] = 0;
	return clock;
}

/* The floor of a library that takes the wall time from the clock its reader reads anyway (the
 * leader's page), as libpmcclient does where the page has it: no clock_gettime. */
static void
run_floor_page(const struct floor *f, long iters)
{
	uint64_t a[3 + BENCH_MAX_EVENTS], b[3 + BENCH_MAX_EVENTS], acc = 0;

	for (long i = 0; i < iters; i++) {
		uint64_t w0 = floor_read_page(f, a);
		__asm__ __volatile__("" ::: "memory");
		uint64_t w1 = floor_read_page(f, b);
		acc += (w1 - w0) + (b[3] - a[3]);
	}
	sink = acc;
}

/* The minimal floor (floor-min.h), or with @f3 issue 33's F3 (floor-f3.h): both ends' passes,
 * and the deltas a sample holds added into an accumulator. */
static inline __attribute__((always_inline)) void
run_floor_min(const struct floor *f, long iters, bool f3)
{
	uint64_t a[BENCH_MAX_EVENTS], b[BENCH_MAX_EVENTS], ta[3], tb[3], acc = 0;
	int n = f->n;

	for (long i = 0; i < iters; i++) {
		a[0] = f3 ? f3_leader(f->pages[0], ta) : fm_leader(f->pages[0], ta);
		for (int j = 1; j < n; j++)
			a[j] = f3 ? f3_count(f->pages[j]) : fm_count(f->pages[j]);
		__asm__ __volatile__("" ::: "memory");
		b[0] = f3 ? f3_leader(f->pages[0], tb) : fm_leader(f->pages[0], tb);
		for (int j = 1; j < n; j++)
			b[j] = f3 ? f3_count(f->pages[j]) : fm_count(f->pages[j]);
		acc += (tb[0] - ta[0]) + (tb[1] - ta[1]) + (tb[2] - ta[2]);
		for (int j = 0; j < n; j++)
			acc += b[j] - a[j];
	}
	sink = acc;
}

static void
run_floor(const struct floor *f, long iters)
{
	uint64_t a[3 + BENCH_MAX_EVENTS], b[3 + BENCH_MAX_EVENTS], acc = 0;

	for (long i = 0; i < iters; i++) {
		floor_read(f, a);
		uint64_t w0 = bench_now_ns();
		__asm__ __volatile__("" ::: "memory");
		uint64_t w1 = bench_now_ns();
		floor_read(f, b);
		acc += (w1 - w0) + (b[3] - a[3]);
	}
	sink = acc;
}

static void
run_pmc(pmc_region_t id, long iters)
{
	for (long i = 0; i < iters; i++) {
		pmc_begin(id);
		__asm__ __volatile__("" ::: "memory");
		pmc_end(id);
	}
}

static void
run_macro(long iters)
{
	for (long i = 0; i < iters; i++) {
		PMC_REGION("bench-macro")
		{
			__asm__ __volatile__("" ::: "memory");
		}
	}
}

#ifdef PMC_BENCH_PAPI
static void
run_papi(long iters)
{
	for (long i = 0; i < iters; i++) {
		PAPI_hl_region_begin("bench-papi");
		__asm__ __volatile__("" ::: "memory");
		PAPI_hl_region_end("bench-papi");
	}
}

/* Whether PAPI can count @ev here; if not, @why gets PAPI's own words. Leaves PAPI_EVENTS set
 * for the high-level API and makes its first (initialising) region. */
static int
papi_probe(const struct bench_event *const *ev, int n, char *why, size_t len)
{
	char list[512] = "";
	int r = PAPI_library_init(PAPI_VER_CURRENT);

	if (r != PAPI_VER_CURRENT) {
		snprintf(why, len, "PAPI_library_init: %s", PAPI_strerror(r));
		return -1;
	}
	int cid = PAPI_get_component_index("perf_event");
	const PAPI_component_info_t *ci = cid >= 0 ? PAPI_get_component_info(cid) : NULL;
	if (!ci) {
		snprintf(why, len, "PAPI has no perf_event component");
		return -1;
	}
	if (ci->disabled) {
		snprintf(why, len, "PAPI's perf_event component is disabled: %.400s",
		         ci->disabled_reason);
		return -1;
	}
	int set = PAPI_NULL;
	r = PAPI_create_eventset(&set);
	for (int i = 0; r == PAPI_OK && i < n; i++) {
		r = PAPI_add_named_event(set, ev[i]->papi);
		if (r != PAPI_OK) {
			snprintf(why, len, "PAPI_add_named_event(%s): %s", ev[i]->papi,
			         PAPI_strerror(r));
			break;
		}
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? "," : "",
		         ev[i]->papi);
	}
	if (r == PAPI_OK && (r = PAPI_start(set)) != PAPI_OK)
		snprintf(why, len, "PAPI_start: %s", PAPI_strerror(r));
	if (r == PAPI_OK) {
		long long v[BENCH_MAX_EVENTS];
		PAPI_stop(set, v);
	}
	if (set != PAPI_NULL) {
		PAPI_cleanup_eventset(set);
		PAPI_destroy_eventset(&set);
	}
	if (r != PAPI_OK)
		return -1;
	setenv("PAPI_EVENTS", list, 1);
	r = PAPI_hl_region_begin("bench-papi");
	if (r == PAPI_OK)
		r = PAPI_hl_region_end("bench-papi");
	if (r != PAPI_OK) {
		snprintf(why, len, "PAPI_hl_region_begin/end: %s", PAPI_strerror(r));
		return -1;
	}
	return 0;
}
#endif

/* Runs @iters regions of variant @v; sets the thread's CPU time and the wall time per region. */
static void
run_variant(int v, const struct floor *f, pmc_region_t id, long iters, double *cpu, double *wall)
{
	uint64_t w0 = bench_now_ns(), c0 = bench_cpu_ns();

	switch (v) {
	case V_FLOOR:
		run_floor(f, iters);
		break;
	case V_PMC:
		run_pmc(id, iters);
		break;
	case V_MACRO:
		run_macro(iters);
		break;
#ifdef PMC_BENCH_PAPI
	case V_PAPI:
		run_papi(iters);
		break;
#endif
	}
	*cpu = (double)(bench_cpu_ns() - c0) / (double)iters;
	*wall = (double)(bench_now_ns() - w0) / (double)iters;
}

static const char *
events_env(void)
{
	const char *env = getenv("PMC_EVENTS");

	if (!env || !*env) {
		setenv("PMC_EVENTS", BENCH_DEFAULT_EVENTS, 1);
		env = BENCH_DEFAULT_EVENTS;
	}
	return env;
}

static int
cmd_time(int reps, long iters)
{
	const struct bench_event *ev[BENCH_MAX_EVENTS];
	const char *list = events_env();
	int n = bench_parse_events(list, ev);
	struct floor f = {0};
	char papi_why[512] = "PAPI not built in (papi.h was not found at configure time)";
	int have[V_COUNT] = {1, 1, 1, 0};
	static double ns[V_COUNT][MAX_REPS], wall[V_COUNT][MAX_REPS], ratio[V_COUNT][MAX_REPS];
	double unused;

	if (n < 0)
		return 1;
	int r = floor_open(&f, ev, n);
	if (r < 0) {
		fprintf(stderr, "pmc-bench-region: perf_event_open(%s): %s\n", list, strerror(-r));
		return 1;
	}
	pmc_region_t id = pmc_region("bench-begin-end");
	pmc_begin(id);
	pmc_end(id);
	if (!id || !pmc_enabled()) {
		fprintf(stderr, "pmc-bench-region: libpmcclient is not profiling (no daemon at "
		                "PMC_SOCKET?)\n");
		return 1;
	}
#ifdef PMC_BENCH_PAPI
	have[V_PAPI] = papi_probe(ev, n, papi_why, sizeof(papi_why)) == 0;
#endif

	for (int v = 0; v < V_COUNT; v++)
		if (have[v])
			run_variant(v, &f, id, iters, &unused, &unused); /* warm-up */
	for (int rep = 0; rep < reps; rep++) {
		for (int k = 0; k < V_COUNT; k++) {
			int v = (rep + k) % V_COUNT;

			if (have[v])
				run_variant(v, &f, id, iters, &ns[v][rep], &wall[v][rep]);
		}
		for (int v = 0; v < V_COUNT; v++)
			ratio[v][rep] = ns[v][rep] / ns[V_FLOOR][rep];
	}
	pmc_flush();

	printf("events=%s\nn_events=%d\nreps=%d\niters=%ld\n", list, n, reps, iters);
	printf("floor_kind=%s\n", f.rdpmc ? "rdpmc" : "read");
	for (int v = 0; v < V_COUNT; v++) {
		if (!have[v])
			continue;
		printf("%s_ns=%.1f\n", variant_key[v], bench_median(ns[v], (size_t)reps));
		printf("%s_ratio=%.3f\n", variant_key[v], bench_median(ratio[v], (size_t)reps));
		printf("%s_wall_ns=%.1f\n", variant_key[v], bench_median(wall[v], (size_t)reps));
	}
	if (!have[V_PAPI])
		printf("papi_error=%s\n", papi_why);
	return 0;
}

/* The calling thread's own instruction counters: [0] user mode, [1] kernel mode; pinned, so that
 * they never leave the PMU whatever else the thread counts. */
struct icount {
	int fd[2];
};

static int
icount_open(struct icount *c)
{
	for (int k = 0; k < 2; k++) {
		struct perf_event_attr attr = {.size = sizeof(attr),
		                               .type = PERF_TYPE_HARDWARE,
		                               .config = PERF_COUNT_HW_INSTRUCTIONS,
		                               .exclude_user = k == 1,
		                               .exclude_kernel = k == 0,
		                               .exclude_hv = 1,
		                               .pinned = 1};
		c->fd[k] =
		        (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
		if (c->fd[k] < 0) {
			int r = -errno;
			if (k)
				close(c->fd[0]);
			return r;
		}
	}
	return 0;
}

static void
icount_read(const struct icount *c, uint64_t *v)
{
	for (int k = 0; k < 2; k++)
		if (read(c->fd[k], &v[k], sizeof(v[k])) != sizeof(v[k]))
			v[k] = 0;
}

static void
icount_close(struct icount *c)
{
	close(c->fd[0]);
	close(c->fd[1]);
}

enum { I_EMPTY = V_COUNT, I_FLOOR_PAGE, I_FLOOR_MIN, I_FLOOR_F3, I_COUNT };

static void
run_empty(long iters)
{
	for (long i = 0; i < iters; i++)
		__asm__ __volatile__("" ::: "memory");
}

/* The instructions (user, kernel) of the smallest of @reps blocks of @iters regions of @v. */
static void
icount_variant(const struct icount *c, int v, const struct floor *f, pmc_region_t id, int reps,
               long iters, uint64_t *best)
{
	best[0] = best[1] = UINT64_MAX;
	for (int rep = 0; rep < reps; rep++) {
		uint64_t a[2], b[2];

		icount_read(c, a);
		switch (v) {
		case V_FLOOR:
			run_floor(f, iters);
			break;
		case V_PMC:
			run_pmc(id, iters);
			break;
		case V_MACRO:
			run_macro(iters);
			break;
		case I_FLOOR_PAGE:
			run_floor_page(f, iters);
			break;
		case I_FLOOR_MIN:
		case I_FLOOR_F3:
			/* A constant per call: each loop compiled for its floor alone. */
			if (v == I_FLOOR_F3)
				run_floor_min(f, iters, true);
			else
				run_floor_min(f, iters, false);
			break;
		default:
			run_empty(iters);
			break;
		}
		icount_read(c, b);
		for (int k = 0; k < 2; k++)
			if (b[k] - a[k] < best[k])
				best[k] = b[k] - a[k];
	}
}

struct icount_floor {
	const struct bench_event *const *ev;
	int n, reps;
	long iters;
	int r, rdpmc, page_clock;
	int min_ok; /* floor_min_usable() */
	uint64_t floor[2], floor_page[2], floor_min[2], floor_f3[2], empty[2];
};

static void *
icount_floor_main(void *arg)
{
	struct icount_floor *p = arg;
	struct floor f = {0};
	struct icount c;

	p->r = icount_open(&c);
	if (p->r < 0)
		return NULL;
	p->r = floor_open(&f, p->ev, p->n);
	if (p->r == 0) {
		p->rdpmc = f.rdpmc;
		p->page_clock = f.page_clock;
		icount_variant(&c, I_EMPTY, &f, 0, 1, p->iters, p->empty); /* warm-up */
		icount_variant(&c, V_FLOOR, &f, 0, 1, p->iters, p->floor);
		icount_variant(&c, I_EMPTY, &f, 0, p->reps, p->iters, p->empty);
		icount_variant(&c, V_FLOOR, &f, 0, p->reps, p->iters, p->floor);
		if (f.page_clock)
			icount_variant(&c, I_FLOOR_PAGE, &f, 0, p->reps, p->iters, p->floor_page);
		p->min_ok = floor_min_usable(f.pages, f.n);
		if (p->min_ok) {
			icount_variant(&c, I_FLOOR_MIN, &f, 0, 1, p->iters, p->floor_min);
			icount_variant(&c, I_FLOOR_MIN, &f, 0, p->reps, p->iters, p->floor_min);
			icount_variant(&c, I_FLOOR_F3, &f, 0, 1, p->iters, p->floor_f3);
			icount_variant(&c, I_FLOOR_F3, &f, 0, p->reps, p->iters, p->floor_f3);
		}
		for (int i = 0; i < f.n; i++)
			close(f.fds[i]);
	}
	icount_close(&c);
	return NULL;
}

static int
cmd_instructions(int reps, long iters)
{
	const struct bench_event *ev[BENCH_MAX_EVENTS];
	const char *list = events_env();
	int n = bench_parse_events(list, ev);
	struct icount c;
	uint64_t in[I_COUNT][2];
	pthread_t th;

	if (n < 0)
		return 1;
	pmc_region_t id = pmc_region("bench-begin-end");
	pmc_begin(id);
	pmc_end(id);
	if (!id || !pmc_enabled()) {
		fprintf(stderr, "pmc-bench-region: libpmcclient is not profiling (no daemon at "
		                "PMC_SOCKET?)\n");
		return 1;
	}
	int r = icount_open(&c);
	if (r < 0) {
		fprintf(stderr, "pmc-bench-region: perf_event_open(instructions, pinned): %s\n",
		        strerror(-r));
		return 1;
	}
	/* A first block of each (the library's buffers, the macro's id), then the measured ones. */
	for (int v = V_PMC; v <= V_MACRO; v++)
		icount_variant(&c, v, NULL, id, 1, iters, in[v]);
	icount_variant(&c, I_EMPTY, NULL, id, reps, iters, in[I_EMPTY]);
	icount_variant(&c, V_PMC, NULL, id, reps, iters, in[V_PMC]);
	icount_variant(&c, V_MACRO, NULL, id, reps, iters, in[V_MACRO]);
	int path = pmc_thread_uses_rdpmc();
	icount_close(&c);
	pmc_flush();

	struct icount_floor fl = {.ev = ev, .n = n, .reps = reps, .iters = iters};
	if (pthread_create(&th, NULL, icount_floor_main, &fl) || pthread_join(th, NULL)) {
		fprintf(stderr, "pmc-bench-region: pthread_create failed\n");
		return 1;
	}
	if (fl.r < 0) {
		fprintf(stderr, "pmc-bench-region: the floor's perf_event_open(%s): %s\n", list,
		        strerror(-fl.r));
		return 1;
	}
	printf("events=%s\nn_events=%d\nreps=%d\niters=%ld\n", list, n, reps, iters);
	printf("floor_kind=%s\npmc_kind=%s\n", fl.rdpmc ? "rdpmc" : "read",
	       path == 1 ? "rdpmc" : "read");
	static const char *const mode[2] = {"user", "kernel"};
	for (int k = 0; k < 2; k++) {
		double floor = ((double)fl.floor[k] - (double)fl.empty[k]) / (double)iters;

		printf("floor_instr_%s=%.1f\n", mode[k], floor);
		/* The floor without clock_gettime: what pmc pays beyond its reads alone. */
		double floor_page =
		        ((double)fl.floor_page[k] - (double)fl.empty[k]) / (double)iters;
		if (fl.min_ok) {
			double x = ((double)in[V_PMC][k] - (double)in[I_EMPTY][k]) / (double)iters;
			double m = ((double)fl.floor_min[k] - (double)fl.empty[k]) / (double)iters;
			printf("floor_min_instr_%s=%.1f\n", mode[k], m);
			printf("pmc_instr_%s_min_ratio=%.3f\n", mode[k], m > 0 ? x / m : 0);
			double f3 = ((double)fl.floor_f3[k] - (double)fl.empty[k]) / (double)iters;
			printf("floor_f3_instr_%s=%.1f\n", mode[k], f3);
			printf("pmc_instr_%s_f3_ratio=%.3f\n", mode[k], f3 > 0 ? x / f3 : 0);
		}
		if (fl.page_clock) {
			double x = ((double)in[V_PMC][k] - (double)in[I_EMPTY][k]) / (double)iters;
			printf("floor_page_instr_%s=%.1f\n", mode[k], floor_page);
			printf("pmc_instr_%s_page_ratio=%.3f\n", mode[k],
			       floor_page > 0 ? x / floor_page : 0);
		}
		for (int v = V_PMC; v <= V_MACRO; v++) {
			double x = ((double)in[v][k] - (double)in[I_EMPTY][k]) / (double)iters;

			printf("%s_instr_%s=%.1f\n", variant_key[v], mode[k], x);
			printf("%s_instr_%s_ratio=%.3f\n", variant_key[v], mode[k],
			       floor > 0 ? x / floor : 0);
		}
	}
	return 0;
}

struct mem_phase {
	pthread_barrier_t ready, release;
	pmc_region_t id;
	int do_register;
};

static void *
mem_thread(void *arg)
{
	struct mem_phase *p = arg;

	if (p->do_register) {
		pmc_begin(p->id);
		pmc_end(p->id);
	}
	pthread_barrier_wait(&p->ready);
	pthread_barrier_wait(&p->release);
	return NULL;
}

static size_t
resident_bytes(void)
{
	unsigned long size = 0, resident = 0;
	FILE *fp = fopen("/proc/self/statm", "re");

	if (fp) {
		if (fscanf(fp, "%lu %lu", &size, &resident) != 2)
			resident = 0;
		fclose(fp);
	}
	return resident * (size_t)sysconf(_SC_PAGESIZE);
}

static size_t
heap_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* Runs @n threads to the point where all are alive (and registered if asked); sets what the
 * process gained meanwhile. Returns 0 or -errno. */
static int
mem_run(int n, pmc_region_t id, int do_register, double *heap, double *rss)
{
	struct mem_phase p = {.id = id, .do_register = do_register};
	pthread_t *th = calloc((size_t)n, sizeof(*th));

	if (!th)
		return -ENOMEM;
	pthread_barrier_init(&p.ready, NULL, (unsigned)n + 1);
	pthread_barrier_init(&p.release, NULL, (unsigned)n + 1);
	size_t h0 = heap_bytes(), r0 = resident_bytes();
	for (int i = 0; i < n; i++)
		if (pthread_create(&th[i], NULL, mem_thread, &p) != 0) {
			fprintf(stderr, "pmc-bench-region: pthread_create failed\n");
			exit(1);
		}
	pthread_barrier_wait(&p.ready);
	*heap = (double)heap_bytes() - (double)h0;
	*rss = (double)resident_bytes() - (double)r0;
	pthread_barrier_wait(&p.release);
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&p.ready);
	pthread_barrier_destroy(&p.release);
	free(th);
	return 0;
}

static int
cmd_memory(int n)
{
	double h[3], rs[3];

	/* One arena, so that mallinfo2() sees the threads' allocations too. */
	mallopt(M_ARENA_MAX, 1);
	events_env();
	pmc_region_t id = pmc_region("bench-memory");
	if (!id || !pmc_enabled()) {
		fprintf(stderr, "pmc-bench-region: libpmcclient is not profiling (no daemon at "
		                "PMC_SOCKET?)\n");
		return 1;
	}
	/* Unregistered threads first (their stacks stay cached by glibc), then registered ones,
	 * then unregistered again: the last is the baseline, with the same cached stacks. */
	if (mem_run(n, id, 0, &h[0], &rs[0]) < 0 || mem_run(n, id, 1, &h[1], &rs[1]) < 0 ||
	    mem_run(n, id, 0, &h[2], &rs[2]) < 0)
		return 1;
	printf("threads=%d\n", n);
	printf("thread_heap_bytes=%.0f\n", (h[1] - h[2]) / n);
	printf("thread_rss_bytes=%.0f\n", (rs[1] - rs[2]) / n);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "time")) {
		int reps = argc > 2 ? atoi(argv[2]) : 11;
		long iters = argc > 3 ? atol(argv[3]) : 4000;

		if (reps < 1 || reps > MAX_REPS || iters < 1) {
			fprintf(stderr, "pmc-bench-region: REPS in 1..%d, ITERS >= 1\n", MAX_REPS);
			return 2;
		}
		return cmd_time(reps, iters);
	}
	if (argc >= 2 && !strcmp(argv[1], "instructions")) {
		int reps = argc > 2 ? atoi(argv[2]) : 3;
		long iters = argc > 3 ? atol(argv[3]) : 4096;

		if (reps < 1 || iters < 1) {
			fprintf(stderr, "pmc-bench-region: REPS >= 1, ITERS >= 1\n");
			return 2;
		}
		return cmd_instructions(reps, iters);
	}
	if (argc == 3 && !strcmp(argv[1], "memory")) {
		int n = atoi(argv[2]);

		if (n < 1 || n > 4096) {
			fprintf(stderr, "pmc-bench-region: NTHREADS in 1..4096\n");
			return 2;
		}
		return cmd_memory(n);
	}
	fprintf(stderr,
	        "usage: pmc-bench-region time [REPS [ITERS]] | instructions [REPS [ITERS]] | "
	        "memory NTHREADS\n");
	return 2;
}
