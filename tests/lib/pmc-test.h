/* Tiny harness shared by the C tests: CHECK() and the fd-leak check. */
#pragma once

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(expr)                                                                                \
	do {                                                                                       \
		if (!(expr)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static inline int
pmc_test_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Runs one test function and prints "ok N - name" (TAP-like), numbered per program. */
static unsigned pmc_test_n; /* tests run so far */

static inline void
pmc_test_run(void (*fn)(void), const char *name)
{
	fn();
	printf("ok %u - %s\n", ++pmc_test_n, name);
	fflush(stdout);
}

#define PMC_TEST_RUN(fn) pmc_test_run(fn, #fn)

/* splitmix64: deterministic pseudo-random streams for tests. */
static inline uint64_t
pmc_test_rng(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}
