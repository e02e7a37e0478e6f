/* run-whole.c: the whole-program figures of run (OpenCommand), over -r N runs; and run -r N
 * merging each region over the runs. Per process and per thread: run-tasks.h. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "pmc.pb-c.h"

#define WHOLE_MAX_EVENTS 16

/* One figure over the runs. */
struct whole_stat {
	double mean, m2, min, max, last;
	double sum; /* over the runs */
};

/* One thread of the command, or a process's main thread (run-tasks.c): its own counts. */
struct whole_task {
	uint32_t pid, tid;
	char comm[16];
	double v[WHOLE_MAX_EVENTS];   /* over its CPUs; extrapolated at its end */
	double en[WHOLE_MAX_EVENTS];  /* ns enabled (the longest of its CPUs') */
	double run[WHOLE_MAX_EVENTS]; /* ns running (its CPUs' added up) */
	bool scaled;                  /* multiplexed */
	bool ended; /* its figures came (its PERF_RECORD_READ; or what the others leave) */
};

/* One process of the command: its threads' counts. */
struct whole_proc {
	uint32_t pid;
	char comm[16];
	size_t threads;
	double v[WHOLE_MAX_EVENTS];
	bool scaled;
};

struct whole {
	size_t n;                      /* events counted (0: none, why says why) */
	char *names[WHOLE_MAX_EVENTS]; /* their canonical names */
	int *fds;        /* the run's counters, n per group (one group, or one per CPU) */
	size_t n_groups; /* 0: none open */
	bool scaled[WHOLE_MAX_EVENTS]; /* multiplexed in some run */
	struct whole_stat ev[WHOLE_MAX_EVENTS], wall;
	unsigned runs;
	char *why; /* the daemon's refusal, escaped */
	/* The run's anchor (OpenCommand.anchor), held open until its counters are read: while
	 * it is, the kernel never swaps the command's counter context with a thread's, whose
	 * counters are in another order (inherit_stat would exchange counts between events). */
	int anchor;
	bool anchored;        /* anchor is open */
	bool unanchored_said; /* the daemon opened none (an older one), said once */
	/* Per task (run-tasks.c), of the last run: */
	bool per_task;  /* the counters send each ended task's figures (a group per CPU) */
	uint64_t *ids;  /* each counter's id (PERF_EVENT_IOC_ID), as fds */
	void **rings;   /* each group's ring buffer, mapped on its first counter */
	size_t n_rings; /* mapped */
	size_t ring_len;
	struct whole_task *task; /* the command's tasks */
	size_t n_task, cap_task;
	uint64_t lost;  /* tasks whose figures the ring lost (PERF_RECORD_LOST): in the sum only */
	char *task_why; /* why there are no figures per task (NULL: none asked, or there are) */
	pid_t child;    /* the command's process */
};

/**
 * run_whole_open() - ask the daemon on @sock (Hello said, borrowed) for counters of @child, a
 * child of pmcctl that waits before its exec: @events (comma-separated; NULL: the daemon's
 * default set), inherited by all it starts, enabled at its exec
 * The first call names @w's events; later calls (the next runs) take the same ones.
 * Return: 0, the fds in @w; or -errno: the daemon's refusal (its message in @w->why, to free
 * with run_whole_free()), or a failure to talk to it (-EBADMSG: an answer not understood, such
 * as an older daemon's closing of the connection).
 */
int run_whole_open(struct whole *w, int sock, pid_t child, const char *events);

/** run_whole_read() - read and close @w's counters once the command (which ran @wall_ns) and
 * all it started have ended, and add them to the runs' figures */
void run_whole_read(struct whole *w, uint64_t wall_ns);

/** run_whole_table() - print @w's figures as a table on @f (or why there are none), then those
 * per process (run_tasks_table(); per thread with @per_thread) */
void run_whole_table(const struct whole *w, bool per_thread, FILE *f);

/** run_whole_json() - @w's figures as a JSON object (new reference), with those per process
 * (and per thread with @per_thread: run_tasks_json()) */
json_t *run_whole_json(const struct whole *w, bool per_thread);

/**
 * run_whole_csv() - @w's figures as CSV rows with query's columns (a header printed before):
 * region "(whole program)" with pid @pid and @comm (borrowed), count the runs, sum the
 * figure of a run (their mean), min, max, mean and stddev over the runs, wall_ns last;
 * then those of run_tasks_csv()
 */
void run_whole_csv(const struct whole *w, pid_t pid, const char *comm, bool per_thread);

/** run_whole_csv_row() - one such row, of event @event's figures @s over @runs runs */
void run_whole_csv_row(int64_t pid, const char *comm, const char *region, unsigned runs,
                       const char *event, const struct whole_stat *s, bool scaled);

/** run_whole_close() - close @w's counters of this run (none open: nothing) */
void run_whole_close(struct whole *w);

/** run_whole_free() - close and free what @w holds; it is then empty */
void run_whole_free(struct whole *w);

/* run -r N: each region (by program and region name) merged over the runs. */
struct merged_region {
	const char *comm, *name;               /* borrowed from a reply */
	size_t n_ev;                           /* its events, in the order first met */
	const char *ev_name[WHOLE_MAX_EVENTS]; /* borrowed */
	bool scaled[WHOLE_MAX_EVENTS];         /* multiplexed in some process */
	struct whole_stat calls, wall, ev[WHOLE_MAX_EVENTS];
};

struct merged {
	struct merged_region *r; /* by program name, then region name */
	size_t n;
	unsigned runs;
};

/**
 * run_whole_merge() - merge the regions of @runs runs into @m: @replies[r] holds run r's
 * processes (borrowed: they must outlive @m); @keep (NULL: all) whether process @pid's
 * regions in @replies[r] belong to run r (@ctx passed on). A region's figures in a run
 * (calls, wall time, each event's sum) are added up over the run's processes, 0 in a run
 * where it did not run; @m holds their mean, spread, min and max over the runs. Free @m with
 * run_whole_merged_free(). Exits on allocation failure.
 */
void run_whole_merge(struct merged *m, const Pmc__QueryReply *const *replies, unsigned runs,
                     bool (*keep)(int32_t pid, unsigned run, void *ctx), void *ctx);

/** run_whole_merged_free() - free what @m holds (not the replies it borrows); it is then empty */
void run_whole_merged_free(struct merged *m);

/** run_whole_merged_table() - print @m on @f: a row per region and figure (calls, wall, each
 * event): the mean, +- the standard deviation in % of it, min and max, as run_whole_table() over
 * runs */
void run_whole_merged_table(const struct merged *m, FILE *f);

/** run_whole_merged_json() - @m as a JSON array (new reference): per region comm, name, runs, and
 * calls, wall_ns and each event's {value (the mean), stddev, min, max, scaled} */
json_t *run_whole_merged_json(const struct merged *m);

/** run_whole_merged_csv() - @m as CSV rows with query's columns (a header printed before), as
 * run_whole_csv_row() writes them: pid @pid (the last run's command), count the runs, event
 * calls, wall_ns, then each event */
void run_whole_merged_csv(const struct merged *m, pid_t pid);
