/* Unit daemon/session (target pmcd_session): the server (server.[ch]: the loop, the
 * listening socket, the daemon's figures), the loop's turns per uid (loop-sched.[ch]), and
 * one session per connection (session.[ch], dispatch table in session.c; session-register.c,
 * session-batch.c, session-query.c, session-command.c; session-internal.h between them).
 * Depends on model/, kernel/ and proto/.
 *
 * server: pmcdaemon's libevent loop, its listening socket, its signals and the
 * figures it reports in Status. */
#pragma once

#include <stdint.h>

#include "common/list.h"
#include "kernel/policy.h"
#include "model/model.h"
#include "session/loop-sched.h"

struct event_base;
struct event;
struct session;

/* fds kept free for connections, the state file and the metrics page. */
#define SERVER_FD_RESERVE 64

/* Largest request datagram the daemon accepts. */
#define SERVER_MAX_REQUEST (1u << 20)

struct server {
	struct event_base *base;
	int listen_fd;
	struct event *listen_ev;
	struct event *sig_ev[2];
	struct pmc_list sessions; /* struct session, by link */
	unsigned n_sessions;
	unsigned n_threads;
	size_t n_fds;              /* counter fds held for registered threads */
	size_t fd_limit;           /* RLIMIT_NOFILE at start */
	size_t fds_unread;         /* fds sent in replies not yet read (session-inflight.c) */
	struct pmc_list lingering; /* connections closed with fds unread, still held */
	unsigned n_lingering;
	struct event *accept_retry; /* re-arms accepting after EMFILE */
	struct model model;         /* the data model: processes, users, budgets, totals */
	uint64_t started_ns;
	struct policy policy;
	uint64_t refused_clients; /* connections refused over --max-clients (the first logged) */
	const char *state_path;   /* --state, or NULL */
	struct event *state_ev;   /* the save timer */
	int draining;
	struct sched sched;    /* connections with work, served a slice at a time */
	struct event *work_ev; /* serves them: a zero timer, so that the loop polls between */
	uint8_t *rxbuf;        /* one request at a time: the loop is single-threaded */
	uint64_t slices, slices_over, slice_max_ns; /* with --verbose: slices run, those over
	                                             * twice SESSION_SLICE_NS of CPU, the longest */
	uint64_t deadline_ns; /* the end of the slice being run (CLOCK_MONOTONIC): a handler
	                       * whose work goes on past it continues in a later slice */
};

/**
 * server_new() - set up the loop around listening socket @listen_fd
 * @listen_fd: bound, listening SOCK_SEQPACKET socket; taken (closed on failure too)
 * @policy: copied; its allocations now belong to the server
 * Return: 0 with *@out set, or -errno.
 */
int server_new(int listen_fd, const struct policy *policy, struct server **out);

/**
 * server_use_state() - restore the aggregates from @path (if it exists) and save them
 * there every @interval_s seconds and at SIGTERM/SIGINT
 * @path: borrowed for the server's life
 * Return: 0, or -errno (-EBADMSG: the file is not a pmcdaemon state file).
 */
int server_use_state(struct server *srv, const char *path, unsigned interval_s);

/** server_kick() - have the loop serve the connections queued in @srv->sched soon (after
 * it has polled for other work) */
void server_kick(struct server *srv);

/** server_run() - serve until SIGINT or SIGTERM; 0 or -errno. */
int server_run(struct server *srv);

/** server_free() - close every connection and free @srv; NULL is fine. */
void server_free(struct server *srv);
