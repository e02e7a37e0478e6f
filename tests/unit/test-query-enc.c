/* Unit tests for daemon/session/query-enc.c: a Query's reply encoded by hand is, byte for
 * byte, what protobuf-c's pmc__query_reply__pack() writes, for replies drawn at random (every
 * field zero or not, negative ids, doubles of -0.0, NaN and infinity, empty and missing
 * strings and messages, buckets, call paths, losses) and for the edge cases by name; and
 * protobuf-c reads it back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmc-test.h"
#include "session/query-enc.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* A value of every size a varint may take, or 0, often. */
static uint64_t
rnd_u64(void)
{
	switch (rnd() % 5) {
	case 0:
		return 0;
	case 1:
		return rnd() % 128;
	case 2:
		return rnd() % 100000;
	default:
		return rnd() >> (rnd() % 64);
	}
}

static double
rnd_dbl(void)
{
	static const double odd[] = {0.0, -0.0, 1.0, -1.5, 1e300, 5e-324};
	switch (rnd() % 8) {
	case 0:
		return odd[rnd() % (sizeof(odd) / sizeof(odd[0]))];
	case 1:
		return NAN;
	case 2:
		return rnd() % 2 ? INFINITY : -INFINITY;
	default:
		return (double)(int64_t)rnd() / (double)(rnd() | 1);
	}
}

static char *
rnd_str(void)
{
	static char pool[8][300];
	static unsigned next;
	switch (rnd() % 4) {
	case 0:
		return NULL;
	case 1:
		return "";
	default: {
		char *s = pool[next++ % 8];
		size_t n = 1 + rnd() % 299; /* a length of one byte of varint or two */
		for (size_t i = 0; i < n; i++)
			s[i] = (char)('a' + rnd() % 26);
		s[n] = 0;
		return s;
	}
	}
}

static int32_t
rnd_i32(void)
{
	switch (rnd() % 4) {
	case 0:
		return 0;
	case 1:
		return -(int32_t)(rnd() % 1000000) - 1;
	default:
		return (int32_t)(rnd() % 4000000);
	}
}

/* Storage for one drawn reply. */
#define MAX_RS 6
#define MAX_EV 5
#define MAX_BK 4
struct reply {
	Pmc__QueryReply qr;
	Pmc__RegionStats rs[MAX_RS], *rsp[MAX_RS];
	Pmc__Stats st[MAX_RS * (MAX_EV + 1)];
	Pmc__EventStats es[MAX_RS * MAX_EV], *esp[MAX_RS * MAX_EV];
	Pmc__Derived dv[MAX_RS * 3], *dvp[MAX_RS * 3];
	Pmc__Bucket bk[MAX_RS * (MAX_EV + 1) * MAX_BK], *bkp[MAX_RS * (MAX_EV + 1) * MAX_BK];
	Pmc__ProcessLoss pl[4], *plp[4];
	size_t n_st, n_bk;
};

static Pmc__Stats *
draw_stats(struct reply *r)
{
	if (rnd() % 6 == 0)
		return NULL;
	Pmc__Stats *st = &r->st[r->n_st++];
	pmc__stats__init(st);
	st->sum = rnd_u64();
	st->min = rnd_u64();
	st->max = rnd_u64();
	st->mean = rnd_dbl();
	st->stddev = rnd_dbl();
	st->p50 = rnd_dbl();
	st->p90 = rnd_dbl();
	st->p99 = rnd_dbl();
	size_t nb = rnd() % (MAX_BK + 1);
	st->buckets = &r->bkp[r->n_bk];
	for (size_t i = 0; i < nb; i++) {
		Pmc__Bucket *b = &r->bk[r->n_bk];
		pmc__bucket__init(b);
		b->low = rnd_u64();
		b->high = rnd_u64();
		b->count = rnd_u64();
		r->bkp[r->n_bk++] = b;
	}
	st->n_buckets = nb;
	return st;
}

