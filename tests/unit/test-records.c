/* The records a thread read through its pages writes (client/lib/records.c), on a machine with
 * no user-space counter reads: a thread of the library's made by hand as one that writes
 * records, whose page refuses every pass (index 0), so that each begin and end reads the
 * general way, with read() of its "group": a pipe into which each case writes, before each call,
 * the group's reading it wants that call to see. So every count a sample carries is known
 * here: the cases check the samples and tombstones the reader makes of them, the nesting, the
 * call paths, multiplexing, losses, a full ring's dropped begins and ends, and a thread's exit. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "lib/client-internal.h"
#include "lib/reader.h"
#include "pmc-test.h"
#include "pmc.pb-c.h"

#define RUN(fn) PMC_TEST_RUN(fn)

static struct perf_event_mmap_page page; /* lock 0, index 0: every pass refused */
static int pipe_w = -1;

/* The next read() of the group: @value counted, @enabled and @running ns. */
static void
feed(uint64_t value, uint64_t enabled, uint64_t running)
{
	uint64_t w[4] = {1, enabled, running, value};
	CHECK(write(pipe_w, w, sizeof(w)) == (ssize_t)sizeof(w));
}

/* pmc_begin(@id) and pmc_end(@id) whose read sees @v counted (as long enabled and running). */
static void
begin_at(pmc_region_t id, uint64_t v)
{
	feed(v, v, v);
	pmc_begin(id);
}

static void
end_at(pmc_region_t id, uint64_t v)
{
	feed(v, v, v);
	pmc_end(id);
}

/* A region @id whose begin reads @v0 counted (@e0 ns enabled and running) and whose end reads
 * @v1 (@e1 enabled, @r1 running). */
static void
region(pmc_region_t id, uint64_t v0, uint64_t e0, uint64_t v1, uint64_t e1, uint64_t r1)
{
	feed(v0, e0, e0);
	pmc_begin(id);
	feed(v1, e1, r1);
	pmc_end(id);
}

/* A thread that writes records, of one event read from a fresh non-blocking pipe, made the
 * calling thread's (T, TF), its reader's kick out of the way (each case converts when it
 * wants). */
