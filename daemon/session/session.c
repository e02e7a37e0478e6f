/* session: decode and dispatch each datagram of one client connection. A datagram
 * that does not decode, names no request, or breaks the protocol closes this
 * connection only; a request the daemon refuses gets an error Response. */
#include "session/session-internal.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <linux/magic.h>
#include <linux/perf_event.h>
#include <linux/sockios.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "common/cgroup.h"
#include "common/fdcheck.h"
#include "common/util.h"
#include "kernel/creds.h"
#include "kernel/log.h"
#include "kernel/perf.h"
#include "model/batch.h"
#include "model/share.h"
#include "session/server.h"
#include "wire/wire.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
/* Fds a uid sent that still wait to be closed (fdcheck) before its connections are
 * refused. */
#define SESSION_MAX_PENDING_CLOSES 64

/* Bytes of replies a client may leave unread before its connection is closed. */
#define SESSION_MAX_UNREAD (256 * 1024)

/* Samples not counted: the daemon's figure, the figure of the uid they came from, and its
 * process's for reason @why. */
void
session_count_dropped(struct session *s, uint64_t n, enum pmc_loss why)
{
	s->srv->model.dropped = util_sat_add(s->srv->model.dropped, n);
	s->user->dropped = util_sat_add(s->user->dropped, n);
	if (s->proc)
		s->proc->dropped[why] = util_sat_add(s->proc->dropped[why], n);
}

uint64_t
session_claim(struct session *s, uint64_t n)
{
	uint64_t room = SESSION_MAX_CLAIMED - s->claimed;

	if (n > room) {
		/* Once per connection: its lies take no more of the log than that. */
		if (!s->warned_claim)
			log_warn_limited("pid %d (uid %d): claims more dropped or lost samples "
			                 "than a connection may (%llu): the rest is not counted",
			                 (int)s->pid, (int)s->uid,
			                 (unsigned long long)SESSION_MAX_CLAIMED);
		s->warned_claim = true;
		n = room;
	}
	s->claimed += n;
	return n;
}

void
session_sndbuf_fit(struct session *s, size_t len)
{
	/* The send buffer grows to what a reply needs, no further (root may force it past
	 * wmem_max), and only for a connection that asks for such a reply. */
	size_t need = len + 4096;
	if (need > s->sndbuf && need <= 2 * (size_t)WIRE_MAX_DATAGRAM) {
		int sz = (int)need;
		if (setsockopt(s->fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) == 0 ||
		    setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz)) == 0)
			s->sndbuf = need;
	}
}

/* A client that asks and never reads pins the daemon's replies in kernel memory: at most
 * SESSION_MAX_UNREAD bytes of them, then its connection is closed (-ENOBUFS). */
static int
reply_room(struct session *s)
{
	int queued = 0;
	if (ioctl(s->fd, SIOCOUTQ, &queued) == 0 && queued > SESSION_MAX_UNREAD) {
		log_warn_limited("pid %d (uid %d): leaves %d bytes of its replies unread: closing "
		                 "the connection",
		                 (int)s->pid, (int)s->uid, queued);
		return -ENOBUFS;
	}
	return 0;
}

/* What a send of a reply returned (@r), as session_reply() says it. */
static int
reply_sent(struct session *s, int r)
{
	if (r == -EAGAIN) {
		log_warn_limited("pid %d (uid %d): leaves its replies unread (its socket is full): "
		                 "closing the connection",
		                 (int)s->pid, (int)s->uid);
		return -ENOBUFS;
	}
	if (r == -EPIPE || r == -ECONNRESET) {
		/* The client closed its end (its process ended while a request waited): the
		 * batches it sent before are still in its socket, counted as they are read up to
		 * the hang-up, whose unsent samples count as lost. Closing here dropped them
		 * unsaid (e2e-burst under load: a late registration's reply, then nothing of
		 * that process counted, nothing lost; issue 35). */
		log_debug("pid %d: cannot send reply: %s; reading what it sent before", (int)s->pid,
		          strerror(-r));
		s->peer_gone = true;
		return 0;
	}
	if (r < 0)
		log_debug("pid %d: cannot send reply: %s", (int)s->pid, strerror(-r));
	return r;
}

int
session_reply(struct session *s, Pmc__Response *resp, const int *fds, size_t n_fds)
{
	if (s->peer_gone)
		return 0;
	/* Seen empty while this request is handled (its fds settled): no look again. */
	int r = s->outq_empty ? 0 : reply_room(s);
	s->outq_empty = false;
	if (r < 0)
		return r;
	session_sndbuf_fit(s, pmc__response__get_packed_size(resp));
	r = reply_sent(s, pmc_wire_send(s->fd, &resp->base, fds, n_fds, MSG_DONTWAIT));
	if (r >= 0 && n_fds)
		session_inflight_sent(s, n_fds);
	return r;
}

