/* query-enc: a Query's reply encoded by hand, byte for byte as protobuf-c encodes it, in a
 * fraction of its time. protobuf-c's generic encoder walks each message's descriptor field by
 * field, twice (its size, then its bytes); a full query at 100,000 regions spent over a third
 * of its daemon time there. Here each message of a region (RegionStats, Stats, EventStats,
 * Derived, Bucket) is written by code of its own; what else a QueryReply holds (its counts and
 * losses, a few fields) is still protobuf-c's. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "pmc.pb-c.h"

/* A QueryReply sized by query_enc_size(), to be written by query_enc_pack(). */
struct query_enc {
	Pmc__QueryReply *qr; /* borrowed */
	size_t len;          /* the bytes pmc__query_reply__pack() writes of it */
	size_t *sizes;       /* its nested messages' and strings' sizes, in the order written */
	size_t n_sizes;
};

/**
 * query_enc_size() - size @qr as pmc__query_reply__pack() would, in @e (e->len)
 * @qr: borrowed until query_enc_pack(), unchanged meanwhile; its regions, events and buckets
 * as protobuf-c's structures say them (a NULL wall_ns or stats is left out, as protobuf-c
 * does). n_regions is set to 0 while the rest is sized, then restored: no other thread may
 * read @qr meanwhile.
 * Return: 0, or -ENOMEM (@e holds nothing). On 0, query_enc_free(@e) frees what it holds.
 */
int query_enc_size(struct query_enc *e, Pmc__QueryReply *qr);

/**
 * query_enc_pack() - write the QueryReply @e sized at @out, the bytes pmc__query_reply__pack()
 * writes
 * @out: room for e->len bytes
 * Return: the bytes written (e->len). Same conditions as query_enc_size(); once per sizing.
 */
size_t query_enc_pack(struct query_enc *e, uint8_t *out);

/** query_enc_free() - free what query_enc_size() noted in @e (nothing: a no-op) */
void query_enc_free(struct query_enc *e);

/** query_enc_varint_size() - the bytes of @v as a protobuf varint (1 to 10) */
size_t query_enc_varint_size(uint64_t v);

/** query_enc_varint() - @v as a protobuf varint at @p; return: its bytes */
size_t query_enc_varint(uint8_t *p, uint64_t v);
