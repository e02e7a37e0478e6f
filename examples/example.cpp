// pmc-example-cxx: the C++ API (<pmc/pmc.hpp>) as the README shows it. "touch-pages" writes
// to PAGES fresh pages per call, so with the page-faults event it counts exactly PAGES faults
// per call; "sum" is a scope around plain arithmetic.
//   c++ examples/example.cpp $(pkg-config --cflags --libs pmcclient) -o example-cxx
//   ./example-cxx [CALLS [PAGES]]    (default 100 and 16)
#include <pmc/pmc.hpp>

#include <cstdio>
#include <cstdlib>
#include <sys/mman.h>
#include <unistd.h>

int
main(int argc, char **argv)
{
	const long calls = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 100;
	const long pages = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 16;
	if (calls <= 0 || pages <= 0) {
		std::fprintf(stderr, "usage: pmc-example-cxx [CALLS [PAGES]] (both positive)\n");
		return 2;
	}
	static const pmc::region touch("touch-pages"); // interned once
	const size_t pagesz = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	unsigned long sum = 0;
	for (long c = 0; c < calls; c++) {
		void *m = mmap(nullptr, pages * pagesz, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (m == MAP_FAILED) {
			std::perror("pmc-example-cxx: mmap");
			return 1;
		}
		auto *mem = static_cast<unsigned char *>(m);
		{
			pmc::scope s(touch); // ends at the '}', whatever the way out
			for (long p = 0; p < pages; p++)
				mem[p * pagesz] = static_cast<unsigned char>(c + p);
		}
		{
			PMC_SCOPE("sum");
			for (long p = 0; p < pages; p++)
				sum += mem[p * pagesz];
		}
		munmap(m, pages * pagesz);
	}
	std::printf("pmc-example-cxx: %ld calls, %ld pages each, sum %lu\n", calls, pages, sum);
	return pmc_flush() < 0 && pmc_enabled() ? 1 : 0;
}
