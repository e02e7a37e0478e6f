/* pmcctl: command-line client of pmcdaemon. It connects to the daemon's SOCK_SEQPACKET socket,
 * says Hello, sends one request for the command given and prints the reply as an aligned
 * table, as JSON or as CSV. `pmcctl run` runs a command instead, with a private daemon where
 * none answers, and prints the figures of that command's processes when it exits. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#include "pmc.pb-c.h"
#include "util.h"
#include "wire.h"

#ifdef PMC_VERSION
#define PMCCTL_VERSION PMC_VERSION
#else
#define PMCCTL_VERSION "0.1.0"
#endif
#define DEFAULT_SOCKET "/run/pmcdaemon/pmc.sock"
#define CALL_TIMEOUT_MS 5000

#define EXIT_FAIL 1
#define EXIT_USAGE 2

enum format {
	FORMAT_TABLE,
	FORMAT_JSON,
	FORMAT_CSV,
};

struct opts {
	const char *socket;
	enum format format;
	int32_t pid;
	const char **regions; /* --region: shell globs, any of them */
	size_t n_regions;
	const char **comms; /* --comm: shell globs on the process name, any of them */
	size_t n_comms;
	double interval;     /* top: seconds between refreshes */
	unsigned iterations; /* top: refreshes before exiting, 0 for no limit */
	bool live_opts;      /* --interval or --iterations given */
	const char *events;  /* run: PMC_EVENTS for the command */
	const char *output;  /* run: file for the figures (NULL: stdout) */
	char **argv;         /* run: the command and its arguments */
};

struct command {
	const char *name;
	bool filters;    /* takes --comm and --region, and --pid unless no_pid */
	bool no_pid;     /* run: the process is the command's */
	bool live;       /* top: takes --interval and --iterations, prints tables only */
	bool standalone; /* run: connects by itself (or starts a daemon), not before */
	int (*run)(int sock, const struct command *cmd, const struct opts *o);
};

static const char help_text[] =
        "Usage: pmcctl [OPTIONS] COMMAND\n"
        "       pmcctl run [--events LIST] [OPTIONS] [--] CMD [ARGS...]\n"
        "\n"
        "Query and control pmcdaemon, the daemon that brokers perf counters and aggregates\n"
        "the named-region samples of instrumented applications.\n"
        "\n"
        "Commands:\n"
        "  status    show the daemon's version, uptime, clients and sample counters\n"
        "  query     show region statistics, optionally filtered with --pid, --comm, --region\n"
        "  dump      show the statistics of every region of every process (the same filters)\n"
        "  reset     clear aggregates: all of them, or those the filters select\n"
        "  events    list the events this machine can count and the default event set\n"
        "  top       live view of the busiest regions: runs and events per second, refreshed\n"
        "            every second (the filters apply); Ctrl-C quits\n"
        "  run       run CMD with PMC_SOCKET (and PMC_EVENTS) set and, when it exits, print\n"
        "            the regions of CMD and of the processes it started, like 'perf stat';\n"
        "            exit with CMD's status (128+N when signal N killed it). Where no daemon\n"
        "            answers at the socket, a private one counts for the run (the kernel must\n"
        "            let users count their own threads: perf_event_paranoid 2 or less)\n"
        "\n"
        "Options (they may also follow the command):\n"
        "      --socket PATH     talk to the pmcdaemon listening at PATH\n"
        "      --format FORMAT   print 'table' (the default, for people), 'json' or 'csv'\n"
        "      --pid N           only the process with id N (query, dump, reset, top)\n"
        "      --comm NAME       only processes called NAME (at most 15 bytes, as in ps);\n"
        "                        a shell glob; repeat it for several (any of them)\n"
        "      --region NAME     only regions called NAME; a shell glob ('parse*'); repeat it\n"
        "                        for several (any of them) (query, dump, reset, top, run)\n"
        "      --interval SECONDS\n"
        "                        top: seconds between refreshes (default 1, at least 0.1)\n"
        "      --iterations N    top: stop after N refreshes (default: until Ctrl-C)\n"
        "      --events LIST     run: the events CMD counts, e.g. cycles,instructions\n"
        "                        (PMC_EVENTS; default: PMC_EVENTS, or the daemon's set)\n"
        "      --output FILE     run: write the figures to FILE instead of stdout\n"
        "  -h, --help            print this help and exit\n"
        "      --version         print the version of pmcctl and exit\n"
        "\n"
        "Environment:\n"
        "  PMC_SOCKET    socket of pmcdaemon when --socket is not given;\n"
        "                if it is not set either: " DEFAULT_SOCKET "\n"
        "\n"
        "Tables show times in ns, us, ms and s and counts above 999 in k (10^3), M (10^6),\n"
        "G (10^9), with 3 significant digits: JSON and CSV keep the exact numbers.\n"
        "Events marked '*' were multiplexed: the kernel counted them only part of the time\n"
        "and their values were extrapolated. Rows in parentheses are derived metrics:\n"
        "(ipc) instructions per cycle, (cache-miss-ratio), (branch-miss-ratio).\n"
        "Regions without samples (just reset) are not listed.\n"
        "\n"
        "Exit status:\n"
        "  0     success (also when no region is listed: a line says why)\n"
        "  1     pmcdaemon refused the request, or talking to it failed\n"
        "  2     usage error: unknown command or option, bad --format or --pid\n"
        "  69    pmcdaemon could not be reached (EX_UNAVAILABLE); run: none answers and\n"
        "        none could be started\n"
        "  run:  CMD's exit status, or 128+N when signal N killed it; 126 or 127 when CMD\n"
        "        could not be run\n"
        "\n"
        "Examples:\n"
        "  pmcctl query --region parse --format json\n"
        "        statistics of region 'parse' in every process, as JSON\n"
        "  pmcctl query --comm myserver --region 'db_*' --region 'http_*'\n"
        "        the regions called db_... or http_... of the processes called myserver\n"
        "  pmcctl status\n"
        "        is the daemon up, and how much has it collected\n"
        "  pmcctl top --interval 2\n"
        "        the regions running most often right now, every 2 seconds\n"
        "  pmcctl run --events cycles,instructions -- ./app input.txt\n"
        "        run ./app and print the figures of its regions when it exits\n";

static const Pmc__Stats zero_stats = PMC__STATS__INIT;

static void usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void oom(void) __attribute__((noreturn));
struct table;
static void table_add(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void table_free(struct table *t);

static void
usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("pmcctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'pmcctl --help'.\n", stderr);
	exit(EXIT_USAGE);
}

static void
fail(const char *fmt, ...)
{
	va_list ap;

	fputs("pmcctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_FAIL);
}

static void
oom(void)
{
	fail("out of memory");
}

static void
response_freep(Pmc__Response **r)
{
	if (*r)
		pmc__response__free_unpacked(*r, NULL);
}

#define _cleanup_response_ _cleanup_(response_freep)

static void
fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

#define _cleanup_fclose_ _cleanup_(fclosep)

static void
closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}

#define _cleanup_closedir_ _cleanup_(closedirp)

static const Pmc__Stats *
stats_or_zero(const Pmc__Stats *s)
{
	return s ? s : &zero_stats;
}

/* Shortest "%g" text that reads back as the same double. */
static void
format_real(char *buf, size_t len, double v)
{
	snprintf(buf, len, "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, len, "%.17g", v);
}

/* Length of the well-formed UTF-8 sequence at @s (at most @n bytes), 0 if there is none; its
 * code point in *@cp. */
static size_t
utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char c = s[0];
	uint32_t v;
	size_t len;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		v = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		v = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		v = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10ffff)) ||
	    (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

/* Characters a terminal acts on instead of showing: C0 and C1 controls (ESC, CSI 0x9b),
 * DEL, and the bidirectional formatting characters that reorder what follows them.
 * pmcdaemon's metrics page hides the same set (is_hidden() in daemon/metrics.c). */
static bool
is_hidden(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
	       cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* Copy of @s fit for every output (table, CSV, JSON, messages): region names, comm and
 * event names come from any application that links the library, and protobuf-c does not
 * check strings. A hidden character becomes a visible escape, "\x1b" for a byte below 0x80,
 * "\u202e" for a code point above, and so does each byte that is not UTF-8 ("\x9b"): the
 * result is valid UTF-8 (jansson refuses anything else) with nothing hidden. */
static char *
escape_text(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(4 * n + 1);
	char *o = out;

	if (!out)
		oom();
	while (n) {
		uint32_t cp = 0;
		size_t k = utf8_decode((const unsigned char *)s, n, &cp);

		if (!k || (cp < 0x80 && is_hidden(cp))) {
			o += sprintf(o, "\\x%02x", (unsigned char)*s);
			k = 1;
		} else if (is_hidden(cp)) {
			o += sprintf(o, "\\u%04" PRIx32, cp);
		} else {
			memcpy(o, s, k);
			o += k;
		}
		s += k;
		n -= k;
	}
	*o = '\0';
	return out;
}

/* ---- aligned tables ---- */

struct table {
	size_t ncols;
	const char *const *head;
	const bool *right; /* right-aligned (numeric) columns */
	char **cell;       /* row-major, ncols per row */
	size_t n, cap;
};

static void
table_free(struct table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->cell[i]);
	free(t->cell);
	t->cell = NULL;
	t->n = t->cap = 0;
}

static void
table_add(struct table *t, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		oom();
	va_end(ap);
	/* Names reach the operator's terminal: nothing in them may act on it. */
	char *safe = escape_text(s);
	free(s);
	s = safe;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 64;
		char **c = reallocarray(t->cell, cap, sizeof(*c));
		if (!c)
			oom();
		t->cell = c;
		t->cap = cap;
	}
	t->cell[t->n++] = s;
}

/* Columns the text takes on a terminal; bytes that do not decode count one each. */
static size_t
display_width(const char *s)
{
	mbstate_t st;
	size_t n = strlen(s), w = 0;

	memset(&st, 0, sizeof(st));
	while (n) {
		wchar_t wc;
		size_t k = mbrtowc(&wc, s, n, &st);

		if (k == (size_t)-1 || k == (size_t)-2) {
			memset(&st, 0, sizeof(st));
			k = 1;
			w++;
		} else if (k == 0) {
			break;
		} else {
			int cw = wcwidth(wc);
			w += cw > 0 ? (size_t)cw : 0;
		}
		s += k;
		n -= k;
	}
	return w;
}

static void
print_padded(FILE *f, const char *s, size_t width, bool right, bool last)
{
	size_t w = display_width(s);
	size_t pad = width > w ? width - w : 0;

	if (right)
		fprintf(f, "%*s", (int)pad, "");
	fputs(s, f);
	if (!right && !last)
		fprintf(f, "%*s", (int)pad, "");
}

/* Prints the rows of @t, in columns at least @width wide (widened to fit them; @width has
 * t->ncols entries, zero at first), after the header when @head; then forgets the rows, so
 * that a table printed part by part keeps only one part. Parts printed later line up
 * with the first unless they hold wider cells. */
static void
table_print_part(struct table *t, FILE *f, size_t *width, bool head)
{
	for (size_t c = 0; c < t->ncols; c++) {
		size_t w = display_width(t->head[c]);
		if (w > width[c])
			width[c] = w;
	}
	for (size_t i = 0; i < t->n; i++) {
		size_t w = display_width(t->cell[i]);
		if (w > width[i % t->ncols])
			width[i % t->ncols] = w;
	}
	for (size_t c = 0; head && c < t->ncols; c++) {
		fputs(c ? "  " : "", f);
		print_padded(f, t->head[c], width[c], t->right[c], c + 1 == t->ncols);
		if (c + 1 == t->ncols)
			fputc('\n', f);
	}
	for (size_t i = 0; i < t->n; i++) {
		size_t c = i % t->ncols;
		fputs(c ? "  " : "", f);
		print_padded(f, t->cell[i], width[c], t->right[c], c + 1 == t->ncols);
		if (c + 1 == t->ncols)
			fputc('\n', f);
	}
	table_free(t);
}

/* Prints @t whole, its header first, and forgets its rows. */
static void
table_print(struct table *t, FILE *f)
{
	_cleanup_free_ size_t *width = calloc(t->ncols, sizeof(*width));

	if (!width)
		oom();
	table_print_part(t, f, width, true);
}

