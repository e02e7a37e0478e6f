/* batch: hand decoder of Request { sample_batch } datagrams; see batch.h. */
#include "model/batch.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* Field numbers of SampleBatch (proto/pmc.proto) and the wire types used here. */
enum {
	F_TID = 1,
	F_REGION = 2,
	F_WALL_NS = 3,
	F_VALUES = 4,
	F_SCALED = 5,
	F_DEF_ID = 6,
	F_DEF_NAME = 7,
	F_DROPPED = 8,
	F_SCALE_RATIO = 9,
	F_SENT_BEFORE = 10,
	F_DROPPED_DEPTH = 11,
	F_DROPPED_NESTING = 12,
	F_DROPPED_FULL = 13,
	F_DROPPED_READ = 14,
	F_DROPPED_EXITED = 15,
	F_DROPPED_NAMES = 16, /* from here on, two-byte tags */
	F_DROPPED_LONG_NAMES = 17,
	F_PENDING = 18,
	F_DROPPED_FD_LIMIT = 19,
	F_DROPPED_UNREGISTERED = 20,
	F_DROPPED_NO_DAEMON = 21,
	F_END = 22,
	F_LAST = F_END,
	F_FIRST_PATH = 60, /* past the others: seen apart */
	F_WALL_FIXED = 61,
	F_VALUES_FIXED = 62,
};
_Static_assert(F_LAST < 32, "decode_batch() marks the fields seen in one unsigned");
#define WT_VARINT 0u
#define WT_LEN 2u
/* Request.sample_batch: field 3, length-delimited. */
#define REQUEST_SAMPLE_BATCH_TAG ((3u << 3) | WT_LEN)

/* The decoded arrays: the daemon handles one datagram at a time. */
static struct {
	uint32_t region[BATCH_MAX_SAMPLES];
	uint64_t wall_ns[BATCH_MAX_SAMPLES];
	uint32_t scaled[BATCH_MAX_SAMPLES];
	uint32_t first_path[BATCH_MAX_SAMPLES];
	uint64_t values[BATCH_MAX_VALUES];
	float scale_ratio[BATCH_MAX_VALUES];
} store;

/*
 * A varint of at most @max_bytes (<= 9) bytes at *@p, before @end, into @v; advances *@p.
 * Returns 0, or -1 when it is longer or cut short. Up to 9 bytes every bit lands where
 * protobuf-c's parse_uint32()/parse_uint64() puts it (they differ only from 10 bytes on, and
 * parse_uint32() keeps 32 bits of the first 5 bytes: the same value whenever it fits).
 */
static inline int
get_varint(const uint8_t **p, const uint8_t *end, unsigned max_bytes, uint64_t *v)
{
	const uint8_t *q = *p;
	uint64_t x = 0;

	for (unsigned i = 0; i < max_bytes && q < end; i++) {
		uint8_t c = *q++;

		x |= (uint64_t)(c & 0x7f) << (7 * i);
		if (!(c & 0x80)) {
			*v = x;
			*p = q;
			return 0;
		}
	}
	return -1;
}

/* Packed uint64 varints in [@p, @end) into @out (room for @cap); their number in *@n. Bytes
 * up to @limit (>= @end) may be read. */
static int
unpack_u64(const uint8_t *p, const uint8_t *end, const uint8_t *limit, uint64_t *out, size_t cap,
           size_t *n)
{
	size_t k = 0, len;

	while (p < end) {
		if (k == cap)
			return -1;
		if (*p < 0x80) {
			out[k++] = *p++;
			continue;
		}
		if (limit - p >= 8 && (len = batch_varint8(p, &out[k])) != 0) {
			if (len > (size_t)(end - p))
				return -1;
			p += len;
			k++;
			continue;
		}
		if (get_varint(&p, end, 9, &out[k++]) < 0)
			return -1;
	}
	*n = k;
	return 0;
}

/* Whether the @n fixed64 values at @p are all at most STATS_TALLY_MAX_VALUE's 2^49 - 1 (what
 * a column in place may hold). Eight chains (four vectors of two): one would take a cycle per
 * value. */
