/* libpmcclient: hardware performance counters over named regions of your code.
 *
 * Mark a region and link -lpmcclient (pkg-config pmcclient):
 *
 *	#include <pmc/pmc.h>
 *	PMC_REGION("parse") {
 *		parse(buf);
 *	}
 *
 * Each thread registers with pmcdaemon on its first region; the daemon opens the
 * counters and passes their fds. Region begin/end then read the counters in the
 * thread itself (rdpmc where the kernel allows it, one read() of the group otherwise)
 * and append one sample to a per-thread buffer, sent to the daemon in batches.
 * Without a daemon, or with PMC_DISABLE=1, every call is a cheap no-op; the library
 * never aborts, blocks or prints more than one warning line to stderr.
 *
 * Environment: PMC_SOCKET (daemon socket, default /run/pmcdaemon/pmc.sock),
 * PMC_EVENTS (comma-separated event names, default: the daemon's set),
 * PMC_DISABLE=1 (turn everything off).
 */
#ifndef PMC_PMC_H
#define PMC_PMC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PMC_EXPORT __attribute__((visibility("default")))
#else
#define PMC_EXPORT
#endif

/** A region id: small integer interned from a name; 0 is "no region" (ignored). */
typedef uint32_t pmc_region_t;

/** Longest region name in bytes; longer names are truncated. */
#define PMC_REGION_NAME_MAX 127

/**
 * pmc_region() - intern a region name
 * @name: NUL-terminated name, borrowed (copied); names longer than PMC_REGION_NAME_MAX
 *        are truncated
 *
 * Thread-safe; the same name always returns the same id for the life of the process.
 * Takes a lock: call it once and keep the id (PMC_REGION does so) rather than on every
 * pass through a hot loop.
 * Return: the id, or 0 when @name is NULL or empty, the region table is full, or
 * profiling is disabled. Passing 0 to pmc_begin()/pmc_end() does nothing.
 */
PMC_EXPORT pmc_region_t pmc_region(const char *name);

/**
 * pmc_begin() - start a region on the calling thread
 * @region: id from pmc_region()
 *
 * Reads the thread's counters; regions nest (up to 32 deep; deeper ones are counted
 * as dropped). The first call on a thread registers it with the daemon (one round trip,
 * at most about 2 s when the daemon is unresponsive; then the thread stays unprofiled).
 * With rdpmc available it takes no lock, allocates nothing and makes no syscall.
 */
PMC_EXPORT void pmc_begin(pmc_region_t region);

/**
 * pmc_end() - end the innermost open region @region on the calling thread
 * @region: the id given to the matching pmc_begin()
 *
 * Reads the counters again and buffers one sample (the deltas). A full buffer is sent
 * to the daemon without waiting for it (if its queue is full, the samples are counted
 * as dropped). An @region that is not open is ignored; regions opened inside it and
 * not yet ended are discarded.
 */
PMC_EXPORT void pmc_end(pmc_region_t region);

/**
 * pmc_flush() - send the calling thread's buffered samples now
 *
 * Samples are also sent when the buffer fills, when a thread exits and at process exit.
 * Return: 0 (also when there was nothing to send, or PMC_DISABLE turned profiling off),
 * -EAGAIN when the daemon's queue was full (the samples are counted as dropped),
 * -ENOTCONN when no daemon is connected (none at start: nothing is ever sent; gone since:
 * the samples are kept, up to 4096 per thread, for when it is back), or another negative
 * errno from sending.
 */
PMC_EXPORT int pmc_flush(void);

/**
 * pmc_enabled() - whether this process is connected to a daemon and profiling
 * Return: 1 when connected, 0 when disabled (PMC_DISABLE, no daemon, or not yet
 * connected: the connection is made on the first pmc_region() or pmc_begin()).
 */
PMC_EXPORT int pmc_enabled(void);

/**
 * pmc_thread_uses_rdpmc() - how the calling thread reads its counters
 * Return: 1 with rdpmc (no syscall in pmc_begin/pmc_end): the thread reads with rdpmc and
 * its last read (the end of its last region) did; 0 with one read() of each counter group
 * per call (the kernel does not allow rdpmc or give user space its clock, or no hardware
 * PMU), or when that last read had to fall back to read() (a group was not on the PMU at
 * that moment: multiplexed out); -1 when the thread is not profiled (not registered yet,
 * disabled, or no daemon).
 */
PMC_EXPORT int pmc_thread_uses_rdpmc(void);

/* Scoped form: the region ends when the block is left, by break, return or goto too. */
struct pmc__scope {
	pmc_region_t id;
	int once;
};

/** Internal to PMC_REGION: ends the scope's region. */
PMC_EXPORT void pmc__scope_end(struct pmc__scope *s);
/** Internal to PMC_REGION: interns @name once into *@slot, then begins it. */
PMC_EXPORT pmc_region_t pmc__scope_begin(pmc_region_t *slot, const char *name);

#define PMC__CAT2(a, b) a##b
#define PMC__CAT(a, b) PMC__CAT2(a, b)

/**
 * PMC_REGION() - run the following statement or block as region @name
 * @name: string (a literal is best: its id is interned once per call site)
 *
 *	PMC_REGION("parse") { parse(buf); }
 */
#if defined(__GNUC__) && !defined(__cplusplus)
#define PMC_REGION(name)                                                                           \
	for (struct pmc__scope PMC__CAT(pmc__s_, __LINE__) __attribute__((cleanup(                 \
	             pmc__scope_end))) = {pmc__scope_begin(({                                      \
		                                                   static pmc_region_t pmc__slot;  \
		                                                   &pmc__slot;                     \
	                                                   }),                                     \
	                                                   (name)),                                \
	                                  1};                                                      \
	     PMC__CAT(pmc__s_, __LINE__).once; PMC__CAT(pmc__s_, __LINE__).once = 0)
#endif

#ifdef __cplusplus
}
#endif

#endif
