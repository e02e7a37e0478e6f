/* pmc-test-raw: speaks the wire protocol by hand to check what pmcdaemon refuses.
 * Each mode prints what the daemon answered and exits 0 when the answer is the one
 * expected, 1 otherwise.
 *
 *   SOCKET foreign-tid TID   register a thread of another process: refused (EPERM)
 *   SOCKET event NAME [ERR]  register with event NAME: refused with errno ERR (a number;
 *                            default ENOENT), message printed
 *   SOCKET oversize          a 2 MiB datagram (over the daemon's 1 MiB limit): closed
 *   SOCKET many-events N     register with N events: refused (E2BIG) past the limit
 *   SOCKET stuck SECONDS     listen on SOCKET itself, never accept, and fill the backlog:
 *                            a daemon that hangs; prints "ready" once it is full
 *   SOCKET hold SECONDS      say Hello, print "held", then keep the connection open SECONDS
 *   SOCKET orphan            say Hello, fork, exit: the child registers its own thread
 *                            on the inherited connection of a process that has exited:
 *                            refused (ESRCH)
 *   SOCKET garbage           a datagram that is not a Request: connection closed
 *   SOCKET heads-KIND        a HeadsTable whose fd is not one the daemon may map: KIND
 *                            file (/dev/null), unsealed (a memfd, no seal), small (sealed,
 *                            smaller than it says), big (65,537 words), none (no fd),
 *                            twice (a good one, then another): connection closed;
 *                            heads-good: a good one, then Status answered
 *   SOCKET ring-KIND         a SampleRing the daemon must refuse (closes the connection):
 *                            KIND unsealed (a memfd, no seal), size (of a size not
 *                            offered), twice (a good one, then another), head (a good one
 *                            whose head is impossible), frame (a frame of no known kind),
 *                            status (a Status request in a frame: no ring carries one),
 *                            bad-batch (bad-batch's SampleBatch in a frame: the daemon reads
 *                            frames); each followed by a RingWake; ring-good: a good one, a
 *                            RingWake, then Status answered
 *   SOCKET ring-park DIR     with pmcdaemon under pmc-test-recv-gate (PMC_TEST_GATE=DIR): a
 *                            frame put between the daemon's look at the ring and its read
 *                            of the socket, then a datagram that needs it (a batch of the
 *                            region the frame's batch defines): Status answered after both
 *   SOCKET ring-park-fds DIR the same frame, then a datagram the daemon's read refuses (a
 *                            Status with 2 fds): connection closed (the frame read first)
 *   SOCKET ring-closed       a good SampleRing, then a datagram that is not a Request: once
 *                            the daemon has closed the connection, a frame put in the ring
 *                            is refused (EPIPE: the daemon dropped the ring as it let go)
 *   SOCKET reset-queued DIR  with pmcdaemon under pmc-test-recv-gate: a batch sent at the
 *                            gate, then this end closed with a reply unread (the daemon's
 *                            read says ECONNRESET before that batch): 3 batches of region
 *                            "reset-queued", one sample each
 *   SOCKET fds               a valid Status request with an fd attached: connection closed
 *   SOCKET bad-batch         a SampleBatch for a thread never registered: connection closed
 *   SOCKET no-hello          a Status request before Hello: connection closed
 *   SOCKET status            a Status request: answered (shows the daemon still serves)
 *   SOCKET status-closed     a Status request answered, then this end shut: returns once the
 *                            daemon closed its end (prints "closed")
 *   SOCKET query-slow SECONDS
 *                            a streamed Query: reads its first part, prints "first part",
 *                            sleeps SECONDS (the daemon's socket to it fills), then reads
 *                            the others; prints regions=N and parts=N
 *   SOCKET two-streams       define 3,000 regions; then, 10 times, a plain Query and a
 *                            Status on connection B and, while their answers read what the
 *                            others queued, two streamed Queries on connection A: A gets
 *                            both replies whole, and the daemon answers on; prints "served"
 *   SOCKET query-whole       a Query for everything in one reply (no Query.stream):
 *                            refused with EMSGSIZE when it does not fit, message printed
 *   SOCKET scaled-batch      register (page-faults,task-clock), then send region "mux":
 *                            samples {10,100} with value 0 extrapolated at ratio 0.25, and
 *                            {20,200} not: the daemon must mark page-faults as scaled
 *   SOCKET bad-mask          the same batch with a scaled bit for a third, absent value:
 *                            connection closed
 *   SOCKET reattach-exit N   say Hello, print "hello" and pid=PID; once a line comes on
 *                            stdin, reattach this thread (no reply) and send one sample of
 *                            each of N regions r0... (at most 64), then exit at once
 *   SOCKET exec-then-register PROG
 *                            say Hello and fork; the parent execs PROG (a setuid program
 *                            that sleeps 3 s); the child, holding the connection, then
 *                            registers the parent's thread: refused (EPERM), then asks to
 *                            reattach it (no reply), then calls Status (served)
 *   SOCKET pass-then-register PROG
 *                            fork; the child connects, says Hello, passes the connection
 *                            to the parent and execs PROG; the parent registers the
 *                            child's thread on it: refused (EPERM)
 *   SOCKET exec-batch PROG ARGS...
 *                            say Hello, register this thread (page-faults), fork a child
 *                            that holds the connection 3 s, then exec PROG ARGS...
 *   SOCKET canon NAME...     register this thread with events NAME...: prints the name
 *                            the daemon gave each ("name=..."), or the refusal
 *   SOCKET silent N SECONDS  open N connections that never say Hello; once each has
 *                            ended (SECONDS at most), print how many the daemon refused
 *                            at accept ("refused=": an error Response came first) and
 *                            closed at its --hello-timeout ("closed=": EOF alone), and
 *                            any still open after SECONDS ("open=") or never connected
 *                            ("failed=")
 *   SOCKET regions N SECONDS register this thread, send one sample of each of N regions
 *                            (r0, r1, ...), call Status, then hold the connection SECONDS
 *   SOCKET unread N          register, define 40 regions, then send N Queries without
 *                            reading a reply; print the bytes of replies queued here once
 *                            the daemon closed the connection ("queued=", "closed=")
 *   SOCKET spread R          register, then for each of R regions send 64 samples whose
 *                            values (wall time and page-faults) are 2^0 ... 2^63: one in
 *                            every histogram block
 *   SOCKET dead-threads N    register N threads (page-faults) that then end without a
 *                            ThreadExit, then this thread: prints its answer
 *   SOCKET flood SECONDS     register (then print "connected"), then send batches of 64
 *                            samples as fast as the socket takes them, with a Status call
 *                            every 100, for SECONDS or until the file PMC_TEST_RAW_STOP
 *                            names exists
 *   SOCKET hog stream|whole SECONDS
 *                            print "connected", then Queries with histograms as fast as
 *                            it can, streamed (every part read) or whole, for SECONDS or
 *                            until the file PMC_TEST_RAW_STOP names exists; prints
 *                            queries=N and bytes=N
 *   SOCKET lie N             register, then send N batches of one sample that each claim
 *                            88,999 samples dropped and 100,001 sent before
 *   SOCKET claim-max N       register, then send N batches of one sample that each claim
 *                            UINT64_MAX samples dropped and UINT64_MAX sent before
 *   SOCKET floor NAME WALL V register (page-faults), report an empty region's floor (WALL
 *                            ns, V page faults), send one sample of region NAME (1000 ns,
 *                            7 page faults), call Status; V "bad": two values for one
 *                            event, and the connection must be closed
 *   SOCKET batch NAME        say Hello, register this thread, send one sample of region
 *                            NAME, call Status (so it was counted), print "sent"
 *   SOCKET define KIND       say Hello agreeing on call paths (but for KIND no-paths),
 *                            register, then break the Define rules: no-paths (a Define on a
 *                            connection that did not agree), orphan (a path whose parent
 *                            was never defined), deep (a path of 33 regions), no-region (a
 *                            path of a region never named), batch-undefined (a sample of a
 *                            path never defined), flags (a sample with both flags set): the
 *                            connection must be closed; noreg: a Define before any thread
 *                            registered, then Status (prints "sent"); ok: a path of 32 regions "r"
 * with one sample (1000 ns, 7) and one flagged deeper, then Status: prints "sent"; rename:
 *                            path 1 of region id 1 "before", one sample of it (1000 ns, 7),
 *                            then id 1 defined again as "renamed" and one more sample of
 *                            path 1 (3000 ns, 7): the connection must be closed
 *   SOCKET names-batch N     register, then send one SampleBatch naming N regions (ids 1 to
 *                            4,096 in turn, id i named "n<i>": 4,096 names, then the same
 *                            again) with one sample of region 1 (1000 ns, value 1); then a
 *                            Status: prints "sent" once it is answered
 *   SOCKET names-batches N K up to K times, a SampleBatch naming N regions (as names-batch)
 *                            with one sample of region 1 (1000 ns, value 1), then a plain
 *                            batch with one more, until a send fails (the daemon stopped:
 *                            shut for reading); prints "started" after the first, then
 *                            sent=SAMPLES (those whose send succeeded: queued)
 *   SOCKET define-flood CONNS PATHS
 *                            CONNS connections agreeing on call paths, each defining 64
 *                            regions, then PATHS call paths (a tree of 64 branches a node:
 *                            every id a node of its own; past id 65,535 the same ids
 *                            again) in Defines of 8,192 (PMC_DEFINE_PER), the
 *                            connections in turn (prints "flooding" once connected);
 *                            then registers and sends a sample (1000 ns, 1 page fault)
 *                            of path 1 and one of the last path defined on connection 1,
 *                            and calls Status on each: prints "sent"
 *   SOCKET define-flood CONNS PATHS hold
 *                            the same, then keeps its connections open until a line
 *                            comes on stdin (or it ends)
 *   SOCKET command-unread CONNS REQS
 *                            fork a child that never execs; on each of CONNS connections,
 *                            REQS OpenCommands for it (per task, with the anchor), each
 *                            sent once the answer to the one before has arrived, none read;
 *                            prints "ready", then, once a line comes on stdin, reads every
 *                            answer: prints ok= (counters sent), fds= (the fds they carried:
 *                            the perf events its unread replies had pinned), ebusy=, emfile=,
 *                            other= (refused), unsent= (requests the daemon no longer took)
 *   SOCKET spray CONNS FDS   open CONNS connections, then send on each a Status carrying FDS
 *                            (at most 253) fds of /dev/null, all at once; wait (60 s at
 *                            most) until the daemon has closed or refused every one; prints
 *                            sent=N (datagrams sent) and closed=N
 *   SOCKET linger CONNS      open CONNS connections, each saying Hello, and print "ready";
 *                            once a line comes on stdin, send on each a Status carrying one
 *                            fd of /dev/null, then wait (60 s at most) until the daemon has
 *                            closed each (or answered it): prints closed=N, answered=N,
 *                            unsent=N (closed before its Status could be sent)
 *   SOCKET fill-exit N       fork N processes, each of which says Hello, registers, sends
 *                            batches of 64 samples of region r0 until its socket (1 MiB
 *                            send buffer, as wmem_max allows) is full
 *                            (at most 100,000 batches) and exits at once, leaving them
 *                            queued; waits for all; prints sent=SAMPLES (of all N)
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wire/pmc-shared.h"
#include "wire/ring.h"
#include "wire/wire.h"

/* @req, a Status request whose body is @st. */
static void
status_req(Pmc__Request *req, Pmc__Status *st)
{
	*st = (Pmc__Status)PMC__STATUS__INIT;
	*req = (Pmc__Request)PMC__REQUEST__INIT;
	req->body_case = PMC__REQUEST__BODY_STATUS;
	req->status = st;
}

