/* Unit tests for client/lib/reader.h: sign extension, the rdpmc seqlock reader over a simulated
 * perf_event_mmap_page with fake rdpmc/rdtsc (no PMU needed), what arm64's pages hold (the
 * cycle counter at index 32, 32-bit counters past 2^32, cntvct_el0 under cap_user_time_short,
 * index 0 with user access off), time scaling, the fallback cases, retries under a concurrent
 * writer thread, the bound on retries, and group read() parsing.
 * Prints "ok N - name" per test; exits 1 at the first failed check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lib/reader.h"
#include "pmc-test.h"

#define RUN(fn) PMC_TEST_RUN(fn)

static size_t
page_len(void)
{
	size_t psz = (size_t)sysconf(_SC_PAGESIZE);

	return (sizeof(struct perf_event_mmap_page) + psz - 1) / psz * psz;
}

/* A zeroed, page-aligned page like the one the kernel maps; free with page_free(). */
static struct perf_event_mmap_page *
page_new(void)
{
	void *p =
	        mmap(NULL, page_len(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(p != MAP_FAILED);
	return p;
}

static void
page_free(struct perf_event_mmap_page *pg)
{
	CHECK(munmap(pg, page_len()) == 0);
}

/* The fake instructions and what they saw. */
struct fake {
	struct perf_event_mmap_page *pg;
	uint64_t raw;          /* what rdpmc returns */
	uint64_t tsc;          /* what rdtsc returns */
	uint32_t want_counter; /* rdpmc must be asked for exactly this counter */
	unsigned rdpmc_calls;
	unsigned rdtsc_calls;
	unsigned bump_first; /* the first this-many rdpmc calls move pg->lock on (force a retry) */
	bool bump_always;    /* every rdpmc call moves pg->lock on (a writer that never finishes) */
	uint64_t tsc_step;   /* added to tsc after each rdtsc call: the clock moves on */
	unsigned bump_tsc_first; /* the first this-many rdtsc calls move pg->lock on */
};

static uint64_t
fake_rdpmc(void *ctx, uint32_t counter)
{
	struct fake *f = ctx;

	CHECK_EQ_U64(counter, f->want_counter);
	f->rdpmc_calls++;
	/* By 2, so lock stays even: the retry comes from "lock changed", not "lock odd". */
	if (f->bump_always || f->rdpmc_calls <= f->bump_first)
		__atomic_fetch_add(&f->pg->lock, 2, __ATOMIC_RELAXED);
	return f->raw;
}

static uint64_t
fake_rdtsc(void *ctx)
{
	struct fake *f = ctx;

	f->rdtsc_calls++;
	if (f->rdtsc_calls <= f->bump_tsc_first)
		__atomic_fetch_add(&f->pg->lock, 2, __ATOMIC_RELAXED);
	uint64_t v = f->tsc;
	f->tsc += f->tsc_step;
	return v;
}

static struct pmc_reader_ops
fake_ops(struct fake *f)
{
	return (struct pmc_reader_ops){.rdpmc = fake_rdpmc, .rdtsc = fake_rdtsc, .ctx = f};
}

/* A page with rdpmc allowed on hardware counter @index - 1 of width @width. */
static struct perf_event_mmap_page *
page_rdpmc(uint32_t index, uint16_t width, int64_t offset)
{
	struct perf_event_mmap_page *pg = page_new();

	pg->version = 0;
	pg->cap_bit0_is_deprecated = 1;
	pg->cap_user_rdpmc = 1;
	pg->index = index;
	pg->pmc_width = width;
	pg->offset = offset;
	pg->lock = 42;
	return pg;
}

static void
test_sign_extend_40(void)
{
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0xFFFFFFFFFF), 40), -1);
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0xFFFFFFFFFE), 40), -2);
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0x8000000000), 40), -(INT64_C(1) << 39));
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0x7FFFFFFFFF), 40), (INT64_C(1) << 39) - 1);
	CHECK_EQ_U64(pmc_sign_extend(0, 40), 0);
	CHECK_EQ_U64(pmc_sign_extend(12345, 40), 12345);
	/* Bits above the width are not part of the counter. */
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0xABC0000000000005), 40), 5);
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0x123FFFFFFFFFFF), 40), -1);
	/* offset + extended value, as the reader adds them: 1000 + (-1) = 999. */
	CHECK_EQ_U64((uint64_t)INT64_C(1000) +
	                     (uint64_t)pmc_sign_extend(UINT64_C(0xFFFFFFFFFF), 40),
	             999);
}

static void
test_sign_extend_48(void)
{
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0x7FFFFFFFFFFF), 48), UINT64_C(0x7FFFFFFFFFFF));
	CHECK(pmc_sign_extend(UINT64_C(0x7FFFFFFFFFFF), 48) > 0);
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0x0000123456789ABC), 48), UINT64_C(0x123456789ABC));
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0xFFFFFFFFFFFF), 48), -1);
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0x800000000000), 48), -(INT64_C(1) << 47));
	/* A 40-bit pattern with bit 39 set is positive at width 48. */
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0xFFFFFFFFFF), 48), UINT64_C(0xFFFFFFFFFF));
}

static void
test_sign_extend_odd_widths(void)
{
	/* 0, 64 and more: no extension, no undefined shift. */
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0xFFFFFFFFFF), 0), UINT64_C(0xFFFFFFFFFF));
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0x8000000000000001), 64),
	             UINT64_C(0x8000000000000001));
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0xFFFFFFFFFF), 65), UINT64_C(0xFFFFFFFFFF));
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0xFFFFFFFFFF), 65535), UINT64_C(0xFFFFFFFFFF));
	CHECK_EQ_U64(pmc_sign_extend(1, 1), -1);
	CHECK_EQ_U64(pmc_sign_extend(2, 1), 0);
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0x7FFFFFFFFFFFFFFF), 63), -1);
	CHECK_EQ_U64(pmc_sign_extend(UINT64_C(0x3FFFFFFFFFFFFFFF), 63),
	             UINT64_C(0x3FFFFFFFFFFFFFFF));
}

