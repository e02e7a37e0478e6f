/* pmcctl top: a live view of the busiest regions, rates between two snapshots (a Status
 * and a Query), refreshed until Ctrl-C. */

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "pmcctl/query.h"
#include "pmcctl/top.h"

/* One Status and one Query, and when they were taken. */
struct top_snap {
	Pmc__Response *status, *query;
	uint64_t t_ns;
	const Pmc__RegionStats **sorted; /* the query's regions by (pid, name) */
};

struct top_row {
	const Pmc__RegionStats *r, *prev; /* prev: the same region one refresh ago, or NULL */
	double rate;                      /* runs per second */
	double wall;                      /* mean wall ns of the runs in the interval */
};

static void
top_snap_free(struct top_snap *s)
{
	if (s->status)
		pmc__response__free_unpacked(s->status, NULL);
	if (s->query)
		pmc__response__free_unpacked(s->query, NULL);
	free(s->sorted);
	memset(s, 0, sizeof(*s));
}

static void
top_fetch(int sock, const struct opts *o, struct top_snap *s)
{
	Pmc__Status st = PMC__STATUS__INIT;
	Pmc__Query q;
	Pmc__Request req = PMC__REQUEST__INIT;

	req.body_case = PMC__REQUEST__BODY_STATUS;
	req.status = &st;
	s->status = call_request(sock, "top", &req, PMC__RESPONSE__BODY_STATUS);

	call_query_init(&q, o);
	s->query = call_query(sock, "top", &q, o);
	s->t_ns = util_now_ns(CLOCK_MONOTONIC);

	size_t n = s->query->query->n_regions;
	s->sorted = calloc(n + 1, sizeof(*s->sorted));
	if (!s->sorted)
		pmcctl_oom();
	if (n)
		memcpy(s->sorted, s->query->query->regions, n * sizeof(*s->sorted));
	qsort(s->sorted, n, sizeof(*s->sorted), query_region_key_cmp);
}

static const Pmc__RegionStats *
top_find(const struct top_snap *s, const Pmc__RegionStats *r)
{
	const Pmc__RegionStats **hit;

	if (!s->query)
		return NULL;
	hit = bsearch(&r, s->sorted, s->query->query->n_regions, sizeof(*s->sorted),
	              query_region_key_cmp);
	return hit ? *hit : NULL;
}

static const Pmc__EventStats *
find_event(const Pmc__RegionStats *r, const char *name)
{
	for (size_t i = 0; r && i < r->n_events; i++)
		if (!strcmp(r->events[i]->name, name))
			return r->events[i];
	return NULL;
}

/* Growth of a sum since the previous refresh; after a reset, the whole new sum. */
static uint64_t
delta(uint64_t now, uint64_t before)
{
	return now >= before ? now - before : now;
}

/* Per-second rate of event @name in @row, NAN when the region does not count it. */
static double
top_event_rate(const struct top_row *row, const char *name, double dt)
{
	const Pmc__EventStats *e = find_event(row->r, name);
	const Pmc__EventStats *pe = find_event(row->prev, name);

	if (!e)
		return NAN;
	return (double)delta(call_stats_or_zero(e->stats)->sum,
	                     pe ? call_stats_or_zero(pe->stats)->sum : 0) /
	       dt;
}

static int
top_row_cmp(const void *a, const void *b)
{
	const struct top_row *x = a, *y = b;

	if (x->rate != y->rate)
		return x->rate > y->rate ? -1 : 1;
	if (x->r->count != y->r->count)
		return x->r->count > y->r->count ? -1 : 1;
	return query_region_key_cmp(&x->r, &y->r);
}

/* Writes the first @len bytes of @s, cut to @cols terminal columns, and a newline. */
static void
put_cut(const char *s, size_t len, size_t cols)
{
	mbstate_t st;
	size_t w = 0, n = len;
	const char *p = s;

	memset(&st, 0, sizeof(st));
	while (n) {
		wchar_t wc;
		size_t k = mbrtowc(&wc, p, n, &st);
		size_t cw = 1;

		if (k == (size_t)-1 || k == (size_t)-2) {
			memset(&st, 0, sizeof(st));
			k = 1;
		} else if (k == 0) {
			break;
		} else {
			int c = wcwidth(wc);
			cw = c > 0 ? (size_t)c : 0;
		}
		if (w + cw > cols)
			break;
		w += cw;
		p += k;
		n -= k;
	}
	fwrite(s, 1, (size_t)(p - s), stdout);
	putchar('\n');
}

