/* Unit tests for daemon/model/ingest.c's counting in place against protobuf-c: every batch of
 * the fuzzer's seed corpus, random batches as clients send them (values of every length,
 * scaled events, refused regions, call path nodes), their random mutations, and hostile
 * batches made by hand (truncated varints, wrong wire types, huge lengths, fields repeated
 * or out of order, unknown fields). Each is decoded and counted both ways
 * (tests/lib/pmc-test-ingest.h): every aggregate must be the same. Prints "ok N - name" per
 * test; exits 1 at the first failed check. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmc-test.h"

#define INGEST_CHECK(expr) CHECK(expr)
#include "pmc-test-ingest.h"

#ifndef PMC_FUZZ_CORPUS
#define PMC_FUZZ_CORPUS "tests/fuzz/corpus"
#endif

#define rng pmc_test_rng

/* cmp_datagram() of a copy of @buf in a buffer of exactly @len bytes, as a datagram is
 * received: a read one byte past its end is then ASan's to report (the buffers here have room
 * after the datagram). */
static int
cmp_exact(const uint8_t *buf, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	CHECK(copy);
	if (len)
		memcpy(copy, buf, len);
	int r = cmp_datagram(copy, len);
	free(copy);
	return r;
}

static uint8_t *
pack_batch(Pmc__SampleBatch *b, size_t *len)
{
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = b;
	*len = pmc__request__get_packed_size(&req);
	uint8_t *buf = malloc(*len + 1);
	CHECK(buf);
	CHECK(pmc__request__pack(&req, buf) == *len);
	return buf;
}

/* A value of 1 to 9 varint bytes: zeros and small counts most often, as rare events give. */
static uint64_t
value(uint64_t *seed, int wide)
{
	uint64_t r = rng(seed);
	switch (r % 8) {
	case 0:
	case 1:
		return 0;
	case 2:
		return r >> 61;
	case 3:
	case 4:
		return 1000 + (r >> 8) % 50000;
	case 5:
		return rng(seed) >> (15 + (r >> 58) % 49); /* up to 2^49 */
	case 6:
		return wide ? rng(seed) >> (1 + (r >> 58) % 16) : (r >> 20) % 100000000;
	default:
		return (r >> 8) % 5;
	}
}

/* Flipped bits, changed, inserted and removed bytes, truncation; each result compared. */
static void
mutate(const uint8_t *buf, size_t len, unsigned rounds, uint64_t *seed)
{
	uint8_t *m = malloc(len + 16);
	CHECK(m);
	for (unsigned k = 0; k < rounds; k++) {
		size_t n = pmc_test_mutate(m, buf, len, seed);
		cmp_exact(m, n);
	}
	free(m);
}

/* A batch as the session counts it: @n samples of @ne events over a few regions; with @fixed,
 * its columns in fixed form (wall_ns_fixed, values_fixed), as a SampleRing's frames hold them. */
static uint8_t *
random_batch(uint64_t *seed, size_t n, size_t ne, int wide, int scaled, int fixed, size_t *len)
{
	uint32_t *region = calloc(n + 1, sizeof(*region)), *sc = calloc(n + 1, sizeof(*sc));
	uint64_t *wall = calloc(n + 1, sizeof(*wall)), *values = calloc(n * ne + 1, 8);
	float *ratio = calloc(n * ne + 1, sizeof(*ratio));
	size_t n_ratio = 0;
	uint32_t keys = 1 + (uint32_t)(rng(seed) % 40);
	CHECK(region && sc && wall && values && ratio);
	for (size_t i = 0; i < n; i++) {
		region[i] = 1 + (uint32_t)(rng(seed) % keys);
		wall[i] = value(seed, wide);
		for (size_t j = 0; j < ne; j++)
			values[i * ne + j] = value(seed, wide);
		if (scaled && rng(seed) % 3 == 0) {
			sc[i] = (uint32_t)rng(seed) &
			        (ne < 32 ? (UINT32_C(1) << ne) - 1 : UINT32_MAX);
			for (int k = __builtin_popcount(sc[i]); k > 0; k--)
				ratio[n_ratio++] = (float)(rng(seed) % 1200) / 1000.0f;
		}
	}
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.tid = (int32_t)(rng(seed) % 100000);
	b.n_region = n;
	b.region = region;
	if (fixed) {
		b.n_wall_ns_fixed = n;
		b.wall_ns_fixed = wall;
		b.n_values_fixed = n * ne;
		b.values_fixed = values;
	} else {
		b.n_wall_ns = n;
		b.wall_ns = wall;
		b.n_values = n * ne;
		b.values = values;
	}
	if (scaled) {
		b.n_scaled = n;
		b.scaled = sc;
		b.n_scale_ratio = n_ratio;
		b.scale_ratio = ratio;
	}
	b.dropped = rng(seed) % 3 ? 0 : rng(seed) % 1000;
	b.pending = rng(seed) % 100;
	uint8_t *buf = pack_batch(&b, len);
	free(region);
	free(sc);
	free(wall);
	free(values);
	free(ratio);
	return buf;
}

