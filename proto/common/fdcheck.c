/* fdcheck: fds from a peer not trusted, told apart by their /proc link and closed where
 * the close cannot hold the caller (see fdcheck.h). */
#include "common/fdcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef F_GET_SEALS
#define F_GET_SEALS 1034
#endif

enum pmc_fdcheck_kind
pmc_fdcheck_kind(int fd)
{
	char path[48], link[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return errno == ENOENT ? FDCHECK_BAD : FDCHECK_OTHER;
	link[n] = 0;
	if (!strcmp(link, "anon_inode:[perf_event]"))
		return FDCHECK_PERF;
	if (!strcmp(link, "anon_inode:[pidfd]"))
		return FDCHECK_PIDFD;
	if (!strncmp(link, "socket:[", 8))
		return FDCHECK_SOCKET;
	if (!strncmp(link, "pipe:[", 6))
		return FDCHECK_PIPE;
	if (!strncmp(link, "anon_inode:", 11))
		return FDCHECK_ANON;
	return FDCHECK_OTHER;
}

/* One owner's closes: a ring of fds, the first one's close under way while busy. Allocated
 * and freed by the callers of pmc_fdcheck_close() alone (never by a closer thread: the daemon's
 * save clones the process with the closers' state as it is, and a closer holding the
 * allocator's lock at that moment would hold the clone). */
struct owner_q {
	unsigned owner;
	bool busy; /* a closer thread closes fds[head], a socket of buf, or the pair */
	size_t head, n, cap;
	int *fds;
	/* Sockets deferred while a close was under way: gathered in buf, then parked, in one
	 * datagram each FDCHECK_PARK_BATCH, in the pair pair[1] -> pair[0] (-1: none yet), to be
	 * closed all at once with pair[0] when all else is closed (pmc_fdcheck_defer()). */
	size_t n_buf, parked;
	size_t closing; /* taken out of buf or the pair, their close under way */
	int pair[2];
	int buf[FDCHECK_PARK_BATCH];
};

/* The closers: per owner queues, at most FDCHECK_MAX_THREADS threads, each taking the
 * queue of an owner no other thread serves; started as needed, never ended. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	unsigned threads, idle;
	size_t leaked, next, deferred;
	struct owner_q **q;
	size_t n_q, cap_q;
} C = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

/* fork(): the child has no closer thread, and the lock may have been held by a thread it
 * does not have: it starts afresh (the fds queued are the parent's to close; the child's
 * copies close at its exit or exec, MSG_CMSG_CLOEXEC). */
static void
atfork_prepare(void)
{
	pthread_mutex_lock(&C.lock);
}

static void
atfork_parent(void)
{
	pthread_mutex_unlock(&C.lock);
}

static void
atfork_child(void)
{
	pthread_mutex_init(&C.lock, NULL);
	pthread_cond_init(&C.wake, NULL);
	C.threads = C.idle = 0;
	for (size_t i = 0; i < C.n_q; i++) {
		free(C.q[i]->fds);
		free(C.q[i]);
	}
	free(C.q);
	C.q = NULL;
	C.n_q = C.cap_q = C.next = 0;
}

/* The next queue with fds that no thread serves, round robin; under the lock. */
static struct owner_q *
pick(void)
{
	for (size_t k = 0; k < C.n_q; k++) {
		size_t i = (C.next + k) % C.n_q;
		struct owner_q *q = C.q[i];
		if ((q->n || q->n_buf || q->pair[0] >= 0) && !q->busy) {
			C.next = i + 1;
			return q;
		}
	}
	return NULL;
}

static void *
closer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&C.lock);
	for (;;) {
		struct owner_q *q = pick();
		if (!q) {
			C.idle++;
			pthread_cond_wait(&C.wake, &C.lock);
			C.idle--;
			continue;
		}
		q->busy = true;
		if (!q->n) {
			/* A socket gathered, or else the parked ones: the pair's read end, whose
			 * queue holds them, closed last (its close releases them, here). Taken
			 * out of q now (closing counts them), so that what comes meanwhile goes
			 * to a buffer and a pair of its own. */
			int fd = q->n_buf ? q->buf[--q->n_buf] : q->pair[1];
			int r = fd == q->pair[1] ? q->pair[0] : -1;
			if (r >= 0) {
				q->closing = q->parked;
				q->parked = 0;
				q->pair[0] = q->pair[1] = -1;
			} else {
				q->closing = 1;
			}
			pthread_mutex_unlock(&C.lock);
			close(fd);
			if (r >= 0)
				close(r); /* may block, as any of the owner's closes */
			pthread_mutex_lock(&C.lock);
			q->closing = 0;
			q->busy = false;
			continue;
		}
		int fd = q->fds[q->head];
		pthread_mutex_unlock(&C.lock);
		close(fd); /* may block: this thread is for that, and serves no one else meanwhile
		            */
		pthread_mutex_lock(&C.lock);
		/* Dequeued only now, so that pmc_fdcheck_pending() counts the close under way. The
		 * queue may have grown meanwhile (a new ring, same order): q stays, it is busy. */
		q->head = (q->head + 1) % q->cap;
		q->n--;
		q->busy = false;
	}
	return NULL;
}

