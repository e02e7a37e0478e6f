/* Unit daemon/metrics (target pmcd_metrics): metrics.c (the HTTP endpoint), metrics-scrape.c
 * (the figures gathered per scrape, in arenas: arena.[ch]), metrics-page.c (the text
 * format); metrics-internal.h between them. Depends on session/ (the server) and model/.
 *
 * metrics: pmcdaemon's optional HTTP endpoint for Prometheus. GET /metrics answers in the
 * text exposition format (version 0.0.4) with the figures of each (program, uid, region),
 * summed over that program's processes of that uid, as counters and histograms whose bucket bounds
 * are the same on every daemon, and the daemon's own figures; every other path is 404. With a
 * bearer token
 * (--metrics-token-file) every request without it is 401. It runs on the daemon's libevent
 * loop (evhttp) and reads the data model the sessions write (struct model, model/model.h); a
 * scrape is built and written in short steps (chunked encoding), so that the loop serves its
 * clients meanwhile. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct server;
struct metrics;

/* Longest bearer token --metrics-token-file may hold, in bytes. */
#define METRICS_TOKEN_MAX 4096
/* HTTP connections kept open at once; beyond, of those that sent no request that passed the
 * token check, the one unused the longest is closed (never one that did). */
#define METRICS_MAX_CONNECTIONS 64
/* A connection that sent no request that passed the token check (any request without a
 * token) this long after it was accepted is closed, however slowly it sends. */
#define METRICS_HEADER_TIMEOUT_S 3
/* A connection whose request passed, then sends nothing, is closed after this. */
#define METRICS_IDLE_TIMEOUT_S 10
/* Series of the regions on one page unless --metrics-max-series says otherwise. */
#define METRICS_DEFAULT_MAX_SERIES 10000
/* Scrapes served at once; one more is answered 503 (Prometheus retries at its next scrape). */
#define METRICS_MAX_SCRAPES 4

/** Where to serve metrics, who may read them and how much the page holds, as parsed from
 * --metrics, --metrics-token-file and --metrics-max-series. */
struct metrics_addr {
	struct sockaddr_storage ss;
	socklen_t len;
	size_t token_len; /* 0: no token, the page is open to whoever reaches the address */
	char token[METRICS_TOKEN_MAX + 1];
	/* Series of the regions on a page: each uid with regions is guaranteed
	 * max_series / (uids with regions) for its regions with the most runs, and the rest
	 * goes to the regions with the most runs, whoever's; the others are left off and
	 * counted in pmc_metrics_series_dropped. 0: the default, METRICS_DEFAULT_MAX_SERIES.
	 * metrics_parse_addr() sets it to 0. */
	size_t max_series;
	/* --metrics-labels container: each (program, region) is split by the container its
	 * processes run in, a `container` label (cgroup_container_name() of their cgroup);
	 * the retired figures are kept per (uid, program, cgroup) then. metrics_parse_addr()
	 * sets it to false. */
	bool label_container;
};

/**
 * metrics_parse_labels() - parse the argument of --metrics-labels into @addr
 * @list: comma-separated optional labels: "container" (the only one so far)
 * Return: 0, or -EINVAL for an empty list or a label it does not know.
 */
int metrics_parse_labels(const char *list, struct metrics_addr *addr);

/**
 * metrics_parse_addr() - parse the argument of --metrics
 * @spec: "ADDR:PORT": "127.0.0.1:9464", "[::1]:9464" or "localhost:9464"; port 0 lets the
 *        kernel pick a free port (the daemon logs the one it got)
 * @any: whether an address other than loopback is allowed (--metrics-any)
 * @out: set on success
 * Return: 0, -EINVAL when @spec is not ADDR:PORT, -ENOENT when ADDR does not resolve,
 * -EPERM when ADDR is not a loopback address and @any is false.
 */
int metrics_parse_addr(const char *spec, bool any, struct metrics_addr *out);

/**
 * metrics_read_token() - read the bearer token of --metrics-token-file into @addr
 * @path: a regular file owned by root or by the daemon's effective uid, which neither its
 *        group nor others may read or write (chmod 600); one trailing newline is dropped
 * @addr: from metrics_parse_addr(); its token is set on success
 * Logs why it refuses, naming @path, its mode or owner and the fix.
 * Return: 0, or -errno: -EACCES (mode or owner), -EINVAL (not a regular file, empty, a
 * control character inside), -E2BIG (over METRICS_TOKEN_MAX bytes), or open()'s error.
 */
int metrics_read_token(const char *path, struct metrics_addr *addr);

/**
 * metrics_new() - listen on @addr and serve /metrics from @srv's loop
 * @srv: the server whose loop serves the page and whose figures (its model's, and those of
 *       its connections) are shown, borrowed; it must outlive the result
 * @addr: from metrics_parse_addr(), and metrics_read_token() to require a bearer token
 * Logs the address it serves on, and a warning when the page has no token. At most
 * METRICS_MAX_CONNECTIONS connections stay open, a new one closing one that has sent no
 * authorized request (never one that has); a connection with no authorized request
 * METRICS_HEADER_TIMEOUT_S after it was accepted is closed, one idle for
 * METRICS_IDLE_TIMEOUT_S too; a refused request (401) closes its connection; when accept()
 * fails (EMFILE...) the listener pauses. At most METRICS_MAX_SCRAPES pages are served at
 * once, and one is built at a time: its steps take a few milliseconds each, and what it
 * keeps between them is bounded by @addr->max_series (twice that in its heaps while it
 * reads the registry, besides the regions of one program).
 * Return: 0 with *@out set, or -errno (-EADDRINUSE, -EADDRNOTAVAIL, -ENOMEM...).
 */
int metrics_new(struct server *srv, const struct metrics_addr *addr, struct metrics **out);

/** metrics_free() - stop serving and close every HTTP connection; NULL is fine. */
void metrics_free(struct metrics *m);
