/* ring: the SampleRing (pmc.proto) both sides map, its layout, its writer (libpmcclient, the
 * benchmarks and tests) and its reader (the daemon). One writer and one reader, each of
 * which may be hostile to the other: every word the other side writes is read once, and
 * checked before it is used.
 *
 * A memfd of RING_HEADER_BYTES, then `bytes` of data (a power of two). The header's words,
 * each on a cache line of its own (uint64_t, little-endian as the machine):
 *   head   (byte 0)    the bytes of frames the writer has published, counted from 0: moved by
 *                      the writer with a compare-and-swap from its last value (release, after
 *                      the frame's bytes); RING_CLOSED_BIT set in it by the reader when it
 *                      closes the ring (an atomic or), after which no frame is published;
 *   tail   (byte 64)   the reader's: the bytes it has consumed (release): their room is the
 *                      writer's again.
 * Position p is data byte p % bytes. A frame: a header of RING_FRAME_HEADER bytes, u32 len,
 * u32 kind, u64 after (the datagrams the writer had sent on its connection before it), then
 * len bytes, padded to RING_ALIGN. No frame wraps around: where one would, a RING_PAD frame
 * fills the data to its end. A RING_REQUEST frame holds a packed Request, as a datagram would.
 *
 * Waking. The writer stores head, then (a full fence) reads tail: when tail was where its
 * frame began, the reader may be idle, and the writer sends a RingWake datagram. The reader,
 * before it sleeps, (a full fence) reads head again (pmc_ring_idle()): one of the two sees the
 * other's store, so no frame waits unseen.
 *
 * Closing (the daemon stops). The reader sets RING_CLOSED_BIT in head (pmc_ring_close()): the
 * frames published before it are all it reads, and it reads them all; a writer's swap after it
 * fails, and the frame is not sent (its samples wait for the next daemon). Either way the
 * writer knows, at once, without waiting for the reader.
 *
 * Dropping (the daemon lets one connection go, reading no more of its ring). The reader sets
 * RING_DROPPED_BIT in head (pmc_ring_drop()): a writer's swap after it fails, and a frame it
 * published that the reader had not consumed (the tail still at its start) may be taken back
 * (pmc_ring_retract()): nothing will read it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RING_HEADER_BYTES 4096u
/* The data's size: a power of two in [RING_MIN_BYTES, RING_MAX_BYTES]. */
#define RING_MIN_BYTES (64u << 10)
#define RING_MAX_BYTES (16u << 20)
#define RING_FRAME_HEADER 16u
#define RING_ALIGN 16u

enum { RING_PAD = 0, RING_REQUEST = 1 };
#define RING_CLOSED_BIT (UINT64_C(1) << 63)
#define RING_DROPPED_BIT (UINT64_C(1) << 62)

/**
 * struct pmc_ring - one side's view of a SampleRing
 * @hdr: the header's words (mapped shared)
 * @data: the data
 * @bytes: the data's size
 * @pos: the writer's head, or the reader's tail: its own word, as it last stored it
 * @limit: the reader's, once it closed the ring: the head then (UINT64_MAX: open)
 */
struct pmc_ring {
	uint64_t *hdr;
	uint8_t *data;
	uint32_t bytes;
	uint64_t pos;
	uint64_t limit;
};

/**
 * struct pmc_ring_frame - a frame pmc_ring_peek() found
 * @data: its bytes, in the shared mapping: the writer may change them while they are read
 *        (copy them before anything reads a byte twice)
 * @len: how many
 * @after: the datagrams its writer had sent before it (as the writer says)
 * @size: what it takes of the ring, header and padding included
 */
struct pmc_ring_frame {
	const uint8_t *data;
	uint32_t len;
	uint64_t after;
	uint32_t size;
};

/**
 * pmc_ring_frame_size() - what a frame of @len bytes takes of a ring
 */
static inline size_t
pmc_ring_frame_size(size_t len)
{
	return RING_FRAME_HEADER + ((len + RING_ALIGN - 1u) & ~(size_t)(RING_ALIGN - 1u));
}

