/* Unit tests for client/lib/encoder.h, the client's one-pass SampleBatch encoder: over random
 * batches (samples of 0 to 16 values of every width, extrapolated values or none, region
 * definitions, losses, any tid) its bytes must be exactly pmc__request__pack()'s for the same
 * batch, and the daemon's hand decoder (daemon/model/batch.c) must take those without definitions.
 * Prints "ok N - name" per test; exits 1 at the first failed check. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/encoder.h"
#include "model/batch.h"
#include "pmc-test.h"
#include "pmc.pb-c.h"

#define MAX_N 600
#define MAX_K 16
#define N_IDS 200
#define NAME_MAX_ 127

static uint64_t rng = 42;

/* A value of a random width: small ones most often, as counts and ids are. */
static uint64_t
rand_value(void)
{
	uint64_t r = pmc_test_rng(&rng);
	unsigned bits = (unsigned)(pmc_test_rng(&rng) % 65);

	return bits == 64 ? r : r & ((UINT64_C(1) << bits) - 1);
}

static char *names[N_IDS];

static void
make_names(void)
{
	for (unsigned i = 0; i < N_IDS; i++) {
		size_t len = i == N_IDS - 1 ? NAME_MAX_ : 1 + pmc_test_rng(&rng) % NAME_MAX_;
		names[i] = malloc(len + 1);
		CHECK(names[i]);
		for (size_t c = 0; c < len; c++)
			names[i][c] = (char)('a' + pmc_test_rng(&rng) % 26);
		names[i][len] = 0;
	}
}

/* Call path ids for @paths batches: path p is region p % N_IDS (path 0 is none); PATH_KEEP:
 * the daemon's bound in the batches that send paths. */
#define PATH_KEEP (N_IDS + N_IDS / 2)
static uint32_t path_region[2 * N_IDS];

/* A path id of region @r: one of its two paths, or the region flagged (no path). */
static uint32_t
path_of(uint32_t r)
{
	switch (pmc_test_rng(&rng) % 3) {
	case 0:
		return r + N_IDS;
	case 1:
		return r ? r : N_IDS;
	default:
		return (pmc_test_rng(&rng) % 2 ? PMC_PATH_FLAG_DEEP : PMC_PATH_FLAG_FULL) | r;
	}
}

/* One random batch through both encoders. @with_defs: some regions not announced yet.
 * @paths: 1: the samples hold call path ids, which the encoder sends as their regions
 * (path_region), for a daemon without call paths; 2: it sends them as they are up to a bound
 * (path_keep), those above as their regions flagged PMC_PATH_FLAG_FULL, and flagged ones as
 * they are (call paths, the daemon's bound lower than the ids interned). @fixed: the wall times
 * and values in fixed form (a SampleRing's frame), whose bytes are protobuf-c's once it has
 * unpacked and packed them again (protobuf-c orders fields by number: the encoder puts the two
 * after the regions). */