/* Where to break a header line of @len bytes at @s to fit @cols columns: after the last
 * ", ", "; " or "- " that ends a field within them; 0: nowhere. Columns are counted as bytes:
 * the header is escaped text. */
static size_t
header_break(const char *s, size_t len, size_t cols)
{
	size_t cut = 0;

	for (size_t i = 1; i + 1 < len && i < cols; i++)
		if (s[i] == ' ' && strchr(",;-", s[i - 1]))
			cut = i;
	return cut;
}

/* Prints @text (lines ending in '\n') with each line cut to @cols columns, but for its first
 * @n_wrap lines (the header), wrapped between fields, each further part indented by two
 * columns, so that none of its fields is lost; only counts them when @print is false.
 * Return: the lines printed. */
static size_t
put_lines_cut(const char *text, size_t cols, size_t n_wrap, bool print)
{
	size_t lines = 0;

	for (size_t line = 0; *text; line++, lines++) {
		const char *nl = strchr(text, '\n');
		size_t len = nl ? (size_t)(nl - text) : strlen(text);
		size_t width = cols, cut;
		const char *indent = "";

		while (line < n_wrap && len > width && (cut = header_break(text, len, width))) {
			if (print)
				printf("%s%.*s\n", indent, (int)cut, text);
			lines++;
			text += cut + 1;
			len -= cut + 1;
			indent = "  ";
			width = cols > 2 ? cols - 2 : cols;
		}
		if (print) {
			fputs(indent, stdout);
			put_cut(text, len, width);
		}
		text += len + (nl != NULL);
	}
	return lines;
}

/* The two header lines of top: the daemon, and its figures; in @f. */
static void
top_header(FILE *f, const struct top_snap *cur, const struct top_snap *prev, const struct opts *o,
           double dt, size_t n_show)
{
	const Pmc__StatusReply *s = cur->status->status, *ps = prev->status->status;
	size_t n_regions = cur->query->query->n_regions;
	_cleanup_free_ char *version = output_escape_text(s->daemon_version);
	char clock[16], showing[64] = "", rate[32];
	time_t now = time(NULL);
	struct tm tm;
	uint64_t up = s->uptime_ns / 1000000000u;

	strftime(clock, sizeof(clock), "%H:%M:%S", localtime_r(&now, &tm));
	fprintf(f, "pmcctl top - %s - every %g s - pmcdaemon %s (pid %" PRId32 "), up ", clock,
	        o->interval, version, s->pid);
	if (up >= 86400)
		fprintf(f, "%" PRIu64 "d ", up / 86400);
	fprintf(f, "%u:%02u:%02u\n", (unsigned)(up % 86400 / 3600), (unsigned)(up % 3600 / 60),
	        (unsigned)(up % 60));
	if (n_show < n_regions)
		snprintf(showing, sizeof(showing), "; showing %zu of %zu regions", n_show,
		         n_regions);
	output_format_si(rate, sizeof(rate), (double)delta(s->samples, ps->samples) / dt);
	fprintf(f,
	        "clients %" PRIu32 ", threads %" PRIu32 ", processes %" PRIu32 ", regions %" PRIu32
	        "; samples %" PRIu64 " (%s/s), batches %" PRIu64 ", dropped %" PRIu64
	        ", rejected %" PRIu64 "%s\n",
	        s->clients, s->threads, s->processes, s->regions, s->samples, rate, s->batches,
	        s->dropped, s->rejected, showing);
}

/* The lines top_header() takes on a terminal of @cols columns, wrapped. */
static size_t
top_header_lines(const struct top_snap *cur, const struct top_snap *prev, const struct opts *o,
                 double dt, size_t n_show, size_t cols)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		pmcctl_oom();
	top_header(f, cur, prev, o, dt, n_show);
	if (fclose(f))
		pmcctl_oom();
	size_t n = put_lines_cut(text, cols, 2, false);
	free(text);
	return n;
}

