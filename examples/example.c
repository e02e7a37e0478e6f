/* pmc-example: a small program with two regions, for the README's demo.
 *
 * "touch-pages" writes to PAGES fresh pages per call (mmap'd anew each call), so with
 * the page-faults event it counts exactly PAGES faults per call; "checksum" is plain
 * arithmetic over a buffer. Usage: pmc-example [CALLS [PAGES]] (default 100 and 16). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <pmc/pmc.h>

static uint64_t
checksum(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211u;
	return h;
}

int
main(int argc, char **argv)
{
	long calls = argc > 1 ? strtol(argv[1], NULL, 10) : 100;
	long pages = argc > 2 ? strtol(argv[2], NULL, 10) : 16;
	if (calls <= 0 || pages <= 0) {
		fprintf(stderr, "usage: pmc-example [CALLS [PAGES]] (both positive)\n");
		return 2;
	}
	size_t pagesz = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char buf[4096];
	uint64_t sum = 0;

	for (long c = 0; c < calls; c++) {
		unsigned char *mem = mmap(NULL, pages * pagesz, PROT_READ | PROT_WRITE,
		                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED) {
			perror("pmc-example: mmap");
			return 1;
		}
		{
			PMC_SCOPE("touch-pages"); /* to the end of this block */
			for (long p = 0; p < pages; p++)
				mem[p * pagesz] = (unsigned char)(c + p);
		}
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = (unsigned char)(mem[(i % pages) * pagesz] + i);
		munmap(mem, pages * pagesz);

		PMC_SCOPE("checksum"); /* to the end of this pass of the loop */
		sum += checksum(buf, sizeof(buf));
	}
	printf("pmc-example: %ld calls, %ld pages each, checksum %016llx\n", calls, pages,
	       (unsigned long long)sum);
	return pmc_flush() < 0 && pmc_enabled() ? 1 : 0;
}
