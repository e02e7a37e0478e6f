/* pmc-bench-ingest: the daemon's side of the costs, driven over the wire protocol directly
 * (the pmc_wire library and the generated protobuf-c code, no libpmcclient).
 *
 *   pmc-bench-ingest ingest SOCKET NPROC REPS SECONDS
 *	Daemon ingest. NPROC load processes each connect and talk as libpmcclient does by
 *	default: Hello with call_paths (checked in HelloReply), register their own thread
 *	(page-faults, task-clock, context-switches, cpu-migrations; the fds received are closed),
 *	define a few regions and one root call path per region (path k: region k, no parent) in
 *	one Define, then send one prebuilt full SampleBatch (512 samples, its region column
 *	those path ids, no def_*) after another, as fast as the daemon takes them: as frames
 *	of a SampleRing of 1 MiB (a RingWake when the daemon had read every earlier one), as
 *	libpmcclient does, where the daemon takes one; with PMC_BENCH_DATAGRAMS=1 (or a daemon
 *	that takes no ring) as datagrams with blocking send(). With PMC_BENCH_OLD_CLIENT=1 in the
 *environment (or where the daemon does not take call paths: a line on stderr says so) they connect
 *as an older client does: Hello without call_paths, the regions announced (def_id, def_name) in a
 *first SampleBatch, region ids in the batches. The steady batch is the same datagram either way.
 *REPS times: the load runs; the daemon's own sample counter (Status) is read SECONDS apart; the
 *load pauses; then protobuf-c alone unpacks (and frees) the datagram the first load process sends,
 *in a loop for SECONDS / 2 on this core (on CPU N with PMC_BENCH_UNPACK_CPU=N: bench/run puts it on
 *the daemon's). Prints the way the load talked (client=call-paths or client=old) and the medians:
 *daemon samples/s over wall time, the daemon's CPU use meanwhile (/proc/PID/schedstat) and samples
 *per daemon CPU-second, protobuf-c's samples per second of wall and of CPU time, and the median
 *per-repetition ratio of the two per-CPU-second rates (one core's capacity each: other processes on
 *the machine take CPU time from either side unevenly).
 *
 *   pmc-bench-ingest beside SOCKET NPROC REPS SECONDS CMD...
 *	Ingest with other work beside it. NPROC load processes send as in ingest (with call
 *	paths unless PMC_BENCH_OLD_CLIENT=1), without a pause, at nice -10 (ahead of CMD on
 *	their CPU; yet a CMD that runs still delays a load process that wakes, by up to its
 *	slice: a CMD that asks nothing of the daemon shows what that costs, bench/scale.sh's
 *	row 9). REPS times, the variants in rotating order: the
 *	daemon's samples per second (Status, SECONDS apart) with nothing else, and with each
 *	CMD (a shell command line, its output to /dev/null) run again and again by /bin/sh
 *	meanwhile, from 0.3 s before the window until it closes (the run in progress then
 *	completes before the next window, up to 30 s). Prints per variant (alone, beside1,
 *	...): the median samples/s of wall time and per daemon CPU-second, the daemon's CPU
 *	share, the runs of CMD completed per second (from the loop's start to the end of its
 *	last run: a run longer than the window counts at its length), and the medians of the
 *	per-repetition ratios to the variant alone (of wall time: the measure; per
 *	daemon CPU-second: what the other work took of the daemon's time, whatever else ran on
 *	its CPU).
 *
 *   pmc-bench-ingest decode REPS SECONDS
 *	The daemon's work on one batch, in this process, without the wire: the steady batch of
 *	ingest (512 samples over 8 call paths, 4 events) counted into a registry of its own (8
 *	regions, a root path each) by the daemon's code in place (batch_scan() and
 *	ingest_batch() reading the columns where they lie), decoded into arrays first (the
 *	columns copied, then counted as before the in-place path), unpacked (and freed) by
 *	protobuf-c alone, and, as a SampleRing's frame holds them, the same samples in fixed
 *	form (wall_ns_fixed, values_fixed) counted in place ("fixed"); REPS times, each for
 *	SECONDS / 4, in rotating order, CPU time. Prints the medians in ns per batch and the
 *	median per-repetition ratios to protobuf-c's unpack of the varint batch.
 *
 *   pmc-bench-ingest query SOCKET
 *	The whole of a streamed Query (every region of every process), each part read and
 *	unpacked, nothing printed of it: a reader as fast as the daemon can stream. Prints the
 *	regions, the parts, their bytes and the wall time.
 *
 *   pmc-bench-ingest rtt SOCKET N PID REGION
 *	Request round trips on one connection (connect and Hello once): N times, alternating,
 *	a Status and a streamed Query for region REGION (a glob, as pmcctl sends --region) of
 *	process PID, each timed from its send to its (last) reply. Prints the p50 and p99 of
 *	each.
 *
 *   pmc-bench-ingest load SOCKET SECONDS
 *	One load process alone (as in ingest, PMC_BENCH_OLD_CLIENT too), for profiling the
 *	daemon (perf record -p).
 *
 *   pmc-bench-ingest register SOCKET REPS ITERS
 *	Thread registration: on one connection (connect and Hello once), RegisterThread for this
 *	thread, wait for RegisterReply and its fds, close them; against perf_event_open of the
 *	same group of events on this thread, then close; and, to show what the round trip alone
 *	costs, a Status request and its reply on the same connection. And the opens as the
 *	daemon makes them (struct opener): by another process on the daemon's CPUs, for this
 *	thread, waiting meanwhile; that process's hand-off alone beside, to take out. Alternating
 *	blocks of ITERS, REPS times.
 *
 *   pmc-bench-ingest register-parts ITERS
 *	What a registration costs beyond its round trip and its opens, part by part, in this
 *	process (no daemon): a datagram sent and read on a SOCK_SEQPACKET socketpair with no fd
 *	and with the 4 fds of a perf group attached (SCM_RIGHTS; the received copies closed);
 *	the identity proof (pidfd_open() of this thread, pidfd_send_signal(0), PIDFD_GET_INFO
 *	twice, close); a stat() of /proc/PID/task/TID; a poll() of a pidfd; packing and
 *	unpacking a RegisterThread and a RegisterReply of 4 events. ITERS of each, alternating,
 *	7 times; prints the medians in ns.
 *
 *   pmc-bench-ingest register-lat SOCKET N GAP_US
 *	A new client's control path, N times, one every GAP_US: connect, Hello, RegisterThread
 *	(with the thread's pidfd) and its reply; prints the p50, p99 and max round trip (for
 *	bench/burst.sh, beside a burst of clients and on an idle daemon).
 *
 *   pmc-bench-ingest regions SOCKET NREGIONS
 *	Daemon memory per region: the daemon's resident (VmRSS) and allocated (VmData) memory
 *	before and after this client announces NREGIONS regions (batches of names only), then
 *	again after it sends one sample to each of them. Meant for a fresh daemon.
 *
 * Events: page-faults, task-clock, context-switches, cpu-migrations. Output: key=value lines for
 * bench/run; diagnostics on stderr; exit 1 on failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "common/procstat.h"
#include "common/util.h"
#include "model/batch.h"
#include "model/ingest.h"
#include "model/registry.h"
#include "wire/ring.h"
#include "wire/wire.h"

#define BATCH 512
#define N_REGIONS 8
#define CALL_TIMEOUT_MS 10000
#define MAX_REPS 101
#define MAX_PROCS 64

static volatile uint64_t sink;

static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "pmc-bench-ingest: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void
sleep_s(double s)
{
	struct timespec ts = {.tv_sec = (time_t)s,
	                      .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static pid_t
gettid_(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* One request, @attach attached (taken: closed once sent, while the daemon works; none when
 * < 0), one response; received fds are closed. Dies on any failure. */
static Pmc__Response *
call_fd(int fd, Pmc__Request *req, int attach)
{
	int fds[WIRE_MAX_FDS];
	size_t n_fds = 0, len;
	Pmc__Response *resp = NULL;
	uint8_t *buf = NULL;
	int r = pmc_wire_send(fd, &req->base, &attach, attach >= 0, 0);
	/* The fd attached is in flight once sent: closed while the daemon works, as libpmcclient
	 * does (not after the reply, in the wait). */
	if (attach >= 0)
		close(attach);
	if (r == 0)
		r = pmc_wire_wait(fd, CALL_TIMEOUT_MS, &buf, &len, fds, WIRE_MAX_FDS, &n_fds);
	if (r == 0) {
		r = pmc_wire_unpack_response(buf, len, &resp);
		free(buf);
	}
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	if (r < 0)
		die("request to the daemon: %s", strerror(-r));
	if (resp->error)
		die("the daemon refused: %s", resp->message);
	return resp;
}

