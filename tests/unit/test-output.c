/* Unit tests for pmcctl's JSON written as it goes (client/pmcctl/output.c, query.c's
 * query_region_write()): the same text as jansson writes of the same values, byte for byte. Reals
 * against jansson's (what output_jw_real() wrote with printf before: "%.17g", fixed up), strings
 * against jansson's dump of output_jstr(), whole regions against jansson's dump of
 * query_region_json(), each on a deterministic random stream of values and names (hidden
 * characters, bytes that are not UTF-8, quotes, huge and tiny figures, NaN). Prints "ok N - name"
 * per test; exits 1 at the first failed check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pmc-test.h"
#include "pmcctl/output.h"
#include "pmcctl/query.h"

#define RUN(fn) PMC_TEST_RUN(fn)

static uint64_t rng_state = 34;

static uint64_t
rnd(void)
{
	return pmc_test_rng(&rng_state);
}

/* jansson's text of @v, which it takes; the caller frees the text. */
static char *
dumped(json_t *v, size_t flags)
{
	char *text = json_dumps(v, flags);

	json_decref(v);
	CHECK(text);
	return text;
}

static void
check_real(double v)
{
	char got[JSON_REAL_MAX + 8];

	if (!isfinite(v))
		return;
	memset(got, 'x', sizeof(got));
	size_t n = output_json_real_text(got, v);
	_cleanup_free_ char *want = dumped(json_real(v), JSON_ENCODE_ANY);
	CHECK_STREQ(got, want);
	CHECK_EQ(n, strlen(want));
}

/* A double whose bits are random: every exponent, most outside the digits' own range. */
static double
any_double(void)
{
	uint64_t b = rnd();
	double v;

	memcpy(&v, &b, sizeof(v));
	return v;
}

/* Log-uniform over 1e-6 .. 1e18: the digits' own range and both its edges. */
static double
ranged_double(void)
{
	double x = (double)(rnd() >> 11) / 9007199254740992.0; /* [0, 1) */
	double v = pow(10, -6 + 24 * x);

	return rnd() & 1 ? v : -v;
}

static void
test_output_reals(void)
{
	static const double fixed[] = {0.0,
	                               -0.0,
	                               1.0,
	                               -1.0,
	                               0.1,
	                               0.5,
	                               1e-4,
	                               1e-5,
	                               9.9999999999999991e-05,
	                               0.00010000000000000002,
	                               1e15,
	                               1e16,
	                               1e17,
	                               9.9999999999999984e16,
	                               99999999999999999.0,
	                               9007199254740993.0,
	                               4503599627370495.5,
	                               1234567890123456.25,
	                               0.30000000000000004,
	                               2.5,
	                               123.456,
	                               1e300,
	                               5e-324,
	                               (double)UINT64_MAX,
	                               (double)INT64_MAX,
	                               NAN,
	                               INFINITY};

	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++)
		check_real(fixed[i]);
	for (int p = -30; p <= 30; p++) {
		double v = pow(10, p);

		check_real(v);
		check_real(nextafter(v, 0));
		check_real(nextafter(v, INFINITY));
		check_real(nextafter(nextafter(v, 0), 0));
	}
	for (int i = 0; i < 100000; i++) {
		check_real(any_double());
		check_real(ranged_double());
		/* means and ratios: a sum over a count */
		check_real((double)(rnd() % 100000000000) / (double)(rnd() % 100000 + 1));
		check_real((double)(rnd() >> (rnd() % 64)));
		/* halves at the 17th digit: ties, rounded to even */
		check_real((double)(rnd() >> 11) / (double)(UINT64_C(1) << (rnd() % 60)));
	}
}

/* A name as programs send them: plain, or any bytes (hidden characters, bidi overrides,
 * quotes, backslashes, broken UTF-8). */
