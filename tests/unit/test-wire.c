/* Wire round trips over a real SOCK_SEQPACKET socketpair: messages, fds, and the
 * datagrams a receiver must refuse. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pmc-test.h"
#include "wire.h"

static void
pair(int sv[2])
{
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
}

/* Sends a RegisterReply for thread 7 on @sock with the @n @fds (borrowed). */
static void
send_register_reply(int sock, const int *fds, size_t n)
{
	Pmc__Response resp = PMC__RESPONSE__INIT;
	Pmc__RegisterReply rr = PMC__REGISTER_REPLY__INIT;
	rr.tid = 7;
	resp.body_case = PMC__RESPONSE__BODY_REGISTER_REPLY;
	resp.register_reply = &rr;
	CHECK(pmc_wire_send(sock, &resp.base, fds, n, 0) == 0);
}

static void
test_wire_roundtrip_batch(void)
{
	int sv[2];
	pair(sv);
	uint32_t region[3] = {1, 2, 1};
	uint64_t wall[3] = {10, 20, 30};
	uint64_t values[6] = {1, 2, 3, 4, 5, UINT64_MAX};
	uint32_t def_id[1] = {2};
	char *def_name[1] = {"parse"};
	Pmc__SampleBatch b = PMC__SAMPLE_BATCH__INIT;
	b.tid = 42;
	b.n_region = 3, b.region = region;
	b.n_wall_ns = 3, b.wall_ns = wall;
	b.n_values = 6, b.values = values;
	b.n_def_id = 1, b.def_id = def_id;
	b.n_def_name = 1, b.def_name = def_name;
	Pmc__Request req = PMC__REQUEST__INIT;
	req.body_case = PMC__REQUEST__BODY_SAMPLE_BATCH;
	req.sample_batch = &b;
	CHECK(pmc_wire_send(sv[0], &req.base, NULL, 0, 0) == 0);

	uint8_t buf[4096];
	int fds[4];
	size_t n_fds = 99;
	ssize_t len = pmc_wire_recv(sv[1], buf, sizeof(buf), fds, 4, &n_fds, 0);
	CHECK(len > 0);
	CHECK(n_fds == 0);
	Pmc__Request *got = NULL;
	CHECK(pmc_wire_unpack_request(buf, (size_t)len, &got) == 0);
	CHECK(got->body_case == PMC__REQUEST__BODY_SAMPLE_BATCH);
	CHECK(got->sample_batch->tid == 42);
	CHECK(got->sample_batch->n_values == 6);
	CHECK(got->sample_batch->values[5] == UINT64_MAX);
	CHECK(got->sample_batch->n_region == 3 && got->sample_batch->region[2] == 1);
	CHECK(!strcmp(got->sample_batch->def_name[0], "parse"));
	pmc__request__free_unpacked(got, NULL);
	close(sv[0]);
	close(sv[1]);
}

static void
test_wire_fds_arrive_intact(void)
{
	int sv[2];
	pair(sv);
	int p1[2], p2[2];
	CHECK(pipe2(p1, O_CLOEXEC) == 0 && pipe2(p2, O_CLOEXEC) == 0);
	int send_fds[2] = {p1[1], p2[1]};
	send_register_reply(sv[0], send_fds, 2);

	uint8_t buf[256];
	int fds[4] = {-1, -1, -1, -1};
	size_t n_fds = 0;
	CHECK(pmc_wire_recv(sv[1], buf, sizeof(buf), fds, 4, &n_fds, 0) > 0);
	CHECK(n_fds == 2);
	/* Same open file: same inode as what was sent, and data written through the
	 * received fd comes out of the matching pipe. */
	struct stat a, b;
	CHECK(fstat(fds[0], &a) == 0 && fstat(p1[1], &b) == 0 && a.st_ino == b.st_ino);
	CHECK(fstat(fds[1], &a) == 0 && fstat(p2[1], &b) == 0 && a.st_ino == b.st_ino);
	CHECK(fcntl(fds[0], F_GETFD) & FD_CLOEXEC);
	CHECK(write(fds[1], "x", 1) == 1);
	char c = 0;
	CHECK(read(p2[0], &c, 1) == 1 && c == 'x');
	for (int i = 0; i < 2; i++) {
		close(fds[i]);
		close(p1[i]);
		close(p2[i]);
	}
	close(sv[0]);
	close(sv[1]);
}

