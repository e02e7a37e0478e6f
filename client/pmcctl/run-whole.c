/* pmcctl run's whole-program figures: counters the daemon opens on the command before its
 * exec (OpenCommand), inherited by every thread and process it starts, read once it has
 * ended, with no pmc call in the program; over -r N runs, their mean and spread, as
 * `perf stat -r` gives them. */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/event-name.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/query.h"
#include "pmcctl/run-tasks.h"
#include "pmcctl/run-whole.h"
#include "wire/wire.h"

#define WHOLE_TIMEOUT_MS 5000

void
run_whole_close(struct whole *w)
{
	for (size_t k = 0; k < w->n * w->n_groups; k++)
		close(w->fds[k]);
	free(w->fds);
	w->fds = NULL;
	w->n_groups = 0;
	if (w->anchored)
		close(w->anchor);
	w->anchored = false;
}

void
run_whole_free(struct whole *w)
{
	run_whole_close(w);
	for (size_t i = 0; i < w->n; i++)
		free(w->names[i]);
	free(w->why);
	run_tasks_free(w);
	*w = (struct whole){0};
}

/* The comma-separated @events as a list of names in @copy (NULL: none, the default set). */
static size_t
whole_split(char *copy, char **names, size_t max)
{
	size_t n = 0;

	for (char *save = NULL, *e = copy ? strtok_r(copy, ",", &save) : NULL; e && n < max;
	     e = strtok_r(NULL, ",", &save))
		names[n++] = e;
	return n;
}

/* One OpenCommand for @w's command (@pidfd, borrowed) from CPU @first_cpu: its fds are
 * appended to @w's, @w->n per group (per CPU when the daemon counts per task). Sets *@next to
 * the CPU to ask from next, or to 0 when there is none left. Return: as run_whole_open(). */
static int
whole_open_part(struct whole *w, int sock, int pidfd, char **names, size_t n_names,
                uint32_t first_cpu, uint32_t *next)
{
	Pmc__OpenCommand oc = PMC__OPEN_COMMAND__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	int fds[WIRE_MAX_FDS];
	size_t n_fds = 0, n_groups = 0;
	Pmc__Response *resp = NULL;
	uint8_t *buf = NULL;
	size_t len = 0;

	*next = 0;
	oc.n_events = n_names;
	oc.events = names;
	oc.per_task = true; /* figures per process and thread too (run-tasks.c) */
	oc.first_cpu = first_cpu;
	oc.anchor = first_cpu == 0; /* once a run; held until its counters are read */
	req.body_case = PMC__REQUEST__BODY_OPEN_COMMAND;
	req.open_command = &oc;
	int r = pmc_wire_send(sock, &req.base, &pidfd, 1, 0);
	if (r < 0)
		return r;
	r = pmc_wire_wait(sock, WHOLE_TIMEOUT_MS, &buf, &len, fds, ARRAY_SIZE(fds), &n_fds);
	if (r < 0)
		return r;
	r = pmc_wire_unpack_response(buf, len, &resp);
	free(buf);
	const Pmc__CommandReply *cr =
	        r == 0 && !resp->error && resp->body_case == PMC__RESPONSE__BODY_COMMAND
	                ? resp->command
	                : NULL;
	if (cr)
		n_groups = cr->per_task ? cr->n_cpus : 1;
	bool anchor = cr && cr->anchor;
	if (r == 0 && resp->error) {
		w->why = output_escape_text(resp->message);
		r = -(resp->error < 0 ? -resp->error : resp->error);
	} else if (r == 0 &&
	           (!cr || !cr->n_events || cr->n_events > WHOLE_MAX_EVENTS ||
	            (w->n && cr->n_events != w->n) || n_fds != cr->n_events * n_groups + anchor ||
	            (anchor && (!cr->per_task || first_cpu)) || (!n_groups && !first_cpu) ||
	            (!cr->per_task && first_cpu))) {
		r = -EBADMSG; /* an older daemon's, or not understood */
	}
	if (r < 0) {
		for (size_t i = 0; i < n_fds; i++)
			close(fds[i]);
		if (resp)
			pmc__response__free_unpacked(resp, NULL);
		return r;
	}
	if (!w->n) {
		w->per_task = cr->per_task; /* an older daemon's: false */
		w->n = cr->n_events;
		for (size_t i = 0; i < w->n; i++) {
			w->names[i] = strdup(cr->events[i]);
			if (!w->names[i])
				pmcctl_oom();
		}
	}
	int *grown = reallocarray(w->fds, w->n * (w->n_groups + n_groups) + 1, sizeof(*grown));
	if (!grown)
		pmcctl_oom();
	w->fds = grown;
	memcpy(w->fds + w->n * w->n_groups, fds, (n_fds - anchor) * sizeof(*fds));
	w->n_groups += n_groups;
	if (anchor) {
		w->anchor = fds[n_fds - 1];
		w->anchored = true;
	} else if (cr->per_task && !first_cpu && !w->unanchored_said) {
		/* An older daemon's: the kernel may swap the command's counter context with its
		 * threads' and exchange counts between its events (OpenCommand.anchor). */
		fprintf(stderr, "pmcctl: run: this pmcdaemon opens no anchor with the command's "
		                "counters (it is older than pmcctl): the whole-program figures of "
		                "events of two PMUs (task-clock and page-faults) may be exchanged "
		                "between them; update pmcdaemon\n");
		w->unanchored_said = true;
	}
	if (cr->per_task && cr->more && n_groups)
		*next = (uint32_t)cr->cpus[n_groups - 1] + 1;
	pmc__response__free_unpacked(resp, NULL);
	return 0;
}