static void
check_random_batch(int with_defs, int paths, int fixed)
{
	static uint8_t samples[MAX_N * (16 + MAX_K * 12)];
	static uint8_t buf[PMC_BATCH_BOUND(MAX_N, MAX_K, NAME_MAX_)];
	static uint8_t ref[sizeof(buf)];
	static uint32_t region[MAX_N], scaled[MAX_N], def_id[MAX_N], ref_def_id[MAX_N];
	static uint32_t first[MAX_N];
	static uint64_t wall[MAX_N], values[MAX_N * MAX_K];
	static float ratio[MAX_N * MAX_K];
	static char *def_name[MAX_N];
	uint8_t announced[N_IDS], ref_announced[N_IDS];
	size_t n = pmc_test_rng(&rng) % 8 == 0 ? 0 : pmc_test_rng(&rng) % (MAX_N + 1);
	size_t k = pmc_test_rng(&rng) % (MAX_K + 1), stride = pmc_sample_size(k), nr = 0, nd = 0;
	size_t nf = 0;
	int scale = pmc_test_rng(&rng) % 3 == 0;

	for (unsigned i = 0; i < N_IDS; i++)
		announced[i] = !with_defs || pmc_test_rng(&rng) % 4 != 0;
	memcpy(ref_announced, announced, sizeof(announced));
	for (size_t i = 0; i < n; i++) {
		struct pmc_sample *s = (struct pmc_sample *)(void *)(samples + i * stride);

		s->region = region[i] = (uint32_t)(pmc_test_rng(&rng) % N_IDS);
		if (paths)
			s->region = path_of(region[i]);
		if (paths == 2 && !(s->region & PMC_PATH_FLAGS))
			region[i] = s->region <= PATH_KEEP
			                    ? s->region
			                    : PMC_PATH_FLAG_FULL | path_region[s->region];
		else if (paths == 2)
			region[i] = s->region;
		s->wall = wall[i] = rand_value();
		s->scaled = scaled[i] = scale && pmc_test_rng(&rng) % 4 == 0 && k
		                                ? (uint32_t)pmc_test_rng(&rng) & ((1u << k) - 1)
		                                : 0;
		/* A first sample of a new path: its mark beside the scaled bits, sent apart. */
		if (scale && pmc_test_rng(&rng) % 5 == 0) {
			s->scaled |= PMC_SAMPLE_FIRST_PATH;
			first[nf++] = (uint32_t)i;
		}
		for (size_t j = 0; j < k; j++) {
			s->values[j] = values[i * k + j] = rand_value();
			float r = (float)(pmc_test_rng(&rng) % 1000000) / 1e6f;
			pmc_sample_ratio(s, k)[j] = r;
			if (scaled[i] >> j & 1)
				ratio[nr++] = r;
		}
		if (paths != 2 && !ref_announced[region[i]]) {
			ref_announced[region[i]] = 1;
			ref_def_id[nd] = region[i];
			def_name[nd++] = names[region[i]];
		}
	}

	struct pmc_batch b = {
	        .tid = (int32_t)(uint32_t)rand_value(),
	        .samples = samples,
	        .n = n,
	        .k = k,
	        .maybe_scaled = scale,
	        .announced = paths == 2 ? NULL : announced,
	        .names = names,
	        .path_region = paths ? path_region : NULL,
	        .path_keep = paths == 2 ? PATH_KEEP : 0,
	        .paths = paths == 2,
	        .fixed = fixed,
	        .def_id = def_id,
	};
	uint64_t *loss[] = {&b.dropped,          &b.sent_before,
	                    &b.pending,          &b.dropped_depth,
	                    &b.dropped_nesting,  &b.dropped_full,
	                    &b.dropped_read,     &b.dropped_exited,
	                    &b.dropped_names,    &b.dropped_long_names,
	                    &b.dropped_fd_limit, &b.dropped_unregistered,
	                    &b.dropped_no_daemon};
	for (size_t i = 0; i < sizeof(loss) / sizeof(loss[0]); i++)
		*loss[i] = pmc_test_rng(&rng) % 3 == 0 ? rand_value() : 0;

	Pmc__SampleBatch sb = PMC__SAMPLE_BATCH__INIT;
	sb.tid = b.tid;
	sb.n_region = n;
	sb.region = region;
	if (fixed) {
		sb.n_wall_ns_fixed = n;
		sb.wall_ns_fixed = wall;
		sb.n_values_fixed = n * k;
		sb.values_fixed = values;
	} else {
		sb.n_wall_ns = n;
		sb.wall_ns = wall;
		sb.n_values = n * k;
		sb.values = values;
	}
	if (nr) {
		sb.n_scaled = n;
		sb.scaled = scaled;
		sb.n_scale_ratio = nr;
		sb.scale_ratio = ratio;
	}
	sb.n_def_id = sb.n_def_name = nd;
	sb.def_id = ref_def_id;
	sb.def_name = def_name;
	sb.dropped = b.dropped;
	sb.sent_before = b.sent_before;
	sb.pending = b.pending;
	sb.dropped_depth = b.dropped_depth;
	sb.dropped_nesting = b.dropped_nesting;
	sb.dropped_full = b.dropped_full;
	sb.dropped_read = b.dropped_read;
	sb.dropped_exited = b.dropped_exited;
	sb.dropped_names = b.dropped_names;
	sb.dropped_long_names = b.dropped_long_names;
	sb.dropped_fd_limit = b.dropped_fd_limit;
	sb.dropped_unregistered = b.dropped_unregistered;
	sb.dropped_no_daemon = b.dropped_no_daemon;
	sb.n_first_path = nf;
	sb.first_path = first;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = &sb;
	size_t ref_len = pmc__request__get_packed_size(&req);
	CHECK(ref_len <= sizeof(ref));
	CHECK(pmc__request__pack(&req, ref) == ref_len);

	uint8_t *msg;
	size_t len = pmc_batch_encode(&b, buf, &msg);
	CHECK(msg >= buf && len <= PMC_BATCH_BOUND(n, k, NAME_MAX_));
	CHECK(len == ref_len);
	if (fixed) {
		static uint8_t again[sizeof(buf)];
		Pmc__Request *u = pmc__request__unpack(NULL, len, msg);
		CHECK(u != NULL);
		CHECK(pmc__request__pack(u, again) == ref_len);
		CHECK(memcmp(again, ref, len) == 0);
		pmc__request__free_unpacked(u, NULL);
	} else {
		CHECK(memcmp(msg, ref, len) == 0);
	}
	CHECK(b.n_def == nd);
	CHECK(nd == 0 || memcmp(def_id, ref_def_id, nd * sizeof(*def_id)) == 0);
	CHECK(memcmp(announced, ref_announced, sizeof(announced)) == 0);

	/* What the daemon takes by hand (no definitions, plain values) it takes as protobuf-c. */
	Pmc__SampleBatch out;
	if (nd == 0 && batch_decode(msg, len, &out) == 0) {
		CHECK(out.n_region == n && out.n_values == n * k && out.n_scale_ratio == nr);
		CHECK(n == 0 || memcmp(out.region, region, n * sizeof(*region)) == 0);
		CHECK(n == 0 || memcmp(out.wall_ns, wall, n * sizeof(*wall)) == 0);
		CHECK(n * k == 0 || memcmp(out.values, values, n * k * sizeof(*values)) == 0);
		CHECK(nr == 0 || memcmp(out.scale_ratio, ratio, nr * sizeof(*ratio)) == 0);
		CHECK(out.dropped == b.dropped && out.pending == b.pending);
		CHECK(out.n_first_path == nf);
		CHECK(nf == 0 || memcmp(out.first_path, first, nf * sizeof(*first)) == 0);
	}
}

