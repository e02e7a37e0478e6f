/* encoder: the client's one frequent message, a Request holding a SampleBatch, encoded in one
 * pass over a thread's samples as they lie in its ring, into the very bytes protobuf-c's
 * pmc__request__pack() makes of the same batch (tests/unit/test-encoder.c compares them):
 * without protobuf-c's size pass, its second pass over each packed field and its per-element
 * calls, nor a copy of the samples into arrays first. Also announces the batch's new regions
 * (def_id, def_name) in the same pass. Internal to the client library (not installed);
 * header-only, like reader.h, so that the test can use it alone. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A sample's path id with one of these bits set is no call path but the region in its low 16
 * bits (proto/pmc.proto, PathLimits): begun deeper than the paths kept, or the library's path
 * table was full. */
#define PMC_PATH_FLAG_DEEP 0x40000000u
#define PMC_PATH_FLAG_FULL 0x20000000u
#define PMC_PATH_FLAGS (PMC_PATH_FLAG_DEEP | PMC_PATH_FLAG_FULL)
#define PMC_PATH_REGION_MASK 0xffffu

/**
 * struct pmc_sample - one sample in a thread's ring
 * @region: the call path id of the region (or its region id, flagged: PMC_PATH_FLAGS)
 * @scaled: bit j set: value j was extrapolated (multiplexed during the region)
 * @wall: the region's wall time, ns
 * @values: k values (k: the thread's events), then k floats, running/enabled of each
 *          extrapolated value (the others unset); pmc_sample_ratio()
 *
 * A ring slot is pmc_sample_size(k) bytes. @scaled's bit PMC_SAMPLE_FIRST_PATH (above any event's)
 * marks a sample kept out of the figures: a region inside which a call path began for the first
 * time on its thread (SampleBatch.first_path).
 */
#define PMC_SAMPLE_FIRST_PATH (UINT32_C(1) << 31)
struct pmc_sample {
	uint32_t region;
	uint32_t scaled;
	uint64_t wall;
	uint64_t values[];
};

static inline size_t
pmc_sample_size(size_t k)
{
	return (sizeof(struct pmc_sample) + k * (sizeof(uint64_t) + sizeof(float)) + 7) &
	       ~(size_t)7;
}

static inline float *
pmc_sample_ratio(struct pmc_sample *s, size_t k)
{
	return (float *)(void *)(s->values + k);
}

static inline const struct pmc_sample *
pmc_sample_at(const void *samples, size_t stride, size_t i)
{
	return (const struct pmc_sample *)(const void *)((const uint8_t *)samples + i * stride);
}

/**
 * struct pmc_batch - what pmc_batch_encode() puts in one SampleBatch
 * @tid: SampleBatch.tid
 * @samples: @n samples of pmc_sample_size(@k) bytes each, borrowed
 * @n: how many samples
 * @k: values per sample (the thread's events)
 * @maybe_scaled: false when no sample has a bit in @scaled: then neither scaled nor
 *                scale_ratio is looked at; true: they are sent when some sample has one
 * @announced: per region id, whether this connection was told its name: each id of the batch
 *             not marked is marked and defined (def_id, def_name), in order of first use;
 *             NULL: none defined
 * @names: per region id, its name (for def_name)
 * @path_region: NULL: every sample id is sent as it is (a test's region ids); else per call
 *               path id, its region, for the ids above @path_keep
 * @path_keep: with @path_region, sample ids up to it are sent as they are (call paths); one
 *             above it is sent as its region: flagged PMC_PATH_FLAG_FULL with @paths (a path
 *             past the daemon's bound), bare without (a daemon that takes no call paths:
 *             @path_keep 0); a flagged id stays flagged with @paths, bare without
 * @paths: the connection agreed on call paths
 * @fixed: the wall times and values in fixed form (wall_ns_fixed, values_fixed: a daemon that
 *         takes a SampleRing takes it), written right after the regions; else as varints
 * @def_id: room for @n ids: receives the ids defined (the caller unmarks them when the batch
 *          is not sent)
 * @n_def: set to how many
 * @dropped...: the SampleBatch fields of the same names
 */