static bool
fixed_narrow(const uint8_t *p, size_t n)
{
	uint64_t x[8] = {0, 0, 0, 0, 0, 0, 0, 0}, v;
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (size_t j = 0; j < 8; j++) {
			memcpy(&v, p + 8 * (i + j), sizeof(v));
			x[j] |= v;
		}
	for (size_t j = 1; j < 8; j++)
		x[0] |= x[j];
	for (; i < n; i++) {
		memcpy(&v, p + 8 * i, sizeof(v));
		x[0] |= v;
	}
	return (x[0] >> (7 * BATCH_INPLACE_BYTES)) == 0;
}

/* A fixed-form column (wall_ns_fixed, values_fixed) of @len bytes at @p, as the column
 * wall_ns or values: its number in *@n (at most @cap), its place in *@at and *@at_end. */
static int
fixed_col(const uint8_t *p, uint64_t len, size_t cap, size_t *n, const uint8_t **at,
          const uint8_t **at_end, struct batch_cols *cols)
{
	if (len % 8u || len / 8u > cap)
		return -1;
	*n = (size_t)(len / 8u);
	*at = *n ? p : NULL;
	*at_end = *n ? p + len : NULL;
	cols->fixed = true;
	cols->in_place &= fixed_narrow(p, *n);
	return 0;
}

/* The top bits of the 64 bytes at @p, byte i's to bit i. */
static inline uint64_t
top_bits64(const uint8_t *p)
{
	uint64_t m = 0;
#ifdef __SSE2__
	for (unsigned w = 0; w < 4; w++) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * w));
		m |= (uint64_t)(uint16_t)_mm_movemask_epi8(x) << (16 * w);
	}
#else
	for (unsigned w = 0; w < 8; w++) {
		uint64_t x;
		memcpy(&x, p + 8 * w, sizeof(x));
		/* Byte i's top bit to bit 56 + i, then down. */
		m |= ((((x & UINT64_C(0x8080808080808080)) >> 7) * UINT64_C(0x0102040810204080)) >>
		      56)
		     << (8 * w);
	}
#endif
	return m;
}

/* The bits set in @x, without the library call __builtin_popcountll() is on machines
 * without an instruction for it (x86-64's baseline). */
static inline unsigned
bits64(uint64_t x)
{
	x -= (x >> 1) & UINT64_C(0x5555555555555555);
	x = (x & UINT64_C(0x3333333333333333)) + ((x >> 2) & UINT64_C(0x3333333333333333));
	x = (x + (x >> 4)) & UINT64_C(0x0f0f0f0f0f0f0f0f);
	return (unsigned)((x * UINT64_C(0x0101010101010101)) >> 56);
}

/*
 * Packed uint64 varints in [@p, @end), checked and counted without decoding them: 64 bytes at
 * a time, their top bits gathered in a mask (a bit per byte), the ends of varints (bytes below
 * 0x80) counted, and the runs of continuation bytes measured (a varint of k bytes has k - 1
 * of them before its end). Takes what unpack_u64() takes (varints of at most 9 bytes, at most
 * @cap of them, the last one whole): their number in *@n, and in *@wide whether one is longer
 * than BATCH_INPLACE_BYTES. Returns 0 or -1.
 */
