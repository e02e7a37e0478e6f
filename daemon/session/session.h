/* session: one client connection of pmcdaemon: its peer credentials, the threads
 * it registered (with the daemon's copies of their fds) and its region ids. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/list.h"
#include "kernel/creds.h"
#include "session/loop-sched.h"
#include "wire/ring.h"

struct batch_cols;

struct server;

struct session_thread {
	pid_t tid;        /* as the client names it: its id in the client's pid namespace */
	pid_t host_tid;   /* the same thread in the daemon's pid namespace */
	size_t n;         /* events */
	size_t n_fds;     /* 0 for a thread reattached after a restart: it keeps its own */
	int *fds;         /* daemon's copies */
	uint32_t *ev_id;  /* process event ids, one per event */
	uint64_t pending; /* samples the thread still held after its last batch */
	/* Its word in the session's heads table (1-based; 0: none), and the index of the next
	 * sample this connection is to get from it (RegisterThread.next_sample, then each
	 * batch's end). */
	uint32_t head_slot;
	uint64_t next_sample;
};

/* A client call path id: the node it counts in (1 + its index in the process's paths; 0:
 * none kept, for reason `why`, an enum untracked_reason, or UNTRACKED_N when the region was
 * refused), the client id of its region, and its depth (0: the id is not defined). */
struct session_path {
	uint32_t node;
	uint16_t name_id;
	uint8_t depth;
	uint8_t why;
};

struct session {
	struct server *srv;
	struct pmc_list_node link; /* in srv->sessions */
	int fd;
	struct event *ev;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int hello;
	int pidfd; /* the peer process, where SO_PEERPIDFD exists; else -1 */
	/* The peer's start time and comm, read as it connected (0: unknown, or no pidfd):
	 * its process's identity once it has exited (session_register_process()). */
	uint64_t peer_start;
	char peer_comm[17];
	int admin;               /* root or --admin-group: sees all, may reset */
	struct creds_peer creds; /* what the kernel would let the peer count */
	struct user_share *user; /* what its uid holds (server's users) */
	struct sched_uid *turns; /* its uid's part of the loop (server's sched) */
	struct event *hello_ev;  /* closes a connection that says no Hello in time */
	size_t sndbuf;           /* send buffer asked for (0: the default) */
	uint64_t rate_window;    /* second (CLOCK_MONOTONIC) of the batch count below */
	unsigned rate_batches;
	int warned_rate;
	int no_reply;       /* handling a request that gets no reply (reattach) */
	bool reattach_gone; /* handling a reattach of a process that has exited */
	bool peer_gone;     /* a reply found its client's end closed: what it sent before is
	                     * still read (its batches count), no more replies are sent */
	uint64_t claimed;   /* dropped and lost samples its client claimed (session_claim()) */
	bool warned_claim;  /* logged that its claims went past SESSION_MAX_CLAIMED */
	size_t n_refused;   /* threads whose reattach was refused: batches dropped */
	pid_t refused[16];
	struct process *proc;
	size_t n_threads;
	struct session_thread *threads;
	size_t n_ids;
	struct region_agg **ids; /* client region id -> region */
	/* Hello.call_paths agreed: batches carry call path ids, which Define messages define;
	 * paths[id] for each (n_paths slots). */
	bool call_paths;
	size_t n_paths;
	struct session_path *paths;
	/* Its uid's share of id tables (--max-define-memory-per-user) refused ids a larger table:
	 * ids past n_ids (paths past n_paths) are refused as those past the bound are. */
	bool ids_full, paths_full;
	struct query_stream *qs; /* a Query reply being built or sent (nothing read until it is) */
	struct sched_item si;    /* its place in the server's queue while it has work */
	bool bulk;               /* it has sent batches: queued as bulk */
	uint64_t rx_bytes;       /* of requests read */
	size_t fds_unread;       /* fds its replies carried that its client may not have read */
	/* A Define handled over several slices (session-batch.c): the request (owned once its
	 * dispatch returned), where it stands, and its refusals so far; its uid's only one
	 * (sched_uid.defining). def_waits: it waits for its uid's Define on another connection
	 * to end, neither queued nor read. */
	struct Pmc__Request *def;
	size_t def_next;
	bool def_full_names, def_full_paths, def_waits;
	/* A SampleBatch whose names take more than a slice (session-batch.c): the request
	 * (owned), the names defined so far, and whether a limit refused one; its uid's other
	 * connections wait meanwhile (sched_uid.defining). */
	struct Pmc__Request *batch_req;
	size_t batch_next;
	bool batch_full;
	char run_tag[33]; /* Hello.run_tag, when well-formed */
	int same_ns;      /* the peer is in the daemon's pid namespace: 1, 0, -1 not known yet */
	int rx_fd;        /* the fd the request being handled carried (a pidfd), -1: none; a handler
	                   * that keeps it sets -1 */
	/* The request being handled is a SampleBatch whose wall times and values lie in the
	 * datagram (batch_scan()), or NULL. */
	const struct batch_cols *rx_cols;
	uint64_t qs_yield_ns; /* when its last slice of a query reply ended (CLOCK_MONOTONIC) */
	bool outq_empty;      /* its socket's send queue was seen empty while the request being
	                       * handled is, nothing sent since: its reply needs no look again */
	/* The client's heads table (HeadsTable), mapped read-only: n_heads words, each a
	 * thread's count of published samples. NULL: none. */
	const uint64_t *heads;
	uint32_t n_heads;
	uint64_t heads_given_up; /* HeadsTable.given_up: word 0 when the table came */
	/* A request (Query, Status, Reset) that waits while the queues of exited clients are
	 * read, a slice at a time (session_drain_others()): its datagram, read again once
	 * they are. NULL: none. */
	uint8_t *held;
	size_t held_len;
	unsigned gone_read; /* datagrams drains read from it since its process exited */
	/* The client's SampleRing (pmc.proto), mapped read-write (its tail and state are the
	 * daemon's words); ring.hdr NULL: none. rx_count: the datagrams read from the socket,
	 * to which each frame's `after` is compared, so that the two are read in the order the
	 * client sent them. */
	struct pmc_ring ring;
	uint64_t rx_count;
	/* A datagram read while a frame put before it was sent still waited in the ring: its
	 * bytes (owned) and fd (-1: none), handled once such frames are read. NULL: none. */
	uint8_t *parked;
	size_t parked_len;
	int parked_fd;
	/* A read's error met while a frame put before the datagram it failed on still waited in
	 * the ring (that datagram may be gone: cut, or refused for its fds): returned once such
	 * frames are read, so that it closes the connection after them. 0: none. */
	int parked_err;
	/* A read said ECONNRESET once, and was made again (session_dispatch_one()). */
	bool reset_read;
};