static Pmc__Response *
call(int fd, Pmc__Request *req)
{
	return call_fd(fd, req, -1);
}

/* Connects and says Hello, asking for call paths with @want_paths (as libpmcclient does).
 * Return: the socket; *@paths (unless NULL): whether the daemon agreed on call paths. */
static int
conn_open_paths(const char *path, int want_paths, int *paths, uint32_t *ring)
{
	int fd = pmc_wire_connect(path);

	if (fd < 0)
		die("connect %s: %s", path, strerror(-fd));
	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.client = "pmc-bench-ingest";
	h.call_paths = want_paths != 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	Pmc__Response *resp = call(fd, &req);
	if (paths)
		*paths = want_paths && resp->body_case == PMC__RESPONSE__BODY_HELLO &&
		         resp->hello && resp->hello->call_paths;
	if (ring)
		*ring = resp->body_case == PMC__RESPONSE__BODY_HELLO && resp->hello
		                ? resp->hello->sample_ring
		                : 0;
	pmc__response__free_unpacked(resp, NULL);
	return fd;
}

/* An older client's Hello (no call paths): every mode but the load processes. */
static int
conn_open(const char *path)
{
	return conn_open_paths(path, 0, NULL, NULL);
}

/* PMC_BENCH_OLD_CLIENT set (and not "0"): the load talks as a client without call paths. */
static int
old_client_wanted(void)
{
	const char *v = getenv("PMC_BENCH_OLD_CLIENT");

	return v && *v && strcmp(v, "0") != 0;
}

struct status {
	uint64_t samples;
	uint32_t regions;
	pid_t pid;
};

static struct status
status_get(int fd)
{
	Pmc__Status st = PMC__STATUS__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_STATUS;
	req.status = &st;
	Pmc__Response *resp = call(fd, &req);
	if (resp->body_case != PMC__RESPONSE__BODY_STATUS)
		die("unexpected reply to Status");
	struct status s = {.samples = resp->status->samples,
	                   .regions = resp->status->regions,
	                   .pid = resp->status->pid};
	pmc__response__free_unpacked(resp, NULL);
	return s;
}

struct events {
	size_t n;
	char *names[BENCH_MAX_EVENTS];
	const struct bench_event *ev[BENCH_MAX_EVENTS];
};

/* The events every mode registers: the daemon's software defaults, in the order. */
#define INGEST_EVENTS "page-faults,task-clock,context-switches,cpu-migrations"

static void
events_get(struct events *e)
{
	int n = bench_parse_events(INGEST_EVENTS, e->ev);

	if (n < 0)
		exit(1);
	e->n = (size_t)n;
	for (size_t i = 0; i < e->n; i++)
		e->names[i] = (char *)e->ev[i]->name;
}

/* A pidfd of the calling thread (PIDFD_THREAD), or -1 where the kernel has none. */
static int
pidfd_self(void)
{
	return (int)syscall(SYS_pidfd_open, gettid_(), O_EXCL /* PIDFD_THREAD */);
}

/* RegisterThread for the calling thread, by its id alone (as before thread pidfds, and
 * where the kernel has none); the fds of the reply are closed. */
static void register_self_as(int fd, const struct events *e, int pidfd);

static void
register_self(int fd, const struct events *e)
{
	register_self_as(fd, e, -1);
}

/* The same with @pidfd (taken: closed here) attached, as libpmcclient sends it. */
static void
register_self_as(int fd, const struct events *e, int pidfd)
{
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = gettid_();
	rt.n_events = e->n;
	rt.events = (char **)e->names;
	rt.pidfd = pidfd >= 0;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	Pmc__Response *resp = call_fd(fd, &req, pidfd);
	if (resp->body_case != PMC__RESPONSE__BODY_REGISTER_REPLY ||
	    resp->register_reply->n_events != e->n)
		die("unexpected reply to RegisterThread");
	pmc__response__free_unpacked(resp, NULL);
}

static void send_all(int fd, const uint8_t *buf, size_t len);

/* How a load process sends: into a SampleRing (wire/ring.h) of PMC_BENCH_RING bytes where the
 * daemon takes one, as libpmcclient does by default, else (PMC_BENCH_DATAGRAMS=1 too) as
 * datagrams with blocking send(). */
struct out {
	int fd;
	struct pmc_ring ring;
	uint64_t sent; /* datagrams sent: each frame's `after` */
};

/* libpmcclient's (PMC_SAMPLE_RING). */
#define PMC_BENCH_RING (1u << 20)

/* A SampleRing for @o, where the daemon offered @offered bytes and datagrams are not asked
 * for. */
static void
out_ring(struct out *o, uint32_t offered)
{
	const char *v = getenv("PMC_BENCH_DATAGRAMS");
	if (offered < PMC_BENCH_RING || (v && *v && strcmp(v, "0") != 0))
		return;
	int rfd, r = pmc_ring_create(&o->ring, PMC_BENCH_RING, &rfd);
	if (r < 0)
		die("pmc_ring_create: %s", strerror(-r));
	Pmc__SampleRing sr = PMC__SAMPLE_RING__INIT;
	sr.bytes = PMC_BENCH_RING;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_RING;
	req.sample_ring = &sr;
	if ((r = pmc_wire_send(o->fd, &req.base, &rfd, 1, 0)) < 0)
		die("send the SampleRing: %s", strerror(-r));
	close(rfd);
	o->sent++;
}

static void
out_send(struct out *o, const uint8_t *buf, size_t len)
{
	if (!o->ring.hdr) {
		send_all(o->fd, buf, len);
		o->sent++;
		return;
	}
	for (;;) {
		bool wake;
		int r = pmc_ring_put(&o->ring, o->sent, buf, len, &wake);
		if (r == 0 && wake) {
			Pmc__RingWake w = PMC__RING_WAKE__INIT;
			Pmc__Request req = PMC__REQUEST__INIT;
			req.body_case = PMC__REQUEST__BODY_RING_WAKE;
			req.ring_wake = &w;
			if ((r = pmc_wire_send(o->fd, &req.base, NULL, 0, 0)) < 0)
				die("send a RingWake: %s", strerror(-r));
			o->sent++;
		}
		if (r == 0)
			return;
		if (r != -EAGAIN)
			die("the sample ring: %s", strerror(-r));
		/* Full: the daemon is behind by a whole ring (some 200 batches). */
		sleep_s(50e-6);
	}
}

/* Call paths (as libpmcclient after its Hello): one Define naming regions 1..@n_regions and
 * defining one root path per region (path k: region k, parent 0), so that the batches' ids
 * 1..@n_regions are path ids. No reply. */
static void out_send(struct out *o, const uint8_t *buf, size_t len);

static void
define_paths(struct out *o, uint32_t n_regions)
{
	char names[N_REGIONS][32], *def_name[N_REGIONS];
	uint32_t ids[N_REGIONS], parents[N_REGIONS];

	if (n_regions > N_REGIONS)
		die("define_paths: at most %d regions", N_REGIONS);
	for (uint32_t k = 0; k < n_regions; k++) {
		snprintf(names[k], sizeof(names[k]), "bench-ingest-%u", k);
		def_name[k] = names[k];
		ids[k] = k + 1;
		parents[k] = 0;
	}
	Pmc__Define d = PMC__DEFINE__INIT;
	d.n_def_id = d.n_def_name = n_regions;
	d.def_id = ids;
	d.def_name = def_name;
	d.n_path_id = d.n_path_parent = d.n_path_region = n_regions;
	d.path_id = ids;
	d.path_parent = parents;
	d.path_region = ids;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_DEFINE;
	req.define = &d;
	uint8_t buf[4096];
	if (pmc__request__get_packed_size(&req) > sizeof(buf))
		die("define_paths: the Define is too long");
	out_send(o, buf, pmc__request__pack(&req, buf));
}

static uint64_t
xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

struct batch {
	uint8_t *buf;
	size_t len;
	size_t samples;
};

/* batch_build() writes the wall times and values in fixed form (wall_ns_fixed, values_fixed),
 * as libpmcclient does in a SampleRing's frames. */
static int batch_fixed;

/* Packs a SampleBatch of @n_samples plausible samples (region ids 1..@n_regions, wall times of
 * 1-50 us, task-clock close to the wall time, a few page faults and context switches) for
 * thread @tid with @n_ev values each; with @announce, it also defines regions 1..@n_regions. */
