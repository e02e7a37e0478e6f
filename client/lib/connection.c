/* libpmcclient's connection to pmcdaemon, owner of G.conn: connecting and saying Hello, the
 * connection made the process's, the first connect (which sets the process up: each owner's
 * part, in order), the state machine's failure edge (pmc__connection_failed_locked()), and the
 * connection's part of fork() handling. Locks and states: client-internal.h. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/client-internal.h"

/* Sends a new SampleRing on @fd, just connected (best effort: datagrams without one), into
 * @o->ring when it went. */
static void
ring_send(int fd, struct pmc_hello *o)
{
	struct pmc_ring rg;
	int rfd;
	if (pmc_ring_create(&rg, PMC_SAMPLE_RING, &rfd) < 0)
		return;
	Pmc__SampleRing sr = PMC__SAMPLE_RING__INIT;
	sr.bytes = PMC_SAMPLE_RING;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_RING;
	req.sample_ring = &sr;
	if (pmc_wire_send(fd, &req.base, &rfd, 1, MSG_DONTWAIT) == 0) {
		o->ring = rg;
		o->sent++;
	} else {
		pmc_ring_unmap(&rg);
	}
	close(rfd);
}

/* Connects to the daemon at @path and says Hello, waiting for its answer within the wait bound
 * when @app, else up to PMC_CALL_TIMEOUT_MS. Return: the socket (non-blocking), or -errno; *@o says
 * what the daemon answered: a failed Hello (o->failed) from a failed connect, the daemon's words
 * when it refused (o->why), and what it takes. Only that is ever sent to it: a daemon of before a
 * field ignores it, but one of before an fd a request carries closes the connection. */
