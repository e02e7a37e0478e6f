/* Writes the fuzzer's seed corpus: one file per request kind, well formed, in the
 * harness's format (2-byte little-endian length, then the packed Request), using
 * thread id 0 where the harness substitutes its own. Run by the target regen-seeds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

static void
put(FILE *f, const Pmc__Request *r)
{
	size_t len = pmc__request__get_packed_size(r);
	uint8_t *buf = malloc(len);
	pmc__request__pack(r, buf);
	fputc((int)(len & 0xff), f);
	fputc((int)(len >> 8), f);
	fwrite(buf, 1, len, f);
	free(buf);
}

static FILE *
open_seed(const char *dir, const char *name)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f) {
		perror(path);
		exit(1);
	}
	return f;
}

int
main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : ".";
	char *events[2] = {"page-faults", "task-clock"};
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.n_events = 2;
	rt.events = events;
	Pmc__Request reg = PMC__REQUEST__INIT;
	reg.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	reg.register_thread = &rt;

	uint32_t region[3] = {1, 2, 1}, scaled[3] = {1, 0, 3}, def_id[2] = {1, 2};
	uint64_t wall[3] = {10, 20, 30}, values[6] = {1, 2, 3, 4, 5, 6};
	float ratio[3] = {0.5f, 0.25f, 0.75f};
	char *def_name[2] = {"parse", "emit"};
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.n_region = 3, b.region = region;
	b.n_wall_ns = 3, b.wall_ns = wall;
	b.n_values = 6, b.values = values;
	b.n_scaled = 3, b.scaled = scaled;
	b.n_scale_ratio = 3, b.scale_ratio = ratio;
	b.n_def_id = 2, b.def_id = def_id;
	b.n_def_name = 2, b.def_name = def_name;
	Pmc__Request batch = PMC__REQUEST__INIT;
	batch.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	batch.sample_batch = &b;

	Pmc__ThreadExit te = PMC__THREAD_EXIT__INIT;
	Pmc__Request exit_req = PMC__REQUEST__INIT;
	exit_req.body_case = PMC__REQUEST__BODY_THREAD_EXIT;
	exit_req.thread_exit = &te;
	Pmc__Query q = PMC__QUERY__INIT;
	q.region = "parse";
	Pmc__Request query = PMC__REQUEST__INIT;
	query.body_case = PMC__REQUEST__BODY_QUERY;
	query.query = &q;
	Pmc__Reset rs = PMC__RESET__INIT;
	Pmc__Request reset = PMC__REQUEST__INIT;
	reset.body_case = PMC__REQUEST__BODY_RESET;
	reset.reset = &rs;
	Pmc__Status st = PMC__STATUS__INIT;
	Pmc__Request status = PMC__REQUEST__INIT;
	status.body_case = PMC__REQUEST__BODY_STATUS;
	status.status = &st;
	Pmc__ListEvents le = PMC__LIST_EVENTS__INIT;
	Pmc__Request list = PMC__REQUEST__INIT;
	list.body_case = PMC__REQUEST__BODY_LIST_EVENTS;
	list.list_events = &le;
	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = 7;
	Pmc__Request hello = PMC__REQUEST__INIT;
	hello.body_case = PMC__REQUEST__BODY_HELLO;
	hello.hello = &h;

	/* Call paths: parse, parse;emit, parse;emit;parse, then samples in each. */
	uint32_t path_id[3] = {1, 2, 3}, path_parent[3] = {0, 1, 2}, path_region[3] = {1, 2, 1};
	Pmc__Define d = PMC__DEFINE__INIT;
	d.n_def_id = 2, d.def_id = def_id;
	d.n_def_name = 2, d.def_name = def_name;
	d.n_path_id = 3, d.path_id = path_id;
	d.n_path_parent = 3, d.path_parent = path_parent;
	d.n_path_region = 3, d.path_region = path_region;
	Pmc__Request define = PMC__REQUEST__INIT;
	define.body_case = PMC__REQUEST__BODY_DEFINE;
	define.define = &d;
	uint32_t path_sample[3] = {3, 2, 0x40000001};
	Pmc__SampleBatch pb = b;
	pb.region = path_sample;
	pb.n_def_id = pb.n_def_name = 0;
	Pmc__Request path_batch = PMC__REQUEST__INIT;
	path_batch.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	path_batch.sample_batch = &pb;
	Pmc__Query tq = PMC__QUERY__INIT;
	tq.tree = 1;
	tq.stream = 1;
	Pmc__Request tree_query = PMC__REQUEST__INIT;
	tree_query.body_case = PMC__REQUEST__BODY_QUERY;
	tree_query.query = &tq;

	FILE *f = open_seed(dir, "tree");
	put(f, &reg);
	put(f, &define);
	put(f, &path_batch);
	put(f, &tree_query);
	put(f, &exit_req);
	/* The harness agrees on call paths for an input of even length. */
	if (ftell(f) % 2)
		fputc(0, f);
	fclose(f);
	f = open_seed(dir, "session");
	put(f, &reg);
	put(f, &batch);
	put(f, &query);
	put(f, &exit_req);
	fclose(f);
	f = open_seed(dir, "admin");
	put(f, &status);
	put(f, &reset);
	put(f, &query);
	fclose(f);
	f = open_seed(dir, "events");
	put(f, &list);
	fclose(f);
	f = open_seed(dir, "bad-version");
	put(f, &hello);
	fclose(f);
	f = open_seed(dir, "batch-unregistered");
	put(f, &batch);
	fclose(f);
	/* A batch that reports regions lost while unregistered and while no daemon answered. */
	Pmc__SampleBatch lb = b;
	lb.dropped_unregistered = 3;
	lb.dropped_no_daemon = 7;
	Pmc__Request loss_batch = PMC__REQUEST__INIT;
	loss_batch.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	loss_batch.sample_batch = &lb;
	f = open_seed(dir, "batch-losses");
	put(f, &reg);
	put(f, &loss_batch);
	fclose(f);
	/* The same batch with its columns in fixed form, as a SampleRing's frame holds it. */
	Pmc__SampleBatch fb = b;
	fb.n_wall_ns = fb.n_values = 0;
	fb.wall_ns = fb.values = NULL;
	fb.n_wall_ns_fixed = 3, fb.wall_ns_fixed = wall;
	fb.n_values_fixed = 6, fb.values_fixed = values;
	Pmc__Request fixed_batch = PMC__REQUEST__INIT;
	fixed_batch.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	fixed_batch.sample_batch = &fb;
	f = open_seed(dir, "batch-fixed");
	put(f, &reg);
	put(f, &fixed_batch);
	fclose(f);
	return 0;
}
