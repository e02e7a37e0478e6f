/* perf: event names and perf_event_open() for the daemon. The daemon resolves every
 * name (the privileged side decides what an event means) and opens the counters of a
 * client thread as one group. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PMC_LIMIT_EVENTS 16
#define PERF_NAME_MAX 64

struct perf_event_attr;

/** One named event this daemon knows. */
struct perf_known {
	const char *name;
	const char *description;
	uint32_t type;
	uint64_t config;
};

/**
 * perf_known_events() - the table of event names this daemon resolves
 * @n: set to its length
 * Return: the static table (borrowed).
 */
const struct perf_known *perf_known_events(size_t *n);

/**
 * perf_resolve() - fill @attr for event @name ("cycles", "page-faults:u", ...)
 * @attr: zeroed and filled on success, ready for perf_event_open() in a group whose
 *        leader reads PERF_FORMAT_GROUP with both total times
 * Modifiers: ":u" user only, ":k" kernel only, ":uk" both. Without one, hardware events
 * count user mode only and software events count both (they count kernel activity:
 * page faults, context switches).
 * Return: 0, -ENOENT for an unknown name, -EINVAL for a bad modifier or a long name.
 */
int perf_resolve(const char *name, struct perf_event_attr *attr);

/**
 * perf_canonical() - the one spelling of event @name that the daemon keeps and reports
 * @out: @size bytes (at least PERF_NAME_MAX): "context-switches" for "cs" or "cs:uk",
 *       "page-faults:u", "cycles" for "cycles:u", "perf::TASK-CLOCK" for
 *       "PERF::task-clock:u" (libpfm4 names count user mode unless told otherwise),
 *       "perf::TASK-CLOCK:u:k" for both modes, umasks in libpfm4's order
 * @attr: filled as perf_resolve() fills it for @out
 * Accepts NAME, NAME:u, NAME:k and NAME:uk (each mode at most once) and, for libpfm4
 * names, the event's umasks: never a sampling period or frequency, exclusive or pinned
 * counters, a CPU, or any other modifier.
 * Return: 0, -ENOENT for an unknown name, -EINVAL for a modifier not accepted.
 */
int perf_canonical(const char *name, char *out, size_t size, struct perf_event_attr *attr);

/**
 * perf_suggest() - the known name closest to @name (edit distance), for error messages
 * Return: a static name (borrowed), or NULL when nothing is close.
 */
const char *perf_suggest(const char *name);

/**
 * perf_plan() - split @n events into perf groups
 * @order: @n slots: order[k] is the index in @names of the k-th event to open
 * @group: @n slots: group[k] is the group of the k-th event; groups are contiguous and
 *         the first event of each is its leader
 * Software events share one group; hardware events go in groups of at most
 * perf_hw_counters(), which the kernel multiplexes when they do not all fit.
 * Return: 0, or the perf_resolve() error of the first bad name.
 */
int perf_plan(char *const *names, size_t n, size_t *order, uint32_t *group);

/**
 * perf_open_inherited() - open @n events on process @pid and all it starts, from its exec on
 * @pid: a process that has not exec'd yet; its threads and the processes it forks inherit
 *       the counters, whose counts come back to these fds as each of them ends
 * @cpu: -1: on any CPU; else what they count on CPU @cpu only (the kernel lets the owner map
 *       a ring buffer on such a counter, not on one of every CPU: @per_task needs it)
 * @names: event names (borrowed), already checked with perf_resolve()
 * @per_task: each with inherit_stat (a PERF_RECORD_READ of each task that ends, in a ring
 *            buffer the fd's owner may mmap) and PERF_FORMAT_ID, the first also with comm and
 *            task (COMM, FORK and EXIT records)
 * @fds: @n slots; the caller owns them all on success. Each is its own event (no group),
 *       disabled until @pid's exec, read() as value, time enabled, time running (and the
 *       event's id with @per_task).
 * Return: 0, or the perf_event_open() error of event *@failed (nothing left open).
 */
int perf_open_inherited(pid_t pid, int cpu, char *const *names, size_t n, bool per_task, int *fds,
                        size_t *failed);