int
run_whole_open(struct whole *w, int sock, pid_t child, const char *events)
{
	_cleanup_free_ char *copy = events ? strdup(events) : NULL;
	char *names[WHOLE_MAX_EVENTS + 1];
	_cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
	size_t n_names;
	uint32_t cpu = 0;
	int r;

	if (events && !copy)
		pmcctl_oom();
	if (!call_hello_said.commands) {
		/* 0.1.0's closes the connection at an OpenCommand. */
		if (!w->why &&
		    asprintf(&w->why,
		             "pmcdaemon %s counts no whole command (pmcctl " PMC_VERSION
		             "'s run needs pmcdaemon 0.2.0 or later); the regions are counted",
		             call_hello_said.version) < 0)
			pmcctl_oom();
		return -EOPNOTSUPP;
	}
	if (pidfd < 0)
		return -errno;
	n_names = whole_split(copy, names, ARRAY_SIZE(names));
	run_whole_close(w);
	do {
		r = whole_open_part(w, sock, pidfd, names, n_names, cpu, &cpu);
	} while (r == 0 && cpu);
	if (r < 0)
		run_whole_close(w);
	return r;
}

/* Adds @v to the running mean and squared deviations of @s (Welford). */
static void
whole_add(struct whole_stat *s, unsigned runs, double v)
{
	double d = v - s->mean;

	s->mean += d / runs;
	s->m2 += d * (v - s->mean);
	if (runs == 1 || v < s->min)
		s->min = v;
	if (runs == 1 || v > s->max)
		s->max = v;
	s->last = v;
	s->sum += v;
}

void
run_whole_read(struct whole *w, uint64_t wall_ns)
{
	double total[WHOLE_MAX_EVENTS] = {0}, en[WHOLE_MAX_EVENTS] = {0},
	       run[WHOLE_MAX_EVENTS] = {0};

	w->runs++;
	/* Each event's values and times running added up over its CPUs, its time enabled the
	 * longest, extrapolated where it was multiplexed (event_name_scaled()). */
	for (size_t k = 0; k < w->n * w->n_groups; k++) {
		uint64_t v[4] = {0}; /* value, time enabled, time running (, id: per task) */

		if (w->fds[k] < 0 || read(w->fds[k], v, sizeof(v)) < (ssize_t)(3 * sizeof(*v)))
			continue;
		total[k % w->n] += (double)v[0];
		run[k % w->n] += (double)v[2];
		if ((double)v[1] > en[k % w->n])
			en[k % w->n] = (double)v[1];
	}
	for (size_t i = 0; i < w->n; i++) {
		total[i] = event_name_scaled(w->names[i], total[i], en[i], run[i], &w->scaled[i]);
		whole_add(&w->ev[i], w->runs, total[i]);
	}
	run_tasks_end(w, total);
	run_whole_close(w);
	whole_add(&w->wall, w->runs, (double)wall_ns);
}