static void
test_read_counter(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(3, 40, 1000);
	struct fake f = {.pg = pg, .raw = UINT64_C(0xFFFFFFFFFF), .want_counter = 2};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r;

	pg->time_enabled = 777;
	pg->time_running = 555;
	pg->time_mult = 12345; /* ignored: cap_user_time is clear */
	pg->time_offset = 99;

	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 999); /* 1000 + (-1) */
	CHECK_EQ_U64(r.enabled, 777);
	CHECK_EQ_U64(r.running, 555);
	CHECK_EQ_U64(f.rdpmc_calls, 1);
	CHECK_EQ_U64(f.rdtsc_calls, 0);

	/* Negative offset, positive counter: -5 + 16. */
	pg->offset = -5;
	f.raw = 0x10;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 11);

	/* Width 48: bit 39 set is an ordinary positive count. */
	pg->pmc_width = 48;
	pg->offset = 0;
	f.raw = UINT64_C(0xFFFFFFFFFF);
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, UINT64_C(0xFFFFFFFFFF));

	/* The same raw value at width 40 is -1 again; the width is re-read on every call. */
	pg->pmc_width = 40;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, UINT64_MAX);

	/* An x86 fixed counter (bit 30 of the rdpmc index) is passed through untouched. */
	pg->index = UINT32_C(0x40000002);
	f.want_counter = UINT32_C(0x40000001);
	pg->offset = INT64_C(1) << 50;
	f.raw = 7;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, (UINT64_C(1) << 50) + 7);
	CHECK_EQ_U64(f.rdpmc_calls, 5);
	CHECK_EQ_U64(pg->lock, 42); /* the reader never writes the page */
	page_free(pg);
}

static void
test_read_time(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(1, 48, 100);
	/* A 3 GHz TSC about 3 s after time_zero. */
	struct fake f = {.pg = pg, .raw = 23, .tsc = UINT64_C(9000000123), .want_counter = 0};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r;

	pg->cap_user_time = 1;
	pg->time_enabled = 5000;
	pg->time_running = 3000;
	pg->time_shift = 31;
	pg->time_mult = 715827883; /* round(2^31 / 3) */
	pg->time_offset = (uint64_t)-INT64_C(2000000000);

	/*
	 * By hand: cyc = 9000000123 = 4 * 2^31 + 410065531, so quot = 4, rem = 410065531;
	 * quot * mult = 2863311532; rem * mult = 293536340947000873, >> 31 = 136688510;
	 * delta = -2000000000 + 2863311532 + 136688510 = 1000000042.
	 */
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(f.rdtsc_calls, 1);
	CHECK_EQ_U64(r.value, 123);
	CHECK_EQ_U64(r.enabled, UINT64_C(5000) + 1000000042);
	CHECK_EQ_U64(r.running, UINT64_C(3000) + 1000000042);

	/* shift 0, mult 1: nanoseconds are cycles; offset wraps around 2^64. */
	pg->time_shift = 0;
	pg->time_mult = 1;
	pg->time_offset = (uint64_t)-INT64_C(9000000000);
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.enabled, UINT64_C(5000) + 123);
	CHECK_EQ_U64(r.running, UINT64_C(3000) + 123);

	/* A shift past 64 is nonsense but must not be undefined: (cyc * mult) >> 70 = 0 here. */
	pg->time_shift = 70;
	pg->time_offset = 10;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.enabled, 5010);
	page_free(pg);
}

static void
test_read_time_short(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(2, 48, 0);
	/* A 32-bit clock that wrapped: time_cycles' low half is 0xF0000000, the clock now reads
	 * 0x10000000, so 0x20000000 cycles have passed since time_cycles. */
	struct fake f = {.pg = pg, .raw = 5, .tsc = UINT64_C(0x10000000), .want_counter = 1};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r;

	pg->cap_user_time = 1;
	pg->cap_user_time_short = 1;
	pg->time_enabled = 100;
	pg->time_running = 40;
	pg->time_shift = 0;
	pg->time_mult = 1;
	pg->time_cycles = UINT64_C(0x123F0000000);
	pg->time_mask = UINT64_C(0xFFFFFFFF);
	pg->time_offset = (uint64_t)-UINT64_C(0x12400000000);

	/* cyc = 0x123F0000000 + ((0x10000000 - 0x123F0000000) & 0xFFFFFFFF) = 0x12410000000;
	 * delta = 0x12410000000 - 0x12400000000 = 0x10000000. */
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 5);
	CHECK_EQ_U64(r.enabled, 100 + UINT64_C(0x10000000));
	CHECK_EQ_U64(r.running, 40 + UINT64_C(0x10000000));

	/* Without cap_user_time_short the raw cycles are used: delta = 0x10000000 - 0x12400000000.
	 */
	pg->cap_user_time_short = 0;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.enabled, 100 + UINT64_C(0x10000000) - UINT64_C(0x12400000000));

	/* time_short alone, without cap_user_time, does nothing. */
	pg->cap_user_time = 0;
	pg->cap_user_time_short = 1;
	f.rdtsc_calls = 0;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.enabled, 100);
	CHECK_EQ_U64(r.running, 40);
	CHECK_EQ_U64(f.rdtsc_calls, 0);
	page_free(pg);
}

static void
test_scale(void)
{
	CHECK_EQ_U64(pmc_scale(100, 200, 100), 200);
	CHECK_EQ_U64(pmc_scale(100, 150, 150), 100);
	CHECK_EQ_U64(pmc_scale(UINT64_MAX, 7, 7), UINT64_MAX);
	CHECK_EQ_U64(pmc_scale(100, 150, 0), 0);
	CHECK_EQ_U64(pmc_scale(100, 0, 0), 0);
	CHECK_EQ_U64(pmc_scale(10, 10, 3), 33); /* rounds down */
	CHECK_EQ_U64(pmc_scale(0, 10, 3), 0);
	/* value * enabled overflows 64 bits in all of these. */
	CHECK_EQ_U64(pmc_scale(UINT64_C(1) << 62, UINT64_C(1) << 40, UINT64_C(1) << 39),
	             UINT64_C(1) << 63);
	/* (2^63 - 1) * 3e12 / 2e12 = (3 * 2^63 - 3) / 2, rounded down = 3 * 2^62 - 2. */
	CHECK_EQ_U64(pmc_scale(INT64_MAX, UINT64_C(3000000000000), UINT64_C(2000000000000)),
	             UINT64_C(13835058055282163710));
	CHECK_EQ_U64(pmc_scale(UINT64_C(1000000000000000000), UINT64_C(999999999999),
	                       UINT64_C(1000000000000)),
	             UINT64_C(999999999999000000));
	/* Saturates instead of wrapping. */
	CHECK_EQ_U64(pmc_scale(UINT64_MAX, 2, 1), UINT64_MAX);
	CHECK_EQ_U64(pmc_scale(UINT64_C(1) << 63, 3, 1), UINT64_MAX);
}

