/* batch: a decoder of the one hot request, a Request holding a SampleBatch, that needs no
 * allocation. It takes only the plain form clients send (each field at most once, repeated
 * fields packed, no region definitions, no unknown fields) and leaves everything else to
 * protobuf-c, so that whatever it decodes, pmc__request__unpack() decodes the same. Its two
 * long columns (wall_ns and values) may be left where they lie, checked and counted, for
 * ingest.h to read in place (batch_scan()). A batch in fixed form (wall_ns_fixed and
 * values_fixed, in place of wall_ns and values) is given as if its columns were wall_ns and
 * values (n_wall_ns, n_values and their arrays set, the _fixed fields empty): as the daemon
 * takes protobuf-c's of it (sample_batch_cols(), session-batch.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pmc.pb-c.h"

/* Most samples, and most values (samples x events) or scale ratios, one decode holds. */
#define BATCH_MAX_SAMPLES 8192u
#define BATCH_MAX_VALUES 32768u

/**
 * batch_decode() - decode a Request datagram whose body is a SampleBatch, by hand
 * @buf: the datagram
 * @len: its length
 * @out: filled as pmc__request__unpack() fills the request's sample_batch (arrays NULL
 *       where empty); its arrays point into storage of this module, valid until the next
 *       call. Not thread-safe (the daemon is one thread).
 *
 * Takes a Request whose only field is sample_batch, in which each field appears at most once,
 * with tags in their shortest form (one byte; two for the fields from 16 on) and the wire
 * types of pmc.proto, repeated fields packed, def_id and
 * def_name absent, varints of at most 9 bytes (5 for lengths, uint32 values at most
 * UINT32_MAX), scale_ratio a multiple of 4 bytes, and at most BATCH_MAX_SAMPLES entries in
 * region, wall_ns and scaled and BATCH_MAX_VALUES in values and scale_ratio; or, in place of
 * wall_ns and values (not beside either), wall_ns_fixed and values_fixed (multiples of 8
 * bytes, within the same bounds), given as wall_ns and values.
 * Return: 0, or -EAGAIN for any other datagram (well-formed or not), and for every one on a
 * big-endian machine: decode it with protobuf-c.
 */
int batch_decode(const uint8_t *buf, size_t len, Pmc__SampleBatch *out);

/* The longest varint of a column left in place: values below 2^49, so that any batch of
 * them fits the accumulators of stats.h. */
#define BATCH_INPLACE_BYTES 7u

/**
 * struct batch_cols - a batch's wall_ns and values, packed, where they lie in the datagram
 * @in_place: whether the columns are left where they lie (else they are decoded, as
 *            batch_decode() decodes them, and the pointers below are NULL)
 * @wall: the first byte of wall_ns's packed varints, @wall_end the byte after the last
 * @values: the same for values
 * @fixed: the batch's columns are in fixed form (SampleBatch.wall_ns_fixed, values_fixed:
 *         8 bytes each, little-endian, not aligned), @wall and @values their first bytes
 * @limit: the datagram's end: bytes up to it may be read (8 at a time)
 *
 * In place, every value of the columns is below 2^49 (a varint of at most
 * BATCH_INPLACE_BYTES bytes, or a fixed-form value so small), and a varint column ends with
 * the end of one; their numbers are the batch's n_wall_ns and n_values. An empty column has
 * both its pointers NULL.
 */
struct batch_cols {
	bool in_place, fixed;
	const uint8_t *wall, *wall_end, *values, *values_end, *limit;
};

/**
 * batch_scan() - batch_decode(), the two long columns checked and counted but not copied
 * @buf: the datagram, borrowed: @cols points into it
 * @len: its length
 * @out: as batch_decode() fills it, but for wall_ns and values when @cols->in_place: their
 *       counts are in n_wall_ns and n_values, their arrays NULL
 * @cols: out: where wall_ns and values lie (struct batch_cols), in place unless a varint of
 *        theirs is longer than BATCH_INPLACE_BYTES (then @out has them decoded)
 *
 * Takes exactly the datagrams batch_decode() takes. Not thread-safe (as batch_decode()).
 * Return: 0, or -EAGAIN as batch_decode().
 */