static struct batch
batch_build(pid_t tid, size_t n_ev, size_t n_samples, uint32_t first_id, uint32_t n_regions,
            int announce, int with_samples)
{
	static char names[N_REGIONS + 1][32];
	uint32_t region[BATCH], def_id[BATCH];
	uint64_t wall[BATCH], values[BATCH * BENCH_MAX_EVENTS];
	char *def_name[BATCH], def_buf[BATCH][32];
	uint64_t seed = 0x9e3779b97f4a7c15u ^ (uint64_t)tid;

	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.tid = tid;
	if (with_samples) {
		for (size_t i = 0; i < n_samples; i++) {
			uint64_t w = 1000 + xorshift(&seed) % 50000;

			region[i] = first_id + (uint32_t)(i % n_regions);
			wall[i] = w;
			for (size_t j = 0; j < n_ev; j++) {
				uint64_t r = xorshift(&seed);
				uint64_t v;

				switch (j) {
				case 0:
					v = r % 64 == 0 ? 1 + r % 3 : 0; /* page-faults */
					break;
				case 1:
					v = w - w / 16 + r % 256; /* task-clock */
					break;
				case 2:
					v = r % 200 == 0; /* context-switches */
					break;
				default:
					v = 0;
				}
				values[i * n_ev + j] = v;
			}
		}
		b.n_region = n_samples;
		b.region = region;
		if (batch_fixed) {
			b.n_wall_ns_fixed = n_samples;
			b.wall_ns_fixed = wall;
			b.n_values_fixed = n_samples * n_ev;
			b.values_fixed = values;
		} else {
			b.n_wall_ns = n_samples;
			b.wall_ns = wall;
			b.n_values = n_samples * n_ev;
			b.values = values;
		}
	}
	if (announce) {
		for (uint32_t k = 0; k < n_regions && k < BATCH; k++) {
			def_id[k] = first_id + k;
			if (n_regions <= N_REGIONS) {
				snprintf(names[k], sizeof(names[k]), "bench-ingest-%u", k);
				def_name[k] = names[k];
			} else {
				snprintf(def_buf[k], sizeof(def_buf[k]), "bench-region-%05u",
				         first_id + k);
				def_name[k] = def_buf[k];
			}
		}
		b.n_def_id = b.n_def_name = n_regions;
		b.def_id = def_id;
		b.def_name = def_name;
	}
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = &b;
	struct batch out = {.len = pmc__request__get_packed_size(&req)};
	out.buf = malloc(out.len);
	if (!out.buf)
		die("out of memory");
	pmc__request__pack(&req, out.buf);
	out.samples = with_samples ? n_samples : 0;
	return out;
}

static void
send_all(int fd, const uint8_t *buf, size_t len)
{
	while (send(fd, buf, len, MSG_NOSIGNAL) < 0)
		if (errno != EINTR)
			die("send: %s", strerror(errno));
}

/* Shared with the load processes. */
struct load_ctl {
	atomic_int go, stop, ready;
	atomic_uint_least64_t sent;
	atomic_int tid;        /* the thread of the first load process ready */
	atomic_int call_paths; /* load processes that talk with call paths */
	atomic_int fell_back;  /* load processes the daemon did not agree with */
	atomic_int ring;       /* load processes that send in a SampleRing */
};

static void
load_run(const char *path, struct load_ctl *ctl, double seconds)
{
	struct events e;

	events_get(&e);
	int want_paths = !old_client_wanted(), paths;
	uint32_t offered;
	int fd = conn_open_paths(path, want_paths, &paths, &offered);
	struct out o = {.fd = fd, .sent = 1};
	/* A deep queue, so that the daemon never waits for a load process that is not
	 * scheduled: 4 MiB is about 800 batches. Forced past wmem_max where root may. */
	int sz = 4 << 20;
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	register_self(fd, &e);
	o.sent++;
	out_ring(&o, offered);
	batch_fixed = o.ring.hdr != NULL;
	if (batch_fixed)
		atomic_fetch_add(&ctl->ring, 1);
	pid_t tid = gettid_();
	/* With call paths, the names and paths in a Define and the first batch without def_*:
	 * the batches' ids are path ids. Else (an older client) the names in the first batch.
	 * The steady batch is the same either way. */
	if (want_paths && !paths && atomic_fetch_add(&ctl->fell_back, 1) == 0)
		fprintf(stderr, "pmc-bench-ingest: the daemon does not take call paths (its "
		                "HelloReply): the load talks as an older client\n");
	if (paths) {
		define_paths(&o, N_REGIONS);
		atomic_fetch_add(&ctl->call_paths, 1);
	}
	struct batch first = batch_build(tid, e.n, BATCH, 1, N_REGIONS, !paths, 1);
	struct batch steady = batch_build(tid, e.n, BATCH, 1, N_REGIONS, 0, 1);
	out_send(&o, first.buf, first.len);
	int none = 0;
	(void)atomic_compare_exchange_strong(&ctl->tid, &none, (int)tid);
	atomic_fetch_add(&ctl->ready, 1);
	uint64_t end = seconds > 0 ? bench_now_ns() + (uint64_t)(seconds * 1e9) : UINT64_MAX;
	while (!atomic_load(&ctl->stop) && bench_now_ns() < end) {
		if (!atomic_load(&ctl->go)) {
			sleep_s(0.001);
			continue;
		}
		out_send(&o, steady.buf, steady.len);
		atomic_fetch_add(&ctl->sent, steady.samples);
	}
	close(fd);
	pmc_ring_unmap(&o.ring);
	free(first.buf);
	free(steady.buf);
}

/* Nanoseconds of CPU time process @pid has used (single-threaded daemon). */
static uint64_t
cpu_ns(pid_t pid)
{
	char path[64];
	unsigned long long run = 0;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
	FILE *fp = fopen(path, "re");
	if (fp) {
		int ok = fscanf(fp, "%llu", &run) == 1;

		fclose(fp);
		if (ok)
			return run;
	}
	struct procstat st;
	int r = procstat_read(pid, &st);

	if (r < 0)
		die("cannot read /proc/%d/stat: %s", (int)pid, strerror(-r));
	return (st.utime + st.stime) * (1000000000ull / (unsigned long long)sysconf(_SC_CLK_TCK));
}

/* Moves this thread to the CPU PMC_BENCH_UNPACK_CPU names, its CPUs before that in *@was;
 * false where the variable is not set. Exits where it names no CPU this process may run on. */
static bool
to_unpack_cpu(cpu_set_t *was)
{
	const char *on = getenv("PMC_BENCH_UNPACK_CPU");
	cpu_set_t there;
	int cpu;

	if (!on || !*on)
		return false;
	cpu = atoi(on);
	if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(*was), was) < 0)
		die("PMC_BENCH_UNPACK_CPU=%s: not a CPU", on);
	CPU_ZERO(&there);
	CPU_SET(cpu, &there);
	if (sched_setaffinity(0, sizeof(there), &there) < 0)
		die("PMC_BENCH_UNPACK_CPU=%s: not a CPU this process may run on", on);
	return true;
}

/* protobuf-c alone: unpacks and frees @b in a loop for @seconds; sets samples per second of
 * wall time and per second of this thread's CPU time. With PMC_BENCH_UNPACK_CPU=N, on CPU N
 * meanwhile (bench/run: the daemon's, idle while the load pauses), so that the daemon and its
 * baseline are timed on one CPU: a VM's two vCPUs need not run at one speed. */
static void
unpack_rate(const struct batch *b, double seconds, double *per_s, double *per_cpu_s)
{
	cpu_set_t was;
	bool moved = to_unpack_cpu(&was);
	uint64_t t0 = bench_now_ns(), c0 = bench_cpu_ns(), end = t0 + (uint64_t)(seconds * 1e9);
	uint64_t n = 0, t;

	do {
		for (int k = 0; k < 16; k++) {
			Pmc__Request *req = pmc__request__unpack(NULL, b->len, b->buf);

			if (!req)
				die("protobuf-c cannot unpack the batch");
			sink += req->sample_batch->n_region;
			pmc__request__free_unpacked(req, NULL);
		}
		n += 16;
	} while ((t = bench_now_ns()) < end);
	*per_s = (double)(n * b->samples) * 1e9 / (double)(t - t0);
	*per_cpu_s = (double)(n * b->samples) * 1e9 / (double)(bench_cpu_ns() - c0);
	if (moved && sched_setaffinity(0, sizeof(was), &was) < 0)
		die("cannot go back to this process's CPUs: %s", strerror(errno));
}

