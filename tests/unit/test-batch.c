/* Unit tests for daemon/model/batch.c, the hand decoder of SampleBatch requests, against protobuf-c
 * field by field: on the fuzzer's seed corpus, random batches, random mutations of both and
 * hand-made encodings. Whenever batch_decode() takes a datagram, pmc__request__unpack() must
 * decode it to the same SampleBatch; the plain batches clients send must be taken. Then how the
 * daemon's session code counts what batches say was lost (by reason, and what a process that
 * ended still held), with a real connection from a child process, and how a batch whose names
 * go on in later slices is finished at SIGTERM's final drain. Prints "ok N - name" per
 * test; exits 1 at the first failed check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernel/perf.h"
#include "kernel/policy.h"
#include "model/batch.h"
#include "model/registry.h"
#include "pmc-test.h"
#include "session/server.h"
#include "session/session-internal.h"
#include "wire/wire.h"

#ifndef PMC_FUZZ_CORPUS
#define PMC_FUZZ_CORPUS "tests/fuzz/corpus"
#endif

static unsigned long n_fast, n_slow;

#define RUN(fn) PMC_TEST_RUN(fn)

#define rng_next pmc_test_rng

/* The @n elements of size @size at @a and @b are equal, and both arrays are NULL when empty. */
static void
check_array(size_t n_a, const void *a, size_t n_b, const void *b, size_t size)
{
	CHECK(n_a == n_b);
	CHECK((a == NULL) == (n_a == 0));
	CHECK((b == NULL) == (n_b == 0));
	if (n_a)
		CHECK(memcmp(a, b, n_a * size) == 0);
}

/*
 * Decodes @buf both ways. @expect: 1, batch_decode() must take it; 0, it must leave it to
 * protobuf-c; -1, either. When it takes it, protobuf-c must decode the same batch.
 * Return: 1 when batch_decode() took it.
 */
static int
check_decode(const uint8_t *buf, size_t len, int expect)
{
	Pmc__SampleBatch fast;
	Pmc__Request *req;
	const Pmc__SampleBatch *b;
	int r = batch_decode(buf, len, &fast);

	CHECK(r == 0 || r == -EAGAIN);
	if (expect >= 0)
		CHECK((r == 0) == (expect == 1));
	if (r < 0) {
		n_slow++;
		return 0;
	}
	n_fast++;
	req = pmc__request__unpack(NULL, len, buf);
	CHECK(req != NULL);
	CHECK(req->body_case == PMC__REQUEST__BODY_SAMPLE_BATCH);
	CHECK(req->base.n_unknown_fields == 0);
	b = req->sample_batch;
	CHECK(b != NULL);
	CHECK(fast.base.descriptor == b->base.descriptor);
	CHECK(fast.base.n_unknown_fields == 0 && b->base.n_unknown_fields == 0);
	CHECK(fast.tid == b->tid);
	CHECK(fast.dropped == b->dropped);
	CHECK(fast.sent_before == b->sent_before);
	CHECK(fast.dropped_depth == b->dropped_depth);
	CHECK(fast.dropped_nesting == b->dropped_nesting);
	CHECK(fast.dropped_full == b->dropped_full);
	CHECK(fast.dropped_read == b->dropped_read);
	CHECK(fast.dropped_exited == b->dropped_exited);
	CHECK(fast.dropped_names == b->dropped_names);
	CHECK(fast.dropped_long_names == b->dropped_long_names);
	CHECK(fast.pending == b->pending);
	CHECK(fast.dropped_fd_limit == b->dropped_fd_limit);
	CHECK(fast.dropped_unregistered == b->dropped_unregistered);
	CHECK(fast.dropped_no_daemon == b->dropped_no_daemon);
	check_array(fast.n_region, fast.region, b->n_region, b->region, sizeof(*b->region));
	/* The fixed form is given as wall_ns and values; protobuf-c's has one form only. */
	bool fixed = b->n_wall_ns_fixed || b->n_values_fixed;
	CHECK(!fixed || (!b->n_wall_ns && !b->n_values));
	CHECK(!fast.n_wall_ns_fixed && !fast.n_values_fixed);
	check_array(fast.n_wall_ns, fast.wall_ns, fixed ? b->n_wall_ns_fixed : b->n_wall_ns,
	            fixed ? b->wall_ns_fixed : b->wall_ns, sizeof(*b->wall_ns));
	check_array(fast.n_values, fast.values, fixed ? b->n_values_fixed : b->n_values,
	            fixed ? b->values_fixed : b->values, sizeof(*b->values));
	check_array(fast.n_scaled, fast.scaled, b->n_scaled, b->scaled, sizeof(*b->scaled));
	check_array(fast.n_scale_ratio, fast.scale_ratio, b->n_scale_ratio, b->scale_ratio,
	            sizeof(*b->scale_ratio));
	CHECK(fast.n_def_id == 0 && fast.def_id == NULL && b->n_def_id == 0);
	CHECK(fast.n_def_name == 0 && fast.def_name == NULL && b->n_def_name == 0);
	pmc__request__free_unpacked(req, NULL);
	return 1;
}

