/* reader: reading one hardware counter from user space through its perf_event user page
 * (struct perf_event_mmap_page) with no system call, following the seqlock protocol documented
 * above that struct in <linux/perf_event.h>: rdpmc and rdtsc on x86-64; on arm64 mrs of
 * pmevcntr<n>_el0 (pmccntr_el0 for the cycle counter) and of the virtual counter cntvct_el0,
 * the clock the arm64 kernel describes in the page with cap_user_time_short. Plus the helpers
 * around it: sign extension of the raw counter (pmc_width: 40 or 48 bits on x86, 32 or 64 on
 * arm64), time-based scaling of multiplexed counts, and parsing the buffer a read() of a perf
 * group returns when the counter cannot be read in user space. The instructions sit behind
 * struct pmc_reader_ops, so the reader is a pure function of the page and the ops, which the
 * unit tests simulate on machines without a PMU (of either architecture). Internal to the
 * client library (not installed); header-only so that the hot path inlines into its caller. */
#pragma once

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/perf_event.h>

#ifndef __SIZEOF_INT128__
#error "client/lib/reader.h needs unsigned __int128 (a 64-bit target)"
#endif

__extension__ typedef unsigned __int128 pmc_u128;

/* Passes pmc_reader_read() makes through the seqlock before it gives up with -EAGAIN. */
#define PMC_READER_MAX_TRIES 1000

/* The kernel's barrier(): stops the compiler moving memory accesses across it. */
#define pmc_barrier() __asm__ __volatile__("" ::: "memory")

/* The seqlock reader of C11 (Boehm, "Can seqlocks get along with programming language memory
 * models?"): the first load of lock is an acquire (PMC_READ_LOCK), the fields are loaded each
 * once, in program order (PMC_READ_ONCE: a volatile load, as the kernel's READ_ONCE; the page
 * is volatile-qualified. One plain load each, with its offset in the instruction, also on
 * arm64, where an acquire load (ldar) takes no offset and orders every later access), and an
 * acquire fence (PMC_READ_FENCE: nothing on x86-64, one dmb ishld on arm64) orders them before
 * lock is read again. That holds even against a writer on another CPU (the unit tests have
 * one); the kernel, which updates the page on the reading thread's own CPU, needs less.
 * ThreadSanitizer models neither volatile loads nor the fence: under it every load is an
 * acquire, which it understands. */
#if defined(__SANITIZE_THREAD__)
#define PMC_READ_ONCE(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)
#define PMC_READ_FENCE() pmc_barrier()
#else
#define PMC_READ_ONCE(x) (x)
#define PMC_READ_FENCE() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#endif
#define PMC_READ_LOCK(x) __atomic_load_n(&(x), __ATOMIC_ACQUIRE)

/* Bit @n of perf_event_mmap_page.capabilities as the kernel's bitfields lay it out (the first
 * declared field is the least significant bit on little-endian ABIs, the most on big-endian).
 * Reading the whole word lets the reader take the capabilities in one ordered load. */
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PMC_CAP_BIT(n) (UINT64_C(1) << (n))
#else
#define PMC_CAP_BIT(n) (UINT64_C(1) << (63 - (n)))
#endif
#define PMC_CAP_USER_RDPMC PMC_CAP_BIT(2)
#define PMC_CAP_USER_TIME PMC_CAP_BIT(3)
#define PMC_CAP_USER_TIME_ZERO PMC_CAP_BIT(4)
#define PMC_CAP_USER_TIME_SHORT PMC_CAP_BIT(5)

/**
 * struct pmc_reader_ops - the instructions pmc_reader_read() needs, as a seam
 * @rdpmc: returns the raw value of hardware counter @counter (the page's index - 1), of which
 *         only the low pmc_width bits are meaningful: rdpmc on x86-64; on arm64 mrs of
 *         pmevcntr<@counter>_el0 for 0..30 and of the cycle counter pmccntr_el0 for 31
 * @rdtsc: returns the current value of the clock the page's time_* fields describe: the TSC on
 *         x86-64, cntvct_el0 on arm64 (whose bits above time_mask the reader drops)
 * @ctx: passed to both unchanged; borrowed, never freed by the reader
 *
 * Production code uses pmc_reader_hw_ops; tests use fakes that return chosen values.
 */
struct pmc_reader_ops {
	uint64_t (*rdpmc)(void *ctx, uint32_t counter);
	uint64_t (*rdtsc)(void *ctx);
	void *ctx;
};