static void
top_print(const struct top_snap *cur, const struct top_snap *prev, const struct opts *o, bool tty,
          size_t max_rows, size_t cols)
{
	const Pmc__QueryReply *q = cur->query->query;
	double dt = (double)(cur->t_ns - prev->t_ns) / 1e9;
	_cleanup_free_ struct top_row *rows = calloc(q->n_regions + 1, sizeof(*rows));
	_cleanup_free_ char *text = NULL;
	size_t text_len = 0;
	FILE *f;

	if (!rows)
		pmcctl_oom();
	if (dt <= 0)
		dt = 1e-9;
	for (size_t i = 0; i < q->n_regions; i++) {
		struct top_row *row = &rows[i];
		const Pmc__RegionStats *p = top_find(prev, q->regions[i]);

		row->r = q->regions[i];
		/* A count that went down was reset: count it all as new. */
		row->prev = p && p->count <= row->r->count ? p : NULL;
		uint64_t runs = delta(row->r->count, row->prev ? row->prev->count : 0);
		uint64_t wall = delta(call_stats_or_zero(row->r->wall_ns)->sum,
		                      row->prev ? call_stats_or_zero(row->prev->wall_ns)->sum : 0);
		row->rate = (double)runs / dt;
		row->wall = runs ? (double)wall / (double)runs : NAN;
	}
	qsort(rows, q->n_regions, sizeof(*rows), top_row_cmp);
	size_t n_show = q->n_regions < max_rows ? q->n_regions : max_rows;
	/* On a terminal, a header wrapped past its two lines takes rows of the table (then
	 * counted again: it now says "showing N of M"). */
	for (int k = 0; tty && n_show && k < 2; k++) {
		size_t extra = top_header_lines(cur, prev, o, dt, n_show, cols) - 2;

		if (n_show + extra <= max_rows)
			break;
		n_show = max_rows > extra ? max_rows - extra : 1;
	}

	/* One column per event the shown rows count, in order of first appearance. */
	_cleanup_free_ const char **ev = calloc(1, sizeof(*ev));
	size_t n_ev = 0;
	if (!ev)
		pmcctl_oom();
	for (size_t i = 0; i < n_show; i++)
		for (size_t j = 0; j < rows[i].r->n_events; j++) {
			const char *name = rows[i].r->events[j]->name;
			size_t k = 0;

			while (k < n_ev && strcmp(ev[k], name))
				k++;
			if (k < n_ev)
				continue;
			const char **v = reallocarray(ev, n_ev + 2, sizeof(*ev));
			if (!v)
				pmcctl_oom();
			ev = v;
			ev[n_ev++] = name;
		}

	static const char *const fixed_head[] = {"PID",    "COMM", "CONTAINER", "REGION",
	                                         "RUNS/S", "RUNS", "WALL/RUN"};
	static const bool fixed_right[] = {true, false, false, false, true, true, true};
	size_t nf = ARRAY_SIZE(fixed_head);
	_cleanup_free_ char **head = calloc(nf + n_ev, sizeof(*head));
	_cleanup_free_ bool *right = calloc(nf + n_ev, sizeof(*right));
	if (!head || !right)
		pmcctl_oom();
	for (size_t c = 0; c < nf; c++) {
		head[c] = (char *)fixed_head[c];
		right[c] = fixed_right[c];
	}
	/* A clock's nanoseconds per second are a CPU utilization: shown as perf stat's "CPUs
	 * utilized", in per cent of one CPU (a rate of "7.5M" task-clock ns/s is 0.8 %). */
	for (size_t k = 0; k < n_ev; k++) {
		_cleanup_free_ char *name = output_escape_text(ev[k]);

		if (asprintf(&head[nf + k], query_event_counts_ns(ev[k]) ? "%s %%CPU" : "%s/s",
		             name) < 0)
			pmcctl_oom();
		right[nf + k] = true;
	}
	struct table t = {.ncols = nf + n_ev, .head = (const char *const *)head, .right = right};
	for (size_t i = 0; i < n_show; i++) {
		const struct top_row *row = &rows[i];
		char a[32], b[32];

		output_format_si(a, sizeof(a), row->rate);
		output_format_ns(b, sizeof(b), row->wall);
		output_table_add(&t, "%" PRId32, row->r->pid);
		output_table_add(&t, "%s", row->r->comm);
		output_table_add_container(&t, row->r);
		output_table_add(&t, "%s", row->r->name);
		output_table_add(&t, "%s", a);
		output_table_add(&t, "%" PRIu64, row->r->count);
		output_table_add(&t, "%s", b);
		for (size_t k = 0; k < n_ev; k++) {
			double r = top_event_rate(row, ev[k], dt);

			if (query_event_counts_ns(ev[k]) && !isnan(r))
				snprintf(a, sizeof(a), "%.1f", r / 1e7);
			else
				output_format_si(a, sizeof(a), r);
			output_table_add(&t, "%s", a);
		}
	}

	f = open_memstream(&text, &text_len);
	if (!f)
		pmcctl_oom();
	top_header(f, cur, prev, o, dt, n_show);
	fputc('\n', f);
	if (n_show) {
		output_table_print(&t, f);
	} else {
		_cleanup_free_ char *why = NULL;

		query_empty_reason(q, o, &why);
		_cleanup_free_ char *safe = output_escape_text(why);
		fprintf(f, "%s\n", safe);
	}
	output_table_free(&t);
	for (size_t k = 0; k < n_ev; k++)
		free(head[nf + k]);
	if (fclose(f))
		pmcctl_oom();

	if (tty) {
		fputs("\033[H\033[2J", stdout);
		put_lines_cut(text, cols, 2, true); /* the two header lines */
	} else {
		fwrite(text, 1, text_len, stdout);
	}
}