/**
 * perf_open_anchor() - open a counter on process @pid's own task that the tasks it starts do
 * not inherit (a software dummy event, never enabled: it counts nothing)
 * @pid: the process of perf_open_inherited(), before its exec
 * While it is open, the kernel copies no counter context of @pid's to the tasks it starts (it
 * clones a context only when all its events are inherited), and so never swaps that context
 * with one of theirs at a context switch. Such a swap of contexts with inherit_stat counters
 * exchanges the counts of the two contexts' events pairwise in list order; the list of
 * @pid's context is in perf_event_open() order, a copy's in the kernel's (CPU, PMU) order:
 * of events of two PMUs (task-clock and page-faults), one's count would land in the other's.
 * The copies that @pid's threads and children make of their own contexts are in one order.
 * Return: the fd (the caller's; the anchor holds while it is open), or the perf_event_open()
 * error (-errno).
 */
int perf_open_anchor(pid_t pid);

/**
 * perf_online_cpus() - the online CPUs numbered @first or more, in order, at most @max of
 * them, in @cpus (/sys/devices/system/cpu/online)
 * Return: how many (0 when the file cannot be read).
 */
size_t perf_online_cpus(unsigned first, int *cpus, size_t max);

/**
 * perf_open_group() - open @n resolved events on thread @tid in the groups of @group
 * @tid: thread to count (any CPU)
 * @names: event names (borrowed) in opening order, already checked with perf_resolve()
 * @group: as perf_plan() gives it; updated to the groups opened (see below)
 * @fds: @n slots; the caller owns them all on success
 * Each group leader is opened disabled: the counted thread enables its groups with
 * ioctl(PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP) on each leader. A member the kernel
 * refuses in its group with EINVAL (the group could never be on the PMU at once: counter
 * constraints, or fewer counters than libpfm4 reports) is opened again as the leader of a
 * new group, with the rest of its group; @group then names the new group (a number no
 * other group has), so groups stay contiguous and each one's first event leads it.
 * Return: 0, or -errno of the failing perf_event_open() (every fd opened so far
 * closed); *@failed is set to the index of the event that failed.
 */
int perf_open_group(pid_t tid, char *const *names, uint32_t *group, size_t n, int *fds,
                    size_t *failed);

/**
 * perf_set_open_hook() - replace perf_event_open() for perf_open_group() and perf_probe()
 * @fn: called as perf_event_open(@attr, @tid, -1, @group_fd, PERF_FLAG_FD_CLOEXEC) would be,
 *      returning an fd or -errno; NULL restores the system call
 *
 * For tests: a machine without a PMU cannot make the kernel refuse a group.
 */
void perf_set_open_hook(int (*fn)(struct perf_event_attr *attr, pid_t tid, int group_fd));

/** perf_hw_counters() - hardware events per group (the core PMU's generic counters). */
unsigned perf_hw_counters(void);

/**
 * perf_pfm_events() - call @fn for every event of every PMU libpfm4 finds on this host,
 * named "PMU::EVENT" (strings valid during the call only)
 */
void perf_pfm_events(void (*fn)(void *ctx, const char *name, const char *desc), void *ctx);

/**
 * perf_setup() - probe the machine once at start-up
 *
 * Finds whether a hardware PMU can count (sets the default event set accordingly) and
 * keeps one event of each software kind open for the daemon's life, which makes every
 * later open and close of those events about 12x cheaper (the kernel skips its
 * first-user set-up and last-user teardown).
 */
void perf_setup(void);

/** perf_cleanup() - close what perf_setup() holds. */
void perf_cleanup(void);

/**
 * perf_privileged() - whether perf_setup() found the daemon root or holding CAP_PERFMON
 * (or CAP_SYS_ADMIN): without, the kernel lets it count only its own user's threads, and
 * perf_setup() said so in a warning
 */
bool perf_privileged(void);

/** perf_hardware_pmu() - whether perf_setup() found a usable hardware PMU. */
bool perf_hardware_pmu(void);

/**
 * perf_user_reads() - whether client threads may read their hardware counters in user space
 * (x86 rdpmc, arm64 mrs), which the kernel decides
 * @hint: set to the command that allows them where the kernel does not (arm64:
 *        kernel.perf_user_access 0, its default; x86: the PMU's rdpmc file 0), else NULL; a
 *        static string
 * Reads the setting now: it may change while the daemon runs. False without a hardware PMU.
 * Return: true when they may.
 */
bool perf_user_reads(const char **hint);

/**
 * perf_default_events() - the event names used when a client asks for none
 * @n: set to the count
 * Return: static names (borrowed).
 */
char *const *perf_default_events(size_t *n);

/**
 * perf_probe() - try to open @name on the daemon itself
 * Return: 0 when it can be counted here, else the negative errno.
 */
int perf_probe(const char *name);