static int
scan_u64(const uint8_t *p, const uint8_t *end, size_t cap, size_t *n, bool *wide)
{
	__extension__ typedef unsigned __int128 u128;
	_Static_assert(BATCH_INPLACE_BYTES == 7, "the runs looked for are of 7 and 9 bytes");
	size_t k = 0, len = (size_t)(end - p);
	uint64_t prev = 0, runs7 = 0, runs9 = 0;

	if (len && (end[-1] & 0x80))
		return -1;
	for (size_t at = 0; at < len; at += 64) {
		size_t r = len - at;
		uint64_t m;

		if (r >= 64) {
			m = top_bits64(p + at);
			k += bits64(~m);
		} else {
			uint8_t last[64] = {0}; /* past the end: ends, no continuation */
			memcpy(last, p + at, r);
			m = top_bits64(last);
			k += r - bits64(m);
		}
		/*
		 * The 64 bytes before these and these in one window, bit i of a run mask set where
		 * the bytes from i on continue for that many: a run that spans two blocks is whole
		 * in one window (it ends in the block where an end comes: the last byte is one).
		 */
		u128 wm = (u128)m << 64 | prev;
		u128 r2 = wm & (wm >> 1), r4 = r2 & (r2 >> 2), r8 = r4 & (r4 >> 4);
		u128 r7 = r4 & (r4 >> 3), r9 = r8 & (wm >> 8);
		runs7 |= (uint64_t)(r7 >> 64) | (uint64_t)r7;
		runs9 |= (uint64_t)(r9 >> 64) | (uint64_t)r9;
		prev = m;
	}
	/* 9 continuation bytes make a varint of 10 or more; 7, one of 8 or more. */
	if (runs9 || k > cap)
		return -1;
	*n = k;
	*wide = runs7 != 0;
	return 0;
}

/* Packed uint32 varints, each at most UINT32_MAX. */
static int
unpack_u32(const uint8_t *p, const uint8_t *end, uint32_t *out, size_t cap, size_t *n)
{
	size_t k = 0;
	uint64_t v;

	while (p < end) {
		if (k == cap)
			return -1;
#ifdef __SSE2__
		/* Sixteen one-byte varints at once (region ids are small): widened to 32 bits. */
		if (end - p >= 16 && cap - k >= 16) {
			__m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
			if (!_mm_movemask_epi8(x)) {
				const __m128i z = _mm_setzero_si128();
				__m128i lo = _mm_unpacklo_epi8(x, z), hi = _mm_unpackhi_epi8(x, z);
				__m128i *o = (__m128i *)(void *)(out + k);
				_mm_storeu_si128(o, _mm_unpacklo_epi16(lo, z));
				_mm_storeu_si128(o + 1, _mm_unpackhi_epi16(lo, z));
				_mm_storeu_si128(o + 2, _mm_unpacklo_epi16(hi, z));
				_mm_storeu_si128(o + 3, _mm_unpackhi_epi16(hi, z));
				k += 16;
				p += 16;
				continue;
			}
		}
#endif
		/* Eight one-byte varints at once. */
		if (end - p >= 8 && cap - k >= 8) {
			uint64_t x;
			memcpy(&x, p, sizeof(x));
			if (!(x & UINT64_C(0x8080808080808080))) {
				for (unsigned i = 0; i < 8; i++)
					out[k + i] = (uint8_t)(x >> (8 * i));
				k += 8;
				p += 8;
				continue;
			}
		}
		if (*p < 0x80) {
			out[k++] = *p++;
			continue;
		}
		if (get_varint(&p, end, 9, &v) < 0 || v > UINT32_MAX)
			return -1;
		out[k++] = (uint32_t)v;
	}
	*n = k;
	return 0;
}

/* The uint64 field @field of @b, or NULL for a field of another type. */
static uint64_t *
u64_field(Pmc__SampleBatch *b, unsigned field)
{
	switch (field) {
	case F_DROPPED:
		return &b->dropped;
	case F_SENT_BEFORE:
		return &b->sent_before;
	case F_DROPPED_DEPTH:
		return &b->dropped_depth;
	case F_DROPPED_NESTING:
		return &b->dropped_nesting;
	case F_DROPPED_FULL:
		return &b->dropped_full;
	case F_DROPPED_READ:
		return &b->dropped_read;
	case F_DROPPED_EXITED:
		return &b->dropped_exited;
	case F_DROPPED_NAMES:
		return &b->dropped_names;
	case F_DROPPED_LONG_NAMES:
		return &b->dropped_long_names;
	case F_PENDING:
		return &b->pending;
	case F_DROPPED_FD_LIMIT:
		return &b->dropped_fd_limit;
	case F_DROPPED_UNREGISTERED:
		return &b->dropped_unregistered;
	case F_DROPPED_NO_DAEMON:
		return &b->dropped_no_daemon;
	case F_END:
		return &b->end;
	default:
		return NULL;
	}
}

