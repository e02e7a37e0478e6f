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

/**
 * query_enc_reply_size() - the bytes pmc__query_reply__pack() writes of @qr
 * @qr: borrowed; its regions, events and buckets as protobuf-c's structures say them (a NULL
 * wall_ns or stats is left out, as protobuf-c does). n_regions is set to 0 while the rest is
 * sized, then restored: no other thread may read @qr meanwhile.
 */
size_t query_enc_reply_size(Pmc__QueryReply *qr);

/**
 * query_enc_reply_pack() - write @qr at @out, the bytes pmc__query_reply__pack() writes
 * @out: room for query_enc_reply_size(@qr) bytes
 * Return: the bytes written (that size). Same conditions as query_enc_reply_size().
 */
size_t query_enc_reply_pack(Pmc__QueryReply *qr, uint8_t *out);

/** query_enc_varint_size() - the bytes of @v as a protobuf varint (1 to 10) */
size_t query_enc_varint_size(uint64_t v);

/** query_enc_varint() - @v as a protobuf varint at @p; return: its bytes */
size_t query_enc_varint(uint8_t *p, uint64_t v);
