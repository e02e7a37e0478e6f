/* A program with no pmc call, for pmcctl run's whole-program figures: each of PROCS
 * processes (the first and those it forks, one after another) runs THREADS threads, one after
 * another, each of which writes N fresh pages (one page fault each, at least).
 * Usage: pmc-whole-app N [PROCS [THREADS]]. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static long pages;

static void *
write_pages(void *arg)
{
	long size = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, (size_t)(pages ? pages : 1) * (size_t)size, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		exit(1);
	/* A page a fault: no huge page (transparent_hugepage "always") filling 512 at once. */
	(void)madvise(p, (size_t)(pages ? pages : 1) * (size_t)size, MADV_NOHUGEPAGE);
	for (long i = 0; i < pages; i++)
		p[i * size] = 1;
	return arg;
}

int
main(int argc, char **argv)
{
	long procs = argc > 2 ? atol(argv[2]) : 1, threads = argc > 3 ? atol(argv[3]) : 1;
	pthread_t t[64];

	pages = argc > 1 ? atol(argv[1]) : 0;
	if (procs < 1 || threads < 1 || threads > 64)
		return 2;
	/* One process after another, as the threads below: a forked child and its parent that
	 * fault at once on the pages they share copy-on-write counted one fault more or less
	 * as the timing fell (2,090 for 2,091 once). Each child runs alone, the first process
	 * last. */
	for (long i = 1; i < procs; i++) {
		pid_t c = fork();
		if (c < 0)
			return 1;
		if (c == 0)
			break;
		if (waitpid(c, NULL, 0) != c)
			return 1;
	}
	/* One thread after another: threads that fault at once may both count a fault on one
	 * page (of the C library's, of a page table), and a stack a thread left may serve the
	 * next or not, as the timing falls (3,998 for 4,000 once). In turn, the count is
	 * exact. */
	write_pages(NULL);
	for (long i = 1; i < threads; i++)
		if (pthread_create(&t[i], NULL, write_pages, NULL) || pthread_join(t[i], NULL))
			return 1;
	while (wait(NULL) > 0)
		;
	return 0;
}