static void
test_random_batches(void)
{
	uint64_t seed = 7;
	unsigned long counted = cmp_counted, in_place = cmp_in_place, fixed_n = cmp_fixed;
	for (unsigned k = 0; k < 800; k++) {
		size_t n = (size_t)(rng(&seed) % (k % 10 ? 64 : 700));
		size_t ne = (size_t)(rng(&seed) % 9);
		int wide = rng(&seed) % 4 == 0, scaled = rng(&seed) % 3 == 0;
		int fixed = rng(&seed) % 3 == 0;
		size_t len;
		uint8_t *buf = random_batch(&seed, n, ne, wide, scaled, fixed, &len);
		CHECK(cmp_exact(buf, len) == 1);
		if (k % 8 == 0)
			mutate(buf, len, 30, &seed);
		free(buf);
	}
	/* The largest batch a decode holds, and one event of 32. */
	size_t len;
	uint8_t *buf = random_batch(&seed, BATCH_MAX_SAMPLES, 4, 0, 1, 0, &len);
	CHECK(cmp_exact(buf, len) == 1);
	free(buf);
	buf = random_batch(&seed, BATCH_MAX_SAMPLES, 4, 0, 1, 1, &len);
	CHECK(cmp_exact(buf, len) == 1);
	free(buf);
	buf = random_batch(&seed, 100, 32, 0, 1, 0, &len);
	CHECK(cmp_exact(buf, len) == 1);
	free(buf);
	printf("# %lu batches counted both ways, %lu of them in place, %lu in fixed form\n",
	       cmp_counted - counted, cmp_in_place - in_place, cmp_fixed - fixed_n);
	CHECK(cmp_in_place - in_place > 500 && cmp_counted - cmp_in_place > 30);
	CHECK(cmp_fixed - fixed_n > 150);
}

/* Appends the varint @v to @p. */
static uint8_t *
put_varint(uint8_t *p, uint64_t v)
{
	for (; v >= 0x80; v >>= 7)
		*p++ = (uint8_t)(v | 0x80);
	*p++ = (uint8_t)v;
	return p;
}

/* A Request { sample_batch } around the SampleBatch body @body (@n bytes). */
static size_t
wrap(uint8_t *out, const uint8_t *body, size_t n)
{
	uint8_t *p = out;
	*p++ = (3u << 3) | 2u;
	p = put_varint(p, n);
	memcpy(p, body, n);
	return (size_t)(p - out) + n;
}

/* A body of 3 samples, 2 events; its fields in @order (a string of field numbers: 2 region,
 * 3 wall_ns, 4 values, 1 tid, 'u' an unknown field 30, 'v' an unknown varint field 29). */