int
session_send_packed(struct session *s, const uint8_t *buf, size_t len)
{
	if (s->peer_gone)
		return 0;
	int r = reply_room(s);
	s->outq_empty = false;
	if (r < 0)
		return r;
	session_sndbuf_fit(s, len);
	ssize_t n = send(s->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	return reply_sent(s, n < 0 ? -errno : 0);
}

int
session_reply_error(struct session *s, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (s->no_reply) {
		/* Nowhere to say it: the client is told by the closed connection. */
		log_warn_limited("pid %d: refused, closing the connection: %s", (int)s->pid, msg);
		return err == EAGAIN || err == 0 ? -EPROTO : -err;
	}
	log_debug("pid %d: refused: %s", (int)s->pid, msg);
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.error = err;
	resp.message = msg;
	return session_reply(s, &resp, NULL, 0);
}

void
session_tag_process(struct session *s)
{
	if (s->proc && !s->proc->run_tag[0] && s->run_tag[0])
		memcpy(s->proc->run_tag, s->run_tag, sizeof(s->run_tag));
}

static int
handle_hello(struct session *s, const Pmc__Request *req)
{
	const Pmc__Hello *h = req->hello;
	if (h->version != PMC__PROTOCOL_VERSION__PROTOCOL_VERSION) {
		session_reply_error(s, EPROTO,
		                    "protocol version %u is not supported (pmcdaemon " PMC_VERSION
		                    " speaks %d)",
		                    h->version, PMC__PROTOCOL_VERSION__PROTOCOL_VERSION);
		return -EPROTO;
	}
	s->hello = 1;
	s->call_paths = h->call_paths;
	/* A tag that is not one is ignored: it only ever selects the process's own figures. */
	size_t tl = strlen(h->run_tag);
	if (tl < sizeof(s->run_tag) &&
	    strspn(h->run_tag,
	           "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-") == tl)
		memcpy(s->run_tag, h->run_tag, tl + 1);
	if (s->hello_ev)
		event_del(s->hello_ev);
	Pmc__HelloReply hr = PMC__HELLO_REPLY__INIT;
	hr.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	hr.daemon_version = PMC_VERSION;
	hr.call_paths = s->call_paths;
	hr.max_path_id = s->call_paths ? session_batch_max_path(s) : 0;
	hr.heads_table = 1;
	hr.pidfd = 1;
	hr.open_command = 1;
	hr.sample_ring = SESSION_RING_MAX;
	Pmc__Response resp = PMC__RESPONSE__INIT;
	resp.body_case = PMC__RESPONSE__BODY_HELLO;
	resp.hello = &hr;
	return session_reply(s, &resp, NULL, 0);
}

/* Whether the fd the request carried is a memfd fit to map, of at least @size bytes: sealed
 * against shrinking (F_GET_SEALS answers for shmem and hugetlbfs alone, without calling into
 * any file system, so this never waits on a FUSE server; a file that cannot shrink cannot take
 * the mapping's pages away), on shmem. Return: NULL, or what is wrong, in words. */
static const char *
memfd_unfit(const struct session *s, uint64_t size)
{
	struct stat st;
	struct statfs sf;
	int seals = fcntl(s->rx_fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return "not a memfd sealed against shrinking";
	/* shmem, not hugetlbfs, whose pages are taken at the first touch and can fail it
	 * (SIGBUS) when the pool is empty. */
	if (fstatfs(s->rx_fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC)
		return "not a plain memfd (hugetlbfs?)";
	if (fstat(s->rx_fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < size)
		return "smaller than it says";
	return NULL;
}

/* The client's heads table: a memfd fit to map (memfd_unfit()) of the size it says, mapped
 * read-only. Anything else closes the connection. */
static int
handle_heads_table(struct session *s, const Pmc__Request *req)
{
	uint32_t n = req->heads_table->slots;
	const char *bad = NULL;
	if (s->heads)
		bad = "a second heads table";
	else if (!n || n > SESSION_MAX_HEADS)
		bad = "a heads table of no size or too large";
	else
		bad = memfd_unfit(s, (uint64_t)n * sizeof(uint64_t));
	if (bad) {
		log_warn_limited("pid %d: heads table: %s: closing the connection", (int)s->pid,
		                 bad);
		return -EBADMSG;
	}
	void *p = mmap(NULL, (size_t)n * sizeof(uint64_t), PROT_READ, MAP_SHARED, s->rx_fd, 0);
	if (p == MAP_FAILED) {
		log_warn_limited("pid %d: cannot map its heads table: %s (its losses at exit are "
		                 "what its batches said)",
		                 (int)s->pid, strerror(errno));
		return 0;
	}
	s->heads = p;
	s->n_heads = n;
	s->heads_given_up = req->heads_table->given_up;
	return 0;
}

/* The client's SampleRing: a memfd fit to map (memfd_unfit()) of a size HelloReply allowed,
 * mapped read-write. Anything else closes the connection; a ring that cannot be mapped too
 * (the client would put frames in it that nobody reads). */
static int
handle_sample_ring(struct session *s, const Pmc__Request *req)
{
	uint32_t bytes = req->sample_ring->bytes;
	const char *bad = NULL;
	if (s->ring.hdr)
		bad = "a second sample ring";
	else if (bytes < RING_MIN_BYTES || bytes > SESSION_RING_MAX || (bytes & (bytes - 1u)))
		bad = "a sample ring of a size not offered";
	else
		bad = memfd_unfit(s, (uint64_t)RING_HEADER_BYTES + bytes);
	if (bad) {
		log_warn_limited("pid %d: sample ring: %s: closing the connection", (int)s->pid,
		                 bad);
		return -EBADMSG;
	}
	int r = pmc_ring_map(&s->ring, s->rx_fd, bytes, SESSION_RING_MAX);
	if (r < 0)
		log_warn_limited("pid %d: cannot map its sample ring: %s: closing the connection",
		                 (int)s->pid, strerror(-r));
	else
		log_debug("pid %d (uid %d): its batches come in a sample ring of %u bytes",
		          (int)s->pid, (int)s->uid, bytes);
	return r < 0 ? -ENOMEM : 0;
}

/* The client put a frame in its ring while this daemon may have been idle: reading this
 * datagram reads the ring too (session_dispatch_one()). */
static int
handle_ring_wake(struct session *s, const Pmc__Request *req)
{
	(void)s;
	(void)req;
	return 0;
}

/* The pidfd names the very process that connected: once it has exited, its pid may
 * belong to another process, whose threads must not be counted for this peer. */
bool
session_peer_alive(struct session *s)
{
	struct pollfd p = {.fd = s->pidfd, .events = POLLIN};
	return poll(&p, 1, 0) == 0;
}

/* Read @o's queued requests: up to @max datagrams, until @deadline (looked at every 16).
 * Return: what the last session_dispatch_one() said (-EAGAIN: its queue is empty), with
 * *@n the datagrams read. */
static int
drain_one(struct session *o, unsigned max, uint64_t deadline, unsigned *n)
{
	int r = 0;
	unsigned i = 0;
	while (i < max && !o->qs && !o->def && !o->batch_req) {
		r = session_dispatch_one(o);
		if (r < 0)
			break;
		/* The clock read every 16 datagrams: a batch takes a few microseconds. */
		if (++i % 16 == 0 && util_now_ns(CLOCK_MONOTONIC) > deadline)
			break;
	}
	session_batch_flush();
	*n = i;
	return r;
}

/* Read what other connections have already queued, so that a query made after a
 * client exited sees that client's last batch (the kernel queued it before the
 * client's exit, but the loop may not have read it yet; the loop's turns serve the
 * caller's request ahead of such batches). Bounded: only what is queued now, never
 * recursively, only the connections of the uid whose figures the caller sees (@self's, or
 * all for an admin), and never past @budget_ns (checked every 16 datagrams). The
 * connections whose process has exited first, each read to the end of its queue
 * (SESSION_DRAIN_GONE datagrams in all, over every drain: they can send no more), then,
 * with the time left, the live ones (best effort: their flood never delays the answer).
 * @self NULL: every connection, no time bound.
 * Return: true when no exited connection has anything left to read; false when the time
 * ran out first (the caller's request waits, and the drain goes on at its next turn). */
bool
session_drain_others(struct server *srv, struct session *self, uint64_t budget_ns)
{
	if (srv->draining)
		return true;
	srv->draining = 1;
	uint64_t deadline = self ? util_now_ns(CLOCK_MONOTONIC) + budget_ns : UINT64_MAX;
	uint64_t slice_end = srv->deadline_ns;
	srv->deadline_ns = deadline;
	bool done = true;
	for (int pass = 0; pass < 2; pass++) {
		struct session *o, *next;
		pmc_list_for_each_safe(o, next, &srv->sessions, link) {
			/* One that streams a reply reads nothing until it is sent: nor from here,
			 * once a Query read here has started one; one whose request waits for such
			 * a drain itself reads nothing before it. */
			if (o == self || o->qs || o->held || o->turns->defining ||
			    (self && !self->admin && o->uid != self->uid))
				continue;
			bool gone = o->pidfd >= 0 && !session_peer_alive(o);
			if (gone != (pass == 0) || (gone && o->gone_read >= SESSION_DRAIN_GONE))
				continue;
			if (util_now_ns(CLOCK_MONOTONIC) > deadline) {
				done = done && !gone;
				continue;
			}
			unsigned n;
			int r = drain_one(
			        o, gone ? SESSION_DRAIN_GONE - o->gone_read : SESSION_BURST * 16,
			        deadline, &n);
			if (gone) {
				o->gone_read += n;
				/* Its queue not read to its end: time ran out (a streamed reply
				 * stops it for good: what it sends waits for that). */
				if (r >= 0 && !o->qs && o->gone_read < SESSION_DRAIN_GONE)
					done = false;
			}
			if (r < 0 && r != -EAGAIN)
				session_close(o, r);
			else if (o->def || o->batch_req || session_ring_ready(o))
				session_ready(o); /* its Define, a batch's names, its ring: in its
				                   * slices */
		}
	}
	srv->deadline_ns = slice_end;
	srv->draining = 0;
	return done;
}

typedef int (*handler_fn)(struct session *s, const Pmc__Request *req);

static const struct {
	handler_fn fn;
	bool needs_hello;
} handlers[] = {
        [PMC__REQUEST__BODY_HELLO] = {handle_hello, false},
        [PMC__REQUEST__BODY_REGISTER_THREAD] = {session_register_handle, true},
        [PMC__REQUEST__BODY_SAMPLE_BATCH] = {session_batch_handle, true},
        [PMC__REQUEST__BODY_THREAD_EXIT] = {session_register_thread_exit, true},
        [PMC__REQUEST__BODY_QUERY] = {session_query_handle, true},
        [PMC__REQUEST__BODY_RESET] = {session_query_reset, true},
        [PMC__REQUEST__BODY_STATUS] = {session_query_status, true},
        [PMC__REQUEST__BODY_LIST_EVENTS] = {session_query_list_events, true},
        [PMC__REQUEST__BODY_THREAD_FLOOR] = {session_register_thread_floor, true},
        [PMC__REQUEST__BODY_DEFINE] = {session_batch_define, true},
        [PMC__REQUEST__BODY_OPEN_COMMAND] = {session_command_open, true},
        [PMC__REQUEST__BODY_HEADS_TABLE] = {handle_heads_table, true},
        [PMC__REQUEST__BODY_SAMPLE_RING] = {handle_sample_ring, true},
        [PMC__REQUEST__BODY_RING_WAKE] = {handle_ring_wake, true},
};

/* Where handle_datagram()'s bytes come from. */
enum rx_from {
	RX_SOCKET,      /* a datagram */
	RX_RING_COPY,   /* a frame of the connection's ring, copied */
	RX_RING_SHARED, /* a frame of its ring where it lies: only a plain batch is read there */
};
/* handle_datagram() of RX_RING_SHARED bytes that are no plain batch: copy them, then again. */
#define RX_COPY_FIRST 1000

/* Handle the datagram @buf (@len bytes) with the @n_fds @fds (taken) it carried, or a frame of
 * its ring (@from); @drained: what other connections queued was read just now (a request that
 * waited for that). Returns 0 to go on reading, SESSION_STEP_HELD when the request waits for
 * exited clients' queues, RX_COPY_FIRST (RX_RING_SHARED only: nothing done), < 0 to drop the
 * peer. */
static int
handle_datagram(struct session *s, const uint8_t *buf, size_t len, int *fds, size_t n_fds,
                bool drained, enum rx_from from)
{
	bool from_ring = from != RX_SOCKET;
	/* The hot request, a plain SampleBatch, is decoded by hand, its long columns read in
	 * place when it is counted; the rest by protobuf-c. */
	Pmc__Request *req = NULL, fast = PMC__REQUEST__INIT;
	Pmc__SampleBatch fast_batch;
	struct batch_cols cols;
	int r = 0;
	s->rx_cols = NULL;
	s->outq_empty = false;
	if (!n_fds && (from == RX_RING_SHARED ? batch_scan_shared(buf, len, &fast_batch, &cols)
	                                      : batch_scan(buf, len, &fast_batch, &cols)) == 0) {
		fast.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
		fast.sample_batch = &fast_batch;
		req = &fast;
		s->rx_cols = cols.in_place ? &cols : NULL;
	} else if (from == RX_RING_SHARED) {
		return RX_COPY_FIRST; /* protobuf-c reads some bytes twice: not where they lie */
	} else if ((r = pmc_wire_unpack_request(buf, len, &req)) < 0) {
		if (n_fds)
			pmc_fdcheck_close(fds[0], (unsigned)s->uid);
		log_warn_limited("pid %d: malformed request (%zu bytes): closing the connection",
		                 (int)s->pid, len);
		return r;
	}
	unsigned c = req->body_case;
	/* The tallies a batch left unfolded (ingest.h), folded in before any other request. */
	if (c != PMC__REQUEST__BODY_SAMPLE_BATCH)
		session_batch_flush();
	/* Its class in the loop's queue: a connection that has sent batches is bulk for good
	 * (its later requests are behind its batches in its socket anyway; and switching back
	 * would let a flood earn control's turns with a Status now and then, or, in a burst
	 * of registrations, take bulk's turns from connections whose registration waits
	 * behind their batches), the others (a new client's Hello and first registration,
	 * pmcctl) control. */
	s->bulk |= c == PMC__REQUEST__BODY_SAMPLE_BATCH || c == PMC__REQUEST__BODY_DEFINE;
	/* Only a RegisterThread that says so, an OpenCommand, a HeadsTable and a SampleRing
	 * carry an fd: exactly one. */
	bool wants_fd = (c == PMC__REQUEST__BODY_REGISTER_THREAD && req->register_thread->pidfd) ||
	                c == PMC__REQUEST__BODY_OPEN_COMMAND ||
	                c == PMC__REQUEST__BODY_HEADS_TABLE || c == PMC__REQUEST__BODY_SAMPLE_RING;
	/* A reply that counts what exited clients sent last reads their queues first: a
	 * budget at a time, the request waiting in between (the other uids' turns go on). */
	bool drains = !drained && !s->srv->draining &&
	              (c == PMC__REQUEST__BODY_QUERY || c == PMC__REQUEST__BODY_STATUS ||
	               c == PMC__REQUEST__BODY_RESET);
	s->rx_fd = n_fds ? fds[0] : -1;
	/* A ring holds only what needs neither an fd nor a reply. */
	bool ringable = c == PMC__REQUEST__BODY_SAMPLE_BATCH || c == PMC__REQUEST__BODY_DEFINE ||
	                c == PMC__REQUEST__BODY_THREAD_FLOOR || c == PMC__REQUEST__BODY_THREAD_EXIT;
	if (from_ring && !ringable) {
		log_warn_limited("pid %d: a request its sample ring cannot carry (body %u): "
		                 "closing the connection",
		                 (int)s->pid, c);
		r = -EBADMSG;
	} else if (wants_fd != (n_fds == 1)) {
		log_warn_limited(
		        "pid %d: %s: closing the connection", (int)s->pid,
		        !wants_fd ? "unexpected file descriptors"
		        : c == PMC__REQUEST__BODY_REGISTER_THREAD
		                ? "a registration that names a pidfd carries none"
		                : "a request that must carry one file descriptor carries none");
		r = -EBADMSG;
	} else if (c >= ARRAY_SIZE(handlers) || !handlers[c].fn) {
		r = -EBADMSG;
	} else if (handlers[c].needs_hello && !s->hello) {
		log_warn_limited("pid %d: request before Hello: closing the connection",
		                 (int)s->pid);
		r = -EPROTO;
	} else if (drains &&
	           !session_drain_others(s->srv, s,
	                                 c == PMC__REQUEST__BODY_STATUS ? DRAIN_STATUS_NS
	                                                                : DRAIN_BUDGET_NS)) {
		/* Read again once they are (it carries no fd: checked above), from a copy made
		 * anew: the drain read other datagrams into @buf (the server's), not into @req. */
		size_t held_len = pmc__request__get_packed_size(req);
		s->held = malloc(held_len ? held_len : 1);
		if (!s->held) {
			r = -ENOMEM;
		} else {
			s->held_len = pmc__request__pack(req, s->held);
			log_debug("pid %d (uid %d): its request waits while exited clients' queues "
			          "are read, a slice at a time",
			          (int)s->pid, (int)s->uid);
			r = SESSION_STEP_HELD;
		}
	} else {
		r = handlers[c].fn(s, req);
	}
	if (r == SESSION_BATCH_MORE) {
		/* Its names go on in its next slices (a batch with names is decoded by
		 * protobuf-c: the request is its own), the connection read no further meanwhile. */
		s->batch_req = req;
		r = 0;
	}
	if (s->rx_fd >= 0) {
		pmc_fdcheck_close(TAKE_FD(s->rx_fd), (unsigned)s->uid);
		/* Its uid's fds wait to be closed (a file whose FUSE server does not answer):
		 * no more from this connection, and none from a new one (session_new()). */
		if (r == 0 && pmc_fdcheck_pending((unsigned)s->uid) >= SESSION_MAX_PENDING_CLOSES)
			r = -EMFILE;
	}
	s->rx_cols = NULL;
	if (req != &fast && req != s->def && req != s->batch_req)
		pmc__request__free_unpacked(req, NULL);
	return r == -EAGAIN ? -EPIPE : r;
}

/* The request that waits for exited clients' queues (s->held): one more budget of reading
 * them, then, once they are read, the request handled. */
static int
held_step(struct session *s)
{
	if (!session_drain_others(s->srv, s, DRAIN_BUDGET_NS)) {
		s->user->drain_slices = util_sat_add(s->user->drain_slices, 1);
		return SESSION_STEP_HELD;
	}
	_cleanup_free_ uint8_t *buf = TAKE_PTR(s->held);
	int r = handle_datagram(s, buf, s->held_len, NULL, 0, true, RX_SOCKET);
	log_debug("pid %d (uid %d): its request is answered, the exited clients' queues read",
	          (int)s->pid, (int)s->uid);
	return r;
}

/* @s's next frame into *@f where it may be read now: 0; -EAGAIN where there is none, or the
 * datagrams it comes after (its `after`) are not read yet; -EBADMSG for a broken ring. */
static int
ring_next(struct session *s, struct pmc_ring_frame *f)
{
	int r = pmc_ring_peek(&s->ring, f);
	return r == 0 && f->after > s->rx_count ? -EAGAIN : r;
}

bool
session_ring_ready(struct session *s)
{
	struct pmc_ring_frame f;
	/* A datagram parked behind frames is ready (session_dispatch_one()). After a fence
	 * (pmc_ring_idle()): a frame put meanwhile is seen, or woken for. A frame whose datagrams
	 * have not come is not ready: they wake the connection. A broken ring is (its read closes
	 * the connection). */
	if (s->parked || s->parked_err)
		return true;
	if (!s->ring.hdr || pmc_ring_idle(&s->ring))
		return false;
	return ring_next(s, &f) != -EAGAIN;
}

/* The next frame of @s's ring, copied and handled, unless its datagrams come first (its
 * `after`) or there is none: then 1. Else handle_datagram()'s return. */
static int
ring_step(struct session *s)
{
	struct pmc_ring_frame f;
	int r = ring_next(s, &f);
	if (r == -EAGAIN)
		return 1;
	if (r < 0 || f.len > SERVER_MAX_REQUEST) {
		log_warn_limited("pid %d: its sample ring's words or frames are impossible: "
		                 "closing the connection",
		                 (int)s->pid);
		return -EBADMSG;
	}
	s->rx_bytes += f.len;
	/* A plain batch is read where it lies (batch_scan_shared(): its bytes each read once, its
	 * columns in fixed form counted there); anything else copied first, the client being free
	 * to write the frame's bytes while they are decoded. The frame stays the reader's until
	 * it is consumed. */
	r = handle_datagram(s, f.data, f.len, NULL, 0, false, RX_RING_SHARED);
	if (r != RX_COPY_FIRST) {
		pmc_ring_consume(&s->ring, &f);
		return r;
	}
	memcpy(s->srv->rxbuf, f.data, f.len);
	pmc_ring_consume(&s->ring, &f);
	return handle_datagram(s, s->srv->rxbuf, f.len, NULL, 0, false, RX_RING_COPY);
}

/* The datagram parked behind frames of the ring (session_dispatch_one()), handled now that
 * they are read. */
static int
parked_step(struct session *s)
{
	_cleanup_free_ uint8_t *buf = TAKE_PTR(s->parked);
	int fds[1] = {s->parked_fd};
	size_t n_fds = s->parked_fd >= 0;
	s->parked_fd = -1;
	s->rx_count++;
	return handle_datagram(s, buf, s->parked_len, fds, n_fds, false, RX_SOCKET);
}

/* A read of @s's socket that failed with @err: said where the client is at fault; @err. */
static int
recv_failed(struct session *s, ssize_t err)
{
	if (err == -EMSGSIZE)
		log_warn_limited("pid %d: request over %u bytes: closing the connection",
		                 (int)s->pid, SERVER_MAX_REQUEST);
	else if (err == -EBADMSG)
		log_warn_limited("pid %d: unexpected file descriptors: closing the connection",
		                 (int)s->pid);
	return (int)err;
}

/* Returns 0 to go on reading, -EAGAIN when drained, SESSION_STEP_HELD when a request waits
 * for exited clients' queues, other < 0 to drop the peer. A connection with a ring: its
 * frames and its datagrams in the order the client sent them (each frame after the datagrams
 * its `after` counts). */
int
session_dispatch_one(struct session *s)
{
	if (s->held)
		return held_step(s);
	/* Its uid's fds wait to be closed (a file whose FUSE server does not answer): what it
	 * sent is not read (its fds would be more to close), its connection is closed (its
	 * socket, with what it queued, goes to its uid's closer: pmc_fdcheck_close()). */
	if (pmc_fdcheck_pending((unsigned)s->uid) >= SESSION_MAX_PENDING_CLOSES) {
		log_warn_limited("pid %d (uid %d): %zu fds its uid sent still wait to be closed: "
		                 "closing the connection",
		                 (int)s->pid, (int)s->uid, pmc_fdcheck_pending((unsigned)s->uid));
		return -EMFILE;
	}
	if (s->ring.hdr) {
		int r = ring_step(s);
		if (r != 1)
			return r;
	}
	if (s->parked)
		return parked_step(s);
	if (s->parked_err)
		return recv_failed(s, s->parked_err);
	int fds[1];
	size_t n_fds = 0;
	ssize_t len;
	/* One fd at most (a RegisterThread's pidfd); more closes the connection. A client that
	 * closed with replies unread leaves its reset pending here, said once before the
	 * datagrams it sent until then: those are read on (once a connection: a hang-up says the
	 * same again). */
	for (;;) {
		len = pmc_wire_recv_from(s->fd, s->srv->rxbuf, SERVER_MAX_REQUEST, fds, 1, &n_fds,
		                         MSG_DONTWAIT, (unsigned)s->uid);
		if (len != -ECONNRESET || s->reset_read)
			break;
		s->reset_read = true;
	}
	/* Its ring looked at again: with nothing queued, before the connection sleeps, after a
	 * fence (ring.h: a frame put meanwhile is seen here, or its client sends a RingWake); at
	 * the client's hang-up (or an error), for the frames it put before it (the kernel's
	 * hang-up orders them before this look): those first. */
	if (len < 0 && s->ring.hdr && (len != -EAGAIN || !pmc_ring_idle(&s->ring))) {
		int r = ring_step(s);
		/* A frame read first: the error of a datagram read and gone (cut, or refused for
		 * its fds) waits until no frame put before that datagram is left. Another (a
		 * hang-up) is read again. */
		if (r == 0 && (len == -EMSGSIZE || len == -EBADMSG))
			s->parked_err = (int)len;
		if (r != 1)
			return r;
	}
	/* A datagram read after a frame put before it was sent (the look above came before the
	 * frame; this read orders it after): parked until such frames are read. */
	struct pmc_ring_frame f;
	if (len > 0 && s->ring.hdr && ring_next(s, &f) == 0) {
		s->parked = malloc((size_t)len);
		if (!s->parked) {
			if (n_fds)
				pmc_fdcheck_close(fds[0], (unsigned)s->uid);
			return -ENOMEM;
		}
		memcpy(s->parked, s->srv->rxbuf, (size_t)len);
		s->parked_len = (size_t)len;
		s->parked_fd = n_fds ? fds[0] : -1;
		s->rx_bytes += (uint64_t)len;
		log_debug("pid %d (uid %d): a datagram read before a frame its client put ahead of "
		          "it: parked until the frame is read",
		          (int)s->pid, (int)s->uid);
		return 0;
	}
	if (len < 0)
		return recv_failed(s, len);
	s->rx_bytes += (uint64_t)len;
	s->rx_count++;
	return handle_datagram(s, s->srv->rxbuf, (size_t)len, fds, n_fds, false, RX_SOCKET);
}

static void
session_on_hello_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	log_warn_limited("pid %d (uid %d): no Hello within %u s (--hello-timeout): closing the "
	                 "connection",
	                 (int)s->pid, (int)s->uid, s->srv->policy.hello_timeout_s);
	session_close(s, -ETIMEDOUT);
}

/* Its requests wait in its socket until its turn: the loop serves every uid in turn. */
static void
session_on_readable(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	event_del(s->ev);
	session_ready(s);
}

void
session_ready(struct session *s)
{
	if (loop_sched_queued(&s->si))
		return;
	enum sched_class cls = s->bulk || s->qs ? SCHED_BULK : SCHED_CONTROL;
	loop_sched_push(&s->srv->sched, &s->turns->sq[cls], cls, &s->si);
	server_kick(s->srv);
}

/* One slice of reading: up to SESSION_BURST requests, until @deadline_ns once it has read
 * SESSION_SLICE_BYTES, and one only
 * past a change of class (a client that turns to bulk goes to the bulk queue). Return: 1
 * when requests may be left, 0 when its socket is drained, or < 0 to close it. */
static int
session_read_slice(struct session *s, uint64_t deadline_ns)
{
	bool bulk = s->bulk;
	uint64_t rx0 = s->rx_bytes;
	for (unsigned i = 0; i < SESSION_BURST; i++) {
		int r = session_dispatch_one(s);
		if (r == -EAGAIN)
			return 0;
		if (r < 0)
			return r;
		if (r == SESSION_STEP_HELD)
			return SESSION_STEP_MORE;
		/* The clock only past SESSION_SLICE_BYTES read: a client's threads blocked on
		 * its full socket get room for many at once (a registration among them), not
		 * for one at a time (under ASan, e2e-burst's registrations waited past the
		 * client's 2 s more often with slices of a datagram or two). */
		/* ... or another connection of its uid took the one Define it may hold (in a
		 * drain this slice made): this one's wait their turn (session_serve()). */
		if (s->qs || s->def || s->batch_req || s->bulk != bulk ||
		    (s->turns->defining && s->turns->defining != s) ||
		    (s->rx_bytes - rx0 >= SESSION_SLICE_BYTES &&
		     util_now_ns(CLOCK_MONOTONIC) >= deadline_ns))
			return 1;
	}
	return 1;
}

void
session_serve(struct session *s, uint64_t deadline_ns)
{
	/* Streaming a reply while others wait: a share of the time since its last slice, so
	 * that a reader of whole queries takes a bounded part of the loop from the connections
	 * sending batches (it gets the loop's whole time while nothing else waits). */
	bool query = s->qs != NULL;
	s->outq_empty = false;
	if (query && s->srv->sched.n) {
		uint64_t now = util_now_ns(CLOCK_MONOTONIC);
		uint64_t share =
		        now > s->qs_yield_ns ? (now - s->qs_yield_ns) / SESSION_QUERY_SHARE : 0;
		deadline_ns = now + share < deadline_ns ? now + share : deadline_ns;
	}
	s->srv->deadline_ns = deadline_ns;
	if (s->turns->defining && s->turns->defining != s) {
		s->def_waits = true; /* defining_end() queues it again */
		return;
	}
	int r = s->def         ? session_batch_define_step(s)
	        : s->batch_req ? session_batch_step(s)
	        : s->qs        ? session_query_step(s, deadline_ns)
	                       : session_read_slice(s, deadline_ns);
	/* Whole figures between slices: what a batch left unfolded (ingest.h) folded in. */
	session_batch_flush();
	if (r < 0) {
		session_close(s, r);
		return;
	}
	if (query)
		s->qs_yield_ns = util_now_ns(CLOCK_MONOTONIC);
	if (r == SESSION_STEP_MORE) {
		session_ready(s);
		return;
	}
	/* Its reply waits for room in the socket (its write event is armed), or all is done:
	 * the next request wakes it. A frame its ring holds wakes nothing: read in its turn. */
	if (s->qs || s->def || s->batch_req)
		return;
	if (session_ring_ready(s))
		session_ready(s);
	else if (event_add(s->ev, NULL) < 0)
		session_close(s, -ENOMEM);
}

/* The daemon stops: its connections close from its side, and the samples their clients hold
 * are not lost but kept for the next daemon. */
static bool stopping;

void
session_drain_all(struct server *srv, bool final)
{
	/* Before a final drain, refuse further datagrams: a client's send then fails and
	 * it keeps the samples for the next daemon, instead of queueing them here to be
	 * dropped unread. */
	stopping |= final;
	struct session *s, *next;
	if (final) {
		/* Likewise its ring: closed, a frame put after this is not sent (its client
		 * keeps it), and every frame put before is read below (ring.h). */
		pmc_list_for_each(s, &srv->sessions, link) {
			shutdown(s->fd, SHUT_RD);
			if (s->ring.hdr)
				pmc_ring_close(&s->ring);
		}
		/* A Define or a batch's names that goes on in later slices is finished first, at
		 * once (no slice's end): the drain reads no connection in the middle of one, nor
		 * any other of its uid's, and what they queued after it would be lost. */
		uint64_t slice_end = srv->deadline_ns;
		srv->deadline_ns = UINT64_MAX;
		pmc_list_for_each_safe(s, next, &srv->sessions, link) {
			if (!s->def && !s->batch_req)
				continue;
			log_debug("pid %d (uid %d): its %s finished before the final drain",
			          (int)s->pid, (int)s->uid, s->def ? "Define" : "batch's names");
			int r = s->def ? session_batch_define_step(s) : session_batch_step(s);
			if (r < 0)
				session_close(s, r);
		}
		srv->deadline_ns = slice_end;
	}
	session_drain_others(srv, NULL, 0);
	if (!final)
		return;
	/* Every frame a closed ring holds is one its client counts as sent: each read to the
	 * end (the ring bounds it), with the datagrams they come after; a connection streaming
	 * a reply or holding a request (pmcctl's, not a library's) is left as it is. */
	uint64_t slice_end = srv->deadline_ns;
	pmc_list_for_each_safe(s, next, &srv->sessions, link) {
		if (!s->ring.hdr || s->qs || s->held)
			continue;
		int r = session_pump(s, SESSION_RING_MAX / RING_FRAME_HEADER + WIRE_DRAIN_MAX);
		if (r < 0)
			session_close(s, r);
		else if (!pmc_ring_idle(&s->ring))
			log_warn_limited(
			        "pid %d (uid %d): its sample ring not read to its end at the "
			        "final drain (frames after datagrams that never came)",
			        (int)s->pid, (int)s->uid);
	}
	srv->deadline_ns = slice_end;
}

static int
pump_steps(struct session *s, unsigned max)
{
	s->srv->deadline_ns = UINT64_MAX;
	for (unsigned i = 0; i < max; i++) {
		int r = s->def         ? session_batch_define_step(s)
		        : s->batch_req ? session_batch_step(s)
		        : s->qs        ? session_query_step(s, UINT64_MAX)
		                       : session_dispatch_one(s);
		if (r == -EAGAIN || r == SESSION_STEP_WAIT)
			return 0;
		/* A request that waits for exited clients' queues: their turns, not this call's. */
		if (r == SESSION_STEP_HELD)
			return 0;
		if (r < 0)
			return r;
	}
	return 0;
}

int
session_pump(struct session *s, unsigned max)
{
	int r = pump_steps(s, max);
	session_batch_flush(); /* what its batches left unfolded (ingest.h) */
	return r;
}

/* The client hung up: its process ended or exec'd (the library never closes a working
 * connection; it drops what it announced on one it gives up on), so what its threads still
 * held never comes: lost. That is what each one's word in the heads table counts past the
 * last sample a batch carried (the process's last samples, after its last batch, or all of a
 * forked child's that _exit()ed), or, without one, what its last batch said it held. A thread
 * that said ThreadExit is gone from the list (its library counted what it could not send as
 * dropped). */
static void
count_unsent(struct session *s)
{
	uint64_t n = 0;
	if (stopping || !s->proc)
		return;
	/* Word 0 moved: the library gave this connection up and sends its threads' later
	 * samples on its next one; what the batches announced is what is lost. */
	bool given_up =
	        s->heads && __atomic_load_n(&s->heads[0], __ATOMIC_RELAXED) != s->heads_given_up;
	for (size_t i = 0; i < s->n_threads; i++) {
		const struct session_thread *t = &s->threads[i];
		uint64_t unsent = t->pending;
		if (t->head_slot && s->heads && !given_up) {
			uint64_t head =
			        __atomic_load_n(&s->heads[t->head_slot - 1], __ATOMIC_RELAXED);
			if (head > t->next_sample && head - t->next_sample > unsent)
				unsent = head - t->next_sample;
		}
		n = util_sat_add(n, unsent);
	}
	/* What the threads announced is a claim too. */
	n = session_claim(s, n);
	if (!n)
		return;
	s->proc->dropped[PMC_LOSS_UNSENT] = util_sat_add(s->proc->dropped[PMC_LOSS_UNSENT], n);
	s->srv->model.lost = util_sat_add(s->srv->model.lost, n);
	s->user->lost = util_sat_add(s->user->lost, n);
	s->srv->model.lost_unsent = util_sat_add(s->srv->model.lost_unsent, n);
	s->user->lost_unsent = util_sat_add(s->user->lost_unsent, n);
	log_warn_limited("pid %d: ended holding %llu samples it never sent (after its last "
	                 "batch, or announced by it): counted as lost (unsent)",
	                 (int)s->pid, (unsigned long long)n);
}

void
session_close(struct session *s, int r)
{
	session_batch_flush(); /* before any figure of its process is read or retired */
	if (r == -EBADMSG || r == -EPROTO || r == -EMSGSIZE || r == -ETIMEDOUT) {
		s->srv->model.rejected++;
		s->user->rejected++;
	}
	if (r == -ECONNRESET)
		count_unsent(s);
	if (r != -ECONNRESET)
		log_debug("pid %d: closing connection: %s", (int)s->pid, strerror(-r));
	session_free(s);
}

int
session_new(struct server *srv, int fd)
{
	/* A connection refused here is closed by pmc_fdcheck_close(): its client may have queued
	 * datagrams, fds in them, before it was accepted. */
	struct ucred cred = {.pid = -1};
	socklen_t len = sizeof(cred);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid < 0) {
		pmc_fdcheck_close(fd, (unsigned)cred.uid);
		return -EPERM;
	}
	if (cred.pid == 0) {
		/* The peer's process is in no pid namespace the daemon can see: the daemon runs
		 * in a child pid namespace (a container) while its clients do not. */
		log_warn_limited("refusing a connection of uid %d: its process is not visible in "
		                 "pmcdaemon's pid namespace; run pmcdaemon in the host's pid "
		                 "namespace (docker --pid=host, Kubernetes hostPID: true)",
		                 (int)cred.uid);
		Pmc__Response resp = PMC__RESPONSE__INIT;
		resp.error = ESRCH;
		resp.message = "pmcdaemon cannot see this process: it runs in a pid namespace of "
		               "its own; the operator must run it in the host's pid namespace "
		               "(docker run --pid=host, Kubernetes hostPID: true)";
		(void)pmc_wire_send(fd, &resp.base, NULL, 0, MSG_DONTWAIT);
		pmc_fdcheck_close(fd, (unsigned)cred.uid);
		return -ESRCH;
	}
	/* A uid whose refused fds still wait to be closed (a FUSE file whose server never
	 * answers) may send no more until they are. */
	if (pmc_fdcheck_pending((unsigned)cred.uid) >= SESSION_MAX_PENDING_CLOSES) {
		log_warn_limited("refusing a connection of uid %d: %zu fds it sent still wait to "
		                 "be closed",
		                 (int)cred.uid, pmc_fdcheck_pending((unsigned)cred.uid));
		Pmc__Response resp = PMC__RESPONSE__INIT;
		resp.error = EMFILE;
		resp.message = "this uid sent file descriptors pmcdaemon has not yet been able to "
		               "close (a file whose file system does not answer): try again later";
		(void)pmc_wire_send(fd, &resp.base, NULL, 0, MSG_DONTWAIT);
		pmc_fdcheck_close(fd, (unsigned)cred.uid);
		return -EMFILE;
	}
	struct session *s = calloc(1, sizeof(*s));
	if (!s) {
		pmc_fdcheck_close(fd, (unsigned)cred.uid);
		return -ENOMEM;
	}
	s->srv = srv;
	s->fd = fd;
	s->rx_fd = -1;
	s->parked_fd = -1;
	s->same_ns = -1;
	s->pid = cred.pid;
	s->uid = cred.uid;
	s->gid = cred.gid;
	len = sizeof(s->pidfd);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &s->pidfd, &len) < 0)
		s->pidfd = -1;
	/* Read while the pidfd says the peer lives: then the pid was still its own. */
	if (s->pidfd < 0 || registry_process_read_start(s->pid, &s->peer_start, s->peer_comm) < 0 ||
	    !session_peer_alive(s))
		s->peer_start = 0;
	/* Unreadable (the peer is gone): no capabilities, which only narrows what it may do. */
	if (creds_read_peer(s->pid, s->uid, s->gid, &s->creds) < 0 ||
	    (s->pidfd >= 0 && !session_peer_alive(s)))
		s->creds = (struct creds_peer){.uid = s->uid, .gid = s->gid};
	s->admin = policy_is_admin(&srv->policy, s->pid, s->uid, s->gid);
	s->user = users_get(&srv->model.users, s->uid);
	s->turns = loop_sched_uid(&srv->sched, s->uid);
	/* Its share, or more while the others' shares and one for a newcomer stay free. The
	 * connection being served is counted in n_sessions only below; those kept for their
	 * unread fds count too, those read since are closed first. */
	const struct policy *pol = &srv->policy;
	if (s->user && s->user->lingering)
		session_inflight_settle_uid(srv, s->uid);
	if (s->user &&
	    !share_allows(s->user->connections, 1, pol->max_clients_per_user,
	                  srv->n_sessions + srv->n_lingering, pol->max_clients,
	                  users_others_unused(&srv->model.users, s->uid, USERS_CONNECTIONS,
	                                      pol->max_clients_per_user))) {
		char msg[300];
		snprintf(msg, sizeof(msg),
		         "uid %d holds %u connections, past its share (--max-clients-per-user %u) "
		         "as far as the other users' shares allow (--max-clients %u): close some, "
		         "or ask the operator to raise the limits",
		         (int)s->uid, s->user->connections, pol->max_clients_per_user,
		         pol->max_clients);
		if (!s->user->warned)
			log_warn_limited("refusing connections of uid %d: %s", (int)s->uid, msg);
		s->user->warned = true;
		Pmc__Response resp = PMC__RESPONSE__INIT;
		resp.error = EUSERS;
		resp.message = msg;
		(void)pmc_wire_send(fd, &resp.base, NULL, 0, MSG_DONTWAIT);
		s->user = NULL;
	}
	/* A connection that says nothing holds a slot every user needs: it has
	 * --hello-timeout seconds to say Hello. */
	struct timeval hello_tv = {.tv_sec = srv->policy.hello_timeout_s};
	s->ev = s->user && s->turns
	                ? event_new(srv->base, fd, EV_READ | EV_PERSIST, session_on_readable, s)
	                : NULL;
	s->hello_ev = s->ev ? evtimer_new(srv->base, session_on_hello_timeout, s) : NULL;
	if (!s->hello_ev || event_add(s->ev, NULL) < 0 || event_add(s->hello_ev, &hello_tv) < 0) {
		int r = s->user ? -ENOMEM : -EUSERS;
		if (s->ev)
			event_free(s->ev);
		if (s->hello_ev)
			event_free(s->hello_ev);
		if (s->pidfd >= 0)
			close(s->pidfd);
		free(s);
		pmc_fdcheck_close(fd, (unsigned)cred.uid);
		return r;
	}
	s->user->connections++;
	int sndbuf = 0;
	len = sizeof(sndbuf);
	if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) == 0 && sndbuf > 0)
		s->sndbuf = (size_t)sndbuf / 2; /* the kernel reports twice what was set */
	pmc_list_prepend(&srv->sessions, &s->link);
	srv->n_sessions++;
	if (!log_enabled(LOG_DEBUG))
		return 0;
	/* Where it runs, as the figures of its process will say (registry_process()): read
	 * again for the log only (30-50 us, BENCHMARKS.md), not for every connection. */
	char cgroup[CGROUP_PATH_MAX] = "";
	pid_t ns_pid = 0;
	(void)cgroup_read_path(s->pid, cgroup);
	(void)cgroup_read_ns_pid(s->pid, &ns_pid);
	log_debug("pid %d (uid %d): connected (ns_pid %d, cgroup %s)", (int)s->pid, (int)s->uid,
	          (int)ns_pid, cgroup[0] ? cgroup : "unknown");
	return 0;
}

