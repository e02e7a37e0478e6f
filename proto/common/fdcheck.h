/* fdcheck: file descriptors that arrived from a peer not trusted (SCM_RIGHTS), told apart
 * and closed without ever blocking the caller. Shared by the daemon (fds a client attached)
 * and the client library (fds a daemon attached). Internal only.
 *
 * Why: the last close() of a file runs its release in the closing thread. A TCP socket
 * with SO_LINGER set blocks there for the linger time, a file on a FUSE file system until
 * that file system's server answers its FLUSH, a tty until its output drains: a peer that
 * attaches such an fd to a datagram would hold whoever closes it. Even fstat() may call
 * into FUSE; the kind of an fd is therefore read from the /proc/self/fd link, which the
 * kernel builds from the open file alone. */
#pragma once

#include <stddef.h>

/* What an fd is, as far as closing it and trusting it go. */
enum pmc_fdcheck_kind {
	FDCHECK_OTHER = 0, /* a path (file, device, directory), or not known: may block */
	FDCHECK_PERF,      /* anon_inode:[perf_event] */
	FDCHECK_PIDFD,     /* anon_inode:[pidfd] */
	FDCHECK_SOCKET,    /* socket:[...] */
	FDCHECK_PIPE,      /* pipe:[...] */
	FDCHECK_ANON,      /* another anon_inode (eventfd, timerfd, epoll...) */
	FDCHECK_BAD,       /* not an open fd */
};

/**
 * pmc_fdcheck_kind() - the kind of @fd (borrowed), from its /proc/self/fd link; never blocks
 * Return: an enum pmc_fdcheck_kind; FDCHECK_OTHER when /proc is not mounted.
 */
enum pmc_fdcheck_kind pmc_fdcheck_kind(int fd);

/**
 * pmc_fdcheck_close() - close @fd (taken), which a peer not trusted sent, without blocking
 * @owner: whom to count it against while its close waits (the daemon passes the sender's
 *         uid; see pmc_fdcheck_pending())
 *
 * Closed at once where the close cannot wait: an internet socket (its SO_LINGER taken off
 * first), an AF_UNIX socket with nothing queued but datagrams without fds, which are read and
 * dropped (shut first, both ways: nothing can come, and its peer sees the end at once, even
 * where the socket goes to a closer thread), a pipe, an
 * anonymous inode, a memfd or another shmem file (F_GET_SEALS answers). Any other fd (a path: a
 * file, a device; a socket with queued datagrams, whose fds its close would free) goes to
 * pmc_fdcheck_defer(). Never leaves an fd open but where memory runs out (pmc_fdcheck_leaked()).
 * Async-signal unsafe; thread-safe.
 */
void pmc_fdcheck_close(int fd, unsigned owner);

/**
 * pmc_fdcheck_defer() - have @fd (taken) closed by a closer thread, counted against @owner
 *
 * Each owner has a queue of its own, served by one closer thread at a time: a close that
 * never returns (a FUSE file whose server does not answer the flush) holds that owner's
 * queue and one thread, no other owner's. Threads are started as queues wait for one, up to
 * FDCHECK_MAX_THREADS; past that, a queue waits for a thread to come free (FDCHECK_MAX_THREADS
 * owners whose closes all hang hold every thread). A queue grows as needed: the caller
 * bounds it, refusing more from an owner whose pmc_fdcheck_pending() is too high (a queued fd
 * is an open fd: the process's RLIMIT_NOFILE bounds them all). Sockets are bounded here too:
 * while an owner's close is under way (it may never return), the sockets it defers (those
 * whose queues hold fds: a connection closed with requests unread) gather in a buffer of
 * FDCHECK_PARK_BATCH, sent, once full, in one datagram into a socket pair of the owner's,
 * where they hold no slot of the fd table (a socket has no flush: dropping the table's
 * reference while the datagram holds one waits for nothing); so such an owner holds at most
 * FDCHECK_PARK_BATCH sockets and the pair (two fds) in the table, however many it makes the
 * caller close. Parked sockets count against the kernel's bound on the caller's fds in
 * flight (its RLIMIT_NOFILE, without CAP_SYS_RESOURCE) and the pair's queue
 * (net.unix.max_dgram_qlen datagrams): past those they wait in the table. They are closed
 * all at once, by closing the pair in the owner's closer thread once its queue is empty.
 * Only when memory for the queue runs out is @fd left open, and counted
 * (pmc_fdcheck_leaked()). Closer threads block every
 * signal, allocate nothing and log nothing. After fork() the child has no queue and no
 * thread (the fds queued are the parent's to close). Async-signal unsafe; thread-safe.
 */
void pmc_fdcheck_defer(int fd, unsigned owner);

/* Most closer threads (each serves one owner at a time). */
#define FDCHECK_MAX_THREADS 16
/* Sockets of an owner whose close is under way parked at once (pmc_fdcheck_defer()): the
 * most fds a datagram carries (SCM_MAX_FD). */
#define FDCHECK_PARK_BATCH 253

/**
 * pmc_fdcheck_pending() - fds of @owner not yet closed by a closer thread (the one whose close
 * is under way included)
 * Return: their number (0 when none ever waited).
 */
size_t pmc_fdcheck_pending(unsigned owner);

/**
 * pmc_fdcheck_leaked() - fds left open because no memory was left to queue their close
 */
size_t pmc_fdcheck_leaked(void);

/* What the closers hold now (pmc_fdcheck_stats()). */
struct pmc_fdcheck_stats {
	size_t pending;  /* fds waiting to be closed, of all owners (parked ones included) */
	size_t parked;   /* of those, sockets parked: in flight, in no slot of the fd table */
	size_t owners;   /* owners with fds waiting */
	size_t busy;     /* closes under way (one per thread at work) */
	size_t threads;  /* closer threads started */
	size_t leaked;   /* as pmc_fdcheck_leaked() */
	size_t deferred; /* fds ever handed to a closer thread */
};

/** pmc_fdcheck_stats() - fill @st with what the closers hold now; thread-safe */
void pmc_fdcheck_stats(struct pmc_fdcheck_stats *st);