/**
 * struct pmc_reading - one consistent snapshot of a counter
 * @value: the event count (not scaled; see pmc_scale())
 * @enabled: nanoseconds the event has been enabled
 * @running: nanoseconds the event has actually been counting on a PMU counter
 * @clock: the page's clock at the read, in nanoseconds (perf's clock, the kernel's sched_clock:
 *         time_zero plus the converted cycles); written by pmc_reader_read_clocked() alone
 */
struct pmc_reading {
	uint64_t value;
	uint64_t enabled;
	uint64_t running;
	uint64_t clock;
};

/**
 * pmc_sign_extend() - sign-extend the low @width bits of a raw counter value
 * @v: raw value as rdpmc returned it; bits at and above @width are ignored
 * @width: the counter's width in bits (perf_event_mmap_page.pmc_width)
 *
 * Pure. A @width of 0, 64 or more means "no extension" and returns @v unchanged (reinterpreted
 * as signed), so a page with a missing or bogus pmc_width can never cause an undefined shift.
 * Return: the low @width bits of @v read as a two's-complement number.
 */
static inline int64_t
pmc_sign_extend(uint64_t v, unsigned width)
{
	/* The bits above @width shifted out, the sign bit shifted back in: no branch. A width
	 * of 0 or 64 and more shifts by 0. (gcc and clang shift a signed value right
	 * arithmetically, and convert an unsigned one modulo 2^64: both documented.) */
	unsigned shift = width - 1u < 63u ? 64u - width : 0u;

	return (int64_t)(v << shift) >> shift;
}

/**
 * pmc_cyc_to_ns() - convert clock cycles to nanoseconds with the page's time_mult/time_shift
 * @cyc: cycles (already corrected for cap_user_time_short by the caller)
 * @mult: perf_event_mmap_page.time_mult
 * @shift: perf_event_mmap_page.time_shift
 *
 * Pure. Computes (@cyc * @mult) >> @shift exactly in 128 bits, truncated to 64 bits. That equals
 * the kernel's documented quot * mult + ((rem * mult) >> shift), with quot = cyc >> shift and
 * rem = cyc & ((1 << shift) - 1), wherever that form does not overflow, and stays exact (and
 * free of undefined shifts) for any @shift a broken page might hold.
 * Return: the nanoseconds, modulo 2^64.
 */
static inline uint64_t
pmc_cyc_to_ns(uint64_t cyc, uint32_t mult, unsigned shift)
{
	if (shift >= 128)
		return 0;
	return (uint64_t)(((pmc_u128)cyc * mult) >> shift);
}

/* The clock fields of a page, read inside the seqlock, and the cycles read with them. */
struct pmc_page_clock {
	uint64_t cyc, offset, zero, cycles, mask;
	uint32_t mult;
	unsigned shift;
	int has_short;
};

/* Reads the clock and the page's fields that describe it (a page with cap_user_time, @caps);
 * time_zero when @want_zero. Inside the caller's seqlock pass. */
static inline __attribute__((always_inline)) void
pmc_page_clock_read_(const volatile struct perf_event_mmap_page *pc, uint64_t caps,
                     const struct pmc_reader_ops *ops, struct pmc_page_clock *c, int want_zero)
{
	c->has_short = !!(caps & PMC_CAP_USER_TIME_SHORT);
	c->cyc = ops->rdtsc(ops->ctx);
	c->offset = PMC_READ_ONCE(pc->time_offset);
	c->mult = PMC_READ_ONCE(pc->time_mult);
	c->shift = PMC_READ_ONCE(pc->time_shift);
	c->zero = want_zero ? PMC_READ_ONCE(pc->time_zero) : 0;
	c->cycles = c->mask = 0;
	if (c->has_short) {
		c->cycles = PMC_READ_ONCE(pc->time_cycles);
		c->mask = PMC_READ_ONCE(pc->time_mask);
	}
}

/* The clock's cycles in nanoseconds (cap_user_time_short's correction applied): add
 * time_offset for the time since the page's last update, time_zero for the clock's value. */
static inline __attribute__((always_inline)) uint64_t
pmc_page_clock_ns_(const struct pmc_page_clock *c)
{
	uint64_t cyc = c->cyc;

	if (c->has_short)
		cyc = c->cycles + ((cyc - c->cycles) & c->mask);
	return pmc_cyc_to_ns(cyc, c->mult, c->shift);
}