int batch_scan(const uint8_t *buf, size_t len, Pmc__SampleBatch *out, struct batch_cols *cols);

/**
 * batch_scan_shared() - batch_scan() of bytes another process may write meanwhile (a
 * SampleRing's frame)
 *
 * As batch_scan(), but for a batch whose columns are varints (wall_ns, values), which it
 * leaves to the caller to copy first (-EAGAIN): each byte it reads is read once in one pass
 * forward, every bound checked on what was read, the scalars, regions, scaled bits, ratios and
 * first_path copied out, and only columns in fixed form are left where they lie, of a length
 * it read once. Their values are read again when counted: a writer that changes one then only
 * changes what its own samples say (ingest, counting in place, takes a value modulo 2^49, so
 * that sums hold; batch_cols_decode() copies it as it is then, its count saturating; every
 * index stays in its bounds). Return: 0, or -EAGAIN (copy the bytes, then
 * batch_scan() or protobuf-c).
 */
int batch_scan_shared(const uint8_t *buf, size_t len, Pmc__SampleBatch *out,
                      struct batch_cols *cols);

/**
 * batch_cols_decode() - decode columns batch_scan() left in place into @out's wall_ns and
 * values (the storage of batch_decode(), valid until its next call; nothing when
 * @cols->in_place is false)
 */
void batch_cols_decode(const struct batch_cols *cols, Pmc__SampleBatch *out);

/**
 * batch_varint8() - a varint of 2 to 8 bytes at @p without a branch on its length
 * @p: the varint; the 8 bytes from @p must be readable
 * @v: out: its value
 * Return: its length, 0 when it is longer than 8 bytes (then *@v is not set).
 */
static inline size_t
batch_varint8(const uint8_t *p, uint64_t *v)
{
	uint64_t x, stop;
	unsigned bits;

	memcpy(&x, p, sizeof(x)); /* little-endian: byte i in bits 8i..8i+7 */
	stop = ~x & UINT64_C(0x8080808080808080);
	if (!stop)
		return 0;
	bits = (unsigned)__builtin_ctzll(stop) + 1u; /* 8 x the length */
	x &= UINT64_C(0x7f7f7f7f7f7f7f7f) >> (64u - bits);
	/* Close the gaps of the 7-bit groups: pairs, then quads, then all eight. */
	x = (x & UINT64_C(0x007f007f007f007f)) | ((x & UINT64_C(0x7f007f007f007f00)) >> 1);
	x = (x & UINT64_C(0x00003fff00003fff)) | ((x & UINT64_C(0x3fff00003fff0000)) >> 2);
	x = (x & UINT64_C(0x000000000fffffff)) | ((x & UINT64_C(0x0fffffff00000000)) >> 4);
	*v = x;
	return bits / 8u;
}

/**
 * batch_varint_at() - the varint at *@p of a column batch_scan() left in place
 * @p: in: the varint (of at most BATCH_INPLACE_BYTES bytes); out: the byte after it
 * @limit: the datagram's end (struct batch_cols)
 * Return: its value.
 */
static inline uint64_t
batch_varint_at(const uint8_t **p, const uint8_t *limit)
{
	const uint8_t *q = *p;
	uint64_t x = 0;

	if (*q < 0x80) {
		*p = q + 1;
		return *q;
	}
	if (limit - q >= 8) {
		*p = q + batch_varint8(q, &x);
		return x;
	}
	for (unsigned s = 0;; s += 7) {
		uint8_t c = *q++;
		x |= (uint64_t)(c & 0x7f) << s;
		if (!(c & 0x80))
			break;
	}
	*p = q;
	return x;
}