static void
any_name(char *buf, size_t cap)
{
	static const char *const pieces[] = {
	        "a",        "region", "\"",   "\\",   "\x1b[31m",     "\xe2\x80\xae",
	        "\xc3\xa9", "\xff",   "\xc3", "\x7f", "\xc2\x9b",     "\xf0\x9f\x98\x80",
	        "\t",       "\n",     "/",    " ",    "\xed\xa0\x80", "\xe2\x81\xa6",
	        "\x01",     "u0000"};
	size_t n = 0, parts = rnd() % 8;

	for (size_t i = 0; i < parts; i++) {
		const char *p = pieces[rnd() % ARRAY_SIZE(pieces)];
		size_t k = strlen(p);

		if (n + k + 1 > cap)
			break;
		memcpy(buf + n, p, k);
		n += k;
	}
	if (rnd() % 4 == 0 && n + 2 < cap) /* a random byte */
		buf[n++] = (char)(rnd() % 255 + 1);
	buf[n] = '\0';
}

/* What @fn writes with a struct jw on a memory stream: unbuffered, or buffered in @cap bytes
 * (the caller frees it). */
static char *
written(void (*fn)(struct jw *w, const void *arg), const void *arg, size_t cap, int indent)
{
	char *text = NULL, buf[4096];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct jw w = {.f = f, .indent = indent};

	CHECK(f);
	CHECK(cap <= sizeof(buf));
	if (cap) {
		w.buf = buf;
		w.cap = cap;
	}
	fn(&w, arg);
	output_jw_flush(&w);
	CHECK(fclose(f) == 0);
	return text;
}

static void
write_string(struct jw *w, const void *arg)
{
	output_jw_string(w, arg);
}

static void
test_output_strings(void)
{
	for (int i = 0; i < 20000; i++) {
		char name[128];

		any_name(name, sizeof(name));
		_cleanup_free_ char *want = dumped(output_jstr(name), JSON_ENCODE_ANY);
		_cleanup_free_ char *plain = written(write_string, name, 0, 0);
		_cleanup_free_ char *small = written(write_string, name, 7, 0);

		CHECK_STREQ(plain, want);
		CHECK_STREQ(small, want);
	}
}

/* A region with random figures; what it points to lives in @m. */
struct made {
	Pmc__RegionStats r;
	Pmc__Stats st[6];
	Pmc__EventStats ev[5], *evp[5];
	Pmc__Derived dv[3], *dvp[3];
	Pmc__Bucket b[6][4], *bp[6][4];
	char names[10][64];
};

static double
any_figure(void)
{
	switch (rnd() % 8) {
	case 0:
		return NAN;
	case 1:
		return (double)(rnd() % 1000);
	case 2:
		return any_double();
	case 3:
		return rnd() % 2 ? INFINITY : 0.0;
	default:
		return ranged_double();
	}
}

static uint64_t
any_count(void)
{
	return rnd() % 4 == 0 ? rnd() : rnd() % 100000;
}

static void
make_stats(struct made *m, size_t k)
{
	Pmc__Stats *s = &m->st[k];

	pmc__stats__init(s);
	s->sum = any_count();
	s->min = any_count();
	s->max = any_count();
	s->mean = any_figure();
	s->stddev = any_figure();
	s->p50 = any_figure();
	s->p90 = any_figure();
	s->p99 = any_figure();
	s->n_buckets = rnd() % 5;
	s->buckets = m->bp[k];
	for (size_t i = 0; i < s->n_buckets; i++) {
		pmc__bucket__init(&m->b[k][i]);
		/* jansson writes integers up to INT64_MAX (test_output_regions() beyond) */
		m->b[k][i].low = any_count() >> 1;
		m->b[k][i].high = any_count() >> 1;
		m->b[k][i].count = any_count() >> 1;
		m->bp[k][i] = &m->b[k][i];
	}
}

