/* libFuzzer target: decode and dispatch of every request kind by the daemon's real
 * session code, over a real SOCK_SEQPACKET connection.
 *
 * Input: a sequence of datagrams, each a 2-byte little-endian length and its bytes.
 * Before them the harness says Hello, so that every handler is reachable (agreeing on
 * call paths for an input of even length, so that both kinds of batch are). A datagram
 * that decodes as a Request naming thread id 0 is re-packed with the harness's own
 * thread id (a fuzzer cannot know it), so that registration, batches and thread exit
 * are exercised for real; every other datagram goes as it is. The daemon's replies
 * are read and their fds closed, so a leak of fds or memory shows. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <event2/event.h>

#include "perf.h"
#include "server.h"
#include "session.h"
#include "wire.h"

static struct server *srv;

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

static void
send_datagram(int fd, const uint8_t *p, size_t len)
{
	Pmc__Request *req = NULL;
	if (pmc_wire_unpack_request(p, len, &req) == 0) {
		int32_t *tid = NULL;
		if (req->body_case == PMC__REQUEST__BODY_REGISTER_THREAD)
			tid = &req->register_thread->tid;
		else if (req->body_case == PMC__REQUEST__BODY_SAMPLE_BATCH)
			tid = &req->sample_batch->tid;
		else if (req->body_case == PMC__REQUEST__BODY_THREAD_EXIT)
			tid = &req->thread_exit->tid;
		if (tid && *tid == 0) {
			*tid = (int32_t)syscall(SYS_gettid);
			(void)pmc_wire_send(fd, &req->base, NULL, 0, MSG_DONTWAIT);
			pmc__request__free_unpacked(req, NULL);
			return;
		}
		pmc__request__free_unpacked(req, NULL);
	}
	(void)send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
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
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	if (session_new(srv, sv[1]) < 0)
		abort();
	struct session *s = pmc_list_first(&srv->sessions, struct session, link);

	Pmc__Hello h = PMC__HELLO__INIT;
	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.call_paths = size % 2 == 0; /* batches of call paths (Define), or of regions */
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;
	(void)pmc_wire_send(sv[0], &req.base, NULL, 0, 0);

	int open = session_pump(s, 1) == 0;
	while (open && size >= 2) {
		size_t len = (size_t)data[0] | (size_t)data[1] << 8;
		data += 2;
		size -= 2;
		if (len > size)
			len = size;
		send_datagram(sv[0], data, len);
		data += len;
		size -= len;
		open = session_pump(s, 4) == 0;
		drain_replies(sv[0]);
	}
	if (open)
		session_free(s);
	else
		session_free(s); /* closed by the daemon for bad input: same teardown */
	drain_replies(sv[0]);
	close(sv[0]);
	return 0;
}