static void
test_wire_rejects_extra_fds(void)
{
	int sv[2];
	pair(sv);
	int p[2];
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	int before = pmc_test_count_fds();
	int send_fds[3] = {p[0], p[1], p[0]};
	Pmc__Request req = PMC__REQUEST__INIT;
	Pmc__Status st = PMC__STATUS__INIT;
	req.body_case = PMC__REQUEST__BODY_STATUS;
	req.status = &st;
	CHECK(pmc_wire_send(sv[0], &req.base, send_fds, 3, 0) == 0);
	uint8_t buf[256];
	int fds[2];
	size_t n_fds = 5;
	/* The receiver accepts 2 fds at most; 3 arrive: refused and all closed. */
	CHECK(pmc_wire_recv(sv[1], buf, sizeof(buf), fds, 2, &n_fds, 0) == -EBADMSG);
	CHECK(n_fds == 0);
	CHECK(pmc_test_count_fds() == before);
	/* A receiver that accepts none refuses even one. */
	CHECK(pmc_wire_send(sv[0], &req.base, send_fds, 1, 0) == 0);
	CHECK(pmc_wire_recv(sv[1], buf, sizeof(buf), fds, 0, &n_fds, 0) == -EBADMSG);
	CHECK(pmc_test_count_fds() == before);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

static void
test_wire_reply_without_fds(void)
{
	int sv[2];
	pair(sv);
	Pmc__Response resp = PMC__RESPONSE__INIT;
	Pmc__RegisterReply rr = PMC__REGISTER_REPLY__INIT;
	resp.body_case = PMC__RESPONSE__BODY_REGISTER_REPLY;
	resp.register_reply = &rr;
	CHECK(pmc_wire_send(sv[0], &resp.base, NULL, 0, 0) == 0);
	uint8_t buf[256];
	int fds[4];
	size_t n_fds = 3;
	CHECK(pmc_wire_recv(sv[1], buf, sizeof(buf), fds, 4, &n_fds, 0) > 0);
	CHECK(n_fds == 0);
	close(sv[0]);
	close(sv[1]);
}

static void
test_wire_too_many_fds_to_send(void)
{
	int sv[2];
	pair(sv);
	int fds[WIRE_MAX_FDS + 1];
	for (int i = 0; i <= WIRE_MAX_FDS; i++)
		fds[i] = sv[0];
	Pmc__Request req = PMC__REQUEST__INIT;
	Pmc__Status st = PMC__STATUS__INIT;
	req.body_case = PMC__REQUEST__BODY_STATUS;
	req.status = &st;
	CHECK(pmc_wire_send(sv[0], &req.base, fds, WIRE_MAX_FDS + 1, 0) == -EMSGSIZE);
	close(sv[0]);
	close(sv[1]);
}

static void
test_wire_truncated_datagram(void)
{
	int sv[2];
	pair(sv);
	uint8_t big[512];
	memset(big, 0x08, sizeof(big));
	CHECK(send(sv[0], big, sizeof(big), 0) == (ssize_t)sizeof(big));
	uint8_t buf[64];
	int fds[1];
	size_t n_fds;
	CHECK(pmc_wire_recv(sv[1], buf, sizeof(buf), fds, 1, &n_fds, 0) == -EMSGSIZE);
	close(sv[0]);
	close(sv[1]);
}

static void
test_wire_rejects_garbage(void)
{
	Pmc__Request *r = NULL;
	static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12};
	CHECK(pmc_wire_unpack_request(junk, sizeof(junk), &r) == -EBADMSG);
	CHECK(r == NULL);
	/* A well-formed message that names no request is refused too. */
	static const uint8_t empty_field[] = {0x98, 0x06, 0x01}; /* unknown field 99 */
	CHECK(pmc_wire_unpack_request(empty_field, sizeof(empty_field), &r) == -EBADMSG);
	/* A length-delimited field that runs past the end. */
	static const uint8_t overrun[] = {0x0a, 0x40, 0x08};
	CHECK(pmc_wire_unpack_request(overrun, sizeof(overrun), &r) == -EBADMSG);
}

static void
test_wire_peer_closed(void)
{
	int sv[2];
	pair(sv);
	close(sv[0]);
	uint8_t buf[16];
	int fds[1];
	size_t n_fds;
	CHECK(pmc_wire_recv(sv[1], buf, sizeof(buf), fds, 1, &n_fds, 0) == -ECONNRESET);
	close(sv[1]);
}

