/* pmc-fake-daemon: a broken or hostile pmcdaemon for the integration tests, listening on a
 * SOCK_SEQPACKET socket as the real one does, and a hostile local user's racer. It prints
 * one line per event on stdout (line-buffered), which the test scripts count.
 *
 *   silent SOCK     accepts every connection ("accept"), reads nothing, answers nothing
 *   hello SOCK      answers each Hello ("hello"); each RegisterThread is printed
 *                   ("register tid=N") and never answered; anything else is read and dropped
 *   stream SOCK N [PARTS]
 *                   answers each Hello; answers a Query with parts of N regions of one
 *                   process, each marked `more`, for ever ("query" once, then "part K" every
 *                   1,000 parts), until the client goes; with PARTS, PARTS parts and the
 *                   reply ends, its call path nodes a tree 20 levels deep (node K under
 *                   K / 2), not a chain (bench/pprof-diff.sh), or, with PMC_FAKE_CHAIN
 *                   set, a chain all the same (node K under K - 1: e2e-tree-large); its
 *                   last part sent, "end bytes=B" (the parts' packed bytes); with
 *                   PMC_FAKE_REPEAT set, every node is path 1, a root (each another
 *                   process of the same pid to pmcctl: e2e-hostile-reply); with
 *                   PMC_FAKE_RECYCLE=K, the ids start again every K parts (a process of
 *                   the pid listed again, recycled or exec'd)
 *   slow SOCK MS    handles each datagram MS ms after the one before (whatever connection it
 *                   came on): answers Hello ("hello"), answers each RegisterThread with one
 *                   counter (task-clock of that thread, opened here: root) ("register
 *                   tid=N"), reads and counts the rest: each SampleBatch ("batch n=SAMPLES
 *                   dropped=D"); MS 0 answers at once (a test stops it with SIGSTOP)
 *   fixed SOCK SEED answers each Hello; answers each Query with the same made-up reply, in
 *                   parts: 3 processes of 7 regions (names with quotes, escapes, bytes that
 *                   are not UTF-8), 0 to 4 events each with histograms, derived ratios,
 *                   floors, multiplexed figures, losses; with Query.tree, their call path
 *                   nodes. SEED picks the figures (the names are the same for every
 *                   SEED but one region each); the byte-exact outputs of pmcctl are checked
 *                   against it (e2e-json-fixed)
 *   plant DIR TARGET
 *                   no daemon: watches DIR (inotify) and replaces each directory made
 *                   there by a symlink to TARGET as soon as it appears (renamed away:
 *                   DIR is the racer's), printing "planted NAME" ("watching" first)
 *
 * It stops at SIGTERM or SIGINT (exit 0).
 */
#include <errno.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire/wire.h"

#define MAX_CONNS 64

static volatile sig_atomic_t stop;

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int
reply(int fd, Pmc__Response *resp)
{
	return pmc_wire_send(fd, &resp->base, NULL, 0, MSG_NOSIGNAL);
}

static int
answer_hello(int fd)
{
	Pmc__HelloReply h = PMC__HELLO_REPLY__INIT;
	Pmc__Response resp = PMC__RESPONSE__INIT;

	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.daemon_version = (char *)"fake";
	resp.body_case = PMC__RESPONSE__BODY_HELLO;
	resp.hello = &h;
	return reply(fd, &resp);
}