/* pmc_reader_read(), pmc_reader_read_count(), pmc_reader_read_clocked() and
 * pmc_reader_clock(): @want chooses what is read: 0 the count, 1 the count and the times, 2
 * those and the clock, 3 the clock alone (the event need not be on a counter); a compile-time
 * constant once inlined. */
static inline __attribute__((always_inline)) int
pmc_reader_read_(const volatile struct perf_event_mmap_page *pc, const struct pmc_reader_ops *ops,
                 struct pmc_reading *out, int want)
{
	for (unsigned tries = 0; tries < PMC_READER_MAX_TRIES; tries++) {
		uint32_t seq = PMC_READ_LOCK(pc->lock);

		pmc_barrier();
		if (seq & 1)
			continue; /* the writer is half-way through an update */

		uint32_t idx = PMC_READ_ONCE(pc->index);
		uint64_t caps = PMC_READ_ONCE(pc->capabilities);

		if (want != 3 && (!(caps & PMC_CAP_USER_RDPMC) || !idx))
			return -ENODATA;
		if (want >= 2 && !(caps & PMC_CAP_USER_TIME_ZERO)) {
			/* Not a transient of a writer (x86's clears the bit while it writes). */
			PMC_READ_FENCE();
			if (PMC_READ_ONCE(pc->lock) != seq)
				continue;
			return -ENODATA;
		}

		uint64_t count = 0, enabled = 0, running = 0;
		int has_time = 0;
		struct pmc_page_clock c = {0};

		if (want != 3) {
			unsigned width = PMC_READ_ONCE(pc->pmc_width);

			count = (uint64_t)PMC_READ_ONCE(pc->offset);
			count += (uint64_t)pmc_sign_extend(ops->rdpmc(ops->ctx, idx - 1), width);
		}
		if (want == 1 || want == 2) {
			enabled = PMC_READ_ONCE(pc->time_enabled);
			running = PMC_READ_ONCE(pc->time_running);
		}
		/* time_zero implies the clock (cap_user_time) in every kernel that sets it; asked
		 * for, it is required above. */
		if (want >= 2 || (want == 1 && (caps & PMC_CAP_USER_TIME))) {
			has_time = 1;
			pmc_page_clock_read_(pc, caps, ops, &c, want >= 2);
		}

		PMC_READ_FENCE();
		if (PMC_READ_ONCE(pc->lock) != seq)
			continue;

		if (has_time) {
			uint64_t ns = pmc_page_clock_ns_(&c);
			uint64_t delta = c.offset + ns;

			enabled += delta;
			running += delta; /* idx != 0 here: the event is on a counter */
			if (want >= 2)
				out->clock = c.zero + ns;
		}

		out->value = count;
		out->enabled = enabled;
		out->running = running;
		return 0;
	}
	return -EAGAIN;
}

/**
 * pmc_reader_read() - read a counter through its user page without a system call
 * @pc: the event's mmap()ed perf_event_mmap_page, borrowed; must not be NULL. The kernel (or a
 *      test) may update it concurrently: the seqlock in @pc->lock makes the snapshot consistent.
 * @ops: the rdpmc/rdtsc implementation, borrowed; normally &pmc_reader_hw_ops
 * @out: filled in on success only; left untouched on any error
 *
 * Follows the protocol documented above struct perf_event_mmap_page: snapshot lock, read index,
 * offset, the raw counter (sign-extended from pmc_width) and time_enabled/time_running, and retry
 * when lock changed meanwhile. An odd lock (an update in progress) is retried as well. With
 * cap_user_time the times are brought up to date with the clock: the cycles from @ops->rdtsc
 * (corrected with time_cycles/time_mask under cap_user_time_short) are converted with
 * time_offset/time_mult/time_shift and the delta added to enabled and, the event being on a
 * counter (index != 0), to running. Without cap_user_time they are the page's last values.
 * Only a self-monitoring thread may use the hardware ops: the counter is the current CPU's.
 *
 * Return: 0 on success; -ENODATA when the page has cap_user_rdpmc clear or index 0 (the event is
 * not on a counter readable from user space: fall back to read()); -EAGAIN when the lock kept
 * changing for PMC_READER_MAX_TRIES passes, so a writer that never finishes cannot hang the
 * caller (retry later or fall back).
 */
