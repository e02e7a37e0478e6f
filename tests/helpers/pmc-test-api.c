/* pmc-test-api: the C forms of <pmc/pmc.h> as an application writes them, for
 * e2e-api.sh (against a real daemon) and api-compile.sh (built by gcc and clang with
 * -std=c11 -pedantic and -std=gnu11, run with PMC_DISABLE=1). Each mode prints
 * "key=value" lines: what the program did (control flow) and the ground truth of each
 * region (its count and its page faults: every region writes pages mapped fresh before it).
 *
 *   flow K        PMC_SCOPE in a loop left by break ("scope-break": plain C prints 0 1)
 *                 and by continue ("scope-continue"); the block form PMC_REGION with a
 *                 break, which leaves the region's block, not the loop ("region-break":
 *                 0 1 2 3 4); two PMC_SCOPE in one block, from one line ("two-outer",
 *                 "two-inner", K times); PMC_SCOPE left by return ("scope-return", K
 *                 calls) and by goto ("scope-goto"); two PMC_REGION on one line
 *                 ("nest-outer", "nest-inner")
 *   names K       names that change at run time at one call site: PMC_REGION(buf) over
 *                 "dyn-a", "dyn-b", "dyn-a" through one char buffer, PMC_SCOPE(name) over
 *                 pointers to "sdyn-a", "sdyn-b", "sdyn-a", and a literal PMC_REGION
 *                 ("dyn-literal") beside them, K rounds; "a" regions write 1 page, "b" 2
 *   intern        pmc_region(): a name over 127 bytes is refused (0), its first 127 bytes
 *                 are a name of their own; 4094 more names from 4 threads at once get one
 *                 id each, the same in every thread and on every later call, all
 *                 distinct; a 4096th name gets one too (the library holds 65,535)
 *   enabled       pmc_enabled() on the main thread before any region, after one, and
 *                 on a second thread (which may be refused: --max-threads 1)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <pmc/pmc.h>

static size_t pagesz;

/* What the program did, noted without a call that could fault inside a region. */
static char trace[256];
static size_t trace_len;

static void
note(const char *s)
{
	while (*s && trace_len + 1 < sizeof(trace))
		trace[trace_len++] = *s++;
	trace[trace_len] = 0;
}

static void
note_int(int i)
{
	char s[3] = {(char)('0' + i % 10), ' ', 0};
	note(s);
}

static void
print_trace(const char *key)
{
	while (trace_len && trace[trace_len - 1] == ' ')
		trace[--trace_len] = 0;
	printf("%s=%s\n", key, trace);
	trace_len = 0;
	trace[0] = 0;
}

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

/* Writes page @i of @m: one page fault, the first time. */
static void
touch(unsigned char *m, long i)
{
	((volatile unsigned char *)m)[(size_t)i * pagesz] = 1;
}

static int
scope_return(unsigned char *m, long i)
{
	PMC_SCOPE("scope-return");
	touch(m, 2 * i);
	if (i % 2)
		return 1;
	touch(m, 2 * i + 1);
	return 0;
}

/* Two scopes from one line (one macro): their names must not collide. */
#define TWO_SCOPES(a, b)                                                                           \
	PMC_SCOPE(a);                                                                              \
	PMC_SCOPE(b)

static void
flow(long k)
{
	unsigned char *m = map_pages(5);
	memset(trace, ' ', sizeof(trace));
	trace[0] = 0;

	for (int i = 0; i < 5; i++) {
		PMC_SCOPE("scope-break");
		touch(m, i);
		note_int(i);
		if (i == 1)
			break;
	}
	print_trace("scope_break");
	printf("scope-break_count=2\nscope-break_page_faults=2\n");

	m = map_pages(4);
	for (int i = 0; i < 4; i++) {
		PMC_SCOPE("scope-continue");
		touch(m, i);
		note_int(i);
		if (i % 2)
			continue;
		note("+ ");
	}
	print_trace("scope_continue");
	printf("scope-continue_count=4\nscope-continue_page_faults=4\n");

	/* The block form: break leaves the region's block and the loop goes on. */
	m = map_pages(5);
	for (int i = 0; i < 5; i++)
		PMC_REGION("region-break")
		{
			touch(m, i);
			note_int(i);
			if (i == 1)
				break;
		}
	print_trace("region_break");
	printf("region-break_count=5\nregion-break_page_faults=5\n");

	m = map_pages(2 * k);
	for (long i = 0; i < k; i++) {
		touch(m, 2 * i);
		{
			TWO_SCOPES("two-outer", "two-inner");
			touch(m, 2 * i + 1);
		}
	}
	/* The outer scope is declared first: it spans the inner one. */
	m = map_pages(2 * k);
	for (long i = 0; i < k; i++) {
		PMC_SCOPE("two-outer");
		touch(m, 2 * i);
		PMC_SCOPE("two-inner");
		touch(m, 2 * i + 1);
	}
	printf("two-outer_count=%ld\ntwo-outer_page_faults=%ld\n", 2 * k, 3 * k);
	printf("two-inner_count=%ld\ntwo-inner_page_faults=%ld\n", 2 * k, 2 * k);

	m = map_pages(2 * k);
	long ret = 0;
	for (long i = 0; i < k; i++)
		ret += scope_return(m, i);
	printf("scope-return_count=%ld\nscope-return_page_faults=%ld\n", k, 2 * k - ret);

	m = map_pages(2);
	{
		PMC_SCOPE("scope-goto");
		touch(m, 0);
		goto out;
	}
	touch(m, 1); /* never reached */
out:
	touch(m, 1);
	printf("scope-goto_count=1\nscope-goto_page_faults=1\n");

	m = map_pages(2);
	PMC_REGION("nest-outer") PMC_REGION("nest-inner") touch(m, 0);
	printf("nest-outer_count=1\nnest-outer_page_faults=1\n");
	printf("nest-inner_count=1\nnest-inner_page_faults=1\n");
}

