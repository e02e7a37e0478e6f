/* metrics: the Prometheus endpoint of pmcdaemon (see metrics.h). The page is built on each
 * scrape from the registry as the loop last left it: a batch still queued in a client's
 * socket shows up on a later scrape, once the loop has read it. Unlike a Query, a scrape
 * does not first read what other connections have queued. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "util.h"

#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* An idle scrape connection is closed after this many seconds. */
#define METRICS_TIMEOUT_S 30
#define METRICS_MAX_HEADERS 16384
#define METRICS_MAX_BODY 4096

struct metrics {
	struct server *srv;
	struct evhttp *http;
};

static const double quantiles[] = {0.5, 0.9, 0.99};

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

/* Length of the well-formed UTF-8 sequence at @p (NUL-terminated), 0 if there is none. */
static size_t
utf8_len(const unsigned char *p)
{
	size_t n;
	uint32_t cp, least;

	if (p[0] < 0x80)
		return 1;
	if ((p[0] & 0xe0) == 0xc0) {
		n = 2;
		cp = p[0] & 0x1f;
		least = 0x80;
	} else if ((p[0] & 0xf0) == 0xe0) {
		n = 3;
		cp = p[0] & 0x0f;
		least = 0x800;
	} else if ((p[0] & 0xf8) == 0xf0) {
		n = 4;
		cp = p[0] & 0x07;
		least = 0x10000;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if (cp < least || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* A label value: backslash, double quote and newline escaped, as the format asks. Region
 * names and comm come from the clients: bytes that are not UTF-8 become U+FFFD, since
 * Prometheus refuses a page with invalid UTF-8 in a label. */
static void
page_label_value(struct page *pg, const char *s)
{
	const unsigned char *p = (const unsigned char *)s, *run = p;

	while (*p) {
		size_t n = utf8_len(p);
		const char *esc = NULL;
		size_t esc_len = 2;

		if (!n) {
			esc = "\xef\xbf\xbd";
			esc_len = 3;
			n = 1;
		} else if (*p == '\\') {
			esc = "\\\\";
		} else if (*p == '"') {
			esc = "\\\"";
		} else if (*p == '\n') {
			esc = "\\n";
		}
		if (esc) {
			page_add(pg, run, (size_t)(p - run));
			page_add(pg, esc, esc_len);
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
	           "--keep-exited, --keep-exited-per-user or --max-total-regions.",
	           srv->reg.evicted);
	daemon_u64(pg, "pmc_rejected_connections_total", "counter",
	           "Connections closed for a malformed or out-of-protocol request.", srv->rejected);
}

enum region_family {
	RF_COUNT,
	RF_WALL,
	RF_EVENT,
	RF_SCALED,
};

static const struct {
	const char *name, *type, *help;
	bool per_event;
} region_families[] = {
        [RF_COUNT] = {"pmc_region_count_total", "counter",
                      "Runs of the region: the samples received for it.", false},
        [RF_WALL] = {"pmc_region_wall_seconds", "summary",
                     "Wall-clock time of one run of the region, in seconds.", false},
        [RF_EVENT] = {"pmc_region_event", "summary",
                      "Count of the event over one run of the region (label event: its name).",
                      true},
        [RF_SCALED] = {"pmc_region_event_scaled_samples_total", "counter",
                       "Runs of the region whose count of the event was extrapolated from a "
                       "multiplexed counter.",
                       true},
};

/* "NAME{pid=..,comm=..,region=..[,event=..]": the caller closes the braces. */
static void
series_start(struct page *pg, const char *name, const char *suffix, const struct process *p,
             const struct region_agg *r, const char *event)
{
	page_printf(pg, "%s%s{pid=\"%d\",comm=\"", name, suffix, (int)p->pid);
	page_label_value(pg, p->comm);
	page_str(pg, "\",region=\"");
	page_label_value(pg, r->name);
	if (event) {
		page_str(pg, "\",event=\"");
		page_label_value(pg, event);
	}
	page_str(pg, "\"");
}

/* The values of @st are divided by @unit (1e9: nanoseconds to seconds). */
static void
summary(struct page *pg, const char *name, const struct process *p, const struct region_agg *r,
        const char *event, const struct stats *st, double unit)
{
	for (size_t i = 0; i < ARRAY_SIZE(quantiles); i++) {
		series_start(pg, name, "", p, r, event);
		page_printf(pg, ",quantile=\"%g\"} ", quantiles[i]);
		/* No run since the last reset: Prometheus's spelling of "no value". */
		page_double(pg, st->count ? stats_quantile(st, quantiles[i]) / unit : NAN);
		page_str(pg, "\n");
	}
	series_start(pg, name, "_sum", p, r, event);
	if (unit == 1) {
		page_printf(pg, "} %" PRIu64 "\n", st->sum);
	} else {
		page_str(pg, "} ");
		page_double(pg, (double)st->sum / unit);
		page_str(pg, "\n");
	}
	series_start(pg, name, "_count", p, r, event);
	page_printf(pg, "} %" PRIu64 "\n", st->count);
}

static void
render_region(struct page *pg, enum region_family f, const struct process *p,
              const struct region_agg *r, size_t ev)
{
	const char *name = region_families[f].name;

	switch (f) {
	case RF_COUNT:
		series_start(pg, name, "", p, r, NULL);
		page_printf(pg, "} %" PRIu64 "\n", r->count);
		break;
	case RF_WALL:
		summary(pg, name, p, r, NULL, &r->wall, 1e9);
		break;
	case RF_EVENT:
		summary(pg, name, p, r, p->events[ev], &r->ev[ev].st, 1);
		break;
	case RF_SCALED:
		series_start(pg, name, "", p, r, p->events[ev]);
		page_printf(pg, "} %" PRIu64 "\n", r->ev[ev].scaled);
		break;
	}
}

/* By pid, the most recently started first. */
static int
process_cmp(const void *a, const void *b)
{
	const struct process *x = *(const struct process *const *)a;
	const struct process *y = *(const struct process *const *)b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->start != y->start)
		return x->start > y->start ? -1 : 1;
	return 0;
}

static int
render(struct page *pg, const struct server *srv)
{
	_cleanup_free_ struct process **procs = malloc((srv->reg.n_procs + 1) * sizeof(*procs));
	size_t n = 0;

	if (!procs)
		return -ENOMEM;
	for (struct process *p = srv->reg.procs; p; p = p->next)
		procs[n++] = p;
	qsort(procs, n, sizeof(*procs), process_cmp);
	/* A recycled pid would give two series the same labels, which Prometheus refuses:
	 * only the newest process of a pid is shown (pmcctl query shows them all). */
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!k || procs[k - 1]->pid != procs[i]->pid)
			procs[k++] = procs[i];
	n = k;

	render_daemon(pg, srv);
	for (size_t f = 0; f < ARRAY_SIZE(region_families); f++) {
		family_head(pg, region_families[f].name, region_families[f].type,
		            region_families[f].help);
		for (size_t i = 0; i < n; i++) {
			const struct process *p = procs[i];

			for (size_t j = 0; j < p->n_regions; j++) {
				const struct region_agg *r = p->regions[j];

				if (!region_families[f].per_event) {
					render_region(pg, f, p, r, 0);
					continue;
				}
				for (size_t e = 0; e < r->n_ev && e < p->n_events; e++)
					if (r->seen[e])
						render_region(pg, f, p, r, e);
			}
		}
	}
	return pg->err;
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
on_request(struct evhttp_request *req, void *arg)
{
	struct metrics *m = arg;
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);

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

	struct evbuffer *body = evhttp_request_get_output_buffer(req);
	struct page pg = {.b = body};
	int r = render(&pg, m->srv);
	if (r < 0) {
		log_errno(r, "cannot build the metrics page");
		evbuffer_drain(body, evbuffer_get_length(body));
		reply_text(req, HTTP_INTERNAL, "Internal Server Error", "out of memory\n");
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
	                  METRICS_CONTENT_TYPE);
	evhttp_send_reply(req, HTTP_OK, "OK", NULL);
}

static void
log_serving(const struct sockaddr_storage *ss)
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

	struct metrics *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->srv = srv;
	m->http = evhttp_new(srv->base);
	/* Backlog 0: the socket already listens. The listener closes it when freed. */
	struct evconnlistener *l =
	        m->http ? evconnlistener_new(srv->base, NULL, NULL,
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
	evhttp_set_gencb(m->http, on_request, m);
	evhttp_set_timeout(m->http, METRICS_TIMEOUT_S);
	evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADERS);
	evhttp_set_max_body_size(m->http, METRICS_MAX_BODY);
	log_serving(&bound);
	*out = m;
	return 0;
}

void
metrics_free(struct metrics *m)
{
	if (!m)
		return;
	if (m->http)
		evhttp_free(m->http);
	free(m);
}
