/* floor-f3.h: the floor of issue 33 ("F3"), exactly what it names and nothing more: per event
 * two inline reads of its user page, each a seqlock loop with compiler barriers only (lock,
 * index, offset, the counter read with the pmc_width sign extension, lock again); the first
 * event's reads also take the page's clock (isb; mrs cntvct_el0 on arm64, rdtsc on x86-64) with
 * time_zero, time_mult, time_shift and cap_user_time_short's time_cycles and time_mask, and
 * read time_enabled and time_running (as they are: not brought up to the clock with
 * time_offset, which the issue does not name); the deltas added into an accumulator. No call, no
 * thread-local look-up, no recording. Written apart from the library's reader (client/lib/reader.h)
 * and from floor-min.h (which orders its loads with acquire fences). The counter is read by a
 * computed branch into one mrs per counter (arm64), the cheapest general dispatch: so that the
 * floor is no higher than it must be. Usable where floor_min_usable() holds. */
#pragma once

#include <linux/perf_event.h>
#include <stdint.h>

#define F3_BARRIER() __asm__ __volatile__("" ::: "memory")

#if defined(__x86_64__)
static inline __attribute__((always_inline)) uint64_t
f3_counter(uint32_t idx)
{
	uint32_t lo, hi;
	__asm__ __volatile__("rdpmc" : "=a"(lo), "=d"(hi) : "c"(idx - 1));
	return (uint64_t)hi << 32 | lo;
}

static inline __attribute__((always_inline)) uint64_t
f3_clock(void)
{
	uint32_t lo, hi;
	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return (uint64_t)hi << 32 | lo;
}
#elif defined(__aarch64__)
/* Index 1..31: pmevcntr<index - 1>_el0, 32: pmccntr_el0; eight bytes per entry (mrs; b). */
#define F3_MRS(reg) "mrs %0, " reg "\n\tb 2f\n\t"
// clang-format off
#define F3_MRS_ALL                                                                                 \
	F3_MRS("pmevcntr0_el0") F3_MRS("pmevcntr1_el0") F3_MRS("pmevcntr2_el0") F3_MRS("pmevcntr3_el0") \
	F3_MRS("pmevcntr4_el0") F3_MRS("pmevcntr5_el0") F3_MRS("pmevcntr6_el0") F3_MRS("pmevcntr7_el0") \
	F3_MRS("pmevcntr8_el0") F3_MRS("pmevcntr9_el0") F3_MRS("pmevcntr10_el0") F3_MRS("pmevcntr11_el0") \
	F3_MRS("pmevcntr12_el0") F3_MRS("pmevcntr13_el0") F3_MRS("pmevcntr14_el0") F3_MRS("pmevcntr15_el0") \
	F3_MRS("pmevcntr16_el0") F3_MRS("pmevcntr17_el0") F3_MRS("pmevcntr18_el0") F3_MRS("pmevcntr19_el0") \
	F3_MRS("pmevcntr20_el0") F3_MRS("pmevcntr21_el0") F3_MRS("pmevcntr22_el0") F3_MRS("pmevcntr23_el0") \
	F3_MRS("pmevcntr24_el0") F3_MRS("pmevcntr25_el0") F3_MRS("pmevcntr26_el0") F3_MRS("pmevcntr27_el0") \
	F3_MRS("pmevcntr28_el0") F3_MRS("pmevcntr29_el0") F3_MRS("pmevcntr30_el0") \
	F3_MRS("pmccntr_el0")
// clang-format on
static inline __attribute__((always_inline)) uint64_t
f3_counter(uint32_t idx)
{
	uint64_t v, at;
	__asm__ __volatile__("adr %1, 1f\n\tadd %1, %1, %w2, uxtw #3\n\tbr %1\n1:\n\t" F3_MRS_ALL
	                     "2:"
	                     : "=r"(v), "=&r"(at)
	                     : "r"((idx - 1) & 31u));
	return v;
}
#undef F3_MRS_ALL
#undef F3_MRS

static inline __attribute__((always_inline)) uint64_t
f3_clock(void)
{
	uint64_t v;
	__asm__ __volatile__("isb; mrs %0, cntvct_el0" : "=r"(v)::"memory");
	return v;
}
#else
#error "floor-f3.h: x86-64 and arm64 only"
#endif

/* Inside the seqlock loop: the offset and the counter, sign-extended from pmc_width. */
static inline __attribute__((always_inline)) uint64_t
f3_value(const volatile struct perf_event_mmap_page *pc)
{
	uint32_t idx = pc->index;
	uint64_t count = pc->offset;
	unsigned sh = 64 - pc->pmc_width;
	return count + (uint64_t)((int64_t)(f3_counter(idx) << sh) >> sh);
}

/* One event's count: the seqlock loop over its page. */
static inline __attribute__((always_inline)) uint64_t
f3_count(const volatile struct perf_event_mmap_page *pc)
{
	uint32_t seq;
	uint64_t count;
	do {
		seq = pc->lock;
		F3_BARRIER();
		count = f3_value(pc);
		F3_BARRIER();
	} while (pc->lock != seq);
	return count;
}

/* The first event's count, with its enabled and running times and the clock (ns) in @t. */
static inline __attribute__((always_inline)) uint64_t
f3_leader(const volatile struct perf_event_mmap_page *pc, uint64_t t[3])
{
	uint32_t seq;
	uint64_t count, cyc, enabled, running, zero, last, mask;
	uint32_t mult;
	unsigned shift;
	do {
		seq = pc->lock;
		F3_BARRIER();
		count = f3_value(pc);
		enabled = pc->time_enabled;
		running = pc->time_running;
		cyc = f3_clock();
		zero = pc->time_zero;
		mult = pc->time_mult;
		shift = pc->time_shift;
		if (pc->cap_user_time_short) {
			last = pc->time_cycles;
			mask = pc->time_mask;
			cyc = last + ((cyc - last) & mask);
		}
		F3_BARRIER();
	} while (pc->lock != seq);
	uint64_t quot = cyc >> shift, rem = cyc & (((uint64_t)1 << shift) - 1);
	uint64_t ns = quot * mult + ((rem * mult) >> shift);
	t[0] = zero + ns;
	t[1] = enabled;
	t[2] = running;
	return count;
}
