/* libpmcclient: hardware performance counters over named regions of your code.
 *
 * Mark a region and link -lpmcclient (pkg-config pmcclient):
 *
 *	#include <pmc/pmc.h>
 *	void
 *	handle(struct request *req)
 *	{
 *		PMC_SCOPE("parse");	// region "parse" from here to the end of the block
 *		parse(req);
 *		if (!req->ok)
 *			return;		// ends it too, as does any way out of the block
 *		...
 *	}
 *
 * PMC_SCOPE is a declaration: it leaves break, continue, return and goto alone, so it
 * may open the body of the application's loop. C++: <pmc/pmc.hpp> (pmc::scope).
 *
 * Each thread registers with pmcdaemon on its first region; the daemon opens the
 * counters and passes their fds. Region begin/end then read the counters in the
 * thread itself (rdpmc where the kernel allows it, one read() of the group otherwise)
 * and append one sample to a per-thread buffer, which a background thread of the
 * library sends to the daemon: each sample reaches it within PMC_FLUSH_MS (1 s) of its
 * region's end, whether its thread runs more regions or not.
 *
 * Measurement window: a thread that reads its counters with read() (software events such
 * as task-clock, or no user-space reads) has pmc_begin() read the wall clock, then the
 * counters, and pmc_end() the counters, then the wall clock, so a sample's wall time
 * encloses the window its counts were taken over (task-clock <= wall time, sample by
 * sample); that clock is CLOCK_MONOTONIC_RAW, the one task-clock keeps (not slewed by
 * NTP). A thread whose kernel lets it read the counters in user space takes the wall time
 * from the clock the counters' page gives (perf's clock, the kernel's sched_clock: the TSC
 * or the arm64 generic timer, never slewed either), read with the group leader at both
 * ends: the same window, with no clock_gettime(). Both include part of the library's own
 * reading (what an empty region measures).
 *
 * Without a daemon every call is a cheap no-op after one warning line on stderr, and
 * the library connects once the daemon is up (then each thread registers at its next
 * region); with PMC_DISABLE=1 everything is off. The library never aborts.
 * What it cannot count (regions nested too deep or ended out of order, a full buffer,
 * names refused, threads with no room for their fds) it counts as dropped, per reason, in
 * the daemon's figures, and says so once per reason on stderr.
 *
 * Waiting: the library waits only where it talks to the daemon, and for the whole process
 * (all its threads together, not each) at most 10 s in all beyond the first 10 ms of each
 * request, whatever the daemon does: slow, hung at Hello or in a registration, stopped
 * while batches flow. A prompt daemon answers a request in 0.1 to 5 ms and uses none of the
 * 10 s. Past its first 10 ms a wait is charged: the time during which any thread is in a
 * charged wait is taken from the 10 s for good, once however many wait together, and every
 * charged wait ends when they are spent, or 2 s after its request began at the latest. A
 * wait given up (the thread runs unprofiled, its regions counted as lost, reason
 * "unregistered"; or the samples stay in its buffer) makes no thread wait for the daemon
 * again until it answered that request or took a datagram again. A signal that interrupts
 * a wait does not start it over. The calls that may wait:
 *   - the process's first pmc_region(), pmc_begin(), PMC_SCOPE, PMC_REGION or
 *     pmc_enabled(): connects (Hello, a round trip);
 *   - a thread's first region (pmc_begin(), PMC_SCOPE, PMC_REGION, or pmc_enabled()):
 *     registers the thread, a round trip; a thread whose registration failed for a while
 *     (no answer in time, a daemon restarting or at a limit) asks again at a region it
 *     begins after a back-off (0.5 s doubled up to 16 s), which waits as a first region
 *     does;
 *   - pmc_flush(), the exit of a registered thread and exit(), while the daemon's queue is
 *     full (each wait for room, until the daemon takes a datagram, as a request);
 *   - any of these and fork(), for the library's lock while another thread holds it over
 *     one of these waits (so within the same bound).
 * Nothing else waits for the daemon: pmc_end() never does, nor pmc_begin() on a thread
 * already registered or refused for good, nor pmc_region() of a new name once connected (it
 * takes a lock that no one holds over a round trip), nor the exit of a thread that was not
 * registered. Registering N threads at once takes N round trips one after another (10,000
 * threads: about 20 s on a 2-CPU machine), which a prompt daemon's requests do not take
 * from the 10 s.
 *
 * Threads: every function may be called from any number of threads at once. pmc_begin(),
 * pmc_end(), pmc_flush(), pmc_enabled() and pmc_thread_uses_rdpmc() act on the calling
 * thread only: a region is ended on the thread that began it. Region ids are the
 * process's: intern a name once, use its id on any thread.
 *
 * Signals: no function here is async-signal-safe: never call one (nor PMC_SCOPE or
 * PMC_REGION) from a signal handler. They change the calling thread's region stack
 * without a lock, which the handler may have interrupted half-way, and a first region or a
 * new name takes a lock and allocates. The library's background thread blocks every
 * signal: it never takes one meant for the application.
 *
 * fork(): the library holds its locks across fork() (pthread_atfork), so that a child of
 * a multithreaded parent finds it consistent and may use it. The child never counts with
 * its parent's counters: they are closed in the child at once; it connects anew, and its
 * thread registers again at its next region (a thread it starts, at its first). A region
 * open across fork() ends in the child without a sample; the samples buffered before
 * fork() are the parent's to send. A child that leaves by _exit() sends nothing unless it
 * calls pmc_flush() first.
 *
 * Environment: PMC_SOCKET (daemon socket, default /run/pmcdaemon/pmc.sock),
 * PMC_EVENTS (comma-separated event names, default: the daemon's set; at most 16: more
 * and each thread is refused, E2BIG), PMC_FLUSH_MS (milliseconds from a region's end
 * to its sample reaching the daemon, default 1000; 0: only when a batch is full, at
 * pmc_flush() and at thread and process exit), PMC_DISABLE=1 (turn everything off).
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

/** Longest region name in bytes; pmc_region() refuses a longer one (never cuts it short). */
#define PMC_REGION_NAME_MAX 127