static inline int
pmc_reader_read(const volatile struct perf_event_mmap_page *pc, const struct pmc_reader_ops *ops,
                struct pmc_reading *out)
{
	return pmc_reader_read_(pc, ops, out, 1);
}

/**
 * pmc_reader_read_count() - pmc_reader_read() of the count alone, for a group member
 * @pc: as for pmc_reader_read()
 * @ops: as for pmc_reader_read(); @ops->rdtsc is never called
 * @value: receives the count on success only
 *
 * The kernel schedules a group as a unit, so every member has its leader's time_enabled and
 * time_running (a read() of the group reports the leader's alone): a caller that has read the
 * leader with pmc_reader_read() takes its times for the members and saves, per member, the
 * rdtsc and the time fields. The seqlock protocol and the errors are pmc_reader_read()'s.
 * Return: 0, -ENODATA or -EAGAIN, as pmc_reader_read().
 */
static inline int
pmc_reader_read_count(const volatile struct perf_event_mmap_page *pc,
                      const struct pmc_reader_ops *ops, uint64_t *value)
{
	struct pmc_reading rd;
	int r = pmc_reader_read_(pc, ops, &rd, 0);

	if (r == 0)
		*value = rd.value;
	return r;
}

/**
 * pmc_reader_read_clocked() - pmc_reader_read() and the page's clock, in one pass
 * @pc: as for pmc_reader_read()
 * @ops: as for pmc_reader_read()
 * @out: as for pmc_reader_read(), and @out->clock: the clock's value at the read, in ns
 *
 * The page's clock (cap_user_time_zero) is perf's, the kernel's sched_clock: the TSC on x86-64,
 * the generic timer on arm64, never slewed. The read converts the cycles it takes for the
 * times anyway, so the clock costs one more load and one addition. A caller that times a
 * region with it must take both ends from the same clock (pmc_reader_clock() where the counter
 * is not on a counter at that moment).
 * Return: as pmc_reader_read(); also -ENODATA when the page has cap_user_time_zero clear.
 */
static inline int
pmc_reader_read_clocked(const volatile struct perf_event_mmap_page *pc,
                        const struct pmc_reader_ops *ops, struct pmc_reading *out)
{
	return pmc_reader_read_(pc, ops, out, 2);
}

/**
 * pmc_reader_clock() - the page's clock alone, as pmc_reader_read_clocked() reads it
 * @pc: an event's mmap()ed user page, borrowed; its event need not be on a counter (index 0)
 * @ops: as for pmc_reader_read(); @ops->rdpmc is never called
 * @ns: receives the clock in nanoseconds on success only
 *
 * Return: 0; -ENODATA when the page has cap_user_time_zero clear; -EAGAIN as pmc_reader_read().
 */
static inline int
pmc_reader_clock(const volatile struct perf_event_mmap_page *pc, const struct pmc_reader_ops *ops,
                 uint64_t *ns)
{
	struct pmc_reading rd;
	int r = pmc_reader_read_(pc, ops, &rd, 3);

	if (r == 0)
		*ns = rd.clock;
	return r;
}

/* A reading of the clock a region's wall time is taken from where the page has none
 * (CLOCK_MONOTONIC_RAW), marked so that it never passes for one of the page's clock. */
#define PMC_WALL_MARK (UINT64_C(1) << 63)
/* Wall times this long or longer are none: see pmc_wall_delta(). */
#define PMC_WALL_BAD (UINT64_C(1) << 62)

/**
 * pmc_wall_delta() - a region's wall time from the clock readings at its two ends
 * @t0: the reading at its begin: the page's clock (pmc_reader_read_clocked(),
 *      pmc_reader_clock()) or PMC_WALL_MARK | CLOCK_MONOTONIC_RAW, in ns
 * @t1: the reading at its end, the same way
 * @wall: receives the wall time in ns on success only
 *
 * Pure. Both clocks count from about boot, far below 2^62 ns, so readings of one clock differ
 * by less than PMC_WALL_BAD and the marks cancel, while readings of different clocks (the
 * kernel took the page's clock away, or gave it, within the region) differ by 2^63 give or
 * take that: in [PMC_WALL_BAD, 3 * PMC_WALL_BAD). A difference above that is a clock a little
 * behind itself (TSCs a few ns apart across CPUs): 0.
 * Return: 0; -EXDEV when the two ends are readings of different clocks.
 */