/* slow: a RegisterThread answered with the thread's task-clock, opened disabled (its leader). */
static int
answer_register(int fd, pid_t tid)
{
	struct perf_event_attr a = {.size = sizeof(a),
	                            .type = PERF_TYPE_SOFTWARE,
	                            .config = PERF_COUNT_SW_TASK_CLOCK,
	                            .disabled = 1,
	                            .exclude_hv = 1,
	                            .read_format = PERF_FORMAT_GROUP |
	                                           PERF_FORMAT_TOTAL_TIME_ENABLED |
	                                           PERF_FORMAT_TOTAL_TIME_RUNNING};
	int ev = (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
	Pmc__Response resp = PMC__RESPONSE__INIT;
	Pmc__RegisterReply rr = PMC__REGISTER_REPLY__INIT;
	Pmc__EventDesc ed = PMC__EVENT_DESC__INIT;
	Pmc__EventDesc *eds[1] = {&ed};
	if (ev < 0) {
		resp.error = errno;
		resp.message = (char *)"fake: perf_event_open failed";
		return reply(fd, &resp);
	}
	ed.name = (char *)"task-clock";
	rr.tid = tid;
	rr.n_events = 1;
	rr.events = eds;
	resp.body_case = PMC__RESPONSE__BODY_REGISTER_REPLY;
	resp.register_reply = &rr;
	int r = pmc_wire_send(fd, &resp.base, &ev, 1, MSG_NOSIGNAL);
	close(ev);
	return r;
}

/* Query parts of @n regions of pid 4242, one event each, until the client goes or a stop,
 * or @parts parts (0: no end). */
static void
stream_forever(int fd, unsigned n, unsigned long parts)
{
	Pmc__Stats st = PMC__STATS__INIT;
	Pmc__EventStats ev = PMC__EVENT_STATS__INIT;
	Pmc__EventStats *evs[1] = {&ev};
	Pmc__RegionStats *rs = calloc(n, sizeof(*rs));
	Pmc__RegionStats **v = calloc(n, sizeof(*v));
	char(*names)[32] = calloc(n, sizeof(*names));

	if (!rs || !v || !names)
		exit(1);
	bool chain = getenv("PMC_FAKE_CHAIN") != NULL;
	bool repeat = getenv("PMC_FAKE_REPEAT") != NULL;
	unsigned long recycle =
	        getenv("PMC_FAKE_RECYCLE") ? strtoul(getenv("PMC_FAKE_RECYCLE"), NULL, 10) : 0;
	size_t bytes = 0; /* the reply's, as packed */
	st.sum = st.min = st.max = 1000;
	st.mean = 1000;
	ev.name = (char *)"page-faults";
	ev.stats = &st;
	for (unsigned long part = 1; !stop && (!parts || part <= parts); part++) {
		Pmc__QueryReply qr = PMC__QUERY_REPLY__INIT;
		Pmc__Response resp = PMC__RESPONSE__INIT;

		for (unsigned i = 0; i < n; i++) {
			pmc__region_stats__init(&rs[i]);
			snprintf(names[i], sizeof(names[i]), "r%lu.%u", part, i);
			rs[i].pid = 4242;
			rs[i].comm = (char *)"hostile";
			rs[i].name = names[i];
			rs[i].count = 1;
			rs[i].wall_ns = &st;
			rs[i].n_events = 1;
			rs[i].events = evs;
			/* Tree nodes, each under the one before: query --tree and flamegraph
			 * keep every node of a process until the process ends. */
			rs[i].path = (uint32_t)((part - 1) * n + i + 1);
			rs[i].parent = parts && !chain ? rs[i].path / 2 : rs[i].path - 1;
			if (repeat)
				rs[i].path = 1, rs[i].parent = 0;
			if (recycle) { /* the ids start again: another process of the pid */
				rs[i].path = (uint32_t)(((part - 1) % recycle) * n + i + 1);
				rs[i].parent = rs[i].path / 2;
			}
			v[i] = &rs[i];
		}
		qr.n_regions = n;
		qr.regions = v;
		qr.more = !parts || part < parts;
		resp.body_case = PMC__RESPONSE__BODY_QUERY;
		resp.query = &qr;
		struct pollfd p = {.fd = fd, .events = POLLOUT};
		if (poll(&p, 1, 1000) < 0 && errno != EINTR)
			break;
		if (p.revents & (POLLERR | POLLHUP))
			break;
		int r = reply(fd, &resp);
		if (r < 0 && r != -EAGAIN && r != -EINTR)
			break;
		if (r >= 0)
			bytes += pmc__response__get_packed_size(&resp);
		if (part % 1000 == 0)
			printf("part %lu\n", part);
		if (parts && part == parts)
			printf("end bytes=%zu\n", bytes);
	}
	free(rs);
	free(v);
	free(names);
}

/* fixed: splitmix64, the figures' deterministic stream. */
static uint64_t
fixed_rng(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

#define FIXED_PROCS 3
#define FIXED_REGIONS 7
#define FIXED_N (FIXED_PROCS * FIXED_REGIONS)
#define FIXED_EVENTS 4

/* One made-up reply: its regions and what they point to. */
struct fixed {
	Pmc__RegionStats r[FIXED_N], *rp[FIXED_N];
	Pmc__Stats st[FIXED_N][1 + FIXED_EVENTS];
	Pmc__Bucket b[FIXED_N][1 + FIXED_EVENTS][3], *bp[FIXED_N][1 + FIXED_EVENTS][3];
	Pmc__EventStats ev[FIXED_N][FIXED_EVENTS], *evp[FIXED_N][FIXED_EVENTS];
	Pmc__Derived dv[FIXED_N], *dvp[FIXED_N];
	Pmc__ProcessLoss loss[2], *lossp[2], untracked[1], *untrackedp[1];
	char names[FIXED_N][48];
};

static void
fixed_stats(Pmc__Stats *s, Pmc__Bucket *b, Pmc__Bucket **bp, uint64_t count, uint64_t *rng)
{
	uint64_t low = 100 + fixed_rng(rng) % 5000, step = 1 + fixed_rng(rng) % 900;

	pmc__stats__init(s);
	s->n_buckets = count ? 1 + fixed_rng(rng) % 3 : 0;
	s->buckets = bp;
	uint64_t left = count;
	for (size_t i = 0; i < s->n_buckets; i++) {
		pmc__bucket__init(&b[i]);
		b[i].low = low + 2 * i * step;
		b[i].high = b[i].low + step - 1;
		b[i].count = i + 1 == s->n_buckets ? left : left / 2;
		left -= b[i].count;
		bp[i] = &b[i];
		s->sum += b[i].count * (b[i].low + step / 3);
	}
	s->min = count ? low : 0;
	s->max = count ? b[s->n_buckets - 1].high : 0;
	s->mean = count ? (double)s->sum / (double)count : 0;
	s->stddev = (double)(fixed_rng(rng) % 100000) / 7.0;
	s->p50 = s->mean * 0.97;
	s->p90 = s->mean * 1.3;
	s->p99 = s->mean * 1.99;
}

/* The made-up reply of @seed in @f; @tree: as call path nodes, each under one before it. */
static void
fixed_make(struct fixed *f, unsigned seed, bool tree)
{
	static const char *const event[FIXED_EVENTS] = {"task-clock", "page-faults", "cycles",
	                                                "instructions"};
	static const char *const odd[FIXED_REGIONS] = {"main",
	                                               "parse \"quoted\"",
	                                               "back\\slash",
	                                               "esc\x1b[31mred",
	                                               "rtl\342\200\256abc",
	                                               "bad\xffutf8",
	                                               "caf\xc3\xa9 \xf0\x9f\x98\x80"};
	uint64_t rng = seed;

	memset(f, 0, sizeof(*f));
	for (size_t i = 0; i < FIXED_N; i++) {
		Pmc__RegionStats *r = &f->r[i];
		size_t proc = i / FIXED_REGIONS, k = i % FIXED_REGIONS;

		pmc__region_stats__init(r);
		/* The same names for every seed, but the last region of each process. */
		snprintf(f->names[i], sizeof(f->names[i]), "%s%s", odd[k],
		         k == FIXED_REGIONS - 1 && seed > 1 ? "-new" : "");
		r->name = f->names[i];
		r->pid = (int32_t)(1000 + proc);
		r->comm = proc == 2 ? (char *)"other\tcomm" : (char *)"app";
		r->cgroup = (char *)"/system.slice/app.service";
		r->ns_pid = proc == 1 ? 7 : 0;
		r->uid = 1000;
		r->count = k == 3 ? 0 : 1 + fixed_rng(&rng) % 100000;
		fixed_stats(&f->st[i][0], f->b[i][0], f->bp[i][0], r->count, &rng);
		r->wall_ns = &f->st[i][0];
		if (k == 2) {
			r->wall_floor = 120;
			r->wall_too_short = true;
		}
		r->n_events = k % (FIXED_EVENTS + 1);
		r->events = f->evp[i];
		for (size_t j = 0; j < r->n_events; j++) {
			Pmc__EventStats *e = &f->ev[i][j];

			pmc__event_stats__init(e);
			e->name = (char *)event[j];
			fixed_stats(&f->st[i][1 + j], f->b[i][1 + j], f->bp[i][1 + j], r->count,
			            &rng);
			e->stats = &f->st[i][1 + j];
			if (j == 2) {
				e->scaled_count = r->count / 3;
				e->scaled_ratio = 0.4 + (double)(fixed_rng(&rng) % 1000) / 2000;
			}
			e->floor = r->wall_floor ? 30 + j : 0;
			e->too_short = r->wall_floor && j == 1;
			f->evp[i][j] = e;
		}
		if (r->n_events >= 4) {
			pmc__derived__init(&f->dv[i]);
			f->dv[i].name = (char *)"ipc";
			f->dv[i].value = (double)f->st[i][4].sum / (double)(f->st[i][3].sum + 1);
			f->dvp[i] = &f->dv[i];
			r->n_derived = 1;
			r->derived = &f->dvp[i];
		}
		if (tree) {
			r->path = (uint32_t)(k + 1);
			r->parent = k ? (uint32_t)(k + 1) / 2 : 0;
		}
		f->rp[i] = r;
	}
	for (size_t i = 0; i < 2; i++) {
		pmc__process_loss__init(&f->loss[i]);
		f->loss[i].pid = (int32_t)(1000 + i);
		f->loss[i].reason = i ? (char *)"queue-full" : (char *)"thread-limit";
		f->loss[i].count = 1 + fixed_rng(&rng) % 50;
		f->lossp[i] = &f->loss[i];
	}
	pmc__process_loss__init(&f->untracked[0]);
	f->untracked[0].pid = 1001;
	f->untracked[0].reason = (char *)"path-depth";
	f->untracked[0].count = 3;
	f->untrackedp[0] = &f->untracked[0];
}

/* fixed: the reply of @seed to @q, in parts of 5 regions. */
static void
fixed_answer(int fd, const Pmc__Query *q, unsigned seed)
{
	static struct fixed f;

	fixed_make(&f, seed, q->tree);
	for (size_t at = 0; at < FIXED_N; at += 5) {
		Pmc__QueryReply qr = PMC__QUERY_REPLY__INIT;
		Pmc__Response resp = PMC__RESPONSE__INIT;
		bool last = at + 5 >= FIXED_N;

		qr.regions = f.rp + at;
		qr.n_regions = last ? FIXED_N - at : 5;
		qr.more = !last;
		if (last) {
			qr.visible = FIXED_N;
			qr.all_users = true;
			qr.n_losses = 2;
			qr.losses = f.lossp;
			if (q->tree) {
				qr.n_untracked = 1;
				qr.untracked = f.untrackedp;
			}
		}
		resp.body_case = PMC__RESPONSE__BODY_QUERY;
		resp.query = &qr;
		if (reply(fd, &resp) < 0)
			return;
	}
}

/* plant: what a user who owns @dir can do to a directory someone else makes in it. */
static int
plant(const char *dir, const char *target)
{
	int in = inotify_init1(IN_CLOEXEC);
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));

	if (in < 0 || inotify_add_watch(in, dir, IN_CREATE | IN_MOVED_TO) < 0) {
		perror("pmc-fake-daemon: inotify");
		return 1;
	}
	printf("watching\n");
	while (!stop) {
		ssize_t n = read(in, buf, sizeof(buf));

		if (n <= 0)
			continue;
		for (char *c = buf; c < buf + n;) {
			const struct inotify_event *e = (const struct inotify_event *)c;
			char from[4096], to[4096];

			c += sizeof(*e) + e->len;
			if (!e->len || !(e->mask & IN_ISDIR) || !strncmp(e->name, "moved.", 6))
				continue;
			snprintf(from, sizeof(from), "%s/%s", dir, e->name);
			snprintf(to, sizeof(to), "%s/moved.%s", dir, e->name);
			if (rename(from, to) == 0 && symlink(target, from) == 0)
				printf("planted %s\n", e->name);
		}
	}
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc < 3 ||
	    (strcmp(argv[1], "silent") && strcmp(argv[1], "hello") && strcmp(argv[1], "stream") &&
	     strcmp(argv[1], "plant") && strcmp(argv[1], "slow") && strcmp(argv[1], "fixed")) ||
	    ((!strcmp(argv[1], "plant") || !strcmp(argv[1], "slow") || !strcmp(argv[1], "fixed")) &&
	     argc != 4) ||
	    (!strcmp(argv[1], "stream") && argc != 4 && argc != 5)) {
		fprintf(stderr, "usage: see the top of pmc-fake-daemon.c\n");
		return 2;
	}
	const char *mode = argv[1];
	struct sockaddr_un sa;
	struct sigaction act = {.sa_handler = on_signal};
	int ls = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	setvbuf(stdout, NULL, _IOLBF, 0);
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(mode, "plant"))
		return plant(argv[2], argv[3]);
	if (ls < 0 || pmc_wire_sockaddr(argv[2], &sa) < 0 ||
	    bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 64) < 0) {
		perror("pmc-fake-daemon: listen");
		return 1;
	}
	/* Anyone may connect, as to the system daemon's socket. */
	chmod(argv[2], 0666);
	printf("listening\n");

	struct pollfd p[1 + MAX_CONNS];
	size_t n = 1;
	p[0] = (struct pollfd){.fd = ls, .events = POLLIN};
	while (!stop) {
		if (poll(p, n, 200) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if ((p[0].revents & POLLIN) && n < 1 + MAX_CONNS) {
			int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
			if (c >= 0) {
				printf("accept\n");
				/* silent: the connection stays, never read. */
				p[n++] = (struct pollfd){
				        .fd = c, .events = strcmp(mode, "silent") ? POLLIN : 0};
			}
		}
		for (size_t i = 1; i < n; i++) {
			if (!p[i].revents)
				continue;
			if (!strcmp(mode, "slow") && atoi(argv[3]) > 0)
				usleep((useconds_t)atoi(argv[3]) * 1000u);
			uint8_t *buf = NULL;
			size_t len;
			Pmc__Request *req = NULL;
			/* A registration carries its thread's pidfd, HeadsTable its memfd: taken,
			 * and closed. */
			int fds[1];
			size_t nf = 0;
			if (pmc_wire_wait(p[i].fd, 0, &buf, &len, fds, 1, &nf) < 0 ||
			    pmc_wire_unpack_request(buf, len, &req) < 0) {
				free(buf);
				close(p[i].fd);
				p[i--] = p[--n];
				continue;
			}
			free(buf);
			for (size_t f = 0; f < nf; f++)
				close(fds[f]);
			if (req->body_case == PMC__REQUEST__BODY_HELLO) {
				printf("hello\n");
				(void)answer_hello(p[i].fd);
			} else if (req->body_case == PMC__REQUEST__BODY_REGISTER_THREAD) {
				printf("register tid=%d\n", (int)req->register_thread->tid);
				if (!strcmp(mode, "slow") && !req->register_thread->reattach)
					(void)answer_register(p[i].fd, req->register_thread->tid);
			} else if (req->body_case == PMC__REQUEST__BODY_SAMPLE_BATCH) {
				printf("batch n=%zu dropped=%llu\n", req->sample_batch->n_region,
				       (unsigned long long)req->sample_batch->dropped);
			} else if (req->body_case == PMC__REQUEST__BODY_QUERY &&
			           !strcmp(mode, "stream")) {
				printf("query\n");
				stream_forever(p[i].fd, (unsigned)atoi(argv[3]),
				               argc > 4 ? strtoul(argv[4], NULL, 10) : 0);
			} else if (req->body_case == PMC__REQUEST__BODY_QUERY &&
			           !strcmp(mode, "fixed")) {
				printf("query\n");
				fixed_answer(p[i].fd, req->query, (unsigned)atoi(argv[3]));
			}
			pmc__request__free_unpacked(req, NULL);
		}
	}
	unlink(argv[2]);
	return 0;
}