static struct pmc_thread *
thread_new(void)
{
	int p[2];
	CHECK(pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
	pipe_w = p[1];
	struct pmc_thread *t = calloc(1, sizeof(*t));
	CHECK(t != NULL);
	t->n = 1;
	t->state = ST_ON;
	t->gen = atomic_load(&G.threads.gen);
	t->fds[0] = p[0];
	t->pages[0] = &page;
	t->one_group = 1;
	t->head_mirror = &t->head_sink;
	atomic_store(&t->ring, pmc__ring_new(PMC_RING, 1));
	CHECK(atomic_load(&t->ring) != NULL);
	CHECK(pmc__records_alloc(t));
	__atomic_store_n(&t->ekick, UINT64_MAX, __ATOMIC_RELAXED);
	T = TF = t;
	return t;
}

static void
thread_done(struct pmc_thread *t)
{
	T = TF = NULL;
	t->pages[0] = NULL; /* not mapped: nothing to unmap */
	pmc__thread_release(t);
	close(pipe_w);
}

static void
convert(struct pmc_thread *t)
{
	pthread_mutex_lock(&G.conn.lock);
	pmc__records_convert(t);
	pthread_mutex_unlock(&G.conn.lock);
}

static const struct pmc_sample *
slot(struct pmc_thread *t, uint64_t k)
{
	return ring_slot(atomic_load(&t->ring), k);
}

static uint64_t
published(struct pmc_thread *t)
{
	return atomic_load(t->head_mirror);
}

/* Two regions nested: each sample the difference of its two readings, in its call path (the
 * inner one's parent the outer's), E and the sample ring's head alike. */
static void
test_nested(void)
{
	struct pmc_thread *t = thread_new();
	begin_at(5, 100);
	begin_at(6, 150);
	end_at(6, 175);
	end_at(5, 300);
	CHECK_EQ_U64(published(t), 2);
	convert(t);
	CHECK_EQ_U64(atomic_load(&t->head), 2);
	CHECK_EQ(t->cdepth, 0u);
	uint32_t outer = pmc__path_intern(0, 5);
	CHECK_NE(outer, 0u);
	CHECK_EQ(slot(t, 0)->region, pmc__path_intern(outer, 6));
	CHECK_EQ_U64(slot(t, 0)->values[0], 25);
	CHECK_EQ(slot(t, 0)->scaled, 0u);
	CHECK_EQ(slot(t, 1)->region, outer);
	CHECK_EQ_U64(slot(t, 1)->values[0], 200);
	CHECK_LE(slot(t, 0)->wall, slot(t, 1)->wall);
	thread_done(t);
}

/* The group multiplexed within the region: the count extrapolated by enabled / running, marked. */
static void
test_scaled(void)
{
	struct pmc_thread *t = thread_new();
	region(5, 100, 10, 150, 110, 60);
	convert(t);
	CHECK_EQ_U64(atomic_load(&t->head), 1);
	const struct pmc_sample *s = slot(t, 0);
	CHECK_EQ_U64(s->values[0], pmc_scale(50, 100, 50));
	CHECK_EQ(s->scaled, 1u);
	CHECK_GT(atomic_load(&t->scaled_end), 0u);
	thread_done(t);
}

/* A read that fails (nothing in the pipe: EAGAIN) at a begin, then one at an end: each region's
 * end a tombstone of reason read-failed, in the sample ring's place of that end. */
static void
test_read_failed(void)
{
	struct pmc_thread *t = thread_new();
	pmc_begin(5); /* nothing fed */
	feed(200, 20, 20);
	pmc_end(5);
	feed(300, 30, 30);
	pmc_begin(6);
	pmc_end(6); /* nothing fed */
	region(7, 400, 40, 450, 50, 50);
	convert(t);
	CHECK_EQ_U64(atomic_load(&t->head), 3);
	CHECK_EQ(slot(t, 0)->scaled, PMC_SAMPLE_TOMB | PMC_LOSS_READ);
	CHECK_EQ(slot(t, 1)->scaled, PMC_SAMPLE_TOMB | PMC_LOSS_READ);
	CHECK_EQ(slot(t, 2)->scaled, 0u);
	CHECK_EQ_U64(slot(t, 2)->values[0], 50);
	CHECK_GE(t->tomb_end, 2u);
	thread_done(t);
}

/* Out of nesting order: an end of the outer region with the inner one open counts the outer
 * region and loses the inner one (nesting, no tombstone: it had no end); an end of a region
 * not open is a tombstone of no reason. */
static void
test_nesting_errors(void)
{
	struct pmc_thread *t = thread_new();
	begin_at(5, 100);
	begin_at(6, 110);
	end_at(5, 130);
	end_at(9, 140);
	convert(t);
	CHECK_EQ_U64(atomic_load(&t->head), 2);
	CHECK_EQ(slot(t, 0)->region, pmc__path_intern(0, 5));
	CHECK_EQ_U64(slot(t, 0)->values[0], 30);
	CHECK_EQ_U64(t->closs[PMC_LOSS_NESTING], 1);
	CHECK_EQ(slot(t, 1)->scaled, PMC_SAMPLE_TOMB | PMC_LOSS_N);
	CHECK_EQ(t->cdepth, 0u);
	thread_done(t);
}

/* Holds what keeps @t's records from being turned into samples by anyone: G.conn.lock (no
 * batch), and its reader's flag (a reader at work: not the thread itself either). */
static void
hold(struct pmc_thread *t)
{
	pthread_mutex_lock(&G.conn.lock);
	atomic_store(&t->conv, 1);
}

static void
release(struct pmc_thread *t)
{
	atomic_store(&t->conv, 0);
	pthread_mutex_unlock(&G.conn.lock);
}

/* Begins and ends until the ring is full, held (hold(): so that no one makes room). Return:
 * how many regions ended; *@open: whether the last one's begin took the last slot. */
static unsigned
fill(struct pmc_thread *t, bool *open)
{
	unsigned k = 0;
	*open = false;
	while (t->rw != t->rlim) {
		feed(k, k, k);
		pmc_begin(7);
		if (t->rw == t->rlim) {
			*open = true;
			break;
		}
		feed(k + 1, k + 1, k + 1);
		pmc_end(7);
		k++;
	}
	return k;
}

/* A full ring, no one to make room: pmc_begin(0) and pmc_end(0) still do nothing; an end that
 * cannot be recorded is lost (buffer-full) and its region's frame popped by the record that
 * says so; once there is room, the next regions are counted. At the thread's exit, that
 * region is counted once (buffer-full), not as left open too. */
static void
test_full_ring(void)
{
	struct pmc_thread *t = thread_new();
	feed(1, 1, 1);
	pmc_begin(5);
	hold(t);
	bool open;
	unsigned k = fill(t, &open);
	CHECK_GT(k, 100u);
	CHECK(t->rw == t->rlim);
	CHECK(TF == t);
	pmc_begin(0);
	pmc_end(0);
	CHECK_EQ(t->skip, 0u);
	CHECK_EQ(t->pops, 0u);
	CHECK(TF == t);
	CHECK_EQ_U64(atomic_load(&t->lost[PMC_LOSS_FULL]), 0);
	if (open)
		pmc_end(7);
	pmc_end(5); /* A */
	CHECK_EQ_U64(atomic_load(&t->lost[PMC_LOSS_FULL]), open ? 2 : 1);
	CHECK_EQ(t->pops, open ? 2u : 1u);
	CHECK(TF == NULL);
	release(t);
	convert(t);
	/* Room again: the dropped ends said first (PMC_REC_POP), then a region counted. */
	feed(1000, 1000, 1000);
	pmc_begin(8);
	feed(1064, 1064, 1064);
	pmc_end(8);
	CHECK(TF == t);
	CHECK_EQ(t->pops, 0u);
	convert(t);
	CHECK_EQ(t->cdepth, 0u);
	const struct pmc_sample *s = slot(t, atomic_load(&t->head) - 1);
	CHECK_EQ(s->region, pmc__path_intern(0, 8));
	CHECK_EQ_U64(s->values[0], 64);
	/* The exit: what it held is counted as the thread's exit's, buffer-full as it was, and no
	 * region as left open. */
	uint64_t g_nesting = atomic_load(&G.loss.lost[PMC_LOSS_NESTING]);
	uint64_t g_full = atomic_load(&G.loss.lost[PMC_LOSS_FULL]);
	uint64_t full = atomic_load(&t->lost[PMC_LOSS_FULL]);
	t->pages[0] = NULL;
	close(pipe_w);
	pmc__thread_destroy(t); /* frees it */
	T = TF = NULL;
	CHECK_EQ_U64(atomic_load(&G.loss.lost[PMC_LOSS_NESTING]), g_nesting);
	CHECK_EQ_U64(atomic_load(&G.loss.lost[PMC_LOSS_FULL]), g_full + full);
}

/* A thread that exits with ends it could not record, not told to the reader yet: each such
 * region counted once (buffer-full), not as left open too; a region it left open, as such. */
static void
test_exit_with_pops(void)
{
	struct pmc_thread *t = thread_new();
	feed(1, 1, 1);
	pmc_begin(4); /* left open */
	feed(2, 2, 2);
	pmc_begin(5);
	hold(t);
	bool open;
	fill(t, &open);
	if (open)
		pmc_end(7);
	pmc_end(5);
	release(t);
	uint64_t full = atomic_load(&t->lost[PMC_LOSS_FULL]);
	CHECK_EQ_U64(full, open ? 2 : 1);
	CHECK_EQ(t->pops, (unsigned)full);
	uint64_t g_nesting = atomic_load(&G.loss.lost[PMC_LOSS_NESTING]);
	uint64_t g_full = atomic_load(&G.loss.lost[PMC_LOSS_FULL]);
	t->pages[0] = NULL;
	close(pipe_w);
	pmc__thread_destroy(t); /* frees it */
	T = TF = NULL;
	CHECK_EQ_U64(atomic_load(&G.loss.lost[PMC_LOSS_NESTING]), g_nesting + 1);
	CHECK_EQ_U64(atomic_load(&G.loss.lost[PMC_LOSS_FULL]), g_full + full);
}

/* Another thread holds G.conn.lock (here: this one, so that every try of the region's thread
 * fails) while the thread runs three times the regions its ring of records holds: it turns its
 * records into samples itself, into its sample ring, which grows; none is lost. (Its records
 * stayed where they were, and regions past the ring's were dropped as buffer-full: the background
 * thread holding the lock, kept from running on a busy CPU, cost a thread every region past its
 * ring of records.) */
static void
test_lock_taken(void)
{
	struct pmc_thread *t = thread_new();
	unsigned n = 3 * (unsigned)(PMC_REC_BYTES / t->rs / 2);
	CHECK_LE(n, PMC_GAP);
	pthread_mutex_lock(&G.conn.lock);
	for (unsigned i = 0; i < n && !atomic_load(&t->lost[PMC_LOSS_FULL]); i++)
		region(5, 10 * i, i, 10 * i + 1 + i % 5, i + 1, i + 1);
	pthread_mutex_unlock(&G.conn.lock);
	CHECK_EQ_U64(atomic_load(&t->lost[PMC_LOSS_FULL]), 0);
	CHECK_EQ_U64(published(t), n);
	CHECK_GT(atomic_load(&t->head), (uint64_t)n / 2);
	convert(t);
	CHECK_EQ_U64(atomic_load(&t->head), n);
	for (unsigned k = 0; k < n; k++)
		CHECK_EQ_U64(slot(t, k)->values[0], 1 + k % 5);
	thread_done(t);
}

/* sched_yield() calls made while slow_yield is set, each made to last a time slice of a busy
 * machine (1 ms at least). */
static unsigned slow_yields;
static bool slow_yield;

int
sched_yield(void)
{
	if (slow_yield) {
		slow_yields++;
		struct timespec ms = {0, 1000000};
		while (nanosleep(&ms, &ms) < 0 && errno == EINTR)
			;
		return 0;
	}
	return (int)syscall(SYS_sched_yield);
}

/* The holder of the lock finds the thread turning its own records (t->conv) and that turn never
 * ends (a thread preempted, or stopped, there): it gives up within PMC_CONV_WAIT_NS and leaves
 * them to the thread, instead of yielding for as long as the thread does not run. Each yield
 * lasting 1 ms or more, PMC_CONV_WAIT_NS (20 ms) passes within the 64 yields between two looks
 * at the clock: 64 yields, not a count of tries (100,000 before: 100 s). */
static void
test_convert_gives_up(void)
{
	struct pmc_thread *t = thread_new();
	region(5, 10, 10, 12, 12, 12);
	region(6, 20, 20, 23, 23, 23);
	atomic_store(&t->conv, 1);
	slow_yield = true;
	convert(t); /* returns: what this case checks (without a bound it would never) */
	slow_yield = false;
	CHECK(slow_yields > 0 && slow_yields <= 64);
	CHECK_EQ_U64(atomic_load(&t->head), 0);
	atomic_store(&t->conv, 0);
	convert(t);
	CHECK_EQ_U64(atomic_load(&t->head), 2);
	CHECK_EQ_U64(slot(t, 0)->values[0], 2);
	CHECK_EQ_U64(slot(t, 1)->values[0], 3);
	thread_done(t);
}

/* The library's connection made by hand: @fd, its daemon's end elsewhere, @t's connection. */
static void
conn_on(struct pmc_thread *t, int fd)
{
	G.conn.fd = fd;
	G.conn.n = t->conn = 1;
	G.conn.heads = 1;
	G.conn.call_paths = 0;
	memset(G.sent.announced, 0, sizeof(G.sent.announced));
	atomic_store(&G.conn.state, ST_ON);
}

/* With no daemon, @t runs 300 regions past what its sample ring holds (PMC_GAP), into its
 * records. Return: how many regions it ran. */
static uint64_t
past_the_ring(struct pmc_thread *t)
{
	uint64_t n = PMC_GAP + 300;
	for (uint64_t i = 0; i < n; i++) {
		region(5, 2 * i, i, 2 * i + 1, i + 1, i + 1);
		if (i % 256 == 0)
			convert(t); /* as a kick would, with no daemon to send to */
	}
	convert(t);
	CHECK_EQ_U64(published(t), n);
	CHECK_EQ_U64(atomic_load(&t->head), PMC_GAP);
	return n;
}

/* A batch announces the samples the thread holds past it (its pending), not its ends not turned
 * into samples yet: a connection given up sets the tail to what was announced, which must never
 * pass the head (the reader would then turn no record again, and the slots past the head would
 * be sent as samples). The daemon away while the thread ran past its sample ring, then one that
 * takes a batch or two (its socket's buffer small, never read). */
static void
test_announced_not_past_head(void)
{
	struct pmc_thread *t = thread_new();
	uint64_t n = past_the_ring(t);
	int s[2];
	CHECK(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, s) == 0);
	int small = 1;
	CHECK(setsockopt(s[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0);
	conn_on(t, s[0]);
	pmc__flush_try(t); /* the lock is free: sends until the queue is full */
	atomic_store(&G.conn.state, ST_NONE);
	G.conn.fd = -1;
	close(s[0]);
	close(s[1]);
	uint64_t hd = atomic_load(&t->head), tl = atomic_load(&t->tail);
	CHECK_GT(tl, 0u);
	CHECK_LT(tl, n);
	CHECK_LE(t->announced, hd);
	CHECK_GE(t->announced, tl);
	thread_done(t);
}

/* The ends of a thread no daemon took (none connected): its own, that gave no sample, apart.
 * A region whose read failed, an end of a region not open, and one region counted, all
 * turned into samples and tombstones by exit() itself. At exit() (the thread still running), the
 * line on stderr says one sample not sent and one dropped (read-failed; the end of no region is
 * neither); at the thread's exit the same, counted by reason. */
static void
test_exit_tombstones(void)
{
	struct pmc_thread *t = thread_new();
	pmc_begin(5); /* nothing fed: its read fails */
	feed(200, 20, 20);
	pmc_end(5);
	feed(210, 21, 21);
	pmc_end(9); /* no such region open */
	region(6, 300, 30, 340, 34, 34);
	/* Not turned into samples yet: exit() does it (no batch could). */
	CHECK_EQ_U64(atomic_load(&t->head), 0);
	CHECK_EQ_U64(atomic_load(&t->tail), 0);
	CHECK_EQ(atomic_load(&G.conn.state) == ST_ON, false);

	/* exit(): the line, stderr read back from a file. Dropped: what earlier cases left
	 * unreported, and the read-failed end. */
	uint64_t dropped = 1;
	for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++)
		dropped += atomic_load(&G.loss.lost[k]) - G.loss.reported[k];
	for (unsigned k = 0; k < PMC_LOSS_THREAD_N; k++)
		dropped += atomic_load(&t->lost[k]) - t->reported[k] + t->closs[k];
	char want[128];
	snprintf(want, sizeof(want), "pmc: at exit, 1 samples not sent and %llu dropped reached no",
	         (unsigned long long)dropped);
	uint64_t g_read = atomic_load(&G.loss.lost[PMC_LOSS_READ]);
	uint64_t g_exited = atomic_load(&G.loss.lost[PMC_LOSS_EXITED]);
	FILE *f = tmpfile();
	CHECK(f != NULL);
	fflush(stderr);
	int saved = dup(STDERR_FILENO);
	CHECK(saved >= 0 && dup2(fileno(f), STDERR_FILENO) == STDERR_FILENO);
	uint64_t conn_n = G.conn.n;
	G.conn.n = conn_n ? conn_n : 1; /* connected once */
	pmc_list_prepend(&G.threads.list, &t->link);
	pmc__atexit();
	fflush(stderr);
	CHECK(dup2(saved, STDERR_FILENO) == STDERR_FILENO);
	close(saved);
	char line[512] = "";
	rewind(f);
	CHECK(fgets(line, sizeof(line), f) != NULL);
	fclose(f);
	CHECK_EQ_U64(atomic_load(&t->head), 3);
	if (strncmp(line, want, strlen(want)) != 0) {
		fprintf(stderr, "got: %swant: %s...\n", line, want);
		CHECK(false);
	}

	/* The thread's exit: off the list, each end counted once, by its reason. */
	t->pages[0] = NULL;
	close(pipe_w);
	pmc__thread_destroy(t); /* frees it */
	T = TF = NULL;
	G.conn.n = conn_n;
	CHECK_EQ_U64(atomic_load(&G.loss.lost[PMC_LOSS_EXITED]), g_exited + 1);
	CHECK_EQ_U64(atomic_load(&G.loss.lost[PMC_LOSS_READ]), g_read + 1);
	/* Taken as reported, as a batch would: the next cases count their own. */
	for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++)
		G.loss.reported[k] = atomic_load(&G.loss.lost[k]);
}

