/* pmc-test-burst: one of many client processes started at once (e2e-burst.sh).
 *
 *   burst T K   T threads (the main thread one of them), each running region "burst" K
 *               times, as fast as it can (an empty region: the daemon falls behind), then
 *               pmc_flush(); the main thread joins the others and returns from main():
 *               prints "count=T*K", "flush_eagain=" how many of the T pmc_flush() calls
 *               returned -EAGAIN, and "enabled=" pmc_enabled() of the main thread
 *
 * Every sample must reach the daemon: a daemon behind a burst of clients is back-pressure,
 * not a reason to drop.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pmc/pmc.h>

static long k;
static atomic_int eagain;

static void *
run(void *arg)
{
	(void)arg;
	pmc_region_t r = pmc_region("burst");
	for (long i = 0; i < k; i++) {
		pmc_begin(r);
		pmc_end(r);
	}
	if (pmc_flush() == -EAGAIN)
		atomic_fetch_add(&eagain, 1);
	return NULL;
}

int
main(int argc, char **argv)
{
	if (argc != 4 || strcmp(argv[1], "burst")) {
		fprintf(stderr, "usage: pmc-test-burst burst T K\n");
		return 2;
	}
	long t = atol(argv[2]);
	k = atol(argv[3]);
	if (t < 1 || t > 256 || k < 1)
		return 2;
	pthread_t th[256];
	for (long i = 1; i < t; i++)
		if (pthread_create(&th[i], NULL, run, NULL)) {
			perror("pthread_create");
			return 1;
		}
	run(NULL);
	for (long i = 1; i < t; i++)
		pthread_join(th[i], NULL);
	printf("count=%ld\nflush_eagain=%d\nenabled=%d\n", t * k, atomic_load(&eagain),
	       pmc_enabled());
	return 0;
}