/* Random mutations of @buf: flipped bits, changed, inserted and removed bytes, truncation. */
static void
check_mutations(const uint8_t *buf, size_t len, unsigned rounds, uint64_t *seed)
{
	uint8_t *m = malloc(len + 16);

	CHECK(m);
	for (unsigned k = 0; k < rounds; k++) {
		size_t n = pmc_test_mutate(m, buf, len, seed);

		check_decode(m, n, -1);
	}
	free(m);
}

static uint8_t *
pack_request(const Pmc__Request *req, size_t *len)
{
	uint8_t *buf;

	*len = pmc__request__get_packed_size(req);
	buf = malloc(*len ? *len : 1);
	CHECK(buf);
	CHECK(pmc__request__pack(req, buf) == *len);
	return buf;
}

static uint8_t *
pack_batch(Pmc__SampleBatch *b, size_t *len)
{
	Pmc__Request req = PMC__REQUEST__INIT;

	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = b;
	return pack_request(&req, len);
}

/* A value whose varint takes 1..9 bytes, mostly small; 10 bytes too with @big. */
static uint64_t
random_value(uint64_t *seed, int big)
{
	uint64_t r = rng_next(seed);

	switch (r % 8) {
	case 0:
		return 0;
	case 1:
	case 2:
		return r >> 57;
	case 3:
	case 4:
		return 1000 + (r >> 8) % 50000;
	case 5:
		return rng_next(seed) >> (1 + (r >> 58) % 63);
	case 6:
		return rng_next(seed) >> 11;
	default:
		return big && (r >> 3) % 4 == 0 ? UINT64_MAX - (r >> 60) : (r >> 8) % 5;
	}
}

/* Decodes a random batch: @plain ones (what clients send) must be taken. */
static void
check_random_batch(uint64_t *seed, int plain, size_t max_samples)
{
	size_t n = (size_t)(rng_next(seed) % (max_samples + 1));
	size_t ne = (size_t)(rng_next(seed) % 17), n_ratio = 0;
	uint32_t *region = malloc((n + 1) * sizeof(*region));
	uint32_t *scaled = malloc((n + 1) * sizeof(*scaled));
	uint64_t *wall = malloc((n + 1) * sizeof(*wall));
	uint64_t *values = malloc((n * ne + 1) * sizeof(*values));
	float *ratio = malloc((n * ne + 1) * sizeof(*ratio));
	uint32_t def_id[2] = {1, 2};
	char *def_name[2] = {"main", "inner"};
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	int with_scaled = rng_next(seed) % 3 == 0, big = 0, allow_big = rng_next(seed) % 4 == 0;
	uint8_t *buf;
	size_t len;

	CHECK(region && scaled && wall && values && ratio);
	b.tid = (int32_t)(rng_next(seed) % 4 ? rng_next(seed) % 4194304 : rng_next(seed));
	for (size_t i = 0; i < n; i++) {
		uint64_t r = rng_next(seed);

		region[i] = r % 5 ? 1 + (uint32_t)(r % 8) : (uint32_t)(r >> 32);
		wall[i] = random_value(seed, allow_big);
		scaled[i] = with_scaled && r % 4 == 0 ? (uint32_t)(rng_next(seed) >> 32) : 0;
		if (ne < 32)
			scaled[i] &= (UINT32_C(1) << ne) - 1;
		n_ratio += (size_t)__builtin_popcount(scaled[i]);
		big |= wall[i] > UINT64_MAX / 2;
		for (size_t j = 0; j < ne; j++) {
			values[i * ne + j] = random_value(seed, allow_big);
			big |= values[i * ne + j] > UINT64_MAX / 2;
		}
	}
	for (size_t k = 0; k < n_ratio && k < n * ne; k++) {
		uint32_t x = (uint32_t)rng_next(seed);

		if (k % 2)
			memcpy(&ratio[k], &x, sizeof(x));
		else
			ratio[k] = (float)(x % 1000) / 1000.0f;
	}
	b.n_region = n;
	b.region = region;
	b.n_wall_ns = rng_next(seed) % 16 ? n : n / 2;
	b.wall_ns = wall;
	b.n_values = n * ne;
	b.values = values;
	if (with_scaled) {
		b.n_scaled = n;
		b.scaled = scaled;
		b.n_scale_ratio = n_ratio < n * ne ? n_ratio : n * ne;
		b.scale_ratio = ratio;
	}
	/* What the library reports beside its samples: most often nothing. */
	if (rng_next(seed) % 2) {
		b.dropped = rng_next(seed) >> (rng_next(seed) % 64);
		b.sent_before = rng_next(seed) >> (rng_next(seed) % 64);
		b.dropped_depth = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		b.dropped_nesting = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		b.dropped_full = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		b.dropped_read = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		b.dropped_exited = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		b.dropped_names = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		b.dropped_long_names = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		b.pending = rng_next(seed) % 2 ? 0 : random_value(seed, allow_big);
		b.dropped_fd_limit = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		b.dropped_unregistered = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		b.dropped_no_daemon = rng_next(seed) % 3 ? 0 : random_value(seed, allow_big);
		big |= b.dropped > UINT64_MAX / 2 || b.sent_before > UINT64_MAX / 2 ||
		       b.dropped_depth > UINT64_MAX / 2 || b.dropped_nesting > UINT64_MAX / 2 ||
		       b.dropped_full > UINT64_MAX / 2 || b.dropped_read > UINT64_MAX / 2 ||
		       b.dropped_exited > UINT64_MAX / 2 || b.dropped_names > UINT64_MAX / 2 ||
		       b.dropped_long_names > UINT64_MAX / 2 || b.pending > UINT64_MAX / 2 ||
		       b.dropped_fd_limit > UINT64_MAX / 2 ||
		       b.dropped_unregistered > UINT64_MAX / 2 ||
		       b.dropped_no_daemon > UINT64_MAX / 2;
	}
	if (!plain) {
		if (rng_next(seed) % 2) {
			b.n_def_id = b.n_def_name = 2;
			b.def_id = def_id;
			b.def_name = def_name;
		}
		if (rng_next(seed) % 2)
			b.tid = -(int32_t)(1 + rng_next(seed) % 1000);
		b.dropped = rng_next(seed) >> (rng_next(seed) % 64);
		b.sent_before = rng_next(seed) >> (rng_next(seed) % 64);
	}
	buf = pack_batch(&b, &len);
	check_decode(buf, len,
	             plain && !big && b.tid >= 0 && n <= BATCH_MAX_SAMPLES &&
	                             n * ne <= BATCH_MAX_VALUES
	                     ? 1
	                     : -1);
	if (rng_next(seed) % 4 == 0)
		check_mutations(buf, len, 20, seed);
	free(buf);
	free(region);
	free(scaled);
	free(wall);
	free(values);
	free(ratio);
}