/* A PMC_SCOPE whose name is refused (none here: NULL) records nothing, at its begin or at its
 * end: no tombstone for every run of it, which would cut the thread's batches there. */
static void
test_scope_refused(void)
{
	struct pmc_thread *t = thread_new();
	const char *volatile none = NULL;
	const uint8_t *w = t->rw;
	for (int i = 0; i < 3; i++) {
		PMC_SCOPE(none);
	}
	CHECK(t->rw == w);
	CHECK_EQ_U64(published(t), 0);
	thread_done(t);
}

/* More ends than the sample ring holds, none sent: the reader grows it (PMC_GAP) and turns every
 * one into its sample. */
static void
test_sample_ring_grows(void)
{
	struct pmc_thread *t = thread_new();
	unsigned n = 0;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 400; i++, n++)
			region(5, 10 * n, n, 10 * n + 1 + n % 7, n + 1, n + 1);
		convert(t);
	}
	CHECK_EQ_U64(published(t), n);
	CHECK_EQ_U64(atomic_load(&t->head), n);
	CHECK_EQ_U64(atomic_load(&t->ring)->cap, PMC_GAP);
	for (unsigned k = 0; k < n; k++)
		CHECK_EQ_U64(slot(t, k)->values[0], 1 + k % 7);
	thread_done(t);
}

