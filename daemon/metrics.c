/* metrics: the Prometheus endpoint of pmcdaemon (see metrics.h). The page is built on each
 * scrape from the registry as the loop last left it: a batch still queued in a client's
 * socket shows up on a later scrape, once the loop has read it. Unlike a Query, a scrape
 * does not first read what other connections have queued. It is built and written in steps
 * of a few milliseconds (see "the scrape" below), so a batch read meanwhile may show in
 * some of its series and not yet in others.
 *
 * Whoever reaches the address can open connections: they are counted and bounded here
 * (libevent 2.1's evhttp has no limit of its own), an idle one times out, and a failing
 * accept() pauses the listener instead of spinning. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cgroup.h"
#include "log.h"
#include "server.h"
#include "util.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define METRICS_MAX_HEADERS 16384
#define METRICS_MAX_BODY 4096
/* After an accept() failure that closing a connection of ours cannot cure. */
#define METRICS_ACCEPT_PAUSE_MS 100
/* A condition a peer can cause is logged at most once in this many seconds. */
#define METRICS_LOG_INTERVAL_S 10

/* An accepted HTTP connection. evhttp tells neither when it accepts one nor which
 * connection a bufferevent it asked for belongs to, so the connection is learnt in two
 * steps: on_new_bev() hands evhttp the bufferevent (pending), then on_adopt() reads the
 * connection back from its callback argument (open). */
struct conn {
	struct conn *prev, *next;
	struct metrics *m;
	struct bufferevent *bev;         /* pending: referenced until adopted */
	struct evhttp_connection *evcon; /* open */
	struct scrape *scrape;           /* the page it is being answered, or NULL */
	/* A request of it passed the token check (any request, without a token): it is never
	 * closed to make room for another connection. Until then header_ev closes it
	 * METRICS_HEADER_TIMEOUT_S after it was accepted, however slowly it sends. */
	bool authed;
	struct event *header_ev;
};

struct conn_list {
	struct conn *head, *tail; /* open: the one unused the longest first */
	unsigned n;
};

/* A condition logged at most once every METRICS_LOG_INTERVAL_S seconds. */
struct log_gate {
	uint64_t last_ns;
	unsigned long count; /* occurrences not logged yet */
};

struct metrics {
	struct server *srv;
	struct evhttp *http;
	struct evconnlistener *listener; /* owned by http */
	struct event *adopt_ev;          /* runs on_adopt() */
	struct event *resume_ev;         /* accepts again after METRICS_ACCEPT_PAUSE_MS */
	struct conn_list pending, open;
	bool paused_full, paused_error;
	struct log_gate gate_evict, gate_accept, gate_auth, gate_busy, gate_header;
	size_t token_len; /* 0: no token */
	char token[METRICS_TOKEN_MAX + 1];
	size_t max_series;
	bool label_container;    /* --metrics-labels container */
	struct scrape *scrapes;  /* every page being answered, in order of arrival */
	struct scrape *building; /* the one past QUEUED and before WRITE, or NULL */
	unsigned n_scrapes;
	bool warned_dropped; /* logged once that series were left off */
};

/* libevent 2.1 hands the listener's error callback evhttp's pointer, not ours: the daemon
 * serves one metrics page, and this is it. */
static struct metrics *accept_owner;

static bool
is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a =
		        &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(a))
			return true;
		return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
	}
	return false;
}

int
metrics_parse_addr(const char *spec, bool any, struct metrics_addr *out)
{
	const char *colon = strrchr(spec, ':');
	if (!colon)
		return -EINVAL;
	const char *port = colon + 1;
	const char *host = spec;
	size_t host_len = (size_t)(colon - spec);

	if (host_len >= 2 && host[0] == '[' && host[host_len - 1] == ']') {
		host++;
		host_len -= 2;
	} else if (memchr(host, ':', host_len)) {
		return -EINVAL; /* an IPv6 address needs its brackets */
	}
	size_t port_len = strlen(port);
	if (!port_len || port_len > 5 || strspn(port, "0123456789") != port_len ||
	    strtoul(port, NULL, 10) > 65535)
		return -EINVAL;
	char name[256];
	if (!host_len || host_len >= sizeof(name))
		return -EINVAL;
	memcpy(name, host, host_len);
	name[host_len] = '\0';

	struct addrinfo hints = {
	        .ai_family = AF_UNSPEC,
	        .ai_socktype = SOCK_STREAM,
	        .ai_flags = AI_NUMERICSERV,
	};
	struct addrinfo *res;
	int r = getaddrinfo(name, port, &hints, &res);
	if (r)
		return r == EAI_MEMORY ? -ENOMEM : -ENOENT;
	/* A name must not resolve to anything beyond loopback either. */
	r = 0;
	for (struct addrinfo *a = res; a; a = a->ai_next)
		if (!any && !is_loopback(a->ai_addr))
			r = -EPERM;
	if (r == 0) {
		if (res->ai_addrlen > sizeof(out->ss)) {
			r = -EINVAL;
		} else {
			memset(out, 0, sizeof(*out));
			memcpy(&out->ss, res->ai_addr, res->ai_addrlen);
			out->len = res->ai_addrlen;
		}
	}
	freeaddrinfo(res);
	return r;
}

/* ---- the page ---- */

struct page {
	struct evbuffer *b;
	int err;
};