void
session_free(struct session *s)
{
	if (!s)
		return;
	struct server *srv = s->srv;
	loop_sched_remove(&srv->sched, &s->si);
	session_query_end(s);
	session_batch_define_abort(s);
	for (size_t i = 0; i < s->n_threads; i++)
		session_register_thread_close(s, &s->threads[i]);
	free(s->threads);
	session_batch_tables_free(s);
	if (s->heads)
		munmap((void *)s->heads, (size_t)s->n_heads * sizeof(uint64_t));
	/* Dropped first: a client still putting learns at once that its frame did not go, and
	 * takes back one it put that no one read. */
	if (s->ring.hdr)
		pmc_ring_drop(&s->ring);
	pmc_ring_unmap(&s->ring);
	pmc_list_remove(&srv->sessions, &s->link);
	srv->n_sessions--;
	if (s->proc && --s->proc->connections == 0)
		registry_process_ended(&srv->model.reg, s->proc, util_now_ns(CLOCK_MONOTONIC));
	event_free(s->ev);
	event_free(s->hello_ev);
	s->user->connections--;
	if (s->pidfd >= 0)
		close(s->pidfd);
	free(s->held);
	free(s->parked);
	if (s->parked_fd >= 0)
		pmc_fdcheck_close(s->parked_fd, (unsigned)s->uid);
	/* What the peer queued and the daemon did not read would be freed by a plain close,
	 * here, fds included, and each of those fds' close could wait: the socket goes through
	 * pmc_fdcheck_close() (session_inflight_close()), closed at once when nothing is queued,
	 * else handed to its uid's closer thread. The socket stays while the peer has not read
	 * fds it was sent. */
	session_inflight_close(s);
	free(s);
}