/* A connection of the library's made by hand, whose other end a thread of this test reads:
 * what the batches said, summed. */
struct daemon_end {
	int fd;
	pthread_t th;
	uint64_t samples, batches, dropped_read, end, pending, region_sum;
};

static void *
daemon_read(void *arg)
{
	struct daemon_end *d = arg;
	static uint8_t buf[WIRE_MAX_DATAGRAM];
	for (;;) {
		ssize_t n = recv(d->fd, buf, sizeof(buf), 0);
		if (n <= 1)
			return NULL; /* the test's own end mark, one byte */
		Pmc__Request *r = pmc__request__unpack(NULL, (size_t)n, buf);
		CHECK(r != NULL);
		if (r->body_case == PMC__REQUEST__BODY_SAMPLE_BATCH) {
			const Pmc__SampleBatch *b = r->sample_batch;
			d->batches++;
			d->samples += b->n_wall_ns;
			for (size_t i = 0; i < b->n_region; i++)
				d->region_sum += b->region[i];
			d->dropped_read += b->dropped_read;
			d->end = b->end;
			d->pending = b->pending;
		}
		pmc__request__free_unpacked(r, NULL);
	}
}

static void
daemon_start(struct daemon_end *d, struct pmc_thread *t)
{
	int s[2];
	CHECK(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, s) == 0);
	memset(d, 0, sizeof(*d));
	d->fd = s[1];
	conn_on(t, s[0]);
	CHECK(pthread_create(&d->th, NULL, daemon_read, d) == 0);
}