static int
call(int fd, Pmc__Request *req, Pmc__Response **resp)
{
	int fds[WIRE_MAX_FDS];
	size_t n = 0;
	/* Long: under sanitizers, beside other tests, a daemon defining 100,000 regions of 26
	 * clients at once takes seconds to answer; only a hung daemon takes this long. */
	int r = pmc_wire_call(fd, req, 60000, fds, WIRE_MAX_FDS, &n, resp);
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
	return r;
}

/* Hello agrees on call paths (mode define). */
static bool call_paths;

static int
hello(int fd)
{
	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.call_paths = call_paths;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	Pmc__Response *resp;
	int r = call(fd, &req, &resp);
	if (r < 0)
		return r;
	r = resp->error ? -resp->error : 0;
	pmc__response__free_unpacked(resp, NULL);
	return r;
}

/* After a bad datagram the daemon must close the connection: wait for EOF. */
static int
expect_closed(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (poll(&p, 1, 5000) <= 0) {
		printf("connection still open after 5 s\n");
		return 1;
	}
	char b[64];
	ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
	if (n == 0 || (n < 0 && errno == ECONNRESET)) {
		printf("connection closed by the daemon\n");
		return 0;
	}
	printf("unexpected reply (%zd bytes)\n", n);
	return 1;
}

/* A memfd of @len bytes, sealed against shrinking when @sealed; -1 on failure. */
static int
heads_memfd(size_t len, bool sealed)
{
	int fd = memfd_create("heads", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0 ||
	    (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0))
		return -1;
	return fd;
}

/* heads-KIND: a HeadsTable the daemon must refuse (closes the connection), or a good one
 * after which @status is answered. */
static int
send_heads(int fd, const char *kind, const Pmc__Request *status)
{
	Pmc__HeadsTable ht = PMC__HEADS_TABLE__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HEADS_TABLE;
	req.heads_table = &ht;
	ht.slots = 64;
	bool good = !strcmp(kind, "good"), twice = !strcmp(kind, "twice");
	int hfd;
	if (!strcmp(kind, "file"))
		hfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	else if (!strcmp(kind, "unsealed"))
		hfd = heads_memfd(64 * 8, false);
	else if (!strcmp(kind, "small"))
		hfd = heads_memfd(16, true);
	else if (!strcmp(kind, "big"))
		ht.slots = 65537, hfd = heads_memfd(65537 * 8, true);
	else if (!strcmp(kind, "none"))
		hfd = -2;
	else if (good || twice)
		hfd = heads_memfd(64 * 8, true);
	else
		return 2;
	if (hfd == -1) {
		perror("heads table");
		return 1;
	}
	if (pmc_wire_send(fd, &req.base, &hfd, hfd >= 0, 0) < 0 ||
	    (twice && pmc_wire_send(fd, &req.base, &hfd, 1, 0) < 0))
		return 1;
	if (!good)
		return expect_closed(fd);
	Pmc__Response *resp = NULL;
	int r = pmc_wire_call(fd, status, 5000, NULL, 0, NULL, &resp);
	if (r < 0 || !resp || resp->body_case != PMC__RESPONSE__BODY_STATUS) {
		printf("no Status after a good heads table (%d)\n", r);
		return 1;
	}
	printf("a good heads table kept the connection\n");
	pmc__response__free_unpacked(resp, NULL);
	return 0;
}

/* Puts the packed @req in @rg as a frame after @sent datagrams (no room: -1). */
static int
ring_put_req(struct pmc_ring *rg, uint64_t sent, const Pmc__Request *req)
{
	uint8_t buf[1024];
	bool wake;
	size_t len = pmc__request__get_packed_size(req);
	if (len > sizeof(buf))
		return -1;
	pmc__request__pack(req, buf);
	return pmc_ring_put(rg, sent, buf, len, &wake) == 0 ? 0 : -1;
}

/* A RingWake sent: pmc_wire_send()'s return. */
static int
send_ring_wake(int fd)
{
	Pmc__RingWake w = PMC__RING_WAKE__INIT;
	Pmc__Request wreq = PMC__REQUEST__INIT;
	wreq.body_case = PMC__REQUEST__BODY_RING_WAKE;
	wreq.ring_wake = &w;
	return pmc_wire_send(fd, &wreq.base, NULL, 0, 0);
}

/* A good SampleRing of RING_MIN_BYTES made in *@rg and offered on @fd (its fd sent, then
 * closed here). Return: 0 or -1. */
static int
ring_offer(int fd, struct pmc_ring *rg)
{
	Pmc__SampleRing sr = PMC__SAMPLE_RING__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	int rfd;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_RING;
	req.sample_ring = &sr;
	sr.bytes = RING_MIN_BYTES;
	if (pmc_ring_create(rg, RING_MIN_BYTES, &rfd) < 0)
		return -1;
	int r = pmc_wire_send(fd, &req.base, &rfd, 1, 0);
	close(rfd);
	return r < 0 ? -1 : 0;
}

/* ring-KIND: a SampleRing the daemon must refuse (it closes the connection), or a good one
 * after which @status is answered. */
static int
send_ring(int fd, const char *kind, const Pmc__Request *status)
{
	Pmc__SampleRing sr = PMC__SAMPLE_RING__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_RING;
	req.sample_ring = &sr;
	sr.bytes = RING_MIN_BYTES;
	struct pmc_ring rg = {0};
	int rfd = -1;
	uint64_t sent = 1; /* Hello */
	if (!strcmp(kind, "unsealed")) {
		rfd = heads_memfd(RING_HEADER_BYTES + RING_MIN_BYTES, false);
	} else {
		if (pmc_ring_create(&rg, RING_MIN_BYTES, &rfd) < 0) {
			perror("sample ring");
			return 1;
		}
		if (!strcmp(kind, "size"))
			sr.bytes = 3 * RING_MIN_BYTES;
	}
	if (rfd < 0 || pmc_wire_send(fd, &req.base, &rfd, 1, 0) < 0)
		return 1;
	sent++;
	if (!strcmp(kind, "twice")) {
		if (pmc_wire_send(fd, &req.base, &rfd, 1, 0) < 0)
			return 1;
		sent++;
	}
	close(rfd);
	Pmc__Request breq = PMC__REQUEST__INIT;
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	uint32_t region[1] = {1};
	uint64_t wall[1] = {5};
	if (!strcmp(kind, "head")) {
		__atomic_store_n(&rg.hdr[0], 8, __ATOMIC_RELEASE); /* not a whole frame */
	} else if (!strcmp(kind, "frame")) {
		/* A frame of 8 bytes of kind 9, published by hand. */
		uint32_t h[2] = {8, 9};
		memcpy(rg.data, h, sizeof(h));
		memcpy(rg.data + sizeof(h), &sent, sizeof(sent));
		__atomic_store_n(&rg.hdr[0], pmc_ring_frame_size(8), __ATOMIC_RELEASE);
	} else if (!strcmp(kind, "status")) {
		if (ring_put_req(&rg, sent, status) < 0)
			return 1;
	} else if (!strcmp(kind, "bad-batch")) {
		b.tid = getpid();
		b.n_region = 1, b.region = region;
		b.n_wall_ns_fixed = 1, b.wall_ns_fixed = wall;
		breq.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
		breq.sample_batch = &b;
		if (ring_put_req(&rg, sent, &breq) < 0)
			return 1;
	} else if (strcmp(kind, "good") && strcmp(kind, "unsealed") && strcmp(kind, "size") &&
	           strcmp(kind, "twice")) {
		return 2;
	}
	if (send_ring_wake(fd) < 0 && strcmp(kind, "good"))
		return expect_closed(fd);
	if (strcmp(kind, "good"))
		return expect_closed(fd);
	Pmc__Response *resp = NULL;
	int r = pmc_wire_call(fd, status, 5000, NULL, 0, NULL, &resp);
	if (r < 0 || !resp || resp->body_case != PMC__RESPONSE__BODY_STATUS) {
		printf("no Status after a good sample ring (%d)\n", r);
		return 1;
	}
	printf("a good sample ring kept the connection\n");
	pmc__response__free_unpacked(resp, NULL);
	pmc_ring_unmap(&rg);
	return 0;
}

/* Registers thread @tid for @n @events; the reply in *@resp (the caller frees it). */
static int
register_events(int fd, int tid, char **events, size_t n, Pmc__Response **resp)
{
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = tid;
	rt.n_events = n;
	rt.events = events;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	return call(fd, &req, resp);
}

/* The columns of one SampleBatch of this thread: @n samples with @ne values each. */
struct batch {
	size_t n, ne, n_def;
	uint32_t *region, *def_id, *scaled;
	uint64_t *wall, *values;
	char **def_name;
	float *ratio;
	size_t n_ratio;
	uint64_t dropped, sent_before;
	bool fixed; /* wall times and values in fixed form (as in a SampleRing's frames) */
};

