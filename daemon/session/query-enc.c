/* query-enc: a Query's reply encoded by hand (see query-enc.h). The rules are protobuf-c's
 * for proto3 fields: a scalar is written when it is not zero (a double when it is not == 0,
 * so -0.0 is left out and NaN written), a string when it is neither NULL nor empty, a
 * message when its pointer is not NULL (an empty one as its tag and a length of 0); an int32
 * below zero as the 10 bytes of its sign extension; the fields in the order of their numbers;
 * the elements of a repeated message field each with its tag. */
#include "session/query-enc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Wire types. */
#define WT_VARINT 0
#define WT_FIXED64 1
#define WT_LEN 2

size_t
query_enc_varint_size(uint64_t v)
{
	size_t n = 1;
	while (v >>= 7)
		n++;
	return n;
}

size_t
query_enc_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;
	for (; v >= 0x80; v >>= 7)
		p[n++] = (uint8_t)(v | 0x80);
	p[n++] = (uint8_t)v;
	return n;
}

/* Every field number here is below 16 (one byte of tag) but RegionStats' 60 (two). */
static inline size_t
tag_size(unsigned field)
{
	return field < 16 ? 1 : 2;
}

static inline uint8_t *
put_tag(uint8_t *p, unsigned field, unsigned wt)
{
	return p + query_enc_varint(p, (uint64_t)field << 3 | wt);
}

/* The size of a field, 0 when it is left out. */
static inline size_t
u64_size(unsigned field, uint64_t v)
{
	return v ? tag_size(field) + query_enc_varint_size(v) : 0;
}

static inline size_t
i32_size(unsigned field, int32_t v)
{
	return v ? tag_size(field) + (v < 0 ? 10 : query_enc_varint_size((uint64_t)v)) : 0;
}

static inline size_t
dbl_size(unsigned field, double v)
{
	return v != 0 ? tag_size(field) + 8 : 0;
}

static inline size_t
len_size(unsigned field, size_t len)
{
	return tag_size(field) + query_enc_varint_size(len) + len;
}

static inline uint8_t *
put_u64(uint8_t *p, unsigned field, uint64_t v)
{
	if (!v)
		return p;
	p = put_tag(p, field, WT_VARINT);
	return p + query_enc_varint(p, v);
}

static inline uint8_t *
put_i32(uint8_t *p, unsigned field, int32_t v)
{
	/* A negative int32: its sign extension to 64 bits (10 bytes). */
	return put_u64(p, field, (uint64_t)(int64_t)v);
}

static inline uint8_t *
put_bool(uint8_t *p, unsigned field, protobuf_c_boolean v)
{
	if (!v)
		return p;
	p = put_tag(p, field, WT_VARINT);
	*p++ = 1;
	return p;
}

static inline uint8_t *
put_dbl(uint8_t *p, unsigned field, double v)
{
	if (v == 0)
		return p;
	uint64_t bits;
	memcpy(&bits, &v, sizeof(bits));
	p = put_tag(p, field, WT_FIXED64);
	for (int i = 0; i < 8; i++)
		*p++ = (uint8_t)(bits >> (8 * i));
	return p;
}

static inline uint8_t *
put_len(uint8_t *p, unsigned field, size_t len)
{
	p = put_tag(p, field, WT_LEN);
	return p + query_enc_varint(p, len);
}

/* The sizes of a reply's nested messages and strings, found as it is sized and read back in
 * the same order as it is written, so that each is found once (protobuf-c sizes each message
 * again at every level above it). */
struct sizes {
	size_t *v;
	size_t n, cap, at;
	bool failed; /* out of memory */
};

static size_t
note(struct sizes *z, size_t v)
{
	if (z->failed)
		return v;
	if (z->n == z->cap) {
		size_t cap = z->cap ? 2 * z->cap : 256;
		size_t *nv = realloc(z->v, cap * sizeof(*nv));
		if (!nv) {
			z->failed = true;
			return v;
		}
		z->v = nv;
		z->cap = cap;
	}
	z->v[z->n++] = v;
	return v;
}

static inline size_t
next(struct sizes *z)
{
	return z->v[z->at++];
}