static void
daemon_stop(struct daemon_end *d)
{
	CHECK(send(G.conn.fd, "", 1, 0) == 1);
	pthread_join(d->th, NULL);
	close(G.conn.fd);
	close(d->fd);
	G.conn.fd = -1;
	atomic_store(&G.conn.state, ST_NONE);
}

/* Samples and tombstones sent: each batch a run of samples, the losses of the tombstones before
 * it in the batch that reaches past them, its end counting the tombstones (the thread's E). */
static void
test_sent(void)
{
	struct pmc_thread *t = thread_new();
	struct daemon_end d;
	daemon_start(&d, t);
	for (int i = 0; i < 3; i++)
		region(5, 10, 1, 20, 2, 2);
	feed(30, 3, 3);
	pmc_end(6);   /* no such region open: a tombstone of no reason */
	pmc_begin(7); /* nothing fed: its read fails */
	feed(40, 4, 4);
	pmc_end(7); /* read-failed */
	for (int i = 0; i < 2; i++)
		region(5, 10, 1, 20, 2, 2);
	CHECK_EQ(pmc_flush(), 0);
	daemon_stop(&d);
	CHECK_EQ_U64(d.samples, 5);
	CHECK_EQ_U64(d.batches, 2);
	CHECK_EQ_U64(d.dropped_read, 1);
	CHECK_EQ_U64(d.end, 7);
	CHECK_EQ_U64(d.pending, 0);
	CHECK_EQ_U64(d.region_sum, 5 * 5);
	thread_done(t);
}