/* The body of a SampleBatch in [@p, @end): wall_ns and values checked and counted, their
 * places in @cols (in place unless one is wide). */
static int
decode_batch(const uint8_t *p, const uint8_t *end, Pmc__SampleBatch *b, struct batch_cols *cols,
             bool shared)
{
	unsigned seen = 0;
	bool seen_first = false, seen_wfix = false, seen_vfix = false;
	uint64_t v, *u64;
	bool wide;

	while (p < end) {
		unsigned tag = *p++, field, wt;
		const uint8_t *q;

		if (tag & 0x80) {
			/* Two bytes, as fields 16 and up take: their shortest form only (a second
			 * byte of 0 would be a longer form of a field under 16). */
			if (p == end || *p == 0 || (*p & 0x80))
				return -1;
			tag = (tag & 0x7fu) | (unsigned)*p++ << 7;
		}
		field = tag >> 3;
		wt = tag & 7u;
		if (field == F_WALL_FIXED || field == F_VALUES_FIXED) {
			bool w = field == F_WALL_FIXED;
			if ((w ? seen_wfix : seen_vfix) || wt != WT_LEN ||
			    get_varint(&p, end, 5, &v) < 0 || v > (uint64_t)(end - p) ||
			    fixed_col(p, v, w ? BATCH_MAX_SAMPLES : BATCH_MAX_VALUES,
			              w ? &b->n_wall_ns : &b->n_values,
			              w ? &cols->wall : &cols->values,
			              w ? &cols->wall_end : &cols->values_end, cols) < 0)
				return -1;
			*(w ? &seen_wfix : &seen_vfix) = true;
			p += v;
			continue;
		}
		if (field == F_FIRST_PATH) {
			if (seen_first || wt != WT_LEN || get_varint(&p, end, 5, &v) < 0 ||
			    v > (uint64_t)(end - p) ||
			    unpack_u32(p, p + v, store.first_path, BATCH_MAX_SAMPLES,
			               &b->n_first_path) < 0)
				return -1;
			seen_first = true;
			b->first_path = b->n_first_path ? store.first_path : NULL;
			p += v;
			continue;
		}
		if (field < F_TID || field > F_LAST || (seen & (1u << field)))
			return -1;
		seen |= 1u << field;
		if (field == F_TID) {
			if (wt != WT_VARINT || get_varint(&p, end, 9, &v) < 0 || v > UINT32_MAX)
				return -1;
			b->tid = (int32_t)(uint32_t)v;
			continue;
		}
		if ((u64 = u64_field(b, field))) {
			if (wt != WT_VARINT || get_varint(&p, end, 9, u64) < 0)
				return -1;
			continue;
		}
		if (wt != WT_LEN || get_varint(&p, end, 5, &v) < 0 || v > (uint64_t)(end - p))
			return -1;
		q = p + v;
		switch (field) {
		case F_REGION:
			if (unpack_u32(p, q, store.region, BATCH_MAX_SAMPLES, &b->n_region) < 0)
				return -1;
			b->region = b->n_region ? store.region : NULL;
			break;
		case F_WALL_NS:
			if (shared || scan_u64(p, q, BATCH_MAX_SAMPLES, &b->n_wall_ns, &wide) < 0)
				return -1;
			cols->in_place &= !wide;
			cols->wall = b->n_wall_ns ? p : NULL;
			cols->wall_end = b->n_wall_ns ? q : NULL;
			break;
		case F_VALUES:
			if (shared || scan_u64(p, q, BATCH_MAX_VALUES, &b->n_values, &wide) < 0)
				return -1;
			cols->in_place &= !wide;
			cols->values = b->n_values ? p : NULL;
			cols->values_end = b->n_values ? q : NULL;
			break;
		case F_SCALED:
			if (unpack_u32(p, q, store.scaled, BATCH_MAX_SAMPLES, &b->n_scaled) < 0)
				return -1;
			b->scaled = b->n_scaled ? store.scaled : NULL;
			break;
		case F_SCALE_RATIO:
			if (v % sizeof(float) || v / sizeof(float) > BATCH_MAX_VALUES)
				return -1;
			b->n_scale_ratio = (size_t)v / sizeof(float);
			memcpy(store.scale_ratio, p, (size_t)v);
			b->scale_ratio = b->n_scale_ratio ? store.scale_ratio : NULL;
			break;
		default: /* F_DEF_ID, F_DEF_NAME: rare, protobuf-c's */
			return -1;
		}
		p = q;
	}
	/* One form or the other (protobuf-c takes both: the batch is then refused). */
	if ((seen_wfix || seen_vfix) && (seen & (1u << F_WALL_NS | 1u << F_VALUES)))
		return -1;
	return 0;
}

