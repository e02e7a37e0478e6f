/* pmc-test-giveup: the library gives up a connection the daemon still serves (what it does
 * when the daemon does not answer in time), reconnects and sends the rest; linked with the
 * static library, whose internal pmc__connection_failed_locked() it calls.
 *
 *   pmc-test-giveup N M   region "giveup" N times, pmc_flush(), M times more, the connection
 *                         given up (-ENOBUFS, a send error that is not a hang-up), then,
 *                         once reconnected, pmc_flush(): prints count=N+M (every region
 *                         sent, the last M on the second connection) and state=1 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lib/client-internal.h"

int
main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: pmc-test-giveup N M\n");
		return 2;
	}
	long n = atol(argv[1]), m = atol(argv[2]);
	pmc_region_t r = pmc_region("giveup");
	for (long i = 0; i < n; i++) {
		pmc_begin(r);
		pmc_end(r);
	}
	if (pmc_flush() < 0)
		return 1;
	for (long i = 0; i < m; i++) {
		pmc_begin(r);
		pmc_end(r);
	}
	pthread_mutex_lock(&G.conn.lock);
	pmc__connection_failed_locked(-ENOBUFS);
	pthread_mutex_unlock(&G.conn.lock);
	for (int i = 0; i < 50 && atomic_load(&G.conn.state) != ST_ON; i++)
		usleep(100000);
	int st = atomic_load(&G.conn.state);
	if (pmc_flush() < 0)
		return 1;
	printf("count=%ld\nstate=%d\n", n + m, st);
	return 0;
}
