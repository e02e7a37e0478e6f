/* libFuzzer target: libpmcclient facing a hostile daemon. The library's own code (its
 * sources linked in, its internals through client-internal.h) reads the daemon's answers to a
 * registration, on time and late, from a real SOCK_SEQPACKET pair whose other end the input
 * writes: any bytes, with any fds attached.
 *
 * Input: a sequence of datagrams, each a flags byte, a 2-byte little-endian length and its
 * bytes. Flags: bits 0-1, how many fds ride with it (0-3); bit 2, software perf_event fds of
 * the calling thread (page-faults, opened disabled as the daemon opens them) instead of
 * /dev/null. A datagram that decodes as a Response whose RegisterReply names thread 0 is
 * re-packed with the harness's thread id (a fuzzer cannot know it), so that a reply may be
 * taken for real: mapped, enabled, warmed up, then released here.
 * The first datagram answers the registration (pmc__register_locked()); each other one comes as
 * a late reply (pmc__late_reply_locked()). Every input must leave no fd and no memory behind. */
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lib/client-internal.h"

#define MAX_DATAGRAMS 16

static pid_t
harness_tid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

static int
harness_fd(bool perf)
{
	if (!perf)
		return open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct perf_event_attr a = {
	        .type = PERF_TYPE_SOFTWARE,
	        .size = sizeof(a),
	        .config = PERF_COUNT_SW_PAGE_FAULTS,
	        .disabled = 1,
	        .read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED |
	                       PERF_FORMAT_TOTAL_TIME_RUNNING,
	};
	int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	return fd >= 0 ? fd : open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Sends @len bytes at @buf on @sock with @n fds of the kind @perf says; the fds are closed
 * here (the receiver has its own). */
static void
harness_send(int sock, const uint8_t *buf, size_t len, unsigned n, bool perf)
{
	int fds[3];
	union {
		char buf[CMSG_SPACE(sizeof(fds))];
		struct cmsghdr align;
	} ctrl;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	unsigned k = 0;
	for (; k < n; k++)
		if ((fds[k] = harness_fd(perf)) < 0)
			break;
	if (k) {
		memset(&ctrl, 0, sizeof(ctrl));
		mh.msg_control = ctrl.buf;
		mh.msg_controllen = CMSG_SPACE(k * sizeof(int));
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(k * sizeof(int));
		memcpy(CMSG_DATA(c), fds, k * sizeof(int));
	}
	(void)sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	for (unsigned i = 0; i < k; i++)
		close(fds[i]);
}

/* @buf re-packed with this thread's id when it is a RegisterReply for thread 0. */
static uint8_t *
harness_own_tid(const uint8_t *buf, size_t *len)
{
	Pmc__Response *r = pmc__response__unpack(NULL, *len, buf);
	uint8_t *out = NULL;
	if (r && r->body_case == PMC__RESPONSE__BODY_REGISTER_REPLY && r->register_reply &&
	    r->register_reply->tid == 0) {
		r->register_reply->tid = harness_tid();
		*len = pmc__response__get_packed_size(r);
		out = malloc(*len ? *len : 1);
		if (out)
			pmc__response__pack(r, out);
	}
	if (r)
		pmc__response__free_unpacked(r, NULL);
	return out;
}

/* The lowest free fd number: grows when an input leaks one. */
static int
lowest_free_fd(void)
{
	int fd = dup(0);
	if (fd >= 0)
		close(fd);
	return fd;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool init;
	if (!init) {
		/* As pmc__connect_locked() once: the state a connected process has, the
		 * background thread taken as running (none is started: nothing reconnects). */
		init = true;
		pthread_condattr_t a;
		pthread_condattr_init(&a);
		pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
		pthread_cond_init(&G.service.wake, &a);
		pthread_condattr_destroy(&a);
		G.env.path = "/nonexistent/pmc.sock";
		G.service.running = 1;
	}
	int lowest = lowest_free_fd();
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	(void)fcntl(sv[0], F_SETFL, O_NONBLOCK);
	/* Room for what the library sends (RegisterThread, ThreadExit): never read. */
	int big = 1 << 20;
	(void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
	unsigned n = 0;
	for (size_t off = 0; off + 3 <= size && n < MAX_DATAGRAMS; n++) {
		uint8_t flags = data[off];
		size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
		off += 3;
		if (len > size - off)
			len = size - off;
		size_t plen = len;
		uint8_t *own = harness_own_tid(data + off, &plen);
		harness_send(sv[1], own ? own : data + off, own ? plen : len, flags & 3, flags & 4);
		free(own);
		off += len;
	}
	/* Never a registration that waits its 2 s: something always answers. */
	if (!n)
		harness_send(sv[1], (const uint8_t *)"", 0, 0, false), n = 1;

	pthread_mutex_lock(&G.conn.lock);
	G.conn.fd = sv[0];
	G.conn.n++;
	G.reg.late = 0;
	atomic_store(&G.conn.state, ST_ON);
	bool fd_starved, transient;
	struct pmc_thread *t = pmc__register_locked(&fd_starved, &transient);
	if (t) {
		pmc_list_remove(&G.threads.list, &t->link);
		pmc__thread_release(t);
	}
	/* The rest, each as the late reply to a registration given up. */
	for (unsigned i = 1; i < n && atomic_load(&G.conn.state) == ST_ON; i++) {
		G.reg.late = harness_tid();
		pmc__late_reply_locked();
		if (G.reg.late)
			break; /* nothing more came */
	}
	if (G.conn.fd >= 0)
		close(G.conn.fd);
	G.conn.fd = -1;
	G.reg.late = 0;
	atomic_store(&G.conn.state, ST_NONE);
	pthread_mutex_unlock(&G.conn.lock);
	close(sv[1]);
	if (lowest_free_fd() != lowest)
		abort(); /* an fd of this input's left open */
	return 0;
}
