/* floor-min.h: the least a region must do to count a group of events through their user
 * pages, written apart from the library's reader (client/lib/reader.h) so that the floor row 7
 * measures the library against is not the library's own code: per event, one seqlock pass
 * (lock, index, offset, the counter read, pmc_width sign extension, lock again); on the
 * leader's page also the clock (time_zero, time_mult, time_shift; time_cycles and time_mask
 * where cap_user_time_short) and time_enabled / time_running brought up to the clock, as a
 * region needs them to scale a multiplexed group. Only where every page has cap_user_rdpmc and
 * an index, and the leader's cap_user_time_zero (floor_min_usable()); no retry budget, no
 * error path: a pass that finds index 0 gives the offset alone. x86-64 (rdpmc, rdtsc) and
 * arm64 (mrs of the event counters and the cycle counter, cntvct_el0). */
#pragma once

#include <linux/perf_event.h>
#include <stdint.h>

#if defined(__x86_64__)
static inline uint64_t
fm_counter(uint32_t idx)
{
	uint32_t lo, hi;
	__asm__ __volatile__("rdpmc" : "=a"(lo), "=d"(hi) : "c"(idx - 1));
	return (uint64_t)hi << 32 | lo;
}

static inline uint64_t
fm_cycles(void)
{
	uint32_t lo, hi;
	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return (uint64_t)hi << 32 | lo;
}

#define FM_READ_FENCE() __asm__ __volatile__("" ::: "memory")
#elif defined(__aarch64__)
/* Index 1..31: event counter index - 1; 32: the cycle counter. mrs takes the register by
 * name, hence one case each. */
static inline uint64_t
fm_counter(uint32_t idx)
{
	uint64_t v = 0;
#define FM_EV(n)                                                                                   \
	case n + 1:                                                                                \
		__asm__ __volatile__("mrs %0, pmevcntr" #n "_el0" : "=r"(v));                      \
		break;
	switch (idx) {
		FM_EV(0)
		FM_EV(1)
		FM_EV(2)
		FM_EV(3)
		FM_EV(4)
		FM_EV(5)
		FM_EV(6)
		FM_EV(7)
		FM_EV(8)
		FM_EV(9)
		FM_EV(10)
		FM_EV(11)
		FM_EV(12)
		FM_EV(13)
		FM_EV(14)
		FM_EV(15)
		FM_EV(16)
		FM_EV(17)
		FM_EV(18)
		FM_EV(19)
		FM_EV(20)
		FM_EV(21)
		FM_EV(22)
		FM_EV(23)
		FM_EV(24)
		FM_EV(25)
		FM_EV(26)
		FM_EV(27)
		FM_EV(28)
		FM_EV(29)
		FM_EV(30)
	case 32:
		__asm__ __volatile__("mrs %0, pmccntr_el0" : "=r"(v));
		break;
	default:
		break;
	}
#undef FM_EV
	return v;
}

static inline uint64_t
fm_cycles(void)
{
	uint64_t v;
	__asm__ __volatile__("isb; mrs %0, cntvct_el0" : "=r"(v)::"memory");
	return v;
}

#define FM_READ_FENCE() __asm__ __volatile__("dmb ishld" ::: "memory")
#else
#error "floor-min.h: x86-64 and arm64 only"
#endif

/* The counter of index @idx (0: none), sign-extended from the page's pmc_width. */
static inline __attribute__((always_inline)) uint64_t
fm_value(const volatile struct perf_event_mmap_page *pc, uint32_t idx)
{
	if (!idx)
		return 0;
	unsigned sh = 64 - pc->pmc_width;
	return (uint64_t)((int64_t)(fm_counter(idx) << sh) >> sh);
}

/* One event's count: a seqlock pass over its page. */
static inline __attribute__((always_inline)) uint64_t
fm_count(const volatile struct perf_event_mmap_page *pc)
{
	uint32_t seq, idx;
	uint64_t count;
	do {
		seq = pc->lock;
		FM_READ_FENCE();
		idx = pc->index;
		count = pc->offset;
		count += fm_value(pc, idx);
		FM_READ_FENCE();
	} while (pc->lock != seq);
	return count;
}

/* The leader's count, with its enabled and running times and the clock (perf's, ns) in @t. */
static inline __attribute__((always_inline)) uint64_t
fm_leader(const volatile struct perf_event_mmap_page *pc, uint64_t t[3])
{
	uint32_t seq, idx;
	uint64_t count, cyc, enabled, running, zero, last, mask;
	uint32_t mult;
	uint16_t shift;
	do {
		seq = pc->lock;
		FM_READ_FENCE();
		idx = pc->index;
		count = pc->offset;
		enabled = pc->time_enabled;
		running = pc->time_running;
		mult = pc->time_mult;
		shift = pc->time_shift;
		zero = pc->time_zero;
		last = pc->time_cycles;
		mask = pc->time_mask;
		cyc = fm_cycles();
		count += fm_value(pc, idx);
		FM_READ_FENCE();
	} while (pc->lock != seq);
	if (pc->cap_user_time_short)
		cyc = last + ((cyc - last) & mask);
	uint64_t quot = cyc >> shift, rem = cyc & (((uint64_t)1 << shift) - 1);
	uint64_t ns = quot * mult + ((rem * mult) >> shift);
	uint64_t delta = ns + pc->time_offset;
	t[0] = zero + ns;
	t[1] = enabled + delta;
	t[2] = running + (idx ? delta : 0);
	return count;
}

/* Whether the pages allow the floor: every counter in its page, the leader's clock too. */
static inline int
floor_min_usable(const struct perf_event_mmap_page *const *pages, int n)
{
	for (int i = 0; i < n; i++)
		if (!pages[i] || !pages[i]->cap_user_rdpmc || !pages[i]->index)
			return 0;
	return pages[0]->cap_user_time && pages[0]->cap_user_time_zero;
}
