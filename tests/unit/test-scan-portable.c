/* batch.c's scan of packed varints as a machine without SSE2 runs it (arm64: the mask of the
 * bytes' top bits made by multiplies, top_bits64()'s portable half), which the x86-64 build of
 * test-batch never takes: compiled here with __SSE2__ undefined (tests/CMakeLists.txt), the
 * mask and scan_u64() are compared with a byte by byte reading of the same bytes, for random
 * blocks and columns whose share of continuation bytes goes from none to nearly all. */
#include "../../daemon/model/batch.c"

#include <stdio.h>
#include <stdlib.h>

#include "pmc-test.h"

#ifdef __SSE2__
#error "built with SSE2: this test is of the other way (tests/CMakeLists.txt undefines it)"
#endif

static uint64_t
rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* What scan_u64() must give: the varints' count, whether one is longer than
 * BATCH_INPLACE_BYTES, -1 where one is longer than 9 bytes, the last is cut or they are more
 * than @cap. */
static int
scan_ref(const uint8_t *p, size_t len, size_t cap, size_t *n, bool *wide)
{
	size_t k = 0, run = 0;
	bool w = false;
	for (size_t i = 0; i < len; i++) {
		run++;
		if (p[i] & 0x80)
			continue;
		if (run > 9)
			return -1;
		w |= run > BATCH_INPLACE_BYTES;
		k++;
		run = 0;
	}
	if (run || k > cap)
		return -1;
	*n = k;
	*wide = w;
	return 0;
}

int
main(void)
{
	uint64_t seed = 0x9e3779b97f4a7c15u;
	static uint8_t buf[300 + 64];
	unsigned scans = 0, refused = 0, wides = 0;
	/* Per mille of continuation bytes. */
	static const unsigned shares[] = {0, 100, 500, 800, 900, 950, 990, 1000};

	for (unsigned round = 0; round < 400000; round++) {
		unsigned share = shares[round % (sizeof(shares) / sizeof(shares[0]))];
		size_t len = (size_t)(rng(&seed) % 300);
		for (size_t i = 0; i < sizeof(buf); i++) {
			uint8_t b = (uint8_t)(rng(&seed) & 0x7f);
			buf[i] = (rng(&seed) % 1000 < share) ? (uint8_t)(b | 0x80) : b;
		}
		/* The mask of one block, against its bytes. */
		uint64_t m = top_bits64(buf + round % 64), want = 0;
		for (unsigned i = 0; i < 64; i++)
			want |= (uint64_t)(buf[round % 64 + i] >> 7) << i;
		CHECK_EQ(m, want);
		/* The column: ending on an end byte most of the time, as a batch's does. */
		if (len && round % 4)
			buf[len - 1] &= 0x7f;
		size_t cap = round % 16 ? SIZE_MAX : (size_t)(rng(&seed) % 100);
		size_t n = 0, rn = 0;
		bool wide = false, rwide = false;
		int r = scan_u64(buf, buf + len, cap, &n, &wide);
		int rr = scan_ref(buf, len, cap, &rn, &rwide);
		CHECK_EQ(r, rr);
		if (r == 0) {
			CHECK_EQ(n, rn);
			CHECK_EQ(wide, rwide);
			wides += wide;
		} else {
			refused++;
		}
		scans++;
	}
	/* Each kind of result was met. */
	CHECK(refused > 1000 && wides > 1000 && scans - refused - wides > 1000);
	printf("ok - %u scans without SSE2 (%u refused, %u with a varint past %d bytes) as read "
	       "byte "
	       "by byte\n",
	       scans, refused, wides, BATCH_INPLACE_BYTES);
	return 0;
}
