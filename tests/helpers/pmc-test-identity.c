/* pmc-test-identity: who a registration is for, across pid namespaces, and fds a peer
 * attaches that it should not. Speaks the wire by hand; each mode prints what it got and
 * exits 0 when that is what it expects, 1 otherwise.
 *
 *   SOCKET self          register this thread with a pidfd of it: served (fds)
 *   SOCKET self-claim    register this thread by its id alone (no pidfd; the daemon finds it
 *                        among this process's threads by its namespace id): served
 *   SOCKET pidfd-of TID  register thread TID of another process, with a pidfd of it: EPERM
 *   SOCKET claim TID     register thread id TID (not this process's) with no pidfd: EPERM
 *   SOCKET not-pidfd     a registration whose "pidfd" is /dev/null: EPERM, nothing counted
 *   SOCKET no-pidfd      a registration that says it carries a pidfd and carries none, then
 *                        a Status with one attached: each closes its connection
 *   SOCKET stale         a pidfd of a thread of this process that has ended: ESRCH; then a
 *                        process forked to reuse that id (ns_last_pid, where writable):
 *                        claimed by id, and by a pidfd of it: EPERM both; prints reused=0|1
 *   SOCKET linger-many   a Status carrying 69 fds, the lingering TCP socket last; then a
 *                        Status on a new connection: answered within 10 s
 *   SOCKET linger-nested the same with a Unix socket whose queue holds the lingering one
 *                        (both: with PMC_TEST_STEP set, "ready" printed once connected, then
 *                        a line read from stdin before the send, and "sent" printed once
 *                        this process closed its copies: the test stops the daemon
 *                        meanwhile, so that its copy is the last, whose close would linger)
 *   SOCKET linger        a Hello carrying a TCP socket whose close would linger 30 s, then
 *                        a Status on a new connection: answered within 10 s
 *   SOCKET attach FILE   a Status carrying FILE twice (opened read-only; a file whose close
 *                        never ends, pmc-test-fuse-hold's): the connection is closed; then
 *                        a Status on a new connection: answered within 10 s; prints
 *                        "verdict: pass|fail", and its exit waits as long as FILE's close
 *   SOCKET linger-behind-empty
 *                        after Hello, two empty datagrams (each reads as the end of the
 *                        connection) and a Status carrying the lingering socket, sent at
 *                        once: the daemon closes the connection at the first, with the
 *                        socket still queued; then a Status on a new connection: answered
 *   SOCKET fake-daemon SECONDS
 *                        be a hostile daemon on SOCKET for SECONDS: answer Hello, and
 *                        answer each RegisterThread with a reply whose "counter" fd is such
 *                        a lingering TCP socket; prints "listening" once it is
 *   SOCKET fake-daemon-queue SECONDS
 *                        the same, but each registration is served with a real counter
 *                        (page-faults of that thread: run as root), and then, unasked,
 *                        a datagram carrying a lingering TCP socket is queued behind the
 *                        reply and the connection closed: the library finds the daemon
 *                        gone at its next send, and exits, with such a socket unread in
 *                        its queue
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wire/wire.h"

#define PIDFD_THREAD_FLAG O_EXCL

static int
pidfd_of(pid_t tid)
{
	return (int)syscall(SYS_pidfd_open, tid, PIDFD_THREAD_FLAG);
}

static pid_t
my_tid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* Sends @req with @fd (taken) attached (none when < 0) and waits for the answer: the errno it
 * carries (0: served), -1 when the connection closed, -2 on no answer. */