/**
 * pmc_ring_create() - make a ring of @bytes data bytes for its writer
 * @r: out: the writer's view, mapped read-write
 * @bytes: a power of two in [RING_MIN_BYTES, RING_MAX_BYTES]
 * @fd: out: the memfd (close-on-exec), sealed against shrinking and growing, to send the
 *      reader; the caller's to close (the mapping stays)
 * Return: 0, -EINVAL for a bad @bytes, or the -errno of memfd_create(), ftruncate(), the
 * seals or mmap() (nothing is left open then).
 */
int pmc_ring_create(struct pmc_ring *r, uint32_t bytes, int *fd);

/**
 * pmc_ring_map() - map a ring the writer sent, for its reader
 * @r: out: the reader's view (tail 0, open)
 * @fd: the memfd, borrowed (the caller checks its seals and kind: it must not shrink)
 * @bytes: the data size the writer said, a power of two in [RING_MIN_BYTES, @max]
 * @max: the most the reader takes
 * Return: 0, -EINVAL for a bad @bytes or a file smaller than the ring, or mmap()'s -errno.
 */
int pmc_ring_map(struct pmc_ring *r, int fd, uint32_t bytes, uint32_t max);

/**
 * pmc_ring_unmap() - unmap either side's view (nothing when none is mapped); @r is zeroed
 */
void pmc_ring_unmap(struct pmc_ring *r);

/**
 * pmc_ring_put() - the writer publishes @len bytes at @buf as a RING_REQUEST frame
 * @r: the writer's view
 * @after: the datagrams sent on the connection before this frame
 * @buf: the bytes, copied
 * @len: at most a quarter of the ring
 * @wake: out: whether the reader had read every earlier frame (it may be idle: send it a
 *        RingWake)
 *
 * Not thread-safe: one writer. Never waits.
 * Return: 0 (published: a reader that reads on, or closes the ring, reads it), -EAGAIN (no
 * room: the reader is behind), -EMSGSIZE (@len over a quarter of the ring), or -EPIPE (the
 * reader closed it, or broke its words: not sent; the ring is of no further use).
 */
int pmc_ring_put(struct pmc_ring *r, uint64_t after, const void *buf, size_t len, bool *wake);

/**
 * pmc_ring_retract() - the writer takes its last frame back, which began at @start, where the
 * reader has not read it (its tail still there) and has not closed the ring, or has dropped
 * it: for a frame whose RingWake found the reader gone (its socket hung up), so that the frame
 * is not counted sent
 * Return: true when it is taken back (the ring as before it; a dropped ring stays dropped),
 * false when the reader may read it, or did (closed since, or its tail moved).
 */
bool pmc_ring_retract(struct pmc_ring *r, uint64_t start);

/**
 * pmc_ring_tail() - the reader's tail, as the writer sees it now (acquire): it moves when the
 * reader consumes a frame
 */
uint64_t pmc_ring_tail(const struct pmc_ring *r);

/**
 * pmc_ring_peek() - the reader's next frame, RING_PAD frames consumed on the way
 * @r: the reader's view
 * @f: out: the frame, left in the ring until pmc_ring_consume()
 * Return: 0, -EAGAIN when there is none, or -EBADMSG when the writer's head or a frame's
 * header is impossible (the ring is then of no further use).
 */
int pmc_ring_peek(struct pmc_ring *r, struct pmc_ring_frame *f);

/**
 * pmc_ring_consume() - the reader is done with frame @f (the last pmc_ring_peek()'s): its room
 * goes back to the writer
 */
void pmc_ring_consume(struct pmc_ring *r, const struct pmc_ring_frame *f);

/**
 * pmc_ring_idle() - the reader, before it sleeps: whether the ring is empty, looked at after a
 * full fence (so that a frame published meanwhile either is seen here or has its writer send
 * a RingWake)
 */
bool pmc_ring_idle(const struct pmc_ring *r);

/**
 * pmc_ring_close() - the reader closes the ring: no frame is published after this; those
 * published before are what pmc_ring_peek() goes on giving (the reader is to read them all,
 * as their writers count them sent)
 */
void pmc_ring_close(struct pmc_ring *r);

/**
 * pmc_ring_drop() - the reader lets the ring go without reading more of it (its connection
 * closed for good, as the daemon ends it): no frame is published after this, and one
 * published but not consumed may be taken back (pmc_ring_retract()). The reader is to unmap
 * it next, whatever its words say.
 */
void pmc_ring_drop(struct pmc_ring *r);