/* ---- CSV (RFC 4180 quoting) ---- */

static bool csv_mid_row;

static void
csv_sep(void)
{
	if (csv_mid_row)
		putchar(',');
	csv_mid_row = true;
}

/* A field that starts like a spreadsheet formula gets a leading single quote, which the
 * spreadsheet shows as text (OWASP's rule against CSV injection). */
static void
csv_str(const char *str)
{
	_cleanup_free_ char *s = escape_text(str);
	const char *formula = str[0] && strchr("=+-@\t\r", str[0]) ? "'" : "";

	csv_sep();
	if (!s[strcspn(s, ",\"\r\n")]) {
		printf("%s%s", formula, s);
		return;
	}
	printf("\"%s", formula);
	for (const char *p = s; *p; p++) {
		if (*p == '"')
			putchar('"');
		putchar(*p);
	}
	putchar('"');
}

static void
csv_u64(uint64_t v)
{
	csv_sep();
	printf("%" PRIu64, v);
}

static void
csv_i64(int64_t v)
{
	csv_sep();
	printf("%" PRId64, v);
}

/* Non-finite values become empty fields: CSV has no spelling for them. */
static void
csv_real(double v)
{
	char buf[64];

	csv_sep();
	if (!isfinite(v))
		return;
	format_real(buf, sizeof(buf), v);
	fputs(buf, stdout);
}

static void
csv_bool(bool v)
{
	csv_str(v ? "true" : "false");
}

static void
csv_end(void)
{
	putchar('\n');
	csv_mid_row = false;
}

static void
csv_header(const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		csv_str(names[i]);
	csv_end();
}

/* ---- JSON ---- */

static json_t *
jstr(const char *s)
{
	_cleanup_free_ char *safe = escape_text(s);

	return json_string_nocheck(safe);
}

/* jansson integers are signed 64-bit: larger counts fall back to a (rounded) real. */
static json_t *
ju64(uint64_t v)
{
	if (v <= INT64_MAX)
		return json_integer((json_int_t)v);
	return json_real((double)v);
}

/* JSON has no NaN or infinity; null says "no value". */
static json_t *
jreal(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* Steals @v, like json_object_set_new(). */
static void
jset(json_t *obj, const char *key, json_t *v)
{
	_cleanup_free_ char *safe = escape_text(key);

	if (!v || json_object_set_new_nocheck(obj, safe, v) < 0)
		oom();
}

static void
jappend(json_t *arr, json_t *v)
{
	if (!v || json_array_append_new(arr, v) < 0)
		oom();
}

static json_t *
jobject(void)
{
	json_t *o = json_object();

	if (!o)
		oom();
	return o;
}

static json_t *
jarray(void)
{
	json_t *a = json_array();

	if (!a)
		oom();
	return a;
}

static void
json_print(json_t *root)
{
	int r = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	json_decref(root);
	if (r < 0)
		fail("cannot write JSON");
	putchar('\n');
}

/* ---- talking to the daemon ---- */

static int
connect_daemon(const char *path)
{
	int fd = wire_connect(path);

	if (fd < 0) {
		fprintf(stderr,
		        "pmcctl: cannot connect to pmcdaemon at %s: %s (is pmcdaemon running? set "
		        "--socket or PMC_SOCKET)\n",
		        path, strerror(-fd));
		exit(EX_UNAVAILABLE);
	}
	return fd;
}

/* Says why the call named @what failed with @r, and exits 1. */
static void call_failed(const char *what, int r) __attribute__((noreturn));

static void
call_failed(const char *what, int r)
{
	if (r == -ETIMEDOUT)
		fail("%s: pmcdaemon did not answer within %d ms", what, CALL_TIMEOUT_MS);
	if (r == -ECONNRESET || r == -EPIPE)
		fail("%s: pmcdaemon closed the connection", what);
	fail("%s: talking to pmcdaemon: %s", what, strerror(-r));
}

/* Exits 1, saying why, unless @resp is a success with body @want; frees it then. */
static void
check_response(const char *what, Pmc__Response *resp, Pmc__Response__BodyCase want)
{
	if (resp->error) {
		int e = resp->error < 0 ? -resp->error : resp->error;
		_cleanup_free_ char *msg = escape_text(resp->message);

		if (msg[0])
			fprintf(stderr, "pmcctl: %s: %s (%s)\n", what, msg, strerror(e));
		else
			fprintf(stderr, "pmcctl: %s: %s\n", what, strerror(e));
		pmc__response__free_unpacked(resp, NULL);
		exit(EXIT_FAIL);
	}
	if (resp->body_case != want) {
		pmc__response__free_unpacked(resp, NULL);
		fail("%s: unexpected reply from pmcdaemon", what);
	}
}

/* Sends @req and returns the Response, which has body @want; on any failure says why, naming
 * @what, and exits 1. */
static Pmc__Response *
call(int sock, const char *what, const Pmc__Request *req, Pmc__Response__BodyCase want)
{
	Pmc__Response *resp = NULL;
	int r = wire_call(sock, req, CALL_TIMEOUT_MS, NULL, 0, NULL, &resp);

	if (r < 0)
		call_failed(what, r);
	check_response(what, resp, want);
	return resp;
}

static void
hello(int sock)
{
	Pmc__Hello h = PMC__HELLO__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;

	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.client = (char *)"pmcctl";
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;

	Pmc__Response *resp = call(sock, "hello", &req, PMC__RESPONSE__BODY_HELLO);
	const Pmc__HelloReply *hr = resp->hello;

	if (hr->version != PMC__PROTOCOL_VERSION__PROTOCOL_VERSION) {
		_cleanup_free_ char *version = escape_text(hr->daemon_version);

		fprintf(stderr,
		        "pmcctl: protocol version mismatch: pmcdaemon %s speaks version %" PRIu32
		        ", pmcctl speaks version %d\n",
		        version[0] ? version : "(unknown version)", hr->version,
		        PMC__PROTOCOL_VERSION__PROTOCOL_VERSION);
		pmc__response__free_unpacked(resp, NULL);
		exit(EXIT_FAIL);
	}
	pmc__response__free_unpacked(resp, NULL);
}

/* ---- status ---- */

static const char *const status_keys[] = {
        "daemon_version",
        "protocol_version",
        "pid",
        "uptime_ns",
        "uptime_s",
        "clients",
        "threads",
        "processes",
        "regions",
        "samples",
        "batches",
        "dropped",
        "rejected",
        "lost",
        "state_file",
        "state_saved_ns",
        "evicted",
        "all_users",
        "uid",
        "histogram_bytes",
        "histogram_missed",
        "user_reads",
        "user_reads_hint",
};

static int
cmd_status(int sock, const struct command *cmd, const struct opts *o)
{
	Pmc__Status st = PMC__STATUS__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;

	req.body_case = PMC__REQUEST__BODY_STATUS;
	req.status = &st;

	_cleanup_response_ Pmc__Response *resp =
	        call(sock, cmd->name, &req, PMC__RESPONSE__BODY_STATUS);
	const Pmc__StatusReply *s = resp->status;
	double uptime_s = (double)s->uptime_ns / 1e9;

	if (o->format == FORMAT_JSON) {
		json_t *root = jobject();

		jset(root, "daemon_version", jstr(s->daemon_version));
		jset(root, "protocol_version", ju64(s->protocol_version));
		jset(root, "pid", json_integer(s->pid));
		jset(root, "uptime_ns", ju64(s->uptime_ns));
		jset(root, "uptime_s", jreal(uptime_s));
		jset(root, "clients", ju64(s->clients));
		jset(root, "threads", ju64(s->threads));
		jset(root, "processes", ju64(s->processes));
		jset(root, "regions", ju64(s->regions));
		jset(root, "samples", ju64(s->samples));
		jset(root, "batches", ju64(s->batches));
		jset(root, "dropped", ju64(s->dropped));
		jset(root, "rejected", ju64(s->rejected));
		jset(root, "lost", ju64(s->lost));
		jset(root, "state_file", jstr(s->state_file));
		jset(root, "state_saved_ns", ju64(s->state_saved_ns));
		jset(root, "evicted", ju64(s->evicted));
		jset(root, "all_users", json_boolean(s->all_users));
		jset(root, "uid", ju64(s->uid));
		jset(root, "histogram_bytes", ju64(s->histogram_bytes));
		jset(root, "histogram_missed", ju64(s->histogram_missed));
		json_t *by = jobject();
		for (size_t i = 0; i < s->n_losses; i++)
			jset(by, s->losses[i]->reason, ju64(s->losses[i]->count));
		jset(root, "losses", by);
		jset(root, "user_reads", json_boolean(s->user_reads));
		jset(root, "user_reads_hint", jstr(s->user_reads_hint));
		json_print(root);
	} else if (o->format == FORMAT_CSV) {
		csv_header(status_keys, ARRAY_SIZE(status_keys));
		csv_str(s->daemon_version);
		csv_u64(s->protocol_version);
		csv_i64(s->pid);
		csv_u64(s->uptime_ns);
		csv_real(uptime_s);
		csv_u64(s->clients);
		csv_u64(s->threads);
		csv_u64(s->processes);
		csv_u64(s->regions);
		csv_u64(s->samples);
		csv_u64(s->batches);
		csv_u64(s->dropped);
		csv_u64(s->rejected);
		csv_u64(s->lost);
		csv_str(s->state_file);
		csv_u64(s->state_saved_ns);
		csv_u64(s->evicted);
		csv_u64(s->all_users);
		csv_u64(s->uid);
		csv_u64(s->histogram_bytes);
		csv_u64(s->histogram_missed);
		csv_bool(s->user_reads);
		csv_str(s->user_reads_hint);
		csv_end();
	} else {
		/* A table only for its sanitizing; printed as "key: value" lines. */
		struct table t = {.ncols = 2};

		table_add(&t, "daemon version:");
		table_add(&t, "%s", s->daemon_version);
		table_add(&t, "protocol:");
		table_add(&t, "%" PRIu32, s->protocol_version);
		table_add(&t, "pid:");
		table_add(&t, "%" PRId32, s->pid);
		table_add(&t, "uptime:");
		table_add(&t, "%" PRIu64 ".%03" PRIu64 " s", s->uptime_ns / 1000000000u,
		          s->uptime_ns / 1000000u % 1000u);
		table_add(&t, "figures of:");
		if (s->all_users)
			table_add(&t, "every user");
		else
			table_add(&t,
			          "uid %" PRIu32 " only (root and --admin-group see every user's)",
			          s->uid);
		table_add(&t, "clients:");
		table_add(&t, "%" PRIu32, s->clients);
		table_add(&t, "threads:");
		table_add(&t, "%" PRIu32, s->threads);
		table_add(&t, "processes:");
		table_add(&t, "%" PRIu32, s->processes);
		table_add(&t, "regions:");
		table_add(&t, "%" PRIu32, s->regions);
		table_add(&t, "samples:");
		table_add(&t, "%" PRIu64, s->samples);
		table_add(&t, "batches:");
		table_add(&t, "%" PRIu64, s->batches);
		table_add(&t, "dropped samples:");
		table_add(&t, "%" PRIu64, s->dropped);
		table_add(&t, "rejected connections:");
		table_add(&t, "%" PRIu64, s->rejected);
		table_add(&t, "exited processes dropped:");
		table_add(&t, "%" PRIu64 "%s", s->evicted,
		          s->evicted ? " (over --keep-exited: their figures are gone)" : "");
		if (s->n_losses) {
			char *text = NULL;
			size_t len = 0;
			FILE *f = open_memstream(&text, &len);
			if (!f)
				oom();
			for (size_t i = 0; i < s->n_losses; i++)
				fprintf(f, "%s%s %" PRIu64, i ? ", " : "", s->losses[i]->reason,
				        s->losses[i]->count);
			if (fclose(f))
				oom();
			table_add(&t, "dropped or lost, by reason:");
			table_add(&t, "%s", text);
			free(text);
		}
		table_add(&t, "histograms:");
		table_add(&t, "%.1f MiB%s", (double)s->histogram_bytes / 1048576.0,
		          s->histogram_missed ? "" : " (every sample in the percentiles)");
		if (s->histogram_missed) {
			table_add(&t, "samples not in percentiles:");
			table_add(&t,
			          "%" PRIu64 " (over --max-memory or --max-memory-per-user: every "
			          "other figure counts them)",
			          s->histogram_missed);
		}
		table_add(&t, "lost samples:");
		table_add(&t, "%" PRIu64 "%s", s->lost,
		          s->lost ? " (sent to a daemon that was killed before saving them)" : "");
		if (*s->state_file) {
			char when[64] = "never";
			time_t sec = (time_t)(s->state_saved_ns / 1000000000u);
			struct tm tm;
			if (s->state_saved_ns && localtime_r(&sec, &tm))
				strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
			table_add(&t, "state file:");
			table_add(&t, "%s (saved %s)", s->state_file, when);
		}
		table_add(&t, "user-space counter reads:");
		if (s->user_reads)
			table_add(&t, "yes");
		else if (s->user_reads_hint[0])
			table_add(&t, "no, read() (the kernel's setting; to allow them: %s)",
			          s->user_reads_hint);
		else
			table_add(&t, "no, read()");

		size_t w = 0;
		for (size_t i = 0; i < t.n; i += 2)
			if (strlen(t.cell[i]) > w)
				w = strlen(t.cell[i]);
		for (size_t i = 0; i < t.n; i += 2)
			printf("%-*s %s\n", (int)w, t.cell[i], t.cell[i + 1]);
		table_free(&t);
	}
	return 0;
}

/* ---- filters ---- */

/* Orders regions by (pid, name). */
static int
region_key_cmp(const void *a, const void *b)
{
	const Pmc__RegionStats *x = *(const Pmc__RegionStats *const *)a;
	const Pmc__RegionStats *y = *(const Pmc__RegionStats *const *)b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return strcmp(x->name, y->name);
}

static bool
has_glob(const char *s)
{
	return strpbrk(s, "*?[\\") != NULL;
}

/* Whether @o asks for more than pmcdaemon's first Query could: several names, globs, process
 * names, or a start time (run). */
static bool
new_filters(const struct opts *o, uint64_t min_start)
{
	return o->n_comms || o->n_regions > 1 || (o->n_regions == 1 && has_glob(o->regions[0])) ||
	       min_start;
}

/* Query @q for the filters of @o; its strings point into @o. The daemon does the matching. */
static void
query_init(Pmc__Query *q, const struct opts *o)
{
	pmc__query__init(q);
	q->pid = o->pid;
	q->n_regions = o->n_regions;
	q->regions = (char **)o->regions;
	q->n_comms = o->n_comms;
	q->comms = (char **)o->comms;
	/* A daemon that knows no globs reads this one: the same answer for one plain name. */
	if (o->n_regions == 1 && !has_glob(o->regions[0]))
		q->region = (char *)o->regions[0];
}

/* Exits 1 when @qr, a whole reply, shows that the daemon is too old for the filters. */
static void
query_check_filters(const char *what, const Pmc__QueryReply *qr, const Pmc__Query *q,
                    const struct opts *o)
{
	/* Every region listed is one the caller may see, so a daemon that counts them lists no
	 * more than `visible`; one older than the count ignored the filters it did not know. */
	if (new_filters(o, q->min_start) && qr->n_regions > qr->visible)
		fail("%s: this pmcdaemon is older than pmcctl: it matches neither --comm, several "
		     "--region nor globs; upgrade it, or give one plain --region",
		     what);
}

/* Sends @q, asking for its reply in parts, and hands each part to @on_part as it arrives
 * (a daemon that does not stream sends one part). Returns the last part (visible, hidden:
 * the whole reply's), which the caller frees; on any failure says why and exits 1. */
static Pmc__Response *
query_stream(int sock, const char *what, Pmc__Query *q, const struct opts *o,
             void (*on_part)(const Pmc__QueryReply *part, void *ctx), void *ctx)
{
	Pmc__Request req = PMC__REQUEST__INIT;

	req.body_case = PMC__REQUEST__BODY_QUERY;
	req.query = q;
	q->stream = true;
	int r = wire_send(sock, &req.base, NULL, 0, 0);
	int timeout = CALL_TIMEOUT_MS;

	if (r == -EPIPE || r == -ECONNRESET)
		timeout = 0; /* refused: its answer is still there to read */
	else if (r < 0)
		call_failed(what, r);
	for (bool first = true;; first = false) {
		_cleanup_free_ uint8_t *buf = NULL;
		size_t len;
		Pmc__Response *resp = NULL;

		if ((r = wire_wait(sock, timeout, &buf, &len, NULL, 0, NULL)) < 0 ||
		    (r = wire_unpack_response(buf, len, &resp)) < 0)
			call_failed(what, r);
		check_response(what, resp, PMC__RESPONSE__BODY_QUERY);
		if (first && !resp->query->more)
			query_check_filters(what, resp->query, q, o);
		on_part(resp->query, ctx);
		if (!resp->query->more)
			return resp;
		pmc__response__free_unpacked(resp, NULL);
	}
}

/* The parts of a streamed reply, each QueryReply's bytes one after the other: protobuf merges
 * them into one QueryReply, every region and loss listed once, visible and hidden from the
 * last part. */
struct query_bytes {
	char *buf;
	size_t len;
	FILE *f;
};

static void
query_collect(const Pmc__QueryReply *part, void *ctx)
{
	struct query_bytes *b = ctx;
	Pmc__QueryReply copy = *part;
	size_t n;

	copy.more = false;
	n = pmc__query_reply__get_packed_size(&copy);
	_cleanup_free_ uint8_t *tmp = malloc(n ? n : 1);
	if (!tmp)
		oom();
	pmc__query_reply__pack(&copy, tmp);
	if (fwrite(tmp, 1, n, b->f) != n)
		oom();
}

/* Sends @q and returns the whole reply, gathered from its parts (in one Response, as a daemon
 * that does not stream sends it); exits 1 on any failure, or when the daemon is too old for
 * the filters. */
static Pmc__Response *
query_call(int sock, const char *what, Pmc__Query *q, const struct opts *o)
{
	struct query_bytes b = {0};
	uint8_t head[16];
	size_t n = 0;

	b.f = open_memstream(&b.buf, &b.len);
	if (!b.f)
		oom();
	/* Response field 12 (query), length-delimited, its length a varint. */
	head[n++] = 12 << 3 | 2;
	if (fwrite(head, 1, 16, b.f) != 16)
		oom();
	pmc__response__free_unpacked(query_stream(sock, what, q, o, query_collect, &b), NULL);
	if (fclose(b.f))
		oom();
	size_t len = b.len - 16;
	uint64_t x = len;
	do {
		head[n] = (uint8_t)(x & 0x7f);
		x >>= 7;
		head[n++] |= x ? 0x80 : 0;
	} while (x);
	memcpy(b.buf + 16 - n, head, n);
	Pmc__Response *resp = pmc__response__unpack(NULL, len + n, (uint8_t *)b.buf + 16 - n);
	free(b.buf);
	if (!resp || resp->body_case != PMC__RESPONSE__BODY_QUERY)
		fail("%s: cannot decode the reply of pmcdaemon", what);
	query_check_filters(what, resp->query, q, o);
	return resp;
}

/* "--pid 12 --comm 'x*'": the filters of @o, for messages; @names: --region too. */
static char *
filters_text(const struct opts *o, bool names)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		oom();
	if (o->pid)
		fprintf(f, " --pid %" PRId32, o->pid);
	for (size_t i = 0; i < o->n_comms; i++)
		fprintf(f, " --comm '%s'", o->comms[i]);
	for (size_t i = 0; names && i < o->n_regions; i++)
		fprintf(f, " --region '%s'", o->regions[i]);
	if (fclose(f))
		oom();
	char *safe = escape_text(text[0] ? text + 1 : text);
	free(text);
	return safe;
}