/* A string field's size, its length noted (0 for NULL or empty: left out). */
static size_t
str_size(struct sizes *z, unsigned field, const char *s)
{
	size_t len = note(z, s && *s ? strlen(s) : 0);
	return len ? len_size(field, len) : 0;
}

static uint8_t *
put_str(uint8_t *p, struct sizes *z, unsigned field, const char *s)
{
	size_t len = next(z);
	if (!len)
		return p;
	p = put_len(p, field, len);
	memcpy(p, s, len);
	return p + len;
}

/* Bucket: low = 1, high = 2, count = 3. */
static size_t
bucket_size(const Pmc__Bucket *b)
{
	return u64_size(1, b->low) + u64_size(2, b->high) + u64_size(3, b->count);
}

/* Stats: sum = 1, min = 2, max = 3, mean = 4, stddev = 5, p50 = 6, p90 = 7, p99 = 8,
 * buckets = 9. Its size noted, that of a field @field holding it returned (0 for NULL). */
static size_t
stats_size(struct sizes *z, unsigned field, const Pmc__Stats *st)
{
	if (!st)
		return 0;
	size_t n = u64_size(1, st->sum) + u64_size(2, st->min) + u64_size(3, st->max) +
	           dbl_size(4, st->mean) + dbl_size(5, st->stddev) + dbl_size(6, st->p50) +
	           dbl_size(7, st->p90) + dbl_size(8, st->p99);
	for (size_t i = 0; i < st->n_buckets; i++)
		n += len_size(9, bucket_size(st->buckets[i]));
	return len_size(field, note(z, n));
}

static uint8_t *
put_stats(uint8_t *p, struct sizes *z, unsigned field, const Pmc__Stats *st)
{
	if (!st)
		return p;
	p = put_len(p, field, next(z));
	p = put_u64(p, 1, st->sum);
	p = put_u64(p, 2, st->min);
	p = put_u64(p, 3, st->max);
	p = put_dbl(p, 4, st->mean);
	p = put_dbl(p, 5, st->stddev);
	p = put_dbl(p, 6, st->p50);
	p = put_dbl(p, 7, st->p90);
	p = put_dbl(p, 8, st->p99);
	for (size_t i = 0; i < st->n_buckets; i++) {
		const Pmc__Bucket *b = st->buckets[i];
		p = put_len(p, 9, bucket_size(b));
		p = put_u64(p, 1, b->low);
		p = put_u64(p, 2, b->high);
		p = put_u64(p, 3, b->count);
	}
	return p;
}

/* EventStats: name = 1, stats = 2, scaled_count = 3, scaled_ratio = 4, floor = 5,
 * too_short = 6; in RegionStats.events (6). */
static size_t
event_size(struct sizes *z, const Pmc__EventStats *es)
{
	size_t at = z->n;
	note(z, 0); /* its own size, known below */
	size_t n = str_size(z, 1, es->name) + stats_size(z, 2, es->stats) +
	           u64_size(3, es->scaled_count) + dbl_size(4, es->scaled_ratio) +
	           u64_size(5, es->floor) + (es->too_short ? 2 : 0);
	if (!z->failed)
		z->v[at] = n;
	return len_size(6, n);
}

static uint8_t *
put_event(uint8_t *p, struct sizes *z, const Pmc__EventStats *es)
{
	p = put_len(p, 6, next(z));
	p = put_str(p, z, 1, es->name);
	p = put_stats(p, z, 2, es->stats);
	p = put_u64(p, 3, es->scaled_count);
	p = put_dbl(p, 4, es->scaled_ratio);
	p = put_u64(p, 5, es->floor);
	return put_bool(p, 6, es->too_short);
}

/* Derived: name = 1, value = 2; in RegionStats.derived (8). */
static size_t
derived_size(struct sizes *z, const Pmc__Derived *d)
{
	size_t at = z->n;
	note(z, 0);
	size_t n = str_size(z, 1, d->name) + dbl_size(2, d->value);
	if (!z->failed)
		z->v[at] = n;
	return len_size(8, n);
}