static void
test_random_batches(void)
{
	for (int i = 0; i < 4000; i++)
		check_random_batch(i & 1, i % 6 / 2, i % 4 == 3);
}

/* The batch a client sends most: one event, nothing scaled, no losses, every region known. */
static void
test_plain_batch(void)
{
	static uint8_t samples[512 * 32], buf[PMC_BATCH_BOUND(512, 1, NAME_MAX_)];
	uint8_t announced[N_IDS];
	uint32_t def_id[512];

	memset(announced, 1, sizeof(announced));
	for (size_t i = 0; i < 512; i++) {
		struct pmc_sample *s =
		        (struct pmc_sample *)(void *)(samples + i * pmc_sample_size(1));

		s->region = 7;
		s->scaled = 0;
		s->wall = 1000 + i;
		s->values[0] = 300 + i;
	}
	struct pmc_batch b = {.tid = 1234,
	                      .samples = samples,
	                      .n = 512,
	                      .k = 1,
	                      .announced = announced,
	                      .names = names,
	                      .def_id = def_id,
	                      .sent_before = 512};
	uint8_t *msg;
	size_t len = pmc_batch_encode(&b, buf, &msg);
	Pmc__Request *req = pmc__request__unpack(NULL, len, msg);
	CHECK(req && req->body_case == PMC__REQUEST__BODY_SAMPLE_BATCH);
	CHECK(req->sample_batch->n_region == 512 && req->sample_batch->n_values == 512);
	CHECK(req->sample_batch->values[511] == 811 && req->sample_batch->wall_ns[0] == 1000);
	CHECK(req->sample_batch->n_def_id == 0 && req->sample_batch->n_scaled == 0);
	pmc__request__free_unpacked(req, NULL);
	Pmc__SampleBatch out;
	CHECK(batch_decode(msg, len, &out) == 0);
	CHECK(out.tid == 1234 && out.n_region == 512 && out.sent_before == 512);
}

int
main(void)
{
	make_names();
	for (unsigned p = 0; p < 2 * N_IDS; p++)
		path_region[p] = p % N_IDS;
	PMC_TEST_RUN(test_random_batches);
	PMC_TEST_RUN(test_plain_batch);
	for (unsigned i = 0; i < N_IDS; i++)
		free(names[i]);
	printf("1..%u\n", pmc_test_n);
	return 0;
}