/* Appends the varint @v at @p; returns the byte after it. */
static uint8_t *
put_varint(uint8_t *p, uint64_t v)
{
	for (; v >= 0x80; v >>= 7)
		*p++ = (uint8_t)(v | 0x80);
	*p++ = (uint8_t)v;
	return p;
}

/* batch_scan() measures the varints of a column 64 bytes at a time: one varint of each length
 * from 1 to 10 bytes at every place of a column of one-byte ones, across the 64-byte blocks'
 * edges. Up to 9 bytes the datagram is taken (and decoded as protobuf-c decodes it), 10 left
 * to protobuf-c; in place up to BATCH_INPLACE_BYTES. */
static void
test_scan_runs(void)
{
	uint8_t col[224], buf[256];

	for (unsigned l = 1; l <= 10; l++)
		for (size_t at = 0; at + l <= 150; at++) {
			size_t len = at + l + (at * 7 + l) % 64; /* ones after it: 0 to 63 */
			uint8_t body[240], *q = body, *p = buf;
			Pmc__SampleBatch b;
			struct batch_cols cols;

			memset(col, 0x01, len);
			memset(col + at, 0x81, l - 1);
			q = put_varint(q, 1u << 3); /* tid = 7 */
			q = put_varint(q, 7);
			q = put_varint(q, (4u << 3) | 2u); /* values, packed */
			q = put_varint(q, len);
			memcpy(q, col, len);
			q += len;
			p = put_varint(p, (3u << 3) | 2u); /* Request.sample_batch */
			p = put_varint(p, (uint64_t)(q - body));
			memcpy(p, body, (size_t)(q - body));
			p += q - body;
			check_decode(buf, (size_t)(p - buf), l <= 9);
			int r = batch_scan(buf, (size_t)(p - buf), &b, &cols);
			CHECK(r == (l <= 9 ? 0 : -EAGAIN));
			if (r == 0) {
				CHECK(b.n_values == len - l + 1);
				CHECK(cols.in_place == (l <= BATCH_INPLACE_BYTES));
			}
		}
}

static void
test_random_batches(void)
{
	uint64_t seed = 1;

	for (unsigned k = 0; k < 3000; k++)
		check_random_batch(&seed, 1, k % 10 ? 40 : 600);
	for (unsigned k = 0; k < 3000; k++)
		check_random_batch(&seed, 0, k % 10 ? 40 : 600);
	/* Over the decoder's capacity: left to protobuf-c. */
	for (unsigned k = 0; k < 20; k++)
		check_random_batch(&seed, 1, 3 * BATCH_MAX_SAMPLES);
}

/* A plain batch as the client library sends it: 512 samples of 4 events. */
static void
test_client_batch(void)
{
	static uint32_t region[512];
	static uint64_t wall[512], values[512 * 4];
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	uint64_t seed = 3;
	uint8_t *buf;
	size_t len;

	for (size_t i = 0; i < 512; i++) {
		region[i] = 1 + (uint32_t)(i % 8);
		wall[i] = 1000 + rng_next(&seed) % 50000;
		for (size_t j = 0; j < 4; j++)
			values[i * 4 + j] = j == 1 ? wall[i] - wall[i] / 16 : rng_next(&seed) % 3;
	}
	b.tid = 4242;
	b.n_region = b.n_wall_ns = 512;
	b.region = region;
	b.wall_ns = wall;
	b.n_values = 2048;
	b.values = values;
	b.sent_before = 123456789;
	b.dropped = 3 + 4 + 5 + 6 + 7 + 8 + 9;
	b.dropped_depth = 3;
	b.dropped_nesting = 4;
	b.dropped_full = 5;
	b.dropped_read = 6;
	b.dropped_exited = 7;
	b.dropped_names = 8;
	b.dropped_long_names = 9;
	b.pending = 700;
	b.dropped_fd_limit = 11;
	b.dropped_unregistered = 12;
	b.dropped_no_daemon = 13;
	buf = pack_batch(&b, &len);
	CHECK(check_decode(buf, len, 1));
	/* Every prefix is cut short somewhere: protobuf-c's to refuse. */
	for (size_t k = 0; k < len; k++)
		CHECK(check_decode(buf, k, 0) == 0);
	free(buf);
}

