/* pmcctl run's whole-program figures per process and per thread. The daemon opens the
 * command's inherited counters per task (OpenCommand.per_task: inherit_stat, PERF_FORMAT_ID,
 * and comm and task records on the first): as each thread or process of the command ends,
 * the kernel writes its own counts (PERF_RECORD_READ, with its pid and tid) to a ring buffer
 * that pmcctl maps on the first counter, the others' output sent there too. The task the
 * command started as never sends one: its counts are the sum less all the others'. A ring
 * that fills before pmcctl reads it loses records (PERF_RECORD_LOST): their tasks are in
 * the sum only, and the figures say how many. */

#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/util.h"
#include "pmcctl/event-name.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/query.h"
#include "pmcctl/run-tasks.h"
#include "pmcctl/run-whole.h"

/* Data pages of the ring (a power of two): 64 KiB holds about 1,300 ended tasks between two
 * reads, which run's loop makes at least every 10 ms. */
#define TASKS_RING_PAGES 16

/* The task @tid of process @pid in @w, added (with @comm, or its parent's) if new. */
static struct whole_task *
task_get(struct whole *w, uint32_t pid, uint32_t tid)
{
	for (size_t i = 0; i < w->n_task; i++)
		if (w->task[i].tid == tid && w->task[i].pid == pid)
			return &w->task[i];
	if (w->n_task == w->cap_task) {
		size_t cap = w->cap_task ? 2 * w->cap_task : 16;
		struct whole_task *v = reallocarray(w->task, cap, sizeof(*v));

		if (!v)
			pmcctl_oom();
		w->task = v;
		w->cap_task = cap;
	}
	struct whole_task *t = &w->task[w->n_task++];
	*t = (struct whole_task){.pid = pid, .tid = tid};
	return t;
}

static struct whole_task *
task_find_tid(struct whole *w, uint32_t tid)
{
	for (size_t i = 0; i < w->n_task; i++)
		if (w->task[i].tid == tid)
			return &w->task[i];
	return NULL;
}

/* Says in @w->task_why why there are no figures per task (@fmt, with strerror(@err) and
 * the ring's KiB), and gives them up. */
static void
tasks_give_up(struct whole *w, const char *fmt, int err)
{
	free(w->task_why);
	if (asprintf(&w->task_why, fmt, strerror(err), w->n_groups * w->ring_len / 1024) < 0)
		pmcctl_oom();
	w->per_task = false;
}

/* Unmaps @w's rings. */
static void
tasks_unmap(struct whole *w)
{
	for (size_t g = 0; g < w->n_rings; g++)
		munmap(w->rings[g], w->ring_len);
	w->n_rings = 0;
}

void
run_tasks_start(struct whole *w, pid_t child, const char *comm)
{
	w->n_task = 0;
	w->lost = 0;
	w->child = child;
	tasks_unmap(w); /* the last run's */
	if (!w->per_task)
		return;
	w->ring_len = (size_t)sysconf(_SC_PAGESIZE) * (1 + TASKS_RING_PAGES);
	free(w->rings);
	free(w->ids);
	w->rings = calloc(w->n_groups + 1, sizeof(*w->rings));
	w->ids = calloc(w->n_groups * w->n + 1, sizeof(*w->ids));
	if (!w->rings || !w->ids)
		pmcctl_oom();
	/* A ring per CPU, on its first counter; the CPU's others write there too. */
	for (size_t g = 0; g < w->n_groups; g++) {
		int lead = w->fds[g * w->n];
		void *ring = mmap(NULL, w->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED, lead, 0);

		if (ring == MAP_FAILED) {
			tasks_give_up(
			        w,
			        "cannot map the counters' ring buffers (%s): they need %zu KiB "
			        "of locked memory (perf_event_mlock_kb, RLIMIT_MEMLOCK)",
			        errno);
			tasks_unmap(w);
			return;
		}
		w->rings[w->n_rings++] = ring;
		for (size_t i = 0; i < w->n; i++) {
			int fd = w->fds[g * w->n + i];

			if (ioctl(fd, PERF_EVENT_IOC_ID, &w->ids[g * w->n + i]) < 0 ||
			    (i && ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, lead) < 0)) {
				tasks_give_up(w,
				              "cannot gather the counters' records (%s; %zu KiB)",
				              errno);
				tasks_unmap(w);
				return;
			}
		}
	}
	/* The command's own task: named after the command until its COMM record. */
	struct whole_task *t = task_get(w, (uint32_t)child, (uint32_t)child);
	const char *base = strrchr(comm, '/');
	snprintf(t->comm, sizeof(t->comm), "%s", base ? base + 1 : comm);
}