/* The sample standard deviation of @s over @runs, as a percentage of its mean. */
static double
whole_spread(const struct whole_stat *s, unsigned runs)
{
	if (runs < 2 || s->mean == 0)
		return 0;
	return 100 * sqrt(s->m2 / (runs - 1)) / s->mean;
}

/* A row of @t: @region, event @name, then @s's mean (or value), unit and, over runs, its
 * spread, min and max. */
static void
whole_row(struct table *t, const char *region, const char *name, const struct whole_stat *s,
          unsigned runs, bool scaled, bool ns)
{
	output_table_add(t, "%s", region);
	output_table_add(t, "%s%s", name, scaled ? "*" : "");
	output_table_add(t, "%.0f", s->mean);
	output_table_add(t, "%s", ns ? "ns" : "");
	if (runs > 1) {
		output_table_add(t, "%.2f%%", whole_spread(s, runs));
		output_table_add(t, "%.0f", s->min);
		output_table_add(t, "%.0f", s->max);
	}
}

void
run_whole_table(const struct whole *w, bool per_thread, FILE *f)
{
	static const char *const head[] = {"REGION", "EVENT", "COUNT", "UNIT", "+-", "MIN", "MAX"};
	static const char *const head_mean[] = {"REGION", "EVENT", "MEAN", "UNIT",
	                                        "+-",     "MIN",   "MAX"};
	static const bool right[] = {false, false, true, false, true, true, true};
	struct table t = {.ncols = w->runs > 1 ? 7 : 4,
	                  .head = w->runs > 1 ? head_mean : head,
	                  .right = right};

	if (!w->n) {
		fprintf(f, "\nno whole-program figures%s%s\n", w->why ? ": " : "",
		        w->why ? w->why : "");
		return;
	}
	for (size_t i = 0; i < w->n; i++)
		whole_row(&t, "(whole program)", w->names[i], &w->ev[i], w->runs, w->scaled[i],
		          query_event_counts_ns(w->names[i]));
	whole_row(&t, "(whole program)", "wall", &w->wall, w->runs, false, true);
	fprintf(f, "\nthe whole program, its threads and the processes it started (exact counts");
	if (w->runs > 1)
		fprintf(f, "; the mean of %u runs, +- the standard deviation in %% of it", w->runs);
	fprintf(f, "):\n");
	output_table_print(&t, f);
	output_table_free(&t);
	run_tasks_table(w, per_thread, f);
}

/* One figure of @s in JSON: its value, or over runs its mean, stddev, min and max. */
static json_t *
whole_stat_json(const struct whole_stat *s, unsigned runs, bool scaled)
{
	json_t *o = output_jobject();

	output_jset(o, "value", runs > 1 ? output_jreal(s->mean) : output_ju64((uint64_t)s->mean));
	output_jset(o, "scaled", json_boolean(scaled));
	if (runs > 1) {
		output_jset(o, "stddev", output_jreal(sqrt(s->m2 / (runs - 1))));
		output_jset(o, "min", output_jreal(s->min));
		output_jset(o, "max", output_jreal(s->max));
	}
	return o;
}

json_t *
run_whole_json(const struct whole *w, bool per_thread)
{
	json_t *o = output_jobject();

	output_jset(o, "runs", json_integer(w->runs));
	if (!w->n) {
		output_jset(o, "error", output_jstr(w->why ? w->why : ""));
		return o;
	}
	json_t *ev = output_jobject(); /* made only here: one not given to @o would be leaked */
	for (size_t i = 0; i < w->n; i++)
		output_jset(ev, w->names[i], whole_stat_json(&w->ev[i], w->runs, w->scaled[i]));
	output_jset(o, "events", ev);
	output_jset(o, "wall_ns", whole_stat_json(&w->wall, w->runs, false));
	run_tasks_json(w, per_thread, o);
	return o;
}