/* The daemon away while the thread runs past what its sample ring holds (PMC_GAP) and on into
 * its records: once it is back, one pmc_flush() sends every region, the records turned into
 * samples again each time the ring is emptied. */
static void
test_sent_past_the_ring(void)
{
	struct pmc_thread *t = thread_new();
	uint64_t n = past_the_ring(t);
	struct daemon_end d;
	daemon_start(&d, t);
	CHECK_EQ(pmc_flush(), 0);
	daemon_stop(&d);
	CHECK_EQ_U64(d.samples, n);
	CHECK_EQ_U64(d.end, n);
	CHECK_EQ_U64(atomic_load(&t->lost[PMC_LOSS_FULL]), 0);
	thread_done(t);
}

/* -errno the library's sendmsg() calls fail with while not 0 (the test's own sendmsg(), which
 * the static library's calls reach before the C library's). */
static int fail_sendmsg;

ssize_t
sendmsg(int fd, const struct msghdr *msg, int flags)
{
	if (fail_sendmsg) {
		errno = -fail_sendmsg;
		return -1;
	}
	return syscall(SYS_sendmsg, fd, msg, flags);
}

/* A frame put in a fresh ring on a connection to @fd whose RingWake fails with @err. Return:
 * pmc__send_locked()'s; the daemon's view of the ring in *@rd. */