static inline int
pmc_wall_delta(uint64_t t0, uint64_t t1, uint64_t *wall)
{
	uint64_t w = t1 - t0;

	if (__builtin_expect((w >> 62) != 0, 0)) { /* w >= PMC_WALL_BAD */
		if (w < 3 * PMC_WALL_BAD)
			return -EXDEV;
		w = 0;
	}
	*wall = w;
	return 0;
}

/**
 * pmc_reader_read_groups() - read every counter of a thread's perf groups through their pages
 * @pages: @n mmap()ed user pages, borrowed, in group order (each leader before its members);
 *         none NULL
 * @leader: @n indexes; @leader[i] is the index of event i's group leader (i for a leader)
 * @n: how many events
 * @ops: as for pmc_reader_read()
 * @v: 3 * @n words, caller-owned: the counts in v[0..n), time_enabled in v[n..2n) and
 *     time_running in v[2n..3n), the layout of a read() of each group spread per event
 *
 * Each leader is read with its times (one clock read per group), each member's count alone
 * with its leader's times, as a read() of the group reports them.
 * Return: 0 when every event was read; otherwise the first error of pmc_reader_read() or
 * pmc_reader_read_count() (-ENODATA: use read(); -EAGAIN), with @v partly written.
 */
static inline int
pmc_reader_read_groups(struct perf_event_mmap_page *const *pages, const int *leader, size_t n,
                       const struct pmc_reader_ops *ops, uint64_t *v)
{
	for (size_t i = 0; i < n; i++) {
		size_t g = (size_t)leader[i];
		int r;

		if (g != i) {
			r = pmc_reader_read_count(pages[i], ops, &v[i]);
			if (r < 0)
				return r;
			v[n + i] = v[n + g];
			v[2 * n + i] = v[2 * n + g];
		} else {
			struct pmc_reading rd;

			r = pmc_reader_read(pages[i], ops, &rd);
			if (r < 0)
				return r;
			v[i] = rd.value;
			v[n + i] = rd.enabled;
			v[2 * n + i] = rd.running;
		}
	}
	return 0;
}

/* The fast passes: one seqlock pass each, with the kernel's documented protocol (plain loads
 * between two compiler barriers: the kernel writes a thread's pages on the thread's own CPU,
 * between its instructions, never beside them) and no retry of their own: a pass that cannot
 * give its reading says why (-ENODATA: the page refuses; -EAGAIN: the kernel updated it during
 * the pass) and the caller makes it again or takes the general way (pmc_reader_read() and its
 * kin, which retry, or read()). What they give is what the general reader gives for the same page
 * and instructions, wherever time_shift is below 64 and the kernel's quot * mult does not overflow
 * (a clock reading below 2^64 ns; the unit tests compare the two). */

/**
 * pmc_reader_pass_leader() - a group leader's count, times and the page's clock, in one pass
 * @pc: the leader's mmap()ed user page, borrowed
 * @ops: as for pmc_reader_read()
 * @out: receives the count, enabled, running and clock (as pmc_reader_read_clocked()) on
 *       success only
 *
 * Return: 0; -ENODATA when the page does not let it: cap_user_rdpmc or cap_user_time_zero
 * clear, or index 0 (the event is not on a counter: multiplexed out); -EAGAIN when the lock
 * moved during the pass (the kernel updated the page meanwhile: a pass made again may stand).
 */
static inline __attribute__((always_inline)) int
pmc_reader_pass_leader(const volatile struct perf_event_mmap_page *pc,
                       const struct pmc_reader_ops *ops, struct pmc_reading *out)
{
	uint32_t seq = pc->lock;

	pmc_barrier();
	uint64_t caps = pc->capabilities;
	uint32_t idx = pc->index;

	if (__builtin_expect((~caps & (PMC_CAP_USER_RDPMC | PMC_CAP_USER_TIME_ZERO)) || !idx, 0))
		return -ENODATA;
	/* Each value is used as soon as it is loaded (the page's loads keep their order), and
	 * only the lock's second load decides whether the results stand. The sign extension is
	 * pmc_sign_extend()'s with the shift modulo 64 (width 0 or 64 extends nothing); the clock
	 * is the kernel's documented quot * mult + (rem * mult >> shift). */
	unsigned sh = (64u - pc->pmc_width) & 63u;
	uint64_t count = pc->offset;
	uint64_t raw = ops->rdpmc(ops->ctx, idx - 1);

	count += (uint64_t)((int64_t)(raw << sh) >> sh);
	uint64_t cyc = ops->rdtsc(ops->ctx);

	if (caps & PMC_CAP_USER_TIME_SHORT) {
		uint64_t last = pc->time_cycles;

		cyc = last + ((cyc - last) & pc->time_mask);
	}
	uint32_t mult = pc->time_mult;
	unsigned shift = pc->time_shift & 63u;
	uint64_t quot = cyc >> shift, rem = cyc - (quot << shift);
	uint64_t ns = quot * mult + ((rem * mult) >> shift);
	uint64_t delta = pc->time_offset + ns;
	uint64_t enabled = pc->time_enabled + delta;
	uint64_t running = pc->time_running + delta;
	uint64_t clock = pc->time_zero + ns;

	pmc_barrier();
	if (__builtin_expect(pc->lock != seq, 0))
		return -EAGAIN;
	out->value = count;
	out->enabled = enabled;
	out->running = running;
	out->clock = clock;
	return 0;
}

