/* libFuzzer target: a datagram counted by the daemon in place (batch_scan(), ingest_batch()
 * reading wall_ns and values where they lie) and from protobuf-c's unpack; whatever the hand
 * decoder takes, protobuf-c must take as the same batch, and when the session would count it,
 * every aggregate of the two registries must be the same (tests/lib/pmc-test-ingest.h); a
 * difference aborts. Input: one datagram, and the same bytes read as records of a 2-byte
 * little-endian length and a datagram (the form of tests/fuzz/corpus, its seeds). */
#include <stdint.h>
#include <stdlib.h>

#define INGEST_CHECK(expr)                                                                         \
	do {                                                                                       \
		if (!(expr))                                                                       \
			abort();                                                                   \
	} while (0)
#include "pmc-test-ingest.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		cmp_init();
		ready = 1;
	}
	(void)cmp_datagram(data, size);
	for (size_t at = 0; at + 2 <= size;) {
		size_t len = data[at] | (size_t)data[at + 1] << 8;
		at += 2;
		if (len > size - at)
			len = size - at;
		(void)cmp_datagram(data + at, len);
		at += len;
	}
	return 0;
}
