/* pmcctl run's whole-program figures: counters the daemon opens on the command before its
 * exec (OpenCommand), inherited by every thread and process it starts, read once it has
 * ended, with no pmc call in the program; over -r N runs, their mean and spread, as
 * `perf stat -r` gives them. */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pmcctl.h"
#include "wire.h"

#define WHOLE_TIMEOUT_MS 5000

void
whole_free(struct whole *w)
{
	for (size_t i = 0; i < w->n; i++) {
		free(w->names[i]);
		if (w->fds[i] >= 0)
			close(w->fds[i]);
	}
	free(w->why);
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

int
whole_open(struct whole *w, int sock, pid_t child, const char *events)
{
	Pmc__OpenCommand oc = PMC__OPEN_COMMAND__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	_cleanup_free_ char *copy = events ? strdup(events) : NULL;
	char *names[WHOLE_MAX_EVENTS + 1];
	_cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
	int fds[WHOLE_MAX_EVENTS];
	size_t n_fds = 0;
	Pmc__Response *resp = NULL;

	if (events && !copy)
		oom();
	if (pidfd < 0)
		return -errno;
	oc.n_events = whole_split(copy, names, ARRAY_SIZE(names));
	oc.events = names;
	req.body_case = PMC__REQUEST__BODY_OPEN_COMMAND;
	req.open_command = &oc;
	int r = wire_send(sock, &req.base, &pidfd, 1, 0);
	if (r < 0)
		return r;
	uint8_t *buf = NULL;
	size_t len = 0;
	r = wire_wait(sock, WHOLE_TIMEOUT_MS, &buf, &len, fds, ARRAY_SIZE(fds), &n_fds);
	if (r < 0)
		return r;
	r = wire_unpack_response(buf, len, &resp);
	free(buf);
	if (r == 0 && resp->error) {
		w->why = escape_text(resp->message);
		r = -(resp->error < 0 ? -resp->error : resp->error);
	} else if (r == 0 && (resp->body_case != PMC__RESPONSE__BODY_COMMAND ||
	                      resp->command->n_events != n_fds || !n_fds)) {
		r = -EBADMSG;
	}
	if (r < 0) {
		for (size_t i = 0; i < n_fds; i++)
			close(fds[i]);
		if (resp)
			pmc__response__free_unpacked(resp, NULL);
		return r;
	}
	if (!w->n) {
		w->n = n_fds;
		for (size_t i = 0; i < n_fds; i++) {
			w->names[i] = strdup(resp->command->events[i]);
			if (!w->names[i])
				oom();
		}
	}
	for (size_t i = 0; i < w->n; i++)
		w->fds[i] = i < n_fds ? fds[i] : -1;
	for (size_t i = w->n; i < n_fds; i++)
		close(fds[i]);
	pmc__response__free_unpacked(resp, NULL);
	return 0;
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
}

void
whole_read(struct whole *w, uint64_t wall_ns)
{
	w->runs++;
	for (size_t i = 0; i < w->n; i++) {
		uint64_t v[3] = {0}; /* value, time enabled, time running */
		double value = 0;

		if (w->fds[i] >= 0 && read(w->fds[i], v, sizeof(v)) == (ssize_t)sizeof(v)) {
			value = (double)v[0];
			/* Multiplexed: scaled to the time enabled, as perf stat does. */
			if (v[2] && v[2] < v[1]) {
				value = (double)v[0] * (double)v[1] / (double)v[2];
				w->scaled[i] = true;
			}
		}
		if (w->fds[i] >= 0)
			close(w->fds[i]);
		w->fds[i] = -1;
		whole_add(&w->ev[i], w->runs, value);
	}
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

static void
whole_row(struct table *t, const char *name, const struct whole_stat *s, unsigned runs, bool scaled,
          bool ns)
{
	table_add(t, "(whole program)");
	table_add(t, "%s%s", name, scaled ? "*" : "");
	table_add(t, "%.0f", s->mean);
	table_add(t, "%s", ns ? "ns" : "");
	if (runs > 1) {
		table_add(t, "%.2f%%", whole_spread(s, runs));
		table_add(t, "%.0f", s->min);
		table_add(t, "%.0f", s->max);
	}
}

void
whole_table(const struct whole *w, FILE *f)
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
		whole_row(&t, w->names[i], &w->ev[i], w->runs, w->scaled[i],
		          event_counts_ns(w->names[i]));
	whole_row(&t, "wall", &w->wall, w->runs, false, true);
	fprintf(f, "\nthe whole program, its threads and the processes it started (exact counts");
	if (w->runs > 1)
		fprintf(f, "; the mean of %u runs, +- the standard deviation in %% of it", w->runs);
	fprintf(f, "):\n");
	table_print(&t, f);
	table_free(&t);
}

/* One figure of @s in JSON: its value, or over runs its mean, stddev, min and max. */
static json_t *
whole_stat_json(const struct whole_stat *s, unsigned runs, bool scaled)
{
	json_t *o = jobject();

	jset(o, "value", runs > 1 ? jreal(s->mean) : ju64((uint64_t)s->mean));
	jset(o, "scaled", json_boolean(scaled));
	if (runs > 1) {
		jset(o, "stddev", jreal(sqrt(s->m2 / (runs - 1))));
		jset(o, "min", jreal(s->min));
		jset(o, "max", jreal(s->max));
	}
	return o;
}

json_t *
whole_json(const struct whole *w)
{
	json_t *o = jobject();
	json_t *ev = jobject();

	jset(o, "runs", json_integer(w->runs));
	if (!w->n) {
		jset(o, "error", jstr(w->why ? w->why : ""));
		return o;
	}
	for (size_t i = 0; i < w->n; i++)
		jset(ev, w->names[i], whole_stat_json(&w->ev[i], w->runs, w->scaled[i]));
	jset(o, "events", ev);
	jset(o, "wall_ns", whole_stat_json(&w->wall, w->runs, false));
	return o;
}
