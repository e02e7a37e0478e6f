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
 * Sockets lose their SO_LINGER first and are closed at once, as are pipes and anonymous
 * inodes. Any other fd (a path: a file, a device) is handed to a background thread that
 * closes it, started on first use; while FDCHECK_MAX_PENDING such closes wait there (a FUSE
 * server that never answers), a further one is left open and counted (pmc_fdcheck_leaked()):
 * a bounded leak rather than a blocked caller. Async-signal unsafe; thread-safe.
 */
void pmc_fdcheck_close(int fd, unsigned owner);

/* Most closes waiting in the background thread at once. */
#define FDCHECK_MAX_PENDING 1024

/**
 * pmc_fdcheck_pending() - closes waiting in the background thread for fds of @owner
 * Return: their number (0 when none ever waited).
 */
size_t pmc_fdcheck_pending(unsigned owner);

/**
 * pmc_fdcheck_leaked() - fds left open because FDCHECK_MAX_PENDING closes were waiting
 */
size_t pmc_fdcheck_leaked(void);
