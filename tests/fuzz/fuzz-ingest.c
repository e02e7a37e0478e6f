/* libFuzzer target: a datagram counted by the daemon in place (batch_scan(), ingest_batch()
 * reading wall_ns and values where they lie) and from protobuf-c's unpack; whatever the hand
 * decoder takes, protobuf-c must take as the same batch, and when the session would count it,
 * every aggregate of the two registries must be the same (tests/lib/pmc-test-ingest.h); a
 * difference aborts. Seeds: tests/fuzz/corpus, as fuzz-batch's. */
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
	return 0;
}
