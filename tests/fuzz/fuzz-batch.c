/* libFuzzer target: the daemon's hand decoder of SampleBatch requests (daemon/model/batch.c)
 * against protobuf-c. Input: one datagram. Whenever batch_decode() takes it,
 * pmc__request__unpack() must decode it to the same SampleBatch, field by field (columns in
 * fixed form as wall_ns and values), and whatever batch_scan_shared() takes it takes; a
 * difference aborts. Seeds: tests/fuzz/corpus (whose records start with a 2-byte length: the fuzzer
 * finds the datagrams inside) and any plain batch. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/batch.h"
#include "wire/wire.h"

static void
same_array(size_t n_a, const void *a, size_t n_b, const void *b, size_t size)
{
	if (n_a != n_b || (a == NULL) != (n_a == 0) || (b == NULL) != (n_b == 0))
		abort();
	if (n_a && memcmp(a, b, n_a * size) != 0)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Pmc__SampleBatch fast;
	struct batch_cols cols;
	/* What the reader of a ring's frame takes in place, batch_decode() takes. */
	int shared = batch_scan_shared(data, size, &fast, &cols);
	int r = batch_decode(data, size, &fast);
	if (shared != 0 && shared != -EAGAIN)
		abort();
	if (r == -EAGAIN) {
		if (shared == 0)
			abort();
		return 0;
	}
	if (r != 0)
		abort();
	Pmc__Request *req = pmc__request__unpack(NULL, size, data);
	if (!req || req->body_case != PMC__REQUEST__BODY_SAMPLE_BATCH || req->base.n_unknown_fields)
		abort();
	const Pmc__SampleBatch *b = req->sample_batch;
	if (fast.base.descriptor != b->base.descriptor || fast.base.n_unknown_fields ||
	    b->base.n_unknown_fields || fast.tid != b->tid || fast.dropped != b->dropped ||
	    fast.sent_before != b->sent_before || fast.n_def_id || b->n_def_id || fast.n_def_name ||
	    b->n_def_name)
		abort();
	/* The losses by reason, and what the thread still holds. */
	if (fast.dropped_depth != b->dropped_depth || fast.dropped_nesting != b->dropped_nesting ||
	    fast.dropped_full != b->dropped_full || fast.dropped_read != b->dropped_read ||
	    fast.dropped_exited != b->dropped_exited || fast.dropped_names != b->dropped_names ||
	    fast.dropped_long_names != b->dropped_long_names || fast.pending != b->pending ||
	    fast.dropped_fd_limit != b->dropped_fd_limit ||
	    fast.dropped_unregistered != b->dropped_unregistered ||
	    fast.dropped_no_daemon != b->dropped_no_daemon)
		abort();
	same_array(fast.n_region, fast.region, b->n_region, b->region, sizeof(*b->region));
	/* Columns in fixed form (wall_ns_fixed, values_fixed) are given as wall_ns and values:
	 * protobuf-c's batch then has that form alone. */
	bool fixed = b->n_wall_ns_fixed || b->n_values_fixed;
	if ((fixed && (b->n_wall_ns || b->n_values)) || fast.n_wall_ns_fixed || fast.n_values_fixed)
		abort();
	same_array(fast.n_wall_ns, fast.wall_ns, fixed ? b->n_wall_ns_fixed : b->n_wall_ns,
	           fixed ? b->wall_ns_fixed : b->wall_ns, sizeof(*b->wall_ns));
	same_array(fast.n_values, fast.values, fixed ? b->n_values_fixed : b->n_values,
	           fixed ? b->values_fixed : b->values, sizeof(*b->values));
	same_array(fast.n_scaled, fast.scaled, b->n_scaled, b->scaled, sizeof(*b->scaled));
	same_array(fast.n_scale_ratio, fast.scale_ratio, b->n_scale_ratio, b->scale_ratio,
	           sizeof(*b->scale_ratio));
	same_array(fast.n_first_path, fast.first_path, b->n_first_path, b->first_path,
	           sizeof(*b->first_path));
	if (fast.end != b->end)
		abort();
	pmc__request__free_unpacked(req, NULL);
	return 0;
}