/* A batch in fixed form (wall_ns_fixed, values_fixed), as a SampleRing's frame holds it: taken
 * as if its columns were wall_ns and values, in place while every value is below 2^49, else
 * copied; both forms in one batch, or a column that is not a whole number of values, are left
 * to protobuf-c (whose batch the session then refuses). */
static void
test_fixed_form(void)
{
	static uint32_t region[300];
	static uint64_t wall[300], values[300 * 3];
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT, out;
	struct batch_cols cols;
	uint64_t seed = 11;
	size_t len;

	for (size_t i = 0; i < 300; i++) {
		region[i] = 1 + (uint32_t)(i % 5);
		wall[i] = rng_next(&seed) % 100000;
		for (size_t j = 0; j < 3; j++)
			values[i * 3 + j] = rng_next(&seed) % 1000;
	}
	b.tid = 77;
	b.n_region = 300;
	b.region = region;
	b.n_wall_ns_fixed = 300;
	b.wall_ns_fixed = wall;
	b.n_values_fixed = 900;
	b.values_fixed = values;
	for (int wide = 0; wide < 2; wide++) {
		values[450] = wide ? UINT64_C(1) << 49 : 7;
		uint8_t *buf = pack_batch(&b, &len);
		CHECK(batch_scan(buf, len, &out, &cols) == 0);
		CHECK(out.tid == 77 && out.n_region == 300 && out.n_wall_ns == 300 &&
		      out.n_values == 900 && !out.n_wall_ns_fixed && !out.n_values_fixed);
		CHECK(cols.in_place == !wide);
		if (wide) {
			CHECK(memcmp(out.wall_ns, wall, sizeof(wall)) == 0);
			CHECK(memcmp(out.values, values, sizeof(values)) == 0);
		} else {
			CHECK(cols.fixed && !out.wall_ns && !out.values);
			batch_cols_decode(&cols, &out);
			CHECK(memcmp(out.wall_ns, wall, sizeof(wall)) == 0);
			CHECK(memcmp(out.values, values, sizeof(values)) == 0);
		}
		/* Where the writer may change it (a ring's frame), the same. */
		CHECK(batch_scan_shared(buf, len, &out, &cols) == 0 && out.n_values == 900 &&
		      cols.in_place == !wide);
		/* Cut short anywhere: refused. */
		for (size_t k = 0; k < len; k += 7)
			CHECK(batch_scan(buf, k, &out, &cols) == -EAGAIN);
		free(buf);
	}
	/* Both forms: protobuf-c's. */
	b.n_wall_ns = 300;
	b.wall_ns = wall;
	uint8_t *buf = pack_batch(&b, &len);
	CHECK(batch_scan(buf, len, &out, &cols) == -EAGAIN);
	free(buf);
	/* Varint columns where the writer may change them: copied first (left to the caller). */
	b.n_wall_ns_fixed = b.n_values_fixed = 0;
	b.n_values = 900;
	b.values = values;
	buf = pack_batch(&b, &len);
	CHECK(batch_scan(buf, len, &out, &cols) == 0);
	CHECK(batch_scan_shared(buf, len, &out, &cols) == -EAGAIN);
	free(buf);
	/* A fixed column of 12 bytes (hand-made: field 61, length 12). */
	uint8_t odd[] = {3 << 3 | 2, 0, 0xea, 0x03, 12, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0};
	odd[1] = (uint8_t)(sizeof(odd) - 2);
	CHECK(batch_scan(odd, sizeof(odd), &out, &cols) == -EAGAIN);
	odd[4] = 8;
	odd[1] = (uint8_t)(sizeof(odd) - 2 - 4);
	CHECK(batch_scan(odd, sizeof(odd) - 4, &out, &cols) == 0 && out.n_wall_ns == 1);
}

/* Hand-made encodings: what the decoder takes and what it leaves to protobuf-c. */
static void
check_bytes(const char *what, const uint8_t *body, size_t n, int expect)
{
	uint8_t buf[256];

	CHECK(n + 2 <= sizeof(buf) && n < 128);
	buf[0] = 0x1a; /* Request.sample_batch */
	buf[1] = (uint8_t)n;
	memcpy(buf + 2, body, n);
	if (check_decode(buf, n + 2, expect) != (expect == 1)) {
		fprintf(stderr, "case: %s\n", what);
		exit(1);
	}
}

#define BYTES(what, expect, ...)                                                                   \
	do {                                                                                       \
		static const uint8_t b_[] = {__VA_ARGS__};                                         \
		check_bytes(what, b_, sizeof(b_), expect);                                         \
	} while (0)