static void
make_region(struct made *m)
{
	Pmc__RegionStats *r = &m->r;

	memset(m, 0, sizeof(*m));
	pmc__region_stats__init(r);
	for (size_t i = 0; i < ARRAY_SIZE(m->names); i++)
		any_name(m->names[i], sizeof(m->names[i]));
	r->name = m->names[0];
	r->comm = m->names[1];
	r->cgroup = m->names[2];
	r->pid = (int32_t)(rnd() % 4000000) - 10;
	r->ns_pid = (int32_t)(rnd() % 100);
	r->uid = (uint32_t)rnd();
	r->count = any_count();
	make_stats(m, 0);
	r->wall_ns = rnd() % 8 ? &m->st[0] : NULL;
	r->wall_floor = rnd() % 2 ? any_count() : 0;
	r->wall_too_short = rnd() % 2;
	r->n_events = rnd() % 5;
	r->events = m->evp;
	for (size_t j = 0; j < r->n_events; j++) {
		Pmc__EventStats *e = &m->ev[j];

		pmc__event_stats__init(e);
		make_stats(m, j + 1);
		/* distinct names: jansson keeps one member per name */
		size_t len = strnlen(m->names[3 + j], 40);
		snprintf(m->names[3 + j] + len, sizeof(m->names[3 + j]) - len, "#%zu", j);
		e->name = m->names[3 + j];
		e->stats = rnd() % 8 ? &m->st[j + 1] : NULL;
		e->scaled_count = rnd() % 2 ? any_count() : 0;
		e->scaled_ratio = any_figure();
		e->floor = any_count();
		e->too_short = rnd() % 2;
		m->evp[j] = e;
	}
	r->n_derived = rnd() % 3;
	r->derived = m->dvp;
	for (size_t j = 0; j < r->n_derived; j++) {
		pmc__derived__init(&m->dv[j]);
		m->dv[j].name = j ? (char *)"cache-miss-ratio" : (char *)"ipc";
		m->dv[j].value = any_figure();
		m->dvp[j] = &m->dv[j];
	}
}

/* jansson's text of @text's "buckets" arrays as query_region_write() writes them, on one line:
 * "[[low, high, count], ...]". */
static void
buckets_inline(char *text)
{
	char *to = text;

	for (const char *p = text; *p;) {
		if (strncmp(p, "\"buckets\": [", 12)) {
			*to++ = *p++;
			continue;
		}
		int depth = 0;
		do {
			if (*p == '\n') {
				if (to[-1] == ',')
					*to++ = ' ';
				for (p++; *p == ' '; p++)
					;
				continue;
			}
			depth += *p == '[';
			depth -= *p == ']';
			*to++ = *p++;
		} while (*p && (depth || p[-1] != ']'));
	}
	*to = '\0';
}

static void
write_region(struct jw *w, const void *arg)
{
	query_region_write(w, arg);
}

static void
test_output_regions(void)
{
	for (int i = 0; i < 5000; i++) {
		struct made m;

		make_region(&m);
		_cleanup_free_ char *want =
		        dumped(query_region_json(&m.r), JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		_cleanup_free_ char *plain = written(write_region, &m.r, 0, 0);
		_cleanup_free_ char *small = written(write_region, &m.r, 13, 0);
		_cleanup_free_ char *large = written(write_region, &m.r, 4096, 0);

		buckets_inline(want);
		CHECK_STREQ(plain, want);
		CHECK_STREQ(small, want);
		CHECK_STREQ(large, want);
	}
	/* A bucket past INT64_MAX: written whole, as it was with printf (jansson would round
	 * it to a real). */
	struct made m;
	make_region(&m);
	m.r.wall_ns = &m.st[0];
	m.st[0].n_buckets = 1;
	m.b[0][0].high = UINT64_MAX;
	_cleanup_free_ char *text = written(write_region, &m.r, 0, 0);
	CHECK(strstr(text, ", 18446744073709551615, "));
}

int
main(void)
{
	int fds = pmc_test_count_fds();

	RUN(test_output_reals);
	RUN(test_output_strings);
	RUN(test_output_regions);
	CHECK(pmc_test_count_fds() == fds);
	return 0;
}
