/* libFuzzer target: a state file (--state) of arbitrary bytes, decoded and loaded into the
 * registry by state_load_buffer(), what the daemon runs at start-up (state_load() checks
 * the file, reads it and hands its bytes to it).
 *
 * Whatever loads must then be usable: it is encoded again (state_encode(), what every save
 * runs), that encoding must load, and a second round trip must give the same bytes (the
 * processes come back in reverse order at each load, hence two; the retired figures of
 * /metrics in the order saved, with or without a bound on them); and the daemon's real
 * session code answers a Query, a Status and a Reset over it on a SOCK_SEQPACKET
 * connection. A crash, a leak, a sanitizer report or a difference fails.
 *
 * Seeds: tests/fuzz/corpus-state, valid state files written by `test-state seeds DIR`: those
 * named *-crc32 with the checksum (the frame of pmc.State, fields 14 and 15), the others
 * files of before it, which load unchecked and so reach the decoder. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kernel/perf.h"
#include "model/state.h"
#include "session/server.h"
#include "session/session.h"
#include "wire/wire.h"

static struct server *srv;

static void
forget(struct model *s)
{
	registry_free(&s->reg);
	s->samples = s->batches = s->dropped = s->lost = s->rejected = s->state_saved_ns = 0;
	s->reg.evicted = s->reg.retired_dropped = 0;
}

/* Encodes what @s holds, then forgets it. */
static void
encode(struct model *s, uint8_t **out, size_t *len)
{
	if (state_encode(s, 1, out, len) < 0)
		abort();
	forget(s);
}

static void
drain_replies(int fd)
{
	uint8_t buf[1 << 16];
	int fds[WIRE_MAX_FDS];
	size_t n;
	for (;;) {
		ssize_t r =
		        pmc_wire_recv(fd, buf, sizeof(buf), fds, WIRE_MAX_FDS, &n, MSG_DONTWAIT);
		for (size_t i = 0; i < n; i++)
			close(fds[i]);
		if (r < 0 && r != -EMSGSIZE && r != -EBADMSG)
			return;
	}
}

/* Query (every process, every region), Status and Reset of the loaded figures. */
static void
serve(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	if (session_new(srv, sv[1]) < 0)
		abort();
	struct session *s = pmc_list_first(&srv->sessions, struct session, link);
	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	Pmc__Query q = PMC__QUERY__INIT;
	Pmc__Status st = PMC__STATUS__INIT;
	Pmc__Reset rs = PMC__RESET__INIT;
	Pmc__Request req[4] = {PMC__REQUEST__INIT, PMC__REQUEST__INIT, PMC__REQUEST__INIT,
	                       PMC__REQUEST__INIT};
	req[0].body_case = PMC__REQUEST__BODY_HELLO, req[0].hello = &h;
	req[1].body_case = PMC__REQUEST__BODY_QUERY, req[1].query = &q;
	req[2].body_case = PMC__REQUEST__BODY_STATUS, req[2].status = &st;
	req[3].body_case = PMC__REQUEST__BODY_RESET, req[3].reset = &rs;
	int open = 1;
	for (size_t i = 0; open && i < 4; i++) {
		(void)pmc_wire_send(sv[0], &req[i].base, NULL, 0, MSG_DONTWAIT);
		open = session_pump(s, 1) == 0;
		drain_replies(sv[0]);
	}
	session_free(s);
	drain_replies(sv[0]);
	close(sv[0]);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!srv) {
		int dummy = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		struct policy pol;
		policy_init(&pol);
		perf_setup();
		if (server_new(dummy, &pol, &srv) < 0)
			abort();
	}
	struct model *m = &srv->model;
	/* As a daemon without --metrics (the retired figures kept as they are), or with it
	 * before the load (a bound of 16 retired regions, 4 per uid, applied at load). */
	if (registry_retire_enable(&m->reg, size & 1 ? 16 : 0) < 0)
		abort();
	int r = state_load_buffer(m, data, size);
	if (r == -EBADMSG) {
		if (registry_first(&m->reg) || m->reg.n_procs || m->reg.n_regions ||
		    m->reg.n_paths || registry_first_retired(&m->reg) || m->reg.n_retired ||
		    m->reg.retired_dropped)
			abort(); /* refused, yet something kept */
		return 0;
	}
	if (r < 0)
		abort(); /* -ENOMEM: not with inputs this small */
	size_t procs = m->reg.n_procs, regions = m->reg.n_regions, paths = m->reg.n_paths;
	size_t retired = m->reg.n_retired;
	if (m->reg.max_retired && retired > m->reg.max_retired)
		abort(); /* over the bound */

	uint8_t *e1, *e2, *e3;
	size_t n1, n2, n3;
	if (state_encode(m, 1, &e1, &n1) < 0)
		abort();
	serve();
	forget(m);
	if (state_load_buffer(m, e1, n1) < 0 || m->reg.n_procs != procs ||
	    m->reg.n_regions != regions || m->reg.n_paths != paths || m->reg.n_retired != retired)
		abort();
	encode(m, &e2, &n2);
	if (state_load_buffer(m, e2, n2) < 0)
		abort();
	encode(m, &e3, &n3);
	if (n1 != n3 || memcmp(e1, e3, n1) != 0)
		abort();
	free(e1);
	free(e2);
	free(e3);
	return 0;
}