static void
test_encodings(void)
{
	uint8_t buf[64];

	BYTES("empty batch", 1, 0x08, 0x00);
	check_bytes("no fields", buf, 0, 1);
	BYTES("tid, regions, wall", 1, 0x08, 0x05, 0x12, 0x02, 0x01, 0x02, 0x1a, 0x02, 0x07, 0x09);
	BYTES("fields out of order", 1, 0x1a, 0x01, 0x07, 0x12, 0x01, 0x01, 0x08, 0x05);
	BYTES("empty packed fields", 1, 0x12, 0x00, 0x1a, 0x00, 0x22, 0x00, 0x2a, 0x00, 0x4a, 0x00);
	BYTES("scale ratios", 1, 0x4a, 0x08, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x3f);
	BYTES("9-byte value", 1, 0x22, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f);
	BYTES("8-byte value", 1, 0x22, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f);
	BYTES("2-byte values, then 8 bytes of other fields", 1, 0x22, 0x04, 0x80, 0x01, 0xff, 0x7f,
	      0x08, 0x05, 0x40, 0x01, 0x50, 0x01, 0x2a, 0x00);
	BYTES("varint running past its packed field", 0, 0x22, 0x01, 0x81, 0x08, 0x05, 0x40, 0x01,
	      0x50, 0x01, 0x2a, 0x00);
	BYTES("10-byte value", 0, 0x22, 0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	      0x01);
	BYTES("6-byte region id that fits 32 bits", 1, 0x12, 0x06, 0x81, 0x80, 0x80, 0x80, 0x80,
	      0x00);
	BYTES("5-byte region id over 32 bits", 0, 0x12, 0x05, 0xff, 0xff, 0xff, 0xff, 0x1f);
	BYTES("5-byte region id of 32 bits", 1, 0x12, 0x05, 0xff, 0xff, 0xff, 0xff, 0x0f);
	BYTES("negative tid (10 bytes)", 0, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	      0xff, 0x01);
	BYTES("tid as 5 bytes, high bit", 1, 0x08, 0xff, 0xff, 0xff, 0xff, 0x0f);
	BYTES("dropped and sent_before", 1, 0x40, 0x96, 0x01, 0x50, 0xff, 0xff, 0x03);
	BYTES("unpacked region", 0, 0x10, 0x01);
	BYTES("unpacked value", 0, 0x20, 0x01);
	BYTES("two region fields", 0, 0x12, 0x01, 0x01, 0x12, 0x01, 0x02);
	BYTES("tid twice", 0, 0x08, 0x01, 0x08, 0x02);
	BYTES("two-byte tag", 0, 0x88, 0x00, 0x05);
	BYTES("loss by reason, one-byte tags", 1, 0x58, 0x01, 0x60, 0x02, 0x68, 0x03, 0x70, 0x04,
	      0x78, 0x05);
	BYTES("loss by reason, two-byte tags", 1, 0x80, 0x01, 0x06, 0x88, 0x01, 0x07, 0x90, 0x01,
	      0x96, 0x01);
	BYTES("pending, 9 bytes", 1, 0x90, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	      0x7f);
	BYTES("pending twice", 0, 0x90, 0x01, 0x01, 0x90, 0x01, 0x02);
	BYTES("pending as length-delimited", 0, 0x92, 0x01, 0x01, 0x05);
	BYTES("dropped_depth as a two-byte tag", 0, 0xd8, 0x00, 0x01);
	BYTES("three-byte tag", 0, 0x80, 0x80, 0x01, 0x01);
	BYTES("tag cut short", 0, 0x08, 0x01, 0x80);
	BYTES("dropped_fd_limit", 1, 0x98, 0x01, 0x01);
	BYTES("dropped_unregistered", 1, 0xa0, 0x01, 0x01);
	BYTES("dropped_no_daemon", 1, 0xa8, 0x01, 0x01);
	BYTES("unknown field (23)", 0, 0xb8, 0x01, 0x01);
	BYTES("the batch's end (field 22)", 1, 0xb0, 0x01, 0x05);
	BYTES("field 0", 0, 0x00, 0x01);
	BYTES("tid as length-delimited", 0, 0x0a, 0x01, 0x05);
	BYTES("tid as fixed32", 0, 0x0d, 0x01, 0x00, 0x00, 0x00);
	BYTES("region as fixed64", 0, 0x11, 0, 0, 0, 0, 0, 0, 0, 0);
	BYTES("group", 0, 0x0b, 0x0c);
	BYTES("def_id", 0, 0x32, 0x01, 0x01);
	BYTES("def_name", 0, 0x3a, 0x01, 0x61);
	BYTES("scale ratios not a multiple of 4", 0, 0x4a, 0x03, 0x00, 0x00, 0x80);
	BYTES("varint cut short in a packed field", 0, 0x22, 0x01, 0x80);
	BYTES("packed field longer than the batch", 0, 0x22, 0x05, 0x01);
	BYTES("6-byte length", 0, 0x22, 0x81, 0x80, 0x80, 0x80, 0x80, 0x00);
	BYTES("5-byte length", 1, 0x22, 0x81, 0x80, 0x80, 0x80, 0x00, 0x07);
	BYTES("tid cut short", 0, 0x08, 0x80);

	/* The Request around the batch. */
	static const uint8_t two_bodies[] = {0x0a, 0x00, 0x1a, 0x00};
	static const uint8_t batch_then_other[] = {0x1a, 0x00, 0x3a, 0x00};
	static const uint8_t batch_twice[] = {0x1a, 0x02, 0x08, 0x01, 0x1a, 0x02, 0x08, 0x02};
	static const uint8_t short_body[] = {0x1a, 0x03, 0x08, 0x01};
	static const uint8_t long_body[] = {0x1a, 0x01, 0x08, 0x01};
	static const uint8_t hello[] = {0x0a, 0x02, 0x08, 0x01};
	static const uint8_t long_len[] = {0x1a, 0x82, 0x80, 0x80, 0x80, 0x80, 0x00, 0x08, 0x01};
	CHECK(check_decode(two_bodies, sizeof(two_bodies), 0) == 0);
	CHECK(check_decode(batch_then_other, sizeof(batch_then_other), 0) == 0);
	CHECK(check_decode(batch_twice, sizeof(batch_twice), 0) == 0);
	CHECK(check_decode(short_body, sizeof(short_body), 0) == 0);
	CHECK(check_decode(long_body, sizeof(long_body), 0) == 0);
	CHECK(check_decode(hello, sizeof(hello), 0) == 0);
	CHECK(check_decode(long_len, sizeof(long_len), 0) == 0);
	CHECK(check_decode(hello, 0, 0) == 0);
	CHECK(check_decode(hello, 1, 0) == 0);
}