/* sendmsg() flags of send_batch() (fill-exit: MSG_DONTWAIT). */
static int batch_flags;

/* @c as the SampleBatch @b of the Request @breq (both pointing into @c's arrays). */
static void
batch_request(const struct batch *c, Pmc__SampleBatch *b, Pmc__Request *breq)
{
	*b = (Pmc__SampleBatch)PMC__SAMPLE_BATCH__INIT;
	b->tid = getpid();
	b->n_region = c->n, b->region = c->region;
	if (c->fixed) {
		b->n_wall_ns_fixed = c->n, b->wall_ns_fixed = c->wall;
		b->n_values_fixed = c->n * c->ne, b->values_fixed = c->values;
	} else {
		b->n_wall_ns = c->n, b->wall_ns = c->wall;
		b->n_values = c->n * c->ne, b->values = c->values;
	}
	if (c->scaled)
		b->n_scaled = c->n, b->scaled = c->scaled;
	b->n_scale_ratio = c->n_ratio, b->scale_ratio = c->ratio;
	b->n_def_id = c->n_def, b->def_id = c->def_id;
	b->n_def_name = c->n_def, b->def_name = c->def_name;
	b->dropped = c->dropped;
	b->sent_before = c->sent_before;
	*breq = (Pmc__Request)PMC__REQUEST__INIT;
	breq->body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	breq->sample_batch = b;
}

static int
send_batch(int fd, const struct batch *c)
{
	Pmc__SampleBatch b;
	Pmc__Request breq;
	batch_request(c, &b, &breq);
	return pmc_wire_send(fd, &breq.base, NULL, 0, batch_flags);
}

static int
send_scaled_batch(int fd, uint32_t mask0)
{
	char *events[2] = {"page-faults", "task-clock"};
	Pmc__Response *resp;
	if (register_events(fd, getpid(), events, 2, &resp) < 0 || resp->error)
		return -1;
	pmc__response__free_unpacked(resp, NULL);

	uint32_t region[2] = {1, 1}, scaled[2] = {mask0, 0}, def_id[1] = {1};
	uint64_t wall[2] = {1000, 2000}, values[4] = {10, 100, 20, 200};
	float ratio[1] = {0.25f};
	char *def_name[1] = {"mux"};
	struct batch c = {.n = 2,
	                  .ne = 2,
	                  .n_def = 1,
	                  .region = region,
	                  .def_id = def_id,
	                  .scaled = scaled,
	                  .wall = wall,
	                  .values = values,
	                  .def_name = def_name,
	                  .ratio = ratio,
	                  .n_ratio = 1};
	return send_batch(fd, &c);
}

static int
register_tid(int fd, int tid, char *event)
{
	char *events[1] = {event};
	Pmc__Response *resp;
	int r = register_events(fd, tid, events, event ? 1 : 0, &resp);
	if (r < 0) {
		printf("no answer: %s\n", strerror(-r));
		return -1;
	}
	int err = resp->error;
	printf("error=%d (%s)\nmessage=%s\n", err, err ? strerror(err) : "none", resp->message);
	pmc__response__free_unpacked(resp, NULL);
	return err;
}

/* Reattach @tid (one event, no fds): a request the daemon never answers. */
static int
reattach_tid(int fd, int tid)
{
	char *events[1] = {"page-faults"};
	uint32_t groups[1] = {0};
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = tid;
	rt.reattach = 1;
	rt.n_events = 1;
	rt.events = events;
	rt.n_groups = 1;
	rt.groups = groups;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	return pmc_wire_send(fd, &req.base, NULL, 0, 0);
}

/* Registers this thread for page-faults: 0, or -1 after printing why not. */
static int
register_self(int fd)
{
	char *events[1] = {"page-faults"};
	Pmc__Response *resp;
	if (register_events(fd, getpid(), events, 1, &resp) < 0)
		return -1;
	int err = resp->error;
	if (err)
		printf("error=%d (%s)\nmessage=%s\n", err, strerror(err), resp->message);
	pmc__response__free_unpacked(resp, NULL);
	return err ? -1 : 0;
}

/* One batch of @n samples, sample i of region id first + i (named "r<first + i - 1>"
 * when @define), value 1 each; @dropped and @sent_before as the batch says. */
static int
send_regions(int fd, uint32_t first, uint32_t n, int define, uint64_t dropped, uint64_t sent_before)
{
	uint32_t region[64], def_id[64];
	uint64_t wall[64], values[64];
	char names[64][16], *def_name[64];
	if (n > 64)
		return -1;
	for (uint32_t i = 0; i < n; i++) {
		region[i] = def_id[i] = first + i;
		wall[i] = 1000;
		values[i] = 1;
		snprintf(names[i], sizeof(names[i]), "r%u", first + i - 1);
		def_name[i] = names[i];
	}
	struct batch c = {.n = n,
	                  .ne = 1,
	                  .n_def = define ? n : 0,
	                  .region = region,
	                  .def_id = def_id,
	                  .wall = wall,
	                  .values = values,
	                  .def_name = def_name,
	                  .dropped = dropped,
	                  .sent_before = sent_before};
	return send_batch(fd, &c);
}

struct waiter {
	int pipe[2];
	pid_t tid;
};

/* A thread that says its tid, then waits for its pipe to close. */
static void *
waiter_main(void *p)
{
	struct waiter *w = p;
	char c;
	w->tid = (pid_t)syscall(SYS_gettid);
	if (write(w->pipe[1], "x", 1) != 1)
		return NULL;
	while (read(w->pipe[0], &c, 1) > 0)
		;
	return NULL;
}

/* Waits until process @pid runs another image than this one (it exec'd). */
static void
wait_exec(pid_t pid)
{
	char path[64], self[256], other[256];
	ssize_t a = readlink("/proc/self/exe", self, sizeof(self) - 1);
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	for (int i = 0; i < 500; i++) {
		ssize_t b = readlink(path, other, sizeof(other) - 1);
		/* A setuid image's exe link is root's to read: EACCES means it exec'd. */
		if (b < 0 || a < 0 || b != a || memcmp(self, other, (size_t)a))
			break;
		usleep(10 * 1000);
	}
	usleep(100 * 1000); /* the exec completes */
}

static uint64_t
now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static int
u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int
status_served(int fd)
{
	Pmc__Request req;
	Pmc__Status st;
	status_req(&req, &st);
	Pmc__Response *resp;
	if (call(fd, &req, &resp) < 0)
		return -1;
	int r = resp->body_case == PMC__RESPONSE__BODY_STATUS ? 0 : -1;
	pmc__response__free_unpacked(resp, NULL);
	return r;
}

/* A byte through the FIFO DIR/@name, written or read (each end waits for the other's). */
static int
gate_byte(const char *dir, const char *name, int write_it)
{
	char path[PATH_MAX], c = 'g';
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, write_it ? O_WRONLY : O_RDONLY);
	ssize_t n = fd < 0 ? -1 : write_it ? write(fd, &c, 1) : read(fd, &c, 1);
	if (fd >= 0)
		close(fd);
	return n == 1 ? 0 : -1;
}

/* ring-closed: a connection with a good ring that the daemon closes (a datagram that is no
 * Request): a frame put after that is refused at once (the daemon dropped the ring). */
static int
ring_closed(int fd)
{
	static const unsigned char junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02};
	struct pmc_ring rg = {0};
	if (ring_offer(fd, &rg) < 0 || send(fd, junk, sizeof(junk), 0) < 0 ||
	    expect_closed(fd) != 0)
		return 1;
	bool wake;
	int r = pmc_ring_put(&rg, 3, junk, sizeof(junk), &wake);
	pmc_ring_unmap(&rg);
	if (r != -EPIPE) {
		printf("a frame put after the daemon closed the connection: %d, not EPIPE\n", r);
		return 1;
	}
	printf("a frame put after the close refused (EPIPE)\n");
	return 0;
}

/* Arms pmc-test-recv-gate (DIR/arm). */
static int
gate_arm(const char *dir)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/arm", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

/* reset-queued DIR: with pmcdaemon under pmc-test-recv-gate (PMC_TEST_GATE=DIR), a batch sent
 * just before this end is closed with a reply unread: the daemon's read then says ECONNRESET
 * once, before that batch, which must still be read. Region "reset-queued" gets a sample from
 * each of 3 batches: one that defines it, one read before the gate, one sent at the gate. */
static int
reset_queued(int fd, const char *dir)
{
	alarm(60);
	uint32_t region[1] = {1}, def_id[1] = {1};
	uint64_t wall[1] = {1000}, values[1] = {3};
	char *def_name[1] = {"reset-queued"};
	struct batch c = {.n = 1,
	                  .ne = 1,
	                  .n_def = 1,
	                  .region = region,
	                  .def_id = def_id,
	                  .def_name = def_name,
	                  .wall = wall,
	                  .values = values};
	if (register_self(fd) < 0 || send_batch(fd, &c) < 0 || status_served(fd) < 0)
		return 1;
	c.n_def = 0;
	/* A reply left unread: a Status answered, its reply waiting here. */
	Pmc__Request st;
	Pmc__Status sb;
	status_req(&st, &sb);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (pmc_wire_send(fd, &st.base, NULL, 0, 0) < 0 || poll(&p, 1, 30000) != 1)
		return 1;
	if (gate_arm(dir) < 0 || send_batch(fd, &c) < 0)
		return 1;
	if (gate_byte(dir, "notify", 0) < 0) {
		printf("the daemon never waited at the gate\n");
		return 1;
	}
	if (send_batch(fd, &c) < 0)
		return 1;
	close(fd);
	if (gate_byte(dir, "go", 1) < 0)
		return 1;
	printf("closed with a reply unread, a batch just sent\n");
	return 0;
}

/* ring-park DIR: with pmcdaemon under pmc-test-recv-gate (PMC_TEST_GATE=DIR), a frame put in
 * this connection's SampleRing between the daemon's look at the ring and its read of the
 * socket, and a datagram sent after it that needs it: the batch in the frame defines region 1
 * ("parked-first") with one sample, the datagram's batch counts a second sample of region 1
 * without defining it. Read in the order they were sent, region 1 has two samples and the
 * connection stays open; the datagram read first would be a batch of an unknown region.
 * With @bad (ring-park-fds), the datagram is one the daemon's read refuses (a Status with 2
 * fds): the connection must be closed, the frame counted first. */