struct pmc_batch {
	int32_t tid;
	const void *samples;
	size_t n, k;
	bool maybe_scaled;
	uint8_t *announced;
	char *const *names;
	const uint32_t *path_region;
	uint32_t path_keep;
	bool paths;
	bool fixed;
	uint32_t *def_id;
	size_t n_def;
	uint64_t dropped, sent_before, pending;
	uint64_t end; /* the index after the last sample (SampleBatch.end) */
	uint64_t dropped_depth, dropped_nesting, dropped_full, dropped_read, dropped_exited,
	        dropped_names, dropped_long_names, dropped_fd_limit, dropped_unregistered,
	        dropped_no_daemon;
};

/* Room for the header pmc_batch_encode() puts before the batch: a tag and a length. */
#define PMC_BATCH_HEAD 6

/* The most bytes pmc_batch_encode() writes for @n samples of @k values whose region names
 * are at most @name_max bytes long: per sample its region, wall, scaled and first_path
 * varints, values and ratios, and a definition; then 21 fields' tags, lengths and varints at
 * most. */
#define PMC_BATCH_BOUND(n, k, name_max)                                                            \
	(PMC_BATCH_HEAD + 21 * 16 + 16 +                                                           \
	 (size_t)(n) * (5 + 10 + 5 + 5 + (size_t)(k) * (10 + sizeof(float)) + 5 + 1 + 5 +          \
	                (size_t)(name_max)))