static void
test_fallback(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(0, 48, 5);
	struct fake f = {.pg = pg, .raw = 1};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r = {.value = 11, .enabled = 22, .running = 33};

	/* index 0: the event is not on a counter right now. */
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), -ENODATA);

	/* cap_user_rdpmc clear: rdpmc not allowed. */
	pg->index = 4;
	pg->cap_user_rdpmc = 0;
	pg->cap_user_time = 1;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), -ENODATA);

	/* Both. */
	pg->index = 0;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), -ENODATA);

	CHECK_EQ_U64(f.rdpmc_calls, 0);
	CHECK_EQ_U64(f.rdtsc_calls, 0);
	CHECK_EQ_U64(r.value, 11);
	CHECK_EQ_U64(r.enabled, 22);
	CHECK_EQ_U64(r.running, 33);

	/* Turning it back on works. */
	pg->index = 4;
	pg->cap_user_rdpmc = 1;
	pg->cap_user_time = 0;
	f.want_counter = 3;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 6);
	page_free(pg);
}

static void
test_retry_forced(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(1, 48, 10);
	struct fake f = {.pg = pg, .raw = 1, .want_counter = 0, .bump_first = 1};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r;

	/* The first pass sees lock move under it and must go round again. */
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(f.rdpmc_calls, 2);
	CHECK_EQ_U64(r.value, 11);
	CHECK_EQ_U64(pg->lock, 44);

	/* Five disturbed passes, the sixth succeeds. */
	f.rdpmc_calls = 0;
	f.bump_first = 5;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(f.rdpmc_calls, 6);
	CHECK_EQ_U64(pg->lock, 54);
	page_free(pg);
}

struct writer {
	struct perf_event_mmap_page *pg;
	uint64_t iterations;
	int done;
};

/* The kernel's perf_event_update_userpage(): lock odd while the fields change. */
static void *
writer_main(void *arg)
{
	struct writer *w = arg;
	struct perf_event_mmap_page *pg = w->pg;

	for (uint64_t k = 1; k <= w->iterations; k++) {
		/* Release stores: a reader that sees one of them also sees lock odd afterwards
		 * (no fence, which gcc's TSan cannot model). */
		__atomic_fetch_add(&pg->lock, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&pg->offset, (int64_t)(k * 1000), __ATOMIC_RELEASE);
		__atomic_store_n(&pg->time_enabled, k, __ATOMIC_RELEASE);
		__atomic_store_n(&pg->time_running, k, __ATOMIC_RELEASE);
		__atomic_fetch_add(&pg->lock, 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void
test_seqlock_concurrent_writer(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(1, 48, 0);
	/* The first read is disturbed by the fake itself, so at least one retry is certain. */
	struct fake f = {.pg = pg, .raw = 0, .want_counter = 0, .bump_first = 1};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct writer w = {.pg = pg, .iterations = 1000000};
	unsigned long n_ok = 0, n_again = 0, n_reads = 0;
	uint64_t last = 0;
	pthread_t th;

	pg->lock = 0;
	CHECK_EQ_U64(pthread_create(&th, NULL, writer_main, &w), 0);
	while (!__atomic_load_n(&w.done, __ATOMIC_ACQUIRE) || n_reads < 100000) {
		struct pmc_reading r;
		int ret = pmc_reader_read(pg, &ops, &r);

		n_reads++;
		/* The forced retry: unless the writer kept it from succeeding at all, the first
		 * read needed a second pass through rdpmc. */
		if (n_reads == 1 && ret == 0)
			CHECK(f.rdpmc_calls >= 2);
		if (ret == -EAGAIN) {
			n_again++;
			continue;
		}
		CHECK_EQ_U64(ret, 0);
		n_ok++;
		/* Every snapshot is one k: never offset from one update and times from another. */
		CHECK_EQ_U64(r.value, 1000 * r.enabled);
		CHECK_EQ_U64(r.running, r.enabled);
		CHECK(r.enabled >= last);
		CHECK(r.enabled <= w.iterations);
		last = r.enabled;
	}
	CHECK_EQ_U64(pthread_join(th, NULL), 0);
	CHECK(n_ok > 0);
	/* More rdpmc calls than successful passes: some pass was retried. Certain, whatever the
	 * timing: the pass of the first rdpmc call always fails. */
	CHECK(f.rdpmc_calls > n_ok);
	CHECK_EQ_U64(pg->lock % 2, 0);

	/* Once the writer is done, the last update is what is read. */
	struct pmc_reading r;

	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.enabled, w.iterations);
	CHECK_EQ_U64(r.value, 1000 * w.iterations);
	printf("# %lu reads, %lu ok, %lu -EAGAIN, %lu retried passes with rdpmc\n", n_reads, n_ok,
	       n_again, (unsigned long)f.rdpmc_calls - n_ok);
	page_free(pg);
}

static void
test_stuck_writer(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(1, 48, 0);
	struct fake f = {.pg = pg, .raw = 1, .want_counter = 0, .bump_always = true};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r = {.value = 11};

	/* lock changes during every pass. */
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), -EAGAIN);
	CHECK_EQ_U64(f.rdpmc_calls, PMC_READER_MAX_TRIES);
	CHECK_EQ_U64(r.value, 11);

	/* A writer that stopped half-way: lock stays odd, the counter is never even read. */
	f.bump_always = false;
	f.rdpmc_calls = 0;
	pg->lock = 7;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), -EAGAIN);
	CHECK_EQ_U64(f.rdpmc_calls, 0);
	CHECK_EQ_U64(r.value, 11);

	/* And when it finishes, reading works again. */
	pg->lock = 8;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1);
	page_free(pg);
}

/* A group member's count alone: the seqlock and the fallbacks of pmc_reader_read(), and never a
 * clock read nor a time field, whatever the page's capabilities say. */