int
pmc__daemon_connect(const char *path, bool app, struct pmc_hello *o)
{
	memset(o, 0, sizeof(*o));
	/* Non-blocking: a daemon whose backlog is full fails the connect at once. */
	int fd = pmc_wire_connect_flags(path, SOCK_NONBLOCK);
	if (fd < 0)
		return fd;
	/* Room for a burst the daemon is behind on (back-pressure, not a loss): best effort. */
	int sndbuf = PMC_SNDBUF;
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.client = "libpmcclient " PMC_VERSION;
	h.call_paths = 1;
	/* The pmcctl run this process runs under: how it finds the process, in whatever pid
	 * namespace (the daemon ignores a tag that is not one). */
	const char *tag = pmc__env_run_tag();
	if (tag)
		h.run_tag = (char *)tag;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	Pmc__Response *resp = NULL;
	int r;
	if (app) {
		/* As pmc_wire_call(), its wait within the wait bound. */
		r = pmc_wire_send(fd, &req.base, NULL, 0, 0);
		o->sent += r == 0;
		bool answered = r == -EPIPE || r == -ECONNRESET; /* its refusal may be there */
		if (r == 0 || answered) {
			int w = answered ? 1 : pmc__wait_fd(fd, POLLIN, false);
			_cleanup_free_ uint8_t *buf = NULL;
			size_t len;
			r = w < 0    ? w
			    : w == 0 ? -ETIMEDOUT
			             : pmc_wire_wait(fd, 0, &buf, &len, NULL, 0, NULL);
			if (r == 0)
				r = pmc_wire_unpack_response(buf, len, &resp);
		}
	} else {
		r = pmc_wire_call(fd, &req, PMC_CALL_TIMEOUT_MS, NULL, 0, NULL, &resp);
		o->sent += r == 0;
	}
	if (r == 0 && resp->error) {
		snprintf(o->why, sizeof(o->why), "%s", resp->message);
		r = -EPROTO;
	}
	const Pmc__HelloReply *hr =
	        r == 0 && resp->body_case == PMC__RESPONSE__BODY_HELLO ? resp->hello : NULL;
	bool table = false;
	uint32_t ring = 0;
	if (hr) {
		ring = hr->sample_ring;
		o->call_paths = hr->call_paths;
		if (hr->max_path_id)
			atomic_store(&G.conn.path_max, hr->max_path_id < PMC_MAX_PATHS - 1
			                                       ? hr->max_path_id
			                                       : PMC_MAX_PATHS - 1);
		table = hr->heads_table;
		/* Every daemon that takes a heads table (5 Dec 2026 on) took pidfds (4 Dec on),
		 * before HelloReply said so; 0.1.0's closes the connection at one. */
		o->pidfd = hr->pidfd || hr->heads_table;
		snprintf(o->version, sizeof(o->version), "%s",
		         hr->daemon_version[0] ? hr->daemon_version : "(unknown version)");
		/* Printed in the lines that name both versions: no control bytes. */
		for (char *c = o->version; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
	}
	if (resp)
		pmc__response__free_unpacked(resp, NULL);
	if (r < 0) {
		pmc_wire_close_draining(fd, 0);
		o->failed = 1;
		return r;
	}
	/* The heads table, before any registration that names a word of it (best effort: a
	 * daemon that does not get it counts as lost what batches announced, as before). */
	if (table) {
		o->heads = pmc__heads_send(fd);
		o->sent += o->heads;
	}
	/* The ring, before anything that goes in it (best effort: datagrams without one). */
	if (ring >= PMC_SAMPLE_RING && !pmc__env_no_ring())
		ring_send(fd, o);
	return fd;
}

void
pmc__connection_set_locked(int fd, const struct pmc_hello *h)
{
	G.conn.fd = fd;
	G.conn.n++;
	G.conn.room_late = 0; /* a new connection's queue is empty */
	G.conn.call_paths = h->call_paths;
	G.conn.heads = h->heads;
	G.conn.takes_pidfd = h->pidfd;
	G.conn.ring = h->ring;
	G.conn.ring_seen = UINT64_MAX;
	G.conn.sent = h->sent;
	G.conn.wait_ring = 0;
	G.conn.ring_err = 0;
	G.conn.wake_owed = 0;
	memcpy(G.conn.daemon_version, h->version, sizeof(G.conn.daemon_version));
}

/* Called with G.conn.lock held. */
void
pmc__connect_locked(void)
{
	if (atomic_load(&G.conn.state) != ST_NONE)
		return;
	static int once;
	if (!once) {
		/* The first time: the environment, then each owner sets its member up. */
		once = 1;
		if (!pmc__env_read()) {
			atomic_store(&G.conn.state, ST_OFF);
			return;
		}
		pmc__intern_init();
		pmc__service_init();
		pmc__heads_init();
		pmc__threads_init();
		pmc__fork_init();
		atexit(pmc__atexit);
	}
	const char *path = pmc__env_socket();
	G.conn.pid = getpid();

	struct pmc_hello h;
	/* An application's thread waits for Hello as for any answer (the wait bound). */
	int fd = pmc__daemon_connect(path, true, &h);
	if (fd < 0 && h.failed && *h.why) {
		/* It answered no (a limit, another protocol): asking again would only be
		 * refused again. */
		pmc__warn_once(
		        "profiling disabled: pmcdaemon at %s refused libpmcclient " PMC_VERSION
		        ": %s",
		        path, h.why);
		atomic_store(&G.conn.state, ST_OFF);
		return;
	}
	if (fd < 0) {
		/* Not up yet, or not answering: the background thread connects once it is. */
		int bg = pmc__service_start_locked() == 0;
		if (!h.failed)
			pmc__warn_once(
			        "profiling disabled: cannot connect to pmcdaemon at %s: %s (is "
			        "pmcdaemon running? set PMC_SOCKET, or PMC_DISABLE=1 to silence "
			        "this)%s",
			        path, strerror(-fd),
			        bg ? "; profiling starts when it comes up" : "");
		else
			pmc__warn_once("profiling disabled: no answer from pmcdaemon at %s: %s%s",
			               path, strerror(-fd),
			               bg ? "; profiling starts when it answers" : "");
		atomic_store(&G.conn.state, bg ? ST_LOST : ST_OFF);
		return;
	}
	pmc__connection_set_locked(fd, &h);
	atomic_store(&G.conn.state, ST_ON);
	(void)pmc__service_start_locked();
}

/* Called with G.conn.lock held after a send failed with @r. A full queue (-EAGAIN) only
 * delays the samples; a daemon that went away is reconnected in the background, so
 * that no region ever waits for it. */
void
pmc__connection_failed_locked(int r)
{
	if (r == -EAGAIN || r == -EMSGSIZE || r == -ENOMEM || atomic_load(&G.conn.state) != ST_ON)
		return;
	if (r != -ECONNRESET && r != -EPIPE) {
		/* Given up while the daemon may still serve it (no answer in time): at the
		 * hang-up it counts as lost what each thread said it held. Those are not sent
		 * again, so that none is counted twice. */
		struct pmc_thread *t;
		pmc_list_for_each(t, &G.threads.list, link)
			if (t->conn == G.conn.n && t->announced > atomic_load(&t->tail))
				atomic_store_explicit(&t->tail, t->announced, memory_order_release);
		/* The heads table says so (word 0), before the hang-up: the daemon then counts
		 * what the batches announced, not the threads' heads, whose later samples go on
		 * the next connection. */
		if (G.conn.heads)
			pmc__heads_give_up();
	}
	/* What the daemon queued and nobody read: its fds closed where no close can hold
	 * this thread (a hostile daemon's lingering socket, a file that never flushes). A
	 * number that is no longer the library's socket (EBADF, ENOTSOCK: the application
	 * closed it, and may have opened something else there) is left alone. */
	if (r != -EBADF && r != -ENOTSOCK)
		pmc_wire_close_draining(G.conn.fd, 0);
	G.conn.fd = -1;
	/* Under the lock: a thread waiting for room in it (unlocked) looks at it under the lock. */
	pmc_ring_unmap(&G.conn.ring);
	G.conn.heads = 0; /* the next connection says whether its daemon has the table */
	G.reg.late = 0;   /* its reply went with the connection */
	G.conn.wake_owed = 0;
	atomic_store(&G.conn.state, ST_LOST);
	if (pmc__service_start_locked() == 0)
		pthread_cond_signal(&G.service.wake);
}

/* The child shares the parent's socket and counts nothing of its own: start over lazily,
 * with a new connection (and fresh registrations, threads.c). */
void
pmc__conn_fork_child(void)
{
	if (G.conn.fd >= 0)
		close(G.conn.fd);
	G.conn.fd = -1;
	/* The parent's ring is the parent's: the child's mapping of it goes, unread by it. */
	pmc_ring_unmap(&G.conn.ring);
	G.conn.heads = 0;
	G.conn.wake_owed = 0;
	pthread_mutex_init(&G.conn.lock, NULL);
	/* The child's wait bound is its own, whole (wait.c). */
	G.conn.room_late = 0;
	if (atomic_load(&G.conn.state) == ST_ON || atomic_load(&G.conn.state) == ST_LOST)
		atomic_store(&G.conn.state, ST_NONE);
}

int
pmc__send_fds_locked(const ProtobufCMessage *msg, const int *fds, size_t n_fds)
{
	int r = pmc_wire_send(G.conn.fd, msg, fds, n_fds, MSG_DONTWAIT);
	if (r == 0)
		G.conn.sent++;
	else if (r == -EAGAIN)
		G.conn.wait_ring = 0;
	return r;
}

/* A send's -errno that says the daemon is gone (its end closed): nothing it has not read of
 * the ring will be. */
static bool
daemon_gone(int err)
{
	return err == -EPIPE || err == -ECONNRESET || err == -ECONNREFUSED || err == -ENOTCONN;
}

/* A send's -errno that may pass: memory or buffers short for now. */
static bool
send_transient(int err)
{
	return err == -ENOBUFS || err == -ENOMEM;
}

/* A RingWake: the daemon may have read every frame and gone idle. A full socket needs none
 * (the daemon reads the ring as it reads the socket). Return: 0, or the send's -errno. */
static int
ring_wake_locked(void)
{
	Pmc__RingWake w = PMC__RING_WAKE__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_RING_WAKE;
	req.ring_wake = &w;
	int r = pmc__send_fds_locked(&req.base, NULL, 0);
	return r == -EAGAIN ? 0 : r;
}

/* A RingWake that failed with @w, sorted. Memory or buffers short: the daemon, alive, may be
 * reading the frame already; the wake is owed (the next send, or the background thread, woken
 * for it). Anything else gives the connection up at the next send (G.conn.ring_err): a daemon
 * gone, however said, as a hang-up (-EPIPE: nothing counted lost at the daemon, the samples
 * sent again on the next connection); a socket no longer the library's (EBADF, ENOTSOCK) as
 * itself, the daemon alive. Return: -EPIPE where the daemon is gone, else @w. */
static int
wake_failed_locked(int w)
{
	if (send_transient(w)) {
		G.conn.wake_owed = 1;
		pthread_cond_signal(&G.service.wake); /* its wait bounded now (send.c) */
		return w;
	}
	return G.conn.ring_err = daemon_gone(w) ? -EPIPE : w;
}

int
pmc__wake_owed_locked(void)
{
	if (!G.conn.wake_owed || !G.conn.ring.hdr)
		return 0;
	G.conn.wake_owed = 0;
	int w = ring_wake_locked();
	return w ? wake_failed_locked(w) : 0;
}

int
pmc__send_locked(const uint8_t *buf, size_t len)
{
	if (G.conn.ring_err)
		return G.conn.ring_err;
	if (!G.conn.ring.hdr) {
		if (len > WIRE_MAX_DATAGRAM)
			return -EMSGSIZE;
		for (;;) {
			if (send(G.conn.fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) {
				G.conn.sent++;
				G.conn.room_late = 0; /* the daemon takes datagrams again */
				return 0;
			}
			if (errno == EAGAIN)
				G.conn.wait_ring = 0;
			if (errno != EINTR)
				return -errno;
		}
	}
	/* A daemon that read nothing since the last look, or read everything (it may be idle),
	 * may have died (a frame put then would be lost unsaid, where a send fails): its socket
	 * is looked at (no event asked for: poll() says a hang-up only). One that is reading
	 * frames is alive: no system call. */
	uint64_t tail = pmc_ring_tail(&G.conn.ring);
	if (tail == G.conn.ring_seen || tail == G.conn.ring.pos) {
		struct pollfd p = {.fd = G.conn.fd, .events = 0};
		if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR)))
			return -EPIPE;
	}
	G.conn.ring_seen = tail;
	if (pmc__wake_owed_locked() < 0 && G.conn.ring_err)
		return G.conn.ring_err;
	bool wake;
	uint64_t start = G.conn.ring.pos;
	int r = pmc_ring_put(&G.conn.ring, G.conn.sent, buf, len, &wake);
	if (r == 0) {
		G.conn.room_late = 0;
		int w = wake ? ring_wake_locked() : 0;
		/* The daemon, idle, is gone (or stopping, or it dropped the connection): the
		 * frame taken back is not sent, as a datagram would not have been; one it may read
		 * (a stopping daemon closed the ring first) stays sent. Any other failure keeps
		 * the frame (wake_failed_locked()). */
		if (w && wake_failed_locked(w) == -EPIPE && pmc_ring_retract(&G.conn.ring, start))
			return -EPIPE;
	} else if (r == -EAGAIN) {
		G.conn.wait_ring = 1;
	}
	return r;
}

int
pmc__send_msg_locked(const ProtobufCMessage *msg)
{
	uint8_t stack[4096];
	size_t len = protobuf_c_message_get_packed_size(msg);
	uint8_t *buf = len <= sizeof(stack) ? stack : malloc(len);
	if (!buf)
		return -ENOMEM;
	protobuf_c_message_pack(msg, buf);
	int r = pmc__send_locked(buf, len);
	if (buf != stack)
		free(buf);
	return r;
}