/* A column in place, decoded into @out. */
static void
decode_col(const uint8_t *p, const uint8_t *end, const uint8_t *limit, uint64_t *out)
{
	while (p < end)
		*out++ = batch_varint_at(&p, limit);
}

/* The columns at @cols, decoded (varints) or copied (fixed form) into the store. */
static void
cols_to_store(const struct batch_cols *cols)
{
	if (cols->fixed) {
		if (cols->wall)
			memcpy(store.wall_ns, cols->wall, (size_t)(cols->wall_end - cols->wall));
		if (cols->values)
			memcpy(store.values, cols->values,
			       (size_t)(cols->values_end - cols->values));
		return;
	}
	decode_col(cols->wall, cols->wall_end, cols->limit, store.wall_ns);
	decode_col(cols->values, cols->values_end, cols->limit, store.values);
}

void
batch_cols_decode(const struct batch_cols *cols, Pmc__SampleBatch *out)
{
	if (!cols->in_place)
		return;
	cols_to_store(cols);
	out->wall_ns = out->n_wall_ns ? store.wall_ns : NULL;
	out->values = out->n_values ? store.values : NULL;
}

static int
scan(const uint8_t *buf, size_t len, Pmc__SampleBatch *out, struct batch_cols *cols, bool shared)
{
	const uint8_t *p = buf, *end = buf + len;
	uint64_t n;

	/* The arrays are copied and read as they lie: little-endian only, like protobuf-c's. */
	if (__BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__)
		return -EAGAIN;
	if (len < 2 || *p++ != REQUEST_SAMPLE_BATCH_TAG || get_varint(&p, end, 5, &n) < 0 ||
	    n != (uint64_t)(end - p))
		return -EAGAIN;
	pmc__sample_batch__init(out);
	*cols = (struct batch_cols){.in_place = true, .limit = end};
	if (decode_batch(p, end, out, cols, shared) < 0)
		return -EAGAIN;
	if (cols->in_place)
		return 0;
	/* A wide column: both decoded (checked by the scan: unpack_u64() takes them), or copied
	 * (fixed form). */
	if (cols->fixed) {
		cols_to_store(cols);
	} else if ((cols->wall && unpack_u64(cols->wall, cols->wall_end, end, store.wall_ns,
	                                     BATCH_MAX_SAMPLES, &out->n_wall_ns) < 0) ||
	           (cols->values && unpack_u64(cols->values, cols->values_end, end, store.values,
	                                       BATCH_MAX_VALUES, &out->n_values) < 0)) {
		return -EAGAIN;
	}
	out->wall_ns = out->n_wall_ns ? store.wall_ns : NULL;
	out->values = out->n_values ? store.values : NULL;
	*cols = (struct batch_cols){.in_place = false};
	return 0;
}

int
batch_scan(const uint8_t *buf, size_t len, Pmc__SampleBatch *out, struct batch_cols *cols)
{
	return scan(buf, len, out, cols, false);
}

int
batch_scan_shared(const uint8_t *buf, size_t len, Pmc__SampleBatch *out, struct batch_cols *cols)
{
	return scan(buf, len, out, cols, true);
}

int
batch_decode(const uint8_t *buf, size_t len, Pmc__SampleBatch *out)
{
	struct batch_cols cols;
	int r = batch_scan(buf, len, out, &cols);

	/* Through the reader ingest uses in place: what it reads, protobuf-c must read too. */
	if (r == 0)
		batch_cols_decode(&cols, out);
	return r;
}
