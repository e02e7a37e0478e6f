/* pmc-test-dist: feeds a daemon samples of known values, speaking the wire protocol by hand
 * (as pmc-test-raw does), for the tests of the metrics page's histograms.
 *
 *   SOCKET NAME LO HI [STEP]  say Hello, register this thread (page-faults), send region NAME
 *                             one sample of each value LO, LO + STEP, ... up to HI (STEP 1
 *                             by default), as its wall time in ns and its page-faults count,
 *                             call Status (so that all was counted), print "sent=N"
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire.h"

/* Samples per SampleBatch. */
#define BATCH 512

static int
call(int fd, Pmc__Request *req, Pmc__Response **resp)
{
	int fds[WIRE_MAX_FDS];
	size_t n = 0;
	int r = pmc_wire_call(fd, req, 5000, fds, WIRE_MAX_FDS, &n, resp);

	for (size_t i = 0; i < n; i++)
		close(fds[i]);
	return r;
}

/* @req answered without an error: 0, else -1 after saying why. */
static int
call_ok(int fd, Pmc__Request *req, const char *what)
{
	Pmc__Response *resp;
	int r = call(fd, req, &resp);

	if (r < 0) {
		fprintf(stderr, "%s: %s\n", what, strerror(-r));
		return -1;
	}
	r = resp->error;
	if (r)
		fprintf(stderr, "%s: %s (%s)\n", what, strerror(r), resp->message);
	pmc__response__free_unpacked(resp, NULL);
	return r ? -1 : 0;
}

int
main(int argc, char **argv)
{
	if (argc != 5 && argc != 6) {
		fprintf(stderr, "usage: pmc-test-dist SOCKET NAME LO HI [STEP]\n");
		return 2;
	}
	uint64_t lo = strtoull(argv[3], NULL, 10), hi = strtoull(argv[4], NULL, 10);
	uint64_t step = argc == 6 ? strtoull(argv[5], NULL, 10) : 1, sent = 0;
	if (!step || lo > hi || hi > UINT64_C(1) << 53 || step > UINT64_C(1) << 53) {
		fprintf(stderr, "pmc-test-dist: want LO <= HI <= 2^53 and 0 < STEP <= 2^53\n");
		return 2;
	}
	int fd = pmc_wire_connect(argv[1]);
	if (fd < 0) {
		fprintf(stderr, "connect: %s\n", strerror(-fd));
		return 1;
	}

	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	if (call_ok(fd, &req, "hello") < 0)
		return 1;

	char *events[1] = {"page-faults"};
	Pmc__RegisterThread rt = PMC__REGISTER_THREAD__INIT;
	rt.tid = getpid();
	rt.n_events = 1;
	rt.events = events;
	req = (Pmc__Request)PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_REGISTER_THREAD;
	req.register_thread = &rt;
	if (call_ok(fd, &req, "register") < 0)
		return 1;

	static uint32_t region[BATCH];
	static uint64_t wall[BATCH], values[BATCH];
	uint32_t def_id[1] = {1};
	char *def_name[1] = {argv[2]};
	for (uint64_t v = lo; v <= hi;) {
		size_t n = 0;
		for (; n < BATCH && v <= hi; n++, v += step) {
			region[n] = 1;
			wall[n] = values[n] = v;
		}
		Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
		b.tid = getpid();
		b.n_region = n, b.region = region;
		b.n_wall_ns = n, b.wall_ns = wall;
		b.n_values = n, b.values = values;
		if (!sent) {
			b.n_def_id = 1, b.def_id = def_id;
			b.n_def_name = 1, b.def_name = def_name;
		}
		b.sent_before = sent;
		req = (Pmc__Request)PMC__REQUEST__INIT;
		req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
		req.sample_batch = &b;
		int r = pmc_wire_send(fd, &req.base, NULL, 0, 0);
		if (r < 0) {
			fprintf(stderr, "batch: %s\n", strerror(-r));
			return 1;
		}
		sent += n;
	}

	Pmc__Status st = PMC__STATUS__INIT;
	req = (Pmc__Request)PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_STATUS;
	req.status = &st;
	if (call_ok(fd, &req, "status") < 0)
		return 1;
	printf("sent=%" PRIu64 "\n", sent);
	return 0;
}