void
run_whole_csv_row(int64_t pid, const char *comm, const char *region, unsigned runs,
                  const char *event, const struct whole_stat *s, bool scaled)
{
	output_csv_i64(pid);
	output_csv_str(comm);
	output_csv_str(region);
	output_csv_u64(runs);
	output_csv_str(event);
	output_csv_u64((uint64_t)(s->mean + 0.5)); /* sum: one run's (the mean of the runs) */
	output_csv_real(s->min);
	output_csv_real(s->max);
	output_csv_real(s->mean);
	output_csv_real(runs > 1 ? sqrt(s->m2 / (runs - 1)) : 0);
	for (int i = 0; i < 3; i++) /* p50, p90, p99 */
		output_csv_str("");
	output_csv_bool(scaled);
	for (int i = 0; i < 5; i++) /* running_ratio, floor, too_short, cgroup, ns_pid */
		output_csv_str("");
	output_csv_end();
}

void
run_whole_csv(const struct whole *w, pid_t pid, const char *comm, bool per_thread)
{
	if (!w->n || !w->runs)
		return;
	for (size_t i = 0; i < w->n; i++)
		run_whole_csv_row(pid, comm, "(whole program)", w->runs, w->names[i], &w->ev[i],
		                  w->scaled[i]);
	run_whole_csv_row(pid, comm, "(whole program)", w->runs, "wall_ns", &w->wall, false);
	run_tasks_csv(w, per_thread);
}

/* ---- run -r N: each region merged over the runs ---- */

/* By program name, then region name. */
static int
merge_key_cmp(const void *a, const void *b)
{
	const Pmc__RegionStats *x = *(const Pmc__RegionStats *const *)a;
	const Pmc__RegionStats *y = *(const Pmc__RegionStats *const *)b;
	int c = strcmp(x->comm, y->comm);

	return c ? c : strcmp(x->name, y->name);
}

static int
merge_find_cmp(const void *key, const void *elem)
{
	const Pmc__RegionStats *k = key;
	const struct merged_region *m = elem;
	int c = strcmp(k->comm, m->comm);

	return c ? c : strcmp(k->name, m->name);
}

/* The index of event @name in @m, added if new; -1 past WHOLE_MAX_EVENTS (the library's
 * own limit of events per region, PMC_LIMIT_EVENTS: a reply cannot hold more). */
static ssize_t
merge_event(struct merged_region *m, const char *name)
{
	for (size_t i = 0; i < m->n_ev; i++)
		if (!strcmp(m->ev_name[i], name))
			return (ssize_t)i;
	if (m->n_ev == WHOLE_MAX_EVENTS)
		return -1;
	m->ev_name[m->n_ev] = name;
	return (ssize_t)m->n_ev++;
}

void
run_whole_merge(struct merged *m, const Pmc__QueryReply *const *replies, unsigned runs,
                bool (*keep)(int32_t pid, unsigned run, void *ctx), void *ctx)
{
	size_t n_all = 0, n = 0;

	*m = (struct merged){.runs = runs};
	for (unsigned r = 0; r < runs; r++)
		n_all += replies[r]->n_regions;
	_cleanup_free_ const Pmc__RegionStats **all = calloc(n_all + 1, sizeof(*all));
	if (!all)
		pmcctl_oom();
	n_all = 0;
	for (unsigned r = 0; r < runs; r++)
		for (size_t i = 0; i < replies[r]->n_regions; i++)
			if (!keep || keep(replies[r]->regions[i]->pid, r, ctx))
				all[n_all++] = replies[r]->regions[i];
	qsort(all, n_all, sizeof(*all), merge_key_cmp);
	m->r = calloc(n_all + 1, sizeof(*m->r));
	if (!m->r)
		pmcctl_oom();
	for (size_t i = 0; i < n_all; i++)
		if (!n || merge_key_cmp(&all[i], &all[i - 1])) {
			m->r[n].comm = all[i]->comm;
			m->r[n++].name = all[i]->name;
		}
	m->n = n;

	/* Each run's figures of a region: calls, wall, its events, over the run's processes. */
	_cleanup_free_ double *cur = calloc(n * (2 + WHOLE_MAX_EVENTS) + 1, sizeof(*cur));
	if (!cur)
		pmcctl_oom();
	for (unsigned r = 0; r < runs; r++) {
		memset(cur, 0, n * (2 + WHOLE_MAX_EVENTS) * sizeof(*cur));
		for (size_t i = 0; i < replies[r]->n_regions; i++) {
			const Pmc__RegionStats *rs = replies[r]->regions[i];
			struct merged_region *mr;

			if (keep && !keep(rs->pid, r, ctx))
				continue;
			mr = bsearch(rs, m->r, n, sizeof(*m->r), merge_find_cmp);
			double *c = cur + (size_t)(mr - m->r) * (2 + WHOLE_MAX_EVENTS);
			c[0] += (double)rs->count;
			c[1] += (double)call_stats_or_zero(rs->wall_ns)->sum;
			for (size_t e = 0; e < rs->n_events; e++) {
				ssize_t k = merge_event(mr, rs->events[e]->name);

				if (k < 0)
					continue;
				c[2 + k] += (double)call_stats_or_zero(rs->events[e]->stats)->sum;
				mr->scaled[k] |= rs->events[e]->scaled_count > 0;
			}
		}
		/* A region that did not run in this run counts 0 in it. */
		for (size_t j = 0; j < n; j++) {
			const double *c = cur + j * (2 + WHOLE_MAX_EVENTS);

			whole_add(&m->r[j].calls, r + 1, c[0]);
			whole_add(&m->r[j].wall, r + 1, c[1]);
			for (size_t k = 0; k < WHOLE_MAX_EVENTS; k++)
				whole_add(&m->r[j].ev[k], r + 1, c[2 + k]);
		}
	}
}