static size_t
body(uint8_t *out, const char *order)
{
	uint8_t *p = out;
	for (const char *f = order; *f; f++) {
		switch (*f) {
		case '1':
			*p++ = (1u << 3);
			p = put_varint(p, 77);
			break;
		case '2':
			*p++ = (2u << 3) | 2u;
			*p++ = 3;
			*p++ = 1;
			*p++ = 2;
			*p++ = 1;
			break;
		case '3': {
			uint8_t col[32], *q = col;
			q = put_varint(q, 1500);
			q = put_varint(q, 0);
			q = put_varint(q, UINT64_C(1) << 40);
			*p++ = (3u << 3) | 2u;
			*p++ = (uint8_t)(q - col);
			memcpy(p, col, (size_t)(q - col));
			p += q - col;
			break;
		}
		case '4': {
			uint8_t col[64], *q = col;
			for (int i = 0; i < 6; i++)
				q = put_varint(q, i % 2 ? 0 : (uint64_t)300 << (7 * i));
			*p++ = (4u << 3) | 2u;
			*p++ = (uint8_t)(q - col);
			memcpy(p, col, (size_t)(q - col));
			p += q - col;
			break;
		}
		case 'u':
			*p++ = (uint8_t)((30u << 3) | 2u);
			*p++ = 1; /* a second tag byte: 30 > 15 */
			*p++ = 2;
			*p++ = 0xaa;
			*p++ = 0xbb;
			break;
		case 'v':
			*p++ = (uint8_t)((29u << 3) | 0x80);
			*p++ = 1;
			*p++ = 5;
			break;
		}
	}
	return (size_t)(p - out);
}

static void
test_hostile(void)
{
	uint8_t b[256], d[300];
	size_t n, len;
	unsigned long refused = cmp_refused;

	/* The plain batch, then its fields in other orders: both ways count the same. */
	static const char *const orders[] = {"1234", "4321", "3142", "2413", "234"};
	for (size_t k = 0; k < sizeof(orders) / sizeof(*orders); k++) {
		n = body(b, orders[k]);
		CHECK(cmp_exact(d, wrap(d, b, n)) == 1);
	}
	/* A field repeated (protobuf-c joins packed fields; the hand decoder refuses), unknown
	 * fields: refused in place, or the same. */
	static const char *const odd[] = {"12342", "12344", "12334", "1234u", "u1234", "12v34"};
	for (size_t k = 0; k < sizeof(odd) / sizeof(*odd); k++) {
		n = body(b, odd[k]);
		cmp_exact(d, wrap(d, b, n));
	}
	/* Every truncation of the plain batch, its outer length kept right or not. */
	n = body(b, "1234");
	for (size_t cut = 0; cut < n; cut++) {
		cmp_exact(d, wrap(d, b, cut));
		len = wrap(d, b, n);
		cmp_exact(d, len - (n - cut));
	}
	/* A varint cut at the end of the values (its last byte with the top bit). */
	n = body(b, "123");
	b[n++] = (4u << 3) | 2u;
	b[n++] = 3;
	b[n++] = 0x05;
	b[n++] = 0x85;
	b[n++] = 0x85;
	CHECK(cmp_exact(d, wrap(d, b, n)) == 0);
	/* Wrong wire types: values as a varint, region as 64-bit, wall_ns as 32-bit. */
	static const uint8_t wt[] = {(4u << 3) | 0u, (2u << 3) | 1u, (3u << 3) | 5u,
	                             (4u << 3) | 3u};
	for (size_t k = 0; k < sizeof(wt); k++) {
		n = body(b, "123");
		b[n++] = wt[k];
		for (int i = 0; i < 8; i++)
			b[n++] = 1;
		CHECK(cmp_exact(d, wrap(d, b, n)) == 0);
	}
	/* Huge lengths: a field's past the datagram, in 5 bytes and in 10. */
	n = body(b, "123");
	b[n++] = (4u << 3) | 2u;
	uint8_t *p = put_varint(b + n, UINT32_MAX);
	n = (size_t)(p - b);
	b[n++] = 1;
	CHECK(cmp_exact(d, wrap(d, b, n)) == 0);
	n = body(b, "123");
	b[n++] = (4u << 3) | 2u;
	p = put_varint(b + n, UINT64_MAX);
	n = (size_t)(p - b);
	CHECK(cmp_exact(d, wrap(d, b, n)) == 0);
	/* Varints of 8, 9, 10 and 11 bytes in the values: decoded into arrays up to 9, to
	 * protobuf-c past. */
	for (int extra = 0; extra < 4; extra++) {
		n = body(b, "123");
		uint8_t col[64], *q = col;
		for (int i = 0; i < 6; i++) {
			q = put_varint(q, i == 3 ? UINT64_C(1) << 49 : 9);
			if (i == 3)
				for (int x = 0; x < extra; x++) {
					q[-1] |= 0x80;
					*q++ = 0;
				}
		}
		b[n++] = (4u << 3) | 2u;
		b[n++] = (uint8_t)(q - col);
		memcpy(b + n, col, (size_t)(q - col));
		n += (size_t)(q - col);
		cmp_exact(d, wrap(d, b, n));
	}
	/* The hostile ones above, mutated. */
	uint64_t seed = 3;
	for (size_t k = 0; k < sizeof(odd) / sizeof(*odd); k++) {
		n = body(b, odd[k]);
		mutate(d, wrap(d, b, n), 500, &seed);
	}
	printf("# %lu hostile datagrams refused by the hand decoder\n", cmp_refused - refused);
	CHECK(cmp_refused - refused > 20);
}