/**
 * pmc_region() - intern a region name
 * @name: NUL-terminated name of 1 to PMC_REGION_NAME_MAX bytes, borrowed (copied)
 *
 * Thread-safe, not async-signal-safe; the same name always returns the same id for the
 * life of the process, on every thread. A name already interned is found without a lock
 * or an allocation (a hash of the name and a comparison); the first call with a new name
 * takes a lock and copies it; that lock is never held over a round trip (the process's first
 * call connects: "Waiting").
 * In a hot loop keep the id rather than look the name up on every pass. Names are
 * interned also while no daemon is up, so that the id counts once one is.
 * Return: the id, or 0 when @name is NULL or empty, or profiling is disabled, or the
 * name is refused: longer than PMC_REGION_NAME_MAX bytes, or new when the process
 * already has 65,535 names. Each refused call is counted by the daemon as one dropped
 * sample (reasons "name-too-long", "too-many-names"; with PMC_SCOPE and PMC_REGION each
 * run of the region is such a call) and said once on stderr. The daemon's own limit
 * (--max-regions, 4,096 by default) drops and counts the samples of regions past it.
 * Passing 0 to pmc_begin()/pmc_end() does nothing.
 */
PMC_EXPORT pmc_region_t pmc_region(const char *name);

/**
 * pmc_begin() - start a region on the calling thread
 * @region: id from pmc_region()
 *
 * Reads the wall clock and the thread's counters (see "Measurement window" above); regions
 * nest (up to 1,024 deep; deeper
 * ones are counted as dropped, reason "depth"), and each is counted in its call path (the
 * regions open around it, up to 32: pmcctl query --tree) as well as under its name. A thread
 * that reads with read() allocates its deeper frames the first time it nests deeper than 32
 * (64, ...); one that reads in user space only writes a record of what it read, which the
 * library's background thread turns into the region's sample (the nesting, the path).
 * The first call on a thread registers it
 * with the daemon (one round trip; a daemon not answering in time leaves the thread
 * unprofiled), and connects the process first if no thread did (one more round trip): both
 * within the process's wait bound ("Waiting" above); with no daemon up yet, the first call
 * after it is.
 * Later calls do not wait (but a thread asking again after a failed registration:
 * "Waiting" above). With rdpmc available it takes no lock, allocates nothing and
 * makes no syscall.
 * Thread-safe for the calling thread's own regions; not async-signal-safe.
 */
PMC_EXPORT void pmc_begin(pmc_region_t region);

/**
 * pmc_end() - end the innermost open region @region on the calling thread
 * @region: the id given to the matching pmc_begin()
 *
 * Reads the counters and the wall clock (see "Measurement window" above) and buffers one
 * sample (the deltas and the wall time). The sample reaches the daemon within PMC_FLUSH_MS
 * (1 s) in the background; a thread whose buffer holds a batch (512) sends it itself,
 * without waiting for the daemon or for another thread (it tries the lock, and leaves
 * the batch to the background thread when it is taken). While the daemon is away or
 * behind the thread keeps up to 4,096 samples; later ones are dropped (reason
 * "buffer-full"). An @region that is not open is ignored; regions opened inside it and
 * not yet ended are discarded and counted as dropped (reason "nesting").
 * With rdpmc available it takes no lock and makes no syscall but that send, once a batch.
 * It never waits: that send does not block, and a taken lock leaves the batch to the
 * background thread. Thread-safe for the calling thread's own regions; not
 * async-signal-safe.
 */