static void
test_read_count(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(3, 48, -100);
	struct fake f = {.pg = pg, .raw = UINT64_C(0xFFFFFFFFFFFF), .tsc = 999, .want_counter = 2};
	struct pmc_reader_ops ops = fake_ops(&f);
	uint64_t v = 77;

	pg->cap_user_time = 1;
	pg->cap_user_time_short = 1;
	pg->time_enabled = 5000;
	pg->time_running = 3000;
	pg->time_mult = 1;

	/* -100 + (-1 sign-extended from 48 bits) */
	CHECK_EQ_U64(pmc_reader_read_count(pg, &ops, &v), 0);
	CHECK_EQ_U64(v, (uint64_t)-101);
	CHECK_EQ_U64(f.rdpmc_calls, 1);
	CHECK_EQ_U64(f.rdtsc_calls, 0);

	/* A writer that moved the lock on: retried, still no clock read. */
	f.raw = 50;
	f.rdpmc_calls = 0;
	f.bump_first = 2;
	CHECK_EQ_U64(pmc_reader_read_count(pg, &ops, &v), 0);
	CHECK_EQ_U64(v, (uint64_t)-50);
	CHECK_EQ_U64(f.rdpmc_calls, 3);
	CHECK_EQ_U64(f.rdtsc_calls, 0);

	/* Not on a counter, no rdpmc, a writer that never finishes: the errors, @v untouched. */
	v = 77;
	pg->index = 0;
	CHECK_EQ_U64(pmc_reader_read_count(pg, &ops, &v), -ENODATA);
	pg->index = 3;
	pg->cap_user_rdpmc = 0;
	CHECK_EQ_U64(pmc_reader_read_count(pg, &ops, &v), -ENODATA);
	pg->cap_user_rdpmc = 1;
	f.bump_always = true;
	CHECK_EQ_U64(pmc_reader_read_count(pg, &ops, &v), -EAGAIN);
	CHECK_EQ_U64(v, 77);
	CHECK_EQ_U64(f.rdtsc_calls, 0);
	page_free(pg);
}

/* Reads counter @counter as raw + counter, for pages on several counters at once. */
static uint64_t
fake_rdpmc_multi(void *ctx, uint32_t counter)
{
	struct fake *f = ctx;

	f->rdpmc_calls++;
	return f->raw + counter;
}

/* Two groups, {0, 1, 2} and {3, 4}: one clock read per group, the members with their leader's
 * times, and any member not on a counter sends the caller to read(). */
static void
test_read_groups(void)
{
	struct perf_event_mmap_page *pg[5];
	const int leader[5] = {0, 0, 0, 3, 3};
	struct fake f = {.raw = 1000, .tsc = 50};
	struct pmc_reader_ops ops = {.rdpmc = fake_rdpmc_multi, .rdtsc = fake_rdtsc, .ctx = &f};
	uint64_t v[15];

	for (int i = 0; i < 5; i++) {
		pg[i] = page_rdpmc((uint32_t)i + 1, 48, 10 * i);
		pg[i]->cap_user_time = 1;
		pg[i]->time_mult = 1;
		/* Members' own time fields are wrong on purpose: they must not be used. */
		pg[i]->time_enabled = leader[i] == i ? 100 * (uint64_t)(i + 1) : 7;
		pg[i]->time_running = leader[i] == i ? 60 * (uint64_t)(i + 1) : 7;
	}
	CHECK_EQ_U64(pmc_reader_read_groups(pg, leader, 5, &ops, v), 0);
	CHECK_EQ_U64(f.rdtsc_calls, 2);
	CHECK_EQ_U64(f.rdpmc_calls, 5);
	for (int i = 0; i < 5; i++) {
		int g = leader[i];
		CHECK_EQ_U64(v[i],
		             1000 + (uint64_t)i + 10 * (uint64_t)i);  /* raw + counter + offset */
		CHECK_EQ_U64(v[5 + i], 100 * (uint64_t)(g + 1) + 50); /* the leader's, + tsc */
		CHECK_EQ_U64(v[10 + i], 60 * (uint64_t)(g + 1) + 50);
	}

	/* A member off its counter (index 0): the whole read is refused, for read() to do. */
	pg[4]->index = 0;
	CHECK_EQ_U64(pmc_reader_read_groups(pg, leader, 5, &ops, v), -ENODATA);
	pg[4]->index = 5;
	pg[0]->cap_user_rdpmc = 0;
	CHECK_EQ_U64(pmc_reader_read_groups(pg, leader, 5, &ops, v), -ENODATA);
	for (int i = 0; i < 5; i++)
		page_free(pg[i]);
}

static void
test_parse_group(void)
{
	const uint64_t good[] = {3, 1000, 400, 11, 22, UINT64_MAX};
	uint64_t values[4] = {0}, enabled = 0, running = 0;

	CHECK_EQ_U64(pmc_reader_parse_group(good, 6, 3, values, &enabled, &running), 0);
	CHECK_EQ_U64(values[0], 11);
	CHECK_EQ_U64(values[1], 22);
	CHECK_EQ_U64(values[2], UINT64_MAX);
	CHECK_EQ_U64(values[3], 0);
	CHECK_EQ_U64(enabled, 1000);
	CHECK_EQ_U64(running, 400);

	/* The times are optional. */
	memset(values, 0, sizeof(values));
	CHECK_EQ_U64(pmc_reader_parse_group(good, 6, 3, values, NULL, NULL), 0);
	CHECK_EQ_U64(values[2], UINT64_MAX);

	/* Nothing is written on error. */
	uint64_t v[4] = {9, 9, 9, 9}, e = 9, ru = 9;

	/* Short: one value missing, only the header, less than the header, nothing. */
	CHECK_EQ_U64(pmc_reader_parse_group(good, 5, 3, v, &e, &ru), -EBADMSG);
	CHECK_EQ_U64(pmc_reader_parse_group(good, 3, 3, v, &e, &ru), -EBADMSG);
	CHECK_EQ_U64(pmc_reader_parse_group(good, 2, 3, v, &e, &ru), -EBADMSG);
	CHECK_EQ_U64(pmc_reader_parse_group(NULL, 0, 3, v, &e, &ru), -EBADMSG);

	/* nr is not the number of events the caller put in the group. */
	const uint64_t wrong_nr[] = {2, 1000, 400, 11, 22, 33};

	CHECK_EQ_U64(pmc_reader_parse_group(wrong_nr, 6, 3, v, &e, &ru), -EBADMSG);
	CHECK_EQ_U64(pmc_reader_parse_group(good, 6, 2, v, &e, &ru), -EBADMSG);
	CHECK_EQ_U64(pmc_reader_parse_group(good, 6, 4, v, &e, &ru), -EBADMSG);

	/* A huge nr must not overflow the length check. */
	const uint64_t huge_nr[] = {UINT64_MAX, 1000, 400, 11};

	CHECK_EQ_U64(pmc_reader_parse_group(huge_nr, 4, 1, v, &e, &ru), -EBADMSG);

	/* PERF_FORMAT_ID as well ({value, id} pairs): too long for nr, rejected. */
	const uint64_t with_ids[] = {2, 1000, 400, 11, 101, 22, 102};

	CHECK_EQ_U64(pmc_reader_parse_group(with_ids, 7, 2, v, &e, &ru), -EBADMSG);

	for (size_t i = 0; i < 4; i++)
		CHECK_EQ_U64(v[i], 9);
	CHECK_EQ_U64(e, 9);
	CHECK_EQ_U64(ru, 9);

	/* An empty group is well-formed. */
	const uint64_t empty[] = {0, 5, 4};

	CHECK_EQ_U64(pmc_reader_parse_group(empty, 3, 0, NULL, &e, &ru), 0);
	CHECK_EQ_U64(e, 5);
	CHECK_EQ_U64(ru, 4);
}

