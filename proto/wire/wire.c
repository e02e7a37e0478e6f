/* wire: protobuf-c messages over SOCK_SEQPACKET with SCM_RIGHTS fds. A datagram is
 * exactly one packed message, so there is no framing; the kernel keeps boundaries. */
#include "wire/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/fdcheck.h"
#include "common/util.h"

int
pmc_wire_send(int sock, const ProtobufCMessage *msg, const int *fds, size_t n_fds, int flags)
{
	size_t len = protobuf_c_message_get_packed_size(msg);
	if (len > WIRE_MAX_DATAGRAM || n_fds > WIRE_MAX_FDS)
		return -EMSGSIZE;

	uint8_t stackbuf[4096];
	_cleanup_free_ uint8_t *heap = NULL;
	uint8_t *buf = stackbuf;
	if (len > sizeof(stackbuf)) {
		heap = malloc(len);
		if (!heap)
			return -ENOMEM;
		buf = heap;
	}
	protobuf_c_message_pack(msg, buf);

	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int) * WIRE_MAX_FDS)];
		struct cmsghdr align;
	} ctrl;
	if (n_fds) {
		memset(&ctrl, 0, sizeof(ctrl));
		mh.msg_control = ctrl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n_fds);
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
		if (n >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

static void
close_cmsg_fds(struct msghdr *mh, unsigned owner)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int fd;
		for (size_t i = 0; i < n; i++) {
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			pmc_fdcheck_close(fd, owner);
		}
	}
}

ssize_t
pmc_wire_recv(int sock, void *buf, size_t cap, int *fds, size_t max_fds, size_t *n_fds, int flags)
{
	return pmc_wire_recv_from(sock, buf, cap, fds, max_fds, n_fds, flags, 0);
}

/* pmc_wire_recv_from(), and pmc_wire_recv_cut() where @cut is not NULL. */
static ssize_t
recv_datagram(int sock, void *buf, size_t cap, int *fds, size_t max_fds, size_t *n_fds, int flags,
              unsigned owner, bool *cut)
{
	struct iovec iov = {.iov_base = buf, .iov_len = cap};
	/* Room for more fds than accepted, so that an excess is seen and refused rather
	 * than silently truncated, beside credentials (pmc_wire_drain() asks for them). */
	union {
		char buf[CMSG_SPACE(sizeof(int) * WIRE_RX_FDS) + CMSG_SPACE(sizeof(struct ucred))];
		struct cmsghdr align;
	} ctrl;
	struct msghdr mh = {
	        .msg_iov = &iov,
	        .msg_iovlen = 1,
	        .msg_control = ctrl.buf,
	        .msg_controllen = sizeof(ctrl.buf),
	};
	ssize_t n;

	*n_fds = 0;
	do
		n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;

	size_t got = 0;
	int bad = 0;
	if ((mh.msg_flags & MSG_CTRUNC) && cut) {
		/* Whatever else is wrong with it: the caller decides from its bytes. */
		close_cmsg_fds(&mh, owner);
		*cut = true;
		return n;
	}
	if (mh.msg_flags & MSG_CTRUNC)
		bad = -EBADMSG;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			bad = -EBADMSG;
			continue;
		}
		got += (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
	}
	if (got > max_fds)
		bad = -EBADMSG;
	if (!bad && (mh.msg_flags & MSG_TRUNC))
		bad = -EMSGSIZE;
	if (!bad && n == 0)
		bad = -ECONNRESET;
	if (bad) {
		close_cmsg_fds(&mh, owner);
		return bad;
	}
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		memcpy(fds + *n_fds, CMSG_DATA(c), k * sizeof(int));
		*n_fds += k;
	}
	return n;
}

ssize_t
pmc_wire_recv_from(int sock, void *buf, size_t cap, int *fds, size_t max_fds, size_t *n_fds,
                   int flags, unsigned owner)
{
	return recv_datagram(sock, buf, cap, fds, max_fds, n_fds, flags, owner, NULL);
}

ssize_t
pmc_wire_recv_cut(int sock, void *buf, size_t cap, int *fds, size_t max_fds, size_t *n_fds,
                  int flags, bool *cut)
{
	*cut = false;
	return recv_datagram(sock, buf, cap, fds, max_fds, n_fds, flags, 0, cut);
}