/* A corpus datagram that is a SampleBatch, made plain (no region definitions, tid >= 0): it
 * must be taken. Return: 1 when it was a batch. */
static int
check_plain_copy(const uint8_t *buf, size_t len, uint64_t *seed)
{
	Pmc__Request *req = pmc__request__unpack(NULL, len, buf);
	Pmc__SampleBatch *b;
	uint8_t *plain;
	size_t n;
	int big = 0;

	if (!req)
		return 0;
	if (req->body_case != PMC__REQUEST__BODY_SAMPLE_BATCH) {
		pmc__request__free_unpacked(req, NULL);
		return 0;
	}
	b = req->sample_batch;
	for (size_t i = 0; i < b->n_def_id; i++)
		free(b->def_name[i]);
	free(b->def_id);
	free(b->def_name);
	b->n_def_id = b->n_def_name = 0;
	b->def_id = NULL;
	b->def_name = NULL;
	if (b->tid < 0)
		b->tid = 1;
	for (size_t i = 0; i < b->n_wall_ns; i++)
		big |= b->wall_ns[i] > UINT64_MAX / 2;
	for (size_t i = 0; i < b->n_values; i++)
		big |= b->values[i] > UINT64_MAX / 2;
	plain = pack_request(req, &n);
	check_decode(plain, n, b->base.n_unknown_fields || big ? -1 : 1);
	check_mutations(plain, n, 2000, seed);
	free(plain);
	pmc__request__free_unpacked(req, NULL);
	return 1;
}

/* The fuzzer's seed corpus: records of a 2-byte little-endian length and a datagram. */
static void
test_corpus(void)
{
	DIR *d = opendir(PMC_FUZZ_CORPUS);
	struct dirent *e;
	unsigned files = 0, records = 0, batches = 0, derived = 0;
	unsigned long fast_before = n_fast;
	uint64_t seed = 11;

	CHECK(d);
	while ((e = readdir(d))) {
		char path[4096];
		uint8_t *data;
		long size;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", PMC_FUZZ_CORPUS, e->d_name);
		f = fopen(path, "rb");
		CHECK(f);
		CHECK(fseek(f, 0, SEEK_END) == 0);
		size = ftell(f);
		CHECK(size >= 0 && fseek(f, 0, SEEK_SET) == 0);
		data = malloc((size_t)size + 1);
		CHECK(data);
		CHECK(fread(data, 1, (size_t)size, f) == (size_t)size);
		fclose(f);
		files++;
		for (size_t at = 0; at + 2 <= (size_t)size;) {
			size_t len = data[at] | (size_t)data[at + 1] << 8;

			at += 2;
			if (len > (size_t)size - at)
				len = (size_t)size - at;
			records++;
			batches += (unsigned)check_decode(data + at, len, -1);
			check_mutations(data + at, len, 2000, &seed);
			derived += (unsigned)check_plain_copy(data + at, len, &seed);
			at += len;
		}
		free(data);
	}
	closedir(d);
	CHECK(files > 0 && records > 0);
	printf("# corpus: %u files, %u datagrams, %u taken by batch_decode(); %u batches made "
	       "plain; of all their mutations, %lu taken\n",
	       files, records, batches, derived, n_fast - fast_before - batches - derived);
	CHECK(derived > 0);
}

/* A client, in a child process: Hello, register this thread (page-faults), two batches that
 * report losses by reason and leave samples behind ("pending"), a Status call (so that both
 * were handled), then _exit() without sending what it said it held. Exit status 77: no perf
 * access here. */
/* In a child process: connect to @path, Hello, register this thread for page-faults (its
 * counters closed at once); the connection, its thread id in *@tid. Exits 77 where perf is
 * refused, 1 on any other failure. */