/* arm64: index 32 is the cycle counter (mrs pmccntr_el0, counter 31), 64 bits wide when opened
 * "long", 32 bits otherwise, and then the kernel sets the register's upper half (to take the
 * overflow interrupt at 32 bits): the width must drop it. */
static void
test_arm64_cycle_counter(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(32, 64, -INT64_C(5000000000));
	struct fake f = {.pg = pg,
	                 .raw = UINT64_C(0x0000000300000007),
	                 .want_counter = PMC_ARM64_CYCLE_COUNTER};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r;

	CHECK_EQ_U64(PMC_ARM64_CYCLE_COUNTER, 31);
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, UINT64_C(0x300000007) - UINT64_C(5000000000));
	CHECK_EQ_U64(f.rdpmc_calls, 1);

	/* Width 32: the kernel programmed -2^31 as 0xFFFFFFFF80000000 and set offset to the count
	 * + 2^31; five cycles later the register reads 0xFFFFFFFF80000005. */
	pg->pmc_width = 32;
	pg->offset = 1000 + (INT64_C(1) << 31);
	f.raw = UINT64_C(0xFFFFFFFF80000005);
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1005);
	/* The same value without the upper half set (a 32-bit event counter) reads the same. */
	f.raw = UINT64_C(0x80000005);
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1005);
	page_free(pg);
}

/* arm64 without 64-bit event counters (cortex-a57): a 32-bit counter that the kernel re-arms at
 * -2^31 on each overflow interrupt. The reads stay exact across the wrap, before and after
 * the kernel's update of the page, for counts past 2^32. */
static void
test_arm64_width32_overflow(void)
{
	const uint64_t half = UINT64_C(1) << 31;
	struct perf_event_mmap_page *pg = page_rdpmc(1, 32, (int64_t)(1000 + half));
	struct fake f = {.pg = pg, .raw = half, .want_counter = 0};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r;

	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1000);
	f.raw = UINT64_C(0xFFFFFFFF);
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1000 + half - 1);
	/* Wrapped to 3, the interrupt not yet taken: still exact. */
	f.raw = 3;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1000 + half + 3);
	/* The kernel took the interrupt at 5 (count 1000 + 2^31 + 5), re-armed at -2^31 and
	 * published offset = count + 2^31 under the lock. */
	pg->lock += 2;
	pg->offset = (int64_t)(1000 + 2 * half + 5);
	f.raw = half;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1000 + half + 5);
	f.raw = UINT64_C(0xFFFFFFF0);
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1000 + 2 * half - 11);
	/* Twice more: 2^32 + 2^31 + 5 events in all. */
	pg->lock += 2;
	pg->offset = (int64_t)(1000 + 3 * half + 5);
	f.raw = half;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1000 + 2 * half + 5);
	pg->lock += 2;
	pg->offset = (int64_t)(1000 + 4 * half + 5);
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 1000 + 3 * half + 5);
	CHECK(r.value > UINT32_MAX);
	page_free(pg);
}

/* arm64's clock: cntvct_el0 under cap_user_time_short. The register may hold bits above the
 * kernel's sched_clock mask (56 bits), which time_cycles/time_mask remove; time_mult and
 * time_shift are the sched_clock's (62.5 MHz: 16 ns a tick; 1 GHz: the kernel halves mult
 * rather than publish a shift of 32). */
static void
test_arm64_time_short(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(2, 32, 0);
	struct fake f = {
	        .pg = pg, .raw = 7, .tsc = UINT64_C(0x0F00000012345000), .want_counter = 1};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r;

	pg->cap_user_time = 1;
	pg->cap_user_time_zero = 1;
	pg->cap_user_time_short = 1;
	pg->time_enabled = 3000;
	pg->time_running = 2000;
	pg->time_mult = UINT32_C(1) << 26; /* 16 << 22 */
	pg->time_shift = 22;
	pg->time_cycles = UINT64_C(0x12340000);
	pg->time_mask = (UINT64_C(1) << 56) - 1;
	pg->time_offset = (uint64_t) - (int64_t)(UINT64_C(0x12340000) * 16);

	/* cyc = 0x12340000 + ((0x0F00000012345000 - 0x12340000) & mask) = 0x12345000: 0x5000
	 * ticks since time_cycles, 16 ns each. */
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 7);
	CHECK_EQ_U64(f.rdtsc_calls, 1);
	CHECK_EQ_U64(r.enabled, 3000 + 0x5000 * 16);
	CHECK_EQ_U64(r.running, 2000 + 0x5000 * 16);

	/* The 56-bit clock wrapped since time_cycles: 0x300 ticks. */
	pg->time_cycles = (UINT64_C(1) << 56) - 0x100;
	pg->time_offset = (uint64_t) - (int64_t)(pg->time_cycles * 16);
	f.tsc = UINT64_C(0x0F00000000000200);
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.enabled, 3000 + 0x300 * 16);

	/* 1 GHz (FEAT_ECV): mult 2^32 >> 1 with shift 31, one ns a tick. */
	pg->time_mult = UINT32_C(1) << 31;
	pg->time_shift = 31;
	pg->time_cycles = 1000;
	pg->time_offset = (uint64_t)-INT64_C(1000);
	f.tsc = UINT64_C(0xAB00000000000000) + 1000 + 123456789;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.enabled, 3000 + 123456789);
	CHECK_EQ_U64(r.running, 2000 + 123456789);
	page_free(pg);
}

/* The page's clock (cap_user_time_zero): time_zero plus the converted cycles, read with the
 * counter (pmc_reader_read_clocked()) or alone (pmc_reader_clock(), index 0 too); what a
 * region's wall time is taken from. The pages are filled as the kernels fill them: x86-64
 * (time_zero, time_offset = time_zero - now) and arm64 (time_zero less the cycles' ns at
 * time_cycles, cap_user_time_short). */