static int
cmd_ingest(const char *path, int nproc, int reps, double seconds)
{
	/* PMC_BENCH_UNPACK_CPU (unpack_rate()) tried before the load processes start. */
	cpu_set_t was;
	if (to_unpack_cpu(&was) && sched_setaffinity(0, sizeof(was), &was) < 0)
		die("cannot go back to this process's CPUs: %s", strerror(errno));
	struct load_ctl *ctl =
	        mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t kids[MAX_PROCS];
	static double rate[MAX_REPS], cpu[MAX_REPS], per_cpu[MAX_REPS], unpack[MAX_REPS],
	        unpack_cpu[MAX_REPS], ratio[MAX_REPS], unpack_fixed[MAX_REPS],
	        unpack_fixed_cpu[MAX_REPS];

	if (ctl == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	for (int i = 0; i < nproc; i++) {
		kids[i] = fork();
		if (kids[i] < 0)
			die("fork: %s", strerror(errno));
		if (kids[i] == 0) {
			load_run(path, ctl, 0);
			_exit(0);
		}
	}
	uint64_t deadline = bench_now_ns() + 10000000000u;
	while (atomic_load(&ctl->ready) < nproc) {
		if (bench_now_ns() > deadline)
			die("the load processes did not start");
		sleep_s(0.01);
	}
	int fd = conn_open(path);
	pid_t dpid = status_get(fd).pid;
	/* protobuf-c alone unpacks the very datagram the load sends: the steady batch of the
	 * first load process ready (its thread id, hence its values), the same bytes. */
	struct events e;
	events_get(&e);
	struct batch steady =
	        batch_build((pid_t)atomic_load(&ctl->tid), e.n, BATCH, 1, N_REGIONS, 0, 1);
	int paths = atomic_load(&ctl->call_paths);
	if (paths && paths != nproc)
		die("%d of %d load processes talk with call paths", paths, nproc);
	int ring = atomic_load(&ctl->ring);
	if (ring && ring != nproc)
		die("%d of %d load processes send in a SampleRing", ring, nproc);
	/* What the ring's frames hold: the same samples in fixed form (protobuf-c's unpack of it
	 * printed beside, not the ratio's baseline: the datagram above is). */
	batch_fixed = ring != 0;
	struct batch steady_fixed =
	        batch_build((pid_t)atomic_load(&ctl->tid), e.n, BATCH, 1, N_REGIONS, 0, 1);
	batch_fixed = 0;

	for (int rep = 0; rep < reps; rep++) {
		atomic_store(&ctl->go, 1);
		sleep_s(0.2);
		struct status s0 = status_get(fd);
		uint64_t c0 = cpu_ns(dpid), t0 = bench_now_ns();
		sleep_s(seconds);
		struct status s1 = status_get(fd);
		uint64_t c1 = cpu_ns(dpid), t1 = bench_now_ns();
		atomic_store(&ctl->go, 0);
		sleep_s(0.05);
		(void)status_get(fd); /* the daemon drains what is queued before it answers */

		rate[rep] = (double)(s1.samples - s0.samples) * 1e9 / (double)(t1 - t0);
		cpu[rep] = (double)(c1 - c0) / (double)(t1 - t0);
		per_cpu[rep] =
		        c1 > c0 ? (double)(s1.samples - s0.samples) * 1e9 / (double)(c1 - c0) : 0;
		unpack_rate(&steady, seconds / 2, &unpack[rep], &unpack_cpu[rep]);
		if (ring)
			unpack_rate(&steady_fixed, seconds / 2, &unpack_fixed[rep],
			            &unpack_fixed_cpu[rep]);
		ratio[rep] = per_cpu[rep] / unpack_cpu[rep];
		fprintf(stderr,
		        "  ingest rep %d: daemon %.2f M samples/s (%.0f %% of a core, %.2f M per "
		        "CPU-second), protobuf-c unpack %.2f M samples/s (%.2f M per CPU-second)\n",
		        rep + 1, rate[rep] / 1e6, cpu[rep] * 100, per_cpu[rep] / 1e6,
		        unpack[rep] / 1e6, unpack_cpu[rep] / 1e6);
	}
	atomic_store(&ctl->stop, 1);
	for (int i = 0; i < nproc; i++) {
		int st;

		if (waitpid(kids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			die("a load process failed");
	}
	printf("procs=%d\nreps=%d\nseconds=%.2f\nbatch_samples=%d\nbatch_bytes=%zu\n", nproc, reps,
	       seconds, BATCH, steady.len);
	printf("client=%s\n", paths ? "call-paths" : "old");
	printf("transport=%s\n", ring ? "ring" : "datagrams");
	if (ring) {
		printf("frame_bytes=%zu\n", steady_fixed.len);
		printf("unpack_fixed_samples_per_cpu_s=%.0f\n",
		       bench_median(unpack_fixed_cpu, (size_t)reps));
	}
	printf("ingest_samples_per_s=%.0f\n", bench_median(rate, (size_t)reps));
	printf("daemon_cpu=%.3f\n", bench_median(cpu, (size_t)reps));
	printf("ingest_samples_per_cpu_s=%.0f\n", bench_median(per_cpu, (size_t)reps));
	printf("unpack_samples_per_s=%.0f\n", bench_median(unpack, (size_t)reps));
	printf("unpack_samples_per_cpu_s=%.0f\n", bench_median(unpack_cpu, (size_t)reps));
	printf("ingest_ratio=%.3f\n", bench_median(ratio, (size_t)reps));
	free(steady.buf);
	free(steady_fixed.buf);
	close(fd);
	return 0;
}

/* The regions and paths of cmd_decode()'s registry: key k (1..N_REGIONS) is path k. */
struct decode_ctx {
	struct region_agg *reg[N_REGIONS + 1], *node[N_REGIONS + 1];
};

static struct region_agg *
decode_resolve(void *ctx, uint32_t key, struct region_agg **node)
{
	struct decode_ctx *d = ctx;

	*node = key <= N_REGIONS ? d->node[key] : NULL;
	return key <= N_REGIONS ? d->reg[key] : NULL;
}

/* One batch counted by the daemon's code: in place (@in_place), or decoded first. */
static void
decode_count(const struct batch *bt, struct decode_ctx *d, const uint32_t *ev_id, size_t ne,
             struct stats_budget *budget, int in_place)
{
	Pmc__SampleBatch b;
	struct batch_cols cols;
	int r = in_place ? batch_scan(bt->buf, bt->len, &b, &cols)
	                 : batch_decode(bt->buf, bt->len, &b);

	if (r < 0 || b.n_values != b.n_region * ne)
		die("the daemon's decoder refuses the batch");
	struct ingest g = {.b = &b,
	                   .cols = in_place && cols.in_place ? &cols : NULL,
	                   .keys = b.region,
	                   .ev_id = ev_id,
	                   .ne = ne,
	                   .resolve = decode_resolve,
	                   .ctx = d,
	                   .budget = budget};
	if (ingest_batch(&g) < 0 || g.counted != b.n_region)
		die("ingest_batch() failed");
}

static int
cmd_decode(int reps, double seconds)
{
	struct events e;
	struct registry reg = {0};
	struct decode_ctx d;
	struct stats_budget budget = {.limit = SIZE_MAX, .keep = SIZE_MAX};
	uint32_t ev_id[BENCH_MAX_EVENTS];
	static double ns[4][MAX_REPS], ratio[4][MAX_REPS];
	const char *names[4] = {"inplace", "arrays", "unpack", "fixed"};

	events_get(&e);
	struct process *p = registry_process(&reg, getpid(), getuid());
	if (!p)
		die("out of memory");
	for (uint32_t k = 1; k <= N_REGIONS; k++) {
		char name[32];
		snprintf(name, sizeof(name), "bench-ingest-%u", k - 1);
		d.reg[k] = registry_process_region(&reg, p, name);
		d.node[k] = d.reg[k] ? registry_process_path(&reg, p, 0, name) : NULL;
		if (!d.node[k])
			die("out of memory");
	}
	for (size_t j = 0; j < e.n; j++) {
		int id = registry_process_event_id(p, e.names[j]);
		if (id < 0)
			die("registry_process_event_id: %s", strerror(-id));
		ev_id[j] = (uint32_t)id;
	}
	struct batch bt = batch_build(gettid_(), e.n, BATCH, 1, N_REGIONS, 0, 1);
	/* The same samples in fixed form, as a SampleRing's frame holds them. */
	batch_fixed = 1;
	struct batch bf = batch_build(gettid_(), e.n, BATCH, 1, N_REGIONS, 0, 1);
	batch_fixed = 0;
	for (int rep = -1; rep < reps; rep++) {
		for (int k = 0; k < 4; k++) {
			int v = (rep + 1 + k) % 4;
			uint64_t c0 = bench_cpu_ns(),
			         end = bench_now_ns() + (uint64_t)(seconds / 4 * 1e9);
			uint64_t n = 0;

			do {
				for (int i = 0; i < 16; i++) {
					if (v != 2) {
						decode_count(v == 3 ? &bf : &bt, &d, ev_id, e.n,
						             &budget, v != 1);
						continue;
					}
					Pmc__Request *req =
					        pmc__request__unpack(NULL, bt.len, bt.buf);
					if (!req)
						die("protobuf-c cannot unpack the batch");
					sink += req->sample_batch->n_region;
					pmc__request__free_unpacked(req, NULL);
				}
				n += 16;
			} while (bench_now_ns() < end);
			if (rep >= 0)
				ns[v][rep] = (double)(bench_cpu_ns() - c0) / (double)n;
		}
		if (rep >= 0)
			for (int v = 0; v < 4; v++)
				ratio[v][rep] = ns[2][rep] / ns[v][rep];
	}
	printf("reps=%d\nbatch_samples=%d\nbatch_bytes=%zu\nframe_bytes=%zu\n", reps, BATCH, bt.len,
	       bf.len);
	for (int v = 0; v < 4; v++) {
		printf("%s_ns_per_batch=%.0f\n", names[v], bench_median(ns[v], (size_t)reps));
		if (v != 2)
			printf("%s_speed_vs_unpack=%.3f\n", names[v],
			       bench_median(ratio[v], (size_t)reps));
	}
	free(bt.buf);
	free(bf.buf);
	registry_free(&reg);
	return 0;
}

/* A loop of runs of a command beside the load (loop_start()). */
struct loop {
	pid_t pid;      /* the shell's */
	int count_fd;   /* read end of the pipe it writes a byte to after each run */
	char stop[64];  /* the file whose existence ends the loop after the run in progress */
	uint64_t start; /* bench_now_ns() as it started */
};

/* Starts /bin/sh, in a process group of its own, running @cmd again and again (its output
 * to /dev/null) until @l->stop exists, writing one byte to a pipe after each run. */
static void
loop_start(const char *cmd, struct loop *l)
{
	int p[2];
	char script[4096];

	if (pipe(p) < 0)
		die("pipe: %s", strerror(errno));
	snprintf(l->stop, sizeof(l->stop), "/tmp/pmc-bench-beside.%d", (int)getpid());
	unlink(l->stop);
	snprintf(script, sizeof(script),
	         "while [ ! -e %s ]; do %s >/dev/null 2>&1 </dev/null; printf x >&%d; done",
	         l->stop, cmd, p[1]);
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		setpgid(0, 0);
		close(p[0]);
		signal(SIGPIPE, SIG_DFL);
		execl("/bin/sh", "sh", "-c", script, (char *)NULL);
		_exit(127);
	}
	setpgid(pid, pid);
	close(p[1]);
	l->pid = pid;
	l->count_fd = p[0];
	l->start = bench_now_ns();
}

/* A loop's run in progress may take this long to end before it is killed (and not counted). */
#define LOOP_FINISH_NS (30 * 1000000000ull)

/* Ends the loop of loop_start() once its run in progress has completed (killed, not counted,
 * past LOOP_FINISH_NS): a run longer than the window still counts, at its length, where
 * killing it at the window's end counted no run at all. Return: runs completed per second,
 * over the loop's life up to the end of its last run. */
static double
loop_stop(struct loop *l)
{
	long runs = 0;
	uint64_t last = l->start;
	char buf[4096];
	struct pollfd pfd = {.fd = l->count_fd, .events = POLLIN};

	int fd = open(l->stop, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		die("create %s: %s", l->stop, strerror(errno));
	close(fd);
	/* Until the shell ends (its end of the pipe closes): each byte, a run's end, timed. */
	for (;;) {
		uint64_t now = bench_now_ns();
		if (now - l->start > LOOP_FINISH_NS) {
			kill(-l->pid, SIGKILL);
			break;
		}
		int r = poll(&pfd, 1, 100);
		if (r < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (r <= 0)
			continue;
		ssize_t n = read(l->count_fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		runs += n;
		last = bench_now_ns();
	}
	while (waitpid(l->pid, NULL, 0) < 0 && errno == EINTR)
		;
	close(l->count_fd);
	unlink(l->stop);
	return runs && last > l->start ? (double)runs * 1e9 / (double)(last - l->start) : 0;
}

#define MAX_BESIDE 4

static int
cmd_beside(const char *path, int nproc, int reps, double seconds, int ncmd, char **cmds)
{
	struct load_ctl *ctl =
	        mmap(NULL, sizeof(*ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t kids[MAX_PROCS];
	static double rate[MAX_BESIDE + 1][MAX_REPS], cpu[MAX_BESIDE + 1][MAX_REPS],
	        runs[MAX_BESIDE + 1][MAX_REPS], ratio[MAX_BESIDE + 1][MAX_REPS],
	        per_cpu[MAX_BESIDE + 1][MAX_REPS], cpu_ratio[MAX_BESIDE + 1][MAX_REPS];
	int nv = ncmd + 1;

	if (ctl == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	for (int i = 0; i < nproc; i++) {
		kids[i] = fork();
		if (kids[i] < 0)
			die("fork: %s", strerror(errno));
		if (kids[i] == 0) {
			/* Ahead of the loop on this CPU (root may), though not at once: a load
			 * process that wakes may wait for the loop's slice to end, its ring
			 * drained meanwhile (the daemon then idle, or serving the loop). */
			(void)setpriority(PRIO_PROCESS, 0, -10);
			load_run(path, ctl, 0);
			_exit(0);
		}
	}
	uint64_t deadline = bench_now_ns() + 10000000000u;
	while (atomic_load(&ctl->ready) < nproc) {
		if (bench_now_ns() > deadline)
			die("the load processes did not start");
		sleep_s(0.01);
	}
	int fd = conn_open(path);
	pid_t dpid = status_get(fd).pid;
	atomic_store(&ctl->go, 1);
	sleep_s(0.2);

	for (int rep = 0; rep < reps; rep++) {
		for (int k = 0; k < nv; k++) {
			int v = (rep + k) % nv;
			struct loop loop;

			if (v > 0) {
				loop_start(cmds[v - 1], &loop);
				sleep_s(0.3);
			}
			struct status s0 = status_get(fd);
			uint64_t c0 = cpu_ns(dpid), t0 = bench_now_ns();
			sleep_s(seconds);
			struct status s1 = status_get(fd);
			uint64_t c1 = cpu_ns(dpid), t1 = bench_now_ns();
			rate[v][rep] = (double)(s1.samples - s0.samples) * 1e9 / (double)(t1 - t0);
			cpu[v][rep] = (double)(c1 - c0) / (double)(t1 - t0);
			per_cpu[v][rep] = c1 > c0 ? (double)(s1.samples - s0.samples) * 1e9 /
			                                    (double)(c1 - c0)
			                          : 0;
			runs[v][rep] = 0;
			/* Runs completed per second, the run in progress at the window's end let
			 * complete (the load goes on meanwhile, unmeasured). */
			if (v > 0)
				runs[v][rep] = loop_stop(&loop);
		}
		for (int v = 0; v < nv; v++) {
			ratio[v][rep] = rate[v][rep] / rate[0][rep];
			cpu_ratio[v][rep] = per_cpu[v][rep] / per_cpu[0][rep];
		}
		fprintf(stderr, "  beside rep %d: alone %.2f M samples/s (daemon %.0f %%)", rep + 1,
		        rate[0][rep] / 1e6, cpu[0][rep] * 100);
		for (int v = 1; v < nv; v++)
			fprintf(stderr, ", beside %d: %.2f M/s (%.0f %%, %.2f runs/s)", v,
			        rate[v][rep] / 1e6, cpu[v][rep] * 100, runs[v][rep]);
		fputc('\n', stderr);
	}
	atomic_store(&ctl->stop, 1);
	for (int i = 0; i < nproc; i++) {
		int st;

		if (waitpid(kids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			die("a load process failed");
	}
	printf("procs=%d\nreps=%d\nseconds=%.2f\nbatch_samples=%d\n", nproc, reps, seconds, BATCH);
	for (int v = 0; v < nv; v++) {
		char name[32];

		if (v)
			snprintf(name, sizeof(name), "beside%d", v);
		else
			snprintf(name, sizeof(name), "alone");
		printf("%s_samples_per_s=%.0f\n", name, bench_median(rate[v], (size_t)reps));
		printf("%s_daemon_cpu=%.3f\n", name, bench_median(cpu[v], (size_t)reps));
		printf("%s_samples_per_cpu_s=%.0f\n", name, bench_median(per_cpu[v], (size_t)reps));
		if (v) {
			printf("%s_runs_per_s=%.2f\n", name, bench_median(runs[v], (size_t)reps));
			printf("%s_ratio=%.3f\n", name, bench_median(ratio[v], (size_t)reps));
			printf("%s_cpu_ratio=%.3f\n", name,
			       bench_median(cpu_ratio[v], (size_t)reps));
		}
	}
	close(fd);
	return 0;
}

static int
cmd_query(const char *path)
{
	int fd = conn_open(path);
	Pmc__Query q = PMC__QUERY__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	size_t regions = 0, parts = 0, bytes = 0;
	uint64_t t0 = bench_now_ns();

	q.stream = 1;
	req.body_case = PMC__REQUEST__BODY_QUERY;
	req.query = &q;
	int r = pmc_wire_send(fd, &req.base, NULL, 0, 0);
	if (r < 0)
		die("send the query: %s", strerror(-r));
	for (int more = 1; more; parts++) {
		uint8_t *buf;
		size_t len;
		Pmc__Response *resp;

		r = pmc_wire_wait(fd, CALL_TIMEOUT_MS, &buf, &len, NULL, 0, NULL);
		if (r < 0)
			die("part %zu of the reply: %s", parts + 1, strerror(-r));
		r = pmc_wire_unpack_response(buf, len, &resp);
		free(buf);
		if (r < 0)
			die("part %zu of the reply: %s", parts + 1, strerror(-r));
		if (resp->error || resp->body_case != PMC__RESPONSE__BODY_QUERY)
			die("the daemon refused the query: %s", resp->message);
		bytes += len;
		regions += resp->query->n_regions;
		more = resp->query->more;
		pmc__response__free_unpacked(resp, NULL);
	}
	printf("regions=%zu\nparts=%zu\nbytes=%zu\nwall_ns=%" PRIu64 "\n", regions, parts, bytes,
	       bench_now_ns() - t0);
	close(fd);
	return 0;
}

/* The @p-th percentile (nearest rank) of @n values; sorts @v. */
static double
percentile(double *v, size_t n, double p)
{
	size_t i = (size_t)((double)n * p / 100 + 0.999);

	qsort(v, n, sizeof(*v), bench_cmp_double);
	return v[i ? i - 1 : 0];
}

/* @n registrations of this thread (with its pidfd, as the library), a new connection and
 * Hello before each (as a new client's first thread: the control a burst must not delay),
 * one every @gap_us: p50, p99 and max of each's round trip, Hello and registration. */
static int
cmd_register_lat(const char *path, int n, int gap_us)
{
	struct events e;
	double *v = calloc((size_t)n, sizeof(double));

	if (!v)
		die("out of memory");
	events_get(&e);
	for (int i = 0; i < n; i++) {
		uint64_t t0 = bench_now_ns();
		int fd = conn_open(path);
		register_self_as(fd, &e, pidfd_self());
		v[i] = (double)(bench_now_ns() - t0);
		close(fd);
		usleep((useconds_t)gap_us);
	}
	double p50 = percentile(v, (size_t)n, 50), p99 = percentile(v, (size_t)n, 99);
	printf("n=%d\nhello_register_p50_ns=%.0f\nhello_register_p99_ns=%.0f\nhello_register_max_"
	       "ns=%.0f\n",
	       n, p50, p99, v[n - 1]);
	free(v);
	return 0;
}

static int
cmd_rtt(const char *path, int n, int pid, char *region)
{
	int fd = conn_open(path);
	double *st = calloc((size_t)n, sizeof(double)), *qu = calloc((size_t)n, sizeof(double));
	Pmc__Query q = PMC__QUERY__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;
	size_t matched = 0;

	if (!st || !qu)
		die("out of memory");
	q.pid = pid;
	q.n_regions = 1;
	q.regions = &region;
	q.stream = 1;
	req.body_case = PMC__REQUEST__BODY_QUERY;
	req.query = &q;
	for (int i = -10; i < n; i++) { /* 10 of each to warm up */
		uint64_t t0 = bench_now_ns();

		(void)status_get(fd);
		uint64_t t1 = bench_now_ns();
		int r = pmc_wire_send(fd, &req.base, NULL, 0, 0);
		if (r < 0)
			die("send the query: %s", strerror(-r));
		for (int more = 1; more;) {
			uint8_t *buf;
			size_t len;
			Pmc__Response *resp;

			r = pmc_wire_wait(fd, CALL_TIMEOUT_MS, &buf, &len, NULL, 0, NULL);
			if (r < 0 || (r = pmc_wire_unpack_response(buf, len, &resp)) < 0)
				die("the reply to the query: %s", strerror(-r));
			free(buf);
			if (resp->error || resp->body_case != PMC__RESPONSE__BODY_QUERY)
				die("the daemon refused the query: %s", resp->message);
			more = resp->query->more;
			if (i == 0)
				matched += resp->query->n_regions;
			pmc__response__free_unpacked(resp, NULL);
		}
		uint64_t t2 = bench_now_ns();
		if (i >= 0) {
			st[i] = (double)(t1 - t0);
			qu[i] = (double)(t2 - t1);
		}
	}
	printf("calls=%d\nquery_regions=%zu\n", n, matched);
	printf("status_p50_ns=%.0f\nstatus_p99_ns=%.0f\n", percentile(st, (size_t)n, 50),
	       percentile(st, (size_t)n, 99));
	printf("query_p50_ns=%.0f\nquery_p99_ns=%.0f\n", percentile(qu, (size_t)n, 50),
	       percentile(qu, (size_t)n, 99));
	free(st);
	free(qu);
	close(fd);
	return 0;
}

static int
cmd_load(const char *path, double seconds)
{
	struct load_ctl ctl = {0};

	atomic_store(&ctl.go, 1);
	load_run(path, &ctl, seconds);
	printf("sent_samples=%" PRIu64 "\n", (uint64_t)atomic_load(&ctl.sent));
	return 0;
}

/*
 * The opens as the daemon makes them: by another process, on the daemon's CPUs, for this
 * thread, which waits meanwhile (blocked, as a registering client waits for its reply). The
 * kernel installs the first event of a thread's context on the CPU the thread last ran on:
 * from another CPU, an interrupt there (a VM exit to wake an idle vCPU), which the floor's
 * opens in the thread itself never pay. The hand-off alone (no opens) is timed too, so that
 * the opens' part is the difference. A process, not a thread: this one stays single-threaded
 * (the kernel takes shortcuts in a single-threaded process's fd table).
 */
struct opener {
	pid_t pid;
	int req, rep; /* eventfds: a request to the opener (1 + whether to open), its answer */
};

static void
opener_run(const struct opener *o, pid_t tid, const struct events *e)
{
	uint64_t v;

	while (read(o->req, &v, sizeof(v)) == sizeof(v)) {
		uint64_t answer = 1;
		if (v == 2) { /* as perf_open_group(): the leader disabled */
			int fds[BENCH_MAX_EVENTS];
			int r = bench_open_group_for(e->ev, (int)e->n, tid, 1, fds);
			if (r < 0)
				answer = 2 + (uint64_t)-r;
			for (size_t i = 0; r == 0 && i < e->n; i++)
				close(fds[i]);
		}
		if (write(o->rep, &answer, sizeof(answer)) != sizeof(answer))
			break;
	}
	_exit(0);
}

/* Starts the opener on the CPUs @dpid may run on (the daemon's); false where it cannot. */
static bool
opener_start(struct opener *o, pid_t dpid, const struct events *e)
{
	cpu_set_t cpus;
	pid_t tid = gettid_();

	o->pid = -1;
	o->req = eventfd(0, EFD_CLOEXEC);
	o->rep = eventfd(0, EFD_CLOEXEC);
	if (o->req < 0 || o->rep < 0 || sched_getaffinity(dpid, sizeof(cpus), &cpus) < 0)
		return false;
	o->pid = fork();
	if (o->pid == 0) {
		if (sched_setaffinity(0, sizeof(cpus), &cpus) < 0)
			_exit(1);
		opener_run(o, tid, e);
	}
	return o->pid > 0;
}

/* One hand-off to the opener (with its opens or not), this thread blocked until it answers.
 * Return: 0, or the errno of an open that failed. */
static int
opener_call(struct opener *o, bool opens)
{
	uint64_t v = opens ? 2 : 1;

	if (write(o->req, &v, sizeof(v)) != sizeof(v) || read(o->rep, &v, sizeof(v)) != sizeof(v))
		die("the opener process: %s", strerror(errno));
	return v > 1 ? (int)(v - 2) : 0;
}

static void
opener_stop(struct opener *o)
{
	if (o->pid > 0) {
		kill(o->pid, SIGKILL);
		waitpid(o->pid, NULL, 0);
	}
	if (o->req >= 0)
		close(o->req);
	if (o->rep >= 0)
		close(o->rep);
}

static int
cmd_register(const char *path, int reps, long iters)
{
	struct events e;
	static double reg[MAX_REPS], raw[MAX_REPS], rtt[MAX_REPS], ratio[MAX_REPS], byid[MAX_REPS],
	        proof[MAX_REPS], dcpu[4][MAX_REPS], hand[2][MAX_REPS], side[MAX_REPS],
	        side_ratio[MAX_REPS];
	struct opener op;

	events_get(&e);
	int fd = conn_open(path);
	int fds[BENCH_MAX_EVENTS];
	pid_t dpid = status_get(fd).pid;
	bool opener = opener_start(&op, dpid, &e);
	int nv = opener ? 6 : 4, failed = 0;

	for (int rep = -1; rep < reps; rep++) {
		for (int k = 0; k < nv; k++) {
			int v = (rep + k + nv) % nv;
			uint64_t c0 = cpu_ns(dpid), t0 = bench_now_ns();

			for (long i = 0; i < iters; i++) {
				if (v >=
				    4) { /* the opener: with its opens (4), the hand-off alone */
					int err = opener_call(&op, v == 4);
					if (err && !failed)
						failed = err;
					continue;
				}
				if (v == 0) { /* as libpmcclient: the thread's pidfd proves it */
					register_self_as(fd, &e, pidfd_self());
					continue;
				}
				if (v == 3) {
					register_self(fd, &e);
					continue;
				}
				if (v == 2) {
					(void)status_get(fd);
					continue;
				}
				int r = bench_open_group(e.ev, (int)e.n, fds);
				if (r < 0)
					die("perf_event_open: %s", strerror(-r));
				for (size_t j = 0; j < e.n; j++)
					close(fds[j]);
			}
			double ns = (double)(bench_now_ns() - t0) / (double)iters;
			if (rep < 0)
				continue; /* warm-up */
			if (v >= 4) {
				hand[v - 4][rep] = ns;
				continue;
			}
			/* The daemon's CPU time per call (what other processes on its CPU do not
			 * stretch, unlike the wall time). */
			dcpu[v][rep] = (double)(cpu_ns(dpid) - c0) / (double)iters;
			if (v == 0)
				reg[rep] = ns;
			else if (v == 1)
				raw[rep] = ns;
			else if (v == 2)
				rtt[rep] = ns;
			else
				byid[rep] = ns;
		}
		if (rep >= 0) {
			ratio[rep] = reg[rep] / raw[rep];
			proof[rep] = reg[rep] / byid[rep];
			side[rep] = opener ? hand[0][rep] - hand[1][rep] : 0;
			side_ratio[rep] = opener ? reg[rep] / (rtt[rep] + side[rep]) : 0;
		}
	}
	close(fd);
	opener_stop(&op);
	printf("events=%zu\nreps=%d\niters=%ld\n", e.n, reps, iters);
	printf("register_ns=%.0f\nraw_open_close_ns=%.0f\nregister_ratio=%.3f\n",
	       bench_median(reg, (size_t)reps), bench_median(raw, (size_t)reps),
	       bench_median(ratio, (size_t)reps));
	printf("status_round_trip_ns=%.0f\n", bench_median(rtt, (size_t)reps));
	/* The identity proof: a pidfd opened, sent, checked and closed, against the same
	 * registration by the thread's id alone (found in /proc). */
	printf("register_by_id_ns=%.0f\npidfd_vs_id_ratio=%.3f\n", bench_median(byid, (size_t)reps),
	       bench_median(proof, (size_t)reps));
	printf("daemon_cpu_register_ns=%.0f\ndaemon_cpu_status_ns=%.0f\ndaemon_cpu_register_by_id_"
	       "ns=%.0f\n",
	       bench_median(dcpu[0], (size_t)reps), bench_median(dcpu[2], (size_t)reps),
	       bench_median(dcpu[3], (size_t)reps));
	/* The same opens made as the daemon makes them (struct opener), and registration against
	 * the round trip and those. */
	if (opener && !failed)
		printf("daemon_side_open_close_ns=%.0f\nhandoff_ns=%.0f\n"
		       "register_vs_daemon_side_ratio=%.3f\n",
		       bench_median(side, (size_t)reps), bench_median(hand[1], (size_t)reps),
		       bench_median(side_ratio, (size_t)reps));
	else if (opener)
		fprintf(stderr, "pmc-bench-ingest: the opens for this thread from another: %s\n",
		        strerror(failed));
	return 0;
}

/* One part of register-parts: @k selects it. */
static void
part_once(int k, int sv[2], const int *group, size_t n_ev, const struct events *e)
{
	uint8_t buf[256];
	int fds[BENCH_MAX_EVENTS];
	size_t len, n_fds = 0;

	switch (k) {
	case 0: /* a datagram, no fd */
	case 1: /* the same with the group's fds */
	{
		Pmc__Status st = PMC__STATUS__INIT;
		Pmc__Request req = PMC__REQUEST__INIT;
		req.body_case = PMC__REQUEST__BODY_STATUS;
		req.status = &st;
		if (pmc_wire_send(sv[0], &req.base, k ? group : NULL, k ? n_ev : 0, 0) < 0 ||
		    pmc_wire_recv(sv[1], buf, sizeof(buf), fds, BENCH_MAX_EVENTS, &n_fds, 0) < 0)
			die("socketpair: %s", strerror(errno));
		for (size_t i = 0; i < n_fds; i++)
			close(fds[i]);
		break;
	}
	case 2: { /* the identity proof */
		struct {
			uint64_t mask, cgroupid;
			uint32_t pid, tgid, rest[9];
			int32_t exit_code;
		} info = {.mask = 1};
		int pfd = pidfd_self();
		if (pfd < 0 || syscall(SYS_pidfd_send_signal, pfd, 0, NULL, 0) < 0)
			die("pidfd: %s", strerror(errno));
		(void)ioctl(pfd, _IOWR(0xFF, 11, info), &info);
		(void)ioctl(pfd, _IOWR(0xFF, 11, info), &info);
		close(pfd);
		break;
	}
	case 3: { /* a /proc look at the thread */
		char path[64];
		struct stat st;
		snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)getpid(), (int)gettid_());
		if (stat(path, &st) < 0)
			die("stat %s: %s", path, strerror(errno));
		break;
	}
	case 4: { /* a poll of a pidfd (the peer's) */
		static int pfd = -1;
		if (pfd < 0)
			pfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
		struct pollfd p = {.fd = pfd, .events = POLLIN};
		(void)poll(&p, 1, 0);
		break;
	}
	default: { /* the encoding: RegisterThread and RegisterReply, packed and unpacked */
		Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
		rt.tid = 1234;
		rt.n_events = e->n;
		rt.events = (char **)e->names;
		rt.pidfd = 1;
		Pmc__Request req = PMC__REQUEST__INIT;
		req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
		req.register_thread = &rt;
		len = pmc__request__pack(&req, buf);
		Pmc__Request *r = pmc__request__unpack(NULL, len, buf);
		Pmc__EventDesc d[BENCH_MAX_EVENTS], *dp[BENCH_MAX_EVENTS];
		for (size_t i = 0; i < e->n; i++) {
			pmc__event_desc__init(&d[i]);
			d[i].name = e->names[i];
			dp[i] = &d[i];
		}
		Pmc__RegisterReply rr = PMC__REGISTER_REPLY__INIT;
		rr.tid = 1234;
		rr.n_events = e->n;
		rr.events = dp;
		Pmc__Response resp = PMC__RESPONSE__INIT;
		resp.body_case = PMC__RESPONSE__BODY_REGISTER_REPLY;
		resp.register_reply = &rr;
		len = pmc__response__pack(&resp, buf);
		Pmc__Response *q = pmc__response__unpack(NULL, len, buf);
		if (!r || !q)
			die("protobuf-c");
		pmc__request__free_unpacked(r, NULL);
		pmc__response__free_unpacked(q, NULL);
	}
	}
}

static int
cmd_register_parts(long iters)
{
	enum { PARTS = 6, REPS = 7 };
	static const char *const names[PARTS] = {"datagram_no_fd", "datagram_4_fds", "pidfd_proof",
	                                         "proc_task_stat", "pidfd_poll",     "encoding"};
	static double ns[PARTS][REPS];
	struct events e;
	int sv[2], group[BENCH_MAX_EVENTS];

	events_get(&e);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair: %s", strerror(errno));
	int r = bench_open_group(e.ev, (int)e.n, group);
	if (r < 0)
		die("perf_event_open: %s", strerror(-r));
	for (int rep = -1; rep < REPS; rep++)
		for (int j = 0; j < PARTS; j++) {
			int k = (rep + 1 + j) % PARTS;
			uint64_t t0 = bench_now_ns();
			for (long i = 0; i < iters; i++)
				part_once(k, sv, group, e.n, &e);
			if (rep >= 0)
				ns[k][rep] = (double)(bench_now_ns() - t0) / (double)iters;
		}
	printf("iters=%ld\nevents=%zu\n", iters, e.n);
	for (int k = 0; k < PARTS; k++)
		printf("%s_ns=%.0f\n", names[k], bench_median(ns[k], REPS));
	return 0;
}

struct mem {
	double rss, data; /* VmRSS and VmData, bytes */
};

static struct mem
mem_get(pid_t pid)
{
	char path[64], line[256];
	struct mem m = {0};
	unsigned long kb;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *fp = fopen(path, "re");
	if (!fp)
		die("cannot read %s", path);
	while (fgets(line, sizeof(line), fp)) {
		if (sscanf(line, "VmRSS: %lu kB", &kb) == 1)
			m.rss = (double)kb * 1024;
		else if (sscanf(line, "VmData: %lu kB", &kb) == 1)
			m.data = (double)kb * 1024;
	}
	fclose(fp);
	return m;
}

static int
cmd_regions(const char *path, uint32_t n)
{
	struct events e;

	events_get(&e);
	int fd = conn_open(path);
	register_self(fd, &e);
	struct status st0 = status_get(fd), st1;
	pid_t tid = gettid_(), dpid = st0.pid;
	struct mem m[3];

	m[0] = mem_get(dpid);
	for (int with_samples = 0; with_samples < 2; with_samples++) {
		for (uint32_t first = 1; first <= n; first += BATCH) {
			uint32_t k = n - first + 1 < BATCH ? n - first + 1 : BATCH;
			struct batch b =
			        batch_build(tid, e.n, k, first, k, !with_samples, with_samples);

			send_all(fd, b.buf, b.len);
			free(b.buf);
		}
		st1 = status_get(fd); /* answered after the batches before it */
		m[1 + with_samples] = mem_get(dpid);
	}
	close(fd);
	/* The daemon may keep fewer (--max-regions): divide by what it created. */
	double made = st1.regions - st0.regions;
	if (!(made > 0))
		die("the daemon created no region");
	printf("regions=%u\nregions_created=%.0f\nevents=%zu\n", n, made, e.n);
	printf("region_defined_rss_bytes=%.0f\n", (m[1].rss - m[0].rss) / made);
	printf("region_defined_data_bytes=%.0f\n", (m[1].data - m[0].data) / made);
	printf("region_sampled_rss_bytes=%.0f\n", (m[2].rss - m[0].rss) / made);
	printf("region_sampled_data_bytes=%.0f\n", (m[2].data - m[0].data) / made);
	return 0;
}

/* Daemon memory with @n clients connected at once: @n child processes, each connected,
 * with its thread registered (4 events: the daemon keeps 4 fds) and one batch of 64
 * samples over 8 regions sent; measured once all are in, then the children exit. */
static int
cmd_clients(const char *path, int n)
{
	struct events e;
	int ready[2], hold[2];

	events_get(&e);
	int fd = conn_open(path);
	struct status st0 = status_get(fd);
	struct mem m0 = mem_get(st0.pid);
	if (pipe(ready) < 0 || pipe(hold) < 0)
		die("pipe: %s", strerror(errno));
	for (int i = 0; i < n; i++) {
		pid_t child = fork();
		if (child < 0)
			die("fork: %s", strerror(errno));
		if (child == 0) {
			close(ready[0]);
			close(hold[1]);
			int c = conn_open(path);
			register_self(c, &e);
			struct batch b = batch_build(gettid_(), e.n, 64, 1, 8, 1, 1);
			send_all(c, b.buf, b.len);
			/* Wait for the daemon to have read the batch, then say so. */
			struct status st = status_get(c);
			(void)st;
			char x = 1;
			if (write(ready[1], &x, 1) != 1)
				_exit(1);
			if (read(hold[0], &x, 1) < 0)
				_exit(1);
			_exit(0);
		}
	}
	close(ready[1]);
	close(hold[0]);
	char x;
	/* A client that ends before it is ready failed (refused by a limit: its error above);
	 * the others, ready, hold the pipe open. */
	for (int got = 0; got < n;) {
		struct pollfd p = {.fd = ready[0], .events = POLLIN};
		int st;
		if (poll(&p, 1, 100) > 0) {
			if (read(ready[0], &x, 1) != 1)
				die("a client process failed");
			got++;
		} else if (waitpid(-1, &st, WNOHANG) > 0) {
			die("a client process failed before it was ready");
		}
	}
	struct mem m1 = mem_get(st0.pid);
	close(hold[1]); /* the children exit */
	while (wait(NULL) > 0)
		;
	sleep_s(0.5);
	struct status st2 = status_get(fd);
	struct mem m2 = mem_get(st0.pid);
	printf("clients=%d\n", n);
	printf("daemon_rss_before=%.0f\ndaemon_rss_with_clients=%.0f\ndaemon_rss_after=%.0f\n",
	       m0.rss, m1.rss, m2.rss);
	printf("per_client_rss_bytes=%.0f\nper_client_data_bytes=%.0f\n", (m1.rss - m0.rss) / n,
	       (m1.data - m0.data) / n);
	printf("regions_kept=%u\n", st2.regions);
	close(fd);
	return 0;
}

int
main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc == 6 && !strcmp(argv[1], "ingest")) {
		int nproc = atoi(argv[3]), reps = atoi(argv[4]);
		double seconds = atof(argv[5]);

		if (nproc < 1 || nproc > MAX_PROCS || reps < 1 || reps > MAX_REPS || !(seconds > 0))
			die("ingest: NPROC in 1..%d, REPS in 1..%d, SECONDS > 0", MAX_PROCS,
			    MAX_REPS);
		return cmd_ingest(argv[2], nproc, reps, seconds);
	}
	if (argc >= 7 && argc - 6 <= MAX_BESIDE && !strcmp(argv[1], "beside")) {
		int nproc = atoi(argv[3]), reps = atoi(argv[4]);
		double seconds = atof(argv[5]);

		if (nproc < 1 || nproc > MAX_PROCS || reps < 1 || reps > MAX_REPS || !(seconds > 0))
			die("beside: NPROC in 1..%d, REPS in 1..%d, SECONDS > 0", MAX_PROCS,
			    MAX_REPS);
		return cmd_beside(argv[2], nproc, reps, seconds, argc - 6, argv + 6);
	}
	if (argc == 6 && !strcmp(argv[1], "rtt")) {
		int n = atoi(argv[3]);

		if (n < 1 || n > 10000000)
			die("rtt: N in 1..10000000");
		return cmd_rtt(argv[2], n, atoi(argv[4]), argv[5]);
	}
	if (argc == 4 && !strcmp(argv[1], "decode")) {
		int reps = atoi(argv[2]);

		if (reps < 1 || reps > MAX_REPS || !(atof(argv[3]) > 0))
			die("decode: REPS in 1..%d, SECONDS > 0", MAX_REPS);
		return cmd_decode(reps, atof(argv[3]));
	}
	if (argc == 3 && !strcmp(argv[1], "query"))
		return cmd_query(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "load"))
		return cmd_load(argv[2], atof(argv[3]));
	if (argc == 5 && !strcmp(argv[1], "register-lat")) {
		int n = atoi(argv[3]);

		if (n < 1 || n > 1000000)
			die("register-lat: N in 1..1000000");
		return cmd_register_lat(argv[2], n, atoi(argv[4]));
	}
	if (argc == 3 && !strcmp(argv[1], "register-parts")) {
		long iters = atol(argv[2]);

		if (iters < 1)
			die("register-parts: ITERS >= 1");
		return cmd_register_parts(iters);
	}
	if (argc == 5 && !strcmp(argv[1], "register")) {
		int reps = atoi(argv[3]);
		long iters = atol(argv[4]);

		if (reps < 1 || reps > MAX_REPS || iters < 1)
			die("register: REPS in 1..%d, ITERS >= 1", MAX_REPS);
		return cmd_register(argv[2], reps, iters);
	}
	if (argc == 4 && !strcmp(argv[1], "regions")) {
		long n = atol(argv[3]);

		if (n < 1 || n > 65535)
			die("regions: NREGIONS in 1..65535");
		return cmd_regions(argv[2], (uint32_t)n);
	}
	if (argc == 4 && !strcmp(argv[1], "clients")) {
		int n = atoi(argv[3]);

		if (n < 1 || n > 100000)
			die("clients: N in 1..100000");
		return cmd_clients(argv[2], n);
	}
	fprintf(stderr, "usage: pmc-bench-ingest ingest SOCKET NPROC REPS SECONDS\n"
	                "       pmc-bench-ingest beside SOCKET NPROC REPS SECONDS CMD...\n"
	                "       pmc-bench-ingest clients SOCKET N\n"
	                "       pmc-bench-ingest decode REPS SECONDS\n"
	                "       pmc-bench-ingest load SOCKET SECONDS\n"
	                "       pmc-bench-ingest query SOCKET\n"
	                "       pmc-bench-ingest rtt SOCKET N PID REGION\n"
	                "       pmc-bench-ingest register SOCKET REPS ITERS\n"
	                "       pmc-bench-ingest register-parts ITERS\n"
	                "       pmc-bench-ingest register-lat SOCKET N GAP_US\n"
	                "       pmc-bench-ingest regions SOCKET NREGIONS\n");
	return 2;
}
