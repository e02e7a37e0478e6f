/* session-internal: what the rooms of one client connection share; not for the rest of the
 * daemon. session.c: the connection, its replies and the dispatch of its requests;
 * session-register.c: its threads and their counters; session-batch.c: its sample batches;
 * session-query.c: queries, status, reset and the event list. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <linux/perf_event.h>

#include "kernel/perf.h"
#include "model/registry.h"
#include "pmc.pb-c.h"
#include "session/session.h"

/* Datagrams handled per wake-up before yielding to the other connections. */
#define SESSION_BURST 64
/* Bytes of requests a slice reads before it looks at its time (64 batches of 512 samples
 * of 4 events are 310 KB; one of 1 MiB ends the slice past its time). */
#define SESSION_SLICE_BYTES (256 * 1024)
/* How long a Query or Reset reads what other connections queued first; a Status reads less:
 * its answer is due in about a millisecond whatever the load. */
#define DRAIN_BUDGET_NS (2 * 1000 * 1000)
#define DRAIN_STATUS_NS (300 * 1000)
/* Datagrams read from a connection whose process has exited before a request (Query,
 * Status, Reset) is answered, in all: its socket's whole queue of batches (1 MiB of them at
 * most), read a budget at a time, the request waiting meanwhile (SESSION_STEP_HELD). */
#define SESSION_DRAIN_GONE 4096

struct query_stream;

/* session-register.c */

/* Events a request names, checked: canonical names, resolved. */
struct session_events {
	size_t n;
	char canon[PMC_LIMIT_EVENTS][PERF_NAME_MAX];
	char *cn[PMC_LIMIT_EVENTS]; /* cn[i] points at canon[i] */
	struct perf_event_attr attrs[PMC_LIMIT_EVENTS];
};

/**
 * session_register_events_check() - check the @n events @names (0: the daemon's default set) that
 * @s's client asks for: known, each named once, allowed by the policy (--allow-events,
 * kernel mode of hardware events); fill @ev with their canonical names and attributes
 * Return: true, or false once the refusal is sent to the client (with a did-you-mean for an
 * unknown name); *@refused is then what the handler returns.
 */
bool session_register_events_check(struct session *s, char *const *names, size_t n,
                                   struct session_events *ev, int *refused);

/* session-inflight.c */

/** session_inflight_sent() - count @n fds just sent to @s's client as unread */
void session_inflight_sent(struct session *s, size_t n);

/**
 * session_inflight_check() - whether @s may be sent a reply with @n fds: its last reply
 * with fds was read, and its uid's unread fds stay within share.h's rule
 * (--max-fds-per-user of the daemon's fd limit)
 * Return: true, or false once the refusal (EBUSY: its own last one unread; EMFILE: its
 * uid's share) is sent; *@refused is then what the handler returns.
 */
bool session_inflight_check(struct session *s, size_t n, int *refused);

/**
 * session_inflight_close() - close @s's socket (session_free()); while fds it was sent are
 * unread, shut it both ways and keep it, charged to its uid as a connection, until they
 * are read or its client closes its end
 */
void session_inflight_close(struct session *s);

/* session.c */

/** session_count_dropped() - count @n samples of @s not counted, for reason @why: in the
 * daemon's figure, its uid's and its process's */
void session_count_dropped(struct session *s, uint64_t n, enum pmc_loss why);

/* Samples one connection may say it dropped or lost, in all: what a client claims is not
 * checked, so it is bounded (and every total it adds to saturates). 2^40 is 18 minutes of
 * a billion samples a second. */
#define SESSION_MAX_CLAIMED (UINT64_C(1) << 40)

/**
 * session_claim() - what of @n samples that @s's client claims it dropped or lost is
 * counted: @n, or what is left of SESSION_MAX_CLAIMED for the connection (logged, rate
 * limited, when that cuts it)
 * Return: the samples to count (<= @n).
 */
uint64_t session_claim(struct session *s, uint64_t n);

/**
 * session_reply() - send @resp, with @n_fds fds (borrowed), to @s's client
 * Return: 0, or -errno; -ENOBUFS when the client leaves its replies unread (the caller
 * closes the connection then).
 */
int session_reply(struct session *s, Pmc__Response *resp, const int *fds, size_t n_fds);

/**
 * session_send_packed() - send @len bytes of @buf (borrowed), one Response packed already, to
 * @s's client, as session_reply() does
 * Return: as session_reply().
 */
int session_send_packed(struct session *s, const uint8_t *buf, size_t len);

/**
 * session_reply_error() - refuse @s's request with errno @err, saying why (printf @fmt)
 * Return: session_reply()'s, or, for a request that gets no reply, the negative errno
 * for which the connection is closed.
 */