/* Why @q lists no region: its code for JSON ("no_match", "hidden", "nothing_recorded") and
 * a sentence in *@text (the caller frees it). */
static const char *
empty_reason(const Pmc__QueryReply *q, const struct opts *o, char **text)
{
	_cleanup_free_ char *all = filters_text(o, true);
	_cleanup_free_ char *procs = filters_text(o, false);
	const char *code;
	int r;

	if (q->visible) {
		code = "no_match";
		r = asprintf(
		        text,
		        "no region matches %s (%" PRIu32 " region%s recorded that you may see: "
		        "'pmcctl query' lists them)%s",
		        all, q->visible, q->visible == 1 ? "" : "s",
		        q->hidden ? "; other users' processes hold more, hidden from you" : "");
	} else if (q->hidden) {
		code = "hidden";
		r = asprintf(text,
		             "no region that you may see: %" PRIu32 " region%s of other users' "
		             "processes %s hidden%s%s (only root and members of the daemon's "
		             "--admin-group see them)",
		             q->hidden, q->hidden == 1 ? "" : "s", q->hidden == 1 ? "is" : "are",
		             procs[0] ? ", selected by " : "", procs);
	} else {
		code = "nothing_recorded";
		if (procs[0])
			r = asprintf(
			        text,
			        "no regions recorded for %s: no such process has sent samples to "
			        "this daemon since it started or was reset",
			        procs);
		else
			r = asprintf(text,
			             "no regions recorded: no program linked with libpmcclient "
			             "has sent samples to this daemon since it started or was "
			             "reset");
	}
	if (r < 0)
		oom();
	return code;
}

/* ---- query and dump ---- */

static json_t *
stats_json(const Pmc__Stats *s)
{
	json_t *o = jobject();

	s = stats_or_zero(s);
	jset(o, "sum", ju64(s->sum));
	jset(o, "min", ju64(s->min));
	jset(o, "max", ju64(s->max));
	jset(o, "mean", jreal(s->mean));
	jset(o, "stddev", jreal(s->stddev));
	jset(o, "p50", jreal(s->p50));
	jset(o, "p90", jreal(s->p90));
	jset(o, "p99", jreal(s->p99));
	return o;
}

/* One region's figures, as "regions" lists them. */
static json_t *
region_json(const Pmc__RegionStats *r)
{
	json_t *reg = jobject();
	json_t *events = jobject();
	json_t *wall = stats_json(r->wall_ns);

	/* Wall time is read from the clock, never extrapolated. */
	jset(wall, "scaled", json_false());
	if (r->wall_floor) {
		jset(wall, "floor", ju64(r->wall_floor));
		jset(wall, "too_short", json_boolean(r->wall_too_short));
	}
	jset(reg, "name", jstr(r->name));
	jset(reg, "pid", json_integer(r->pid));
	jset(reg, "comm", jstr(r->comm));
	jset(reg, "uid", json_integer(r->uid));
	jset(reg, "count", ju64(r->count));
	jset(reg, "wall_ns", wall);
	jset(reg, "events", events);
	for (size_t j = 0; j < r->n_events; j++) {
		const Pmc__EventStats *e = r->events[j];
		json_t *st = stats_json(e->stats);

		jset(st, "scaled", json_boolean(e->scaled_count > 0));
		/* What an empty region measures here (its thread's calibration). */
		if (r->wall_floor) {
			jset(st, "floor", ju64(e->floor));
			jset(st, "too_short", json_boolean(e->too_short));
		}
		if (e->scaled_count > 0) {
			jset(st, "scaled_samples", ju64(e->scaled_count));
			jset(st, "running_ratio", jreal(e->scaled_ratio));
		}
		jset(events, e->name, st);
	}
	/* Ratios of event sums, where both events were counted (ipc, miss ratios). */
	json_t *derived = jobject();
	jset(reg, "derived", derived);
	for (size_t j = 0; j < r->n_derived; j++)
		jset(derived, r->derived[j]->name, jreal(r->derived[j]->value));
	return reg;
}

/* The samples not counted, per process listed and reason, appended to @losses. */
static void
losses_json(json_t *losses, const Pmc__QueryReply *q)
{
	for (size_t i = 0; i < q->n_losses; i++) {
		json_t *l = jobject();
		jset(l, "pid", json_integer(q->losses[i]->pid));
		jset(l, "reason", jstr(q->losses[i]->reason));
		jset(l, "count", ju64(q->losses[i]->count));
		jappend(losses, l);
	}
}

/* Why nothing is listed, in @root: "empty", "message", "hidden_regions". */
static void
empty_json(json_t *root, const Pmc__QueryReply *q, const char *why_code, const char *why)
{
	jset(root, "empty", jstr(why_code));
	jset(root, "message", jstr(why));
	jset(root, "hidden_regions", ju64(q->hidden));
}