/* The fuzzer's seed corpus: records of a 2-byte little-endian length and a datagram. */
static void
test_corpus(void)
{
	DIR *dir = opendir(PMC_FUZZ_CORPUS);
	struct dirent *e;
	unsigned records = 0, counted = 0;
	uint64_t seed = 11;
	CHECK(dir);
	while ((e = readdir(dir))) {
		char path[4096];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", PMC_FUZZ_CORPUS, e->d_name);
		FILE *f = fopen(path, "rb");
		CHECK(f);
		CHECK(fseek(f, 0, SEEK_END) == 0);
		long size = ftell(f);
		CHECK(size >= 0 && fseek(f, 0, SEEK_SET) == 0);
		uint8_t *data = malloc((size_t)size + 1);
		CHECK(data);
		CHECK(fread(data, 1, (size_t)size, f) == (size_t)size);
		fclose(f);
		for (size_t at = 0; at + 2 <= (size_t)size;) {
			size_t len = data[at] | (size_t)data[at + 1] << 8;
			at += 2;
			if (len > (size_t)size - at)
				len = (size_t)size - at;
			records++;
			counted += (unsigned)cmp_exact(data + at, len);
			mutate(data + at, len, 100, &seed);
			at += len;
		}
		free(data);
	}
	closedir(dir);
	printf("# corpus: %u datagrams, %u batches counted both ways\n", records, counted);
	CHECK(records > 0 && counted > 0);
}

/* One aggregate's figures of @n samples each @v. */
static void
all_equal(const struct stats *s, uint64_t n, uint64_t v)
{
	CHECK(s->count == n);
	CHECK(s->min == v && s->max == v);
	CHECK(s->sum == n * v);
	CHECK(s->mean == (double)v);
	CHECK(s->m2 == 0);
	CHECK(stats_hist_get(s, stats_bucket(v)) == n);
}

/* A SampleRing's frame is counted where it lies: its writer may rewrite the fixed columns
 * between batch_scan_shared()'s check (every value below 2^49) and the count. The values
 * written then (UINT64_MAX, 2^63 + 2^49 + 7) are counted modulo 2^49 (STATS_TALLY_MAX_VALUE, 7),
 * so that the sums hold: each aggregate says its samples of that value, mean and spread with
 * them. A region alone (key 2), and one counted through two nodes (keys 5 and 37: its tallies
 * count in a second aggregate, the region's own). */