/* The event index of counter id @id, -1 if none. */
static ssize_t
tasks_event(const struct whole *w, uint64_t id)
{
	for (size_t k = 0; k < w->n * w->n_groups; k++)
		if (w->ids[k] == id)
			return (ssize_t)(k % w->n);
	return -1;
}

/* Takes the record @h, whose bytes are at @rec. */
static void
tasks_record(struct whole *w, const struct perf_event_header *h, const uint8_t *rec)
{
	const uint32_t *u32 = (const uint32_t *)(rec + sizeof(*h));

	switch (h->type) {
	case PERF_RECORD_READ: {
		/* pid, tid, value, time enabled, time running, id: one a CPU */
		const uint64_t *v = (const uint64_t *)(u32 + 2);
		ssize_t k;

		if (h->size < sizeof(*h) + 8 + 32 || (k = tasks_event(w, v[3])) < 0)
			return;
		struct whole_task *t = task_get(w, u32[0], u32[1]);
		t->v[k] += (double)v[0];
		t->run[k] += (double)v[2];
		if ((double)v[1] > t->en[k])
			t->en[k] = (double)v[1];
		t->ended = true;
		break;
	}
	case PERF_RECORD_COMM: {
		size_t max = h->size - sizeof(*h) - 8;
		struct whole_task *t = task_get(w, u32[0], u32[1]);

		snprintf(t->comm, sizeof(t->comm), "%.*s", (int)(max < 15 ? max : 15),
		         (const char *)(u32 + 2));
		break;
	}
	case PERF_RECORD_FORK: {
		/* pid, ppid, tid, ptid: a new task has its parent's name until its
		 * own COMM */
		if (h->size < sizeof(*h) + 16)
			return;
		/* task_get() first: it may move the array a parent's pointer would point into. */
		struct whole_task *t = task_get(w, u32[0], u32[2]);
		const struct whole_task *parent = task_find_tid(w, u32[3]);
		if (parent && parent != t && !t->comm[0])
			memcpy(t->comm, parent->comm, sizeof(t->comm));
		break;
	}
	case PERF_RECORD_LOST: {
		const uint64_t *v = (const uint64_t *)(rec + sizeof(*h));

		if (h->size >= sizeof(*h) + 16)
			w->lost += v[1];
		break;
	}
	default:
		break;
	}
}

/* Takes the records of ring @pg. */
static void
tasks_drain_ring(struct whole *w, struct perf_event_mmap_page *pg)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	const uint8_t *data = (const uint8_t *)pg + (pg->data_offset ? pg->data_offset : page);
	uint64_t size = pg->data_size ? pg->data_size : w->ring_len - page;
	uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = pg->data_tail;
	uint64_t words[(UINT16_MAX + 1) / 8]; /* the longest record (its size is 16 bits) */
	uint8_t *rec = (uint8_t *)words;

	while (tail + sizeof(struct perf_event_header) <= head) {
		struct perf_event_header h;

		for (size_t i = 0; i < sizeof(h); i++)
			((uint8_t *)&h)[i] = data[(tail + i) % size];
		if (h.size < sizeof(h) || tail + h.size > head)
			break;
		for (size_t i = 0; i < h.size; i++)
			rec[i] = data[(tail + i) % size];
		tasks_record(w, &h, rec);
		tail += h.size;
	}
	__atomic_store_n(&pg->data_tail, tail, __ATOMIC_RELEASE);
}

void
run_tasks_drain(struct whole *w)
{
	for (size_t g = 0; w->per_task && g < w->n_rings; g++)
		tasks_drain_ring(w, w->rings[g]);
}