static inline uint8_t *
pmc_put_varint(uint8_t *p, uint64_t v)
{
	/* Most values here take one or two bytes. */
	if (v < 0x80) {
		*p = (uint8_t)v;
		return p + 1;
	}
	if (v < 0x4000) {
		p[0] = (uint8_t)(v | 0x80);
		p[1] = (uint8_t)(v >> 7);
		return p + 2;
	}
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

static inline size_t
pmc_varint_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* A varint field (one-byte tag @tag, or two bytes from field 16 on) unless @v is 0, as
 * protobuf-c leaves out a proto3 scalar at its default. */
static inline uint8_t *
pmc_put_field(uint8_t *p, unsigned field, uint64_t v)
{
	if (!v)
		return p;
	return pmc_put_varint(pmc_put_varint(p, (uint64_t)field << 3), v);
}

/*
 * A length-delimited field's payload is written at @head + 1 + room, where room is the length
 * of the varint of @bound, the most it may hold; pmc_close_field() then writes the tag and the
 * real length before it, moving the payload back when that length takes fewer bytes.
 */
static inline uint8_t *
pmc_open_field(uint8_t *head, size_t bound)
{
	return head + 1 + pmc_varint_len(bound);
}

static inline uint8_t *
pmc_close_field(uint8_t *head, unsigned field, uint8_t *payload, uint8_t *end)
{
	size_t len = (size_t)(end - payload);
	uint8_t *at = pmc_put_varint(head + 1, len);

	head[0] = (uint8_t)(field << 3 | 2);
	if (at != payload)
		memmove(at, payload, len);
	return at + len;
}

/* A length-delimited field of the @len bytes at @src, at @p, at or before @src (its tag and
 * length take at most 7 bytes). */
static inline uint8_t *
pmc_put_bytes(uint8_t *p, unsigned field, const uint8_t *src, size_t len)
{
	p = pmc_put_varint(p, field << 3 | 2);
	p = pmc_put_varint(p, len);
	memmove(p, src, len);
	return p + len;
}

/* The samples' regions at @q, their wall times at *@w and values at *@v, each advanced; new
 * regions defined in @b->def_id, counted in *@nd. Return: the end of the regions. @k is a
 * constant where it is inlined from pmc_encode_samples_k(). */
static inline __attribute__((always_inline)) uint8_t *
pmc_encode_samples(struct pmc_batch *b, const void *s0, size_t stride, size_t k, uint8_t *q,
                   uint8_t **wp, uint8_t **vp, size_t *ndp)
{
	uint8_t *w = *wp, *v = *vp;
	size_t nd = *ndp;
	uint32_t last = UINT32_MAX; /* no region */
	const uint32_t keep = b->path_region ? b->path_keep : UINT32_MAX;

	for (size_t i = 0; i < b->n; i++) {
		const struct pmc_sample *s = pmc_sample_at(s0, stride, i);
		uint32_t id = s->region;

		/* Flagged ids are above any path id. */
		if (id > keep) {
			uint32_t r = id & PMC_PATH_FLAGS ? id & PMC_PATH_REGION_MASK
			                                 : b->path_region[id];
			id = !b->paths ? r : id & PMC_PATH_FLAGS ? id : (PMC_PATH_FLAG_FULL | r);
		}
		q = pmc_put_varint(q, id);
		/* A run of one region, as loops make, is looked up once. */
		if (id != last && b->announced && !b->announced[id]) {
			b->announced[id] = 1;
			b->def_id[nd++] = id;
		}
		last = id;
		if (b->fixed) {
			memcpy(w, &s->wall, sizeof(s->wall));
			w += sizeof(s->wall);
			memcpy(v, s->values, k * sizeof(s->values[0]));
			v += k * sizeof(s->values[0]);
			continue;
		}
		w = pmc_put_varint(w, s->wall);
		for (size_t j = 0; j < k; j++)
			v = pmc_put_varint(v, s->values[j]);
	}
	*wp = w;
	*vp = v;
	*ndp = nd;
	return q;
}

/* pmc_encode_samples() unrolled for the usual event counts. */
static inline uint8_t *
pmc_encode_samples_k(struct pmc_batch *b, const void *s0, size_t stride, uint8_t *q, uint8_t **w,
                     uint8_t **v, size_t *nd)
{
	switch (b->k) {
	case 1:
		return pmc_encode_samples(b, s0, stride, 1, q, w, v, nd);
	case 2:
		return pmc_encode_samples(b, s0, stride, 2, q, w, v, nd);
	case 4:
		return pmc_encode_samples(b, s0, stride, 4, q, w, v, nd);
	default:
		return pmc_encode_samples(b, s0, stride, b->k, q, w, v, nd);
	}
}

/**
 * pmc_batch_encode() - encode Request { sample_batch = @b }
 * @b: the batch; @b->announced and @b->def_id are written, @b->n_def set
 * @buf: PMC_BATCH_BOUND(@b->n, @b->k, longest name) bytes
 * @start: receives where the message starts, in the first PMC_BATCH_HEAD bytes of @buf
 *
 * Return: the message's length: pmc__request__pack()'s bytes for the same batch.
 */
static inline size_t
pmc_batch_encode(struct pmc_batch *b, uint8_t *buf, uint8_t **start)
{
	const size_t n = b->n, k = b->k, stride = pmc_sample_size(k);
	const void *s0 = b->samples;
	uint8_t *p = buf + PMC_BATCH_HEAD, *pay;
	size_t nd = 0;

	if (b->tid)
		p = pmc_put_varint(pmc_put_varint(p, 1 << 3),
		                   (uint64_t)(int64_t)b->tid); /* int32: sign-extended */
	if (n) {
		/* One pass over the samples: the regions in place, the wall times and the values
		 * into the room after them (the bound holds them), moved into place after. */
		uint8_t *head = p;
		uint8_t *wall = pmc_open_field(p, n * 5) + n * 5 + 8, *w = wall;
		uint8_t *values = wall + n * 10 + 8, *v = values;

		pay = pmc_open_field(p, n * 5);
		uint8_t *q = pmc_encode_samples_k(b, s0, stride, pay, &w, &v, &nd);
		p = pmc_close_field(head, 2, pay, q);
		p = pmc_put_bytes(p, b->fixed ? 61 : 3, wall, (size_t)(w - wall));
		if (k)
			p = pmc_put_bytes(p, b->fixed ? 62 : 4, values, (size_t)(v - values));
	}
	/* scaled: left out, as the ratios are, when no value was extrapolated. */
	uint32_t any_scaled = 0, any_first = 0;
	if (n && b->maybe_scaled) {
		pay = pmc_open_field(p, n * 5);
		uint8_t *q = pay;
		for (size_t i = 0; i < n; i++) {
			uint32_t sc = pmc_sample_at(s0, stride, i)->scaled;

			any_first |= sc & PMC_SAMPLE_FIRST_PATH;
			sc &= ~PMC_SAMPLE_FIRST_PATH;
			q = pmc_put_varint(q, sc);
			any_scaled |= sc;
		}
		if (any_scaled)
			p = pmc_close_field(p, 5, pay, q);
	}
	if (nd) {
		pay = pmc_open_field(p, nd * 5);
		uint8_t *q = pay;
		for (size_t i = 0; i < nd; i++)
			q = pmc_put_varint(q, b->def_id[i]);
		p = pmc_close_field(p, 6, pay, q);
		for (size_t i = 0; i < nd; i++) {
			const char *name = b->names[b->def_id[i]];
			size_t len = strlen(name);

			*p++ = 7 << 3 | 2;
			p = pmc_put_varint(p, len);
			memcpy(p, name, len);
			p += len;
		}
	}
	b->n_def = nd;
	p = pmc_put_field(p, 8, b->dropped);
	if (any_scaled) {
		pay = pmc_open_field(p, n * k * sizeof(float));
		uint8_t *q = pay;
		for (size_t i = 0; i < n; i++) {
			const struct pmc_sample *s = pmc_sample_at(s0, stride, i);
			const float *ratio = (const float *)(const void *)(s->values + k);

			for (uint32_t sc = s->scaled & ~PMC_SAMPLE_FIRST_PATH, j = 0; sc;
			     sc >>= 1, j++) {
				if (!(sc & 1))
					continue;
				uint32_t bits;

				memcpy(&bits, &ratio[j], sizeof(bits));
				for (unsigned c = 0; c < 4; c++)
					*q++ = (uint8_t)(bits >> (8 * c)); /* little-endian */
			}
		}
		p = pmc_close_field(p, 9, pay, q);
	}
	p = pmc_put_field(p, 10, b->sent_before);
	p = pmc_put_field(p, 11, b->dropped_depth);
	p = pmc_put_field(p, 12, b->dropped_nesting);
	p = pmc_put_field(p, 13, b->dropped_full);
	p = pmc_put_field(p, 14, b->dropped_read);
	p = pmc_put_field(p, 15, b->dropped_exited);
	p = pmc_put_field(p, 16, b->dropped_names);
	p = pmc_put_field(p, 17, b->dropped_long_names);
	p = pmc_put_field(p, 18, b->pending);
	p = pmc_put_field(p, 19, b->dropped_fd_limit);
	p = pmc_put_field(p, 20, b->dropped_unregistered);
	p = pmc_put_field(p, 21, b->dropped_no_daemon);
	p = pmc_put_field(p, 22, b->end);
	if (any_first) {
		/* first_path (field 60, a two-byte tag): the samples kept out, by index. */
		const unsigned tag = 60 << 3 | 2;
		uint8_t *q = p + 2 + pmc_varint_len(n * 5);

		pay = q;
		for (size_t i = 0; i < n; i++)
			if (pmc_sample_at(s0, stride, i)->scaled & PMC_SAMPLE_FIRST_PATH)
				q = pmc_put_varint(q, i);
		size_t flen = (size_t)(q - pay);
		p[0] = (uint8_t)(tag | 0x80);
		p[1] = (uint8_t)(tag >> 7);
		uint8_t *at = pmc_put_varint(p + 2, flen);
		memmove(at, pay, flen);
		p = at + flen;
	}

	/* Request.sample_batch (field 3) around it, its header just before it. */
	size_t len = (size_t)(p - (buf + PMC_BATCH_HEAD));
	uint8_t *s = buf + PMC_BATCH_HEAD - 1 - pmc_varint_len(len);

	s[0] = 3 << 3 | 2;
	pmc_put_varint(s + 1, len);
	*start = s;
	return (size_t)(p - s);
}