/* The queue of @owner, made when @add; under the lock. Queues left empty are freed here. */
static struct owner_q *
find(unsigned owner, bool add)
{
	struct owner_q *found = NULL;
	for (size_t i = 0; i < C.n_q;) {
		struct owner_q *q = C.q[i];
		if (q->owner == owner) {
			found = q;
		} else if (add && !q->n && !q->busy && !q->n_buf && !q->parked && q->pair[0] < 0) {
			free(q->fds);
			free(q);
			C.q[i] = C.q[--C.n_q];
			continue;
		}
		i++;
	}
	if (found || !add)
		return found;
	if (C.n_q == C.cap_q) {
		size_t cap = C.cap_q ? 2 * C.cap_q : 8;
		struct owner_q **nq = realloc(C.q, cap * sizeof(*nq));
		if (!nq)
			return NULL;
		C.q = nq;
		C.cap_q = cap;
	}
	struct owner_q *q = calloc(1, sizeof(*q));
	if (!q)
		return NULL;
	q->owner = owner;
	q->pair[0] = q->pair[1] = -1;
	C.q[C.n_q++] = q;
	return q;
}

/* Room for one more fd in @q's ring; under the lock. */
static int
grow(struct owner_q *q)
{
	if (q->n < q->cap)
		return 0;
	size_t cap = q->cap ? 2 * q->cap : 16;
	int *fds = malloc(cap * sizeof(*fds));
	if (!fds)
		return -ENOMEM;
	for (size_t i = 0; i < q->n; i++)
		fds[i] = q->fds[(q->head + i) % q->cap];
	free(q->fds);
	q->fds = fds;
	q->cap = cap;
	q->head = 0;
	return 0;
}

/* One more closer thread; under the lock. */
static void
start_thread(void)
{
	pthread_t t;
	pthread_attr_t a;
	sigset_t all, old;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, 64 * 1024);
	/* A closer takes no signal of the program's. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	if (pthread_create(&t, &a, closer, NULL) == 0) {
		C.threads++;
		static bool atfork;
		if (!atfork)
			atfork = pthread_atfork(atfork_prepare, atfork_parent, atfork_child) == 0;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
}

/* @q's full buffer of sockets sent in one datagram into its pair (made if need be), and the
 * table's references dropped: 0, or -errno (nothing sent: they stay in the buffer). Under
 * the lock; allocates nothing. */
static int
park(struct owner_q *q)
{
	if (q->pair[0] < 0 &&
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, q->pair) < 0) {
		q->pair[0] = q->pair[1] = -1;
		return -errno;
	}
	union {
		char buf[CMSG_SPACE(sizeof(q->buf))];
		struct cmsghdr align;
	} ctrl;
	char byte = 0;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = ctrl.buf,
	                    .msg_controllen = sizeof(ctrl.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(q->buf));
	memcpy(CMSG_DATA(c), q->buf, sizeof(q->buf));
	ssize_t k;
	do
		k = sendmsg(q->pair[1], &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return -errno;
	/* Sockets have no flush: with the datagram's reference, these closes wait for
	 * nothing. */
	for (size_t i = 0; i < FDCHECK_PARK_BATCH; i++)
		close(q->buf[i]);
	q->n_buf = 0;
	q->parked += FDCHECK_PARK_BATCH;
	return 0;
}

void
pmc_fdcheck_defer(int fd, unsigned owner)
{
	if (fd < 0)
		return;
	/* Read before the lock: a readlink() of /proc, which waits for nothing. */
	bool sock = pmc_fdcheck_kind(fd) == FDCHECK_SOCKET;
	pthread_mutex_lock(&C.lock);
	struct owner_q *q = find(owner, true);
	if (q && sock && q->busy && q->n_buf < FDCHECK_PARK_BATCH) {
		/* Its close under way may never return: gathered, parked once the buffer is full
		 * (kept in the table where it cannot be: the ring takes what comes next). */
		q->buf[q->n_buf++] = fd;
		C.deferred++;
		if (q->n_buf == FDCHECK_PARK_BATCH)
			(void)park(q);
		pthread_mutex_unlock(&C.lock);
		return;
	}
	if (!q || grow(q) < 0) {
		C.leaked++;
		pthread_mutex_unlock(&C.lock);
		return;
	}
	q->fds[(q->head + q->n) % q->cap] = fd;
	q->n++;
	C.deferred++;
	/* A thread for each queue that waits for one, as far as the bound allows: an owner
	 * whose close does not return holds its thread alone. */
	size_t waiting = 0;
	for (size_t i = 0; i < C.n_q; i++)
		waiting += C.q[i]->n && !C.q[i]->busy;
	while (waiting > C.idle && C.threads < FDCHECK_MAX_THREADS) {
		unsigned before = C.threads;
		start_thread();
		if (C.threads == before)
			break; /* tried again at the next fd */
		waiting--;
	}
	if (C.idle)
		pthread_cond_broadcast(&C.wake);
	pthread_mutex_unlock(&C.lock);
}

