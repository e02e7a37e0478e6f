/* ring: the SampleRing's writer and reader (ring.h says the layout and the rules). */
#include "wire/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The header's words, as uint64_t indices: each on a cache line of its own. */
#define W_HEAD 0
#define W_TAIL 8

static bool
bytes_ok(uint32_t bytes, uint32_t max)
{
	return bytes >= RING_MIN_BYTES && bytes <= max && bytes <= RING_MAX_BYTES &&
	       !(bytes & (bytes - 1u));
}

static uint64_t
load(const struct pmc_ring *r, unsigned w)
{
	return __atomic_load_n(&r->hdr[w], __ATOMIC_ACQUIRE);
}

static void
store(struct pmc_ring *r, unsigned w, uint64_t v)
{
	__atomic_store_n(&r->hdr[w], v, __ATOMIC_RELEASE);
}

static int
map(struct pmc_ring *r, int fd, uint32_t bytes)
{
	void *p = mmap(NULL, (size_t)RING_HEADER_BYTES + bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
	               fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*r = (struct pmc_ring){.hdr = p,
	                       .data = (uint8_t *)p + RING_HEADER_BYTES,
	                       .bytes = bytes,
	                       .limit = UINT64_MAX};
	return 0;
}

int
pmc_ring_create(struct pmc_ring *r, uint32_t bytes, int *fd)
{
	if (!bytes_ok(bytes, RING_MAX_BYTES))
		return -EINVAL;
	int f = memfd_create("pmc-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (f < 0)
		return -errno;
	int e = 0;
	if (ftruncate(f, (off_t)RING_HEADER_BYTES + bytes) < 0 ||
	    fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		e = -errno;
	if (!e)
		e = map(r, f, bytes);
	if (e) {
		close(f);
		return e;
	}
	*fd = f;
	return 0;
}

int
pmc_ring_map(struct pmc_ring *r, int fd, uint32_t bytes, uint32_t max)
{
	struct stat st;
	if (!bytes_ok(bytes, max))
		return -EINVAL;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (st.st_size < (off_t)RING_HEADER_BYTES + (off_t)bytes)
		return -EINVAL;
	return map(r, fd, bytes);
}

void
pmc_ring_unmap(struct pmc_ring *r)
{
	if (r->hdr)
		munmap(r->hdr, (size_t)RING_HEADER_BYTES + r->bytes);
	*r = (struct pmc_ring){0};
}

/* The writer: the reader's tail, or UINT64_MAX where it is impossible (behind the head by
 * more than the ring, or past it). */
static uint64_t
tail_of(const struct pmc_ring *r)
{
	uint64_t t = load(r, W_TAIL);
	return t <= r->pos && r->pos - t <= r->bytes ? t : UINT64_MAX;
}

int
pmc_ring_put(struct pmc_ring *r, uint64_t after, const void *buf, size_t len, bool *wake)
{
	size_t need = pmc_ring_frame_size(len), off = (size_t)(r->pos & (r->bytes - 1u));
	size_t pad = need > r->bytes - off ? r->bytes - off : 0;
	uint64_t t = tail_of(r), start = r->pos;
	*wake = false;
	if (len > r->bytes / 4u)
		return -EMSGSIZE;
	if (t == UINT64_MAX || load(r, W_HEAD) != r->pos)
		return -EPIPE; /* closed (or its head broken) */
	if (r->pos - t + pad + need > r->bytes)
		return -EAGAIN;
	if (pad) {
		uint32_t h[2] = {(uint32_t)(pad - RING_FRAME_HEADER), RING_PAD};
		memcpy(r->data + off, h, sizeof(h));
		memset(r->data + off + sizeof(h), 0, sizeof(uint64_t));
		off = 0;
	}
	uint32_t h[2] = {(uint32_t)len, RING_REQUEST};
	memcpy(r->data + off, h, sizeof(h));
	memcpy(r->data + off + sizeof(h), &after, sizeof(after));
	memcpy(r->data + off + RING_FRAME_HEADER, buf, len);
	/* Published unless the reader closed the ring meanwhile (its bit in head). */
	uint64_t expect = start;
	if (!__atomic_compare_exchange_n(&r->hdr[W_HEAD], &expect, start + pad + need, false,
	                                 __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		return -EPIPE;
	r->pos = start + pad + need;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	*wake = __atomic_load_n(&r->hdr[W_TAIL], __ATOMIC_RELAXED) == start;
	return 0;
}

bool
pmc_ring_retract(struct pmc_ring *r, uint64_t start)
{
	uint64_t expect = r->pos;
	if (start > r->pos)
		return false;
	if (load(r, W_TAIL) == start &&
	    __atomic_compare_exchange_n(&r->hdr[W_HEAD], &expect, start, false, __ATOMIC_ACQ_REL,
	                                __ATOMIC_ACQUIRE)) {
		r->pos = start;
		return true;
	}
	/* Dropped (and not closed) after the frame: taken back where the reader had not consumed
	 * it when it dropped the ring; its tail, read after the drop's bit, is then final, and
	 * may have passed the padding before the frame (a look that found the frame not due). */
	if (load(r, W_HEAD) != (r->pos | RING_DROPPED_BIT))
		return false;
	uint64_t t = load(r, W_TAIL);
	if (t < start || t >= r->pos)
		return false;
	r->pos = start;
	return true;
}

uint64_t
pmc_ring_tail(const struct pmc_ring *r)
{
	return load(r, W_TAIL);
}

int
pmc_ring_peek(struct pmc_ring *r, struct pmc_ring_frame *f)
{
	/* The head looked at once: the padding frames skipped below are those it covers (at
	 * most two), however fast a writer publishes more. */
	uint64_t head = r->limit != UINT64_MAX ? r->limit : load(r, W_HEAD) & ~RING_CLOSED_BIT;
	for (;;) {
		uint64_t avail = head - r->pos;
		if (head == r->pos)
			return -EAGAIN;
		if (head < r->pos || avail > r->bytes || avail % RING_ALIGN)
			return -EBADMSG;
		size_t off = (size_t)(r->pos & (r->bytes - 1u));
		/* Each word of the header read once (the writer may change them meanwhile: what
		 * is checked is what is used); a frame starts 16-aligned. */
		const uint32_t *hw = (const uint32_t *)(const void *)(r->data + off);
		uint32_t h[2] = {__atomic_load_n(&hw[0], __ATOMIC_RELAXED),
		                 __atomic_load_n(&hw[1], __ATOMIC_RELAXED)};
		uint64_t after =
		        __atomic_load_n((const uint64_t *)(const void *)(hw + 2), __ATOMIC_RELAXED);
		if (h[0] > r->bytes)
			return -EBADMSG;
		size_t size = pmc_ring_frame_size(h[0]);
		if (size > r->bytes - off || size > avail)
			return -EBADMSG;
		if (h[1] == RING_PAD) {
			if (off + size != r->bytes)
				return -EBADMSG;
			r->pos += size;
			store(r, W_TAIL, r->pos);
			continue;
		}
		if (h[1] != RING_REQUEST)
			return -EBADMSG;
		*f = (struct pmc_ring_frame){
		        .data = r->data + off + RING_FRAME_HEADER,
		        .len = h[0],
		        .after = after,
		        .size = (uint32_t)size,
		};
		return 0;
	}
}

void
pmc_ring_consume(struct pmc_ring *r, const struct pmc_ring_frame *f)
{
	r->pos += f->size;
	store(r, W_TAIL, r->pos);
}

bool
pmc_ring_idle(const struct pmc_ring *r)
{
	if (r->limit != UINT64_MAX)
		return r->limit == r->pos;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return (__atomic_load_n(&r->hdr[W_HEAD], __ATOMIC_RELAXED) & ~RING_CLOSED_BIT) == r->pos;
}

void
pmc_ring_drop(struct pmc_ring *r)
{
	/* Release: the tail stored before it is what a writer that sees the bit reads. */
	(void)__atomic_fetch_or(&r->hdr[W_HEAD], RING_DROPPED_BIT, __ATOMIC_RELEASE);
}

void
pmc_ring_close(struct pmc_ring *r)
{
	if (r->limit != UINT64_MAX)
		return;
	/* The writer's next swap fails; what it published before is the limit (acquire: its
	 * frames' bytes). A broken head is kept as it is: peek refuses it. */
	r->limit = __atomic_fetch_or(&r->hdr[W_HEAD], RING_CLOSED_BIT, __ATOMIC_ACQ_REL) &
	           ~RING_CLOSED_BIT;
}