/* Never runs: SIGINT and SIGTERM stay blocked and are taken by sigtimedwait(). Installing
 * it undoes an inherited SIG_IGN, which would discard them. */
static void
top_on_signal(int sig)
{
}

/* Sleeps @ns; true when SIGINT or SIGTERM came, now or while the daemon was answering. */
static bool
top_sleep(const sigset_t *set, uint64_t ns)
{
	uint64_t end = util_now_ns(CLOCK_MONOTONIC) + ns;

	for (;;) {
		uint64_t now = util_now_ns(CLOCK_MONOTONIC);
		uint64_t left = end > now ? end - now : 0;
		struct timespec ts = {.tv_sec = (time_t)(left / 1000000000u),
		                      .tv_nsec = (long)(left % 1000000000u)};

		if (sigtimedwait(set, NULL, &ts) > 0)
			return true;
		if (errno == EAGAIN)
			return false;
	}
}

int
cmd_top(int sock, const struct command *cmd, const struct opts *o)
{
	struct top_snap prev = {0}, cur = {0};
	struct sigaction sa = {.sa_handler = top_on_signal};
	sigset_t set;
	bool tty = isatty(STDOUT_FILENO);
	uint64_t interval_ns = (uint64_t)(o->interval * 1e9);

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	/* Rates need two snapshots: the first screen comes after at most a second. */
	top_fetch(sock, o, &prev);
	if (top_sleep(&set, interval_ns < 1000000000u ? interval_ns : 1000000000u))
		goto out;
	for (unsigned i = 0; !o->iterations || i < o->iterations; i++) {
		struct winsize ws;
		size_t rows = 20, cols = SIZE_MAX;

		if (i && top_sleep(&set, interval_ns))
			break;
		top_fetch(sock, o, &cur);
		if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0) {
			/* Two header lines, a blank one, the column heads and the cursor's. */
			rows = ws.ws_row > 6 ? ws.ws_row - 5u : 1;
			cols = ws.ws_col ? ws.ws_col : SIZE_MAX;
		}
		if (!tty && i)
			putchar('\n');
		top_print(&cur, &prev, o, tty, rows, cols);
		if (fflush(stdout) || ferror(stdout))
			pmcctl_fail("writing output: %s", strerror(errno));
		top_snap_free(&prev);
		prev = cur;
		memset(&cur, 0, sizeof(cur));
	}
out:
	top_snap_free(&prev);
	top_snap_free(&cur);
	return 0;
}
