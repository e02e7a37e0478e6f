/* pmc-consumer: a program outside the pmc tree, built against an installed pmc (pkg-config
 * pmcclient, or CMake's find_package(pmcclient)) by tests/install/install.sh.
 *
 *   pmc-consumer N K   region "consumer": K calls, each writing N fresh pages, then
 *                      prints count=K, enabled=0|1 and flush=<pmc_flush()>
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <pmc/pmc.h>

int
main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: pmc-consumer N K\n");
		return 2;
	}
	long n = atol(argv[1]), k = atol(argv[2]);
	size_t pagesz = (size_t)sysconf(_SC_PAGESIZE);
	long count = 0;

	for (long i = 0; i < k; i++) {
		/* Mapped outside the region: only the first write to each page faults in it. */
		volatile unsigned char *m = mmap(NULL, (size_t)n * pagesz, PROT_READ | PROT_WRITE,
		                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		PMC_REGION("consumer")
		{
			for (long p = 0; p < n; p++)
				m[(size_t)p * pagesz] = 1;
			count++;
		}
		munmap((void *)m, (size_t)n * pagesz);
	}
	printf("count=%ld\nenabled=%d\nflush=%d\n", count, pmc_enabled(), pmc_flush());
	return 0;
}
