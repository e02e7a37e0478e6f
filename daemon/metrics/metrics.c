/* metrics: the Prometheus endpoint of pmcdaemon (see metrics.h). The page is built on each
 * scrape from the registry as the loop last left it: a batch still queued in a client's
 * socket shows up on a later scrape, once the loop has read it. Unlike a Query, a scrape
 * does not first read what other connections have queued. It is built and written in steps
 * of a few milliseconds (see metrics-scrape.c), so a batch read meanwhile may show in
 * some of its series and not yet in others.
 *
 * Whoever reaches the address can open connections: they are counted and bounded here
 * (libevent 2.1's evhttp has no limit of its own), an idle one times out, and a failing
 * accept() pauses the listener instead of spinning. */
#include "metrics/metrics-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "kernel/file-trust.h"
#include "kernel/log.h"
#include "session/server.h"

#define METRICS_MAX_HEADERS 16384
#define METRICS_MAX_BODY 4096
/* After an accept() failure that closing a connection of ours cannot cure. */
#define METRICS_ACCEPT_PAUSE_MS 100
/* A condition a peer can cause is logged at most once in this many seconds. */
#define METRICS_LOG_INTERVAL_S 10

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
	/* Root's or the daemon's, and no one else may read or change it. */
	static const struct file_trust_rule rule = {
	        .kind = S_IFREG, .root_ok = true, .deny = S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH};
	switch (file_trust_check(&st, geteuid(), &rule)) {
	case FILE_TRUST_OK:
		break;
	case FILE_TRUST_KIND:
		log_err("--metrics-token-file %s: not a regular file; give a file that holds the "
		        "token",
		        path);
		return -EINVAL;
	case FILE_TRUST_OWNER:
		log_err("--metrics-token-file %s: owned by uid %u, who may change the token; the "
		        "file must be root's or pmcdaemon's own: chown root %s",
		        path, (unsigned)st.st_uid, path);
		return -EACCES;
	case FILE_TRUST_MODE:
		log_err("--metrics-token-file %s: mode %04o lets %s read or change the token: "
		        "chmod 600 %s",
		        path, (unsigned)(st.st_mode & 07777), file_trust_who(st.st_mode, rule.deny),
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
	pmc_list_append(&l->conns, &c->link);
	l->n++;
}

static void
conn_remove(struct conn_list *l, struct conn *c)
{
	pmc_list_remove(&l->conns, &c->link);
	l->n--;
}

bool
metrics_gate_pass(struct log_gate *g, unsigned long n, unsigned long *more)
{
	return log_gate_pass(g, util_now_ns(CLOCK_MONOTONIC),
	                     METRICS_LOG_INTERVAL_S * 1000000000ull, 1, n, more, NULL);
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

	if (c->scrape)
		metrics_scrape_abort(c->scrape);
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
	struct conn *c;
	pmc_list_for_each(c, &m->open.conns, link)
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
	if (metrics_gate_pass(&m->gate_header, 1, &more))
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

	while ((c = pmc_list_first(&m->pending.conns, struct conn, link))) {
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
	if (evicted && metrics_gate_pass(&m->gate_evict, evicted, &more))
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
	if (!metrics_gate_pass(&m->gate_accept, 1, &more))
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

/* ---- HTTP ---- */

void
metrics_reply_text(struct evhttp_request *req, int code, const char *reason, const char *text)
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

	if (metrics_gate_pass(&m->gate_auth, 1, &more)) {
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
	metrics_reply_text(
	        req, 401, "Unauthorized",
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
	pmc_list_for_each_reverse(c, &m->open.conns, link)
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
		metrics_reply_text(req, HTTP_NOTFOUND, "Not Found",
		                   "not found: pmcdaemon serves /metrics only\n");
		return;
	}
	if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", "GET, HEAD");
		metrics_reply_text(req, 405, "Method Not Allowed",
		                   "/metrics answers GET and HEAD\n");
		return;
	}
	if (cmd == EVHTTP_REQ_HEAD) {
		/* Headers only: nothing to build. */
		evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
		                  METRICS_CONTENT_TYPE);
		evhttp_send_reply(req, HTTP_OK, "OK", NULL);
		return;
	}
	metrics_scrape_start(m, c, req);
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
	m->model = &srv->model;
	m->max_series = addr->max_series ? addr->max_series : METRICS_DEFAULT_MAX_SERIES;
	m->label_container = addr->label_container;
	/* A container's series go on counting what its forgotten processes counted. */
	m->model->reg.retired_by_cgroup = addr->label_container;
	/* What forgotten processes counted stays on the page; as many regions as it can show
	 * (4 series each at least). */
	int r = registry_retire_enable(&m->model->reg, m->max_series / 4 ? m->max_series / 4 : 1);
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
	struct scrape *s;
	while ((s = pmc_list_first(&m->scrapes, struct scrape, link))) {
		s->c = NULL;
		metrics_scrape_free(s);
	}
	while ((c = pmc_list_first(&m->pending.conns, struct conn, link))) {
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
