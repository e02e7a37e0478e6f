/* fdcheck: fds from a peer not trusted, told apart by their /proc link and closed where
 * the close cannot hold the caller (see fdcheck.h). */
#include "fdcheck.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* The background closer: a fixed queue, one thread, started on first use. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool started;
	size_t head, n, leaked;
	struct {
		int fd;
		unsigned owner;
	} q[FDCHECK_MAX_PENDING];
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
	C.started = false;
	C.head = C.n = 0;
}

static void *
closer(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&C.lock);
	for (;;) {
		while (!C.n)
			pthread_cond_wait(&C.wake, &C.lock);
		int fd = C.q[C.head].fd;
		pthread_mutex_unlock(&C.lock);
		close(fd); /* may block: this thread is for that */
		pthread_mutex_lock(&C.lock);
		/* Dequeued only now, so that pmc_fdcheck_pending() counts the close under way. */
		C.head = (C.head + 1) % FDCHECK_MAX_PENDING;
		C.n--;
	}
	return NULL;
}

void
pmc_fdcheck_close(int fd, unsigned owner)
{
	if (fd < 0)
		return;
	switch (pmc_fdcheck_kind(fd)) {
	case FDCHECK_SOCKET: {
		/* An internet socket without linger closes at once; the kernel ends the
		 * connection. Any other (AF_UNIX: its queue may hold fds of its own, whose close
		 * would come here) goes to the closer thread. */
		int dom = -1;
		socklen_t dl = sizeof(dom);
		if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0 ||
		    (dom != AF_INET && dom != AF_INET6))
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
		break;
	}
	pthread_mutex_lock(&C.lock);
	if (!C.started) {
		pthread_t t;
		pthread_attr_t a;
		sigset_t all, old;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&a, 64 * 1024);
		/* The closer takes no signal of the program's. */
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		C.started = pthread_create(&t, &a, closer, NULL) == 0;
		static bool atfork;
		if (C.started && !atfork)
			atfork = pthread_atfork(atfork_prepare, atfork_parent, atfork_child) == 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&a);
	}
	if (!C.started || C.n == FDCHECK_MAX_PENDING) {
		C.leaked++;
		pthread_mutex_unlock(&C.lock);
		return;
	}
	size_t tail = (C.head + C.n) % FDCHECK_MAX_PENDING;
	C.q[tail].fd = fd;
	C.q[tail].owner = owner;
	C.n++;
	pthread_cond_signal(&C.wake);
	pthread_mutex_unlock(&C.lock);
}

size_t
pmc_fdcheck_pending(unsigned owner)
{
	size_t k = 0;
	pthread_mutex_lock(&C.lock);
	for (size_t i = 0; i < C.n; i++)
		if (C.q[(C.head + i) % FDCHECK_MAX_PENDING].owner == owner)
			k++;
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