static void
test_read_clocked(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(1, 48, 100);
	/* x86: a 3 GHz TSC; sched_clock = time_zero + cyc * mult >> shift. */
	struct fake f = {.pg = pg, .raw = 23, .tsc = UINT64_C(9000000123), .want_counter = 0};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r;
	uint64_t ns = 0;

	pg->cap_user_time = 1;
	pg->time_enabled = 5000;
	pg->time_running = 3000;
	pg->time_shift = 31;
	pg->time_mult = 715827883; /* round(2^31 / 3) */
	pg->time_zero = UINT64_C(77000000000);
	/* The context's time at the last update, 2 s of cycles ago (now = sched_clock then). */
	uint64_t now = pg->time_zero + pmc_cyc_to_ns(UINT64_C(3000000123), 715827883, 31);
	pg->time_offset = pg->time_zero - now;

	/* Without cap_user_time_zero: no clock, -ENODATA, nothing written. */
	r.clock = 1;
	CHECK_EQ_U64(pmc_reader_read_clocked(pg, &ops, &r), -ENODATA);
	CHECK_EQ_U64(r.clock, 1);
	CHECK_EQ_U64(pmc_reader_clock(pg, &ops, &ns), -ENODATA);
	CHECK_EQ_U64(ns, 0);

	pg->cap_user_time_zero = 1;
	/* 9000000123 cycles: 2863311532 + 136688510 = 3000000042 ns (test_read_time's
	 * arithmetic). */
	uint64_t want = pg->time_zero + pmc_cyc_to_ns(UINT64_C(9000000123), 715827883, 31);
	CHECK_EQ_U64(pmc_reader_read_clocked(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.value, 123);
	CHECK_EQ_U64(r.clock, want);
	CHECK_EQ_U64(r.clock, UINT64_C(77000000000) + 3000000042);
	/* The times are pmc_reader_read()'s: 2 s since the update. */
	CHECK_EQ_U64(r.enabled, 5000 + (want - now));
	CHECK_EQ_U64(r.running, 3000 + (want - now));
	struct pmc_reading plain;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &plain), 0);
	CHECK_EQ_U64(plain.enabled, r.enabled);
	CHECK_EQ_U64(pmc_reader_clock(pg, &ops, &ns), 0);
	CHECK_EQ_U64(ns, want);

	/* The clock alone needs no counter: index 0 (the event is off its counter). */
	pg->index = 0;
	f.rdpmc_calls = 0;
	CHECK_EQ_U64(pmc_reader_read_clocked(pg, &ops, &r), -ENODATA);
	f.tsc += 3000; /* 1 us later */
	CHECK_EQ_U64(pmc_reader_clock(pg, &ops, &ns), 0);
	CHECK_EQ_U64(ns - want, 1000);
	CHECK_EQ_U64(f.rdpmc_calls, 0);
	pg->index = 1;

	/* An update of the page between two reads (a context switch: new time_offset, same
	 * time_zero) leaves the clock continuous: the region's wall time is the cycles'. */
	CHECK_EQ_U64(pmc_reader_read_clocked(pg, &ops, &r), 0);
	uint64_t t0 = r.clock;
	__atomic_fetch_add(&pg->lock, 2, __ATOMIC_RELAXED);
	pg->time_offset -= 12345;
	pg->time_enabled += 999;
	f.tsc += 3 * UINT64_C(1000000);
	CHECK_EQ_U64(pmc_reader_read_clocked(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.clock - t0, 1000000);

	/* A writer in progress is waited for, as for the counter, and the clock is the last
	 * pass's: the fake's clock moves on 3000 cycles (1 us) at each read. */
	f.bump_first = 2;
	f.rdpmc_calls = 0;
	f.rdtsc_calls = 0;
	f.tsc_step = 3000;
	CHECK_EQ_U64(pmc_reader_read_clocked(pg, &ops, &r), 0);
	CHECK_EQ_U64(f.rdpmc_calls, 3);
	CHECK_EQ_U64(f.rdtsc_calls, 3);
	CHECK_EQ_U64(r.clock, t0 + 1000000 + 2000);
	f.bump_tsc_first = f.rdtsc_calls + 1; /* the next read of the clock alone is retried */
	CHECK_EQ_U64(pmc_reader_clock(pg, &ops, &ns), 0);
	CHECK_EQ_U64(f.rdtsc_calls, 5);
	CHECK_EQ_U64(ns, t0 + 1000000 + 4000);
	f.tsc_step = 0;
	pg->lock = 43; /* odd: stuck half-way */
	CHECK_EQ_U64(pmc_reader_clock(pg, &ops, &ns), -EAGAIN);
	page_free(pg);

	/* arm64 (arch_perf_update_userpage): a 56-bit 62.5 MHz sched_clock, time_zero the epoch's
	 * ns less the epoch cycles' ns, time_cycles the epoch, cntvct_el0 with bits above the
	 * mask. */
	pg = page_rdpmc(2, 32, 0);
	f = (struct fake){.pg = pg, .raw = 7, .want_counter = 1};
	ops = fake_ops(&f);
	pg->cap_user_time = 1;
	pg->cap_user_time_zero = 1;
	pg->cap_user_time_short = 1;
	pg->time_mult = UINT32_C(1) << 26; /* 16 ns a tick */
	pg->time_shift = 22;
	uint64_t epoch_cyc = (UINT64_C(1) << 56) - 0x100, epoch_ns = UINT64_C(5000000000000);
	pg->time_cycles = epoch_cyc;
	pg->time_mask = (UINT64_C(1) << 56) - 1;
	pg->time_zero = epoch_ns - pmc_cyc_to_ns(epoch_cyc, pg->time_mult, pg->time_shift);
	pg->time_offset = pg->time_zero - epoch_ns;
	/* 0x300 ticks after the epoch, the 56-bit counter wrapped, junk above it. */
	f.tsc = UINT64_C(0x0F00000000000200);
	CHECK_EQ_U64(pmc_reader_read_clocked(pg, &ops, &r), 0);
	CHECK_EQ_U64(r.clock, epoch_ns + 0x300 * 16);
	CHECK_EQ_U64(r.enabled, 0x300 * 16);
	CHECK_EQ_U64(pmc_reader_clock(pg, &ops, &ns), 0);
	CHECK_EQ_U64(ns, epoch_ns + 0x300 * 16);
	page_free(pg);
}

/* A region's wall time from its two ends: one clock (the page's, or CLOCK_MONOTONIC_RAW marked)
 * at both ends gives the difference; different clocks are told (-EXDEV), whichever came
 * first; a clock a little behind itself gives 0. */