static int
client_hello_register(const char *path, int32_t *tid)
{
	int fd = pmc_wire_connect(path), fds[16];
	size_t n_fds = 0;
	Pmc__Response *resp = NULL;
	Pmc__Request req = PMC__REQUEST__INIT;
	Pmc__Hello h = PMC__HELLO__INIT;
	if (fd < 0)
		_exit(1);
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	if (pmc_wire_call(fd, &req, 5000, NULL, 0, NULL, &resp) < 0 || resp->error)
		_exit(1);
	pmc__response__free_unpacked(resp, NULL);
	char *events[] = {"page-faults"};
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = (int32_t)syscall(SYS_gettid);
	rt.n_events = 1;
	rt.events = events;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	if (pmc_wire_call(fd, &req, 5000, fds, 16, &n_fds, &resp) < 0)
		_exit(1);
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	if (resp->error)
		_exit(77);
	pmc__response__free_unpacked(resp, NULL);
	*tid = rt.tid;
	return fd;
}

static void
lossy_client(const char *path)
{
	int32_t tid;
	int fd = client_hello_register(path, &tid);
	Pmc__Response *resp = NULL;
	Pmc__Request req = PMC__REQUEST__INIT;
	uint32_t region[3] = {1, 1, 1}, def_id[1] = {1};
	uint64_t wall[3] = {10, 20, 30}, values[3] = {1, 2, 3};
	char *def_name[1] = {"r"};
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.tid = tid;
	b.n_region = b.n_wall_ns = b.n_values = 3;
	b.region = region;
	b.wall_ns = wall;
	b.values = values;
	b.n_def_id = b.n_def_name = 1;
	b.def_id = def_id;
	b.def_name = def_name;
	b.dropped_depth = 2;
	b.dropped_nesting = 1;
	b.dropped = 3;
	b.pending = 7;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = &b;
	if (pmc_wire_send(fd, &req.base, NULL, 0, 0) < 0)
		_exit(1);
	/* A later batch: its figure of what is left replaces the first's. An older library's
	 * `dropped` beyond the reasons is "other". */
	Pmc__SampleBatch b2 = PMC__SAMPLE_BATCH__INIT;
	b2.tid = tid;
	b2.n_region = b2.n_wall_ns = b2.n_values = 1;
	b2.region = region;
	b2.wall_ns = wall;
	b2.values = values;
	b2.sent_before = 3;
	b2.dropped_names = 4;
	b2.dropped = 4 + 3;
	b2.pending = 5;
	req.sample_batch = &b2;
	if (pmc_wire_send(fd, &req.base, NULL, 0, 0) < 0)
		_exit(1);
	Pmc__Status st = PMC__STATUS__INIT;
	req.body_case = PMC__REQUEST__BODY_STATUS;
	req.status = &st;
	if (pmc_wire_call(fd, &req, 5000, NULL, 0, NULL, &resp) < 0 || resp->error)
		_exit(1);
	_exit(0);
}

/* The daemon's figures of losses: per reason and process, and at the hang-up of a process
 * that ended, what its threads said they still held, as lost. */
/* A daemon's server listening on a socket in @dir (made), whose path goes to @path. */
static struct server *
server_in(char *dir, char path[128])
{
	struct sockaddr_un sa;
	struct policy pol;
	struct server *srv = NULL;

	CHECK(mkdtemp(dir));
	snprintf(path, 128, "%s/s", dir);
	int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	CHECK(lfd >= 0 && pmc_wire_sockaddr(path, &sa) == 0);
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 4) == 0);
	policy_init(&pol);
	perf_setup();
	CHECK(server_new(lfd, &pol, &srv) == 0);
	return srv;
}

static void
test_losses_counted(void)
{
	char dir[] = "/tmp/pmc-test-batch.XXXXXX", path[128];
	int st = 0, reaped = 0, seen = 0;
	struct server *srv = server_in(dir, path);
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0)
		lossy_client(path);
	for (int i = 0; i < 2000 && !(reaped && seen && !srv->n_sessions); i++) {
		event_base_loop(srv->base, EVLOOP_NONBLOCK);
		/* (Connected, served and hung up within one pass of the loop: its process.) */
		seen |= srv->n_sessions > 0 || registry_first(&srv->model.reg) != NULL;
		if (!reaped && waitpid(child, &st, WNOHANG) == child)
			reaped = 1;
		usleep(5000);
	}
	CHECK(reaped && WIFEXITED(st));
	if (WEXITSTATUS(st) == 77) {
		printf("# skipped: perf_event_open refused here\n");
	} else {
		struct process *p = registry_first(&srv->model.reg);
		CHECK(WEXITSTATUS(st) == 0 && seen && !srv->n_sessions);
		CHECK(p && p->pid == child && !registry_process_next(p));
		CHECK(srv->model.samples == 4);
		CHECK(srv->model.dropped == 3 + 7);
		CHECK(p->dropped[PMC_LOSS_DEPTH] == 2 && p->dropped[PMC_LOSS_NESTING] == 1);
		CHECK(p->dropped[PMC_LOSS_NAMES] == 4 && p->dropped[PMC_LOSS_OTHER] == 3);
		CHECK(p->dropped[PMC_LOSS_FULL] == 0 && p->dropped[PMC_LOSS_MAX_REGIONS] == 0);
		/* What the last batch said was left: lost once the process ended. */
		CHECK(p->dropped[PMC_LOSS_UNSENT] == 5);
		CHECK(srv->model.lost == 5);
		CHECK(strcmp(pmc_loss_name(PMC_LOSS_UNSENT), "unsent") == 0);
		CHECK(pmc_loss_name(PMC_LOSS_N) == NULL);
	}
	server_free(srv);
	perf_cleanup();
	unlink(path);
	rmdir(dir);
}

