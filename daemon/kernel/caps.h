/* caps: the capabilities the daemon holds, decided once at start, and CAP_SYS_ADMIN raised
 * around perf_event_open() where the kernel demands it.
 *
 * perf_event_open() of another user's thread needs CAP_PERFMON (upstream kernels, any
 * perf_event_paranoid up to 2). Debian's and Ubuntu's kernels add perf_event_paranoid 3, their
 * default, where every perf_event_open() of a task without CAP_SYS_ADMIN fails with EACCES.
 * pmcdaemon.service therefore grants CAP_SYS_ADMIN too, and caps_setup() decides at start:
 *  - root (euid 0): nothing changes; root holds what it was given.
 *  - CAP_SYS_ADMIN needed (permitted, and perf_event_paranoid above 2 or no CAP_PERFMON):
 *    kept in the permitted set only, out of the effective, inheritable and ambient sets;
 *    caps_raise() and caps_lower() put it in the calling thread's effective set for one
 *    perf_event_open() that failed with EACCES, and take it out again.
 *  - otherwise: CAP_SYS_ADMIN dropped for good (effective, permitted, inheritable, ambient;
 *    the bounding set too where CAP_SETPCAP allows it).
 * A non-root daemon also drops CAP_SETPCAP (from every set, the bounding set first) and sets
 * no_new_privs: no exec() could give back what it dropped.
 *
 * Capabilities are per thread: caps_setup() must run before the daemon starts a thread, and
 * caps_raise() affects the calling thread only (and the processes it would clone meanwhile:
 * none).
 *
 * PMCDAEMON_TEST_PARANOID=N in the environment (tests only): perf_event_paranoid is taken
 * as N, and where N is 3 caps_test_denied() refuses, as Debian's kernel would, every
 * perf_event_open() of a thread without CAP_SYS_ADMIN in its effective set, so that the
 * raise-around-open path runs on an upstream kernel. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/**
 * caps_setup() - decide and drop, once, at start, before any thread is started
 * Reads /proc/sys/kernel/perf_event_paranoid (2 when unreadable) and the process's
 * capabilities; logs one line saying what the daemon holds and why.
 * Return: 0, or -errno when a capability could not be dropped (logged; the daemon must not
 * start then).
 */
int caps_setup(void);

/**
 * caps_raise() - CAP_SYS_ADMIN into the calling thread's effective set, for one
 * perf_event_open() the kernel refused with EACCES
 * Counted (caps_raised()). Pair with caps_lower() at once.
 * Return: 0, or -EPERM when the daemon keeps no CAP_SYS_ADMIN to raise (caps_setup() dropped
 * it, or it never had it).
 */
int caps_raise(void);

/**
 * caps_lower() - CAP_SYS_ADMIN out of the calling thread's effective set again, after
 * caps_raise() returned 0
 * Aborts the daemon if the kernel refuses (it cannot, for a capability the thread holds):
 * a daemon that could not lower it must not go on with it raised.
 */
void caps_lower(void);

/**
 * caps_test_denied() - whether PMCDAEMON_TEST_PARANOID=3 makes the next perf_event_open()
 * of the calling thread fail with EACCES (no CAP_SYS_ADMIN in its effective set now)
 * Return: false unless that variable was set to 3 at caps_setup().
 */
bool caps_test_denied(void);

/** caps_raises() - whether caps_setup() kept CAP_SYS_ADMIN to raise around perf_event_open(). */
bool caps_raises(void);

/** caps_describe() - what the daemon holds and why, in words, for Status (static). */
const char *caps_describe(void);

/** caps_effective() - the calling thread's effective capabilities now, a bit per capability. */
uint64_t caps_effective(void);

/** caps_paranoid() - perf_event_paranoid as caps_setup() read it (or as the test set it). */
int caps_paranoid(void);

/** caps_raised() - how many times caps_raise() raised CAP_SYS_ADMIN. */
uint64_t caps_raised(void);
