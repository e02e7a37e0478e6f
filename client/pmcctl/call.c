/* pmcctl's wire calls: connecting to pmcdaemon, Hello, one request and its checked reply,
 * and the Query with its filters, streamed in parts or gathered whole. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include "common/util.h"
#include "pmcctl/call.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"
#include "wire/wire.h"

#define CALL_TIMEOUT_MS 5000
/* What a part of a streamed reply counts against --max-reply at least. */
#define PART_MIN_BYTES 256

static const Pmc__Stats zero_stats = PMC__STATS__INIT;

void
call_response_freep(Pmc__Response **r)
{
	if (*r)
		pmc__response__free_unpacked(*r, NULL);
}

const Pmc__Stats *
call_stats_or_zero(const Pmc__Stats *s)
{
	return s ? s : &zero_stats;
}

/* ---- talking to the daemon ---- */

int
call_connect(const char *path)
{
	int fd = pmc_wire_connect(path);

	if (fd < 0) {
		fprintf(stderr,
		        "pmcctl: cannot connect to pmcdaemon at %s: %s (is pmcdaemon running? set "
		        "--socket or PMC_SOCKET)\n",
		        path, strerror(-fd));
		exit(EX_UNAVAILABLE);
	}
	return fd;
}

/* Says why the call named @what failed with @r, and exits 1. */
static void call_failed(const char *what, int r) __attribute__((noreturn));

static void
call_failed(const char *what, int r)
{
	if (r == -ETIMEDOUT)
		pmcctl_fail("%s: pmcdaemon did not answer within %d ms", what, CALL_TIMEOUT_MS);
	if (r == -ECONNRESET || r == -EPIPE)
		pmcctl_fail("%s: pmcdaemon closed the connection", what);
	pmcctl_fail("%s: talking to pmcdaemon: %s", what, strerror(-r));
}

/* Exits 1, saying why, unless @resp is a success with body @want; frees it then. */
static void
check_response(const char *what, Pmc__Response *resp, Pmc__Response__BodyCase want)
{
	if (resp->error) {
		int e = resp->error < 0 ? -resp->error : resp->error;
		_cleanup_free_ char *msg = output_escape_text(resp->message);

		if (msg[0])
			fprintf(stderr, "pmcctl: %s: %s (%s)\n", what, msg, strerror(e));
		else
			fprintf(stderr, "pmcctl: %s: %s\n", what, strerror(e));
		pmc__response__free_unpacked(resp, NULL);
		exit(EXIT_FAIL);
	}
	if (resp->body_case != want) {
		pmc__response__free_unpacked(resp, NULL);
		pmcctl_fail("%s: unexpected reply from pmcdaemon", what);
	}
}

/* Sends @req and returns the Response, which has body @want; on any failure says why, naming
 * @what, and exits 1. */
Pmc__Response *
call_request(int sock, const char *what, const Pmc__Request *req, Pmc__Response__BodyCase want)
{
	Pmc__Response *resp = NULL;
	int r = pmc_wire_call(sock, req, CALL_TIMEOUT_MS, NULL, 0, NULL, &resp);

	if (r < 0)
		call_failed(what, r);
	check_response(what, resp, want);
	return resp;
}

struct hello_said call_hello_said;

void
call_hello(int sock)
{
	Pmc__Hello h = PMC__HELLO__INIT;
	Pmc__Request req = PMC__REQUEST__INIT;

	h.version = PMC__PROTOCOL_VERSION__PROTOCOL_VERSION;
	h.client = (char *)"pmcctl " PMC_VERSION;
	req.body_case = PMC__REQUEST__BODY_HELLO;
	req.hello = &h;

	Pmc__Response *resp = call_request(sock, "hello", &req, PMC__RESPONSE__BODY_HELLO);
	const Pmc__HelloReply *hr = resp->hello;
	_cleanup_free_ char *version = output_escape_text(hr->daemon_version);

	snprintf(call_hello_said.version, sizeof(call_hello_said.version), "%s",
	         version[0] ? version : "(unknown version)");
	/* Daemons of before the field that take heads tables (5 Dec 2026 on) took commands. */
	call_hello_said.commands = hr->open_command || hr->heads_table;
	if (hr->version != PMC__PROTOCOL_VERSION__PROTOCOL_VERSION) {
		fprintf(stderr,
		        "pmcctl: protocol version mismatch: pmcdaemon %s speaks version %" PRIu32
		        ", pmcctl " PMC_VERSION " speaks version %d\n",
		        call_hello_said.version, hr->version,
		        PMC__PROTOCOL_VERSION__PROTOCOL_VERSION);
		pmc__response__free_unpacked(resp, NULL);
		exit(EXIT_FAIL);
	}
	pmc__response__free_unpacked(resp, NULL);
}

/* ---- filters ---- */

bool
call_has_glob(const char *s)
{
	return strpbrk(s, "*?[\\") != NULL;
}