static int
ask(int sock, const Pmc__Request *req, int fd, const char *what)
{
	int r = pmc_wire_send(sock, &req->base, &fd, fd >= 0, 0);
	/* The copy in flight is the last once this one is closed: the receiver's close is. */
	if (fd >= 0)
		close(fd);
	if (r < 0 && r != -EPIPE && r != -ECONNRESET) {
		printf("%s: send: %s\n", what, strerror(-r));
		return -2;
	}
	uint8_t *buf = NULL;
	size_t len, n_fds = 0;
	int fds[WIRE_MAX_FDS];
	r = pmc_wire_wait(sock, 10000, &buf, &len, fds, WIRE_MAX_FDS, &n_fds);
	if (r == -ECONNRESET) {
		printf("%s: connection closed\n", what);
		return -1;
	}
	if (r < 0) {
		printf("%s: no answer: %s\n", what, strerror(-r));
		return -2;
	}
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	Pmc__Response *resp = NULL;
	r = pmc_wire_unpack_response(buf, len, &resp);
	free(buf);
	if (r < 0) {
		printf("%s: undecodable answer\n", what);
		return -2;
	}
	int err = (int)resp->error;
	printf("%s: error=%d (%s) fds=%zu message=%s\n", what, err, err ? strerror(err) : "none",
	       n_fds, resp->message ? resp->message : "");
	pmc__response__free_unpacked(resp, NULL);
	return err;
}

static int
connect_hello(const char *path)
{
	int sock = pmc_wire_connect(path);
	if (sock < 0) {
		printf("connect: %s\n", strerror(-sock));
		exit(1);
	}
	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	if (ask(sock, &req, -1, "hello") != 0)
		exit(1);
	return sock;
}

/* RegisterThread for @tid (page-faults), with @pidfd attached when >= 0 (@say: the flag). */
static int
reg(int sock, pid_t tid, int pidfd, bool say, const char *what)
{
	static char *events[1] = {"page-faults"};
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = tid;
	rt.n_events = 1;
	rt.events = events;
	rt.pidfd = say;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	return ask(sock, &req, pidfd, what);
}

static int
status(int sock, int fd)
{
	Pmc__Status st = PMC__STATUS__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_STATUS;
	req.status = &st;
	return ask(sock, &req, fd, "status");
}

/* A TCP socket whose close() lingers: connected to a listener that never accepts, its send
 * queue full, SO_LINGER @secs. The listener is returned in *@lsn (kept open). */
static int
lingering_socket(int secs, int *lsn)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
	int small = 4096;
	if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &al) < 0)
		return -1;
	setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	setsockopt(c, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	if (connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	fcntl(c, F_SETFL, O_NONBLOCK);
	static char junk[65536];
	while (write(c, junk, sizeof(junk)) > 0)
		;
	struct linger lg = {.l_onoff = 1, .l_linger = secs};
	setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	fcntl(c, F_SETFL, 0);
	*lsn = l;
	return c;
}

struct ending {
	pid_t tid;
	int go[2]; /* the thread ends when this pipe closes */
};

static void *
ending(void *p)
{
	struct ending *e = p;
	char c;
	__atomic_store_n(&e->tid, my_tid(), __ATOMIC_RELEASE);
	while (read(e->go[0], &c, 1) > 0)
		;
	return NULL;
}

static int
mode_stale(const char *path)
{
	int sock = connect_hello(path);
	struct ending e = {0};
	pthread_t th;
	/* A pidfd of a thread that then ends: taken while it runs, used after. */
	if (pipe(e.go) || pthread_create(&th, NULL, ending, &e))
		return 1;
	while (!__atomic_load_n(&e.tid, __ATOMIC_ACQUIRE))
		;
	pid_t tid = e.tid;
	int pfd = pidfd_of(tid);
	close(e.go[1]);
	pthread_join(th, NULL);
	if (pfd < 0) {
		printf("pidfd_open: %s\n", strerror(errno));
		return 1;
	}
	int fail = reg(sock, tid, pfd, true, "ended thread's pidfd") != ESRCH;
	/* The id again, now another process's. */
	bool reused = false;
	FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "w");
	if (f) {
		fprintf(f, "%d", (int)tid - 1);
		reused = fclose(f) == 0;
	}
	int hold[2];
	if (pipe(hold))
		return 1;
	pid_t child = fork();
	if (child == 0) {
		char c;
		close(hold[1]);
		(void)read(hold[0], &c, 1);
		_exit(0);
	}
	close(hold[0]);
	reused = reused && child == tid;
	printf("reused=%d (thread %d, new process %d)\n", reused, (int)tid, (int)child);
	fail |= reg(sock, tid, -1, false, "reused id claimed") != EPERM;
	int cfd = pidfd_of(child);
	fail |= reg(sock, child, cfd, true, "reused id's pidfd") != EPERM;
	close(hold[1]);
	waitpid(child, NULL, 0);
	fail |= status(sock, -1) != 0;
	return fail;
}