void
run_tasks_end(struct whole *w, const double *total)
{
	if (!w->per_task)
		return;
	run_tasks_drain(w);
	/* Each task's own counts, extrapolated where multiplexed. */
	for (size_t i = 0; i < w->n_task; i++) {
		struct whole_task *t = &w->task[i];

		for (size_t k = 0; t->ended && k < w->n; k++)
			t->v[k] = event_name_scaled(w->names[k], t->v[k], t->en[k], t->run[k],
			                            &t->scaled);
	}
	/* One task sends no record: the one whose context held the counters pmcctl reads when
	 * it ended: the command's own, whose context the anchor keeps from being swapped with
	 * another task's (with an older daemon's counters, any task's). Its counts are what the
	 * others leave of the sums. Known tasks are the command and those its FORK records
	 * name. */
	size_t silent = 0, rest = 0;
	double left[WHOLE_MAX_EVENTS];
	bool any = false;
	for (size_t i = 0; i < w->n_task; i++)
		if (!w->task[i].ended) {
			rest = i;
			silent++;
		}
	for (size_t k = 0; k < w->n; k++) {
		left[k] = total[k];
		for (size_t i = 0; i < w->n_task; i++)
			if (w->task[i].ended)
				left[k] -= w->task[i].v[k];
		left[k] = left[k] > 0 ? left[k] : 0;
		any |= left[k] >= 0.5;
	}
	if (silent != 1 && !any)
		return;
	if (silent != 1) {
		/* Lost records, or tasks still alive: what is left is nobody's in particular. */
		rest = (size_t)(task_get(w, (uint32_t)w->child, 0) - w->task);
		snprintf(w->task[rest].comm, sizeof(w->task[rest].comm), "(others)");
	}
	memcpy(w->task[rest].v, left, sizeof(left));
	w->task[rest].ended = true;
}

void
run_tasks_free(struct whole *w)
{
	tasks_unmap(w);
	free(w->rings);
	w->rings = NULL;
	free(w->ids);
	w->ids = NULL;
	free(w->task);
	w->task = NULL;
	w->n_task = w->cap_task = 0;
	free(w->task_why);
	w->task_why = NULL;
}

/* ---- per process ---- */

void
run_tasks_processes(const struct whole *w, struct whole_proc **out, size_t *n_out)
{
	struct whole_proc *p = calloc(w->n_task + 1, sizeof(*p));
	size_t n = 0;

	if (!p)
		pmcctl_oom();
	for (size_t i = 0; i < w->n_task; i++) {
		const struct whole_task *t = &w->task[i];
		size_t j = 0;

		if (!t->ended)
			continue;
		while (j < n && p[j].pid != t->pid)
			j++;
		if (j == n) {
			p[n].pid = t->pid;
			memcpy(p[n].comm, t->comm, sizeof(p[n].comm));
			n++;
		}
		/* The process is named by its main thread (pid == tid). */
		if (t->tid == t->pid)
			memcpy(p[j].comm, t->comm, sizeof(p[j].comm));
		p[j].threads++;
		p[j].scaled |= t->scaled;
		for (size_t k = 0; k < w->n; k++)
			p[j].v[k] += t->v[k];
	}
	*out = p;
	*n_out = n;
}

/* The cells of one row of figures: exact counts (scaled ones rounded, marked '*'). */
static void
tasks_cells(struct table *t, const struct whole *w, const double *v, bool scaled)
{
	for (size_t k = 0; k < w->n; k++)
		output_table_add(t, "%.0f%s", v[k], scaled && w->scaled[k] ? "*" : "");
}

void
run_tasks_table(const struct whole *w, bool per_thread, FILE *f)
{
	if (!w->runs || !w->n)
		return;
	if (!w->per_task) {
		if (w->task_why)
			fprintf(f, "\nno figures per process: %s\n", w->task_why);
		return;
	}
	_cleanup_free_ struct whole_proc *p = NULL;
	size_t n_p;

	run_tasks_processes(w, &p, &n_p);
	if (n_p < 2 && !per_thread)
		return; /* the sum is that process's */

	size_t fixed = 3, ncols = fixed + w->n;
	_cleanup_free_ char **head = calloc(ncols, sizeof(*head));
	_cleanup_free_ bool *right = calloc(ncols, sizeof(*right));
	if (!head || !right)
		pmcctl_oom();
	head[0] = (char *)"PID";
	head[1] = (char *)(per_thread ? "TID" : "THREADS");
	head[2] = (char *)"COMM";
	right[0] = right[1] = true;
	for (size_t k = 0; k < w->n; k++) {
		if (asprintf(&head[fixed + k], "%s%s", w->names[k],
		             query_event_counts_ns(w->names[k]) ? " (ns)" : "") < 0)
			pmcctl_oom();
		right[fixed + k] = true;
	}
	struct table t = {.ncols = ncols, .head = (const char *const *)head, .right = right};
	if (per_thread) {
		for (size_t i = 0; i < w->n_task; i++) {
			const struct whole_task *k = &w->task[i];

			if (!k->ended)
				continue;
			output_table_add(&t, "%" PRIu32, k->pid);
			output_table_add(&t, "%" PRIu32, k->tid);
			output_table_add(&t, "%s", k->comm);
			tasks_cells(&t, w, k->v, k->scaled);
		}
	} else {
		for (size_t i = 0; i < n_p; i++) {
			output_table_add(&t, "%" PRIu32, p[i].pid);
			output_table_add(&t, "%zu", p[i].threads);
			output_table_add(&t, "%s", p[i].comm);
			tasks_cells(&t, w, p[i].v, p[i].scaled);
		}
	}
	fprintf(f, "\nthe whole program per %s (%s%zu process%s; they add up to %s):\n",
	        per_thread ? "thread" : "process", w->runs > 1 ? "the last run: " : "", n_p,
	        n_p == 1 ? "" : "es", w->runs > 1 ? "its figures" : "the figures above");
	output_table_print(&t, f);
	output_table_free(&t);
	for (size_t k = 0; k < w->n; k++)
		free(head[fixed + k]);
	if (w->lost)
		fprintf(f,
		        "%" PRIu64 " task%s ended faster than pmcctl read their figures: in the "
		        "sum only\n",
		        w->lost, w->lost == 1 ? "" : "s");
}

