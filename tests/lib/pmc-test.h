/* Tiny harness shared by the C tests: CHECK() and the fd-leak check. */
#pragma once

#include <dirent.h>
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

#define PMC_TEST_RUN(fn)                                                                           \
	do {                                                                                       \
		fn();                                                                              \
		printf("ok - %s\n", #fn);                                                          \
	} while (0)
