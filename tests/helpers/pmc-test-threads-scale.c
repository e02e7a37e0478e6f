/* pmc-test-threads-scale: one process with many registered threads, all alive at once
 * (e2e-threads-scale.sh).
 *
 *   pmc-test-threads-scale T N DIR
 *	Starts T threads (256 KiB stacks) and prints "created=T"; waits for the file DIR/go;
 *	then every thread registers at once (pmc_enabled(), with the events of PMC_EVENTS)
 *	and "registered_ns=" says how long that took, from the release of the threads to
 *	the last one registered, and "enabled=" how many were; then each runs region "scale"
 *	once, writing N fresh pages (mapped before, outside the region: N page faults), and
 *	calls pmc_flush() until its sample is sent (-EAGAIN: the daemon's queue is full, try
 *	again); "done" once every thread has, with "count=T", "page_faults=T*N" and
 *	"flush_eagain=" the number of retries. The threads stay alive until the file DIR/exit
 *	exists, then end; "exited" at the end.
 *
 * Output: key=value lines on stdout (flushed at each step); exit 1 on failure.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <pmc/pmc.h>

static long n_pages;
static size_t pagesz;
static unsigned char *pages;
static pthread_barrier_t go, registered, done, leave;
static atomic_long enabled, eagain, flush_failed;

static uint64_t
mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void
wait_file(const char *dir, const char *name)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	while (access(path, F_OK) < 0)
		usleep(10 * 1000);
}

static void *
thread_main(void *arg)
{
	unsigned char *m = pages + (size_t)(long)arg * (size_t)n_pages * pagesz;
	pthread_barrier_wait(&go);
	if (pmc_enabled())
		atomic_fetch_add(&enabled, 1);
	pthread_barrier_wait(&registered);

	pmc_region_t r = pmc_region("scale");
	pmc_begin(r);
	for (long i = 0; i < n_pages; i++)
		((volatile unsigned char *)m)[(size_t)i * pagesz] = 1;
	pmc_end(r);
	int f;
	while ((f = pmc_flush()) == -EAGAIN) {
		atomic_fetch_add(&eagain, 1);
		usleep(1000);
	}
	if (f < 0)
		atomic_fetch_add(&flush_failed, 1);
	pthread_barrier_wait(&done);
	pthread_barrier_wait(&leave);
	return NULL;
}

int
main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: pmc-test-threads-scale T N DIR\n");
		return 2;
	}
	long t = atol(argv[1]);
	n_pages = atol(argv[2]);
	const char *dir = argv[3];
	if (t < 1 || t > 1000000 || n_pages < 1)
		return 2;
	pagesz = (size_t)sysconf(_SC_PAGESIZE);
	size_t len = (size_t)t * (size_t)n_pages * pagesz;
	pages = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (pages == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	/* One fault per page written, never one per huge page. */
	(void)madvise(pages, len, MADV_NOHUGEPAGE);
	pthread_t *th = calloc((size_t)t, sizeof(*th));
	pthread_attr_t attr;
	if (!th || pthread_attr_init(&attr) || pthread_attr_setstacksize(&attr, 256 << 10))
		return 1;
	unsigned all = (unsigned)t + 1;
	if (pthread_barrier_init(&go, NULL, all) || pthread_barrier_init(&registered, NULL, all) ||
	    pthread_barrier_init(&done, NULL, all) || pthread_barrier_init(&leave, NULL, all))
		return 1;
	for (long i = 0; i < t; i++) {
		int e = pthread_create(&th[i], &attr, thread_main, (void *)i);
		if (e) {
			fprintf(stderr, "pthread_create of thread %ld: %s\n", i + 1, strerror(e));
			exit(1);
		}
	}
	printf("created=%ld\n", t);
	fflush(stdout);

	wait_file(dir, "go");
	uint64_t t0 = mono_ns();
	pthread_barrier_wait(&go);
	pthread_barrier_wait(&registered);
	uint64_t t1 = mono_ns();
	printf("registered_ns=%llu\nenabled=%ld\n", (unsigned long long)(t1 - t0),
	       atomic_load(&enabled));
	fflush(stdout);

	pthread_barrier_wait(&done);
	printf("count=%ld\npage_faults=%ld\nflush_eagain=%ld\nflush_failed=%ld\ndone\n", t,
	       t * n_pages, atomic_load(&eagain), atomic_load(&flush_failed));
	fflush(stdout);

	wait_file(dir, "exit");
	pthread_barrier_wait(&leave);
	for (long i = 0; i < t; i++)
		pthread_join(th[i], NULL);
	free(th);
	pthread_attr_destroy(&attr);
	printf("exited\n");
	return 0;
}