/**
 * pmc_reader_pass_count() - a group member's count, in one pass
 * @pc: the member's mmap()ed user page, borrowed
 * @ops: as for pmc_reader_read(); @ops->rdtsc is never called
 * @value: receives the count on success only
 *
 * The member's times are its leader's (see pmc_reader_read_count()).
 * Return: 0; -ENODATA or -EAGAIN as pmc_reader_pass_leader() (cap_user_time_zero is not asked
 * for).
 */
static inline __attribute__((always_inline)) int
pmc_reader_pass_count(const volatile struct perf_event_mmap_page *pc,
                      const struct pmc_reader_ops *ops, uint64_t *value)
{
	uint32_t seq = pc->lock;

	pmc_barrier();
	uint64_t caps = pc->capabilities;
	uint32_t idx = pc->index;

	if (__builtin_expect(!(caps & PMC_CAP_USER_RDPMC) || !idx, 0))
		return -ENODATA;
	unsigned sh = (64u - pc->pmc_width) & 63u;
	uint64_t count = pc->offset;
	uint64_t raw = ops->rdpmc(ops->ctx, idx - 1);

	count += (uint64_t)((int64_t)(raw << sh) >> sh);
	pmc_barrier();
	if (__builtin_expect(pc->lock != seq, 0))
		return -EAGAIN;
	*value = count;
	return 0;
}

/* arm64: the counter the page's index 32 names (index - 1), the cycle counter pmccntr_el0; 0..30
 * are the event counters pmevcntr<n>_el0. */
#define PMC_ARM64_CYCLE_COUNTER 31

#if defined(__x86_64__)
#define PMC_HAVE_RDPMC 1

/**
 * pmc_rdpmc_hw() - the rdpmc instruction
 * @ctx: unused
 * @counter: the counter to read (ECX): the page's index - 1
 *
 * Faults (SIGSEGV) unless the kernel allows user-space rdpmc for this task, which is what the
 * page's cap_user_rdpmc tells; only pmc_reader_read() should call it.
 * Return: the raw counter value (EDX:EAX).
 */
static inline uint64_t
pmc_rdpmc_hw(void *ctx, uint32_t counter)
{
	uint32_t lo, hi;

	(void)ctx;
	__asm__ __volatile__("rdpmc" : "=a"(lo), "=d"(hi) : "c"(counter) : "memory");
	return ((uint64_t)hi << 32) | lo;
}

/**
 * pmc_rdtsc_hw() - the rdtsc instruction
 * @ctx: unused
 *
 * Return: the time-stamp counter (EDX:EAX).
 */
static inline uint64_t
pmc_rdtsc_hw(void *ctx)
{
	uint32_t lo, hi;

	(void)ctx;
	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
	return ((uint64_t)hi << 32) | lo;
}
#elif defined(__aarch64__)
#define PMC_HAVE_RDPMC 1