/* {"regions":[...],"losses":[...]}, and when it is empty, why ("empty", "message",
 * "hidden_regions"); @why NULL: the caller says why itself. */
static json_t *
query_json(const Pmc__QueryReply *q, const char *why_code, const char *why)
{
	json_t *root = jobject();
	json_t *regions = jarray();

	jset(root, "regions", regions);
	for (size_t i = 0; i < q->n_regions; i++)
		jappend(regions, region_json(q->regions[i]));
	json_t *losses = jarray();
	jset(root, "losses", losses);
	losses_json(losses, q);
	if (!q->n_regions && why)
		empty_json(root, q, why_code, why);
	return root;
}

static const char *const query_csv_head[] = {
        "pid", "comm",   "region",        "count",  "event",     "sum",
        "min", "max",    "mean",          "stddev", "p50",       "p90",
        "p99", "scaled", "running_ratio", "floor",  "too_short",
};

/* @e is NULL for the wall-clock row. */
static void
query_csv_row(const Pmc__RegionStats *r, const Pmc__EventStats *e)
{
	const Pmc__Stats *s = stats_or_zero(e ? e->stats : r->wall_ns);
	bool scaled = e && e->scaled_count > 0;

	csv_i64(r->pid);
	csv_str(r->comm);
	csv_str(r->name);
	csv_u64(r->count);
	csv_str(e ? e->name : "wall_ns");
	csv_u64(s->sum);
	csv_u64(s->min);
	csv_u64(s->max);
	csv_real(s->mean);
	csv_real(s->stddev);
	csv_real(s->p50);
	csv_real(s->p90);
	csv_real(s->p99);
	csv_bool(scaled);
	if (scaled)
		csv_real(e->scaled_ratio);
	else
		csv_str("");
	if (r->wall_floor) {
		csv_u64(e ? e->floor : r->wall_floor);
		csv_bool(e ? e->too_short : r->wall_too_short);
	} else {
		csv_str("");
		csv_str("");
	}
	csv_end();
}

/* A derived metric: "derived:NAME" in the event column, its value in the mean column. */
static void
query_csv_derived(const Pmc__RegionStats *r, const Pmc__Derived *d)
{
	csv_i64(r->pid);
	csv_str(r->comm);
	csv_str(r->name);
	csv_u64(r->count);
	char name[96];
	snprintf(name, sizeof(name), "derived:%s", d->name);
	csv_str(name);
	csv_str("");
	csv_str("");
	csv_str("");
	csv_real(d->value);
	for (int k = 0; k < 4; k++)
		csv_str("");
	csv_bool(false);
	csv_str("");
	csv_str("");
	csv_str("");
	csv_end();
}

/* The rows of @q's regions, the header aside. */
static void
query_csv_rows(const Pmc__QueryReply *q)
{
	for (size_t i = 0; i < q->n_regions; i++) {
		query_csv_row(q->regions[i], NULL);
		for (size_t j = 0; j < q->regions[i]->n_events; j++)
			query_csv_row(q->regions[i], q->regions[i]->events[j]);
		for (size_t j = 0; j < q->regions[i]->n_derived; j++)
			query_csv_derived(q->regions[i], q->regions[i]->derived[j]);
	}
}

static void
query_csv(const Pmc__QueryReply *q)
{
	csv_header(query_csv_head, ARRAY_SIZE(query_csv_head));
	query_csv_rows(q);
}

/* @v with a unit: below 1000 of the first unit, whole (@whole: an integer, exact) or with 2
 * decimals under 100; above, in the next unit up with 3 significant digits (1.23k, 45.6M,
 * 789G; 1.23us, 45.6ms), the last unit taking any size. True when that rounded it. */
static bool
format_unit(char *buf, size_t len, double v, bool whole, const char *const *unit, size_t n_unit,
            const double *step)
{
	size_t i = 0;

	if (!isfinite(v)) {
		snprintf(buf, len, "-");
		return false;
	}
	if (v < 999.5 || n_unit == 1) {
		snprintf(buf, len, whole || v >= 100 ? "%.0f%s" : "%.2f%s", v, unit[0]);
		return false;
	}
	while (i + 1 < n_unit && v >= 999.5) {
		v /= step[i];
		i++;
	}
	snprintf(buf, len, v < 9.995 ? "%.2f%s" : v < 99.95 ? "%.1f%s" : "%.0f%s", v, unit[i]);
	return true;
}

/* Counts: 40, 12.5, 1.23k, 4.56M, 7.89G, 1.00T. */
static bool
format_count(char *buf, size_t len, double v, bool whole)
{
	static const char *const unit[] = {"", "k", "M", "G", "T", "P", "E"};
	static const double step[] = {1e3, 1e3, 1e3, 1e3, 1e3, 1e3};

	return format_unit(buf, len, v, whole, unit, ARRAY_SIZE(unit), step);
}

/* Nanoseconds: 850ns, 1.23us, 45.6ms, 2.50s, 3600s. */
static bool
format_time(char *buf, size_t len, double ns)
{
	static const char *const unit[] = {"ns", "us", "ms", "s"};
	static const double step[] = {1e3, 1e3, 1e3};

	return format_unit(buf, len, ns, true, unit, ARRAY_SIZE(unit), step);
}

/* Events that count nanoseconds (perf's software clocks), with any ":u"/":k". */
static bool
event_counts_ns(const char *name)
{
	static const char *const clocks[] = {"task-clock", "cpu-clock", "perf::task-clock",
	                                     "perf::cpu-clock"};

	for (size_t i = 0; i < ARRAY_SIZE(clocks); i++) {
		size_t n = strlen(clocks[i]);

		if (!strncasecmp(name, clocks[i], n) && (!name[n] || name[n] == ':'))
			return true;
	}
	return false;
}

/* One cell of a statistic; sets *@rounded when the figure lost digits. */
static void
table_add_value(struct table *t, double v, bool whole, bool ns, bool *rounded)
{
	char buf[64];

	*rounded |=
	        ns ? format_time(buf, sizeof(buf), v) : format_count(buf, sizeof(buf), v, whole);
	table_add(t, "%s", buf);
}

static void
query_table_row(struct table *t, const Pmc__RegionStats *r, const Pmc__EventStats *e, bool *rounded)
{
	const Pmc__Stats *s = stats_or_zero(e ? e->stats : r->wall_ns);
	bool ns = !e || event_counts_ns(e->name);
	char count[64];

	*rounded |= format_count(count, sizeof(count), (double)r->count, true);
	table_add(t, "%" PRId32, r->pid);
	table_add(t, "%s", r->comm);
	table_add(t, "%s", r->name);
	table_add(t, "%s", count);
	if (e)
		table_add(t, "%s%s%s", e->name, e->scaled_count > 0 ? "*" : "",
		          e->too_short ? "~" : "");
	else
		table_add(t, "wall%s", r->wall_too_short ? "~" : "");
	table_add_value(t, (double)s->sum, true, ns, rounded);
	table_add_value(t, s->mean, false, ns, rounded);
	table_add_value(t, (double)s->min, true, ns, rounded);
	table_add_value(t, (double)s->max, true, ns, rounded);
	table_add_value(t, s->p50, false, ns, rounded);
	table_add_value(t, s->p90, false, ns, rounded);
	table_add_value(t, s->p99, false, ns, rounded);
}

static const char *const query_table_head[] = {"PID",  "COMM", "REGION", "COUNT", "EVENT", "SUM",
                                               "MEAN", "MIN",  "MAX",    "P50",   "P90",   "P99"};
static const bool query_table_right[] = {true, false, false, true, false, true,
                                         true, true,  true,  true, true,  true};

/* What the notes under a query's table say: which marks its rows used, and its losses. */
struct table_notes {
	bool any_scaled, rounded, any_short;
	char *losses; /* lines, one per process and reason */
	size_t losses_len;
	FILE *f;
};

/* Adds the rows of @q's regions to @t, and what their notes need to @n. */
static void
query_table_rows(struct table *t, const Pmc__QueryReply *q, struct table_notes *n)
{
	for (size_t i = 0; i < q->n_regions; i++) {
		const Pmc__RegionStats *r = q->regions[i];

		query_table_row(t, r, NULL, &n->rounded);
		n->any_short |= r->wall_too_short;
		for (size_t j = 0; j < r->n_events; j++) {
			query_table_row(t, r, r->events[j], &n->rounded);
			n->any_scaled |= r->events[j]->scaled_count > 0;
			n->any_short |= r->events[j]->too_short;
		}
		/* Derived ratios: the value in the MEAN column. */
		for (size_t j = 0; j < r->n_derived; j++) {
			char count[64];

			n->rounded |= format_count(count, sizeof(count), (double)r->count, true);
			table_add(t, "%" PRId32, r->pid);
			table_add(t, "%s", r->comm);
			table_add(t, "%s", r->name);
			table_add(t, "%s", count);
			table_add(t, "(%s)", r->derived[j]->name);
			table_add(t, "-");
			table_add(t, "%.3f", r->derived[j]->value);
			for (int k = 0; k < 5; k++)
				table_add(t, "-");
		}
	}
	if (!q->n_losses)
		return;
	if (!n->f && !(n->f = open_memstream(&n->losses, &n->losses_len)))
		oom();
	for (size_t i = 0; i < q->n_losses; i++)
		fprintf(n->f, "pid %" PRId32 ": %" PRIu64 " samples not counted (%s)\n",
		        q->losses[i]->pid, q->losses[i]->count, q->losses[i]->reason);
}

/* The notes under a table, and forgets them. */
static void
query_table_notes(struct table_notes *n)
{
	if (n->rounded)
		puts("figures rounded to 3 significant digits (k, M, G: 10^3, 10^6, 10^9): "
		     "--format json or csv has them exact");
	if (n->any_scaled)
		puts("* scaled: counts were multiplexed and extrapolated (running/enabled < 1)");
	if (n->f) {
		if (fclose(n->f))
			oom();
		fputs(n->losses, stdout);
		free(n->losses);
	}
	if (n->any_short)
		puts("~ too short to trust: the mean is within 10x of what an empty region "
		     "measures in that process (its floor: --format json shows it; nothing is "
		     "subtracted)");
	memset(n, 0, sizeof(*n));
}

/* @why: printed instead of an empty table. */
static void
query_table(const Pmc__QueryReply *q, const char *why)
{
	struct table t = {.ncols = ARRAY_SIZE(query_table_head),
	                  .head = query_table_head,
	                  .right = query_table_right};
	struct table_notes n = {0};

	if (!q->n_regions) {
		_cleanup_free_ char *safe = escape_text(why);

		puts(safe);
		return;
	}
	query_table_rows(&t, q, &n);
	table_print(&t, stdout);
	query_table_notes(&n);
}

/* A query's reply printed as its parts arrive: nothing but the table's notes and the
 * losses is kept from one part to the next. */
struct query_printer {
	const struct opts *o;
	size_t n_regions; /* listed so far */
	struct table t;
	size_t width[ARRAY_SIZE(query_table_head)];
	struct table_notes notes;
	json_t *losses; /* JSON: every part's, printed after the regions */
};

/* Writes @v, indented by @indent spaces more than jansson would at the top level. */
static void
json_print_indented(json_t *v, int indent)
{
	_cleanup_free_ char *text = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	json_decref(v);
	if (!text)
		fail("cannot write JSON");
	for (char *line = text, *end; line; line = end) {
		end = strchr(line, '\n');
		if (end)
			*end++ = '\0';
		printf("%*s%s%s", indent, "", line, end ? "\n" : "");
	}
}

static void
query_print_part(const Pmc__QueryReply *q, void *ctx)
{
	struct query_printer *p = ctx;

	if (p->o->format == FORMAT_JSON) {
		for (size_t i = 0; i < q->n_regions; i++) {
			fputs(p->n_regions + i ? ",\n" : "\n", stdout);
			json_print_indented(region_json(q->regions[i]), 4);
		}
		losses_json(p->losses, q);
	} else if (p->o->format == FORMAT_CSV) {
		query_csv_rows(q);
	} else {
		query_table_rows(&p->t, q, &p->notes);
		if (p->t.n)
			table_print_part(&p->t, stdout, p->width, !p->n_regions);
	}
	p->n_regions += q->n_regions;
}

