/* batch: a decoder of the one hot request, a Request holding a SampleBatch, that needs no
 * allocation. It takes only the plain form clients send (each field at most once, repeated
 * fields packed, no region definitions, no unknown fields) and leaves everything else to
 * protobuf-c, so that whatever it decodes, pmc__request__unpack() decodes the same. */
#pragma once

#include <stddef.h>
#include <stdint.h>

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
 * region, wall_ns and scaled and BATCH_MAX_VALUES in values and scale_ratio.
 * Return: 0, or -EAGAIN for any other datagram (well-formed or not), and for every one on a
 * big-endian machine: decode it with protobuf-c.
 */
int batch_decode(const uint8_t *buf, size_t len, Pmc__SampleBatch *out);