PMC_EXPORT void pmc_end(pmc_region_t region);

/**
 * pmc_flush() - send the calling thread's buffered samples now
 *
 * Samples are also sent within PMC_FLUSH_MS of their region's end, when a batch is
 * full, when a thread exits and at exit() (every thread's). Not at _exit() or a fatal
 * signal: call pmc_flush() before _exit() in a child, or those samples are lost (the
 * daemon counts as lost those a batch said were still held, no others).
 * A daemon behind (a burst of clients) is back-pressure: while its queue is full,
 * pmc_flush() waits for room, as thread exit and exit() do, for as long as the daemon
 * takes a datagram within 10 ms of each wait, and gives up within the process's wait bound
 * ("Waiting" above) on one that does not. Thread-safe: it sends the
 * calling thread's samples (each thread flushes its own; the background thread sends all
 * of them); not async-signal-safe.
 * Return: 0 (also when there was nothing to send, or PMC_DISABLE turned profiling off),
 * -EAGAIN when it gave up waiting for room (the samples are kept and sent later),
 * -ENOTCONN when no daemon is connected (the samples are kept, up to 4096 per thread,
 * for when it is up), or another negative errno from sending.
 */
PMC_EXPORT int pmc_flush(void);

/**
 * pmc_enabled() - whether the calling thread's regions are counted
 *
 * Registers the calling thread with the daemon if it has not tried yet, as its first
 * region would (connecting first if no region did yet): it may wait as a thread's first
 * pmc_begin() does ("Waiting" above).
 * Return: 1 when the calling thread is registered and its counters count (also while
 * a daemon that went away is being reconnected: the samples wait for it); 0 when they
 * do not: PMC_DISABLE, no daemon, the daemon refused this thread (an unknown event
 * in PMC_EVENTS, --max-threads, ...: another thread of the process may still count), or
 * the process had no room for the thread's counter fds: fewer than their number and 16
 * more free under its RLIMIT_NOFILE (then each of the thread's regions is counted as
 * dropped, reason "fd-limit", and one line on stderr says so once per process).
 */
PMC_EXPORT int pmc_enabled(void);

/**
 * pmc_thread_uses_rdpmc() - how the calling thread reads its counters
 * Return: 1 with rdpmc (no syscall in pmc_begin/pmc_end): the thread reads with rdpmc and
 * its last read (the end of its last region) did; 0 with one read() of each counter group
 * per call (the kernel does not allow rdpmc or give user space its clock, or no hardware
 * PMU), or when that last read had to fall back to read() (a group was not on the PMU at
 * that moment: multiplexed out); -1 when the thread is not profiled (not registered yet,
 * disabled, or no daemon). Thread-safe (about the calling thread); never waits.
 */
PMC_EXPORT int pmc_thread_uses_rdpmc(void);

/* Behind PMC_SCOPE and PMC_REGION: the region a scope began, ended when it is left. */
struct pmc__scope {
	pmc_region_t id;
	int once;
};

/** Internal to PMC_SCOPE and PMC_REGION: ends the scope's region. */
PMC_EXPORT void pmc__scope_end(struct pmc__scope *s);
/**
 * Internal to PMC_SCOPE and PMC_REGION: begins region @name; *@slot (one per call site)
 * caches the id of the name it was last given, checked against @name on every call (a
 * comparison of the strings), so a name that changes at run time is counted under each
 * of its values. Return: the id begun (0: none).
 */
PMC_EXPORT pmc_region_t pmc__scope_begin(pmc_region_t *slot, const char *name);
/**
 * Internal to PMC_SCOPE and PMC_REGION where @name is a string literal, whose call site's name
 * never changes: as pmc__scope_begin(), but a slot that holds an id is taken as it is, with no
 * comparison of the strings. Return: the id begun (0: none).
 */
PMC_EXPORT pmc_region_t pmc__scope_begin_literal(pmc_region_t *slot, const char *name);

/* The macros' begin: a literal name (known to the compiler) takes the slot's id as it is. */
#if defined(__GNUC__) || defined(__clang__)
#define PMC__BEGIN(slot, name)                                                                     \
	(__builtin_constant_p(name) ? pmc__scope_begin_literal((slot), (name))                     \
	                            : pmc__scope_begin((slot), (name)))
#else
#define PMC__BEGIN(slot, name) pmc__scope_begin((slot), (name))
#endif