/* A page-faults counter of thread @tid, user and kernel mode, for a fake daemon's reply. */
static int
page_faults_of(pid_t tid)
{
	struct perf_event_attr a = {.size = sizeof(a),
	                            .type = PERF_TYPE_SOFTWARE,
	                            .config = PERF_COUNT_SW_PAGE_FAULTS,
	                            .read_format = PERF_FORMAT_TOTAL_TIME_ENABLED |
	                                           PERF_FORMAT_TOTAL_TIME_RUNNING};
	return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* @queue: serve registrations with real counters, then queue a lingering socket unasked
 * and hang up (see the top of the file). */
static int
mode_fake_daemon(const char *path, int secs, bool queue)
{
	int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa;
	if (l < 0 || pmc_wire_sockaddr(path, &sa) < 0 ||
	    bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 16) < 0 ||
	    chmod(path, 0777) < 0) {
		perror("fake daemon");
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	time_t end = time(NULL) + secs;
	int lsn[64], n_lsn = 0;
	while (time(NULL) < end) {
		struct pollfd p = {.fd = l, .events = POLLIN};
		if (poll(&p, 1, 200) <= 0)
			continue;
		int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		for (;;) {
			uint8_t buf[65536];
			int fds[WIRE_MAX_FDS];
			size_t nf = 0;
			struct pollfd q = {.fd = c, .events = POLLIN};
			if (poll(&q, 1, 1000) <= 0)
				break;
			ssize_t n = pmc_wire_recv(c, buf, sizeof(buf), fds, WIRE_MAX_FDS, &nf, 0);
			for (size_t i = 0; i < nf; i++)
				close(fds[i]);
			Pmc__Request *req;
			if (n <= 0 || pmc_wire_unpack_request(buf, (size_t)n, &req) < 0)
				break;
			Pmc__Response resp = PMC__RESPONSE__INIT;
			Pmc__HelloReply hr = PMC__HELLO_REPLY__INIT;
			Pmc__RegisterReply rr = PMC__REGISTER_REPLY__INIT;
			Pmc__EventDesc ed = PMC__EVENT_DESC__INIT, *edp = &ed;
			int fd = -1;
			if (req->body_case == PMC__REQUEST__BODY_HELLO) {
				hr.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
				hr.daemon_version = "hostile";
				resp.body_case = PMC__RESPONSE__BODY_HELLO;
				resp.hello = &hr;
			} else if (req->body_case == PMC__REQUEST__BODY_REGISTER_THREAD) {
				ed.name = "page-faults";
				rr.tid = req->register_thread->tid;
				rr.n_events = 1;
				rr.events = &edp;
				resp.body_case = PMC__RESPONSE__BODY_REGISTER_REPLY;
				resp.register_reply = &rr;
				if (queue)
					fd = page_faults_of((pid_t)req->register_thread->tid);
				else if (n_lsn < 64)
					fd = lingering_socket(30, &lsn[n_lsn++]);
			}
			pmc__request__free_unpacked(req, NULL);
			if (resp.body_case != PMC__RESPONSE__BODY__NOT_SET)
				(void)pmc_wire_send(c, &resp.base, &fd, fd >= 0, 0);
			if (fd >= 0)
				close(fd); /* the client holds the last reference now */
			if (queue && resp.body_case == PMC__RESPONSE__BODY_REGISTER_REPLY &&
			    n_lsn < 64) {
				/* Behind the reply, a datagram nobody asked for, with a socket
				 * whose close would linger 30 s; then the hang-up. */
				Pmc__Response extra = PMC__RESPONSE__INIT;
				extra.body_case = PMC__RESPONSE__BODY_HELLO;
				extra.hello = &hr;
				hr.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
				hr.daemon_version = "hostile";
				int ls = lingering_socket(30, &lsn[n_lsn++]);
				if (ls >= 0 && pmc_wire_send(c, &extra.base, &ls, 1, 0) == 0)
					printf("queued\n");
				if (ls >= 0)
					close(ls);
				break;
			}
		}
		close(c);
	}
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: see the top of pmc-test-identity.c\n");
		return 2;
	}
	const char *path = argv[1], *mode = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "fake-daemon") && argc == 4)
		return mode_fake_daemon(path, atoi(argv[3]), false);
	if (!strcmp(mode, "fake-daemon-queue") && argc == 4)
		return mode_fake_daemon(path, atoi(argv[3]), true);
	if (!strcmp(mode, "linger")) {
		int lsn = -1, fd = lingering_socket(30, &lsn);
		if (fd < 0) {
			perror("lingering socket");
			return 1;
		}
		int a = connect_hello(path);
		int bad = status(a, fd) != -1; /* closed: an fd where none belongs */
		int b = connect_hello(path);
		return bad | (status(b, -1) != 0);
	}
	if (!strcmp(mode, "attach") && argc == 4) {
		/* Two: the daemon's closer thread waits on the first, the second waits its turn
		 * in the daemon's fd table (where a child process it forks finds it). */
		int fds[2] = {open(argv[3], O_RDONLY | O_CLOEXEC),
		              open(argv[3], O_RDONLY | O_CLOEXEC)};
		if (fds[0] < 0 || fds[1] < 0) {
			perror(argv[3]);
			return 1;
		}
		int a = connect_hello(path);
		Pmc__Status st = PMC__STATUS__INIT;
		Pmc__Request req = PMC__REQUEST__INIT;
		req.body_case = PMC__REQUEST__BODY_STATUS;
		req.status = &st;
		int r = pmc_wire_send(a, &req.base, fds, 2, 0);
		uint8_t *buf = NULL;
		size_t len;
		/* Not closed here, where each close would wait for ever: at the exit, which
		 * waits too, after the verdict. */
		int bad =
		        r < 0 || pmc_wire_wait(a, 10000, &buf, &len, NULL, 0, NULL) != -ECONNRESET;
		free(buf);
		int b = connect_hello(path);
		bad |= status(b, -1) != 0;
		printf("verdict: %s\n", bad ? "fail" : "pass");
		return bad;
	}
	if (!strcmp(mode, "linger-behind-empty")) {
		/* The daemon may close the connection at the first empty datagram before the
		 * rest are sent (EPIPE): tried again until all three were queued, for a while. */
		Pmc__Status st = PMC__STATUS__INIT;
		Pmc__Request req = PMC__REQUEST__INIT;
		req.body_case = PMC__REQUEST__BODY_STATUS;
		req.status = &st;
		int tries = 0, queued = 0;
		while (!queued && tries++ < 200) {
			int lsn = -1, fd = lingering_socket(30, &lsn);
			if (fd < 0) {
				perror("lingering socket");
				return 1;
			}
			int a = connect_hello(path);
			queued = send(a, "", 0, MSG_NOSIGNAL) == 0 &&
			         send(a, "", 0, MSG_NOSIGNAL) == 0 &&
			         pmc_wire_send(a, &req.base, &fd, 1, 0) == 0;
			if (!queued) { /* ours is the last reference: no lingering here */
				struct linger off = {0};
				setsockopt(fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
			}
			close(fd); /* the daemon's queue holds its last reference, if queued */
			close(a);
			if (!queued) /* else kept: the socket lingers while its peer is there */
				close(lsn);
		}
		printf("queued behind empty datagrams after %d tries: %s\n", tries,
		       queued ? "yes" : "no");
		int b = connect_hello(path);
		return !queued | (status(b, -1) != 0);
	}
	if (!strcmp(mode, "linger-many") || !strcmp(mode, "linger-nested")) {
		/* The lingering socket past the fds a receiver has room for (the kernel would
		 * close it in the receiver's thread), or queued inside a Unix socket sent. */
		int lsn = -1, fd = lingering_socket(30, &lsn), sp[2], fds[70];
		if (fd < 0 || socketpair(AF_UNIX, SOCK_DGRAM, 0, sp) < 0) {
			perror("sockets");
			return 1;
		}
		int a = connect_hello(path);
		bool step = getenv("PMC_TEST_STEP") != NULL;
		char line[16];
		if (step) {
			printf("ready\n");
			if (!fgets(line, sizeof(line), stdin))
				return 1;
		}
		Pmc__Status st = PMC__STATUS__INIT;
		Pmc__Request req = PMC__REQUEST__INIT;
		req.body_case = PMC__REQUEST__BODY_STATUS;
		req.status = &st;
		struct iovec iov = {.iov_base = "x", .iov_len = 1};
		union {
			char b[CMSG_SPACE(sizeof(int) * 70)];
			struct cmsghdr al;
		} ctl;
		struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b};
		size_t n = 1;
		if (!strcmp(mode, "linger-many")) {
			/* Pipe ends, which close at once (files would wait in the closer
			 * thread, and 64 waiting refuse the uid's next connection for a while). */
			for (n = 0; n + 1 < 69; n += 2)
				if (pipe2(fds + n, O_CLOEXEC) < 0)
					return 1;
			fds[n++] = fd;
		} else {
			/* sp[1] holds a datagram carrying the lingering socket: send sp[1]. */
			mh.msg_controllen = CMSG_SPACE(sizeof(int));
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &fd, sizeof(int));
			if (sendmsg(sp[0], &mh, 0) < 0) {
				perror("sendmsg");
				return 1;
			}
			close(fd);
			fds[0] = sp[1];
		}
		/* A Status datagram (packed by hand: pmc_wire_send() sends 64 fds at most). */
		uint8_t buf[64];
		size_t len = pmc__request__pack(&req, buf);
		iov.iov_base = buf, iov.iov_len = len;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET, c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
		if (sendmsg(a, &mh, 0) < 0) {
			perror("sendmsg");
			return 1;
		}
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		close(sp[0]);
		if (step)
			printf("sent\n");
		int b = connect_hello(path);
		return status(b, -1) != 0;
	}
	if (!strcmp(mode, "stale"))
		return mode_stale(path);
	int sock = connect_hello(path);
	if (!strcmp(mode, "self"))
		return reg(sock, my_tid(), pidfd_of(my_tid()), true, "self") != 0;
	if (!strcmp(mode, "self-claim"))
		return reg(sock, my_tid(), -1, false, "self by id") != 0;
	if (!strcmp(mode, "pidfd-of") && argc == 4) {
		pid_t t = atoi(argv[3]);
		int pfd = pidfd_of(t);
		if (pfd < 0) {
			printf("pidfd_open(%d): %s\n", (int)t, strerror(errno));
			return 1;
		}
		return reg(sock, t, pfd, true, "another's pidfd") != EPERM;
	}
	if (!strcmp(mode, "claim") && argc == 4)
		return reg(sock, atoi(argv[3]), -1, false, "claimed id") != EPERM;
	if (!strcmp(mode, "not-pidfd")) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		return reg(sock, my_tid(), fd, true, "/dev/null as pidfd") != EPERM ||
		       status(sock, -1) != 0;
	}
	if (!strcmp(mode, "no-pidfd")) {
		int bad = reg(sock, my_tid(), -1, true, "pidfd named, none sent") != -1;
		int other = connect_hello(path);
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		return bad | (status(other, fd) != -1);
	}
	fprintf(stderr, "usage: see the top of pmc-test-identity.c\n");
	return 2;
}