static int
put_wake_failing(struct pmc_ring *rd, int fd, int err)
{
	int rfd;
	CHECK(pmc_ring_create(&G.conn.ring, RING_MIN_BYTES, &rfd) == 0);
	CHECK(pmc_ring_map(rd, rfd, RING_MIN_BYTES, RING_MIN_BYTES) == 0);
	close(rfd);
	G.conn.fd = fd;
	G.conn.sent = 1;
	G.conn.ring_seen = UINT64_MAX;
	G.conn.ring_err = G.conn.wake_owed = 0;
	const uint8_t msg[40] = {1, 2, 3};
	fail_sendmsg = err;
	int r = pmc__send_locked(msg, sizeof(msg));
	fail_sendmsg = 0;
	return r;
}

static void
wake_case_done(struct pmc_ring *rd)
{
	pmc_ring_unmap(rd);
	pmc_ring_unmap(&G.conn.ring);
	memset(&G.conn.ring, 0, sizeof(G.conn.ring));
	G.conn.fd = -1;
	G.conn.sent = 0;
	G.conn.ring_err = G.conn.wake_owed = 0;
}

/* A RingWake that fails: where memory or buffers were short (ENOBUFS) the frame stays sent (a
 * daemon alive may be reading it already: taken back, it was counted and sent again) and the
 * wake is owed, sent before the next frame; where the daemon is gone (EPIPE) the frame is
 * taken back and the connection is to be given up; where the socket is no longer the
 * library's (EBADF) the frame stays (the daemon, alive, reads it at the hang-up) and the
 * connection is to be given up. */