static int
ring_park(int fd, const char *dir, bool bad)
{
	struct pmc_ring rg = {0};
	uint64_t sent = 1; /* Hello */

	alarm(60); /* a gate that never fires: this fails, never hangs */
	if (register_self(fd) < 0)
		return 1;
	sent++;
	if (ring_offer(fd, &rg) < 0)
		return 1;
	sent++;
	/* The ring taken (a Status answered after it, so that no read of it arms the gate), then
	 * armed, then a RingWake read: the daemon's next read of this socket finding it empty
	 * waits at the gate. */
	if (status_served(fd) < 0)
		return 1;
	sent++;
	if (gate_arm(dir) < 0)
		return 1;
	if (send_ring_wake(fd) < 0)
		return 1;
	sent++;
	if (gate_byte(dir, "notify", 0) < 0) {
		printf("the daemon never waited at the gate\n");
		return 1;
	}
	/* The daemon has looked at the ring (empty) and reads the socket: the frame, then the
	 * datagram that needs it. */
	uint32_t region[1] = {1}, def_id[1] = {1};
	uint64_t wall[1] = {1000}, values[1] = {7}, wall2[1] = {2000}, values2[1] = {5};
	char *def_name[1] = {"parked-first"};
	struct batch f = {.n = 1,
	                  .ne = 1,
	                  .n_def = 1,
	                  .region = region,
	                  .def_id = def_id,
	                  .def_name = def_name,
	                  .wall = wall,
	                  .values = values,
	                  .fixed = true};
	Pmc__SampleBatch b;
	Pmc__Request breq;
	batch_request(&f, &b, &breq);
	struct batch d = {.n = 1, .ne = 1, .region = region, .wall = wall2, .values = values2};
	if (ring_put_req(&rg, sent, &breq) < 0)
		return 1;
	if (bad) {
		Pmc__Request st;
		Pmc__Status sb;
		status_req(&st, &sb);
		int two[2] = {STDIN_FILENO, STDIN_FILENO};
		if (pmc_wire_send(fd, &st.base, two, 2, 0) < 0 || gate_byte(dir, "go", 1) < 0)
			return 1;
		int r = expect_closed(fd);
		pmc_ring_unmap(&rg);
		return r;
	}
	if (send_batch(fd, &d) < 0 || gate_byte(dir, "go", 1) < 0)
		return 1;
	if (status_served(fd) < 0) {
		printf("no Status after the parked datagram: the connection was closed\n");
		return 1;
	}
	printf("served after a datagram read before the frame put ahead of it\n");
	pmc_ring_unmap(&rg);
	return 0;
}

/* Registers, then sends what @kind names (mode define in the usage above); 0 when the
 * daemon closes the connection (or, for ok, when it counted). */
static int
define_kind(int fd, const char *kind)
{
	uint32_t def_id[1] = {1}, id[40], parent[40], region[40];
	char *def_name[1] = {"r"};
	Pmc__Define d = PMC__DEFINE__INIT;
	d.n_def_id = d.n_def_name = 1;
	d.def_id = def_id;
	d.def_name = def_name;
	d.path_id = id, d.path_parent = parent, d.path_region = region;
	size_t n = 1;
	id[0] = 1, parent[0] = 0, region[0] = 1;
	if (!strcmp(kind, "rename"))
		def_name[0] = "before";
	if (!strcmp(kind, "orphan"))
		parent[0] = 7;
	else if (!strcmp(kind, "no-region"))
		region[0] = 2;
	else if (!strcmp(kind, "deep") || !strcmp(kind, "ok"))
		for (n = 1; n < (strcmp(kind, "ok") ? 33u : 32u); n++)
			id[n] = (uint32_t)n + 1, parent[n] = (uint32_t)n, region[n] = 1;
	d.n_path_id = d.n_path_parent = d.n_path_region = n;
	Pmc__Request dreq = PMC__REQUEST__INIT;
	dreq.body_case = PMC__REQUEST__BODY_DEFINE;
	dreq.define = &d;
	uint32_t sample[1] = {1};
	uint64_t wall[1] = {1000}, values[1] = {7};
	if (!strcmp(kind, "batch-undefined"))
		sample[0] = 9;
	else if (!strcmp(kind, "flags"))
		sample[0] = 0x60000001u;
	struct batch c = {.n = 1, .ne = 1, .region = sample, .wall = wall, .values = values};
	if (!strcmp(kind, "noreg")) {
		if (pmc_wire_send(fd, &dreq.base, NULL, 0, 0) < 0 || status_served(fd) < 0)
			return 1;
		printf("sent\n");
		return 0;
	}
	if (register_self(fd) < 0 || pmc_wire_send(fd, &dreq.base, NULL, 0, 0) < 0)
		return 1;
	if (!strcmp(kind, "rename")) {
		uint64_t w2[1] = {3000};
		struct batch again = {
		        .n = 1, .ne = 1, .region = sample, .wall = w2, .values = values};
		if (send_batch(fd, &c) < 0)
			return 1;
		def_name[0] = "renamed";
		d.n_path_id = d.n_path_parent = d.n_path_region = 0;
		if (pmc_wire_send(fd, &dreq.base, NULL, 0, 0) < 0)
			return 1;
		(void)send_batch(fd, &again); /* the connection may be closed already */
		return expect_closed(fd);
	}
	if (!strcmp(kind, "ok")) {
		uint32_t two[2] = {32, 0x40000001u};
		uint64_t w2[2] = {1000, 1000}, v2[2] = {7, 7};
		struct batch ok = {.n = 2, .ne = 1, .region = two, .wall = w2, .values = v2};
		if (send_batch(fd, &ok) < 0 || status_served(fd) < 0)
			return 1;
		printf("sent\n");
		return 0;
	}
	(void)send_batch(fd, &c); /* the connection may be closed already */
	return expect_closed(fd);
}

/* Waits until the answer to a request just sent on @sock has arrived behind the @before
 * bytes queued (or the daemon shut the connection). Return: 0, -EPIPE when shut, or
 * -ETIMEDOUT after 60 s. */
static int
answer_arrived(int sock, int before)
{
	for (int i = 0; i < 6000; i++) {
		int now = 0;
		if (ioctl(sock, SIOCINQ, &now) == 0 && now > before)
			return 0;
		struct pollfd p = {.fd = sock, .events = POLLRDHUP};
		if (poll(&p, 1, 10) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			return -EPIPE;
	}
	return -ETIMEDOUT;
}

/* command-unread (see the top of the file). */
static int
command_unread(const char *path, int n_conns, int n_reqs)
{
	if (n_conns < 1 || n_conns > 4096 || n_reqs < 1)
		return 2;
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		pause();
		_exit(0);
	}
	int pidfd = (int)syscall(SYS_pidfd_open, child, 0);
	int *socks = calloc((size_t)n_conns, sizeof(int));
	if (pidfd < 0 || !socks)
		return 1;
	Pmc__OpenCommand oc = PMC__OPEN_COMMAND__INIT;
	oc.per_task = true;
	oc.anchor = true;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_OPEN_COMMAND;
	req.open_command = &oc;
	unsigned long unsent = 0, ok = 0, fds = 0, ebusy = 0, emfile = 0, other = 0;
	for (int i = 0; i < n_conns; i++) {
		socks[i] = pmc_wire_connect(path);
		if (socks[i] < 0 || hello(socks[i]) < 0) {
			printf("connection %d refused\n", i);
			return 1;
		}
		for (int k = 0; k < n_reqs; k++) {
			int before = 0;
			if (ioctl(socks[i], SIOCINQ, &before) < 0 ||
			    pmc_wire_send(socks[i], &req.base, &pidfd, 1, MSG_DONTWAIT) < 0) {
				unsent += (unsigned long)(n_reqs - k);
				break;
			}
			int r = answer_arrived(socks[i], before);
			if (r == -ETIMEDOUT) {
				printf("no answer on connection %d to request %d in 60 s\n", i, k);
				return 1;
			}
			if (r < 0) {
				unsent += (unsigned long)(n_reqs - k - 1);
				break;
			}
		}
	}
	printf("ready\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	for (int i = 0; i < n_conns; i++) {
		for (;;) {
			uint8_t *buf = NULL;
			size_t len = 0, nf = 0;
			int got[WIRE_MAX_FDS];
			Pmc__Response *resp = NULL;
			if (pmc_wire_wait(socks[i], 0, &buf, &len, got, WIRE_MAX_FDS, &nf) < 0)
				break;
			int r = pmc_wire_unpack_response(buf, len, &resp);
			free(buf);
			for (size_t j = 0; j < nf; j++)
				close(got[j]);
			fds += nf;
			if (r < 0 || resp->error == 0)
				ok += r == 0;
			else if (resp->error == EBUSY)
				ebusy++;
			else if (resp->error == EMFILE)
				emfile++;
			else
				other++;
			if (r == 0 && resp->error && other == 1)
				printf("first other refusal: %s\n", resp->message);
			if (resp)
				pmc__response__free_unpacked(resp, NULL);
		}
		close(socks[i]);
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	printf("ok=%lu\nfds=%lu\nebusy=%lu\nemfile=%lu\nother=%lu\nunsent=%lu\n", ok, fds, ebusy,
	       emfile, other, unsent);
	free(socks);
	return 0;
}

/* define-flood (see the top of the file). */
static int
define_flood(const char *path, int n_conns, uint32_t n_paths, bool hold)
{
	enum { REGIONS = 64 };
	const char *per_env = getenv("PMC_DEFINE_PER");
	uint32_t PER = per_env ? (uint32_t)strtoul(per_env, NULL, 10) : 8192;
	if (PER < 1 || PER > PMC_LIMIT_REGION_ID)
		return 2;
	int *socks = calloc((size_t)n_conns, sizeof(int));
	uint32_t *id = calloc(PER, sizeof(uint32_t)), *parent = calloc(PER, sizeof(uint32_t));
	uint32_t *region = calloc(PER, sizeof(uint32_t)), def_id[REGIONS];
	char names[REGIONS][8], *def_name[REGIONS];
	if (n_conns < 1 || !socks || !id || !parent || !region)
		return 2;
	for (uint32_t r = 0; r < REGIONS; r++) {
		snprintf(names[r], sizeof(names[r]), "d%u", r);
		def_name[r] = names[r];
		def_id[r] = r + 1;
	}
	call_paths = true;
	for (int i = 0; i < n_conns; i++)
		if ((socks[i] = pmc_wire_connect(path)) < 0 || hello(socks[i]) < 0) {
			printf("connection %d refused\n", i);
			return 1;
		}
	printf("flooding\n");
	fflush(stdout);
	Pmc__Define d = PMC__DEFINE__INIT;
	d.path_id = id, d.path_parent = parent, d.path_region = region;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_DEFINE;
	req.define = &d;
	for (uint32_t from = 1; from <= n_paths; from += PER) {
		uint32_t n = n_paths - from + 1 < PER ? n_paths - from + 1 : PER;
		for (uint32_t k = 0; k < n; k++) {
			/* Ids go up to PMC_LIMIT_REGION_ID, then define the same ids again. */
			uint32_t i = (from + k - 1) % PMC_LIMIT_REGION_ID + 1;
			id[k] = i;
			parent[k] = i > REGIONS ? (i - 1) / REGIONS : 0;
			region[k] = (i - 1) % REGIONS + 1;
		}
		d.n_path_id = d.n_path_parent = d.n_path_region = n;
		d.n_def_id = d.n_def_name = from == 1 ? REGIONS : 0;
		d.def_id = def_id;
		d.def_name = def_name;
		for (int c = 0; c < n_conns; c++)
			if (pmc_wire_send(socks[c], &req.base, NULL, 0, 0) < 0) {
				printf("connection %d closed by the daemon\n", c);
				return 1;
			}
	}
	uint32_t two[2] = {1, (n_paths - 1) % PMC_LIMIT_REGION_ID + 1};
	uint64_t wall[2] = {1000, 1000}, values[2] = {1, 1};
	struct batch one = {.n = 2, .ne = 1, .region = two, .wall = wall, .values = values};
	if (register_self(socks[0]) < 0 || send_batch(socks[0], &one) < 0)
		return 1;
	for (int c = 0; c < n_conns; c++)
		if (status_served(socks[c]) < 0)
			return 1;
	printf("sent\n");
	fflush(stdout);
	if (hold) {
		char line[8];
		(void)!fgets(line, sizeof(line), stdin);
	}
	free(socks);
	free(id);
	free(parent);
	free(region);
	return 0;
}

/* Waits (60 s at most) until the daemon closes @fd: 0; with @answer, 1 once it answers
 * instead (a datagram); -1 when neither came. */
static int
wait_closed(int fd, bool answer)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	for (int t = 0; t < 600; t++) {
		char b[512];
		if (poll(&p, 1, 100) > 0) {
			ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN))
				return 0;
			if (n > 0 && answer)
				return 1;
		}
	}
	return -1;
}