/* Asks for @q's reply in parts and prints each as it arrives, in @o's format; when it lists
 * nothing, a line says why. */
static void
query_print_stream(int sock, const char *what, Pmc__Query *q, const struct opts *o)
{
	struct query_printer p = {.o = o,
	                          .t = {.ncols = ARRAY_SIZE(query_table_head),
	                                .head = query_table_head,
	                                .right = query_table_right}};

	if (o->format == FORMAT_JSON) {
		p.losses = jarray();
		fputs("{\n  \"regions\": [", stdout);
	} else if (o->format == FORMAT_CSV) {
		csv_header(query_csv_head, ARRAY_SIZE(query_csv_head));
	}
	_cleanup_response_ Pmc__Response *last =
	        query_stream(sock, what, q, o, query_print_part, &p);
	const Pmc__QueryReply *end = last->query;
	_cleanup_free_ char *why = NULL;
	const char *code = p.n_regions ? NULL : empty_reason(end, o, &why);

	if (o->format == FORMAT_JSON) {
		json_t *tail = jobject();

		fputs(p.n_regions ? "\n  ],\n" : "],\n", stdout);
		jset(tail, "losses", p.losses);
		if (why)
			empty_json(tail, end, code, why);
		/* The tail's members, its "{" left out: the root's are the regions'. */
		_cleanup_free_ char *text = json_dumps(tail, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		json_decref(tail);
		if (!text)
			fail("cannot write JSON");
		puts(text + 2);
	} else if (o->format == FORMAT_CSV) {
		if (why) {
			/* The CSV stays a table for the program reading it; the reason is for
			 * the person running it. */
			_cleanup_free_ char *safe = escape_text(why);

			fprintf(stderr, "pmcctl: %s\n", safe);
		}
	} else if (why) {
		_cleanup_free_ char *safe = escape_text(why);

		puts(safe);
	} else {
		query_table_notes(&p.notes);
	}
	if (fflush(stdout) || ferror(stdout))
		fail("cannot write the output: %s", strerror(errno));
}

static int
cmd_query(int sock, const struct command *cmd, const struct opts *o)
{
	Pmc__Query q;

	query_init(&q, o);
	query_print_stream(sock, cmd->name, &q, o);
	return 0;
}

/* ---- reset ---- */

static uint32_t
reset_one(int sock, int32_t pid, const char *region)
{
	Pmc__Reset rs = PMC__RESET__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;

	rs.pid = pid;
	rs.region = (char *)(region ? region : "");
	req.body_case = PMC__REQUEST__BODY_RESET;
	req.reset = &rs;

	_cleanup_response_ Pmc__Response *resp =
	        call(sock, "reset", &req, PMC__RESPONSE__BODY_RESET);
	return resp->reset->cleared;
}

/* Pids are at most 2^22 (PID_MAX_LIMIT): a reset of this one clears nothing, and is refused
 * like any other to whoever may not reset. */
#define RESET_NO_PID INT32_MAX

static int
cmd_reset(int sock, const struct command *cmd, const struct opts *o)
{
	uint32_t cleared = 0;

	if (!new_filters(o, 0)) {
		cleared = reset_one(sock, o->pid, o->n_regions ? o->regions[0] : NULL);
	} else {
		/* Reset names one exact region: the daemon matches the filters in a query,
		 * then each region it lists is cleared. Asking first whether we may reset at
		 * all words a refusal the same for every filter, even one that matches
		 * nothing. */
		Pmc__Query q;

		reset_one(sock, RESET_NO_PID, NULL);
		query_init(&q, o);
		_cleanup_response_ Pmc__Response *resp = query_call(sock, cmd->name, &q, o);
		Pmc__QueryReply *qr = resp->query;

		/* A pid may be listed twice (a process that exec'd a setuid program, or a
		 * recycled pid), and one reset of it clears both: once each. */
		if (qr->n_regions) /* (none: no array at all) */
			qsort(qr->regions, qr->n_regions, sizeof(*qr->regions), region_key_cmp);
		for (size_t i = 0; i < qr->n_regions; i++)
			if (!i || region_key_cmp(&qr->regions[i - 1], &qr->regions[i]))
				cleared +=
				        reset_one(sock, qr->regions[i]->pid, qr->regions[i]->name);
	}

	if (o->format == FORMAT_JSON) {
		json_t *root = jobject();

		jset(root, "cleared", ju64(cleared));
		json_print(root);
	} else if (o->format == FORMAT_CSV) {
		static const char *const head[] = {"cleared"};

		csv_header(head, ARRAY_SIZE(head));
		csv_u64(cleared);
		csv_end();
	} else {
		printf("cleared %" PRIu32 " aggregate(s)\n", cleared);
	}
	return 0;
}

/* ---- events ---- */

static bool
is_default_event(const Pmc__EventsReply *ev, const char *name)
{
	for (size_t i = 0; i < ev->n_default_events; i++)
		if (!strcmp(ev->default_events[i], name))
			return true;
	return false;
}

/* After the events table, where a hardware PMU is but the kernel does not let threads read
 * their counters in user space: says so, and what allows it (@hint, from the daemon). */
static void
user_reads_note(const char *hint)
{
	_cleanup_free_ char *h = escape_text(hint);

	printf("hardware counters are read with read() (slower): the kernel does not allow "
	       "user-space reads%s%s\n",
	       h[0] ? "; to allow them: " : "", h);
}

static int
cmd_events(int sock, const struct command *cmd, const struct opts *o)
{
	Pmc__ListEvents le = PMC__LIST_EVENTS__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;

	req.body_case = PMC__REQUEST__BODY_LIST_EVENTS;
	req.list_events = &le;

	_cleanup_response_ Pmc__Response *resp =
	        call(sock, cmd->name, &req, PMC__RESPONSE__BODY_EVENTS);
	const Pmc__EventsReply *ev = resp->events;

	if (o->format == FORMAT_JSON) {
		json_t *root = jobject();
		json_t *defaults = jarray();
		json_t *events = jarray();

		jset(root, "hardware_pmu", json_boolean(ev->hardware_pmu));
		jset(root, "user_reads", json_boolean(ev->user_reads));
		jset(root, "user_reads_hint", jstr(ev->user_reads_hint));
		jset(root, "default_events", defaults);
		jset(root, "events", events);
		for (size_t i = 0; i < ev->n_default_events; i++)
			jappend(defaults, jstr(ev->default_events[i]));
		for (size_t i = 0; i < ev->n_events; i++) {
			const Pmc__EventInfo *e = ev->events[i];
			json_t *obj = jobject();

			jappend(events, obj);
			jset(obj, "name", jstr(e->name));
			jset(obj, "description", jstr(e->description));
			jset(obj, "usable", json_boolean(e->usable));
			jset(obj, "hardware", json_boolean(e->hardware));
			jset(obj, "error", jstr(e->error));
		}
		json_print(root);
	} else if (o->format == FORMAT_CSV) {
		static const char *const head[] = {"name",     "description", "usable",
		                                   "hardware", "error",       "default"};

		csv_header(head, ARRAY_SIZE(head));
		for (size_t i = 0; i < ev->n_events; i++) {
			const Pmc__EventInfo *e = ev->events[i];

			csv_str(e->name);
			csv_str(e->description);
			csv_bool(e->usable);
			csv_bool(e->hardware);
			csv_str(e->error);
			csv_bool(is_default_event(ev, e->name));
			csv_end();
		}
	} else {
		static const char *const head[] = {"NAME", "USABLE", "KIND", "DESCRIPTION"};
		static const bool right[] = {false, false, false, false};
		struct table t = {.ncols = ARRAY_SIZE(head), .head = head, .right = right};

		for (size_t i = 0; i < ev->n_events; i++) {
			const Pmc__EventInfo *e = ev->events[i];

			table_add(&t, "%s", e->name);
			table_add(&t, "%s", e->usable ? "yes" : "no");
			table_add(&t, "%s", e->hardware ? "hardware" : "software");
			if (e->usable || !e->error[0])
				table_add(&t, "%s", e->description);
			else if (e->description[0])
				table_add(&t, "%s (%s)", e->description, e->error);
			else
				table_add(&t, "%s", e->error);
		}
		table_print(&t, stdout);
		table_free(&t);

		/* Reuse the table's sanitizing for the daemon-supplied names. */
		struct table d = {.ncols = 1};
		for (size_t i = 0; i < ev->n_default_events; i++)
			table_add(&d, "%s", ev->default_events[i]);
		fputs("\ndefault events:", stdout);
		for (size_t i = 0; i < d.n; i++)
			printf("%s %s", i ? "," : "", d.cell[i]);
		puts(d.n ? "" : " (none)");
		table_free(&d);
		if (!ev->hardware_pmu)
			puts("no hardware PMU on this machine: only software events can be "
			     "counted");
		else if (!ev->user_reads)
			user_reads_note(ev->user_reads_hint);
	}
	return 0;
}

/* ---- top ---- */

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
	s->status = call(sock, "top", &req, PMC__RESPONSE__BODY_STATUS);

	query_init(&q, o);
	s->query = query_call(sock, "top", &q, o);
	s->t_ns = util_now_ns(CLOCK_MONOTONIC);

	size_t n = s->query->query->n_regions;
	s->sorted = calloc(n + 1, sizeof(*s->sorted));
	if (!s->sorted)
		oom();
	if (n)
		memcpy(s->sorted, s->query->query->regions, n * sizeof(*s->sorted));
	qsort(s->sorted, n, sizeof(*s->sorted), region_key_cmp);
}

static const Pmc__RegionStats *
top_find(const struct top_snap *s, const Pmc__RegionStats *r)
{
	const Pmc__RegionStats **hit;

	if (!s->query)
		return NULL;
	hit = bsearch(&r, s->sorted, s->query->query->n_regions, sizeof(*s->sorted),
	              region_key_cmp);
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
	return (double)delta(stats_or_zero(e->stats)->sum, pe ? stats_or_zero(pe->stats)->sum : 0) /
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
	return region_key_cmp(&x->r, &y->r);
}

/* 1234, 12.3k, 4.5M...: rates and counts in a narrow column. */
static void
format_si(char *buf, size_t len, double v)
{
	static const char prefix[] = "kMGTPE";
	int i = -1;

	if (!isfinite(v)) {
		snprintf(buf, len, "-");
		return;
	}
	if (v == 0) {
		snprintf(buf, len, "0");
		return;
	}
	if (v < 999.95) {
		snprintf(buf, len, v < 9.995 ? "%.2f" : "%.1f", v);
		return;
	}
	while (v >= 999.95 && prefix[i + 1]) {
		v /= 1000;
		i++;
	}
	snprintf(buf, len, "%.1f%c", v, prefix[i]);
}