static void
test_rewritten_after_scan(void)
{
	enum { N = 1024 };
	static uint32_t region[N];
	static uint64_t wall[N], val[N];
	for (int i = 0; i < N; i++) {
		region[i] = i % 3 == 0 ? 2 : i % 3 == 1 ? 5 : 5 + CMP_KEYS / 2;
		wall[i] = 1000 + (uint64_t)i;
		val[i] = 5;
	}
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.tid = 1;
	b.n_region = N, b.region = region;
	b.n_wall_ns_fixed = N, b.wall_ns_fixed = wall;
	b.n_values_fixed = N, b.values_fixed = val;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = &b;
	size_t len = pmc__request__get_packed_size(&req);
	uint8_t *frame = malloc(len);
	CHECK(frame != NULL);
	pmc__request__pack(&req, frame);
	Pmc__SampleBatch got;
	struct batch_cols cols;
	CHECK(batch_scan_shared(frame, len, &got, &cols) == 0);
	CHECK(cols.in_place && cols.fixed);
	/* The writer, after the check. */
	uint64_t wide[2] = {UINT64_MAX, (UINT64_C(1) << 63) + (UINT64_C(1) << 49) + 7};
	for (int i = 0; i < N; i++) {
		memcpy((uint8_t *)(uintptr_t)cols.wall + 8 * i, &wide[0], 8);
		memcpy((uint8_t *)(uintptr_t)cols.values + 8 * i, &wide[1], 8);
	}
	cmp_free();
	cmp_init();
	struct cmp_side *c = &cmp_side[0];
	struct ingest g = {.b = &got,
	                   .cols = &cols,
	                   .keys = got.region,
	                   .ev_id = cmp_ev_id,
	                   .ne = 1,
	                   .resolve = cmp_resolve,
	                   .ctx = c,
	                   .budget = &c->budget};
	CHECK(ingest_batch(&g) == 0);
	CHECK(g.counted == N);
	const uint32_t k2 = 5 + CMP_KEYS / 2;
	CHECK(c->region[k2] == c->region[5] && c->node[k2] && c->node[k2] != c->node[5]);
	CHECK(!c->region[5]->via); /* its own beside each node's */
	const struct region_agg *aggs[4] = {c->region[2], c->region[5], c->node[5], c->node[k2]};
	const uint64_t n[4] = {(N + 2) / 3, N - (N + 2) / 3, (N + 1) / 3, N / 3};
	for (int a = 0; a < 4; a++) {
		all_equal(registry_region_wall(aggs[a]), n[a], STATS_TALLY_MAX_VALUE);
		all_equal(registry_region_stats(aggs[a], cmp_ev_id[0]), n[a], 7);
	}
	free(frame);
}

/* A batch of @n samples whose region column is @tmpl's, @ne events, values as value()
 * gives them (@wide: some too long to count in place), in fixed form or as varints. */
static uint8_t *
tmpl_batch(uint64_t *seed, const uint32_t *tmpl, size_t n, size_t ne, int wide, int fixed,
           size_t *len)
{
	uint64_t *wall = calloc(n + 1, 8), *values = calloc(n * ne + 1, 8);
	CHECK(wall && values);
	for (size_t i = 0; i < n; i++) {
		wall[i] = value(seed, 0);
		for (size_t j = 0; j < ne; j++)
			values[i * ne + j] = value(seed, wide);
	}
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.tid = 1;
	b.n_region = n;
	b.region = (uint32_t *)(uintptr_t)tmpl;
	if (fixed) {
		b.n_wall_ns_fixed = n, b.wall_ns_fixed = wall;
		b.n_values_fixed = n * ne, b.values_fixed = values;
	} else {
		b.n_wall_ns = n, b.wall_ns = wall;
		b.n_values = n * ne, b.values = values;
	}
	uint8_t *buf = pack_batch(&b, len);
	free(wall);
	free(values);
	return buf;
}

/* Side 1's batches counted with no context (count_side()): their regions resolved as side 1's
 * all the same. */
static bool side1_no_ctx;

static struct region_agg *
side1_resolve(void *ctx, uint32_t key, struct region_agg **node)
{
	CHECK(!ctx);
	return cmp_resolve(&cmp_side[1], key, node);
}

