/* metrics: pmcdaemon's optional HTTP endpoint for Prometheus. GET /metrics answers in the
 * text exposition format (version 0.0.4) with the per-process, per-region aggregates and the
 * daemon's own figures; every other path is 404. It runs on the daemon's libevent loop
 * (evhttp) and reads the same struct server the session code reads. */
#pragma once

#include <stdbool.h>
#include <sys/socket.h>

struct server;
struct metrics;

/** An address to serve metrics on, as parsed from --metrics. */
struct metrics_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

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
 * metrics_new() - listen on @addr and serve /metrics from @srv's loop
 * @srv: the server whose figures are shown, borrowed; it must outlive the result
 * @addr: from metrics_parse_addr()
 * Logs the address it serves on.
 * Return: 0 with *@out set, or -errno (-EADDRINUSE, -EADDRNOTAVAIL, -ENOMEM...).
 */
int metrics_new(struct server *srv, const struct metrics_addr *addr, struct metrics **out);

/** metrics_free() - stop serving and close every HTTP connection; NULL is fine. */
void metrics_free(struct metrics *m);