static void
test_wall_delta(void)
{
	const uint64_t page = UINT64_C(123456789012345), raw = UINT64_C(123000000000000);
	uint64_t w = 7;

	CHECK_EQ_U64(pmc_wall_delta(page, page + 1500, &w), 0);
	CHECK_EQ_U64(w, 1500);
	CHECK_EQ_U64(pmc_wall_delta(raw | PMC_WALL_MARK, (raw + 2500) | PMC_WALL_MARK, &w), 0);
	CHECK_EQ_U64(w, 2500);
	/* Different clocks, either way round, the page's ahead of the raw one or behind it. */
	w = 7;
	CHECK_EQ_U64(pmc_wall_delta(page, raw | PMC_WALL_MARK, &w), -EXDEV);
	CHECK_EQ_U64(pmc_wall_delta(raw | PMC_WALL_MARK, page, &w), -EXDEV);
	CHECK_EQ_U64(pmc_wall_delta(raw, page | PMC_WALL_MARK, &w), -EXDEV);
	CHECK_EQ_U64(pmc_wall_delta(page | PMC_WALL_MARK, raw, &w), -EXDEV);
	/* A clock started at 0, against one ~100 years of ns on. */
	CHECK_EQ_U64(pmc_wall_delta(0, (UINT64_C(1) << 61) | PMC_WALL_MARK, &w), -EXDEV);
	CHECK_EQ_U64(pmc_wall_delta((UINT64_C(1) << 61) | PMC_WALL_MARK, 0, &w), -EXDEV);
	CHECK_EQ_U64(w, 7);
	/* A clock 40 ns behind itself (TSCs apart across CPUs): 0. */
	CHECK_EQ_U64(pmc_wall_delta(page, page - 40, &w), 0);
	CHECK_EQ_U64(w, 0);
	CHECK_EQ_U64(pmc_wall_delta(raw | PMC_WALL_MARK, (raw - 40) | PMC_WALL_MARK, &w), 0);
	CHECK_EQ_U64(w, 0);
	/* The longest wall time there can be: just under 2^62 ns (146 years). */
	CHECK_EQ_U64(pmc_wall_delta(1, PMC_WALL_BAD, &w), 0);
	CHECK_EQ_U64(w, PMC_WALL_BAD - 1);
}

/* arm64 with kernel.perf_user_access 0 (its default), or an event opened without the PMU's
 * "rdpmc" format bit: the kernel still sets cap_user_rdpmc (and the clock bits) but gives index
 * 0. Neither the counter nor the clock is read; the caller goes to read(). */
static void
test_arm64_user_access_off(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(0, 32, 12345);
	struct fake f = {.pg = pg, .raw = 1, .tsc = 2};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r = {.value = 11, .enabled = 22, .running = 33};
	uint64_t v = 44;

	pg->cap_user_time = 1;
	pg->cap_user_time_zero = 1;
	pg->cap_user_time_short = 1;
	pg->time_mult = 1;
	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), -ENODATA);
	CHECK_EQ_U64(pmc_reader_read_count(pg, &ops, &v), -ENODATA);
	CHECK_EQ_U64(f.rdpmc_calls, 0);
	CHECK_EQ_U64(f.rdtsc_calls, 0);
	CHECK_EQ_U64(r.value, 11);
	CHECK_EQ_U64(v, 44);
	page_free(pg);
}

/* Reads counter @counter: a 64-bit cycle counter of 2^40 + 31 for counter 31, else a 32-bit
 * event counter at 0xFFFFFFF0 + counter. */
static uint64_t
fake_mrs(void *ctx, uint32_t counter)
{
	struct fake *f = ctx;

	f->rdpmc_calls++;
	if (counter == PMC_ARM64_CYCLE_COUNTER)
		return (UINT64_C(1) << 40) + counter;
	return UINT64_C(0xFFFFFFF0) + counter;
}

/* An arm64 group as cortex-a57 gives it: cycles (64 bits, the cycle counter) leading two 32-bit
 * event counters. */
static void
test_arm64_group(void)
{
	struct perf_event_mmap_page *pg[3] = {page_rdpmc(32, 64, 100), page_rdpmc(1, 32, 1000),
	                                      page_rdpmc(2, 32, INT64_C(1) << 33)};
	const int leader[3] = {0, 0, 0};
	struct fake f = {.tsc = 0x10};
	struct pmc_reader_ops ops = {.rdpmc = fake_mrs, .rdtsc = fake_rdtsc, .ctx = &f};
	uint64_t v[9];

	pg[0]->cap_user_time = 1;
	pg[0]->cap_user_time_short = 1;
	pg[0]->time_mult = 1;
	pg[0]->time_mask = UINT64_C(0xFF);
	pg[0]->time_enabled = 500;
	pg[0]->time_running = 400;
	CHECK_EQ_U64(pmc_reader_read_groups(pg, leader, 3, &ops, v), 0);
	CHECK_EQ_U64(v[0], (UINT64_C(1) << 40) + 31 + 100);
	CHECK_EQ_U64(v[1], 1000 - 16);                    /* 0xFFFFFFF0 is -16 */
	CHECK_EQ_U64(v[2], (UINT64_C(1) << 33) - 16 + 1); /* counter 1: 0xFFFFFFF1 */
	CHECK_EQ_U64(v[3], 500 + 0x10);
	CHECK_EQ_U64(v[5], 500 + 0x10);
	CHECK_EQ_U64(v[8], 400 + 0x10);
	CHECK_EQ_U64(f.rdpmc_calls, 3);
	CHECK_EQ_U64(f.rdtsc_calls, 1);
	for (int i = 0; i < 3; i++)
		page_free(pg[i]);
}

static void
test_caps_layout(void)
{
	struct perf_event_mmap_page *pg = page_new();

	/* The reader tests capabilities as a word; the masks must match the kernel's bitfields. */
	pg->cap_user_rdpmc = 1;
	CHECK_EQ_U64(pg->capabilities, PMC_CAP_USER_RDPMC);
	pg->cap_user_rdpmc = 0;
	pg->cap_user_time = 1;
	CHECK_EQ_U64(pg->capabilities, PMC_CAP_USER_TIME);
	pg->cap_user_time = 0;
	pg->cap_user_time_short = 1;
	CHECK_EQ_U64(pg->capabilities, PMC_CAP_USER_TIME_SHORT);

	/* The other bits do not enable rdpmc. */
	pg->capabilities = ~PMC_CAP_USER_RDPMC;
	pg->index = 1;

	struct fake f = {.pg = pg};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r;

	CHECK_EQ_U64(pmc_reader_read(pg, &ops, &r), -ENODATA);
	CHECK_EQ_U64(f.rdpmc_calls, 0);
	page_free(pg);
}

static void
test_hw_seam(void)
{
	/* Only wiring: this machine may not allow the real instructions. */
	CHECK(pmc_reader_hw_ops.rdpmc == pmc_rdpmc_hw);
	CHECK(pmc_reader_hw_ops.rdtsc == pmc_rdtsc_hw);
	CHECK(pmc_reader_hw_ops.ctx == NULL);
#if defined(__x86_64__) || defined(__aarch64__)
	CHECK(PMC_HAVE_RDPMC == 1);
#else
	CHECK(PMC_HAVE_RDPMC == 0);
#endif
}