/* Counts @buf on side @side (1: in place, carried where @carry; 0: protobuf-c's arrays). */
static void
count_side(int side, const uint8_t *buf, size_t len, size_t ne, const uint32_t *ev_id, bool carry)
{
	static uint32_t keys[BATCH_MAX_SAMPLES];
	Pmc__SampleBatch fast;
	struct batch_cols cols;
	Pmc__Request *req = NULL;
	const Pmc__SampleBatch *b = &fast;
	Pmc__SampleBatch norm;
	if (side == 1) {
		CHECK(batch_scan(buf, len, &fast, &cols) == 0);
	} else {
		CHECK(req = pmc__request__unpack(NULL, len, buf));
		b = req->sample_batch;
		if (b->n_wall_ns_fixed || b->n_values_fixed) {
			norm = *b;
			norm.n_wall_ns = b->n_wall_ns_fixed, norm.wall_ns = b->wall_ns_fixed;
			norm.n_values = b->n_values_fixed, norm.values = b->values_fixed;
			b = &norm;
		}
	}
	for (size_t i = 0; i < b->n_region; i++)
		keys[i] = b->region[i];
	struct ingest g = {.b = b,
	                   .cols = side == 1 && cols.in_place ? &cols : NULL,
	                   .keys = keys,
	                   .ev_id = ev_id,
	                   .ne = ne,
	                   .resolve = side == 1 && side1_no_ctx ? side1_resolve : cmp_resolve,
	                   .ctx = side == 1 && side1_no_ctx ? NULL : &cmp_side[side],
	                   .budget = &cmp_side[side].budget,
	                   .carry = carry};
	CHECK(ingest_batch(&g) == 0);
	CHECK(g.counted + g.refused == b->n_region);
	if (req)
		pmc__request__free_unpacked(req, NULL);
}

/* Every region of @c whole: its statistics count each of its samples (none waits for a
 * fold). */
static void
all_whole(const struct cmp_side *c)
{
	for (uint32_t key = 0; key < CMP_KEYS; key++) {
		const struct region_agg *r = c->region[key];
		if (r)
			CHECK(registry_region_wall(r)->count == r->count);
	}
}

/*
 * Batches counted in place may leave their tallies unfolded for the next batch of the same
 * groups (struct ingest's carry): runs of such batches, among them batches of other groups,
 * of other events, with values too long to count in place, a group past the tallies' count,
 * a region through two nodes; each run counted with the carry and ingest_flush() after it on
 * one side, batch by batch from protobuf-c's arrays on the other: every aggregate the same.
 * Between two batches of a run the counts of the carried groups' statistics lag their
 * regions' (what shows that the carry was taken), and agree again after the flush, or after a
 * batch of the same groups counted without the carry.
 */