/* This program plays clients that stop anywhere (an error path, a flood cut short, a
 * daemon that closed on it): what it holds then goes with the process, no leak of pmc's.
 * LeakSanitizer's documented hook, for the sanitized builds (e2e-fd-spray, e2e-closer-fuse,
 * e2e-define-flood ran it into leak reports on its exit paths). */
int __lsan_is_turned_off(void);
int
__lsan_is_turned_off(void)
{
	return 1;
}

/* Whether a mode that runs for SECONDS (until END) goes on at its I-th turn: until END, or
 * until the file that PMC_TEST_RAW_STOP names exists (looked at when I is a multiple of
 * EVERY, never before the first turn is done: a test ends its hogs once it has checked what
 * it came for, not after a time it guessed, and each has done its work at least once). */
static bool
running(time_t end, uint64_t i, uint64_t every)
{
	static const char *stop;
	static bool looked;
	if (!looked) {
		stop = getenv("PMC_TEST_RAW_STOP");
		looked = true;
	}
	if (stop && i > 0 && i % every == 0 && access(stop, F_OK) == 0)
		return false;
	return time(NULL) < end;
}

/* A mode that runs for a while says, once its Hello was answered, that it is at work. */
static void
say_connected(void)
{
	printf("connected\n");
	fflush(stdout);
}