void
run_whole_merged_free(struct merged *m)
{
	free(m->r);
	*m = (struct merged){0};
}

void
run_whole_merged_table(const struct merged *m, FILE *f)
{
	static const char *const head[] = {"COMM", "REGION", "EVENT", "MEAN",
	                                   "UNIT", "+-",     "MIN",   "MAX"};
	static const bool right[] = {false, false, false, true, false, true, true, true};
	struct table t = {.ncols = 8, .head = head, .right = right};

	for (size_t i = 0; i < m->n; i++) {
		const struct merged_region *r = &m->r[i];

		output_table_add(&t, "%s", r->comm);
		whole_row(&t, r->name, "calls", &r->calls, m->runs, false, false);
		output_table_add(&t, "%s", r->comm);
		whole_row(&t, r->name, "wall", &r->wall, m->runs, false, true);
		for (size_t k = 0; k < r->n_ev; k++) {
			output_table_add(&t, "%s", r->comm);
			whole_row(&t, r->name, r->ev_name[k], &r->ev[k], m->runs, r->scaled[k],
			          query_event_counts_ns(r->ev_name[k]));
		}
	}
	fprintf(f,
	        "each region over the %u runs (its figures in a run added up over the run's "
	        "processes, 0 in a run where it did not run; the mean, +- the standard "
	        "deviation in %% of it, min and max):\n",
	        m->runs);
	output_table_print(&t, f);
	output_table_free(&t);
}

json_t *
run_whole_merged_json(const struct merged *m)
{
	json_t *a = output_jarray();

	for (size_t i = 0; i < m->n; i++) {
		const struct merged_region *r = &m->r[i];
		json_t *o = output_jobject(), *ev = output_jobject();

		output_jset(o, "comm", output_jstr(r->comm));
		output_jset(o, "name", output_jstr(r->name));
		output_jset(o, "runs", json_integer(m->runs));
		output_jset(o, "calls", whole_stat_json(&r->calls, m->runs, false));
		output_jset(o, "wall_ns", whole_stat_json(&r->wall, m->runs, false));
		for (size_t k = 0; k < r->n_ev; k++)
			output_jset(ev, r->ev_name[k],
			            whole_stat_json(&r->ev[k], m->runs, r->scaled[k]));
		output_jset(o, "events", ev);
		output_jappend(a, o);
	}
	return a;
}

void
run_whole_merged_csv(const struct merged *m, pid_t pid)
{
	for (size_t i = 0; i < m->n; i++) {
		const struct merged_region *r = &m->r[i];

		run_whole_csv_row(pid, r->comm, r->name, m->runs, "calls", &r->calls, false);
		run_whole_csv_row(pid, r->comm, r->name, m->runs, "wall_ns", &r->wall, false);
		for (size_t k = 0; k < r->n_ev; k++)
			run_whole_csv_row(pid, r->comm, r->name, m->runs, r->ev_name[k], &r->ev[k],
			                  r->scaled[k]);
	}
}