/* The fast passes give what the general reader gives for the same page and instructions: many
 * pages (widths 0, 32, 40, 48, 64; counters that wrapped; with and without cap_user_time_short;
 * clocks of realistic mults and shifts), each read both ways. */
static void
test_pass_equals_general(void)
{
	static const uint16_t widths[] = {0, 32, 40, 48, 64};
	uint64_t x = UINT64_C(0x9E3779B97F4A7C15);
	unsigned cases = 0;

	for (unsigned k = 0; k < 2000; k++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
		struct perf_event_mmap_page *pg =
		        page_rdpmc(1 + (uint32_t)(x % 32), widths[k % 5], (int64_t)(x >> 3));
		struct fake f = {
		        .pg = pg, .raw = x * 3, .tsc = x >> 9, .want_counter = pg->index - 1};
		struct pmc_reader_ops ops = fake_ops(&f);

		pg->cap_user_time = 1;
		pg->cap_user_time_zero = 1;
		pg->cap_user_time_short = k & 1;
		pg->time_cycles = x >> 11;
		pg->time_mask = (k & 2) ? UINT64_C(0x00FFFFFFFFFFFFFF) : UINT64_MAX;
		/* A 24 MHz to 4 GHz clock: ns = cyc * mult >> shift, under 2^62 ns for these. */
		pg->time_shift = (uint16_t)(10 + (k % 22));
		pg->time_mult =
		        (uint32_t)(((uint64_t)1 << pg->time_shift) / (1 + k % 40) + (k & 7));
		pg->time_offset = x >> 5;
		pg->time_zero = x >> 4;
		pg->time_enabled = x >> 20;
		pg->time_running = x >> 21;

		struct pmc_reading a, b;
		CHECK_EQ(pmc_reader_read_clocked(pg, &ops, &a), 0);
		f.tsc = x >> 9;
		CHECK_EQ(pmc_reader_pass_leader(pg, &ops, &b), 0);
		CHECK_EQ(b.value, a.value);
		CHECK_EQ(b.enabled, a.enabled);
		CHECK_EQ(b.running, a.running);
		CHECK_EQ(b.clock, a.clock);
		uint64_t c = 0, d = 1;
		CHECK_EQ(pmc_reader_read_count(pg, &ops, &c), 0);
		CHECK_EQ(pmc_reader_pass_count(pg, &ops, &d), 0);
		CHECK_EQ(d, c);
		cases++;
		page_free(pg);
	}
	CHECK_EQ(cases, 2000);
}

/* A pass that cannot give its reading says so, once, and leaves the output alone: user reads
 * off, no clock (the leader), the event not on a counter, the lock moved during the pass. */
static void
test_pass_refusals(void)
{
	struct perf_event_mmap_page *pg = page_rdpmc(3, 48, 1000);
	struct fake f = {.pg = pg, .raw = 5, .tsc = 100, .want_counter = 2};
	struct pmc_reader_ops ops = fake_ops(&f);
	struct pmc_reading r = {.value = 7, .enabled = 7, .running = 7, .clock = 7};
	uint64_t v = 7;

	pg->cap_user_time = 1;
	pg->cap_user_time_zero = 1;
	pg->time_mult = 1;
	CHECK_EQ(pmc_reader_pass_leader(pg, &ops, &r), 0);
	CHECK_EQ(r.value, 1005);
	CHECK_EQ(r.clock, 100);

	pg->cap_user_time_zero = 0; /* the leader needs the clock; a member does not */
	r.value = 7;
	CHECK_EQ(pmc_reader_pass_leader(pg, &ops, &r), -ENODATA);
	CHECK_EQ(r.value, 7);
	CHECK_EQ(pmc_reader_pass_count(pg, &ops, &v), 0);
	CHECK_EQ(v, 1005);
	pg->cap_user_time_zero = 1;

	pg->cap_user_rdpmc = 0;
	v = 7;
	unsigned calls = f.rdpmc_calls;
	CHECK_EQ(pmc_reader_pass_leader(pg, &ops, &r), -ENODATA);
	CHECK_EQ(pmc_reader_pass_count(pg, &ops, &v), -ENODATA);
	CHECK_EQ(f.rdpmc_calls, calls); /* never an rdpmc the kernel did not allow */
	CHECK_EQ(v, 7);
	pg->cap_user_rdpmc = 1;

	pg->index = 0;
	CHECK_EQ(pmc_reader_pass_leader(pg, &ops, &r), -ENODATA);
	CHECK_EQ(pmc_reader_pass_count(pg, &ops, &v), -ENODATA);
	CHECK_EQ(f.rdpmc_calls, calls);
	pg->index = 3;

	/* The lock moves during the pass: no retry, no result, and -EAGAIN (made again, it may
	 * stand; the refusals above would not). */
	f.bump_first = f.rdpmc_calls + 2;
	CHECK_EQ(pmc_reader_pass_leader(pg, &ops, &r), -EAGAIN);
	CHECK_EQ(pmc_reader_pass_count(pg, &ops, &v), -EAGAIN);
	CHECK_EQ(r.value, 7);
	CHECK_EQ(v, 7);
	CHECK_EQ(f.rdpmc_calls, calls + 2);
	page_free(pg);
}

int
main(void)
{
	int fds_at_start = pmc_test_count_fds();

	RUN(test_sign_extend_40);
	RUN(test_sign_extend_48);
	RUN(test_sign_extend_odd_widths);
	RUN(test_read_counter);
	RUN(test_read_time);
	RUN(test_read_time_short);
	RUN(test_scale);
	RUN(test_fallback);
	RUN(test_retry_forced);
	RUN(test_seqlock_concurrent_writer);
	RUN(test_stuck_writer);
	RUN(test_read_count);
	RUN(test_read_groups);
	RUN(test_parse_group);
	RUN(test_arm64_cycle_counter);
	RUN(test_arm64_width32_overflow);
	RUN(test_arm64_time_short);
	RUN(test_read_clocked);
	RUN(test_wall_delta);
	RUN(test_arm64_user_access_off);
	RUN(test_arm64_group);
	RUN(test_caps_layout);
	RUN(test_hw_seam);
	RUN(test_pass_equals_general);
	RUN(test_pass_refusals);

	CHECK_EQ_U64(pmc_test_count_fds(), fds_at_start);
	printf("ok %u - no_fd_leak\n", ++pmc_test_n);
	return 0;
}