int session_reply_error(struct session *s, int err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/** session_sndbuf_fit() - grow @s's send buffer so that a datagram of @len bytes fits (up
 * to 2 * WIRE_MAX_DATAGRAM; best effort: a send that still does not fit fails) */
void session_sndbuf_fit(struct session *s, size_t len);

/** session_peer_alive() - whether the process that connected @s still runs (its pidfd) */
bool session_peer_alive(struct session *s);

/**
 * session_drain_others() - handle what other connections have queued already, for up to
 * @budget_ns (@self NULL: every connection, no time bound), so that a reply counts a
 * client's last batch before it exited: exited clients' queues first, to their end
 * Return: true when no exited client's queue is left to read, false when time ran out
 * first (the request that asked waits: session_dispatch_one() calls again at its turns).
 */
bool session_drain_others(struct server *srv, struct session *self, uint64_t budget_ns);

/** session_dispatch_one() - handle one datagram of @s
 * Return: 0 to go on reading, -EAGAIN when drained, other < 0 to drop the peer. */
int session_dispatch_one(struct session *s);

/** session_close() - close @s, counting why (@r, a negative errno) where it says so */
void session_close(struct session *s, int r);

/* session-register.c: the handlers of RegisterThread, ThreadExit and ThreadFloor */

int session_register_handle(struct session *s, const Pmc__Request *req);
int session_register_thread_exit(struct session *s, const Pmc__Request *req);
int session_register_thread_floor(struct session *s, const Pmc__Request *req);

/**
 * session_register_process() - the aggregates of @s's process, attached to @s on first use (its
 * connections count it): the live peer's by its pid and start time read now; once it has
 * exited, those its connection read as it connected (struct session's peer_start), so that
 * what it queued before its end still counts
 * Return: s->proc, or NULL when the peer is gone and was never identified (no pidfd, or it
 * was gone as it connected), or on -ENOMEM.
 */
struct process *session_register_process(struct session *s);

/** session_tag_process() - give @s's process the run tag of its Hello, when it has none */
void session_tag_process(struct session *s);

/** session_register_find_thread() - @s's registered thread @tid, or NULL */
struct session_thread *session_register_find_thread(struct session *s, pid_t tid);

/** session_register_thread_close() - close the daemon's copies of @t's fds and forget its share */
void session_register_thread_close(struct session *s, struct session_thread *t);

/** session_register_thread_refused() - whether @s's thread @tid was refused its reattach (its
 * batches are dropped, counted) */
bool session_register_thread_refused(const struct session *s, pid_t tid);

/* session-batch.c: the handler of SampleBatch */

int session_batch_handle(struct session *s, const Pmc__Request *req);
int session_batch_define(struct session *s, const Pmc__Request *req);

/**
 * session_batch_flush() - ingest_flush(): the tallies a connection's batches left unfolded
 * (ingest.h) folded in, and its uid warned, once, where that fold's histogram block found no
 * room (as a batch's own count does). Called at each slice's end, before any request but a
 * plain batch counted in place, and before a connection closes; nothing to do when nothing is
 * left.
 */
void session_batch_flush(void);

/**
 * session_batch_define_step() - go on with @s's Define (s->def) until srv->deadline_ns
 * Return: SESSION_STEP_DONE (s->def freed), SESSION_STEP_MORE, or < 0 to close @s.
 */
int session_batch_define_step(struct session *s);

/** session_batch_define_abort() - drop @s's unfinished Define (the connection closes) */
void session_batch_define_abort(struct session *s);

/** session_batch_max_path() - the highest call path id @s keeps in its table (HelloReply tells
 * the library) */
uint32_t session_batch_max_path(const struct session *s);

/** session_batch_tables_free() - free @s's tables of region and call path ids, their bytes given
 * back to its uid's share (--max-define-memory-per-user) */
void session_batch_tables_free(struct session *s);

/* session-query.c: the handlers of Query, Reset, Status and ListEvents */

int session_query_handle(struct session *s, const Pmc__Request *req);
int session_query_reset(struct session *s, const Pmc__Request *req);
int session_query_status(struct session *s, const Pmc__Request *req);
int session_query_list_events(struct session *s, const Pmc__Request *req);

/* session_query_step()'s outcomes besides < 0 (close the connection). */
#define SESSION_STEP_DONE 0 /* the reply is sent: the connection is read again */
#define SESSION_STEP_MORE 1 /* the slice's time is up: queue it again */
#define SESSION_STEP_WAIT 2 /* its socket is full: its write event queues it again */
#define SESSION_STEP_HELD 3 /* its request waits for exited clients' queues: queue it again */
/* A handler's: the slice ended before a SampleBatch's names were all defined (the request
 * is kept, s->batch_req, and goes on at the connection's next slice: session_batch_step()) */
#define SESSION_BATCH_MORE 4

/**
 * session_batch_step() - go on with @s's SampleBatch whose names took more than a slice
 * (@s->batch_req) until the slice's end (srv->deadline_ns); then count its samples
 * Return: SESSION_STEP_DONE (s->batch_req freed), SESSION_STEP_MORE, or < 0 to close @s.
 */
int session_batch_step(struct session *s);

/**
 * session_query_step() - build and send @s's Query reply (@s->qs) until @deadline_ns
 * (CLOCK_MONOTONIC): parts of a streamed reply as the socket takes them, or the next parts
 * of a whole reply, refused (EMSGSIZE, said to the client) once it would exceed one datagram
 * Return: SESSION_STEP_*, or < 0 to close the connection.
 */
int session_query_step(struct session *s, uint64_t deadline_ns);

/** session_query_end() - forget @s's Query reply (sent, refused, or its connection closing);
 * the next whole reply of its uid that waits for it may start */
void session_query_end(struct session *s);

/** session_query_free() - forget @qs, a streamed reply not sent whole (NULL: nothing) */
void session_query_free(struct query_stream *qs);

/* session-command.c: the handler of OpenCommand (pmcctl run's whole-program counters) */

int session_command_open(struct session *s, const Pmc__Request *req);