/* What a peer queued and nobody read: pmc_wire_drain() closes the fds it carries (behind empty
 * datagrams too, which read as 0 bytes like the end of the queue), and the peer can queue
 * nothing more; the socket stays open for sending. */
static void
test_wire_drain_closes_queued_fds(void)
{
	int sv[2], p[2];
	pair(sv);
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	CHECK(send(sv[1], "", 0, 0) == 0);
	CHECK(send(sv[1], "", 0, 0) == 0);
	Pmc__Response resp = PMC__RESPONSE__INIT;
	CHECK(pmc_wire_send(sv[1], &resp.base, &p[1], 1, 0) == 0);
	close(p[1]); /* the queue holds the pipe's only write end now */
	int before = pmc_test_count_fds();
	pmc_wire_drain(sv[0], 0);
	CHECK(pmc_test_count_fds() == before);
	char c;
	CHECK(read(p[0], &c, 1) == 0); /* the write end was closed: end of file */
	CHECK(send(sv[1], "x", 1, MSG_NOSIGNAL) < 0 && errno == EPIPE);
	CHECK(send(sv[0], "y", 1, MSG_NOSIGNAL) == 1);
	close(p[0]);
	pmc_wire_close_draining(sv[0], 0);
	close(sv[1]);
}

/* fds the receiver has no room for (RLIMIT_NOFILE): the kernel installs what fits and cuts
 * the rest (MSG_CTRUNC). pmc_wire_recv() refuses the datagram; pmc_wire_recv_cut() hands over its
 * bytes and says so; both close the fds that came. */
static void
test_wire_cut_fds(void)
{
	int sv[2], p[2];
	pair(sv);
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	int send_fds[3] = {p[0], p[1], p[0]};
	for (int i = 0; i < 3; i++)
		send_register_reply(sv[0], send_fds, 3);
	int before = pmc_test_count_fds();
	int low = dup(0);
	CHECK(low >= 0);
	close(low);
	struct rlimit saved, one;
	CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0);
	one = saved;
	one.rlim_cur = (rlim_t)low + 1; /* room for one fd of the three */

	uint8_t buf[256];
	int fds[4] = {-1, -1, -1, -1};
	size_t n_fds = 9;
	bool cut = false;
	CHECK(setrlimit(RLIMIT_NOFILE, &one) == 0);
	ssize_t len = pmc_wire_recv_cut(sv[1], buf, sizeof(buf), fds, 4, &n_fds, 0, &cut);
	ssize_t refused = pmc_wire_recv(sv[1], buf + 128, 128, fds, 4, &n_fds, 0);
	CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0);
	CHECK(refused == -EBADMSG);
	CHECK(len > 0);
	CHECK(cut);
	CHECK(n_fds == 0);
	CHECK(pmc_test_count_fds() == before);
	Pmc__Response *got = NULL;
	CHECK(pmc_wire_unpack_response(buf, (size_t)len, &got) == 0);
	CHECK(got->body_case == PMC__RESPONSE__BODY_REGISTER_REPLY);
	CHECK(got->register_reply->tid == 7);
	pmc__response__free_unpacked(got, NULL);

	/* With room for them: every fd, not cut. */
	cut = true;
	CHECK(pmc_wire_recv_cut(sv[1], buf, sizeof(buf), fds, 4, &n_fds, 0, &cut) > 0);
	CHECK(!cut);
	CHECK(n_fds == 3);
	for (size_t i = 0; i < n_fds; i++)
		close(fds[i]);
	CHECK(pmc_test_count_fds() == before);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

int
main(void)
{
	int fds_at_start = pmc_test_count_fds();
	PMC_TEST_RUN(test_wire_roundtrip_batch);
	PMC_TEST_RUN(test_wire_fds_arrive_intact);
	PMC_TEST_RUN(test_wire_rejects_extra_fds);
	PMC_TEST_RUN(test_wire_reply_without_fds);
	PMC_TEST_RUN(test_wire_too_many_fds_to_send);
	PMC_TEST_RUN(test_wire_truncated_datagram);
	PMC_TEST_RUN(test_wire_rejects_garbage);
	PMC_TEST_RUN(test_wire_peer_closed);
	PMC_TEST_RUN(test_wire_drain_closes_queued_fds);
	PMC_TEST_RUN(test_wire_cut_fds);
	CHECK(pmc_test_count_fds() == fds_at_start);
	printf("ok - no fd leaked\n");
	return 0;
}
