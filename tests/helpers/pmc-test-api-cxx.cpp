// pmc-test-api-cxx: the C++ forms (<pmc/pmc.hpp>, and the macros of <pmc/pmc.h> from C++)
// as an application writes them, for e2e-api.sh (against a real daemon) and api-compile.sh
// (built by g++ and clang++ with -std=c++17 -pedantic, run with PMC_DISABLE=1). Prints
// "key=value" lines: the control flow, and each region's count and page faults (every
// region writes pages mapped before it).
//
//   flow          PMC_SCOPE in a loop left by break ("cxx-scope-break": 0 1), the block
//                 form PMC_REGION left by break ("cxx-region-break": 0 1 2 3 4)
//   throw K       an exception thrown through each form, K times: PMC_SCOPE ("cxx-macro"),
//                 pmc::scope by name ("cxx-scope"), pmc::scope of a pmc::region made once
//                 ("cxx-inner", inside region "cxx-outer", which goes on after the catch;
//                 and "cxx-twice" inside itself), PMC_REGION ("cxx-region"); and
//                 pmc::scope over names built at run time
//                 ("cxx-dyn-a", "cxx-dyn-b", "cxx-dyn-a")
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

#include <pmc/pmc.hpp>

namespace
{

size_t pagesz;
char trace[256];
size_t trace_len;

void
note_int(int i)
{
	if (trace_len + 3 < sizeof(trace)) {
		trace[trace_len++] = static_cast<char>('0' + i % 10);
		trace[trace_len++] = ' ';
		trace[trace_len] = 0;
	}
}

void
print_trace(const char *key)
{
	while (trace_len && trace[trace_len - 1] == ' ')
		trace[--trace_len] = 0;
	std::printf("%s=%s\n", key, trace);
	trace_len = 0;
	trace[0] = 0;
}

unsigned char *
map_pages(long n)
{
	void *m = mmap(nullptr, static_cast<size_t>(n) * pagesz, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		std::perror("mmap");
		std::exit(1);
	}
	return static_cast<unsigned char *>(m);
}

void
touch(unsigned char *m, long i)
{
	static_cast<volatile unsigned char *>(m)[static_cast<size_t>(i) * pagesz] = 1;
}

[[noreturn]] void
fail_here(long i)
{
	throw std::runtime_error("thrown through a region " + std::to_string(i));
}

void
flow()
{
	std::memset(trace, ' ', sizeof(trace));
	trace[0] = 0;
	unsigned char *m = map_pages(5);
	for (int i = 0; i < 5; i++) {
		PMC_SCOPE("cxx-scope-break");
		touch(m, i);
		note_int(i);
		if (i == 1)
			break;
	}
	print_trace("cxx_scope_break");
	std::printf("cxx-scope-break_count=2\ncxx-scope-break_page_faults=2\n");

	m = map_pages(5);
	for (int i = 0; i < 5; i++)
		PMC_REGION("cxx-region-break")
		{
			touch(m, i);
			note_int(i);
			if (i == 1)
				break;
		}
	print_trace("cxx_region_break");
	std::printf("cxx-region-break_count=5\ncxx-region-break_page_faults=5\n");
}

void
throws(long k)
{
	long caught = 0;
	/* The first throw faults in the unwinder's code and tables and the exception's
	 * memory: outside the regions, so that they count only their own pages. */
	for (int i = 0; i < 2; i++)
		try {
			fail_here(i);
		} catch (const std::runtime_error &) {
		}
	unsigned char *m = map_pages(k);
	for (long i = 0; i < k; i++)
		try {
			PMC_SCOPE("cxx-macro");
			touch(m, i);
			fail_here(i);
		} catch (const std::runtime_error &) {
			caught++;
		}

	m = map_pages(k);
	for (long i = 0; i < k; i++)
		try {
			pmc::scope s("cxx-scope");
			touch(m, i);
			fail_here(i);
		} catch (const std::runtime_error &) {
			caught++;
		}

	static const pmc::region inner("cxx-inner");
	pmc::region outer("cxx-outer");
	m = map_pages(3 * k);
	for (long i = 0; i < k; i++) {
		outer.begin();
		touch(m, 3 * i);
		try {
			pmc::scope s(inner);
			touch(m, 3 * i + 1);
			fail_here(i);
		} catch (const std::runtime_error &) {
			caught++;
		}
		touch(m, 3 * i + 2);
		outer.end();
	}

	/* The same region inside itself: a scope that ended it twice would end the outer
	 * one early, before its third page; one that never ended it would leave only the
	 * outer sample. */
	pmc::region twice("cxx-twice");
	m = map_pages(3 * k);
	for (long i = 0; i < k; i++) {
		twice.begin();
		touch(m, 3 * i);
		try {
			pmc::scope s(twice);
			touch(m, 3 * i + 1);
			fail_here(i);
		} catch (const std::runtime_error &) {
			caught++;
		}
		touch(m, 3 * i + 2);
		twice.end();
	}

	m = map_pages(k);
	for (long i = 0; i < k; i++)
		try {
			PMC_REGION("cxx-region")
			{
				touch(m, i);
				fail_here(i);
			}
		} catch (const std::runtime_error &) {
			caught++;
		}

	m = map_pages(4 * k);
	long p = 0;
	for (long i = 0; i < k; i++)
		for (const char *suffix : {"a", "b", "a"}) {
			std::string name = std::string("cxx-dyn-") + suffix;
			long pages = *suffix == 'b' ? 2 : 1;
			pmc::scope s(name.c_str());
			for (long j = 0; j < pages; j++)
				touch(m, p++);
		}

	std::printf("caught=%ld\n", caught);
	for (const char *r : {"cxx-macro", "cxx-scope", "cxx-inner", "cxx-region"})
		std::printf("%s_count=%ld\n%s_page_faults=%ld\n", r, k, r, k);
	std::printf("cxx-outer_count=%ld\ncxx-outer_page_faults=%ld\n", k, 3 * k);
	std::printf("cxx-twice_count=%ld\ncxx-twice_page_faults=%ld\n", 2 * k, 4 * k);
	std::printf("cxx-dyn-a_count=%ld\ncxx-dyn-a_page_faults=%ld\n", 2 * k, 2 * k);
	std::printf("cxx-dyn-b_count=%ld\ncxx-dyn-b_page_faults=%ld\n", k, 2 * k);
}

} // namespace

int
main(int argc, char **argv)
{
	pagesz = static_cast<size_t>(sysconf(_SC_PAGESIZE));
	const char *mode = argc > 1 ? argv[1] : "";
	if (!std::strcmp(mode, "flow") && argc == 2) {
		flow();
	} else if (!std::strcmp(mode, "throw") && argc == 3) {
		throws(std::atol(argv[2]));
	} else {
		std::fprintf(stderr, "pmc-test-api-cxx: bad arguments\n");
		return 2;
	}
	return pmc_flush() < 0 && pmc_enabled() ? 1 : 0;
}
