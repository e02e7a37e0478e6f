/* pmc-test-fdlimit: threads that cannot take their counter fds (e2e-fdlimit.sh). Run it with
 * a low fd limit (ulimit -n 64). The main thread runs region "main" once (1 fresh page)
 * first, so that it is registered, then:
 *
 *   threads T N K  T threads started at once, each running region "fd" K times, each run
 *                  writing N fresh pages: those the process has room for get their counter
 *                  fds, the others run unprofiled
 *   ctrunc N K     thread "cut": its registration's reply comes while the process has no
 *                  free fd (this program's recvmsg() takes them all for that one call), so
 *                  its fds do not fit (MSG_CTRUNC); then thread "after" registers as usual.
 *                  Each runs region "fd" K times, N fresh pages a run
 *
 * Once every thread ran its regions (and still lives, holding its fds), it prints
 * "profiled=" how many threads pmc_enabled() says are counted, "unprofiled=" the others,
 * "fd_count=" and "fd_page_faults=" what region "fd" must count (the profiled threads' runs),
 * "dropped=" the unprofiled threads' runs, then "ready", and waits for a line on stdin; then
 * the threads end and it exits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <pmc/pmc.h>

static size_t pagesz;
static long n_pages, runs;
static atomic_long profiled, unprofiled;
static pthread_barrier_t done;   /* every thread ran its regions */
static pthread_barrier_t finish; /* the test said go */

/* Set by a thread for its next recvmsg() that can take fds (its registration's reply). */
static __thread int starve_next;

/* libpmcclient's recvmsg() resolves to this one (the executable comes first): for a call
 * that can take fds on a thread that asked, every free fd is taken for the call's length. */
ssize_t
recvmsg(int fd, struct msghdr *msg, int flags)
{
	int held[4096];
	size_t n = 0;
	if (starve_next && msg->msg_controllen) {
		starve_next = 0;
		for (int d; n < sizeof(held) / sizeof(held[0]) && (d = dup(0)) >= 0;)
			held[n++] = d;
	}
	ssize_t r = syscall(SYS_recvmsg, fd, msg, flags);
	int saved = errno;
	for (size_t i = 0; i < n; i++)
		close(held[i]);
	errno = saved;
	return r;
}

static void
run_pages(const char *name, long n, long k)
{
	pmc_region_t r = pmc_region(name);
	for (long c = 0; c < k; c++) {
		/* Mapped outside the region, so that it counts only the faults of the writes. */
		unsigned char *m = mmap(NULL, (size_t)n * pagesz, PROT_READ | PROT_WRITE,
		                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			perror("mmap");
			exit(1);
		}
		pmc_begin(r);
		for (long i = 0; i < n; i++)
			((volatile unsigned char *)m)[(size_t)i * pagesz] = 1;
		pmc_end(r);
		munmap(m, (size_t)n * pagesz);
	}
}

static void *
worker(void *arg)
{
	starve_next = arg != NULL;
	run_pages("fd", n_pages, runs);
	atomic_fetch_add(pmc_enabled() ? &profiled : &unprofiled, 1);
	pthread_barrier_wait(&done);
	pthread_barrier_wait(&finish);
	return NULL;
}

int
main(int argc, char **argv)
{
	pagesz = (size_t)sysconf(_SC_PAGESIZE);
	long t;
	int ctrunc;
	if (argc == 5 && !strcmp(argv[1], "threads")) {
		t = atol(argv[2]);
		n_pages = atol(argv[3]);
		runs = atol(argv[4]);
		ctrunc = 0;
	} else if (argc == 4 && !strcmp(argv[1], "ctrunc")) {
		t = 2;
		n_pages = atol(argv[2]);
		runs = atol(argv[3]);
		ctrunc = 1;
	} else {
		fprintf(stderr, "usage: pmc-test-fdlimit threads T N K | ctrunc N K\n");
		return 2;
	}
	if (t < 1 || t > 1000 || n_pages < 1 || runs < 1)
		return 2;
	run_pages("main", 1, 1);
	if (!pmc_enabled()) {
		fprintf(stderr, "pmc-test-fdlimit: the main thread is not profiled\n");
		return 1;
	}
	pthread_t *th = calloc((size_t)t, sizeof(*th));
	if (!th)
		return 1;
	pthread_barrier_init(&done, NULL, (unsigned)t + 1);
	pthread_barrier_init(&finish, NULL, (unsigned)t + 1);
	for (long i = 0; i < t; i++) {
		/* ctrunc: "cut" first, alone, then "after", so that the order is known. */
		if (ctrunc && i == 1)
			while (atomic_load(&profiled) + atomic_load(&unprofiled) < 1)
				usleep(1000);
		if (pthread_create(&th[i], NULL, worker, ctrunc && i == 0 ? (void *)1 : NULL)) {
			perror("pthread_create");
			return 1;
		}
	}
	pthread_barrier_wait(&done);
	long p = atomic_load(&profiled), u = atomic_load(&unprofiled);
	printf("profiled=%ld\nunprofiled=%ld\nfd_count=%ld\nfd_page_faults=%ld\ndropped=%"
	       "ld\nready\n",
	       p, u, p * runs, p * runs * n_pages, u * runs);
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	pthread_barrier_wait(&finish);
	for (long i = 0; i < t; i++)
		pthread_join(th[i], NULL);
	free(th);
	return 0;
}