/* Whether @o asks for more than pmcdaemon's first Query could: several names, globs, process
 * names, or a start time (run). */
bool
call_new_filters(const struct opts *o, uint64_t min_start)
{
	return o->n_comms || o->n_cgroups || o->n_regions > 1 ||
	       (o->n_regions == 1 && call_has_glob(o->regions[0])) || min_start;
}

/* Query @q for the filters of @o; its strings point into @o. The daemon does the matching. */
void
call_query_init(Pmc__Query *q, const struct opts *o)
{
	pmc__query__init(q);
	q->pid = o->pid;
	q->n_regions = o->n_regions;
	q->regions = (char **)o->regions;
	q->n_comms = o->n_comms;
	q->comms = (char **)o->comms;
	q->n_cgroups = o->n_cgroups;
	q->cgroups = (char **)o->cgroups;
	q->hist = o->hist;
	/* A daemon that knows no globs reads this one: the same answer for one plain name. */
	if (o->n_regions == 1 && !call_has_glob(o->regions[0]))
		q->region = (char *)o->regions[0];
}

/* Exits 1 when @qr, a whole reply, shows that the daemon is too old for the filters. */
static void
query_check_filters(const char *what, const Pmc__QueryReply *qr, const Pmc__Query *q,
                    const struct opts *o)
{
	/* Every region listed is one the caller may see, so a daemon that counts them lists no
	 * more than `visible`; one older than the count ignored the filters it did not know. */
	if (call_new_filters(o, q->min_start) && qr->n_regions > qr->visible)
		pmcctl_fail("%s: this pmcdaemon is older than pmcctl: it matches neither --comm, "
		            "several "
		            "--region nor globs; upgrade it, or give one plain --region",
		            what);
	/* One that knows no cgroups lists regions without one, which --cgroup never selects. */
	for (size_t i = 0; o->n_cgroups && i < qr->n_regions; i++)
		if (!qr->regions[i]->cgroup[0])
			pmcctl_fail("%s: this pmcdaemon is older than pmcctl: it does not match "
			            "--cgroup; "
			            "upgrade it",
			            what);
}

/* Sends @q, asking for its reply in parts, and hands each part to @on_part as it arrives
 * (a daemon that does not stream sends one part). Returns the last part (visible, hidden:
 * the whole reply's), which the caller frees; on any failure says why and exits 1, also when
 * the reply goes on past @o->max_reply bytes (a hostile or broken daemon: what the callers
 * gather stays bounded). */
Pmc__Response *
call_query_stream(int sock, const char *what, Pmc__Query *q, const struct opts *o,
                  uint64_t (*on_part)(const Pmc__QueryReply *part, void *ctx), void *ctx)
{
	Pmc__Request req = PMC__REQUEST__INIT;

	req.body_case = PMC__REQUEST__BODY_QUERY;
	req.query = q;
	q->stream = true;
	int r = pmc_wire_send(sock, &req.base, NULL, 0, 0);
	int timeout = CALL_TIMEOUT_MS;

	if (r == -EPIPE || r == -ECONNRESET)
		timeout = 0; /* refused: its answer is still there to read */
	else if (r < 0)
		call_failed(what, r);
	uint64_t taken = 0, regions = 0, held = 0; /* held: on_part()'s, beyond the parts */
	/* Each part unpacked into one arena, emptied for the next: no allocation per message,
	 * as many as the reply has figures. The last part is unpacked again on its own, for
	 * the caller to free as any Response. */
	struct arena arena = {.block_size = 1 << 18};
	ProtobufCAllocator alloc = call_arena_allocator(&arena);

	for (bool first = true;; first = false) {
		_cleanup_free_ uint8_t *buf = NULL;
		size_t len;
		Pmc__Response *resp = NULL;

		call_arena_reset(&arena);
		if ((r = pmc_wire_wait(sock, timeout, &buf, &len, NULL, 0, NULL)) < 0)
			call_failed(what, r);
		resp = pmc__response__unpack(&alloc, len, buf);
		if (resp && (resp->error || resp->body_case != PMC__RESPONSE__BODY_QUERY ||
		             !resp->query || !resp->query->more))
			resp = NULL; /* (the arena keeps it: forgotten at its reset) */
		if (!resp && (r = pmc_wire_unpack_response(buf, len, &resp)) < 0)
			call_failed(what, r);
		check_response(what, resp, PMC__RESPONSE__BODY_QUERY);
		/* Each part is charged at least PART_MIN_BYTES: a stream of empty parts that never
		 * ends meets the bound too. */
		taken += len > PART_MIN_BYTES ? len : PART_MIN_BYTES;
		regions += resp->query->n_regions;
		if (o->max_reply && taken + held > o->max_reply && resp->query->more) {
			char aside[112] = "";

			call_arena_free(&arena);
			if (held)
				snprintf(aside, sizeof(aside),
				         ", counting the %" PRIu64
				         " KiB held for earlier processes of a pid listed again",
				         (held + 1023) >> 10);
			pmcctl_fail("%s: the reply of pmcdaemon passed --max-reply (%" PRIu64
			            " MiB, %" PRIu64
			            " regions%s) and goes on: narrow the query with --pid, "
			            "--comm or --region, or raise --max-reply if the daemon really "
			            "holds that much (a daemon whose reply never ends is broken or "
			            "hostile)",
			            what, o->max_reply >> 20, regions, aside);
		}
		if (first && !resp->query->more)
			query_check_filters(what, resp->query, q, o);
		held = on_part(resp->query, ctx);
		if (!resp->query->more) {
			call_arena_free(&arena);
			return resp;
		}
	}
}