static void
names(long k)
{
	static const char *const seq[] = {"a", "b", "a"};
	static const char *const sseq[] = {"sdyn-a", "sdyn-b", "sdyn-a"};
	char buf[32];
	unsigned char *m = map_pages(3 * 3 * 2 * k);
	long p = 0;

	for (long r = 0; r < k; r++)
		for (int j = 0; j < 3; j++) {
			long pages = j == 1 ? 2 : 1;
			snprintf(buf, sizeof(buf), "dyn-%s", seq[j]);
			PMC_REGION(buf)
			{
				for (long i = 0; i < pages; i++)
					touch(m, p++);
			}
			{
				const char *name = sseq[j];
				PMC_SCOPE(name);
				for (long i = 0; i < pages; i++)
					touch(m, p++);
			}
			PMC_REGION("dyn-literal")
			{
				touch(m, p++);
			}
		}
	const char *pre[] = {"dyn", "sdyn"};
	for (int i = 0; i < 2; i++) {
		printf("%s-a_count=%ld\n%s-a_page_faults=%ld\n", pre[i], 2 * k, pre[i], 2 * k);
		printf("%s-b_count=%ld\n%s-b_page_faults=%ld\n", pre[i], k, pre[i], 2 * k);
	}
	printf("dyn-literal_count=%ld\ndyn-literal_page_faults=%ld\n", 3 * k, 3 * k);
}

#define INTERN_N 4094 /* with the 127-byte one, 4095: every id of the first name table */
#define INTERN_THREADS 4

struct intern_arg {
	int first;
	pmc_region_t ids[INTERN_N];
};

static pthread_barrier_t intern_start;

static void *
intern_main(void *p)
{
	struct intern_arg *a = p;
	char name[32];
	pthread_barrier_wait(&intern_start);
	/* Each thread walks the names from its own starting point, so that they race for
	 * every name. */
	for (int j = 0; j < INTERN_N; j++) {
		int i = (a->first + j) % INTERN_N;
		snprintf(name, sizeof(name), "name-%d", i);
		a->ids[i] = pmc_region(name);
	}
	return NULL;
}

static int
intern(void)
{
	static struct intern_arg a[INTERN_THREADS];
	pthread_t th[INTERN_THREADS];
	static unsigned char seen[65536];
	char name[32], longname[300];
	int bad = 0;

	/* A name over PMC_REGION_NAME_MAX bytes is refused, never cut short. */
	memset(longname, 'L', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	pmc_region_t long_id = pmc_region(longname);
	longname[PMC_REGION_NAME_MAX] = 0;
	pmc_region_t prefix_id = pmc_region(longname);
	printf("intern_long=%u\nintern_prefix_named=%d\n", long_id, prefix_id != 0);
	seen[prefix_id] = 1;

	pthread_barrier_init(&intern_start, NULL, INTERN_THREADS);
	for (int t = 0; t < INTERN_THREADS; t++) {
		a[t].first = t * (INTERN_N / INTERN_THREADS);
		if (pthread_create(&th[t], NULL, intern_main, &a[t]))
			return 1;
	}
	for (int t = 0; t < INTERN_THREADS; t++)
		pthread_join(th[t], NULL);
	for (int i = 0; i < INTERN_N; i++) {
		pmc_region_t id = a[0].ids[i];
		snprintf(name, sizeof(name), "name-%d", i);
		if (!id || id >= 65536 || seen[id]++) {
			printf("intern: '%s' got id %u (0 or a duplicate)\n", name, id);
			bad++;
		}
		for (int t = 1; t < INTERN_THREADS; t++)
			if (a[t].ids[i] != id) {
				printf("intern: '%s' got %u in thread 0, %u in thread %d\n", name,
				       id, a[t].ids[i], t);
				bad++;
			}
		if (pmc_region(name) != id) {
			printf("intern: '%s' is %u, then %u\n", name, id, pmc_region(name));
			bad++;
		}
	}
	printf("intern_4096th=%d\n", pmc_region("one-more") != 0);
	printf("intern_empty=%u\nintern_null=%u\n", pmc_region(""), pmc_region(NULL));
	printf("intern_bad=%d\n", bad);
	return 0;
}

static void *
enabled_main(void *p)
{
	*(int *)p = pmc_enabled();
	return NULL;
}

int
main(int argc, char **argv)
{
	pagesz = (size_t)sysconf(_SC_PAGESIZE);
	const char *mode = argc > 1 ? argv[1] : "";
	if (!strcmp(mode, "flow") && argc == 3) {
		flow(atol(argv[2]));
	} else if (!strcmp(mode, "names") && argc == 3) {
		names(atol(argv[2]));
	} else if (!strcmp(mode, "intern") && argc == 2) {
		if (intern())
			return 1;
	} else if (!strcmp(mode, "enabled") && argc == 2) {
		printf("enabled_before=%d\n", pmc_enabled());
		PMC_REGION("enabled")
		{
			printf("enabled_inside=%d\n", pmc_enabled());
		}
		int other = -1;
		pthread_t th;
		if (pthread_create(&th, NULL, enabled_main, &other) || pthread_join(th, NULL))
			return 1;
		printf("enabled_thread=%d\n", other);
	} else {
		fprintf(stderr, "pmc-test-api: bad arguments\n");
		return 2;
	}
	return pmc_flush() < 0 && pmc_enabled() ? 1 : 0;
}
