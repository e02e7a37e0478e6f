/* run-tasks.c: the whole-program figures per process and per thread, of the last run, from
 * the ring buffer where the kernel writes each ended task's counts. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "pmcctl/run-whole.h"

/**
 * run_tasks_start() - after run_whole_open() of a run of @child (its command @comm, borrowed): map
 * the ring buffer of @w's counters, where the daemon opened them per task (@w->per_task);
 * on failure say why in @w->task_why and go on without (exits on allocation failure)
 */
void run_tasks_start(struct whole *w, pid_t child, const char *comm);

/** run_tasks_drain() - take the records the ring of @w holds (each ended task's counts, names,
 * forks, losses), freeing its room; call it often while the command runs */
void run_tasks_drain(struct whole *w);

/** run_tasks_end() - once the command has ended and its counters' sums @total (by event, as
 * run_whole_read() read them) are known: drain the ring and give the command's own task what
 * the other tasks leave of the sums */
void run_tasks_end(struct whole *w, const double *total);

/** run_tasks_free() - unmap and free what run-tasks.c holds in @w */
void run_tasks_free(struct whole *w);

/** run_tasks_processes() - the processes of @w's tasks (those whose figures came), each with
 * its threads' counts added up, in *@out (the caller frees it), *@n_out of them */
void run_tasks_processes(const struct whole *w, struct whole_proc **out, size_t *n_out);

/** run_tasks_table() - print on @f the figures per process of @w where the command ran more than
 * one (per thread with @per_thread), or why there are none */
void run_tasks_table(const struct whole *w, bool per_thread, FILE *f);

/** run_tasks_csv() - @w's figures per process as CSV rows of region "(process)", and with
 * @per_thread per thread ("(thread TID)"), as run_whole_csv_row() writes them (of the last run) */
void run_tasks_csv(const struct whole *w, bool per_thread);

/** run_tasks_json() - add to @o (run_whole_json()'s) "processes" (and with @per_thread "threads")
 * and "lost_tasks", or "per_process_error" */
void run_tasks_json(const struct whole *w, bool per_thread, json_t *o);