static uint8_t *
put_derived(uint8_t *p, struct sizes *z, const Pmc__Derived *d)
{
	p = put_len(p, 8, next(z));
	p = put_str(p, z, 1, d->name);
	return put_dbl(p, 2, d->value);
}

/* RegionStats: pid = 1, comm = 2, name = 3, count = 4, wall_ns = 5, events = 6, uid = 7,
 * derived = 8, wall_floor = 9, wall_too_short = 10, path = 11, parent = 12, cgroup = 13,
 * ns_pid = 14, first_path_samples = 60; in QueryReply.regions (1). */
static size_t
region_size(struct sizes *z, const Pmc__RegionStats *rs)
{
	size_t at = z->n;
	note(z, 0);
	size_t n = i32_size(1, rs->pid) + str_size(z, 2, rs->comm) + str_size(z, 3, rs->name) +
	           u64_size(4, rs->count) + stats_size(z, 5, rs->wall_ns);
	for (size_t i = 0; i < rs->n_events; i++)
		n += event_size(z, rs->events[i]);
	n += u64_size(7, rs->uid);
	for (size_t i = 0; i < rs->n_derived; i++)
		n += derived_size(z, rs->derived[i]);
	n += u64_size(9, rs->wall_floor) + (rs->wall_too_short ? 2 : 0) + u64_size(11, rs->path) +
	     u64_size(12, rs->parent) + str_size(z, 13, rs->cgroup) + i32_size(14, rs->ns_pid) +
	     u64_size(60, rs->first_path_samples);
	if (!z->failed)
		z->v[at] = n;
	return len_size(1, n);
}

static uint8_t *
put_region(uint8_t *p, struct sizes *z, const Pmc__RegionStats *rs)
{
	p = put_len(p, 1, next(z));
	p = put_i32(p, 1, rs->pid);
	p = put_str(p, z, 2, rs->comm);
	p = put_str(p, z, 3, rs->name);
	p = put_u64(p, 4, rs->count);
	p = put_stats(p, z, 5, rs->wall_ns);
	for (size_t i = 0; i < rs->n_events; i++)
		p = put_event(p, z, rs->events[i]);
	p = put_u64(p, 7, rs->uid);
	for (size_t i = 0; i < rs->n_derived; i++)
		p = put_derived(p, z, rs->derived[i]);
	p = put_u64(p, 9, rs->wall_floor);
	p = put_bool(p, 10, rs->wall_too_short);
	p = put_u64(p, 11, rs->path);
	p = put_u64(p, 12, rs->parent);
	p = put_str(p, z, 13, rs->cgroup);
	p = put_i32(p, 14, rs->ns_pid);
	return put_u64(p, 60, rs->first_path_samples);
}

int
query_enc_size(struct query_enc *e, Pmc__QueryReply *qr)
{
	struct sizes z = {0};
	size_t n = 0, n_rs = qr->n_regions;
	for (size_t i = 0; i < n_rs; i++)
		n += region_size(&z, qr->regions[i]);
	if (z.failed) {
		free(z.v);
		return -ENOMEM;
	}
	/* The rest (fields 2 and up) after the regions (field 1), as protobuf-c orders them. */
	qr->n_regions = 0;
	n += pmc__query_reply__get_packed_size(qr);
	qr->n_regions = n_rs;
	e->qr = qr;
	e->sizes = z.v;
	e->n_sizes = z.n;
	e->len = n;
	return 0;
}

size_t
query_enc_pack(struct query_enc *e, uint8_t *out)
{
	Pmc__QueryReply *qr = e->qr;
	struct sizes z = {.v = e->sizes, .n = e->n_sizes};
	uint8_t *p = out;
	size_t n_rs = qr->n_regions;
	for (size_t i = 0; i < n_rs; i++)
		p = put_region(p, &z, qr->regions[i]);
	qr->n_regions = 0;
	p += pmc__query_reply__pack(qr, p);
	qr->n_regions = n_rs;
	return (size_t)(p - out);
}

void
query_enc_free(struct query_enc *e)
{
	free(e->sizes);
	e->sizes = NULL;
	e->n_sizes = 0;
}