/* The figures @v of one process or thread in JSON, by event name. */
static json_t *
tasks_events_json(const struct whole *w, const double *v)
{
	json_t *o = output_jobject();

	for (size_t k = 0; k < w->n; k++)
		output_jset(o, w->names[k], output_ju64((uint64_t)(v[k] + 0.5)));
	return o;
}

void
run_tasks_json(const struct whole *w, bool per_thread, json_t *o)
{
	if (!w->per_task) {
		if (w->task_why)
			output_jset(o, "per_process_error", output_jstr(w->task_why));
		return;
	}
	_cleanup_free_ struct whole_proc *p = NULL;
	size_t n_p;
	json_t *procs = output_jarray();

	run_tasks_processes(w, &p, &n_p);
	for (size_t i = 0; i < n_p; i++) {
		json_t *po = output_jobject();

		output_jset(po, "pid", json_integer(p[i].pid));
		output_jset(po, "comm", output_jstr(p[i].comm));
		output_jset(po, "threads", json_integer((json_int_t)p[i].threads));
		output_jset(po, "events", tasks_events_json(w, p[i].v));
		output_jappend(procs, po);
	}
	output_jset(o, "processes", procs);
	if (per_thread) {
		json_t *threads = output_jarray();

		for (size_t i = 0; i < w->n_task; i++) {
			const struct whole_task *k = &w->task[i];
			json_t *to;

			if (!k->ended)
				continue;
			to = output_jobject();
			output_jset(to, "pid", json_integer(k->pid));
			output_jset(to, "tid", json_integer(k->tid));
			output_jset(to, "comm", output_jstr(k->comm));
			output_jset(to, "events", tasks_events_json(w, k->v));
			output_jappend(threads, to);
		}
		output_jset(o, "threads", threads);
	}
	output_jset(o, "lost_tasks", output_ju64(w->lost));
}

/* One CSV row a event of the figures @v of a process or thread (@region names which). */
static void
tasks_csv_rows(const struct whole *w, uint32_t pid, const char *comm, const char *region,
               const double *v, bool scaled)
{
	for (size_t k = 0; k < w->n; k++) {
		struct whole_stat s = {.mean = v[k], .min = v[k], .max = v[k], .last = v[k]};

		run_whole_csv_row(pid, comm, region, 1, w->names[k], &s, scaled && w->scaled[k]);
	}
}

void
run_tasks_csv(const struct whole *w, bool per_thread)
{
	if (!w->per_task)
		return;
	_cleanup_free_ struct whole_proc *p = NULL;
	size_t n_p;

	run_tasks_processes(w, &p, &n_p);
	for (size_t i = 0; i < n_p; i++)
		tasks_csv_rows(w, p[i].pid, p[i].comm, "(process)", p[i].v, p[i].scaled);
	for (size_t i = 0; per_thread && i < w->n_task; i++) {
		const struct whole_task *t = &w->task[i];
		char region[32];

		if (!t->ended)
			continue;
		snprintf(region, sizeof(region), "(thread %" PRIu32 ")", t->tid);
		tasks_csv_rows(w, t->pid, t->comm, region, t->v, t->scaled);
	}
}