static void page_printf(struct page *pg, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static void
page_printf(struct page *pg, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (evbuffer_add_vprintf(pg->b, fmt, ap) < 0)
		pg->err = -ENOMEM;
	va_end(ap);
}

static void
page_add(struct page *pg, const void *data, size_t len)
{
	if (len && evbuffer_add(pg->b, data, len) < 0)
		pg->err = -ENOMEM;
}

static void
page_str(struct page *pg, const char *s)
{
	page_add(pg, s, strlen(s));
}

/* Length of the well-formed UTF-8 sequence at @p (NUL-terminated), 0 if there is none; its
 * code point in *@cp. */
static size_t
utf8_decode(const unsigned char *p, uint32_t *cp)
{
	size_t n;
	uint32_t c, least;

	if (p[0] < 0x80) {
		*cp = p[0];
		return 1;
	}
	if ((p[0] & 0xe0) == 0xc0) {
		n = 2;
		c = p[0] & 0x1f;
		least = 0x80;
	} else if ((p[0] & 0xf0) == 0xe0) {
		n = 3;
		c = p[0] & 0x0f;
		least = 0x800;
	} else if ((p[0] & 0xf8) == 0xf0) {
		n = 4;
		c = p[0] & 0x07;
		least = 0x10000;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	if (c < least || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return n;
}

/* Characters a terminal or a browser acts on instead of showing: C0 and C1 controls, DEL,
 * and the bidirectional formatting characters that reorder what follows them. pmcctl hides
 * the same set (escape_text() in client/pmcctl/output.c). */
static bool
is_hidden(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
	       cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* A label value: backslash, double quote and newline escaped, as the format asks. Region
 * names and comm come from the clients: every other hidden character becomes a visible
 * escape, "\x1b" for a byte below 0x80, "\u202e" for a code point above, and so does a
 * byte that is not UTF-8 ("\xff"), which Prometheus would refuse. The escape's backslash is
 * itself escaped on the page: Prometheus reads the label as the text \x1b. */
static void
page_label_value(struct page *pg, const char *s)
{
	const unsigned char *p = (const unsigned char *)s, *run = p;

	while (*p) {
		uint32_t cp = 0;
		size_t n = utf8_decode(p, &cp);
		char buf[16];
		const char *esc = buf;

		if (*p == '\\')
			esc = "\\\\";
		else if (*p == '"')
			esc = "\\\"";
		else if (*p == '\n')
			esc = "\\n";
		else if (!n || (cp < 0x80 && is_hidden(cp)))
			snprintf(buf, sizeof(buf), "\\\\x%02x", *p);
		else if (is_hidden(cp))
			snprintf(buf, sizeof(buf), "\\\\u%04" PRIx32, cp);
		else
			esc = NULL;
		if (!n)
			n = 1;
		if (esc) {
			page_add(pg, run, (size_t)(p - run));
			page_str(pg, esc);
			run = p + n;
		}
		p += n;
	}
	page_add(pg, run, (size_t)(p - run));
}

static void
page_double(struct page *pg, double v)
{
	char buf[40];

	if (isnan(v)) {
		page_str(pg, "NaN");
		return;
	}
	if (isinf(v)) {
		page_str(pg, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	snprintf(buf, sizeof(buf), "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, sizeof(buf), "%.17g", v);
	page_str(pg, buf);
}

static void
family_head(struct page *pg, const char *name, const char *type, const char *help)
{
	page_printf(pg, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void
daemon_u64(struct page *pg, const char *name, const char *type, const char *help, uint64_t v)
{
	family_head(pg, name, type, help);
	page_printf(pg, "%s %" PRIu64 "\n", name, v);
}

static void
render_daemon(struct page *pg, const struct server *srv)
{
	family_head(pg, "pmc_build_info", "gauge", "Version of this pmcdaemon (always 1).");
	page_str(pg, "pmc_build_info{version=\"");
	page_label_value(pg, PMC_VERSION);
	page_str(pg, "\"} 1\n");
	family_head(pg, "pmc_uptime_seconds", "gauge", "Seconds since pmcdaemon started.");
	page_str(pg, "pmc_uptime_seconds ");
	page_double(pg, (double)(util_now_ns(CLOCK_MONOTONIC) - srv->started_ns) / 1e9);
	page_str(pg, "\n");
	daemon_u64(pg, "pmc_clients", "gauge", "Client connections open now.", srv->n_sessions);
	daemon_u64(pg, "pmc_threads", "gauge", "Threads registered now (their counters are open).",
	           srv->n_threads);
	daemon_u64(pg, "pmc_processes", "gauge",
	           "Processes with aggregates, connected or not (pmcctl reset keeps them).",
	           srv->reg.n_procs);
	daemon_u64(pg, "pmc_regions", "gauge", "Regions with aggregates, over every process.",
	           srv->reg.n_regions);
	daemon_u64(pg, "pmc_samples_total", "counter", "Region samples received.", srv->samples);
	daemon_u64(pg, "pmc_batches_total", "counter", "Sample batches received.", srv->batches);
	daemon_u64(pg, "pmc_dropped_samples_total", "counter",
	           "Samples dropped: by clients whose buffer was full (reported), or by the "
	           "daemon over --max-batch-rate, --max-regions or --max-total-regions.",
	           srv->dropped);
	daemon_u64(pg, "pmc_evicted_processes_total", "counter",
	           "Exited processes whose figures were forgotten to stay within "
	           "--keep-exited, --keep-exited-per-user or --max-total-regions (on this "
	           "page they count on, in their program's retired figures).",
	           srv->reg.evicted);
	daemon_u64(pg, "pmc_retired_regions", "gauge",
	           "Regions of the retired figures, per (uid, program): what forgotten processes "
	           "counted, kept for this page's counters.",
	           srv->reg.n_retired);
	daemon_u64(pg, "pmc_retired_dropped_total", "counter",
	           "Regions of forgotten processes whose figures the retired figures could not "
	           "keep (over --metrics-max-series / 4 regions, or a uid's quarter of them; or "
	           "out of memory): their series went down.",
	           srv->reg.retired_dropped);
	daemon_u64(pg, "pmc_rejected_connections_total", "counter",
	           "Connections closed for a malformed or out-of-protocol request.", srv->rejected);
}

/* ---- the scrape: the page built and written step by step ---- */

/*
 * The page shows one set of series per (program, uid, region): the figures of every
 * process of that uid with that comm, live or exited, and of its retired aggregate (what
 * the processes the registry forgot counted), merged (counts and sums add, histograms add
 * bucket by bucket). So a series never goes down when a process is forgotten: its
 * figures move from the process to the aggregate, within one step of the loop. A uid
 * label, so that another user's process named like yours never adds to your series; no
 * pid label: a pid changes with each run of a program and would make new series each
 * time, and a fleet's figures add up per program (sum without (uid)), not per process.
 *
 * A scrape runs in steps of at most METRICS_STEP_NS, each from a zero timer, so that the
 * loop polls its sockets between two steps:
 *
 *   SNAPSHOT  the processes and the retired aggregates, sorted by comm, uid (and container
 *             with --metrics-labels container, the aggregates then per cgroup), each
 *             group's aggregates after its processes: a group per (comm, uid[, container])
 *             (one step)
 *   MAP       per group, the union of its processes' event names; per process, its event
 *             ids mapped onto that union
 *   SCAN      a group at a time: every region of its processes into one entry per
 *             region name: its runs, and the smallest wall time and count of each event,
 *             which tell its series; then each entry's series counted, and the entry
 *             copied into a heap if it may be on the page (heap_offer()): its uid's,
 *             which holds the best entries of the uid whose series fit in its share of
 *             max_series, or the rest's, the best of the others that fit in max_series;
 *             the worst at the top of each
 *   SORT      the rest sorted; the page's entries: every uid's share, then the best of
 *             the rest that fit beside them, sorted, the most runs first; the series of
 *             all the others are counted as dropped
 *   GATHER    for each kept entry, its processes' figures merged into histograms of
 *             the page's bounds; then what SCAN held is unmapped
 *   WRITE     the page, a chunk of METRICS_CHUNK_BYTES at a time, each once the previous
 *             has gone out (evhttp_send_reply_chunk_with_cb())
 *
 * One scrape at a time goes through SNAPSHOT to GATHER (the others wait, QUEUED). SCAN
 * holds the entries of one group at a time, about 80 bytes each, in one buffer that the
 * next group reuses; they are found by name through an index only once a name may come
 * twice (from a second process of the group, or after a step, when the registry may have
 * changed). What a scrape keeps for WRITE is bounded by max_series. Between two steps
 * the registry may change, and a process may be freed: each step first finds which
 * processes of the snapshot are still there (mark_alive()), and reads only those. A
 * process the snapshot holds has its retired aggregate in the snapshot too (the registry
 * makes it with the process), after it in its group: one forgotten before SCAN reaches it
 * has its regions scanned in the aggregate, one forgotten later has them scanned already,
 * and GATHER finds them in either. The aggregate may have learnt event names since MAP: those are
 * mapped by name (event_of()).
 */

/* Work of one step, and the size of one chunk of the page. */
#define METRICS_STEP_NS 2000000u
#define METRICS_CHUNK_BYTES 65536u
/* Distinct event names of one program's processes shown; beyond, the others are left off. */
#define METRICS_GROUP_EVENTS 256u

/*
 * Histogram bounds: le = 2^k - 1 for k = 0 .. TOP, so that bucket k counts the values below
 * 2^k, a bound of the daemon's own histogram (stats.h): counts 0, 1, 3, 7, ... and wall
 * times (2^k - 1) ns, in seconds. The same on every daemon whatever it has seen, so that
 * `sum by (le)` over many of them is a histogram too. A series leaves out the bounds
 * below the power of two of its smallest value but one (their buckets are empty: added
 * over hosts, an absent bucket counts as the 0 it is), and has every bound above it, up to
 * TOP (an absent bucket there would not be 0). Values above the last bound are in +Inf.
 */
#define WALL_TOP 36  /* 2^36 - 1 ns: 68.7 s */
#define COUNT_TOP 40 /* 2^40 - 1: 1.1e12 */
/* The powers of two of a histogram: values 0, then [2^j, 2^(j+1)) at 1 + j. */
#define POWERS 65u

#define NO_EVENT UINT16_MAX
/* In entry.wall_min and entry.ev_min: no such event in the region / no run counted. A real
 * smallest value is kept below both (any value from 2^41 up has the same series). */
#define MIN_UNSEEN UINT64_MAX
#define MIN_EMPTY (UINT64_MAX - 1)
#define MIN_CLAMP (UINT64_C(1) << 62)

enum phase {
	PH_QUEUED,
	PH_SNAPSHOT,
	PH_MAP,
	PH_SCAN,
	PH_SORT,
	PH_GATHER,
	PH_WRITE,
};

/* Memory for one phase's many small objects, freed at once: mmap()ed, so that a scrape
 * leaves the daemon's heap (and RSS) as it found it. */
struct arena_chunk {
	struct arena_chunk *next;
	size_t size, used;
};

struct arena {
	struct arena_chunk *head;
	size_t chunk; /* bytes of the next chunk: doubles up to ARENA_CHUNK_MAX */
};

/* Few chunks, so that freeing an arena is a few munmap() calls. */
#define ARENA_CHUNK_MAX (4u << 20)

/* A process as the snapshot found it. */
struct sproc {
	struct process *p;
	pid_t pid;
	uid_t uid;
	uint64_t start;
	uint64_t gen;          /* the step in which mark_alive() last found it */
	bool retired;          /* a retired aggregate (pid 0) */
	const char *container; /* its container label ("" without --metrics-labels container) */
	uint32_t group;
	uint32_t n_map;
	uint16_t *map; /* its event id -> event of its group, or NO_EVENT */
};

/* The processes of one uid with one comm (and container, with its label):
 * procs[first .. first + n). */
struct group {
	char comm[sizeof(((struct process *)0)->comm)];
	const char *container; /* "" without the label */
	uid_t uid;
	int32_t user; /* its uid's share (scrape.users), -1: the uid had no regions at SNAPSHOT */
	uint32_t first, n;
	uint32_t n_events;
	char **events;
};

/* One (comm, region) as SCAN gathers it: in the group's buffer while SCAN merges the
 * regions of that comm's processes, then copied into the heap if it is among the best. */
struct entry {
	uint64_t key;
	uint64_t count;
	uint64_t wall_min; /* MIN_EMPTY: no run */
	uint32_t group;
	uint32_t series;
	uint32_t size;   /* bytes of the entry: its name, then ev_min at ev_off */
	uint32_t ev_off; /* per event of the group: MIN_UNSEEN, MIN_EMPTY or the smallest */
	uint32_t room;   /* in the heap: bytes of its memory, which the next copy may reuse */
	char name[];
};

static uint64_t *
ev_min(const struct entry *e)
{
	return (uint64_t *)(void *)((char *)e + e->ev_off);
}

/* Entries in a heap, the worst at the top, whose series stay within @cap. */
struct eheap {
	struct entry **v;
	size_t len, n;
	uint64_t series, cap;
};

/* A histogram of the page: bounds k0 .. k0 + nb - 1. */
struct ohist {
	uint16_t event; /* of the group; NO_EVENT: the wall time */
	uint8_t k0, nb;
	uint64_t count, sum, scaled;
	uint64_t *cum; /* nb cumulative counts */
};

/* One (comm, region) of the page. */
struct oentry {
	uint32_t group;
	uint32_t n_hist;
	uint64_t count;
	const char *name;
	struct ohist *h; /* h[0] the wall time, then the events in their group's order */
};

/* What WRITE writes, in order. */
enum family {
	F_DAEMON,
	F_COUNT,
	F_WALL,
	F_EVENT,
	F_SCALED,
	F_END,
};

struct scrape {
	struct scrape *prev, *next;
	struct metrics *m;
	struct conn *c;
	struct evhttp_request *req;
	struct event *step_ev;
	enum phase phase;
	uint64_t deadline;
	size_t cur, cur_region; /* where the phase goes on */

	struct arena small; /* procs, groups, event maps and names: until the end */
	struct sproc *procs;
	struct sproc **by_addr;
	size_t n_procs;
	struct group *groups;
	size_t n_groups;
	uint64_t gen;
	char *uni[METRICS_GROUP_EVENTS]; /* MAP: the event names of the group so far */
	uint32_t n_uni;

	/* SCAN: the group being merged, its entries one after the other in gbuf (g_used
	 * bytes, g_n entries, those up to g_flush offered to the heap); gtab indexes them by
	 * name (offset + 1, 0: empty; g_cap slots) once a name may come twice. */
	size_t cur_group;
	int g_state; /* 0: not begun, 1: reading its processes, 2: offering its entries */
	bool g_indexed;
	char *gbuf;
	size_t gbuf_cap, g_used, g_n, g_flush, g_want;
	size_t *gtab;
	size_t gtab_len, g_cap;

	/* The heaps of the entries that may be on the page (see heap_offer()): one per uid
	 * with regions, within its share of max_series; the rest, within max_series. */
	struct arena big; /* their entries: until GATHER ends */
	struct eheap *users;
	size_t n_users;
	struct eheap rest;
	struct eheap page; /* SORT: the entries kept, sorted best first for GATHER */
	int sort_stage;
	size_t n_rest; /* SORT: the rest's entries, sorted while its n counts down */
	size_t n_kept;
	struct entry **spare; /* entries that left the heaps: their memory is reused */
	size_t spare_len, n_spare;
	uint64_t total_series, kept_series;

	struct arena out; /* the page's entries */
	struct oentry *kept;
	uint64_t *coarse; /* GATHER: POWERS counters per histogram of an entry */
	size_t coarse_n;

	struct evbuffer *buf, *labels;
	enum family fam;
	size_t idx, sub; /* the entry, and its histogram (1..) in F_EVENT and F_SCALED */
	bool headed;     /* the family's HELP and TYPE are written */
	bool started;    /* evhttp_send_reply_start() was called */
};

static void *
map_bytes(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void
unmap_bytes(void *p, size_t n)
{
	if (p)
		munmap(p, n);
}

/* @n bytes, zeroed and 16-aligned, or NULL. */
static void *
arena_alloc(struct arena *a, size_t n)
{
	struct arena_chunk *c = a->head;
	size_t head = (sizeof(*c) + 15u) & ~(size_t)15u;
	void *p;

	n = (n + 15u) & ~(size_t)15u;
	if (!c || c->size - c->used < n) {
		size_t size = a->chunk;

		if (n + head > size)
			size = (n + head + 4095u) & ~(size_t)4095u;
		c = map_bytes(size);
		if (!c)
			return NULL;
		c->size = size;
		c->used = head;
		c->next = a->head;
		a->head = c;
		if (a->chunk < ARENA_CHUNK_MAX)
			a->chunk *= 2;
	}
	p = (char *)c + c->used;
	c->used += n;
	return p;
}

static void
arena_free(struct arena *a)
{
	struct arena_chunk *c;

	while ((c = a->head)) {
		a->head = c->next;
		unmap_bytes(c, c->size);
	}
}

static char *
arena_strdup(struct arena *a, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = arena_alloc(a, n);

	if (d)
		memcpy(d, s, n);
	return d;
}

static bool
past_deadline(const struct scrape *s)
{
	return util_now_ns(CLOCK_MONOTONIC) >= s->deadline;
}

/* ---- SNAPSHOT and the processes still there ---- */

static int
sproc_comm_cmp(const void *a, const void *b)
{
	const struct sproc *x = a, *y = b;
	int c = strcmp(x->p->comm, y->p->comm);

	if (!c)
		c = strcmp(x->container, y->container);
	if (c)
		return c;
	if (x->uid != y->uid)
		return x->uid < y->uid ? -1 : 1;
	if (x->retired != y->retired)
		return x->retired ? 1 : -1;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static int
sproc_addr_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)(*(struct sproc *const *)a)->p;
	uintptr_t y = (uintptr_t)(*(struct sproc *const *)b)->p;

	return x < y ? -1 : x > y;
}

/* Marks @sp of the snapshot for @p, if it is the same process (or retired aggregate). */
static void
mark_one(struct scrape *s, const struct process *p)
{
	size_t lo = 0, hi = s->n_procs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if ((uintptr_t)s->by_addr[mid]->p < (uintptr_t)p)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->n_procs) {
		struct sproc *sp = s->by_addr[lo];

		if (sp->p == p && sp->pid == p->pid && sp->start == p->start && sp->uid == p->uid)
			sp->gen = s->gen;
	}
}

/* Marks the processes and retired aggregates of the snapshot that the registry still holds
 * (the same one: a new one may have the address of one freed). Run at the start of each
 * step that reads the registry. */
static void
mark_alive(struct scrape *s)
{
	const struct registry *reg = &s->m->srv->reg;

	s->gen++;
	for (const struct process *p = reg->procs; p; p = p->next)
		mark_one(s, p);
	for (const struct process *p = reg->retired; p; p = p->next)
		mark_one(s, p);
}

static bool
alive(const struct scrape *s, const struct sproc *sp)
{
	return sp->gen == s->gen;
}

static int
uid_cmp(const void *a, const void *b)
{
	uid_t x = *(const uid_t *)a, y = *(const uid_t *)b;

	return x < y ? -1 : x > y;
}

/* The uids with regions now, each with its heap capped at its share of max_series; the
 * rest's heap capped at max_series. */
static int
snapshot_users(struct scrape *s)
{
	uid_t *uids = arena_alloc(&s->small, (s->n_groups + 1) * sizeof(*uids));
	size_t n = 0;

	if (!uids)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_groups; i++) {
		const struct group *g = &s->groups[i];

		for (uint32_t j = g->first; j < g->first + g->n; j++)
			if (s->procs[j].p->n_regions) {
				uids[n++] = g->uid;
				break;
			}
	}
	qsort(uids, n, sizeof(*uids), uid_cmp);
	s->n_users = 0;
	for (size_t i = 0; i < n; i++)
		if (!i || uids[i] != uids[i - 1])
			uids[s->n_users++] = uids[i];
	s->users = arena_alloc(&s->small, (s->n_users + 1) * sizeof(*s->users));
	if (!s->users)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_users; i++)
		s->users[i].cap = s->m->max_series / s->n_users;
	s->rest.cap = s->m->max_series;
	for (size_t i = 0; i < s->n_groups; i++) {
		uid_t *u = bsearch(&s->groups[i].uid, uids, s->n_users, sizeof(*uids), uid_cmp);

		s->groups[i].user = u ? (int32_t)(u - uids) : -1;
	}
	return 1;
}

static int
step_snapshot(struct scrape *s)
{
	const struct registry *reg = &s->m->srv->reg;
	size_t n = 0, n_retired = 0, max;

	for (const struct process *p = reg->retired; p; p = p->next)
		n_retired++;
	max = reg->n_procs + n_retired;
	s->procs = arena_alloc(&s->small, (max + 1) * sizeof(*s->procs));
	s->by_addr = arena_alloc(&s->small, (max + 1) * sizeof(*s->by_addr));
	s->groups = arena_alloc(&s->small, (max + 1) * sizeof(*s->groups));
	if (!s->procs || !s->by_addr || !s->groups)
		return -ENOMEM;
	for (struct process *p = reg->procs; p && n < reg->n_procs; p = p->next)
		s->procs[n++] =
		        (struct sproc){.p = p, .pid = p->pid, .uid = p->uid, .start = p->start};
	for (struct process *p = reg->retired; p && n < max; p = p->next)
		s->procs[n++] = (struct sproc){
		        .p = p, .pid = p->pid, .uid = p->uid, .start = p->start, .retired = true};
	s->n_procs = n;
	for (size_t i = 0; i < n; i++) {
		char name[CGROUP_NAME_MAX];

		s->procs[i].container = "";
		if (s->m->label_container &&
		    !(s->procs[i].container =
		              arena_strdup(&s->small, cgroup_container_name(s->procs[i].p->cgroup,
		                                                            name, sizeof(name)))))
			return -ENOMEM;
	}
	qsort(s->procs, n, sizeof(*s->procs), sproc_comm_cmp);
	for (size_t i = 0; i < n; i++) {
		struct group *g;

		if (!i || strcmp(s->procs[i].p->comm, s->procs[i - 1].p->comm) ||
		    strcmp(s->procs[i].container, s->procs[i - 1].container) ||
		    s->procs[i].uid != s->procs[i - 1].uid) {
			g = &s->groups[s->n_groups++];
			memcpy(g->comm, s->procs[i].p->comm, sizeof(g->comm));
			g->comm[sizeof(g->comm) - 1] = '\0';
			g->container = s->procs[i].container;
			g->uid = s->procs[i].uid;
			g->first = (uint32_t)i;
		}
		g = &s->groups[s->n_groups - 1];
		g->n++;
		s->procs[i].group = (uint32_t)(s->n_groups - 1);
		s->by_addr[i] = &s->procs[i];
	}
	qsort(s->by_addr, n, sizeof(*s->by_addr), sproc_addr_cmp);
	return snapshot_users(s);
}

/* ---- MAP ---- */

/* The index of event @name in the group being mapped, added if new; NO_EVENT past
 * METRICS_GROUP_EVENTS or without memory. */
static uint16_t
union_event(struct scrape *s, const char *name)
{
	for (uint32_t i = 0; i < s->n_uni; i++)
		if (!strcmp(s->uni[i], name))
			return (uint16_t)i;
	if (s->n_uni == METRICS_GROUP_EVENTS)
		return NO_EVENT;
	s->uni[s->n_uni] = arena_strdup(&s->small, name);
	return s->uni[s->n_uni] ? (uint16_t)s->n_uni++ : NO_EVENT;
}

static int
step_map(struct scrape *s)
{
	for (; s->cur < s->n_procs; s->cur++) {
		struct sproc *sp = &s->procs[s->cur];
		struct group *g = &s->groups[sp->group];

		if (s->cur == g->first)
			s->n_uni = 0;
		if (alive(s, sp) && sp->p->n_events) {
			const struct process *p = sp->p;

			sp->map = arena_alloc(&s->small, p->n_events * sizeof(*sp->map));
			if (!sp->map)
				return -ENOMEM;
			for (size_t id = 0; id < p->n_events; id++)
				sp->map[id] =
				        p->events[id] ? union_event(s, p->events[id]) : NO_EVENT;
			sp->n_map = (uint32_t)p->n_events;
		}
		if (s->cur + 1 == (size_t)g->first + g->n) {
			g->events = arena_alloc(&s->small, (s->n_uni + 1) * sizeof(*g->events));
			if (!g->events)
				return -ENOMEM;
			memcpy(g->events, s->uni, s->n_uni * sizeof(*g->events));
			g->n_events = s->n_uni;
		}
		if (past_deadline(s)) {
			s->cur++;
			return 0;
		}
	}
	return 1;
}

/* ---- SCAN ---- */

static uint64_t
mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

/* Room for @more bytes in the group's buffer: its entries are found by offset, so it may
 * move. */
static int
gbuf_grow(struct scrape *s, size_t more)
{
	size_t cap = s->gbuf_cap ? 2 * s->gbuf_cap : 64u << 10;
	char *b;

	while (cap < s->g_used + more)
		cap *= 2;
	if (!(b = map_bytes(cap)))
		return -ENOMEM;
	if (s->g_used)
		memcpy(b, s->gbuf, s->g_used);
	unmap_bytes(s->gbuf, s->gbuf_cap);
	s->gbuf = b;
	s->gbuf_cap = cap;
	return 0;
}

static struct entry *
gbuf_at(const struct scrape *s, size_t off)
{
	return (struct entry *)(void *)(s->gbuf + off);
}

/* Indexes the entries of the group so far by name, with room for @want. */
static int
group_index(struct scrape *s, size_t want)
{
	size_t cap = 64;

	while (cap < 2 * want || cap < 2 * (s->g_n + 1))
		cap *= 2;
	if (cap > s->gtab_len) {
		/* Its pages made at once: a page first read would be the zero page, and its
		 * first write then a fault and a TLB flush on every CPU. */
		size_t *t = mmap(NULL, cap * sizeof(*t), PROT_READ | PROT_WRITE,
		                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

		if (t == MAP_FAILED)
			return -ENOMEM;
		unmap_bytes(s->gtab, s->gtab_len * sizeof(*s->gtab));
		s->gtab = t;
		s->gtab_len = cap;
	} else {
		memset(s->gtab, 0, cap * sizeof(*s->gtab));
	}
	s->g_cap = cap;
	for (size_t off = 0; off < s->g_used; off += gbuf_at(s, off)->size) {
		size_t i = (size_t)gbuf_at(s, off)->key & (cap - 1);

		while (s->gtab[i])
			i = (i + 1) & (cap - 1);
		s->gtab[i] = off + 1;
	}
	s->g_indexed = true;
	return 0;
}

/* The entry of region @r of a process of group @gi, made if new. Until the group is
 * indexed, every region read is new: the first process of the group with regions, read
 * within one step, has each name once. */
static struct entry *
entry_get(struct scrape *s, uint32_t gi, const struct region_agg *r)
{
	uint64_t key = mix64(r->hash);
	size_t i = 0, len, size, off;
	struct entry *e;
	uint32_t n_ev = s->groups[gi].n_events;

	if (s->g_indexed) {
		if (2 * (s->g_n + 1) > s->g_cap && group_index(s, s->g_n + 1) < 0)
			return NULL;
		for (i = (size_t)key & (s->g_cap - 1); s->gtab[i]; i = (i + 1) & (s->g_cap - 1)) {
			e = gbuf_at(s, s->gtab[i] - 1);
			if (e->key == key && !strcmp(e->name, r->name))
				return e;
		}
	}
	len = (offsetof(struct entry, name) + strlen(r->name) + 1 + 7u) & ~(size_t)7u;
	size = len + n_ev * sizeof(uint64_t);
	if (s->gbuf_cap - s->g_used < size && gbuf_grow(s, size) < 0)
		return NULL;
	off = s->g_used;
	e = gbuf_at(s, off);
	e->key = key;
	e->count = 0;
	e->wall_min = MIN_EMPTY;
	e->group = gi;
	e->series = 0;
	e->size = (uint32_t)size;
	e->ev_off = (uint32_t)len;
	e->room = 0;
	strcpy(e->name, r->name);
	for (uint32_t k = 0; k < n_ev; k++)
		ev_min(e)[k] = MIN_UNSEEN;
	s->g_used += size;
	s->g_n++;
	if (s->g_indexed)
		s->gtab[i] = off + 1;
	return e;
}

static uint64_t
min_of(const struct stats *st)
{
	if (!st->count)
		return MIN_EMPTY;
	return st->min < MIN_CLAMP ? st->min : MIN_CLAMP;
}

/* Whether process event @id of @r has figures: it is shown then, even at 0 runs. */
static bool
event_seen(const struct region_agg *r, size_t id)
{
	return r->seen[id] || r->ev[id].st.count;
}

static size_t
events_of(const struct sproc *sp, const struct region_agg *r)
{
	return r->n_ev < sp->p->n_events ? r->n_ev : sp->p->n_events;
}

/* The event of @sp's group that its event @id is: as MAP mapped it, or for an id it has
 * learnt since (a retired aggregate that a process's figures joined), by name; NO_EVENT
 * when the group has no such event (then no series of it was on the page either). */
static uint16_t
event_of(const struct scrape *s, const struct sproc *sp, size_t id)
{
	const struct group *g = &s->groups[sp->group];
	const char *name = sp->p->events[id];

	if (id < sp->n_map)
		return sp->map[id];
	for (uint32_t k = 0; name && k < g->n_events; k++)
		if (!strcmp(g->events[k], name))
			return (uint16_t)k;
	return NO_EVENT;
}

static int
scan_region(struct scrape *s, const struct sproc *sp, const struct region_agg *r)
{
	struct entry *e = entry_get(s, sp->group, r);
	uint64_t v;

	if (!e)
		return -ENOMEM;
	e->count += r->count;
	v = min_of(&r->wall);
	if (v < e->wall_min)
		e->wall_min = v;
	for (size_t id = 0, n = events_of(sp, r); id < n; id++) {
		uint16_t k = event_of(s, sp, id);

		if (k == NO_EVENT || !event_seen(r, id))
			continue;
		v = min_of(&r->ev[id].st);
		if (v < ev_min(e)[k])
			ev_min(e)[k] = v;
	}
	return 0;
}

/* ---- SELECT and SORT ---- */

/* The first bound k0 of a histogram whose smallest value is @min (the bucket below its
 * power of two, empty), and how many bounds it has up to @top. */
static unsigned
first_bound(uint64_t min)
{
	return min ? 63u - (unsigned)__builtin_clzll(min) : 0u;
}

static unsigned
n_bounds(uint64_t min, unsigned top)
{
	unsigned k0 = first_bound(min);

	return k0 <= top ? top - k0 + 1u : 0u;
}

/* The series of @e: its count, its wall-time histogram (bounds, +Inf, _sum, _count), and
 * per event a histogram and a counter. */
static uint32_t
entry_series(const struct scrape *s, const struct entry *e)
{
	uint32_t n = 1 + n_bounds(e->wall_min, WALL_TOP) + 3;

	for (uint32_t k = 0; k < s->groups[e->group].n_events; k++)
		if (ev_min(e)[k] != MIN_UNSEEN)
			n += n_bounds(ev_min(e)[k], COUNT_TOP) + 4;
	return n;
}

/* Whether @a goes on the page before @b: more runs, then by comm, container, uid and name. */
static bool
better(const struct scrape *s, const struct entry *a, const struct entry *b)
{
	const struct group *ga = &s->groups[a->group], *gb = &s->groups[b->group];
	int c;

	if (a->count != b->count)
		return a->count > b->count;
	c = strcmp(ga->comm, gb->comm);
	if (!c)
		c = strcmp(ga->container, gb->container);
	if (!c && ga->uid != gb->uid)
		return ga->uid < gb->uid;
	return c ? c < 0 : strcmp(a->name, b->name) < 0;
}

/* A heap keeps the worst entry at the top: none of its children goes after it. */
static void
sift_down(struct scrape *s, struct eheap *eh, size_t i, size_t n)
{
	struct entry **h = eh->v;

	for (;;) {
		size_t w = i, l = 2 * i + 1, r = l + 1;
		struct entry *t;

		if (l < n && better(s, h[w], h[l]))
			w = l;
		if (r < n && better(s, h[w], h[r]))
			w = r;
		if (w == i)
			return;
		t = h[i];
		h[i] = h[w];
		h[w] = t;
		i = w;
	}
}

static void
sift_up(struct scrape *s, struct eheap *eh, size_t i)
{
	struct entry **h = eh->v;

	while (i) {
		size_t up = (i - 1) / 2;
		struct entry *t;

		if (!better(s, h[up], h[i]))
			return;
		t = h[i];
		h[i] = h[up];
		h[up] = t;
		i = up;
	}
}

/* Room for one more pointer in @v (of *@len, @n used). */
static int
ptrs_room(struct entry ***v, size_t *len, size_t n)
{
	struct entry **w;
	size_t l = *len ? 2 * *len : 512;

	if (n < *len)
		return 0;
	if (!(w = map_bytes(l * sizeof(*w))))
		return -ENOMEM;
	if (n)
		memcpy(w, *v, n * sizeof(*w));
	unmap_bytes(*v, *len * sizeof(**v));
	*v = w;
	*len = l;
	return 0;
}

/* A copy of @e for the heap: in the memory of an entry that left it when one fits. */
static struct entry *
heap_copy(struct scrape *s, const struct entry *e)
{
	struct entry *c = NULL;
	uint32_t room = 0;

	for (size_t i = s->n_spare; i-- > 0 && s->n_spare - i <= 8;)
		if (s->spare[i]->room >= e->size) {
			c = s->spare[i];
			room = c->room;
			s->spare[i] = s->spare[--s->n_spare];
			break;
		}
	if (!c) {
		/* Room for a longer name or more events next time. */
		room = (e->size + 63u) & ~63u;
		if (!(c = arena_alloc(&s->big, room)))
			return NULL;
	}
	memcpy(c, e, e->size);
	c->room = room;
	return c;
}

/* Whether @h keeps @e: its series fit, or @e goes before its worst entry. */
static bool
heap_wants(const struct scrape *s, const struct eheap *h, const struct entry *e)
{
	return h->series + e->series <= h->cap || (h->n && better(s, e, h->v[0]));
}

/* @c, a copy for the heaps, into @h; then @h's worst entries out while its series are over
 * its cap: from a uid's heap into the rest if it wants them, else to the spares. */
static int
heap_put(struct scrape *s, struct eheap *h, struct entry *c)
{
	int r;

	if (ptrs_room(&h->v, &h->len, h->n) < 0)
		return -ENOMEM;
	h->v[h->n++] = c;
	sift_up(s, h, h->n - 1);
	h->series += c->series;
	while (h->series > h->cap) {
		struct entry *w = h->v[0];

		h->series -= w->series;
		h->v[0] = h->v[--h->n];
		sift_down(s, h, 0, h->n);
		if (h != &s->rest && heap_wants(s, &s->rest, w)) {
			if ((r = heap_put(s, &s->rest, w)) < 0)
				return r;
			continue;
		}
		if (ptrs_room(&s->spare, &s->spare_len, s->n_spare) < 0)
			return -ENOMEM;
		s->spare[s->n_spare++] = w;
	}
	return 0;
}

/*
 * @e, an entry of the group buffer, into a heap if it may be on the page. Each uid with
 * regions is guaranteed a share of max_series, max_series / (uids with regions): its best
 * entries whose series fit in its share, the longest such run, are on the page whatever
 * the other uids have. What the shares leave goes to the best of all the other entries,
 * whichever their uid: the longest run of them whose series fit in what is left. So a uid
 * alone may fill the page, and many regions of one uid never push another's off it.
 *
 * A heap keeps the longest run of the best entries offered whose series fit in its cap:
 * an entry is kept when the series of those before it and its own fit, so the worst entry,
 * after every other one of the heap, leaves when the heap's series do not fit (entries
 * offered later only add to those before it). The uid's heap, capped at its share, holds
 * its guaranteed entries; every other entry (not wanted there, or pushed out later) is
 * offered to the rest, capped at max_series, from which SORT takes the best that fit in
 * what the shares leave. The heaps hold no more than twice the page's series.
 */
static int
heap_offer(struct scrape *s, const struct entry *e)
{
	int32_t u = s->groups[e->group].user;
	struct eheap *h = u >= 0 && heap_wants(s, &s->users[u], e) ? &s->users[u] : NULL;
	struct entry *c;

	if (!h && heap_wants(s, &s->rest, e))
		h = &s->rest;
	if (!h)
		return 0;
	if (!(c = heap_copy(s, e)))
		return -ENOMEM;
	return heap_put(s, h, c);
}

/* Starts group @g: its processes with regions now tell how large its buffer and its index
 * may grow. The buffer is made large enough for names of up to 16 bytes at once, rather
 * than doubled (and copied) from small. */
static int
group_begin(struct scrape *s, const struct group *g)
{
	size_t bytes;

	s->g_want = 0;
	for (uint32_t i = g->first; i < g->first + g->n; i++)
		if (alive(s, &s->procs[i]))
			s->g_want += s->procs[i].p->n_regions;
	s->g_used = s->g_n = s->g_flush = 0;
	bytes = s->g_want * (offsetof(struct entry, name) + 16 + g->n_events * sizeof(uint64_t));
	if (bytes > s->gbuf_cap && gbuf_grow(s, bytes) < 0)
		return -ENOMEM;
	s->g_indexed = false;
	s->cur = g->first;
	s->cur_region = 0;
	return 0;
}

/* SCAN, a group at a time: every region of its processes into its entries, then each
 * entry's series counted and the entry offered to the heap. */
static int
step_scan(struct scrape *s)
{
	unsigned work = 0;
	int r;

	/* A group read on in a later step: the registry may have changed meanwhile. A process
	 * only ever adds regions, at the end of its list, so the rest of its list brings new
	 * names; but a retired aggregate may have given up its regions and taken others (its
	 * names read already may come again), and a process forgotten meanwhile has its
	 * figures in its aggregate, read next (the index is made for the aggregate then). */
	if (s->g_state == 1 && !s->g_indexed && s->cur < s->n_procs) {
		const struct sproc *sp = &s->procs[s->cur];

		if (alive(s, sp) && (sp->retired || sp->p->n_regions < s->cur_region) &&
		    (r = group_index(s, s->g_want)) < 0)
			return r;
	}
	for (; s->cur_group < s->n_groups; s->cur_group++) {
		const struct group *g = &s->groups[s->cur_group];

		if (s->g_state == 0) {
			if ((r = group_begin(s, g)) < 0)
				return r;
			s->g_state = 1;
		}
		for (; s->g_state == 1 && s->cur < (size_t)g->first + g->n;
		     s->cur++, s->cur_region = 0) {
			const struct sproc *sp = &s->procs[s->cur];

			if (!alive(s, sp))
				continue;
			/* A second process with regions: its names may be the first's. */
			if (!s->cur_region && s->g_n && !s->g_indexed &&
			    (r = group_index(s, s->g_want)) < 0)
				return r;
			while (s->cur_region < sp->p->n_regions) {
				if ((r = scan_region(s, sp, sp->p->regions[s->cur_region++])) < 0)
					return r;
				if (++work % 64 == 0 && past_deadline(s))
					return 0;
			}
		}
		s->g_state = 2;
		while (s->g_flush < s->g_used) {
			struct entry *e = gbuf_at(s, s->g_flush);

			s->g_flush += e->size;
			e->series = entry_series(s, e);
			s->total_series += e->series;
			if ((r = heap_offer(s, e)) < 0)
				return r;
			if (++work % 64 == 0 && past_deadline(s))
				return 0;
		}
		s->g_state = 0;
	}
	return 1;
}

/* Heapsort of @h, some of it: the worst goes to the end, so that @h->v ends sorted best
 * first (@h->n then 0). Return: 1 when done, 0 when the step's time is up. */
static int
heap_sort_some(struct scrape *s, struct eheap *h)
{
	unsigned work = 0;

	while (h->n > 1) {
		struct entry *t = h->v[0];

		h->v[0] = h->v[--h->n];
		h->v[h->n] = t;
		sift_down(s, h, 0, h->n);
		if (++work % 256 == 0 && past_deadline(s))
			return 0;
	}
	h->n = 0;
	return 1;
}

/* The page's entries: every uid's guaranteed ones, then the best of the rest that fit in
 * what the shares leave (the rest sorted first), all sorted best first. */
static int
step_sort(struct scrape *s)
{
	if (s->sort_stage == 0) {
		s->n_rest = s->rest.n;
		s->sort_stage = 1;
	}
	if (s->sort_stage == 1) {
		size_t n_rest = s->n_rest, n = 0;
		uint64_t used = 0;

		if (!heap_sort_some(s, &s->rest))
			return 0;
		for (size_t i = 0; i < s->n_users; i++) {
			n += s->users[i].n;
			used += s->users[i].series;
		}
		s->page.len = n + n_rest;
		if (s->page.len && !(s->page.v = map_bytes(s->page.len * sizeof(*s->page.v))))
			return -ENOMEM;
		for (size_t i = 0; i < s->n_users; i++)
			for (size_t j = 0; j < s->users[i].n; j++)
				s->page.v[s->page.n++] = s->users[i].v[j];
		/* The shares are within max_series: what they leave, the rest fills. */
		for (size_t i = 0; i < n_rest && used + s->rest.v[i]->series <= s->m->max_series;
		     i++) {
			used += s->rest.v[i]->series;
			s->page.v[s->page.n++] = s->rest.v[i];
		}
		s->kept_series = used;
		s->n_kept = s->page.n;
		for (size_t i = s->page.n / 2; i-- > 0;)
			sift_down(s, &s->page, i, s->page.n);
		s->sort_stage = 2;
		if (past_deadline(s))
			return 0;
	}
	return heap_sort_some(s, &s->page);
}

/* ---- GATHER ---- */

/* Adds the values of @st's histogram to @c, per power of two (see POWERS). */
static void
coarse_add(uint64_t *c, const struct stats *st)
{
	const struct stats_hist *h = st->hist;

	if (!h)
		return;
	for (unsigned g = 0; g < STATS_GROUPS; g++) {
		const uint64_t *b = stats_hist_block(h, g);
		uint64_t sum = 0;

		if (!b)
			continue;
		if (g == 0) {
			/* 0, then 1, 2-3, 4-7, 8-15: each value its own bucket. */
			c[0] += b[0];
			c[1] += b[1];
			c[2] += b[2] + b[3];
			c[3] += b[4] + b[5] + b[6] + b[7];
			for (unsigned i = 8; i < 16; i++)
				sum += b[i];
			c[4] += sum;
			continue;
		}
		for (unsigned i = 0; i < STATS_GROUP_BUCKETS; i++)
			sum += b[i];
		c[g + 4] += sum; /* group g: [2^(g+3), 2^(g+4)) */
	}
}

static int
ohist_init(struct scrape *s, struct ohist *h, uint16_t event, uint64_t min, unsigned top)
{
	h->event = event;
	h->k0 = (uint8_t)first_bound(min);
	h->nb = (uint8_t)n_bounds(min, top);
	if (h->nb && !(h->cum = arena_alloc(&s->out, h->nb * sizeof(*h->cum))))
		return -ENOMEM;
	return 0;
}

/* The kept entry @e on the page as @o: its processes' figures now, merged. Its bounds are
 * those SCAN counted: a smaller value come since is in the first bucket for now. */
static int
gather_entry(struct scrape *s, const struct entry *e, struct oentry *o)
{
	const struct group *g = &s->groups[e->group];
	uint32_t n = 1;
	int r;

	for (uint32_t k = 0; k < g->n_events; k++)
		n += ev_min(e)[k] != MIN_UNSEEN;
	o->group = e->group;
	o->n_hist = n;
	o->name = arena_strdup(&s->out, e->name);
	o->h = arena_alloc(&s->out, n * sizeof(*o->h));
	if (!o->name || !o->h)
		return -ENOMEM;
	if ((r = ohist_init(s, &o->h[0], NO_EVENT, e->wall_min, WALL_TOP)) < 0)
		return r;
	n = 1;
	for (uint32_t k = 0; k < g->n_events; k++)
		if (ev_min(e)[k] != MIN_UNSEEN &&
		    (r = ohist_init(s, &o->h[n++], (uint16_t)k, ev_min(e)[k], COUNT_TOP)) < 0)
			return r;
	if (s->coarse_n < o->n_hist * POWERS) {
		uint64_t *c = realloc(s->coarse, o->n_hist * POWERS * sizeof(*c));

		if (!c)
			return -ENOMEM;
		s->coarse = c;
		s->coarse_n = o->n_hist * POWERS;
	}
	memset(s->coarse, 0, o->n_hist * POWERS * sizeof(*s->coarse));

	for (uint32_t i = g->first; i < g->first + g->n; i++) {
		const struct sproc *sp = &s->procs[i];
		const struct region_agg *ra = alive(s, sp) ? region_find(sp->p, o->name) : NULL;

		if (!ra)
			continue;
		o->count += ra->count;
		coarse_add(s->coarse, &ra->wall);
		o->h[0].count += ra->wall.count;
		o->h[0].sum = util_sat_add(o->h[0].sum, ra->wall.sum);
		for (size_t id = 0, ne = events_of(sp, ra); id < ne; id++) {
			uint16_t k = event_of(s, sp, id);
			const struct event_agg *ev = &ra->ev[id];

			if (k == NO_EVENT || !event_seen(ra, id))
				continue;
			for (uint32_t j = 1; j < o->n_hist; j++) {
				if (o->h[j].event != k)
					continue;
				coarse_add(s->coarse + j * POWERS, &ev->st);
				o->h[j].count += ev->st.count;
				o->h[j].sum = util_sat_add(o->h[j].sum, ev->st.sum);
				o->h[j].scaled += ev->scaled;
				break;
			}
		}
	}
	for (uint32_t j = 0; j < o->n_hist; j++) {
		const uint64_t *c = s->coarse + j * POWERS;
		struct ohist *h = &o->h[j];
		uint64_t cum = c[0]; /* values below 2^0 */

		for (unsigned k = 0; k < h->k0; k++)
			cum += c[1 + k];
		for (unsigned i = 0; i < h->nb; i++) {
			h->cum[i] = cum;
			cum += c[1 + h->k0 + i];
		}
	}
	return 0;
}

static int
step_gather(struct scrape *s)
{
	if (!s->kept && s->n_kept &&
	    !(s->kept = arena_alloc(&s->out, s->n_kept * sizeof(*s->kept))))
		return -ENOMEM;
	for (; s->cur < s->n_kept; s->cur++) {
		int r = gather_entry(s, s->page.v[s->cur], &s->kept[s->cur]);

		if (r < 0)
			return r;
		if (past_deadline(s)) {
			s->cur++;
			return 0;
		}
	}
	return 1;
}

/* What SCAN to GATHER needed and WRITE does not. */
static void
scrape_drop_scan(struct scrape *s)
{
	arena_free(&s->big);
	unmap_bytes(s->gbuf, s->gbuf_cap);
	unmap_bytes(s->gtab, s->gtab_len * sizeof(*s->gtab));
	for (size_t i = 0; i < s->n_users; i++)
		unmap_bytes(s->users[i].v, s->users[i].len * sizeof(*s->users[i].v));
	s->n_users = 0;
	unmap_bytes(s->rest.v, s->rest.len * sizeof(*s->rest.v));
	unmap_bytes(s->page.v, s->page.len * sizeof(*s->page.v));
	s->rest.v = s->page.v = NULL;
	s->rest.len = s->page.len = 0;
	unmap_bytes(s->spare, s->spare_len * sizeof(*s->spare));
	s->spare = NULL;
	s->spare_len = s->n_spare = 0;
	s->gbuf = NULL;
	s->gtab = NULL;
	s->gbuf_cap = s->gtab_len = 0;
	free(s->coarse);
	s->coarse = NULL;
	s->coarse_n = 0;
}

/* ---- WRITE ---- */

/* The le label of bound @k: 2^k - 1, in seconds (of nanoseconds) when @seconds. Built
 * once: the same text on every scrape and every daemon. */
static const char *
bound_label(bool seconds, unsigned k)
{
	static char text[2][COUNT_TOP + 1][32];
	static bool made;

	if (!made) {
		for (unsigned i = 0; i <= COUNT_TOP; i++) {
			uint64_t v = (UINT64_C(1) << i) - 1;
			double d = (double)v / 1e9;

			snprintf(text[0][i], sizeof(text[0][i]), "%" PRIu64, v);
			snprintf(text[1][i], sizeof(text[1][i]), "%.15g", d);
			if (strtod(text[1][i], NULL) != d)
				snprintf(text[1][i], sizeof(text[1][i]), "%.17g", d);
		}
		made = true;
	}
	return text[seconds][k];
}

/* s->labels = '{comm="..",uid=".."[,container=".."],region=".."[,event=".."]' for the lines
 * of one series. */
static int
make_labels(struct scrape *s, const struct oentry *o, const char *event)
{
	struct page pg = {.b = s->labels};

	evbuffer_drain(s->labels, evbuffer_get_length(s->labels));
	page_str(&pg, "{comm=\"");
	page_label_value(&pg, s->groups[o->group].comm);
	page_printf(&pg, "\",uid=\"%u", (unsigned)s->groups[o->group].uid);
	if (s->m->label_container) {
		page_str(&pg, "\",container=\"");
		page_label_value(&pg, s->groups[o->group].container);
	}
	page_str(&pg, "\",region=\"");
	page_label_value(&pg, o->name);
	if (event) {
		page_str(&pg, "\",event=\"");
		page_label_value(&pg, event);
	}
	page_str(&pg, "\"");
	if (!pg.err && !evbuffer_pullup(s->labels, -1))
		pg.err = -ENOMEM;
	return pg.err;
}

/* NAME SUFFIX {labels [,le="LE"]} */
static void
line_start(struct page *pg, struct scrape *s, const char *name, const char *suffix, const char *le)
{
	size_t n = evbuffer_get_length(s->labels);

	page_str(pg, name);
	page_str(pg, suffix);
	page_add(pg, evbuffer_pullup(s->labels, -1), n);
	if (le) {
		page_str(pg, ",le=\"");
		page_str(pg, le);
		page_str(pg, "\"");
	}
	page_str(pg, "} ");
}

static void
write_hist(struct page *pg, struct scrape *s, const char *name, const struct ohist *h)
{
	bool seconds = h->event == NO_EVENT;

	for (unsigned i = 0; i < h->nb; i++) {
		line_start(pg, s, name, "_bucket", bound_label(seconds, h->k0 + i));
		page_printf(pg, "%" PRIu64 "\n", h->cum[i]);
	}
	/* Every run, those the histogram missed (--max-memory) included: +Inf is _count. */
	line_start(pg, s, name, "_bucket", "+Inf");
	page_printf(pg, "%" PRIu64 "\n", h->count);
	line_start(pg, s, name, "_sum", NULL);
	if (seconds)
		page_double(pg, (double)h->sum / 1e9);
	else
		page_printf(pg, "%" PRIu64, h->sum);
	page_str(pg, "\n");
	line_start(pg, s, name, "_count", NULL);
	page_printf(pg, "%" PRIu64 "\n", h->count);
}

static const struct {
	const char *name, *type, *help;
} families[] = {
        [F_COUNT] = {"pmc_region_count_total", "counter",
                     "Runs of the region in the processes of the program (comm) of one user "
                     "(uid), running, exited or forgotten: the samples received for it."},
        [F_WALL] = {"pmc_region_wall_seconds", "histogram",
                    "Wall-clock time of one run of the region, in seconds; bucket bounds "
                    "(2^k - 1) ns, the same on every pmcdaemon."},
        [F_EVENT] = {"pmc_region_event", "histogram",
                     "Count of the event over one run of the region (label event: its name); "
                     "bucket bounds 2^k - 1, the same on every pmcdaemon."},
        [F_SCALED] = {"pmc_region_event_scaled_samples_total", "counter",
                      "Runs of the region whose count of the event was extrapolated from a "
                      "multiplexed counter."},
};

/* Writes the page on from (fam, idx, sub) until the chunk is full or the step's time is
 * up. Return: 1 when the page is complete, 0 when there is more, or -ENOMEM. */
static int
write_some(struct scrape *s, struct page *pg)
{
	while (s->fam < F_END && evbuffer_get_length(pg->b) < METRICS_CHUNK_BYTES && !pg->err &&
	       !past_deadline(s)) {
		const struct oentry *o = s->idx < s->n_kept ? &s->kept[s->idx] : NULL;
		const char *name = families[s->fam].name;

		if (s->fam == F_DAEMON) {
			render_daemon(pg, s->m->srv);
			family_head(
			        pg, "pmc_metrics_series_dropped", "gauge",
			        "Series of regions left off this page to stay within "
			        "--metrics-max-series: those of the regions with the fewest runs.");
			page_printf(pg, "pmc_metrics_series_dropped %" PRIu64 "\n",
			            s->total_series - s->kept_series);
			s->fam++;
			continue;
		}
		if (!s->headed) {
			family_head(pg, name, families[s->fam].type, families[s->fam].help);
			s->headed = true;
		}
		if (!o) {
			s->fam++;
			s->idx = s->sub = 0;
			s->headed = false;
		} else if (s->fam == F_COUNT || s->fam == F_WALL) {
			if (make_labels(s, o, NULL) < 0)
				return -ENOMEM;
			if (s->fam == F_COUNT) {
				line_start(pg, s, name, "", NULL);
				page_printf(pg, "%" PRIu64 "\n", o->count);
			} else {
				write_hist(pg, s, name, &o->h[0]);
			}
			s->idx++;
		} else if (s->sub + 1 >= o->n_hist) {
			s->idx++;
			s->sub = 0;
		} else {
			const struct ohist *h = &o->h[++s->sub];

			if (make_labels(s, o, s->groups[o->group].events[h->event]) < 0)
				return -ENOMEM;
			if (s->fam == F_EVENT) {
				write_hist(pg, s, name, h);
			} else {
				line_start(pg, s, name, "", NULL);
				page_printf(pg, "%" PRIu64 "\n", h->scaled);
			}
		}
	}
	if (pg->err)
		return pg->err;
	return s->fam == F_END;
}

/* ---- the bearer token ---- */

int
metrics_read_token(const char *path, struct metrics_addr *addr)
{
	/* O_NONBLOCK: a FIFO must not hang the start; fstat() then refuses it. */
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	char buf[METRICS_TOKEN_MAX + 3];
	struct stat st;
	size_t n = 0;
	int r = 0;

	if (fd < 0)
		return log_errno(-errno, "--metrics-token-file %s", path);
	if (fstat(fd, &st) < 0)
		return log_errno(-errno, "--metrics-token-file %s", path);
	if (!S_ISREG(st.st_mode)) {
		log_err("--metrics-token-file %s: not a regular file; give a file that holds the "
		        "token",
		        path);
		return -EINVAL;
	}
	if (st.st_uid != 0 && st.st_uid != geteuid()) {
		log_err("--metrics-token-file %s: owned by uid %u, who may change the token; the "
		        "file must be root's or pmcdaemon's own: chown root %s",
		        path, (unsigned)st.st_uid, path);
		return -EACCES;
	}
	if (st.st_mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH)) {
		log_err("--metrics-token-file %s: mode %04o lets %s read or change the token: "
		        "chmod 600 %s",
		        path, (unsigned)(st.st_mode & 07777),
		        !(st.st_mode & (S_IROTH | S_IWOTH))   ? "its group"
		        : !(st.st_mode & (S_IRGRP | S_IWGRP)) ? "other users"
		                                              : "its group and other users",
		        path);
		return -EACCES;
	}
	while (n < sizeof(buf)) {
		ssize_t k = read(fd, buf + n, sizeof(buf) - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			r = log_errno(-errno, "--metrics-token-file %s", path);
			goto out;
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	/* One line, as `echo TOKEN >FILE` writes it. */
	if (n && buf[n - 1] == '\n')
		n--;
	if (n && buf[n - 1] == '\r')
		n--;
	if (n > METRICS_TOKEN_MAX) {
		log_err("--metrics-token-file %s: the token is over %d bytes", path,
		        METRICS_TOKEN_MAX);
		r = -E2BIG;
		goto out;
	}
	if (!n) {
		log_err("--metrics-token-file %s: the file is empty; write the token into it, "
		        "e.g. head -c 32 /dev/urandom | base64 >%s",
		        path, path);
		r = -EINVAL;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)buf[i] <= 0x20 || buf[i] == 0x7f) {
			log_err("--metrics-token-file %s: byte %zu of the token is a space or a "
			        "control character; a bearer token is one word of printable "
			        "characters",
			        path, i + 1);
			r = -EINVAL;
			goto out;
		}
	memcpy(addr->token, buf, n);
	addr->token[n] = '\0';
	addr->token_len = n;
out:
	explicit_bzero(buf, sizeof(buf));
	return r;
}

/* Whether @header is "Bearer TOKEN" with our token. Compares every byte of ours whatever
 * the request holds, so that the time taken tells nothing of where they differ. */
static bool
authorized(const struct metrics *m, const char *header)
{
	static const char scheme[] = "Bearer ";
	const char *got;
	size_t len;
	unsigned char diff;

	if (!header || strncasecmp(header, scheme, sizeof(scheme) - 1))
		return false;
	got = header + sizeof(scheme) - 1;
	while (*got == ' ')
		got++;
	len = strlen(got);
	diff = len != m->token_len;
	for (size_t i = 0; i < m->token_len; i++)
		diff |= (unsigned char)m->token[i] ^ (unsigned char)(i < len ? got[i] : 0);
	return diff == 0;
}

/* ---- connections ---- */

static void
conn_append(struct conn_list *l, struct conn *c)
{
	c->next = NULL;
	c->prev = l->tail;
	if (l->tail)
		l->tail->next = c;
	else
		l->head = c;
	l->tail = c;
	l->n++;
}

static void
conn_remove(struct conn_list *l, struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		l->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		l->tail = c->prev;
	c->prev = c->next = NULL;
	l->n--;
}

/* The condition happened @n times: true when it is to be logged now, with *@more the
 * times it was not logged since the last line. */
static bool
gate_pass(struct log_gate *g, unsigned long n, unsigned long *more)
{
	uint64_t now = util_now_ns(CLOCK_MONOTONIC);

	g->count += n;
	if (g->last_ns && now - g->last_ns < METRICS_LOG_INTERVAL_S * 1000000000ull)
		return false;
	*more = g->count - n;
	g->count = 0;
	g->last_ns = now;
	return true;
}

static void
listener_update(struct metrics *m)
{
	if (m->paused_full || m->paused_error)
		evconnlistener_disable(m->listener);
	else
		evconnlistener_enable(m->listener);
}

static void scrape_abort(struct scrape *s);

/* evhttp frees a connection through here, however it ends (evhttp_connection_free()). */
static void
on_close(struct evhttp_connection *evcon, void *arg)
{
	struct conn *c = arg;

	if (c->scrape)
		scrape_abort(c->scrape);
	evhttp_connection_set_closecb(evcon, NULL, NULL);
	conn_remove(&c->m->open, c);
	if (c->header_ev)
		event_free(c->header_ev);
	free(c);
}

/* Closes the connection unused the longest of those no request of which passed the token
 * check: an unauthenticated connection never displaces an authenticated one, so that a flood
 * of idle, partial or bad-token connections cannot keep the real scraper off the page.
 * Return: false when every connection is authenticated (none closed). */
static bool
evict_unauthed(struct metrics *m)
{
	for (struct conn *c = m->open.head; c; c = c->next)
		if (!c->authed) {
			evhttp_connection_free(c->evcon); /* on_close() frees the conn */
			return true;
		}
	return false;
}

/* A connection that sent no request that passed the token check in
 * METRICS_HEADER_TIMEOUT_S: closed, whatever it sent meanwhile. */
static void
on_header_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	struct metrics *m = c->m;
	unsigned long more;

	if (c->authed)
		return;
	evhttp_connection_free(c->evcon); /* on_close() frees the conn */
	if (gate_pass(&m->gate_header, 1, &more))
		log_warn("metrics: closed a connection without an authorized request after %d s "
		         "(%lu more since the last such line)",
		         METRICS_HEADER_TIMEOUT_S, more);
}

/* evhttp asks for the bufferevent of each connection it accepts, before it makes the
 * connection. Ours is referenced, so that on_adopt() can tell whether evhttp still holds it. */
static struct bufferevent *
on_new_bev(struct event_base *base, void *arg)
{
	struct metrics *m = arg;
	struct conn *c = calloc(1, sizeof(*c));
	/* Options 0, as evhttp's own: evhttp closes the socket itself. */
	struct bufferevent *bev = c ? bufferevent_socket_new(base, -1, 0) : NULL;

	if (!bev) {
		free(c);
		return NULL; /* evhttp makes one: that connection goes uncounted */
	}
	bufferevent_incref(bev);
	c->m = m;
	c->bev = bev;
	conn_append(&m->pending, c);
	event_active(m->adopt_ev, EV_TIMEOUT, 1);
	/* The listener accepts all it can in one go: no more than a limit's worth. */
	if (m->pending.n >= METRICS_MAX_CONNECTIONS) {
		m->paused_full = true;
		listener_update(m);
	}
	return bev;
}

/* Runs after the listener's callback, before the loop next polls: the connections made
 * meanwhile are known by their bufferevent's callback argument, which evhttp set to the
 * connection (and cleared if it freed it already). Then the oldest go beyond the limit. */
static void
on_adopt(evutil_socket_t fd, short what, void *arg)
{
	struct metrics *m = arg;
	struct conn *c;
	unsigned long evicted = 0, more;

	while ((c = m->pending.head)) {
		struct bufferevent *bev = TAKE_PTR(c->bev);
		void *evcon = NULL;

		conn_remove(&m->pending, c);
		bufferevent_getcb(bev, NULL, NULL, NULL, &evcon);
		if (evcon) {
			static const struct timeval header = {METRICS_HEADER_TIMEOUT_S, 0};

			c->evcon = evcon;
			evhttp_connection_set_closecb(c->evcon, on_close, c);
			conn_append(&m->open, c);
			c->header_ev = evtimer_new(m->srv->base, on_header_timeout, c);
			/* Without memory for its timer, evhttp's idle time-out closes it. */
			if (c->header_ev)
				evtimer_add(c->header_ev, &header);
		} else {
			free(c);
		}
		bufferevent_decref(bev);
	}
	/* The connections just adopted are unauthenticated: there is always one to close. */
	for (; m->open.n > METRICS_MAX_CONNECTIONS && evict_unauthed(m); evicted++)
		;
	if (evicted && gate_pass(&m->gate_evict, evicted, &more))
		log_warn("metrics: over %d connections: closed %lu without an authorized request, "
		         "unused the longest (%lu more since the last such line)",
		         METRICS_MAX_CONNECTIONS, evicted, more);
	m->paused_full = false;
	listener_update(m);
}

static void
on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct metrics *m = arg;

	m->paused_error = false;
	listener_update(m);
}

/* accept() failed for another reason than a connection gone or a signal. Out of file
 * descriptors, a connection of ours is closed to make room for the next; otherwise the
 * listener waits METRICS_ACCEPT_PAUSE_MS rather than fail again at once, forever. */
static void
on_accept_error(struct evconnlistener *l, void *arg)
{
	struct metrics *m = accept_owner;
	int e = errno;
	bool evict;
	unsigned long more;

	if (!m)
		return;
	/* The connection waiting is unauthenticated: it displaces no authenticated one. */
	evict = (e == EMFILE || e == ENFILE) && evict_unauthed(m);
	if (!evict) {
		static const struct timeval pause = {0, METRICS_ACCEPT_PAUSE_MS * 1000};

		m->paused_error = true;
		listener_update(m);
		event_add(m->resume_ev, &pause);
	}
	if (!gate_pass(&m->gate_accept, 1, &more))
		return;
	if (evict)
		log_warn("metrics: cannot accept a connection: %s; closed the one without an "
		         "authorized request unused the longest to make room (%lu more since the "
		         "last such line)",
		         strerror(e), more);
	else
		log_warn("metrics: cannot accept a connection: %s; not accepting for %d ms (%lu "
		         "more since the last such line)",
		         strerror(e), METRICS_ACCEPT_PAUSE_MS, more);
}

/* ---- a scrape's life ---- */

static void
scrape_arm(struct scrape *s)
{
	static const struct timeval now = {0, 0};

	evtimer_add(s->step_ev, &now);
}

/* Starts building the first queued scrape, when none is being built. */
static void
scrape_kick(struct metrics *m)
{
	if (m->building)
		return;
	for (struct scrape *s = m->scrapes; s; s = s->next)
		if (s->phase == PH_QUEUED) {
			m->building = s;
			s->phase = PH_SNAPSHOT;
			scrape_arm(s);
			return;
		}
}

/* Forgets @s; its request is evhttp's or answered already. */
static void
scrape_free(struct scrape *s)
{
	struct metrics *m = s->m;
	bool building = m->building == s;

	if (s->prev)
		s->prev->next = s->next;
	else
		m->scrapes = s->next;
	if (s->next)
		s->next->prev = s->prev;
	m->n_scrapes--;
	if (s->c)
		s->c->scrape = NULL;
	if (s->step_ev)
		event_free(s->step_ev);
	scrape_drop_scan(s);
	arena_free(&s->small);
	arena_free(&s->out);
	if (s->buf)
		evbuffer_free(s->buf);
	if (s->labels)
		evbuffer_free(s->labels);
	free(s);
	if (building) {
		m->building = NULL;
		scrape_kick(m);
	}
}

/* Answers the request of @s now: its connection may go away meanwhile without it. */
static void
scrape_detach(struct scrape *s)
{
	if (s->c)
		s->c->scrape = NULL;
	s->c = NULL;
}

/* The connection of @s went away (on_close()). On a network error or timeout evhttp left
 * the request to us, without its connection; otherwise evhttp frees it. */
static void
scrape_abort(struct scrape *s)
{
	if (!evhttp_request_get_connection(s->req))
		evhttp_request_free(s->req);
	scrape_free(s);
}

static void reply_text(struct evhttp_request *req, int code, const char *reason, const char *text);

/* evhttp wrote the last chunk out: the next one, in a step of its own. */
static void
on_sent(struct evhttp_connection *evcon, void *arg)
{
	scrape_arm(arg);
}

/* One chunk of the page. */
static void
scrape_write(struct scrape *s)
{
	struct page pg = {.b = s->buf};
	int r;

	if (!s->started) {
		evhttp_add_header(evhttp_request_get_output_headers(s->req), "Content-Type",
		                  METRICS_CONTENT_TYPE);
		evhttp_send_reply_start(s->req, HTTP_OK, "OK");
		s->started = true;
	}
	r = write_some(s, &pg);
	if (r < 0) {
		/* Cut short, the page must not look complete: close the connection (on_close()
		 * frees the scrape). */
		log_errno(r, "metrics: cannot write the page");
		evhttp_connection_free(evhttp_request_get_connection(s->req));
		return;
	}
	if (r == 1) {
		if (evbuffer_get_length(s->buf))
			evhttp_send_reply_chunk(s->req, s->buf);
		/* Detached first: without a chunk left to send, an HTTP/1.0 connection is
		 * closed (on_close()) within evhttp_send_reply_end(). */
		scrape_detach(s);
		evhttp_send_reply_end(s->req);
		scrape_free(s);
		return;
	}
	if (evbuffer_get_length(s->buf))
		evhttp_send_reply_chunk_with_cb(s->req, s->buf, on_sent, s);
	else
		scrape_arm(s); /* the step's time was up before a line */
}

static void
on_step(evutil_socket_t fd, short what, void *arg)
{
	struct scrape *s = arg;
	bool marked = false;
	int r = 1;

	s->deadline = util_now_ns(CLOCK_MONOTONIC) + METRICS_STEP_NS;
	if (s->phase == PH_WRITE) {
		scrape_write(s);
		return;
	}
	/* Phases run on in the same step while its time lasts. */
	while (r == 1 && s->phase != PH_WRITE) {
		/* The registry changed since the last step: which processes are left. */
		if (!marked &&
		    (s->phase == PH_MAP || s->phase == PH_SCAN || s->phase == PH_GATHER)) {
			mark_alive(s);
			marked = true;
		}
		switch (s->phase) {
		case PH_SNAPSHOT:
			r = step_snapshot(s);
			break;
		case PH_MAP:
			r = step_map(s);
			break;
		case PH_SCAN:
			r = step_scan(s);
			break;
		case PH_SORT:
			r = step_sort(s);
			break;
		case PH_GATHER:
			r = step_gather(s);
			break;
		default:
			r = -EINVAL;
			break;
		}
		if (r == 1) {
			s->phase++;
			s->cur = s->cur_region = 0;
			if (s->phase == PH_WRITE) {
				struct metrics *m = s->m;

				scrape_drop_scan(s);
				m->building = NULL;
				scrape_kick(m);
				if (s->total_series > s->kept_series && !m->warned_dropped) {
					log_warn("metrics: the page leaves off %" PRIu64
					         " series of the regions with the fewest runs to "
					         "stay within --metrics-max-series %zu "
					         "(pmc_metrics_series_dropped says how many)",
					         s->total_series - s->kept_series, m->max_series);
					m->warned_dropped = true;
				}
			}
			if (past_deadline(s))
				break;
		}
	}
	if (r < 0) {
		log_errno(r, "metrics: cannot build the page");
		scrape_detach(s);
		reply_text(s->req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
		scrape_free(s);
		return;
	}
	scrape_arm(s);
}

/* Answers GET /metrics on connection @c: queued, then built and written step by step. */
static void
scrape_start(struct metrics *m, struct conn *c, struct evhttp_request *req)
{
	struct scrape *s;

	if (!c || c->scrape) {
		/* A connection evhttp made itself (on_new_bev() had no memory): untracked, it
		 * could not tell when it goes away. */
		reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
		return;
	}
	if (m->n_scrapes >= METRICS_MAX_SCRAPES) {
		unsigned long more;

		if (gate_pass(&m->gate_busy, 1, &more))
			log_warn("metrics: over %d scrapes at once: answered 503 (%lu more since "
			         "the last such line)",
			         METRICS_MAX_SCRAPES, more);
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
		reply_text(req, 503, "Service Unavailable",
		           "busy: pmcdaemon serves a few scrapes at once; try again\n");
		return;
	}
	s = calloc(1, sizeof(*s));
	if (s) {
		s->m = m;
		s->c = c;
		s->req = req;
		s->small.chunk = 64u << 10;
		s->big.chunk = 1u << 20;
		s->out.chunk = 64u << 10;
		s->step_ev = evtimer_new(m->srv->base, on_step, s);
		s->buf = evbuffer_new();
		s->labels = evbuffer_new();
		s->next = NULL;
		s->prev = NULL;
		m->n_scrapes++;
		/* Appended: the queue is in order of arrival. */
		struct scrape **tail = &m->scrapes;
		while (*tail) {
			s->prev = *tail;
			tail = &(*tail)->next;
		}
		*tail = s;
		c->scrape = s;
	}
	if (!s || !s->step_ev || !s->buf || !s->labels) {
		if (s)
			scrape_free(s);
		log_errno(-ENOMEM, "metrics: cannot build the page");
		reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
		return;
	}
	scrape_kick(m);
}

/* ---- HTTP ---- */

static void
reply_text(struct evhttp_request *req, int code, const char *reason, const char *text)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
	evbuffer_add(evhttp_request_get_output_buffer(req), text, strlen(text));
	evhttp_send_reply(req, code, reason, NULL);
}

static void
refuse_unauthorized(struct metrics *m, struct evhttp_request *req)
{
	unsigned long more;

	if (gate_pass(&m->gate_auth, 1, &more)) {
		char *host = NULL;
		ev_uint16_t port = 0;

		evhttp_connection_get_peer(evhttp_request_get_connection(req), &host, &port);
		log_warn("metrics: refused a request from %s without the right bearer token (%lu "
		         "more since the last such line)",
		         host ? host : "?", more);
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
	                  "Bearer realm=\"pmcdaemon\"");
	/* Closed once answered: a connection that failed once holds no place. */
	evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
	reply_text(req, 401, "Unauthorized",
	           "unauthorized: pmcdaemon's metrics page wants 'Authorization: Bearer TOKEN' "
	           "with the token of its --metrics-token-file\n");
}

static void
on_request(struct evhttp_request *req, void *arg)
{
	struct metrics *m = arg;
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	const char *auth =
	        evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
	struct conn *c;

	/* Used now: the last to be closed to make room. */
	for (c = m->open.tail; c; c = c->prev)
		if (c->evcon == evcon) {
			conn_remove(&m->open, c);
			conn_append(&m->open, c);
			break;
		}
	if (m->token_len && !authorized(m, auth)) {
		refuse_unauthorized(m, req);
		return;
	}
	if (c && !c->authed) {
		c->authed = true;
		if (c->header_ev)
			event_del(c->header_ev);
	}
	if (!path || strcmp(path, "/metrics")) {
		reply_text(req, HTTP_NOTFOUND, "Not Found",
		           "not found: pmcdaemon serves /metrics only\n");
		return;
	}
	if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
		reply_text(req, 405, "Method Not Allowed", "/metrics answers GET and HEAD\n");
		return;
	}
	if (cmd == EVHTTP_REQ_HEAD) {
		/* Headers only: nothing to build. */
		evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
		                  METRICS_CONTENT_TYPE);
		evhttp_send_reply(req, HTTP_OK, "OK", NULL);
		return;
	}
	scrape_start(m, c, req);
}

static void
log_serving(const struct sockaddr_storage *ss, bool has_token)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	bool v6 = ss->ss_family == AF_INET6;

	if (v6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		port = ntohs(in6->sin6_port);
	} else if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)ss;
		inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		port = ntohs(in->sin_port);
	}
	log_info("serving metrics on http://%s%s%s:%u/metrics", v6 ? "[" : "", host, v6 ? "]" : "",
	         port);
	if (has_token)
		return;
	log_warn("the metrics page has no access control: %s who can reach %s%s%s:%u may read "
	         "it, and it names every process's regions; to close it, give "
	         "--metrics-token-file FILE (a bearer token, chmod 600) and the same token to "
	         "Prometheus (authorization: credentials_file)",
	         is_loopback((const struct sockaddr *)ss) ? "every local user" : "anyone",
	         v6 ? "[" : "", host, v6 ? "]" : "", port);
}