void
pmc_wire_drain(int sock, unsigned owner)
{
	int saved = errno;
	if (sock < 0)
		return;
	(void)shutdown(sock, SHUT_RD);
	/* With SO_PASSCRED every datagram received carries its sender's credentials, which
	 * pmc_wire_recv_from() refuses (-EBADMSG, its fds closed): only the end of the queue reads
	 * as -ECONNRESET (0 bytes, no credentials), beside the peer's pending error, reported
	 * once before its datagrams. Without them, an empty datagram would end the drain. */
	int one = 1;
	(void)setsockopt(sock, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
	unsigned resets = 0;
	/* The queue is finite once shut; the count bounds the loop whatever the kernel does. */
	for (unsigned i = 0; i < WIRE_DRAIN_MAX; i++) {
		char b;
		int none[1];
		size_t n_fds;
		ssize_t n = pmc_wire_recv_from(sock, &b, 1, none, 0, &n_fds, MSG_DONTWAIT, owner);
		if (n == -ECONNRESET && resets++ == 0)
			continue;
		if (n == -ECONNRESET || n == -EAGAIN || n == -ENOTCONN || n == -ENOTSOCK ||
		    n == -EBADF)
			break;
	}
	errno = saved;
}

void
pmc_wire_close_draining(int sock, unsigned owner)
{
	if (sock < 0)
		return;
	int saved = errno;
	pmc_wire_drain(sock, owner);
	close(sock);
	errno = saved;
}

int
pmc_wire_unpack_request(const uint8_t *buf, size_t len, Pmc__Request **out)
{
	Pmc__Request *r = pmc__request__unpack(NULL, len, buf);
	if (!r)
		return -EBADMSG;
	if (r->body_case == PMC__REQUEST__BODY__NOT_SET) {
		pmc__request__free_unpacked(r, NULL);
		return -EBADMSG;
	}
	*out = r;
	return 0;
}

int
pmc_wire_unpack_response(const uint8_t *buf, size_t len, Pmc__Response **out)
{
	Pmc__Response *r = pmc__response__unpack(NULL, len, buf);
	if (!r)
		return -EBADMSG;
	*out = r;
	return 0;
}

int
pmc_wire_call(int sock, const Pmc__Request *req, int timeout_ms, int *fds, size_t max_fds,
              size_t *n_fds, Pmc__Response **out)
{
	int r = pmc_wire_send(sock, &req->base, NULL, 0, 0);
	/* A peer that refused us (over its client limit) has sent why, then closed:
	 * the send fails, but its answer is still there to read. */
	if (r == -EPIPE || r == -ECONNRESET)
		timeout_ms = 0;
	else if (r < 0)
		return r;
	_cleanup_free_ uint8_t *buf = NULL;
	size_t len, nf = 0;
	r = pmc_wire_wait(sock, timeout_ms, &buf, &len, fds, max_fds, &nf);
	if (r < 0)
		return r;
	r = pmc_wire_unpack_response(buf, len, out);
	if (r < 0) {
		for (size_t i = 0; i < nf; i++)
			pmc_fdcheck_close(fds[i], 0);
		return r;
	}
	if (n_fds)
		*n_fds = nf;
	return 0;
}

int
pmc_wire_wait(int sock, int timeout_ms, uint8_t **buf, size_t *len, int *fds, size_t max_fds,
              size_t *n_fds)
{
	struct pollfd p = {.fd = sock, .events = POLLIN};
	int r, ms = timeout_ms;
	/* A signal does not start the wait over: what is left of @timeout_ms after it. */
	uint64_t deadline = timeout_ms > 0 ? util_now_ns(CLOCK_MONOTONIC) +
	                                             (uint64_t)timeout_ms * UINT64_C(1000000)
	                                   : 0;
	for (;;) {
		r = poll(&p, 1, ms);
		if (r > 0)
			break;
		if (r == 0)
			return timeout_ms == 0 ? -ECONNRESET : -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
		if (deadline) {
			uint64_t now = util_now_ns(CLOCK_MONOTONIC);
			if (now >= deadline)
				return -ETIMEDOUT;
			ms = (int)((deadline - now + 999999) / 1000000);
		}
	}

	/* Peek the size first: replies to queries may be large. */
	ssize_t n;
	int resets = 0;
	/* A peer that closed with our request unread makes the first recv() report
	 * ECONNRESET (the kernel's pending socket error) before what it did send. */
	do
		n = recv(sock, NULL, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
	while (n < 0 && (errno == EINTR || (errno == ECONNRESET && resets++ == 0)));
	if (n < 0)
		return -errno;
	if ((size_t)n > WIRE_MAX_DATAGRAM)
		return -EMSGSIZE;
	uint8_t *b = malloc(n ? (size_t)n : 1);
	if (!b)
		return -ENOMEM;
	int dummy[1];
	size_t nf = 0;
	n = pmc_wire_recv(sock, b, n ? (size_t)n : 1, fds ? fds : dummy, fds ? max_fds : 0, &nf,
	                  MSG_DONTWAIT);
	if (n < 0) {
		free(b);
		return (int)n;
	}
	*buf = b;
	*len = (size_t)n;
	if (n_fds)
		*n_fds = nf;
	else
		for (size_t i = 0; i < nf; i++)
			pmc_fdcheck_close(fds[i], 0);
	return 0;
}

int
pmc_wire_sockaddr(const char *path, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	strcpy(sa->sun_path, path);
	return 0;
}

int
pmc_wire_connect(const char *path)
{
	return pmc_wire_connect_flags(path, 0);
}

int
pmc_wire_connect_flags(const char *path, int sock_flags)
{
	struct sockaddr_un sa;
	int r = pmc_wire_sockaddr(path, &sa);
	if (r < 0)
		return r;
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | sock_flags, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return TAKE_FD(fd);
}