static void
draw(struct reply *r)
{
	memset(r, 0, sizeof(*r));
	pmc__query_reply__init(&r->qr);
	size_t n_rs = rnd() % (MAX_RS + 1), n_es = 0, n_dv = 0;
	for (size_t i = 0; i < n_rs; i++) {
		Pmc__RegionStats *rs = &r->rs[i];
		pmc__region_stats__init(rs);
		r->rsp[i] = rs;
		rs->pid = rnd_i32();
		rs->comm = rnd_str();
		rs->name = rnd_str();
		rs->count = rnd_u64();
		rs->wall_ns = draw_stats(r);
		rs->uid = (uint32_t)rnd_u64();
		rs->wall_floor = rnd_u64();
		rs->wall_too_short = rnd() % 2;
		rs->path = (uint32_t)rnd_u64();
		rs->parent = (uint32_t)rnd_u64();
		rs->cgroup = rnd_str();
		rs->ns_pid = rnd_i32();
		rs->first_path_samples = rnd_u64();
		rs->events = &r->esp[n_es];
		rs->n_events = rnd() % (MAX_EV + 1);
		for (size_t j = 0; j < rs->n_events; j++) {
			Pmc__EventStats *es = &r->es[n_es];
			r->esp[n_es++] = es;
			pmc__event_stats__init(es);
			es->name = rnd_str();
			es->stats = draw_stats(r);
			es->scaled_count = rnd_u64();
			es->scaled_ratio = rnd_dbl();
			es->floor = rnd_u64();
			es->too_short = rnd() % 2;
		}
		rs->derived = &r->dvp[n_dv];
		rs->n_derived = rnd() % 4;
		for (size_t j = 0; j < rs->n_derived; j++) {
			Pmc__Derived *d = &r->dv[n_dv];
			r->dvp[n_dv++] = d;
			pmc__derived__init(d);
			d->name = rnd_str();
			d->value = rnd_dbl();
		}
	}
	r->qr.regions = r->rsp;
	r->qr.n_regions = n_rs;
	r->qr.visible = (uint32_t)rnd_u64();
	r->qr.hidden = (uint32_t)rnd_u64();
	r->qr.more = rnd() % 2;
	r->qr.all_users = rnd() % 2;
	r->qr.run_tag_matched = rnd() % 2;
	r->qr.run_tag_evicted = rnd_u64();
	size_t n_pl = rnd() % 3;
	for (size_t i = 0; i < n_pl; i++) {
		pmc__process_loss__init(&r->pl[i]);
		r->pl[i].pid = rnd_i32();
		r->pl[i].reason = rnd_str();
		r->pl[i].count = rnd_u64();
		r->plp[i] = &r->pl[i];
	}
	r->qr.losses = r->plp;
	r->qr.n_losses = n_pl;
}

/* @qr encoded both ways: the same bytes, which protobuf-c reads back as @qr's regions. */
static void
check_same(Pmc__QueryReply *qr)
{
	size_t want = pmc__query_reply__get_packed_size(qr);
	uint8_t *a = malloc(want + 1), *b = malloc(want + 16);
	CHECK(a && b);
	CHECK_EQ(pmc__query_reply__pack(qr, a), want);
	struct query_enc e = {0};
	CHECK_EQ(query_enc_size(&e, qr), 0);
	CHECK_EQ(e.len, want);
	memset(b, 0xa5, want + 16);
	CHECK_EQ(query_enc_pack(&e, b), want);
	query_enc_free(&e);
	CHECK(memcmp(a, b, want) == 0);
	CHECK_EQ(b[want], 0xa5); /* nothing written past it */
	Pmc__QueryReply *back = pmc__query_reply__unpack(NULL, want, b);
	CHECK(back);
	CHECK_EQ(back->n_regions, qr->n_regions);
	CHECK_EQ(back->n_losses, qr->n_losses);
	pmc__query_reply__free_unpacked(back, NULL);
	free(a);
	free(b);
}

static void
test_random_replies(void)
{
	static struct reply r;
	for (int i = 0; i < 20000; i++) {
		draw(&r);
		check_same(&r.qr);
	}
}

static void
test_edges(void)
{
	static struct reply r;
	memset(&r, 0, sizeof(r));
	/* An empty reply: no byte at all. */
	pmc__query_reply__init(&r.qr);
	struct query_enc e = {0};
	CHECK_EQ(query_enc_size(&e, &r.qr), 0);
	CHECK_EQ(e.len, 0);
	query_enc_free(&e);
	check_same(&r.qr);
	/* A region of nothing but zeros and an empty Stats: its tag and lengths only. */
	pmc__region_stats__init(&r.rs[0]);
	pmc__stats__init(&r.st[0]);
	r.rs[0].wall_ns = &r.st[0];
	r.rsp[0] = &r.rs[0];
	r.qr.regions = r.rsp;
	r.qr.n_regions = 1;
	check_same(&r.qr);
	/* The largest values: int32 minimum (10 bytes), uint64 maximum, field 60's two-byte tag,
	 * a region past 127 bytes (two bytes of length). */
	r.rs[0].pid = INT32_MIN;
	r.rs[0].ns_pid = -1;
	r.rs[0].count = UINT64_MAX;
	r.rs[0].uid = UINT32_MAX;
	r.rs[0].first_path_samples = UINT64_MAX;
	r.st[0].mean = -0.0; /* left out, as protobuf-c leaves out what == 0 */
	r.st[0].p99 = NAN;
	static char longname[200];
	memset(longname, 'x', sizeof(longname) - 1);
	r.rs[0].name = longname;
	check_same(&r.qr);
	uint8_t buf[512];
	CHECK_EQ(query_enc_size(&e, &r.qr), 0);
	CHECK_LE(e.len, sizeof(buf));
	size_t n = query_enc_pack(&e, buf);
	query_enc_free(&e);
	CHECK_GT(n, 200);
	CHECK_EQ(buf[0], 0x0a); /* QueryReply.regions, length-delimited */
	CHECK_GE(buf[1], 0x80); /* its length takes two bytes */
}

int
main(void)
{
	PMC_TEST_RUN(test_edges);
	PMC_TEST_RUN(test_random_replies);
	return 0;
}