static void
test_carry(void)
{
	enum { RUNS = 120, MAXB = 12 };
	static uint32_t tmpl[2][BATCH_MAX_SAMPLES];
	static uint8_t *buf[MAXB];
	static size_t len[MAXB], ne_of[MAXB];
	static const uint32_t *ev_of[MAXB];
	uint64_t seed = 99;
	unsigned lagged = 0;
	cmp_free();
	cmp_init();
	for (unsigned run = 0; run < RUNS; run++) {
		unsigned kind = run % 6;
		size_t n = kind == 5 ? BATCH_MAX_SAMPLES : 1 + (size_t)(rng(&seed) % 600);
		size_t nb = kind == 5 ? MAXB : 2 + (size_t)(rng(&seed) % (MAXB - 1));
		uint32_t nkeys = kind == 5 ? 1 : 1 + (uint32_t)(rng(&seed) % 40);
		/* Two templates: the run's, and another for the batches that break it (a region
		 * through a second node among them: keys past CMP_KEYS / 2). */
		for (int t = 0; t < 2; t++)
			for (size_t i = 0; i < n; i++)
				tmpl[t][i] = (uint32_t)(rng(&seed) % nkeys) * 37u % (CMP_KEYS / 2) +
				             (t && rng(&seed) % 4 == 0 ? CMP_KEYS / 2 : 0);
		int fixed = (int)(rng(&seed) % 2);
		for (size_t k = 0; k < nb; k++) {
			uint64_t r = rng(&seed);
			bool other = kind == 1 && r % 3 == 0;
			ne_of[k] = kind == 2 && r % 4 == 0 ? 3 : 4;
			ev_of[k] = kind == 3 && r % 4 == 1 ? cmp_ev_id + 5 : cmp_ev_id;
			int wide = kind == 4 && r % 4 == 2;
			buf[k] = tmpl_batch(&seed, tmpl[other], n, ne_of[k], wide, fixed, &len[k]);
		}
		for (size_t k = 0; k < nb; k++) {
			count_side(1, buf[k], len[k], ne_of[k], ev_of[k], true);
			/* A carried group's statistics wait for the fold; its region's count not.
			 */
			const struct region_agg *r0 = cmp_side[1].region[tmpl[0][0]];
			if (k && r0 && registry_region_wall(r0)->count < r0->count)
				lagged++;
		}
		/* A batch of the same groups counted without the carry: folded in whole before
		 * ingest_batch() returns, with what the ones before left. */
		size_t extra_len = 0;
		uint8_t *extra = NULL;
		if (run % 4 == 0) {
			extra = tmpl_batch(&seed, tmpl[0], n, 4, 0, fixed, &extra_len);
			count_side(1, extra, extra_len, 4, cmp_ev_id, false);
			all_whole(&cmp_side[1]);
		}
		ingest_flush();
		all_whole(&cmp_side[1]);
		for (size_t k = 0; k < nb; k++) {
			count_side(0, buf[k], len[k], ne_of[k], ev_of[k], false);
			free(buf[k]);
		}
		if (extra) {
			count_side(0, extra, extra_len, 4, cmp_ev_id, false);
			free(extra);
		}
		for (uint32_t key = 0; key < CMP_KEYS; key++) {
			cmp_region(cmp_side[0].region[key], cmp_side[1].region[key]);
			cmp_region(cmp_side[0].node[key], cmp_side[1].node[key]);
		}
	}
	printf("# %u of the batches after a run's first found their group's figures waiting\n",
	       lagged);
	CHECK(lagged > RUNS);
}

/* A batch counted with @carry but no context leaves nothing to fold: ingest_carried() names
 * what waits by its context, and a NULL one would say nothing waits. */
static void
test_carry_no_ctx(void)
{
	static uint32_t tmpl[BATCH_MAX_SAMPLES];
	uint64_t seed = 7;
	cmp_free();
	cmp_init();
	for (size_t i = 0; i < 300; i++)
		tmpl[i] = (uint32_t)(rng(&seed) % 5) * 37u % (CMP_KEYS / 2);
	for (int k = 0; k < 4; k++) {
		size_t len;
		uint8_t *buf = tmpl_batch(&seed, tmpl, 300, 4, 0, k % 2, &len);
		side1_no_ctx = true;
		count_side(1, buf, len, 4, cmp_ev_id, true);
		side1_no_ctx = false;
		CHECK(!ingest_carried());
		all_whole(&cmp_side[1]); /* folded before ingest_batch() returned */
		count_side(0, buf, len, 4, cmp_ev_id, false);
		free(buf);
	}
	for (uint32_t key = 0; key < CMP_KEYS; key++) {
		cmp_region(cmp_side[0].region[key], cmp_side[1].region[key]);
		cmp_region(cmp_side[0].node[key], cmp_side[1].node[key]);
	}
}

int
main(void)
{
	int fds = pmc_test_count_fds();
	cmp_init();
	PMC_TEST_RUN(test_random_batches);
	PMC_TEST_RUN(test_hostile);
	PMC_TEST_RUN(test_corpus);
	PMC_TEST_RUN(test_rewritten_after_scan);
	PMC_TEST_RUN(test_carry);
	PMC_TEST_RUN(test_carry_no_ctx);
	cmp_free();
	CHECK(pmc_test_count_fds() == fds);
	return 0;
}