/**
 * session_new() - start serving the accepted connection @fd
 * @fd: taken (closed on failure too)
 * Return: 0, or -errno (-EPERM: the peer's credentials cannot be read).
 */
int session_new(struct server *srv, int fd);

/* Words in a client's heads table at most (HeadsTable.slots): 512 KiB mapped. */
#define SESSION_MAX_HEADS 65536
/* The most data bytes of a client's SampleRing (HelloReply.sample_ring): its frames are at most
 * a quarter of it, SERVER_MAX_REQUEST. */
#define SESSION_RING_MAX (4u << 20)

/* Daemon time one slice of a connection's work takes at most (a datagram, or a part of
 * a reply, more). */
#define SESSION_SLICE_NS (2000 * 1000)
/* While other connections wait for the loop, a query reply's parts take at most one part in
 * this many of the loop's time: its slice is the time since its last one over this (at
 * least a part is built a slice). Ingest beside a reader as fast as the daemon streams keeps
 * 16/17 of the loop (0.94x of ingest alone, by construction, when the daemon is saturated;
 * 1/13 measured 0.87x on a quiet VM, issue 34), and a reader of a whole query at 100,000
 * regions, 45 ms of the daemon's CPU, ends in about 0.8 s. */
#define SESSION_QUERY_SHARE 16

/**
 * session_serve() - do one slice of @s's work, until @deadline_ns (CLOCK_MONOTONIC): read
 * and handle its requests (SESSION_BURST at most, and only one past a change of class), or
 * build and send parts of its Query reply (a share of the loop's time while other
 * connections wait: SESSION_QUERY_SHARE). Then queues @s again when work is left, or
 * waits for its socket; closes @s (frees it) when it hung up or broke the protocol.
 * @s: popped from the server's queue
 */
void session_serve(struct session *s, uint64_t deadline_ns);

/**
 * session_pump() - handle up to @max steps of the connection's work at once, outside the
 * loop's turns (the fuzzers): a datagram each, or a part of its Query reply
 * Return: 0 when the connection stays open (nothing left, its socket full, or @max
 * handled), or the negative errno for which it must be closed (the peer hung up, or broke
 * the protocol): the caller then frees @s with session_free().
 */
int session_pump(struct session *s, unsigned max);

/** session_ready() - queue @s for a slice (its uid's queue of its class); no-op when
 * queued already */
void session_ready(struct session *s);
/* Whether @s's SampleRing holds a frame it may read now (its datagrams read): it is then read
 * in @s's turns, as a socket with datagrams queued would wake it; or its ring is broken (the
 * next read closes the connection). */
bool session_ring_ready(struct session *s);

/**
 * session_drain_all() - handle what every connection has queued now (bounded), closing
 * those that hung up
 * @final: at exit: first stop every connection from queueing more (clients keep what
 * they could not send for the next daemon), so that the saved state is whole
 */
void session_drain_all(struct server *srv, bool final);

/** session_inflight_settle_uid() - forget the fds of @uid's replies that were read since,
 * and close its connections that were kept for them alone ((uid_t)-1: every uid's) */
void session_inflight_settle_uid(struct server *srv, uid_t uid);

/** session_inflight_free_all() - close every kept socket (the daemon exits) */
void session_inflight_free_all(struct server *srv);

/** session_free() - close the connection and its threads' fds; the process's
 * aggregates stay in the registry. */
void session_free(struct session *s);