/* Most datagrams without fds pmc_fdcheck_close() reads and drops from a socket's queue before it
 * hands the socket to a closer: a connected socket's queue length by default
 * (net.unix.max_dgram_qlen), about a millisecond of the caller's time. */
#define FDCHECK_DROP_MAX 512

/* One recvmsg() of @fd's head with room for credentials alone (@flags: MSG_PEEK or 0).
 * Return: 0 at the end of the queue, 1 for a datagram without fds, -1 for one with fds (its
 * fds stay queued: MSG_PEEK), or an error. With SO_PASSCRED set, every datagram carries
 * credentials (a zero-length one too), the end of the queue none. */
static int
unix_head(int fd, int flags)
{
	char b;
	struct iovec iov = {.iov_base = &b, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} ctrl;
	struct msghdr mh = {.msg_iov = &iov,
	                    .msg_iovlen = 1,
	                    .msg_control = ctrl.buf,
	                    .msg_controllen = sizeof(ctrl.buf)};
	ssize_t n;
	do
		n = recvmsg(fd, &mh, flags | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -2;
	if (mh.msg_flags & MSG_CTRUNC)
		return -1;
	return n == 0 && mh.msg_controllen == 0 ? 0 : 1;
}

/* Whether AF_UNIX socket @fd, shut, holds nothing whose freeing could wait: its queue
 * empty, once the datagrams without fds at its head are read and dropped (a datagram
 * socket's only; a stream's queue must be empty). Fds in a datagram peeked are dropped
 * again here (MSG_CTRUNC), not their last reference: only a datagram peeked without fds is
 * ever read. A listening socket fails (its embryos' queues are not looked into). */
static bool
unix_queue_empty(int fd)
{
	int one = 1, type = 0, inq = -1;
	socklen_t tl = sizeof(type);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0)
		return false;
	bool dgram = type == SOCK_DGRAM || type == SOCK_SEQPACKET;
	for (unsigned i = 0; i < FDCHECK_DROP_MAX; i++) {
		int h = unix_head(fd, MSG_PEEK);
		if (h == 0)
			break;
		if (h < 0 || !dgram || unix_head(fd, 0) != 1)
			return false;
	}
	/* No byte left either (FIONREAD: a stream's or a seqpacket's whole queue, an
	 * out-of-band byte included). */
	return ioctl(fd, FIONREAD, &inq) == 0 && inq == 0 && unix_head(fd, MSG_PEEK) == 0;
}

void
pmc_fdcheck_close(int fd, unsigned owner)
{
	if (fd < 0)
		return;
	switch (pmc_fdcheck_kind(fd)) {
	case FDCHECK_SOCKET: {
		/* An internet socket without linger closes at once; the kernel ends the
		 * connection. An AF_UNIX one too once shut (the peer's later sends fail, and it
		 * sees the end now, whoever closes the socket later) with nothing queued, or only
		 * datagrams without fds (read and dropped here): its queue could hold fds of its
		 * own, whose close would come here. Any other goes to the closers. */
		int dom = -1;
		socklen_t dl = sizeof(dom);
		if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0)
			break;
		if (dom == AF_UNIX) {
			if (shutdown(fd, SHUT_RDWR) < 0 || !unix_queue_empty(fd))
				break;
			close(fd);
			return;
		}
		if (dom != AF_INET && dom != AF_INET6)
			break;
		struct linger off = {0};
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
		close(fd);
		return;
	}
	case FDCHECK_PERF:
	case FDCHECK_PIDFD:
	case FDCHECK_PIPE:
	case FDCHECK_ANON:
	case FDCHECK_BAD:
		close(fd);
		return;
	case FDCHECK_OTHER:
		/* A memfd (or another shmem or hugetlbfs file): F_GET_SEALS answers for those
		 * alone, from the open file, calling into no file system; their release waits
		 * for nothing. */
		if (fcntl(fd, F_GET_SEALS) >= 0) {
			close(fd);
			return;
		}
		break;
	}
	pmc_fdcheck_defer(fd, owner);
}

size_t
pmc_fdcheck_pending(unsigned owner)
{
	pthread_mutex_lock(&C.lock);
	struct owner_q *q = find(owner, false);
	size_t k = q ? q->n + q->n_buf + q->parked + q->closing : 0;
	pthread_mutex_unlock(&C.lock);
	return k;
}

size_t
pmc_fdcheck_leaked(void)
{
	pthread_mutex_lock(&C.lock);
	size_t k = C.leaked;
	pthread_mutex_unlock(&C.lock);
	return k;
}

void
pmc_fdcheck_stats(struct pmc_fdcheck_stats *st)
{
	pthread_mutex_lock(&C.lock);
	*st = (struct pmc_fdcheck_stats){
	        .threads = C.threads, .leaked = C.leaked, .deferred = C.deferred};
	for (size_t i = 0; i < C.n_q; i++) {
		const struct owner_q *q = C.q[i];
		size_t n = q->n + q->n_buf + q->parked + q->closing;
		st->pending += n;
		st->parked += q->parked;
		st->owners += n > 0;
		st->busy += q->busy;
	}
	pthread_mutex_unlock(&C.lock);
}