int
main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: pmc-test-raw SOCKET MODE [ARG]\n");
		return 2;
	}
	const char *mode = argv[2];
	if (!strcmp(mode, "stuck") && argc == 4) {
		struct sockaddr_un sa;
		int l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (l < 0 || pmc_wire_sockaddr(argv[1], &sa) < 0 ||
		    bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 0) < 0) {
			perror("stuck: listen");
			return 1;
		}
		/* Connect until one would wait: the backlog is then full. */
		for (int i = 0; i < 64; i++)
			if (pmc_wire_connect_flags(argv[1], SOCK_NONBLOCK) < 0)
				break;
		printf("ready\n");
		fflush(stdout);
		sleep((unsigned)atoi(argv[3]));
		return 0;
	}
	if (!strcmp(mode, "pass-then-register") && argc == 4) {
		int sp[2];
		if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) < 0)
			return 1;
		pid_t child = fork();
		if (child < 0)
			return 1;
		if (child == 0) {
			int c = pmc_wire_connect(argv[1]);
			if (c < 0 || hello(c) < 0)
				_exit(1);
			Pmc__Request st;
			Pmc__Status sb;
			status_req(&st, &sb);
			/* Any message carries the fd: a Status, which the parent never sends. */
			if (pmc_wire_send(sp[1], &st.base, &c, 1, 0) < 0)
				_exit(1);
			execl(argv[3], argv[3], "3", (char *)NULL);
			_exit(127);
		}
		int fds[1];
		size_t n = 0;
		static uint8_t buf[4096];
		if (pmc_wire_recv(sp[0], buf, sizeof(buf), fds, 1, &n, 0) < 0 || n != 1)
			return 1;
		wait_exec(child);
		int err = register_tid(fds[0], child, NULL);
		int ok = status_served(fds[0]) == 0;
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		printf("served=%d\n", ok);
		return err == EPERM && ok ? 0 : 1;
	}
	if (!strcmp(mode, "silent") && argc == 5) {
		/* Each connection ends one of two ways, told apart by what it reads first: an
		 * error Response, then EOF (refused at accept), or EOF alone (closed at the
		 * daemon's --hello-timeout). Waited for, not guessed by time: a loaded machine
		 * takes its time to accept. */
		int n = atoi(argv[3]), refused = 0, closed = 0, open_ = 0, failed = 0, fds[256];
		if (n < 1 || n > 256)
			return 2;
		for (int i = 0; i < n; i++)
			if ((fds[i] = pmc_wire_connect(argv[1])) >= 0)
				open_++;
			else
				failed++;
		struct timespec t0;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		long deadline_ms = atol(argv[4]) * 1000;
		while (open_ > 0) {
			struct pollfd p[256];
			int np = 0, idx[256];
			for (int i = 0; i < n; i++)
				if (fds[i] >= 0) {
					p[np] = (struct pollfd){.fd = fds[i], .events = POLLIN};
					idx[np++] = i;
				}
			struct timespec t;
			clock_gettime(CLOCK_MONOTONIC, &t);
			long left = deadline_ms - ((t.tv_sec - t0.tv_sec) * 1000 +
			                           (t.tv_nsec - t0.tv_nsec) / 1000000);
			if (left <= 0)
				break;
			int r = poll(p, (nfds_t)np, (int)left);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			for (int k = 0; k < np; k++) {
				if (!p[k].revents)
					continue;
				char b[512];
				ssize_t got = recv(p[k].fd, b, sizeof(b), MSG_DONTWAIT);
				if (got < 0 && errno == EAGAIN)
					continue;
				if (got > 0)
					refused++;
				else
					closed++;
				close(p[k].fd);
				fds[idx[k]] = -1;
				open_--;
			}
		}
		if (open_ > 0)
			printf("open=%d\n", open_);
		if (failed > 0)
			printf("failed=%d\n", failed);
		printf("refused=%d\nclosed=%d\n", refused, closed);
		return 0;
	}
	if (!strcmp(mode, "define-flood") && (argc == 5 || (argc == 6 && !strcmp(argv[5], "hold"))))
		return define_flood(argv[1], atoi(argv[3]), (uint32_t)strtoul(argv[4], NULL, 10),
		                    argc == 6);
	if (!strcmp(mode, "command-unread") && argc == 5)
		return command_unread(argv[1], atoi(argv[3]), atoi(argv[4]));
	if (!strcmp(mode, "spray") && argc == 5) {
		int conns = atoi(argv[3]), nfd = atoi(argv[4]);
		if (conns < 1 || conns > 4096 || nfd < 1 || nfd > 253)
			return 2;
		int *socks = calloc((size_t)conns, sizeof(int));
		int *nulls = calloc((size_t)nfd, sizeof(int));
		if (!socks || !nulls)
			return 1;
		for (int i = 0; i < nfd; i++)
			if ((nulls[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
				return 1;
		for (int i = 0; i < conns; i++)
			socks[i] = pmc_wire_connect(argv[1]);
		/* A Status, packed by hand: pmc_wire_send() attaches WIRE_MAX_FDS at most. */
		Pmc__Request req;
		Pmc__Status st;
		status_req(&req, &st);
		uint8_t buf[64];
		size_t len = pmc__request__pack(&req, buf);
		union {
			char buf[CMSG_SPACE(sizeof(int) * 253)];
			struct cmsghdr align;
		} ctrl;
		int sent = 0, closed = 0;
		for (int i = 0; i < conns; i++) {
			if (socks[i] < 0)
				continue;
			struct iovec iov = {.iov_base = buf, .iov_len = len};
			struct msghdr mh = {.msg_iov = &iov,
			                    .msg_iovlen = 1,
			                    .msg_control = ctrl.buf,
			                    .msg_controllen =
			                            CMSG_SPACE(sizeof(int) * (size_t)nfd)};
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfd);
			memcpy(CMSG_DATA(c), nulls, sizeof(int) * (size_t)nfd);
			if (sendmsg(socks[i], &mh, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0)
				sent++;
		}
		for (int i = 0; i < conns; i++) {
			if (socks[i] < 0) {
				closed++;
				continue;
			}
			/* Closed, or refused: an answer (an error), then closed. */
			closed += wait_closed(socks[i], false) == 0;
			close(socks[i]);
		}
		printf("sent=%d\nclosed=%d\n", sent, closed);
		free(socks);
		free(nulls);
		return 0;
	}
	if (!strcmp(mode, "linger") && argc == 4) {
		int conns = atoi(argv[3]), closed = 0, answered = 0, unsent = 0;
		if (conns < 1 || conns > 4096)
			return 2;
		int *socks = calloc((size_t)conns, sizeof(int));
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (!socks || null < 0)
			return 1;
		for (int i = 0; i < conns; i++)
			if ((socks[i] = pmc_wire_connect(argv[1])) < 0 || hello(socks[i]) < 0) {
				printf("connection %d refused\n", i);
				return 1;
			}
		printf("ready\n");
		fflush(stdout);
		char line[8];
		(void)!fgets(line, sizeof(line), stdin);
		Pmc__Request req;
		Pmc__Status st;
		status_req(&req, &st);
		for (int i = 0; i < conns; i++) {
			if (pmc_wire_send(socks[i], &req.base, &null, 1, MSG_DONTWAIT) < 0) {
				closed++; /* closed already */
				unsent++;
			} else {
				int r = wait_closed(socks[i], true);
				closed += r == 0;
				answered += r == 1;
			}
			close(socks[i]);
		}
		printf("closed=%d\nanswered=%d\nunsent=%d\n", closed, answered, unsent);
		free(socks);
		return 0;
	}
	if (!strcmp(mode, "fill-exit") && argc == 4) {
		int n = atoi(argv[3]);
		if (n < 1 || n > 4096)
			return 2;
		int pipefd[2];
		if (pipe(pipefd) < 0)
			return 1;
		for (int i = 0; i < n; i++) {
			pid_t pid = fork();
			if (pid < 0)
				return 1;
			if (pid)
				continue;
			close(pipefd[0]);
			int c = pmc_wire_connect(argv[1]);
			uint64_t sent = 0;
			if (c < 0 || hello(c) < 0 || register_self(c) < 0 ||
			    send_regions(c, 1, 64, 1, 0, 0) < 0)
				_exit(1);
			sent = 64;
			/* As much as the library asks for (1 MiB, as net.core.wmem_max allows). */
			int sz = 1 << 20;
			(void)setsockopt(c, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
			batch_flags = MSG_DONTWAIT;
			for (int b = 0; b < 100000; b++) {
				if (send_regions(c, 1, 64, 0, 0, sent) < 0)
					break;
				sent += 64;
			}
			/* The count to the parent, then gone at once, the batches queued. */
			if (write(pipefd[1], &sent, sizeof(sent)) != sizeof(sent))
				_exit(1);
			_exit(0);
		}
		close(pipefd[1]);
		uint64_t total = 0, one;
		int got = 0;
		while (read(pipefd[0], &one, sizeof(one)) == sizeof(one)) {
			total += one;
			got++;
		}
		int bad = 0, status;
		while (wait(&status) > 0)
			bad += !WIFEXITED(status) || WEXITSTATUS(status);
		printf("sent=%llu\nprocesses=%d\nfailed=%d\n", (unsigned long long)total, got, bad);
		return bad ? 1 : 0;
	}
	if (!strcmp(mode, "victim") && argc == 4) {
		/* N times, 10 ms apart: connect and Hello, then a Status on that connection; the
		 * round trips' p50, p99 and max (us), of each. */
		int n = atoi(argv[3]);
		if (n < 1 || n > 100000)
			return 2;
		uint64_t *hello_us = calloc((size_t)n, sizeof(uint64_t));
		uint64_t *status_us = calloc((size_t)n, sizeof(uint64_t));
		if (!hello_us || !status_us)
			return 1;
		for (int i = 0; i < n; i++) {
			uint64_t t0 = now_us();
			int c = pmc_wire_connect(argv[1]);
			if (c < 0 || hello(c) < 0) {
				printf("hello %d failed\n", i);
				return 1;
			}
			uint64_t t1 = now_us();
			if (status_served(c) < 0) {
				printf("status %d failed\n", i);
				return 1;
			}
			status_us[i] = now_us() - t1;
			hello_us[i] = t1 - t0;
			close(c);
			usleep(10 * 1000);
		}
		qsort(hello_us, (size_t)n, sizeof(uint64_t), u64_cmp);
		qsort(status_us, (size_t)n, sizeof(uint64_t), u64_cmp);
		printf("hello_us=%llu %llu %llu\nstatus_us=%llu %llu %llu\n",
		       (unsigned long long)hello_us[n / 2],
		       (unsigned long long)hello_us[(size_t)n * 99 / 100],
		       (unsigned long long)hello_us[n - 1], (unsigned long long)status_us[n / 2],
		       (unsigned long long)status_us[(size_t)n * 99 / 100],
		       (unsigned long long)status_us[n - 1]);
		free(hello_us);
		free(status_us);
		return 0;
	}
	int fd = pmc_wire_connect(argv[1]);
	if (fd < 0) {
		fprintf(stderr, "connect: %s\n", strerror(-fd));
		return 1;
	}
	Pmc__Request req;
	Pmc__Status st;
	status_req(&req, &st);

	call_paths = !strcmp(mode, "define") && argc == 4 && strcmp(argv[3], "no-paths");
	if (!strcmp(mode, "no-hello")) {
		if (pmc_wire_send(fd, &req.base, NULL, 0, 0) < 0)
			return 1;
		return expect_closed(fd);
	}
	if (hello(fd) < 0) {
		fprintf(stderr, "hello refused\n");
		return 1;
	}
	if (!strcmp(mode, "foreign-tid") && argc == 4)
		return register_tid(fd, atoi(argv[3]), NULL) == EPERM ? 0 : 1;
	if (!strcmp(mode, "event") && (argc == 4 || argc == 5))
		return register_tid(fd, getpid(), argv[3]) == (argc == 5 ? atoi(argv[4]) : ENOENT)
		               ? 0
		               : 1;
	if (!strcmp(mode, "oversize")) {
		size_t len = 2u << 20;
		int sz = 4 << 20;
		/* Only root may raise the buffer this far: the test runs this mode as root. */
		if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0) {
			perror("SO_SNDBUFFORCE");
			return 1;
		}
		char *big = calloc(1, len);
		if (!big || send(fd, big, len, 0) != (ssize_t)len) {
			perror("send");
			return 1;
		}
		free(big);
		return expect_closed(fd);
	}
	if (!strcmp(mode, "many-events") && argc == 4) {
		int n = atoi(argv[3]);
		char *events[64];
		if (n < 1 || n > 64)
			return 2;
		for (int i = 0; i < n; i++)
			events[i] = "page-faults";
		Pmc__Response *resp;
		if (register_events(fd, getpid(), events, (size_t)n, &resp) < 0)
			return 1;
		int err = resp->error;
		printf("error=%d (%s)\nmessage=%s\n", err, err ? strerror(err) : "none",
		       resp->message);
		pmc__response__free_unpacked(resp, NULL);
		return err == E2BIG ? 0 : 1;
	}
	if (!strcmp(mode, "hold") && argc == 4) {
		printf("held\n");
		fflush(stdout);
		sleep((unsigned)atoi(argv[3]));
		return 0;
	}
	if (!strcmp(mode, "orphan")) {
		int p[2];
		if (pipe(p) < 0)
			return 1;
		pid_t child = fork();
		if (child < 0)
			return 1;
		if (child > 0)
			_exit(0); /* the connection's process is gone; its child holds the socket */
		close(p[1]);
		usleep(200 * 1000);
		return register_tid(fd, getpid(), NULL) == ESRCH ? 0 : 1;
	}
	if (!strcmp(mode, "reattach-exit") && argc == 4) {
		/* Hello (said above), then, once a line comes on stdin, a reattach of this
		 * thread and a batch of N regions, and exit without waiting. */
		uint32_t n = (uint32_t)atoi(argv[3]);
		printf("hello\npid=%d\n", (int)getpid());
		fflush(stdout);
		char line[8];
		(void)!fgets(line, sizeof(line), stdin);
		if (n < 1 || n > 64 || reattach_tid(fd, getpid()) < 0 ||
		    send_regions(fd, 1, n, 1, 0, 0) < 0)
			return 1;
		return 0;
	}
	if (!strcmp(mode, "exec-then-register") && argc == 4) {
		pid_t parent = getpid();
		pid_t child = fork();
		if (child < 0)
			return 1;
		if (child > 0) {
			execl(argv[3], argv[3], "3", (char *)NULL);
			_exit(127);
		}
		wait_exec(parent);
		int err = register_tid(fd, parent, NULL);
		if (reattach_tid(fd, parent) < 0)
			return 1;
		int ok = status_served(fd) == 0;
		printf("served=%d\n", ok);
		return err == EPERM && ok ? 0 : 1;
	}
	if (!strcmp(mode, "exec-batch") && argc >= 4) {
		if (register_tid(fd, getpid(), "page-faults") != 0)
			return 1;
		pid_t child = fork();
		if (child < 0)
			return 1;
		if (child == 0) {
			sleep(3);
			_exit(0);
		}
		close(fd);
		execv(argv[3], argv + 3);
		_exit(127);
	}
	if (!strcmp(mode, "canon") && argc >= 4 && argc - 3 <= 16) {
		Pmc__Response *resp;
		if (register_events(fd, getpid(), argv + 3, (size_t)(argc - 3), &resp) < 0)
			return 1;
		int err = resp->error;
		if (err)
			printf("error=%d (%s)\nmessage=%s\n", err, strerror(err), resp->message);
		else if (resp->body_case == PMC__RESPONSE__BODY_REGISTER_REPLY)
			for (size_t i = 0; i < resp->register_reply->n_events; i++)
				printf("name=%s\n", resp->register_reply->events[i]->name);
		pmc__response__free_unpacked(resp, NULL);
		return err ? 1 : 0;
	}
	if (!strcmp(mode, "names-batch") && argc == 4) {
		uint32_t n = (uint32_t)strtoul(argv[3], NULL, 10), one = 1;
		uint32_t *ids = calloc(n ? n : 1, sizeof(*ids));
		char **names = calloc(n ? n : 1, sizeof(*names));
		char *text = calloc(n ? n : 1, 8);
		uint64_t wall = 1000, value = 1;
		if (!ids || !names || !text || register_self(fd) < 0)
			return 1;
		for (uint32_t i = 0; i < n; i++) {
			ids[i] = i % 4096 + 1;
			names[i] = text + 8 * (size_t)i;
			snprintf(names[i], 8, "n%u", ids[i]);
		}
		struct batch c = {.n = 1,
		                  .ne = 1,
		                  .n_def = n,
		                  .region = &one,
		                  .def_id = ids,
		                  .wall = &wall,
		                  .values = &value,
		                  .def_name = names};
		int r = send_batch(fd, &c) < 0 || status_served(fd) < 0;
		free(ids);
		free(names);
		free(text);
		if (r)
			return 1;
		printf("sent\n");
		return 0;
	}
	if (!strcmp(mode, "names-batches") && argc == 5) {
		/* Up to K times: a SampleBatch naming N regions (as names-batch) with one sample
		 * of region 1, then a plain batch with one; until a send fails (the daemon
		 * stops). */
		uint32_t n = (uint32_t)strtoul(argv[3], NULL, 10), one = 1;
		unsigned long k = strtoul(argv[4], NULL, 10);
		uint32_t *ids = calloc(n ? n : 1, sizeof(*ids));
		char **names = calloc(n ? n : 1, sizeof(*names));
		char *text = calloc(n ? n : 1, 8);
		uint64_t wall = 1000, value = 1, sent = 0;
		int sz = 4 << 20;
		if (!ids || !names || !text || register_self(fd) < 0)
			return 1;
		/* Room for several of them queued (as net.core.wmem_max allows). */
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		for (uint32_t i = 0; i < n; i++) {
			ids[i] = i % 4096 + 1;
			names[i] = text + 8 * (size_t)i;
			snprintf(names[i], 8, "n%u", ids[i]);
		}
		for (unsigned long j = 0; j < 2 * k; j++) {
			struct batch c = {.n = 1,
			                  .ne = 1,
			                  .n_def = j % 2 ? 0 : n,
			                  .region = &one,
			                  .def_id = ids,
			                  .wall = &wall,
			                  .values = &value,
			                  .def_name = names,
			                  .sent_before = sent};
			if (send_batch(fd, &c) < 0)
				break;
			if (++sent == 1) {
				printf("started\n");
				fflush(stdout);
			}
		}
		printf("sent=%llu\n", (unsigned long long)sent);
		free(ids);
		free(names);
		free(text);
		return 0;
	}
	if (!strcmp(mode, "regions") && argc == 5) {
		uint32_t n = (uint32_t)atoi(argv[3]);
		if (register_self(fd) < 0)
			return 1;
		for (uint32_t i = 0; i < n; i += 64)
			if (send_regions(fd, 1 + i, n - i < 64 ? n - i : 64, 1, 0, i) < 0)
				return 1;
		if (status_served(fd) < 0)
			return 1;
		printf("sent\n");
		fflush(stdout);
		sleep((unsigned)atoi(argv[4]));
		return 0;
	}
	if (!strcmp(mode, "unread") && argc == 4) {
		int n = atoi(argv[3]), sent = 0;
		if (register_self(fd) < 0 || send_regions(fd, 1, 40, 1, 0, 0) < 0 ||
		    status_served(fd) < 0)
			return 1;
		Pmc__Query q = PMC__QUERY__INIT;
		Pmc__Request qr = PMC__REQUEST__INIT;
		qr.body_case = PMC__REQUEST__BODY_QUERY;
		qr.query = &q;
		for (; sent < n; sent++) {
			if (pmc_wire_send(fd, &qr.base, NULL, 0, MSG_DONTWAIT) == 0)
				continue;
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			if (poll(&p, 1, 500) <= 0 || (p.revents & (POLLHUP | POLLERR)))
				break;
		}
		/* The daemon closes the connection: the replies stay queued here, unread. */
		struct pollfd p = {.fd = fd, .events = POLLRDHUP};
		int closed = 0;
		for (int i = 0; i < 50 && !closed; i++) {
			closed = poll(&p, 1, 100) > 0 && (p.revents & (POLLRDHUP | POLLHUP));
		}
		int queued = 0;
		if (ioctl(fd, SIOCINQ, &queued) < 0)
			return 1;
		printf("sent=%d\nqueued=%d\nclosed=%d\n", sent, queued, closed);
		return 0;
	}
	if (!strcmp(mode, "spread") && argc == 4) {
		uint32_t n = (uint32_t)atoi(argv[3]), region[64], def_id[1];
		uint64_t v[64];
		char name[16], *def_name[1] = {name};
		if (register_self(fd) < 0)
			return 1;
		for (uint32_t r = 1; r <= n; r++) {
			for (int k = 0; k < 64; k++) {
				region[k] = r;
				v[k] = UINT64_C(1) << k;
			}
			def_id[0] = r;
			snprintf(name, sizeof(name), "s%u", r);
			struct batch c = {.n = 64,
			                  .ne = 1,
			                  .n_def = 1,
			                  .region = region,
			                  .def_id = def_id,
			                  .wall = v,
			                  .values = v,
			                  .def_name = def_name,
			                  .sent_before = 64 * (uint64_t)(r - 1)};
			if (send_batch(fd, &c) < 0)
				return 1;
		}
		if (status_served(fd) < 0)
			return 1;
		printf("sent\n");
		return 0;
	}
	if (!strcmp(mode, "dead-threads") && argc == 4) {
		int n = atoi(argv[3]);
		for (int i = 0; i < n; i++) {
			struct waiter w;
			int back[2];
			pthread_t th;
			char c;
			if (pipe(w.pipe) < 0 || pipe(back) < 0)
				return 1;
			/* The thread writes its tid's readiness on back[1], waits on w.pipe. */
			int keep = w.pipe[1];
			w.pipe[1] = back[1];
			if (pthread_create(&th, NULL, waiter_main, &w) || read(back[0], &c, 1) != 1)
				return 1;
			if (register_tid(fd, w.tid, "page-faults") != 0)
				return 1;
			close(keep); /* the thread ends, and never says so */
			pthread_join(th, NULL);
			close(w.pipe[0]);
			close(back[0]);
			close(back[1]);
		}
		return register_tid(fd, getpid(), "page-faults") == 0 ? 0 : 1;
	}
	if (!strcmp(mode, "flood") && argc == 4) {
		time_t end = time(NULL) + atoi(argv[3]);
		if (register_self(fd) < 0 || send_regions(fd, 1, 64, 1, 0, 0) < 0)
			return 1;
		say_connected();
		for (uint64_t i = 1; running(end, i, 64); i++) {
			if (send_regions(fd, 1, 64, 0, 0, 64 * i) < 0)
				return 1;
			if (i % 100 == 0 && status_served(fd) < 0)
				return 1;
		}
		printf("sent\n");
		return 0;
	}
	if (!strcmp(mode, "lie") && argc == 4) {
		int n = atoi(argv[3]);
		if (register_self(fd) < 0 || send_regions(fd, 1, 1, 1, 0, 0) < 0)
			return 1;
		for (int i = 0; i < n; i++)
			if (send_regions(fd, 1, 1, 0, 88999, 100001 * (uint64_t)(i + 1)) < 0)
				return 1;
		if (status_served(fd) < 0)
			return 1;
		printf("sent\n");
		return 0;
	}
	if (!strcmp(mode, "claim-max") && argc == 4) {
		int n = atoi(argv[3]);
		if (register_self(fd) < 0 || send_regions(fd, 1, 1, 1, 0, 0) < 0)
			return 1;
		for (int i = 0; i < n; i++)
			if (send_regions(fd, 1, 1, 0, UINT64_MAX, UINT64_MAX) < 0)
				return 1;
		if (status_served(fd) < 0)
			return 1;
		printf("sent\n");
		return 0;
	}
	if (!strcmp(mode, "floor") && argc == 6) {
		uint64_t fv[2] = {strtoull(argv[5], NULL, 10), 0};
		Pmc__ThreadFloor f = PMC__THREAD_FLOOR__INIT;
		f.tid = getpid();
		f.wall_ns = strtoull(argv[4], NULL, 10);
		f.n_values = strcmp(argv[5], "bad") ? 1 : 2;
		f.values = fv;
		Pmc__Request fr = PMC__REQUEST__INIT;
		fr.body_case = PMC__REQUEST__BODY_THREAD_FLOOR;
		fr.thread_floor = &f;
		if (register_self(fd) < 0 || pmc_wire_send(fd, &fr.base, NULL, 0, 0) < 0)
			return 1;
		if (f.n_values == 2)
			return expect_closed(fd);
		uint32_t region[1] = {1}, def_id[1] = {1};
		uint64_t wall[1] = {1000}, values[1] = {7};
		struct batch c = {.n = 1,
		                  .ne = 1,
		                  .n_def = 1,
		                  .region = region,
		                  .def_id = def_id,
		                  .wall = wall,
		                  .values = values,
		                  .def_name = argv + 3};
		if (send_batch(fd, &c) < 0 || status_served(fd) < 0)
			return 1;
		printf("sent\n");
		return 0;
	}
	if (!strcmp(mode, "batch") && argc == 4) {
		uint32_t region[1] = {1}, def_id[1] = {1};
		uint64_t wall[1] = {1000}, values[1] = {7};
		struct batch c = {.n = 1,
		                  .ne = 1,
		                  .n_def = 1,
		                  .region = region,
		                  .def_id = def_id,
		                  .wall = wall,
		                  .values = values,
		                  .def_name = argv + 3};
		if (register_self(fd) < 0 || send_batch(fd, &c) < 0 || status_served(fd) < 0)
			return 1;
		printf("sent\n");
		return 0;
	}
	if (!strcmp(mode, "define") && argc == 4)
		return define_kind(fd, argv[3]);
	if (!strncmp(mode, "heads-", 6))
		return send_heads(fd, mode + 6, &req);
	if (!strcmp(mode, "reset-queued") && argc == 4)
		return reset_queued(fd, argv[3]);
	if (!strcmp(mode, "ring-closed"))
		return ring_closed(fd);
	if (!strcmp(mode, "ring-park") && argc == 4)
		return ring_park(fd, argv[3], false);
	if (!strcmp(mode, "ring-park-fds") && argc == 4)
		return ring_park(fd, argv[3], true);
	if (!strncmp(mode, "ring-", 5))
		return send_ring(fd, mode + 5, &req);
	if (!strcmp(mode, "garbage")) {
		static const unsigned char junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02};
		if (send(fd, junk, sizeof(junk), 0) < 0)
			return 1;
		return expect_closed(fd);
	}
	if (!strcmp(mode, "fds")) {
		int extra[1] = {0};
		if (pmc_wire_send(fd, &req.base, extra, 1, 0) < 0)
			return 1;
		return expect_closed(fd);
	}
	if (!strcmp(mode, "bad-batch")) {
		Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
		uint32_t region[1] = {1};
		uint64_t wall[1] = {5};
		b.tid = getpid();
		b.n_region = 1, b.region = region;
		b.n_wall_ns = 1, b.wall_ns = wall;
		Pmc__Request breq = PMC__REQUEST__INIT;
		breq.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
		breq.sample_batch = &b;
		if (pmc_wire_send(fd, &breq.base, NULL, 0, 0) < 0)
			return 1;
		return expect_closed(fd);
	}
	if (!strcmp(mode, "scaled-batch")) {
		if (send_scaled_batch(fd, 1) < 0)
			return 1;
		/* Any answer after the batch means the daemon has read it. */
		Pmc__Response *resp;
		if (call(fd, &req, &resp) < 0 || resp->body_case != PMC__RESPONSE__BODY_STATUS)
			return 1;
		pmc__response__free_unpacked(resp, NULL);
		printf("sent\n");
		return 0;
	}
	if (!strcmp(mode, "bad-mask")) {
		if (send_scaled_batch(fd, 1u << 2) < 0)
			return 1;
		return expect_closed(fd);
	}
	if (!strcmp(mode, "two-streams")) {
		/* This connection defines 3,000 regions; B's plain Query and Status read what
		 * other connections queued (the daemon's drain), A's two streamed Queries among
		 * it: the first must stop that reading until its reply is sent. */
		if (register_self(fd) < 0)
			return 1;
		for (uint32_t i = 0; i < 3000; i += 64)
			if (send_regions(fd, 1 + i, 3000 - i < 64 ? 3000 - i : 64, 1, 0, i) < 0)
				return 1;
		if (status_served(fd) < 0)
			return 1;
		int a = pmc_wire_connect(argv[1]), b = pmc_wire_connect(argv[1]);
		if (a < 0 || b < 0 || hello(a) < 0 || hello(b) < 0)
			return 1;
		char *none = "nothing-matches", *all = "r1*";
		for (int attempt = 0; attempt < 10; attempt++) {
			Pmc__Query qb = PMC__QUERY__INIT, qa = PMC__QUERY__INIT,
			           qa2 = PMC__QUERY__INIT;
			qb.n_regions = 1, qb.regions = &all;
			qa.stream = true;
			qa2.stream = true, qa2.n_regions = 1, qa2.regions = &none;
			Pmc__Request rb = PMC__REQUEST__INIT, ra = PMC__REQUEST__INIT,
			             ra2 = PMC__REQUEST__INIT;
			rb.body_case = ra.body_case = ra2.body_case = PMC__REQUEST__BODY_QUERY;
			rb.query = &qb, ra.query = &qa, ra2.query = &qa2;
			if (pmc_wire_send(b, &rb.base, NULL, 0, 0) < 0 ||
			    pmc_wire_send(b, &req.base, NULL, 0, 0) < 0 ||
			    pmc_wire_send(a, &ra.base, NULL, 0, 0) < 0 ||
			    pmc_wire_send(a, &ra2.base, NULL, 0, 0) < 0)
				return 1;
			usleep(300000);
			/* B's answers, then all of A's: two replies, each to its last part. */
			for (int k = 0; k < 2; k++) {
				uint8_t *buf;
				size_t len;
				int r = pmc_wire_wait(b, 10000, &buf, &len, NULL, 0, NULL);
				if (r < 0) {
					printf("attempt %d: answer %d of B's two: %s\n", attempt,
					       k + 1, strerror(-r));
					return 1;
				}
				free(buf);
			}
			for (int k = 0; k < 2; k++) {
				for (bool more = true; more;) {
					uint8_t *buf;
					size_t len;
					Pmc__Response *resp;
					if (pmc_wire_wait(a, 10000, &buf, &len, NULL, 0, NULL) <
					            0 ||
					    pmc_wire_unpack_response(buf, len, &resp) < 0) {
						printf("attempt %d: reply %d of A's two did not "
						       "come\n",
						       attempt, k + 1);
						return 1;
					}
					free(buf);
					more = resp->body_case == PMC__RESPONSE__BODY_QUERY &&
					       resp->query->more;
					pmc__response__free_unpacked(resp, NULL);
				}
			}
			if (status_served(fd) < 0) {
				printf("attempt %d: the daemon no longer answers\n", attempt);
				return 1;
			}
		}
		printf("served\n");
		return 0;
	}
	if (!strcmp(mode, "query-slow") && argc == 4) {
		Pmc__Query q = PMC__QUERY__INIT;
		Pmc__Request qr = PMC__REQUEST__INIT;
		q.stream = true;
		qr.body_case = PMC__REQUEST__BODY_QUERY;
		qr.query = &q;
		if (pmc_wire_send(fd, &qr.base, NULL, 0, 0) < 0)
			return 1;
		size_t regions = 0, parts = 0;
		for (bool more = true; more; parts++) {
			uint8_t *buf;
			size_t len;
			Pmc__Response *resp;
			if (pmc_wire_wait(fd, 10000, &buf, &len, NULL, 0, NULL) < 0 ||
			    pmc_wire_unpack_response(buf, len, &resp) < 0) {
				printf("no part %zu\n", parts + 1);
				return 1;
			}
			free(buf);
			if (resp->error || resp->body_case != PMC__RESPONSE__BODY_QUERY) {
				printf("error=%d message=%s\n", resp->error, resp->message);
				return 1;
			}
			regions += resp->query->n_regions;
			more = resp->query->more;
			pmc__response__free_unpacked(resp, NULL);
			if (parts == 0) {
				printf("first part\n");
				fflush(stdout);
				sleep((unsigned)atoi(argv[3]));
			}
		}
		printf("regions=%zu\nparts=%zu\n", regions, parts);
		return 0;
	}
	if (!strcmp(mode, "query-whole") && argc <= 4) {
		/* One reply (no Query.stream), with histograms when asked: what it holds, or why
		 * the daemon refused it; exit 0 either way. */
		Pmc__Query q = PMC__QUERY__INIT;
		Pmc__Request qr = PMC__REQUEST__INIT;
		Pmc__Response *resp;
		q.hist = argc == 4 && !strcmp(argv[3], "hist");
		qr.body_case = PMC__REQUEST__BODY_QUERY;
		qr.query = &q;
		if (call(fd, &qr, &resp) < 0)
			return 1;
		int err = resp->error;
		if (err) {
			printf("error=%d (%s)\nmessage=%s\n", err, strerror(err), resp->message);
		} else {
			uint64_t runs = 0, buckets = 0;
			for (size_t i = 0; i < resp->query->n_regions; i++) {
				runs += resp->query->regions[i]->count;
				buckets += resp->query->regions[i]->wall_ns->n_buckets;
			}
			printf("regions=%zu\nruns=%llu\nbuckets=%llu\nmore=%d\n",
			       resp->query->n_regions, (unsigned long long)runs,
			       (unsigned long long)buckets, resp->query->more);
		}
		pmc__response__free_unpacked(resp, NULL);
		return 0;
	}
	if (!strcmp(mode, "hog") && argc == 5) {
		/* For SECONDS, as fast as it can: streamed Queries with histograms, every part
		 * read ("stream"), or whole ones ("whole"). */
		bool stream = !strcmp(argv[3], "stream");
		time_t end = time(NULL) + atoi(argv[4]);
		uint64_t queries = 0, bytes = 0;
		say_connected();
		Pmc__Query q = PMC__QUERY__INIT;
		Pmc__Request qr = PMC__REQUEST__INIT;
		q.hist = true;
		q.stream = stream;
		qr.body_case = PMC__REQUEST__BODY_QUERY;
		qr.query = &q;
		for (; running(end, queries, 1); queries++) {
			if (pmc_wire_send(fd, &qr.base, NULL, 0, 0) < 0)
				return 1;
			for (bool more = true; more;) {
				uint8_t *buf;
				size_t len;
				Pmc__Response *resp;
				if (pmc_wire_wait(fd, 60000, &buf, &len, NULL, 0, NULL) < 0 ||
				    pmc_wire_unpack_response(buf, len, &resp) < 0)
					return 1;
				free(buf);
				bytes += len;
				more = !resp->error &&
				       resp->body_case == PMC__RESPONSE__BODY_QUERY &&
				       resp->query->more;
				pmc__response__free_unpacked(resp, NULL);
			}
		}
		printf("queries=%llu\nbytes=%llu\n", (unsigned long long)queries,
		       (unsigned long long)bytes);
		return 0;
	}
	if (!strcmp(mode, "status-closed")) {
		/* The daemon's end of this connection closed before this returns: a test counts
		 * the daemon's fds at rest after it, with no connection of its own among them. */
		Pmc__Response *resp;
		if (call(fd, &req, &resp) < 0 || resp->body_case != PMC__RESPONSE__BODY_STATUS)
			return 1;
		pmc__response__free_unpacked(resp, NULL);
		if (shutdown(fd, SHUT_WR) < 0)
			return 1;
		for (;;) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			char b[256];
			if (poll(&p, 1, 60000) <= 0)
				return 1;
			ssize_t n = recv(fd, b, sizeof(b), 0);
			if (n == 0)
				break;
			if (n < 0 && errno != EINTR)
				return 1;
		}
		printf("closed\n");
		return 0;
	}
	if (!strcmp(mode, "status")) {
		Pmc__Response *resp;
		if (call(fd, &req, &resp) < 0 || resp->body_case != PMC__RESPONSE__BODY_STATUS)
			return 1;
		printf("clients=%u rejected=%llu\n", resp->status->clients,
		       (unsigned long long)resp->status->rejected);
		printf("histogram_bytes=%llu\nhistogram_missed=%llu\n",
		       (unsigned long long)resp->status->histogram_bytes,
		       (unsigned long long)resp->status->histogram_missed);
		pmc__response__free_unpacked(resp, NULL);
		return 0;
	}
	fprintf(stderr, "pmc-test-raw: unknown mode %s\n", mode);
	return 2;
}