/* A client, in a child process: Hello, register this thread (page-faults; exit 77 where perf
 * is refused), then, once a byte comes on @go, a SampleBatch naming 20,000 regions (ids 1 to
 * 4,096 in turn) with one sample of region 1 and three plain batches of one sample each;
 * then a byte on @done, and it waits for the end of @go. */
static void
names_client(const char *path, int go, int done)
{
	int32_t tid;
	int fd = client_hello_register(path, &tid);
	Pmc__Request req = PMC__REQUEST__INIT;
	char b;
	if (write(done, "r", 1) != 1 || read(go, &b, 1) != 1)
		_exit(1);
	enum { N = 20000 };
	static uint32_t ids[N];
	static char text[N][8], *names[N];
	for (uint32_t i = 0; i < N; i++) {
		ids[i] = i % 4096 + 1;
		snprintf(text[i], sizeof(text[i]), "n%u", ids[i]);
		names[i] = text[i];
	}
	uint32_t one = 1;
	uint64_t wall = 1000, value = 1;
	Pmc__SampleBatch sb = PMC__SAMPLE_BATCH__INIT;
	sb.tid = tid;
	sb.n_region = sb.n_wall_ns = sb.n_values = 1;
	sb.region = &one;
	sb.wall_ns = &wall;
	sb.values = &value;
	sb.n_def_id = sb.n_def_name = N;
	sb.def_id = ids;
	sb.def_name = names;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = &sb;
	int sz = 1 << 20;
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	for (int i = 0; i < 4; i++) {
		if (pmc_wire_send(fd, &req.base, NULL, 0, 0) < 0)
			_exit(1);
		sb.sent_before++;
		sb.n_def_id = sb.n_def_name = 0;
	}
	if (write(done, "s", 1) != 1)
		_exit(1);
	while (read(go, &b, 1) > 0)
		;
	_exit(0);
}

/* At SIGTERM, a batch whose names go on in later slices is finished before the final drain,
 * and what its connection queued behind it is counted: the drain skipped that connection
 * (its uid's Define under way), and its 3 later batches were lost. Forced: the batch's
 * first slice ends at once (its deadline past). */
static void
test_final_drain_mid_batch(void)
{
	char dir[] = "/tmp/pmc-test-batch.XXXXXX", path[128];
	int go[2], done[2], st = 0;
	char b = 0;
	struct server *srv = server_in(dir, path);
	CHECK(pipe(go) == 0 && pipe(done) == 0);
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		close(go[1]);
		close(done[0]);
		names_client(path, go[0], done[1]);
	}
	close(go[0]);
	close(done[1]);
	/* Its Hello and registration answered by the loop, until it says so (or ends). */
	for (int i = 0; i < 4000; i++) {
		struct pollfd p = {.fd = done[0], .events = POLLIN};
		if (poll(&p, 1, 0) > 0)
			break;
		event_base_loop(srv->base, EVLOOP_NONBLOCK);
		usleep(1000);
	}
	if (read(done[0], &b, 1) != 1 || b != 'r') {
		CHECK(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 77);
		printf("# skipped: perf_event_open refused here\n");
	} else {
		/* The batches queued, the loop not run meanwhile. */
		CHECK(write(go[1], "g", 1) == 1 && read(done[0], &b, 1) == 1 && b == 's');
		struct session *s = pmc_list_first(&srv->sessions, struct session, link);
		CHECK(s && srv->model.samples == 0);
		srv->deadline_ns = 1;
		CHECK(session_dispatch_one(s) == 0);
		CHECK(s->batch_req != NULL);
		/* (It reads the connection to its end, shut: the session is closed and freed.) */
		session_drain_all(srv, true);
		CHECK(srv->model.samples == 4);
		close(go[1]);
		CHECK(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	close(done[0]);
	server_free(srv);
	perf_cleanup();
	unlink(path);
	rmdir(dir);
}

int
main(void)
{
	int fds_start = pmc_test_count_fds();

	RUN(test_encodings);
	RUN(test_client_batch);
	RUN(test_fixed_form);
	RUN(test_random_batches);
	RUN(test_scan_runs);
	RUN(test_corpus);
	RUN(test_losses_counted);
	RUN(test_final_drain_mid_batch);
	printf("# %lu datagrams taken by batch_decode() and equal to protobuf-c's decode, %lu left "
	       "to protobuf-c\n",
	       n_fast, n_slow);
	CHECK(n_fast > 1000 && n_slow > 1000);

	CHECK(fds_start >= 0);
	CHECK(pmc_test_count_fds() == fds_start);
	printf("ok %u - no_fd_leak\n", ++pmc_test_n);
	printf("1..%u\n", pmc_test_n);
	return 0;
}