static void
format_ns(char *buf, size_t len, double ns)
{
	if (!isfinite(ns))
		snprintf(buf, len, "-");
	else if (ns < 1e3)
		snprintf(buf, len, "%.0fns", ns);
	else if (ns < 1e6)
		snprintf(buf, len, "%.1fus", ns / 1e3);
	else if (ns < 1e9)
		snprintf(buf, len, "%.1fms", ns / 1e6);
	else
		snprintf(buf, len, "%.2fs", ns / 1e9);
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

/* Prints @text (lines ending in '\n') with each line cut to @cols columns. */
static void
put_lines_cut(const char *text, size_t cols)
{
	while (*text) {
		const char *nl = strchr(text, '\n');
		size_t len = nl ? (size_t)(nl - text) : strlen(text);

		put_cut(text, len, cols);
		text += len + (nl != NULL);
	}
}

static void
top_print(const struct top_snap *cur, const struct top_snap *prev, const struct opts *o, bool tty,
          size_t max_rows, size_t cols)
{
	const Pmc__StatusReply *s = cur->status->status;
	const Pmc__QueryReply *q = cur->query->query;
	double dt = (double)(cur->t_ns - prev->t_ns) / 1e9;
	_cleanup_free_ struct top_row *rows = calloc(q->n_regions + 1, sizeof(*rows));
	_cleanup_free_ char *version = escape_text(s->daemon_version);
	_cleanup_free_ char *text = NULL;
	size_t text_len = 0;
	FILE *f;

	if (!rows || !version)
		oom();
	if (dt <= 0)
		dt = 1e-9;
	for (size_t i = 0; i < q->n_regions; i++) {
		struct top_row *row = &rows[i];
		const Pmc__RegionStats *p = top_find(prev, q->regions[i]);

		row->r = q->regions[i];
		/* A count that went down was reset: count it all as new. */
		row->prev = p && p->count <= row->r->count ? p : NULL;
		uint64_t runs = delta(row->r->count, row->prev ? row->prev->count : 0);
		uint64_t wall = delta(stats_or_zero(row->r->wall_ns)->sum,
		                      row->prev ? stats_or_zero(row->prev->wall_ns)->sum : 0);
		row->rate = (double)runs / dt;
		row->wall = runs ? (double)wall / (double)runs : NAN;
	}
	qsort(rows, q->n_regions, sizeof(*rows), top_row_cmp);
	size_t n_show = q->n_regions < max_rows ? q->n_regions : max_rows;

	/* One column per event the shown rows count, in order of first appearance. */
	_cleanup_free_ const char **ev = calloc(1, sizeof(*ev));
	size_t n_ev = 0;
	if (!ev)
		oom();
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
				oom();
			ev = v;
			ev[n_ev++] = name;
		}

	static const char *const fixed_head[] = {"PID",    "COMM", "REGION",
	                                         "RUNS/S", "RUNS", "WALL/RUN"};
	static const bool fixed_right[] = {true, false, false, true, true, true};
	size_t nf = ARRAY_SIZE(fixed_head);
	_cleanup_free_ char **head = calloc(nf + n_ev, sizeof(*head));
	_cleanup_free_ bool *right = calloc(nf + n_ev, sizeof(*right));
	if (!head || !right)
		oom();
	for (size_t c = 0; c < nf; c++) {
		head[c] = (char *)fixed_head[c];
		right[c] = fixed_right[c];
	}
	for (size_t k = 0; k < n_ev; k++) {
		_cleanup_free_ char *name = escape_text(ev[k]);

		if (asprintf(&head[nf + k], "%s/s", name) < 0)
			oom();
		right[nf + k] = true;
	}
	struct table t = {.ncols = nf + n_ev, .head = (const char *const *)head, .right = right};
	for (size_t i = 0; i < n_show; i++) {
		const struct top_row *row = &rows[i];
		char a[32], b[32];

		format_si(a, sizeof(a), row->rate);
		format_ns(b, sizeof(b), row->wall);
		table_add(&t, "%" PRId32, row->r->pid);
		table_add(&t, "%s", row->r->comm);
		table_add(&t, "%s", row->r->name);
		table_add(&t, "%s", a);
		table_add(&t, "%" PRIu64, row->r->count);
		table_add(&t, "%s", b);
		for (size_t k = 0; k < n_ev; k++) {
			format_si(a, sizeof(a), top_event_rate(row, ev[k], dt));
			table_add(&t, "%s", a);
		}
	}

	f = open_memstream(&text, &text_len);
	if (!f)
		oom();
	char clock[16], showing[64] = "";
	time_t now = time(NULL);
	struct tm tm;
	uint64_t up = s->uptime_ns / 1000000000u;
	const Pmc__StatusReply *ps = prev->status->status;

	strftime(clock, sizeof(clock), "%H:%M:%S", localtime_r(&now, &tm));
	fprintf(f, "pmcctl top - %s - every %g s - pmcdaemon %s (pid %" PRId32 "), up ", clock,
	        o->interval, version, s->pid);
	if (up >= 86400)
		fprintf(f, "%" PRIu64 "d ", up / 86400);
	fprintf(f, "%u:%02u:%02u\n", (unsigned)(up % 86400 / 3600), (unsigned)(up % 3600 / 60),
	        (unsigned)(up % 60));
	if (n_show < q->n_regions)
		snprintf(showing, sizeof(showing), "; showing %zu of %zu regions", n_show,
		         q->n_regions);
	char rate[32];
	format_si(rate, sizeof(rate), (double)delta(s->samples, ps->samples) / dt);
	fprintf(f,
	        "clients %" PRIu32 ", threads %" PRIu32 ", processes %" PRIu32 ", regions %" PRIu32
	        "; samples %" PRIu64 " (%s/s), batches %" PRIu64 ", dropped %" PRIu64
	        ", rejected %" PRIu64 "%s\n\n",
	        s->clients, s->threads, s->processes, s->regions, s->samples, rate, s->batches,
	        s->dropped, s->rejected, showing);
	if (n_show) {
		table_print(&t, f);
	} else {
		_cleanup_free_ char *why = NULL;

		empty_reason(q, o, &why);
		_cleanup_free_ char *safe = escape_text(why);
		fprintf(f, "%s\n", safe);
	}
	table_free(&t);
	for (size_t k = 0; k < n_ev; k++)
		free(head[nf + k]);
	if (fclose(f))
		oom();

	if (tty) {
		fputs("\033[H\033[2J", stdout);
		put_lines_cut(text, cols);
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

static int
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
			fail("writing output: %s", strerror(errno));
		top_snap_free(&prev);
		prev = cur;
		memset(&cur, 0, sizeof(cur));
	}
out:
	top_snap_free(&prev);
	top_snap_free(&cur);
	return 0;
}

/* ---- run ---- */

/* A pmcdaemon this pmcctl started for one run, on a socket in a directory of its own. */
struct private_daemon {
	pid_t pid;
	char dir[108]; /* what fits in sun_path, with the socket's name */
	char sock[128];
	char log[128];
	int paranoid;   /* perf_event_paranoid */
	bool user_mode; /* the kernel lets it count user mode only (paranoid 2, unprivileged) */
};

/* The one running now, stopped at exit whatever path pmcctl leaves by. */
static struct private_daemon *private_running;

/* Prints the private daemon's log to stderr: why it failed. */
static void
private_show_log(const struct private_daemon *d)
{
	_cleanup_fclose_ FILE *f = fopen(d->log, "re");
	char line[1024];

	if (!f)
		return;
	fputs("pmcctl: the private pmcdaemon said:\n", stderr);
	while (fgets(line, sizeof(line), f)) {
		_cleanup_free_ char *safe = NULL;

		line[strcspn(line, "\n")] = '\0';
		safe = escape_text(line);
		fprintf(stderr, "  %s\n", safe);
	}
}

/* Stops the private daemon: SIGTERM, SIGKILL after 5 s. Return: its wait status, or -1 when
 * it was gone. */
static int
private_stop(struct private_daemon *d)
{
	int status = -1;

	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		for (int i = 0; i < 500; i++) {
			pid_t w = waitpid(d->pid, &status, WNOHANG);

			if (w == d->pid || (w < 0 && errno != EINTR))
				break;
			if (i == 499) {
				kill(d->pid, SIGKILL);
				waitpid(d->pid, &status, 0);
			}
			usleep(10000);
		}
		d->pid = 0;
	}
	return status;
}

/* Removes its socket (which it removes itself when it stops cleanly), log and directory. */
static void
private_remove(struct private_daemon *d)
{
	if (!d->dir[0])
		return;
	unlink(d->sock);
	unlink(d->log);
	rmdir(d->dir);
	d->dir[0] = '\0';
}

static void
private_stop_at_exit(void)
{
	if (!private_running)
		return;
	private_stop(private_running);
	private_remove(private_running);
	private_running = NULL;
}

/* Whether the calling process may count any thread however perf_event_paranoid is set:
 * CAP_PERFMON (38) or CAP_SYS_ADMIN (21) in its effective set. */
static bool
perfmon_capable(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	unsigned long long eff = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &eff) == 1)
			break;
	return (eff >> 38 & 1) || (eff >> 21 & 1);
}

/* Whether @path names an executable regular file. */
static bool
is_program(const char *path)
{
	struct stat st;

	return !stat(path, &st) && S_ISREG(st.st_mode) && !access(path, X_OK);
}

/* The pmcdaemon to start: next to pmcctl (installed side by side, or the build tree's
 * daemon/ beside client/), in the sbin of pmcctl's prefix, on PATH, or in the system's sbin
 * directories. Return: a path to free, or NULL. */
static char *
private_find_daemon(void)
{
	char self[PATH_MAX], *path = NULL;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	const char *env = getenv("PATH");

	if (n > 0) {
		self[n] = '\0';
		*strrchr(self, '/') = '\0';
		static const char *const near[] = {"%s/pmcdaemon", "%s/../daemon/pmcdaemon",
		                                   "%s/../sbin/pmcdaemon"};
		for (size_t i = 0; i < ARRAY_SIZE(near); i++) {
			if (asprintf(&path, near[i], self) < 0)
				oom();
			if (is_program(path))
				return path;
			free(path);
		}
	}
	_cleanup_free_ char *dirs = strdup(env && env[0] ? env : "");
	if (!dirs)
		oom();
	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d;
	     d = strtok_r(NULL, ":", &save)) {
		if (asprintf(&path, "%s/pmcdaemon", d) < 0)
			oom();
		if (is_program(path))
			return path;
		free(path);
	}
	static const char *const sbin[] = {"/usr/local/sbin/pmcdaemon", "/usr/sbin/pmcdaemon",
	                                   "/sbin/pmcdaemon"};
	for (size_t i = 0; i < ARRAY_SIZE(sbin); i++)
		if (is_program(sbin[i]))
			return strdup(sbin[i]);
	return NULL;
}

/* A directory of our own for the socket: $XDG_RUNTIME_DIR, $TMPDIR or /tmp. */
static int
private_make_dir(struct private_daemon *d)
{
	const char *bases[] = {getenv("XDG_RUNTIME_DIR"), getenv("TMPDIR"), "/tmp"};

	for (size_t i = 0; i < ARRAY_SIZE(bases); i++) {
		struct sockaddr_un sa;

		if (!bases[i] || bases[i][0] != '/')
			continue;
		/* The socket's path must fit in sun_path. */
		if ((size_t)snprintf(d->dir, sizeof(d->dir), "%s/pmcctl-run.XXXXXX", bases[i]) +
		            sizeof("/pmc.sock") >
		    sizeof(sa.sun_path))
			continue;
		if (mkdtemp(d->dir)) {
			snprintf(d->sock, sizeof(d->sock), "%s/pmc.sock", d->dir);
			snprintf(d->log, sizeof(d->log), "%s/pmcdaemon.log", d->dir);
			return 0;
		}
	}
	d->dir[0] = '\0';
	return -errno;
}

/* Starts a pmcdaemon for this run, as the caller, on a socket only the caller may use, and
 * waits until it answers; on failure says why and exits EX_UNAVAILABLE. @why: how connecting
 * to @wanted failed. */