static void
test_wake_failed(void)
{
	struct pmc_ring rd;
	struct pmc_ring_frame f;
	int sp[2];
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);

	CHECK_EQ(put_wake_failing(&rd, sp[0], -ENOBUFS), 0);
	CHECK_EQ(G.conn.ring_err, 0);
	CHECK_EQ(G.conn.wake_owed, 1);
	CHECK_EQ(pmc_ring_peek(&rd, &f), 0);
	CHECK_EQ_U64(f.after, 1);
	pmc_ring_consume(&rd, &f);
	const uint8_t msg[40] = {4, 5, 6};
	CHECK_EQ(pmc__send_locked(msg, sizeof(msg)), 0);
	CHECK_EQ(G.conn.wake_owed, 0);
	CHECK_EQ(pmc_ring_peek(&rd, &f), 0);
	CHECK_EQ_U64(f.after, 2); /* after the owed wake */
	uint8_t buf[64];
	ssize_t n = recv(sp[1], buf, sizeof(buf), MSG_DONTWAIT);
	CHECK(n > 0);
	Pmc__Request *req = pmc__request__unpack(NULL, (size_t)n, buf);
	CHECK(req && req->body_case == PMC__REQUEST__BODY_RING_WAKE);
	pmc__request__free_unpacked(req, NULL);
	while (recv(sp[1], buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
	wake_case_done(&rd);

	CHECK_EQ(put_wake_failing(&rd, sp[0], -EPIPE), -EPIPE);
	CHECK_EQ(G.conn.ring_err, -EPIPE);
	CHECK_EQ(pmc_ring_peek(&rd, &f), -EAGAIN); /* taken back */
	wake_case_done(&rd);

	CHECK_EQ(put_wake_failing(&rd, sp[0], -EBADF), 0);
	CHECK_EQ(G.conn.ring_err, -EBADF);
	CHECK_EQ(G.conn.wake_owed, 0);
	CHECK_EQ(pmc_ring_peek(&rd, &f), 0); /* kept */
	wake_case_done(&rd);
	close(sp[0]);
	close(sp[1]);
}

int
main(void)
{
	pmc__intern_init();
	size_t fds_at_start = pmc_test_count_fds();
	RUN(test_nested);
	RUN(test_scaled);
	RUN(test_read_failed);
	RUN(test_nesting_errors);
	RUN(test_full_ring);
	RUN(test_exit_with_pops);
	RUN(test_lock_taken);
	RUN(test_exit_tombstones);
	RUN(test_scope_refused);
	RUN(test_sample_ring_grows);
	RUN(test_convert_gives_up);
	for (pmc_region_t id = 1; id < 10; id++)
		G.names.name[id] = "r";
	RUN(test_sent);
	RUN(test_sent_past_the_ring);
	RUN(test_announced_not_past_head);
	RUN(test_wake_failed);
	CHECK_EQ_U64(pmc_test_count_fds(), fds_at_start);
	printf("ok %u - no_fd_leak\n", ++pmc_test_n);
	return 0;
}