/* One case per event counter: the register is encoded in the mrs instruction itself. */
#define PMC_MRS_PMEVCNTR_(n)                                                                       \
	case n:                                                                                    \
		__asm__ __volatile__("mrs %0, pmevcntr" #n "_el0" : "=r"(v) : : "memory");         \
		break;

/**
 * pmc_rdpmc_hw() - mrs of an arm64 PMU counter
 * @ctx: unused
 * @counter: the page's index - 1: event counter 0..30 (pmevcntr<n>_el0), or
 *           PMC_ARM64_CYCLE_COUNTER (pmccntr_el0)
 *
 * Traps (SIGILL) unless the kernel gave this task user access to the counter, which is what
 * the page's cap_user_rdpmc with a non-zero index tells (kernel.perf_user_access 1 and the
 * event opened with the PMU's "rdpmc" format bit); only the reader's functions should call it.
 * A counter number the kernel never gives (32 and above) reads as 0 with the switch, as the
 * counter of its value modulo 32 with the stubs.
 * Return: the raw counter value; a 32-bit counter's upper bits are not part of it (the kernel
 * sets them on the cycle counter), and pmc_sign_extend() drops them.
 */
#if !defined(__ARM_FEATURE_BTI_DEFAULT)
/* A computed branch into 32 stubs of two instructions (mrs, b), one per counter in index order:
 * 6 instructions where a switch takes 9 (bounds check, table load, branch). @counter is taken
 * modulo 32 (the kernel gives 0..31). Not where branch targets must be marked (BTI): there, the
 * switch. */
#define PMC_MRS_STUB_(reg) "mrs %0, " reg "\n\tb 2f\n\t"
#define PMC_MRS_STUBS_                                                                             \
	PMC_MRS_STUB_("pmevcntr0_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr1_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr2_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr3_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr4_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr5_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr6_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr7_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr8_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr9_el0")                                                             \
	PMC_MRS_STUB_("pmevcntr10_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr11_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr12_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr13_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr14_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr15_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr16_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr17_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr18_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr19_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr20_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr21_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr22_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr23_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr24_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr25_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr26_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr27_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr28_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr29_el0")                                                            \
	PMC_MRS_STUB_("pmevcntr30_el0")                                                            \
	PMC_MRS_STUB_("pmccntr_el0")

static inline __attribute__((always_inline)) uint64_t
pmc_rdpmc_hw(void *ctx, uint32_t counter)
{
	uint64_t v, at;

	(void)ctx;
	__asm__ __volatile__("adr %1, 1f\n\t"
	                     "add %1, %1, %w2, uxtw #3\n\t"
	                     "br %1\n"
	                     "1:\n\t" PMC_MRS_STUBS_ "2:"
	                     : "=r"(v), "=&r"(at)
	                     : "r"(counter & 31u)
	                     : "memory");
	return v;
}
#undef PMC_MRS_STUBS_
#undef PMC_MRS_STUB_
#else
static inline __attribute__((always_inline)) uint64_t
pmc_rdpmc_hw(void *ctx, uint32_t counter)
{
	uint64_t v = 0;

	(void)ctx;
	switch (counter) {
		PMC_MRS_PMEVCNTR_(0)
		PMC_MRS_PMEVCNTR_(1)
		PMC_MRS_PMEVCNTR_(2)
		PMC_MRS_PMEVCNTR_(3)
		PMC_MRS_PMEVCNTR_(4)
		PMC_MRS_PMEVCNTR_(5)
		PMC_MRS_PMEVCNTR_(6)
		PMC_MRS_PMEVCNTR_(7)
		PMC_MRS_PMEVCNTR_(8)
		PMC_MRS_PMEVCNTR_(9)
		PMC_MRS_PMEVCNTR_(10)
		PMC_MRS_PMEVCNTR_(11)
		PMC_MRS_PMEVCNTR_(12)
		PMC_MRS_PMEVCNTR_(13)
		PMC_MRS_PMEVCNTR_(14)
		PMC_MRS_PMEVCNTR_(15)
		PMC_MRS_PMEVCNTR_(16)
		PMC_MRS_PMEVCNTR_(17)
		PMC_MRS_PMEVCNTR_(18)
		PMC_MRS_PMEVCNTR_(19)
		PMC_MRS_PMEVCNTR_(20)
		PMC_MRS_PMEVCNTR_(21)
		PMC_MRS_PMEVCNTR_(22)
		PMC_MRS_PMEVCNTR_(23)
		PMC_MRS_PMEVCNTR_(24)
		PMC_MRS_PMEVCNTR_(25)
		PMC_MRS_PMEVCNTR_(26)
		PMC_MRS_PMEVCNTR_(27)
		PMC_MRS_PMEVCNTR_(28)
		PMC_MRS_PMEVCNTR_(29)
		PMC_MRS_PMEVCNTR_(30)
	case PMC_ARM64_CYCLE_COUNTER:
		__asm__ __volatile__("mrs %0, pmccntr_el0" : "=r"(v) : : "memory");
		break;
	default:
		break;
	}
	return v;
}
#endif
#undef PMC_MRS_PMEVCNTR_

/**
 * pmc_rdtsc_hw() - mrs of the arm64 virtual counter, cntvct_el0
 * @ctx: unused
 *
 * The clock behind the arm64 kernel's sched_clock, which the page describes with
 * cap_user_time and cap_user_time_short (time_cycles, time_mask: the counter may hold bits
 * above the kernel's mask). Readable from user space on every Linux arm64 system.
 * Return: the counter's value.
 */
static inline uint64_t
pmc_rdtsc_hw(void *ctx)
{
	uint64_t v;

	(void)ctx;
	__asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v) : : "memory");
	return v;
}
#else
/* No user-space counter reads here: callers use read(). */
#define PMC_HAVE_RDPMC 0

