/* metrics-internal: what the rooms of the metrics page share; not for the rest of the
 * daemon. metrics.c: HTTP, the connections, the bearer token and the address;
 * metrics-scrape.c: the stepped scrape (SNAPSHOT, MAP, SCAN, SORT, GATHER) and its life;
 * metrics-page.c: the exposition-format writer (WRITE) and the daemon's own figures. */
#pragma once

#include <event2/http.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/list.h"
#include "common/util.h"
#include "kernel/log.h"
#include "metrics/arena.h"
#include "metrics/metrics.h"
#include "model/model.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* An accepted HTTP connection. evhttp tells neither when it accepts one nor which
 * connection a bufferevent it asked for belongs to, so the connection is learnt in two
 * steps: on_new_bev() hands evhttp the bufferevent (pending), then on_adopt() reads the
 * connection back from its callback argument (open). */
struct conn {
	struct pmc_list_node link; /* in its struct conn_list */
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
	struct pmc_list conns; /* struct conn; open: the one unused the longest first */
	unsigned n;
};

struct metrics {
	struct server *srv;  /* its loop, and the figures of its connections */
	struct model *model; /* the figures the page shows (&srv->model) */
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
	struct pmc_list scrapes; /* struct scrape: every page being answered, in order of arrival */
	struct scrape *building; /* the one past QUEUED and before WRITE, or NULL */
	unsigned n_scrapes;
	bool warned_dropped; /* logged once that series were left off */
};

struct page {
	struct evbuffer *b;
	int err;
};

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

struct entry;

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
	struct pmc_list_node link; /* in m->scrapes */
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

static inline bool
metrics_past_deadline(const struct scrape *s)
{
	return util_now_ns(CLOCK_MONOTONIC) >= s->deadline;
}

/* metrics.c */

/** metrics_gate_pass() - the condition of @g happened @n times: true when it is to be logged now
 * (one line every METRICS_LOG_INTERVAL_S seconds at most: log_gate_pass() with a burst of 1), with
 * *@more the times it was not logged since the last line */
bool metrics_gate_pass(struct log_gate *g, unsigned long n, unsigned long *more);

/** metrics_reply_text() - answer @req with @code, @reason and a plain-text body @text */
void metrics_reply_text(struct evhttp_request *req, int code, const char *reason, const char *text);

/* metrics-scrape.c */

/** metrics_scrape_start() - answer GET /metrics on connection @c (NULL: one evhttp made itself):
 * queued, then built and written step by step; 503 past METRICS_MAX_SCRAPES, 500 without
 * memory */
void metrics_scrape_start(struct metrics *m, struct conn *c, struct evhttp_request *req);

/** metrics_scrape_abort() - the connection of @s went away (on_close()): forget @s, and free its
 * request when evhttp left it to us */
void metrics_scrape_abort(struct scrape *s);

/** metrics_scrape_free() - forget @s, whose request is evhttp's or answered already; starts the
 * next queued scrape when @s was being built */
void metrics_scrape_free(struct scrape *s);

/**
 * metrics_scrape_page() - the whole page of @m at once, SNAPSHOT to WRITE one step after another
 * without the loop, as a scrape builds it: for tests, which feed it a registry of their own
 * @m: its srv, model, max_series and label_container set; no scrape being built
 * @out: the page is appended to it
 * Return: 0, or -ENOMEM (@out may hold part of the page), -EBUSY (a scrape is being built).
 */
int metrics_scrape_page(struct metrics *m, struct evbuffer *out);

/* metrics-page.c */

/** metrics_page_render_daemon() - the daemon's own figures (pmc_build_info, pmc_uptime_seconds,
 * pmc_clients...) onto @pg: those of @srv's loop and connections, and @model's totals */
void metrics_page_render_daemon(struct page *pg, const struct server *srv,
                                const struct model *model);

/**
 * metrics_page_write_some() - write the page of @s on from (fam, idx, sub) until the chunk is full
 * or the step's time is up Return: 1 when the page is complete, 0 when there is more, or -ENOMEM.
 */
int metrics_page_write_some(struct scrape *s, struct page *pg);