int
metrics_parse_labels(const char *list, struct metrics_addr *addr)
{
	bool any = false;

	for (const char *l = list; *l;) {
		size_t n = strcspn(l, ",");

		if (n == strlen("container") && !strncmp(l, "container", n))
			addr->label_container = any = true;
		else if (n)
			return -EINVAL;
		l += n;
		if (*l)
			l++;
	}
	return any ? 0 : -EINVAL;
}

int
metrics_new(struct server *srv, const struct metrics_addr *addr, struct metrics **out)
{
	_cleanup_close_ int fd =
	        socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&addr->ss, addr->len) < 0 || listen(fd, 64) < 0)
		return -errno;
	struct sockaddr_storage bound;
	socklen_t len = sizeof(bound);
	if (getsockname(fd, (struct sockaddr *)&bound, &len) < 0)
		return -errno;
	if (accept_owner)
		return -EBUSY;

	struct metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->srv = srv;
	m->max_series = addr->max_series ? addr->max_series : METRICS_DEFAULT_MAX_SERIES;
	m->label_container = addr->label_container;
	/* A container's series go on counting what its forgotten processes counted. */
	srv->reg.retired_by_cgroup = addr->label_container;
	/* What forgotten processes counted stays on the page; as many regions as it can show
	 * (4 series each at least). */
	int r = registry_retire_enable(&srv->reg, m->max_series / 4 ? m->max_series / 4 : 1);
	if (r < 0) {
		free(m);
		return r;
	}
	memcpy(m->token, addr->token, addr->token_len);
	m->token_len = addr->token_len;
	m->http = evhttp_new(srv->base);
	m->adopt_ev = event_new(srv->base, -1, 0, on_adopt, m);
	m->resume_ev = evtimer_new(srv->base, on_resume, m);
	/* Backlog 0: the socket already listens. The listener closes it when freed. */
	struct evconnlistener *l =
	        m->http && m->adopt_ev && m->resume_ev
	                ? evconnlistener_new(srv->base, NULL, NULL,
	                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd)
	                : NULL;
	if (!l) {
		metrics_free(m);
		return -ENOMEM;
	}
	fd = -1;
	if (!evhttp_bind_listener(m->http, l)) {
		evconnlistener_free(l);
		metrics_free(m);
		return -ENOMEM;
	}
	m->listener = l;
	accept_owner = m;
	evconnlistener_set_error_cb(l, on_accept_error);
	evhttp_set_bevcb(m->http, on_new_bev, m);
	evhttp_set_gencb(m->http, on_request, m);
	evhttp_set_timeout(m->http, METRICS_IDLE_TIMEOUT_S);
	evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADERS);
	evhttp_set_max_body_size(m->http, METRICS_MAX_BODY);
	log_serving(&bound, m->token_len > 0);
	*out = m;
	return 0;
}

void
metrics_free(struct metrics *m)
{
	struct conn *c;

	if (!m)
		return;
	/* Closes every connection (on_close() frees those open, and their scrapes) and the
	 * listener. */
	if (m->http)
		evhttp_free(m->http);
	while (m->scrapes) {
		m->scrapes->c = NULL;
		scrape_free(m->scrapes);
	}
	while ((c = m->pending.head)) {
		conn_remove(&m->pending, c);
		bufferevent_decref(c->bev);
		free(c);
	}
	if (m->adopt_ev)
		event_free(m->adopt_ev);
	if (m->resume_ev)
		event_free(m->resume_ev);
	if (accept_owner == m)
		accept_owner = NULL;
	explicit_bzero(m->token, sizeof(m->token));
	free(m);
}