/**
 * pmc_rdpmc_hw() - returns 0 where there is no user-space counter read (PMC_HAVE_RDPMC 0)
 * @ctx: unused
 * @counter: unused
 *
 * Lets the code compile on every architecture; callers check PMC_HAVE_RDPMC and use read()
 * instead, so this is never reached.
 * Return: 0.
 */
static inline uint64_t
pmc_rdpmc_hw(void *ctx, uint32_t counter)
{
	(void)ctx;
	(void)counter;
	return 0;
}

/**
 * pmc_rdtsc_hw() - returns 0 where there is no user-space clock read (PMC_HAVE_RDPMC 0)
 * @ctx: unused
 *
 * Return: 0.
 */
static inline uint64_t
pmc_rdtsc_hw(void *ctx)
{
	(void)ctx;
	return 0;
}
#endif

/* The real instructions. A constant, so pmc_reader_read(pc, &pmc_reader_hw_ops, &r) compiles at
 * -O2 to the instructions inline, with no indirect calls. */
static const struct pmc_reader_ops pmc_reader_hw_ops = {
        .rdpmc = pmc_rdpmc_hw,
        .rdtsc = pmc_rdtsc_hw,
        .ctx = NULL,
};

/**
 * pmc_scale() - estimate the full count of a multiplexed event
 * @value: the count observed while the event was running
 * @enabled: nanoseconds the event was enabled
 * @running: nanoseconds it was actually counting
 *
 * Pure. Computes @value * @enabled / @running in 128 bits, so no intermediate product overflows;
 * a result above UINT64_MAX (only possible with @enabled > @running) saturates to UINT64_MAX.
 * Return: 0 when @running is 0 (the event never ran, even if @enabled is 0 too); @value
 * unchanged when @enabled == @running; otherwise the scaled count, rounded down.
 */
static inline uint64_t
pmc_scale(uint64_t value, uint64_t enabled, uint64_t running)
{
	if (running == 0)
		return 0;
	if (enabled == running)
		return value;

	pmc_u128 scaled = (pmc_u128)value * enabled / running;

	return scaled > UINT64_MAX ? UINT64_MAX : (uint64_t)scaled;
}

/**
 * pmc_reader_parse_group() - parse what read() of a perf group leader returned
 * @buf: the words read(), borrowed; the group was opened with read_format =
 *       PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
 *       so it holds { u64 nr; u64 time_enabled; u64 time_running; u64 values[nr]; }
 * @n_words: how many words read() returned (its byte count / 8), not the buffer's capacity
 * @n_events: how many events the caller put in the group
 * @values: receives the @n_events counts, in group order (leader first); caller-owned
 * @enabled: receives time_enabled; may be NULL
 * @running: receives time_running; may be NULL
 *
 * Pure. Nothing is written unless the whole buffer checks out.
 * Return: 0, or -EBADMSG when @n_words is shorter than the header, nr differs from @n_events, or
 * @n_words is not exactly 3 + nr (a short read, or a read_format with more fields such as
 * PERF_FORMAT_ID, whose values would otherwise be misread).
 */
static inline int
pmc_reader_parse_group(const uint64_t *buf, size_t n_words, size_t n_events, uint64_t *values,
                       uint64_t *enabled, uint64_t *running)
{
	if (n_words < 3 || buf[0] != n_events || n_words - 3 != n_events)
		return -EBADMSG;

	for (size_t i = 0; i < n_events; i++)
		values[i] = buf[3 + i];
	if (enabled)
		*enabled = buf[1];
	if (running)
		*running = buf[2];
	return 0;
}
