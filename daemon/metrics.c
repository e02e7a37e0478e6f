/* metrics: the Prometheus endpoint of pmcdaemon (see metrics.h). The page is built on each
 * scrape from the registry as the loop last left it: a batch still queued in a client's
 * socket shows up on a later scrape, once the loop has read it. Unlike a Query, a scrape
 * does not first read what other connections have queued.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

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
	struct log_gate gate_evict, gate_accept, gate_auth;
	size_t token_len; /* 0: no token */
	char token[METRICS_TOKEN_MAX + 1];
};

/* libevent 2.1 hands the listener's error callback evhttp's pointer, not ours: the daemon
 * serves one metrics page, and this is it. */
static struct metrics *accept_owner;

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
 * the same set (escape_text() in client/pmcctl.c). */
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

/* evhttp frees a connection through here, however it ends (evhttp_connection_free()). */
static void
on_close(struct evhttp_connection *evcon, void *arg)
{
	struct conn *c = arg;

	evhttp_connection_set_closecb(evcon, NULL, NULL);
	conn_remove(&c->m->open, c);
	free(c);
}

/* Closes the connection unused the longest. */
static void
evict_lru(struct metrics *m)
{
	evhttp_connection_free(m->open.head->evcon); /* on_close() frees the conn */
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
			c->evcon = evcon;
			evhttp_connection_set_closecb(c->evcon, on_close, c);
			conn_append(&m->open, c);
		} else {
			free(c);
		}
		bufferevent_decref(bev);
	}
	for (; m->open.n > METRICS_MAX_CONNECTIONS; evicted++)
		evict_lru(m);
	if (evicted && gate_pass(&m->gate_evict, evicted, &more))
		log_warn("metrics: over %d connections: closed %lu unused the longest (%lu more "
		         "since the last such line)",
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
	evict = (e == EMFILE || e == ENFILE) && m->open.head;
	if (evict) {
		evict_lru(m);
	} else {
		static const struct timeval pause = {0, METRICS_ACCEPT_PAUSE_MS * 1000};

		m->paused_error = true;
		listener_update(m);
		event_add(m->resume_ev, &pause);
	}
	if (!gate_pass(&m->gate_accept, 1, &more))
		return;
	if (evict)
		log_warn("metrics: cannot accept a connection: %s; closed the one unused the "
		         "longest to make room (%lu more since the last such line)",
		         strerror(e), more);
	else
		log_warn("metrics: cannot accept a connection: %s; not accepting for %d ms (%lu "
		         "more since the last such line)",
		         strerror(e), METRICS_ACCEPT_PAUSE_MS, more);
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

	/* Used now: the last to be closed to make room. */
	for (struct conn *c = m->open.tail; c; c = c->prev)
		if (c->evcon == evcon) {
			conn_remove(&m->open, c);
			conn_append(&m->open, c);
			break;
		}
	if (m->token_len && !authorized(m, auth)) {
		refuse_unauthorized(m, req);
		return;
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
	/* Closes every connection (on_close() frees those open) and the listener. */
	if (m->http)
		evhttp_free(m->http);
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