static void
private_start(struct private_daemon *d, const char *wanted, int why)
{
	_cleanup_fclose_ FILE *pf = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
	int paranoid = 4;

	if (!pf || fscanf(pf, "%d", &paranoid) != 1) {
		fprintf(stderr,
		        "pmcctl: no pmcdaemon answers at %s (%s), and this kernel has no "
		        "perf_event support (/proc/sys/kernel/perf_event_paranoid is missing) "
		        "to count with a private one\n",
		        wanted, strerror(-why));
		exit(EX_UNAVAILABLE);
	}
	if (paranoid > 2 && !perfmon_capable()) {
		fprintf(stderr,
		        "pmcctl: no pmcdaemon answers at %s (%s), and pmcctl cannot count with a "
		        "private one: perf_event_paranoid is %d, which lets only privileged users "
		        "count: ask the operator to run pmcdaemon (systemctl enable --now "
		        "pmcdaemon.socket) or to set kernel.perf_event_paranoid=2\n",
		        wanted, strerror(-why), paranoid);
		exit(EX_UNAVAILABLE);
	}
	d->paranoid = paranoid;
	d->user_mode = paranoid >= 2 && !perfmon_capable();
	_cleanup_free_ char *bin = private_find_daemon();
	if (!bin) {
		fprintf(stderr,
		        "pmcctl: no pmcdaemon answers at %s (%s), and there is no pmcdaemon "
		        "program to start a private one (looked next to pmcctl, on PATH and in "
		        "/usr/sbin): install pmc's daemon, or give the socket of a running one "
		        "with --socket\n",
		        wanted, strerror(-why));
		exit(EX_UNAVAILABLE);
	}
	int r = private_make_dir(d);
	if (r < 0) {
		fprintf(stderr, "pmcctl: cannot make a directory for a private pmcdaemon: %s\n",
		        strerror(-r));
		exit(EX_UNAVAILABLE);
	}
	private_running = d;

	pid_t parent = getpid();
	d->pid = fork();
	if (d->pid < 0) {
		d->pid = 0;
		fail("cannot start %s: fork: %s", bin, strerror(errno));
	}
	if (d->pid == 0) {
		/* Its own session: Ctrl-C at the terminal is for the command, and the daemon
		 * must still answer the query after the command ends. It ends with pmcctl. */
		int log = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

		setsid();
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent || log < 0 || null < 0 || dup2(null, 0) < 0 ||
		    dup2(log, 1) < 0 || dup2(log, 2) < 0)
			_exit(EX_OSERR);
		/* Not systemd's daemon: no notification, no sockets passed. */
		unsetenv("NOTIFY_SOCKET");
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDNAMES");
		unsetenv("WATCHDOG_USEC");
		unsetenv("WATCHDOG_PID");
		execl(bin, "pmcdaemon", "--socket", d->sock, "--socket-mode", "0600", (char *)NULL);
		fprintf(stderr, "cannot run %s: %s\n", bin, strerror(errno));
		_exit(EX_OSERR);
	}

	/* Ready when it answers: the socket file exists a moment before it listens. */
	for (int i = 0; i < 1000; i++) {
		int status;

		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			d->pid = 0;
			fprintf(stderr, "pmcctl: the private pmcdaemon (%s) exited at start\n",
			        bin);
			private_show_log(d);
			exit(EX_UNAVAILABLE);
		}
		int fd = wire_connect(d->sock);
		if (fd >= 0) {
			close(fd);
			_cleanup_free_ char *safe = escape_text(d->sock);

			fprintf(stderr,
			        "pmcctl: no pmcdaemon answers at %s: counting with a private one "
			        "(pid %d, socket %s) until the command ends\n",
			        wanted, (int)d->pid, safe);
			return;
		}
		usleep(10000);
	}
	private_show_log(d);
	fail("the private pmcdaemon (%s) did not answer within 10 s", bin);
}

/* Pids in ascending order. */
struct pidset {
	pid_t *v;
	size_t n, cap;
};

static bool
pidset_has(const struct pidset *s, pid_t pid)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->v[mid] == pid)
			return true;
		if (s->v[mid] < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static void
pidset_add(struct pidset *s, pid_t pid)
{
	size_t i = s->n;

	if (pidset_has(s, pid))
		return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		pid_t *v = reallocarray(s->v, cap, sizeof(*v));
		if (!v)
			oom();
		s->v = v;
		s->cap = cap;
	}
	while (i && s->v[i - 1] > pid) {
		s->v[i] = s->v[i - 1];
		i--;
	}
	s->v[i] = pid;
	s->n++;
}

/* Reads field 4 (ppid) and 22 (start time, clock ticks since boot) of /proc/PID/stat. */
static int
proc_stat(pid_t pid, pid_t *ppid, uint64_t *start)
{
	char path[64], buf[1024];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	/* comm may hold spaces and parentheses: the fields start after the last ')'. */
	char *p = strrchr(buf, ')');
	if (!p)
		return -EIO;
	p++;
	for (int field = 3; field <= 22; field++) {
		char *end;
		unsigned long long v;

		while (*p == ' ')
			p++;
		v = strtoull(p, &end, 10);
		if (field == 4 && ppid)
			*ppid = (pid_t)v;
		if (field == 22) {
			if (end == p)
				return -EIO;
			if (start)
				*start = v;
			return 0;
		}
		p = strchr(p, ' ');
		if (!p)
			return -EIO;
	}
	return -EIO;
}

/* Adds the children of every thread of @pid (/proc/PID/task/TID/children) to @out. */
static void
proc_children(pid_t pid, struct pidset *out)
{
	char path[300];
	_cleanup_closedir_ DIR *d = NULL;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return; /* gone */
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/children", (int)pid, e->d_name);
		_cleanup_fclose_ FILE *f = fopen(path, "re");
		int c;

		if (!f)
			continue;
		while (fscanf(f, "%d", &c) == 1)
			pidset_add(out, c);
	}
}

/* Adds to @seen each process below pmcctl (a subreaper: the orphans of the command's tree
 * come to it) but @skip and its descendants, as /proc shows them now. */
static void
run_scan(struct pidset *seen, pid_t skip)
{
	static int no_children_file = -1;
	struct pidset level = {0}, next = {0};

	if (no_children_file < 0) {
		char path[96];

		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(),
		         (int)getpid());
		no_children_file = access(path, R_OK) != 0;
	}
	if (no_children_file) {
		/* Every process's parent, from a scan of /proc. */
		_cleanup_closedir_ DIR *d = opendir("/proc");
		struct pidset tree = {0};

		pidset_add(&tree, getpid());
		for (bool grew = true; d && grew;) {
			grew = false;
			rewinddir(d);
			for (struct dirent *e; (e = readdir(d));) {
				pid_t pid = (pid_t)atoi(e->d_name), ppid = 0;

				if (pid <= 0 || pid == skip || pidset_has(&tree, pid) ||
				    proc_stat(pid, &ppid, NULL) < 0 || !pidset_has(&tree, ppid))
					continue;
				pidset_add(&tree, pid);
				pidset_add(seen, pid);
				grew = true;
			}
		}
		free(tree.v);
		return;
	}
	pidset_add(&level, getpid());
	while (level.n) {
		next.n = 0;
		for (size_t i = 0; i < level.n; i++)
			proc_children(level.v[i], &next);
		level.n = 0;
		for (size_t i = 0; i < next.n; i++)
			if (next.v[i] != skip) {
				pidset_add(seen, next.v[i]);
				pidset_add(&level, next.v[i]);
			}
	}
	free(level.v);
	free(next.v);
}

/* Whether event @name ends in a mode (":u", ":k", ":uk", ":ku"). */
static bool
event_has_mode(const char *name)
{
	const char *m = strrchr(name, ':');

	return m && m > name && m[-1] != ':' &&
	       (!strcmp(m, ":u") || !strcmp(m, ":k") || !strcmp(m, ":uk") || !strcmp(m, ":ku"));
}

/* The events for a private daemon that may count user mode only, while pmcdaemon counts
 * software events in both by default: @events (NULL: PMC_EVENTS, or the daemon's default
 * set), each without a mode given ":u". Return: the list for PMC_EVENTS, to free. */
static char *
run_user_mode_events(const char *sock_path, const char *events)
{
	char *list = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&list, &len);
	_cleanup_free_ char *copy = NULL;
	_cleanup_response_ Pmc__Response *resp = NULL;
	size_t n = 0;

	if (!f)
		oom();
	if (!events || !events[0])
		events = getenv("PMC_EVENTS");
	if (!events || !events[0]) {
		Pmc__ListEvents le = PMC__LIST_EVENTS__INIT;
		Pmc__Request req = PMC__REQUEST__INIT;
		_cleanup_close_ int fd = connect_daemon(sock_path);

		hello(fd);
		req.body_case = PMC__REQUEST__BODY_LIST_EVENTS;
		req.list_events = &le;
		resp = call(fd, "run", &req, PMC__RESPONSE__BODY_EVENTS);
		for (size_t i = 0; i < resp->events->n_default_events; i++) {
			const char *e = resp->events->default_events[i];

			fprintf(f, "%s%s%s", n++ ? "," : "", e, event_has_mode(e) ? "" : ":u");
		}
	} else {
		copy = strdup(events);
		if (!copy)
			oom();
		for (char *save = NULL, *e = strtok_r(copy, ",", &save); e;
		     e = strtok_r(NULL, ",", &save))
			fprintf(f, "%s%s%s", n++ ? "," : "", e, event_has_mode(e) ? "" : ":u");
	}
	if (fclose(f))
		oom();
	return list;
}

/* How long run waits between two looks at the command's processes: the least after a new
 * one came, doubling up to the most while none comes. */
#define RUN_SCAN_MIN_NS (1000 * 1000)
#define RUN_SCAN_MAX_NS (10 * 1000 * 1000)

/* Exit status of a shell for a child's wait status. */
static int
exit_code(int status)
{
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

/* Command line for messages, as a shell would take it back: each argument with more than
 * plain characters in single quotes; escaped. */
static char *
argv_text(char **argv)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		oom();
	for (size_t i = 0; argv[i]; i++) {
		const char *a = argv[i];

		fputs(i ? " " : "", f);
		if (a[0] && !a[strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		                         "0123456789_./=:,+-@%")]) {
			fputs(a, f);
			continue;
		}
		fputc('\'', f);
		for (; *a; a++)
			if (*a == '\'')
				fputs("'\\''", f);
			else
				fputc(*a, f);
		fputc('\'', f);
	}
	if (fclose(f))
		oom();
	char *safe = escape_text(text);
	free(text);
	return safe;
}

/* Prints the figures of the run: @q's regions of the processes in @tree (all of them when
 * @tree is NULL: a private daemon counts only the command's). */
static void
run_print(const Pmc__QueryReply *reply, const struct pidset *tree, const struct opts *o, pid_t pid,
          int code, bool private)
{
	Pmc__QueryReply view = *reply, *q = &view;
	_cleanup_free_ Pmc__RegionStats **kept = calloc(reply->n_regions + 1, sizeof(*kept));
	_cleanup_free_ char *cmdline = argv_text(o->argv);
	_cleanup_free_ char *why = NULL;
	size_t n = 0;

	if (!kept)
		oom();
	for (size_t i = 0; i < reply->n_regions; i++)
		if (!tree || pidset_has(tree, reply->regions[i]->pid))
			kept[n++] = reply->regions[i];
	view.regions = kept;
	view.n_regions = n;
	/* By pid, then name: the command's own regions come first. */
	qsort(kept, n, sizeof(*kept), region_key_cmp);
	if (!n) {
		const char *off = getenv("PMC_DISABLE");

		if (asprintf(&why, "%s (pid %d) and the processes it started recorded no regions%s",
		             cmdline, (int)pid,
		             off && !strcmp(off, "1")
		                     ? ": PMC_DISABLE=1 turns libpmcclient off"
		                     : " (are they linked with libpmcclient, and do their regions "
		                       "run?)") < 0)
			oom();
	}
	if (o->format == FORMAT_JSON) {
		json_t *root = query_json(q, "nothing_recorded", why);
		json_t *argv = jarray();

		jset(root, "command", argv);
		for (size_t i = 0; o->argv[i]; i++)
			jappend(argv, jstr(o->argv[i]));
		jset(root, "pid", json_integer(pid));
		jset(root, "exit_status", json_integer(code));
		jset(root, "daemon", jstr(private ? "private" : "system"));
		json_print(root);
	} else if (o->format == FORMAT_CSV) {
		query_csv(q);
		if (why)
			fprintf(stderr, "pmcctl: %s\n", why);
	} else {
		printf("regions of %s (pid %d) and the processes it started; exit status %d:\n\n",
		       cmdline, (int)pid, code);
		query_table(q, why);
	}
}