#define PMC__CAT2(a, b) a##b
#define PMC__CAT(a, b) PMC__CAT2(a, b)
#if defined(__COUNTER__)
#define PMC__UNIQUE(prefix) PMC__CAT(prefix, __COUNTER__)
#else
#define PMC__UNIQUE(prefix) PMC__CAT(prefix, __LINE__)
#endif

#ifdef __cplusplus
}
#endif

#if defined(__cplusplus)
/* The C++ side of the macros: a guard that ends its region in its destructor, by any
 * way out of its scope, an exception too. (<pmc/pmc.hpp> has the C++ API proper.) */
extern "C++" {
struct pmc__guard {
	pmc_region_t id;
	int once;
	explicit pmc__guard(pmc_region_t begun) noexcept : id(begun), once(1)
	{
	}
	~pmc__guard()
	{
		pmc_end(id);
	}
	pmc__guard(const pmc__guard &) = delete;
	pmc__guard &operator=(const pmc__guard &) = delete;
};
}
#endif

/**
 * PMC_SCOPE() - measure the rest of the enclosing block as region @name
 * @name: string; a literal, or a buffer or pointer whose name changes at run time
 *        (compared on every call: each value is a region of its own)
 *
 *	for (size_t i = 0; i < n; i++) {
 *		PMC_SCOPE("item");
 *		if (skip(i))
 *			continue;	// the application's loop, as without PMC_SCOPE
 *		work(i);
 *	}
 *
 * A declaration (C99 and later: anywhere in a block, not right after a case label;
 * not in an inline function of external linkage, which may not hold a static; no goto
 * or case label may jump past it into its block: clang refuses that, gcc warns only
 * with -Wjump-misses-init). The region begins here and ends when the block is left by
 * any path: its end, break, continue, return, goto, or in C++ an exception. Several in one block
 *nest, the later inside the earlier. Needs GCC or Clang in C (the cleanup attribute); any C++
 *compiler. Cost beyond pmc_begin()/pmc_end(): a comparison of @name with the name cached for this
 *call site.
 */
#if defined(__cplusplus)
#define PMC__SCOPE(name, v)                                                                        \
	static pmc_region_t PMC__CAT(v, _slot);                                                    \
	pmc__guard v(PMC__BEGIN(&PMC__CAT(v, _slot), (name)))
#define PMC_SCOPE(name) PMC__SCOPE(name, PMC__UNIQUE(pmc__scope_))
#elif defined(__GNUC__)
#define PMC__SCOPE(name, v)                                                                        \
	static pmc_region_t PMC__CAT(v, _slot);                                                    \
	struct pmc__scope v __attribute__((cleanup(pmc__scope_end), unused)) = {                   \
	        PMC__BEGIN(&PMC__CAT(v, _slot), (name)), 1}
#define PMC_SCOPE(name) PMC__SCOPE(name, PMC__UNIQUE(pmc__scope_))
#endif

/**
 * PMC_REGION() - run the following statement or block as region @name
 * @name: string, as for PMC_SCOPE()
 *
 *	PMC_REGION("parse") { parse(buf); }
 *
 * The older block form, kept for compatibility; prefer PMC_SCOPE. It is a hidden
 * one-pass loop: a break or continue inside the block leaves the region's block only,
 * never the application's loop around it (in `for (...) PMC_REGION("x") { if (e)
 * break; }` the loop goes on). return, goto (and in C++ an exception) leave both and end
 * the region too. Needs GCC or Clang in C; any C++ compiler.
 */
#if defined(__cplusplus)
#define PMC__REGION(name, v)                                                                       \
	for (pmc__guard v(PMC__BEGIN(                                                              \
	             []() noexcept -> pmc_region_t * {                                             \
		             static pmc_region_t pmc__slot;                                        \
		             return &pmc__slot;                                                    \
	             }(),                                                                          \
	             (name)));                                                                     \
	     v.once; v.once = 0)
#define PMC_REGION(name) PMC__REGION(name, PMC__UNIQUE(pmc__region_))
#elif defined(__GNUC__)
/* __extension__: the statement expression, which gives the call site its static slot
 * from inside the for, is no warning under -pedantic. */
#define PMC__REGION(name, v)                                                                       \
	for (struct pmc__scope v __attribute__((cleanup(                                           \
	             pmc__scope_end))) = {PMC__BEGIN(__extension__({                               \
		                                             static pmc_region_t pmc__slot;        \
		                                             &pmc__slot;                           \
	                                             }),                                           \
	                                             (name)),                                      \
	                                  1};                                                      \
	     v.once; v.once = 0)
#define PMC_REGION(name) PMC__REGION(name, PMC__UNIQUE(pmc__region_))
#endif

#endif