/* ---- an arena for what protobuf-c unpacks ---- */

static void *
arena_alloc(void *data, size_t size)
{
	struct arena *a = data;

	size = (size + 15) & ~(size_t)15;
	if (size > a->left) {
		size_t n = size > a->block_size ? size : a->block_size;
		char **b = reallocarray(a->block, a->n_block + 1, sizeof(*b));

		if (!b || !(a->at = malloc(n)))
			pmcctl_oom();
		a->block = b;
		a->block[a->n_block++] = a->at;
		a->left = n;
	}
	void *out = a->at;
	a->at += size;
	a->left -= size;
	return out;
}

static void
arena_free_one(void *data, void *ptr)
{
	(void)data;
	(void)ptr; /* freed with the arena */
}

ProtobufCAllocator
call_arena_allocator(struct arena *a)
{
	if (!a->block_size)
		a->block_size = 1 << 20;
	return (ProtobufCAllocator){
	        .alloc = arena_alloc, .free = arena_free_one, .allocator_data = a};
}

void
call_arena_reset(struct arena *a)
{
	/* The first block stays, for the next message: a block holds a part of a reply. */
	for (size_t i = 1; i < a->n_block; i++)
		free(a->block[i]);
	a->n_block = a->n_block ? 1 : 0;
	a->at = a->n_block ? a->block[0] : NULL;
	a->left = a->n_block ? a->block_size : 0;
}

void
call_arena_free(struct arena *a)
{
	for (size_t i = 0; i < a->n_block; i++)
		free(a->block[i]);
	free(a->block);
	memset(a, 0, sizeof(*a));
}

/* The parts of a streamed reply, each QueryReply's bytes one after the other: protobuf merges
 * them into one QueryReply, every region and loss listed once, visible and hidden from the
 * last part. */
struct query_bytes {
	char *buf;
	size_t len;
	FILE *f;
};

/* Appends @part; holds no more than the parts are charged. */
static uint64_t
query_collect(const Pmc__QueryReply *part, void *ctx)
{
	struct query_bytes *b = ctx;
	Pmc__QueryReply copy = *part;
	size_t n;

	copy.more = false;
	n = pmc__query_reply__get_packed_size(&copy);
	_cleanup_free_ uint8_t *tmp = malloc(n ? n : 1);
	if (!tmp)
		pmcctl_oom();
	pmc__query_reply__pack(&copy, tmp);
	if (fwrite(tmp, 1, n, b->f) != n)
		pmcctl_oom();
	return 0;
}

/* Sends @q and returns the whole reply, gathered from its parts (in one Response, as a daemon
 * that does not stream sends it); exits 1 on any failure, or when the daemon is too old for
 * the filters. */
Pmc__Response *
call_query(int sock, const char *what, Pmc__Query *q, const struct opts *o)
{
	struct query_bytes b = {0};
	uint8_t head[16];
	size_t n = 0;

	b.f = open_memstream(&b.buf, &b.len);
	if (!b.f)
		pmcctl_oom();
	/* Response field 12 (query), length-delimited, its length a varint. */
	head[n++] = 12 << 3 | 2;
	if (fwrite(head, 1, 16, b.f) != 16)
		pmcctl_oom();
	pmc__response__free_unpacked(call_query_stream(sock, what, q, o, query_collect, &b), NULL);
	if (fclose(b.f))
		pmcctl_oom();
	size_t len = b.len - 16;
	uint64_t x = len;
	do {
		head[n] = (uint8_t)(x & 0x7f);
		x >>= 7;
		head[n++] |= x ? 0x80 : 0;
	} while (x);
	memcpy(b.buf + 16 - n, head, n);
	Pmc__Response *resp = pmc__response__unpack(NULL, len + n, (uint8_t *)b.buf + 16 - n);
	free(b.buf);
	if (!resp || resp->body_case != PMC__RESPONSE__BODY_QUERY)
		pmcctl_fail("%s: cannot decode the reply of pmcdaemon", what);
	query_check_filters(what, resp->query, q, o);
	return resp;
}