static int
cmd_run(int no_sock, const struct command *cmd, const struct opts *o)
{
	struct private_daemon priv = {0};
	const char *sock_path = o->socket;
	int fd = wire_connect(o->socket);
	bool private = false;
	/* An inherited SIG_IGN would reap our children (the daemon, the command) for us. */
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigaction(SIGCHLD, &dfl, NULL);

	/* Only where nothing listens: a daemon that refuses us says why below. */
	if (fd == -ENOENT || fd == -ECONNREFUSED) {
		private = true;
		atexit(private_stop_at_exit);
		private_start(&priv, o->socket, fd);
		sock_path = priv.sock;
		fd = wire_connect(sock_path);
	}
	if (fd < 0)
		connect_daemon(sock_path); /* says why and exits */
	hello(fd);
	close(fd);
	_cleanup_free_ char *user_events = NULL;
	const char *events = o->events;
	if (private && priv.user_mode) {
		user_events = run_user_mode_events(sock_path, o->events);
		events = user_events;
		_cleanup_free_ char *safe = escape_text(events);
		fprintf(stderr,
		        "pmcctl: perf_event_paranoid %d lets a pmcdaemon of uid %d count user mode "
		        "only: PMC_EVENTS=%s\n",
		        priv.paranoid, (int)getuid(), safe);
	}

	/* Orphans of the command's tree come to us, so that run_scan() still finds them. */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGQUIT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, &old);

	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		fail("run: pipe: %s", strerror(errno));
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		fail("run: fork: %s", strerror(errno));
	if (pid == 0) {
		int e;

		sigprocmask(SIG_SETMASK, &old, NULL);
		close(pipefd[0]);
		if (setenv("PMC_SOCKET", sock_path, 1) < 0 ||
		    (events && setenv("PMC_EVENTS", events, 1) < 0))
			_exit(127);
		execvp(o->argv[0], o->argv);
		e = errno;
		(void)!write(pipefd[1], &e, sizeof(e));
		_exit(e == ENOENT ? 127 : 126);
	}
	close(pipefd[1]);

	struct pidset tree = {0};
	uint64_t start = 0;
	int e = 0, status = 0;
	bool done = false;

	pidset_add(&tree, pid);
	proc_stat(pid, NULL, &start);
	if (read(pipefd[0], &e, sizeof(e)) == (ssize_t)sizeof(e)) {
		_cleanup_free_ char *name = escape_text(o->argv[0]);

		waitpid(pid, NULL, 0);
		fprintf(stderr, "pmcctl: cannot run '%s': %s\n", name, strerror(e));
		exit(e == ENOENT ? 127 : 126);
	}
	close(pipefd[0]);

	long wait_ns = RUN_SCAN_MIN_NS;
	while (!done) {
		struct timespec ts = {0};
		siginfo_t si;
		pid_t w;
		int st;

		while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
			if (w == pid) {
				status = st;
				done = true;
			} else if (w == priv.pid) {
				priv.pid = 0; /* said below */
			}
		}
		if (done)
			break;
		/* The pids of the command's processes: the daemon names processes by pid (a
		 * private daemon serves the command's only). A process that starts and ends
		 * between two looks is missed, so look often while processes come (they come
		 * in bursts: scripts, make), less when not. */
		size_t known = tree.n;
		uint64_t t0 = util_now_ns(CLOCK_MONOTONIC);
		if (!private)
			run_scan(&tree, priv.pid);
		uint64_t took = util_now_ns(CLOCK_MONOTONIC) - t0;
		wait_ns = tree.n > known ? RUN_SCAN_MIN_NS : wait_ns * 2;
		if (wait_ns > RUN_SCAN_MAX_NS)
			wait_ns = RUN_SCAN_MAX_NS;
		/* A large tree takes long to read: at most a tenth of a CPU for it. */
		if ((uint64_t)wait_ns < 9 * took)
			wait_ns = 9 * took < 999999999 ? (long)(9 * took) : 999999999;
		ts.tv_nsec = wait_ns;
		int sig = sigtimedwait(&set, &si, &ts);
		if (sig == SIGCHLD)
			wait_ns = RUN_SCAN_MIN_NS;
		/* What the terminal sends reaches the command too; what a process sends to
		 * pmcctl alone is passed on. */
		else if (sig > 0 && si.si_code <= 0)
			kill(pid, sig);
	}
	int code = exit_code(status);

	if (private && !priv.pid) {
		fprintf(stderr, "pmcctl: the private pmcdaemon ended while the command ran\n");
		private_show_log(&priv);
		free(tree.v);
		return code ? code : EXIT_FAIL;
	}
	if (o->output && !freopen(o->output, "w", stdout)) {
		_cleanup_free_ char *name = escape_text(o->output);

		fprintf(stderr, "pmcctl: cannot write %s: %s\n", name, strerror(errno));
		free(tree.v);
		return code ? code : EXIT_FAIL;
	}

	/* Only processes started since the command was; of those, the command's. */
	fd = connect_daemon(sock_path);
	hello(fd);
	Pmc__Query q;
	query_init(&q, o);
	q.min_start = start ? start : 1;
	Pmc__Response *resp = query_call(fd, cmd->name, &q, o);
	close(fd);
	run_print(resp->query, private ? NULL : &tree, o, pid, code, private);
	pmc__response__free_unpacked(resp, NULL);
	free(tree.v);

	if (private) {
		int st = private_stop(&priv);

		if (st != 0) {
			fprintf(stderr,
			        "pmcctl: the private pmcdaemon did not stop cleanly (%s %d)\n",
			        st > 0 && WIFSIGNALED(st) ? "signal" : "status",
			        st < 0            ? -1
			        : WIFSIGNALED(st) ? WTERMSIG(st)
			                          : WEXITSTATUS(st));
			private_show_log(&priv);
		}
		private_remove(&priv);
		private_running = NULL;
	}
	if (fflush(stdout) || ferror(stdout)) {
		fprintf(stderr, "pmcctl: writing output: %s\n", strerror(errno));
		return code ? code : EXIT_FAIL;
	}
	return code;
}

/* ---- command line ---- */

static const struct command commands[] = {
        {.name = "status", .run = cmd_status},
        {.name = "query", .filters = true, .run = cmd_query},
        {.name = "dump", .filters = true, .run = cmd_query},
        {.name = "reset", .filters = true, .run = cmd_reset},
        {.name = "events", .run = cmd_events},
        {.name = "top", .filters = true, .live = true, .run = cmd_top},
        {.name = "run", .filters = true, .no_pid = true, .standalone = true, .run = cmd_run},
};

enum {
	OPT_SOCKET = 0x100,
	OPT_FORMAT,
	OPT_PID,
	OPT_REGION,
	OPT_VERSION,
	OPT_INTERVAL,
	OPT_ITERATIONS,
	OPT_COMM,
	OPT_EVENTS,
	OPT_OUTPUT,
};

static const struct option long_options[] = {
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"pid", required_argument, NULL, OPT_PID},
        {"region", required_argument, NULL, OPT_REGION},
        {"comm", required_argument, NULL, OPT_COMM},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, OPT_VERSION},
        {"interval", required_argument, NULL, OPT_INTERVAL},
        {"iterations", required_argument, NULL, OPT_ITERATIONS},
        {"events", required_argument, NULL, OPT_EVENTS},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {NULL, 0, NULL, 0},
};

/* Appends @s to the list *@v of *@n strings. */
static void
list_add(const char ***v, size_t *n, const char *s)
{
	const char **grown = reallocarray(*v, *n + 1, sizeof(**v));

	if (!grown)
		oom();
	grown[(*n)++] = s;
	*v = grown;
}

/* The kernel keeps 15 bytes of a process name (TASK_COMM_LEN): a longer plain name is cut
 * the same way, so that it matches; a glob is taken as written. */
static const char *
parse_comm(char *s)
{
	if (!s[0])
		usage_error("--comm needs a process name");
	if (strlen(s) > 15 && !has_glob(s))
		s[15] = 0; /* argv is ours to cut */
	return s;
}

static int32_t
parse_pid(const char *s)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (*s < '0' || *s > '9' || errno || *end || v <= 0 || v > INT32_MAX)
		usage_error("invalid --pid '%s': expected a process id greater than 0", s);
	return (int32_t)v;
}

static double
parse_interval(const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v) || v < 0.1 || v > 86400)
		usage_error("invalid --interval '%s': expected seconds from 0.1 to 86400", s);
	return v;
}

static unsigned
parse_iterations(const char *s)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (*s < '0' || *s > '9' || errno || *end || v == 0 || v > UINT_MAX)
		usage_error("invalid --iterations '%s': expected a count greater than 0", s);
	return (unsigned)v;
}

static enum format
parse_format(const char *s)
{
	if (!strcmp(s, "table"))
		return FORMAT_TABLE;
	if (!strcmp(s, "json"))
		return FORMAT_JSON;
	if (!strcmp(s, "csv"))
		return FORMAT_CSV;
	usage_error("invalid --format '%s': expected table, json or csv", s);
}

static void
set_command(const char **command, const char *arg)
{
	if (*command)
		usage_error("unexpected argument '%s' after command '%s'", arg, *command);
	*command = arg;
}

int
main(int argc, char **argv)
{
	struct opts o = {.format = FORMAT_TABLE, .interval = 1};
	const char *command = NULL;
	const char *env = getenv("PMC_SOCKET");
	int c;

	setlocale(LC_CTYPE, "");
	o.socket = env && env[0] ? env : DEFAULT_SOCKET;

	/* A leading '-' hands over the command in place, so options may follow it even
	 * under POSIXLY_CORRECT; ':' lets us word the errors ourselves. */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "-:h", long_options, NULL)) != -1) {
		switch (c) {
		case 1:
			/* After "run", the first word that is not an option starts the command,
			 * with whatever options it has: pmcctl run make -j8. */
			if (command && !strcmp(command, "run")) {
				o.argv = &argv[optind - 1];
				goto parsed;
			}
			set_command(&command, optarg);
			break;
		case OPT_SOCKET:
			if (!optarg[0])
				usage_error("--socket needs a path");
			o.socket = optarg;
			break;
		case OPT_FORMAT:
			o.format = parse_format(optarg);
			break;
		case OPT_PID:
			o.pid = parse_pid(optarg);
			break;
		case OPT_REGION:
			if (!optarg[0])
				usage_error("--region needs a name");
			list_add(&o.regions, &o.n_regions, optarg);
			break;
		case OPT_COMM:
			list_add(&o.comms, &o.n_comms, parse_comm(optarg));
			break;
		case OPT_EVENTS:
			if (!optarg[0])
				usage_error("--events needs a list of events, such as page-faults");
			o.events = optarg;
			break;
		case OPT_OUTPUT:
			if (!optarg[0])
				usage_error("--output needs a file name");
			o.output = optarg;
			break;
		case OPT_INTERVAL:
			o.interval = parse_interval(optarg);
			o.live_opts = true;
			break;
		case OPT_ITERATIONS:
			o.iterations = parse_iterations(optarg);
			o.live_opts = true;
			break;
		case 'h':
			fputs(help_text, stdout);
			return fflush(stdout) ? EXIT_FAIL : 0;
		case OPT_VERSION:
			puts("pmcctl " PMCCTL_VERSION);
			return fflush(stdout) ? EXIT_FAIL : 0;
		case ':':
			usage_error("option '%s' needs an argument", argv[optind - 1]);
		default:
			if (!strncmp(argv[optind - 1], "--", 2) || !optopt)
				usage_error("unknown option '%s'", argv[optind - 1]);
			usage_error("unknown option '-%c'", optopt);
		}
	}
	/* After "--": the command of "run", or pmcctl's command. */
	if (command && !strcmp(command, "run") && optind < argc)
		o.argv = &argv[optind];
	else
		for (; optind < argc; optind++)
			set_command(&command, argv[optind]);
parsed:
	if (!command)
		usage_error("missing command (status, query, dump, reset, events, top or run)");

	const struct command *cmd = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		if (!strcmp(commands[i].name, command))
			cmd = &commands[i];
	if (!cmd)
		usage_error("unknown command '%s'", command);
	if ((!cmd->filters || cmd->no_pid) && o.pid)
		usage_error("--pid cannot be used with '%s'", cmd->name);
	if (!cmd->filters && o.n_regions)
		usage_error("--region cannot be used with '%s'", cmd->name);
	if (!cmd->filters && o.n_comms)
		usage_error("--comm cannot be used with '%s'", cmd->name);
	if (!cmd->standalone && (o.events || o.output))
		usage_error("--events and --output are for 'run' only, not '%s'", cmd->name);
	if (cmd->standalone && !o.argv)
		usage_error("'run' needs a command: pmcctl run [--events LIST] -- CMD [ARGS...]");
	if (!cmd->standalone && o.argv)
		usage_error("unexpected argument '%s' after command '%s'", o.argv[0], cmd->name);
	if (!cmd->live && o.live_opts)
		usage_error("--interval and --iterations are for 'top' only, not '%s'", cmd->name);
	if (cmd->live && o.format != FORMAT_TABLE)
		usage_error("'%s' prints a table only: --format cannot be json or csv", cmd->name);

	int r;
	if (cmd->standalone) {
		r = cmd->run(-1, cmd, &o);
		free(o.regions);
		free(o.comms);
		return r;
	}
	_cleanup_close_ int sock = connect_daemon(o.socket);
	hello(sock);
	r = cmd->run(sock, cmd, &o);
	free(o.regions);
	free(o.comms);

	if (fflush(stdout) || ferror(stdout))
		fail("writing output: %s", strerror(errno));
	return r;
}
