/* pmc-shared: the figures and names the client library, pmcdaemon and pmcctl must agree on,
 * each written once: the default socket, the limits the library keeps and the daemon
 * checks, and the reasons samples go uncounted with the names pmcctl shows. Internal only;
 * what the wire says is in pmc.proto (PathLimits), what applications see in <pmc/pmc.h>. */
#pragma once

/* Where pmcdaemon listens, pmcctl and the library connect, unless told otherwise
 * (--socket, PMC_SOCKET). */
#define PMC_SOCKET_DEFAULT "/run/pmcdaemon/pmc.sock"

/* Events one thread counts at most (RegisterThread's events; PMC_EVENTS). */
#define PMC_LIMIT_EVENTS 16

/* Regions open at once on a thread; the library drops deeper ones ("depth"). */
#define PMC_LIMIT_DEPTH 1024
/* Regions in the longest call path a node is kept for (pmc.proto's PATH_MAX_DEPTH); a
 * region begun deeper counts under its name only ("path-depth"). */
#define PMC_LIMIT_PATH_DEPTH 32
/* The longest region name, in bytes: <pmc/pmc.h>'s PMC_REGION_NAME_MAX. */
#define PMC_LIMIT_NAME_MAX 127
/* The largest region id (and path id) of a process: 1 to 65,535. */
#define PMC_LIMIT_REGION_ID 65535

#ifdef PMC_REGION_NAME_MAX
_Static_assert(PMC_LIMIT_NAME_MAX == PMC_REGION_NAME_MAX,
               "the daemon's longest name is the library's public PMC_REGION_NAME_MAX");
#endif

/**
 * enum pmc_loss - why samples of a process were not counted
 *
 * The first ones, up to PMC_LOSS_NO_DAEMON, the library counts and reports (the dropped_*
 * fields of SampleBatch); the others are the daemon's own. pmc_loss_name() gives the name
 * pmcctl shows (and the library's warnings name).
 */
enum pmc_loss {
	PMC_LOSS_DEPTH,        /* "depth": nested deeper than PMC_LIMIT_DEPTH */
	PMC_LOSS_NESTING,      /* "nesting": left open when an enclosing region ended or the
	                        * thread exited */
	PMC_LOSS_FULL,         /* "buffer-full": the thread's buffer was full */
	PMC_LOSS_READ,         /* "read-failed": reading the counters failed */
	PMC_LOSS_EXITED,       /* "thread-exited": held by a thread that exited before sending */
	PMC_LOSS_NAMES,        /* "too-many-names": pmc_region() past PMC_LIMIT_REGION_ID names */
	PMC_LOSS_LONG_NAMES,   /* "name-too-long": a name over PMC_LIMIT_NAME_MAX bytes, refused */
	PMC_LOSS_FD_LIMIT,     /* "fd-limit": regions of threads that ran unprofiled, the process
	                        * having no room for their counter fds (RLIMIT_NOFILE) */
	PMC_LOSS_UNREGISTERED, /* "unregistered": regions of threads whose registration failed
	                        * for a while (a slow or restarting daemon, one at a limit) */
	PMC_LOSS_NO_DAEMON,    /* "no-daemon": regions begun while no daemon answered */
	PMC_LOSS_OTHER,        /* "other": dropped without a reason (an older library) */
	PMC_LOSS_MAX_REGIONS,  /* "max-regions": daemon: --max-regions, its per-user share or
	                        * --max-total-regions */
	PMC_LOSS_BATCH_RATE,   /* "batch-rate": daemon: over --max-batch-rate */
	PMC_LOSS_REFUSED,      /* "thread-refused": daemon: batches of a thread it refused */
	PMC_LOSS_UNSENT,       /* "unsent": lost: the process ended holding samples it had
	                        * announced (SampleBatch.pending) */
	PMC_LOSS_N
};

/** pmc_loss_name() - the short name of @r ("depth", ...; NULL past PMC_LOSS_N) */
static inline const char *
pmc_loss_name(unsigned r)
{
	static const char *const names[PMC_LOSS_N] = {
	        [PMC_LOSS_DEPTH] = "depth",
	        [PMC_LOSS_NESTING] = "nesting",
	        [PMC_LOSS_FULL] = "buffer-full",
	        [PMC_LOSS_READ] = "read-failed",
	        [PMC_LOSS_EXITED] = "thread-exited",
	        [PMC_LOSS_NAMES] = "too-many-names",
	        [PMC_LOSS_LONG_NAMES] = "name-too-long",
	        [PMC_LOSS_FD_LIMIT] = "fd-limit",
	        [PMC_LOSS_UNREGISTERED] = "unregistered",
	        [PMC_LOSS_NO_DAEMON] = "no-daemon",
	        [PMC_LOSS_OTHER] = "other",
	        [PMC_LOSS_MAX_REGIONS] = "max-regions",
	        [PMC_LOSS_BATCH_RATE] = "batch-rate",
	        [PMC_LOSS_REFUSED] = "thread-refused",
	        [PMC_LOSS_UNSENT] = "unsent",
	};
	return r < PMC_LOSS_N ? names[r] : NULL;
}
