/* Unit proto/common (target pmc_common): what both sides share beside the wire, each file
 * on its own: util.h (cleanup attributes, saturating sums, clocks), list.h (the intrusive
 * list), escape.h (names made safe to print), suggest.h (did you mean), cgroup.[ch],
 * procstat.[ch] (/proc/PID/stat), fdcheck.[ch] (closing a received fd that may block, in a
 * thread of its own). Depends on libc only; fdcheck is linked into libpmcclient (pmc_ names).
 *
 * Small helpers shared by the daemon, the client library and pmcctl:
 * cleanup attributes, TAKE_PTR/TAKE_FD and a monotonic clock. Internal only. */
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(util_freep)
#define _cleanup_close_ _cleanup_(util_closep)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _fd = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_fd;                                                                               \
	})

static inline void
util_freep(void *p)
{
	free(*(void **)p);
}

/* Closes *fd if it is >= 0, keeping errno intact. */
static inline void
util_closep(int *fd)
{
	if (*fd >= 0) {
		int saved = errno;
		close(*fd);
		errno = saved;
	}
}

/* @a + @b, or UINT64_MAX where the sum would wrap: a counter that saturates stays
 * monotonic. */
static inline uint64_t
util_sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static inline uint64_t
util_now_ns(clockid_t clk)
{
	struct timespec ts;
	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
