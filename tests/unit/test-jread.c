/* Unit tests for pmcctl's JSON read in place (client/pmcctl/jread.c), which diff reads its
 * files with: it takes exactly the texts jansson's json_loadb() takes with
 * JSON_REJECT_DUPLICATES (diff leaves the others to jansson for the message), on texts made
 * by hand (duplicates, depth, escapes, surrogates, numbers at their limits, what may follow
 * the top value) and on 4,000 mutations of a file of dump (tests/data/json-fixed); and
 * diff_file_parse() reads a file whose keys are in any order as the same file. Prints
 * "ok N - name" per test; exits 1 at the first failed check. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pmc-test.h"
#include "pmcctl/diff.h"
#include "pmcctl/jread.h"
#include "pmcctl/pmcctl.h"

#define RUN(fn) PMC_TEST_RUN(fn)

static bool
jr_takes(const char *text, size_t len)
{
	struct jr r;

	jread_init(&r, text, len);
	if (jread_peek(&r) == JR_OBJECT || jread_peek(&r) == JR_ARRAY)
		jread_skip(&r);
	else
		jread_object(&r); /* (fails: a top value is an object or an array) */
	bool ok = jread_end(&r);
	jread_free(&r);
	return ok;
}

static bool
jansson_takes(const char *text, size_t len)
{
	json_error_t err;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);

	json_decref(root);
	return root != NULL;
}

static void
check_same(const char *text, size_t len)
{
	bool want = jansson_takes(text, len), got = jr_takes(text, len);

	if (want != got)
		fprintf(stderr, "jansson %s, jread %s: '%.*s'\n", want ? "takes" : "refuses",
		        got ? "takes" : "refuses", (int)(len > 200 ? 200 : len), text);
	CHECK_EQ(got, want);
}

static void
test_jread_by_hand(void)
{
	static const char *const texts[] = {"{}",
	                                    "[]",
	                                    " {} ",
	                                    "{",
	                                    "}",
	                                    "",
	                                    "  ",
	                                    "1",
	                                    "\"a\"",
	                                    "null",
	                                    "{}x",
	                                    "{} {}",
	                                    "[1,]",
	                                    "[,1]",
	                                    "{\"a\":1,}",
	                                    "{\"a\" 1}",
	                                    "{\"a\":1 \"b\":2}",
	                                    "{a:1}",
	                                    "{\"a\":1,\"a\":2}",
	                                    "{\"a\":1,\"\\u0061\":2}",
	                                    "{\"a\":{\"b\":1,\"b\":1}}",
	                                    "{\"a\":[{\"x\":1},{\"x\":1}]}",
	                                    "[01]",
	                                    "[-0]",
	                                    "[0.5]",
	                                    "[.5]",
	                                    "[5.]",
	                                    "[1e5]",
	                                    "[1E+5]",
	                                    "[1e]",
	                                    "[-]",
	                                    "[--1]",
	                                    "[+1]",
	                                    "[9223372036854775807]",
	                                    "[9223372036854775808]",
	                                    "[-9223372036854775808]",
	                                    "[-9223372036854775809]",
	                                    "[1e308]",
	                                    "[1e309]",
	                                    "[-1e309]",
	                                    "[1e-400]",
	                                    "[\"\\u0000\"]",
	                                    "[\"\\u0001\"]",
	                                    "[\"\\ud83d\\ude00\"]",
	                                    "[\"\\ud83d\"]",
	                                    "[\"\\ude00\"]",
	                                    "[\"\\ud83dx\"]",
	                                    "[\"\\x\"]",
	                                    "[\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"]",
	                                    "[\"\\u00e9\"]",
	                                    "[\"\\u00G9\"]",
	                                    "[\"\t\"]",
	                                    "[\"\x7f\"]",
	                                    "[\"\xc3\xa9\"]",
	                                    "[\"\xc3\"]",
	                                    "[\"\xff\"]",
	                                    "[\"\xed\xa0\x80\"]",
	                                    "[\"\xf4\x90\x80\x80\"]",
	                                    "[\"\xc0\x80\"]",
	                                    "[\"\xf0\x9f\x98\x80\"]",
	                                    "[true, false, null]",
	                                    "[truex]",
	                                    "[tru]",
	                                    "[nul]",
	                                    "[true1]",
	                                    "\xef\xbb\xbf{}",
	                                    "{\"a\":1}\n",
	                                    "{\"a\":1}\n\x00",
	                                    "[1]\r\n\t ",
	                                    "{\"\":1,\"\":2}",
	                                    "[\"a\" \"b\"]",
	                                    "[[[]]]",
	                                    "{\"a\":[],\"b\":{}}"};

	for (size_t i = 0; i < ARRAY_SIZE(texts); i++)
		check_same(texts[i], strlen(texts[i]));
	check_same("{\"a\":1}\0", 8);
	/* 2,048 levels: jansson's limit, then one more */
	for (size_t depth = 2046; depth <= 2050; depth++) {
		char *t = malloc(2 * depth + 1);

		CHECK(t);
		memset(t, '[', depth);
		memset(t + depth, ']', depth);
		check_same(t, 2 * depth);
		free(t);
	}
	/* many keys: duplicates found among them too */
	char big[4096];
	size_t n = (size_t)snprintf(big, sizeof(big), "{");
	for (int k = 0; k < 100; k++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "%s\"k%d\":%d", k ? "," : "", k, k);
	snprintf(big + n, sizeof(big) - n, "}");
	check_same(big, strlen(big));
	big[n] = ',';
	snprintf(big + n + 1, sizeof(big) - n - 1, "\"k57\":1}");
	check_same(big, strlen(big));
}

static char *
read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;

	CHECK(f);
	CHECK(fseek(f, 0, SEEK_END) == 0);
	long n = ftell(f);
	CHECK(n > 0);
	rewind(f);
	buf = malloc((size_t)n);
	CHECK(buf);
	CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* A file of dump, its text cut short, bytes changed, inserted, dropped: jansson and jread
 * agree on each. */
static void
test_jread_mutations(void)
{
	size_t len;
	char *text = read_file(PMC_JSON_FIXED "/dump1.json", &len);
	static const char bytes[] = "{}[]\",:0123456789.eE+-\\u \n\tnulltruefalse\xc3\xff\x01";
	uint64_t rng = 34;

	/* its last line is the test's: "exit 0" */
	while (len && text[len - 1] != '}')
		len--;
	check_same(text, len);
	char *m = malloc(len + 8);
	CHECK(m);
	for (int i = 0; i < 4000; i++) {
		size_t n = len, at = pmc_test_rng(&rng) % len;
		uint64_t how = pmc_test_rng(&rng);

		memcpy(m, text, len);
		char c = bytes[how % (sizeof(bytes) - 1)];
		switch ((how >> 8) % 4) {
		case 0:
			m[at] = c;
			break;
		case 1:
			memmove(m + at + 1, m + at, n - at);
			m[at] = c;
			n++;
			break;
		case 2:
			memmove(m + at, m + at + 1, n - at - 1);
			n--;
			break;
		default:
			n = at;
		}
		check_same(m, n);
	}
	free(m);
	free(text);
}

/* A file read with its keys in another order, on one line, reads the same. */
static void
test_jread_diff_any_order(void)
{
	size_t len;
	char *text = read_file(PMC_JSON_FIXED "/dump1.json", &len);
	struct diff_file *a, *b;
	char *why = NULL;

	while (len && text[len - 1] != '}')
		len--;
	CHECK(diff_file_parse(text, len, &a, &why) == 0);
	/* jansson's own compact text, its keys sorted */
	json_error_t err;
	json_t *root = json_loadb(text, len, 0, &err);
	CHECK(root);
	char *again = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(root);
	CHECK(again);
	CHECK(diff_file_parse(again, strlen(again), &b, &why) == 0);
	struct opts o = {.format = FORMAT_CSV};
	char *out1 = NULL, *out2 = NULL;
	size_t n1, n2;
	FILE *saved = stdout;
	stdout = open_memstream(&out1, &n1);
	CHECK(stdout);
	CHECK(diff_compare(a, a, &o) == 0);
	fclose(stdout);
	stdout = open_memstream(&out2, &n2);
	CHECK(stdout);
	CHECK(diff_compare(a, b, &o) == 0);
	fclose(stdout);
	stdout = saved;
	CHECK_STREQ(out1, out2);
	free(out1);
	free(out2);
	free(again);
	diff_file_free(a);
	diff_file_free(b);
	free(text);
}

/* A key given twice is refused, and what was read of it before the object closed overruns
 * nothing (fuzz-diff found "buckets" given twice read past their rows, 7 Dec). The overrun
 * itself is seen only by the sanitized build of this test (tests/run.sh runs one): 17 rows,
 * then a second "buckets", read rows 17 to 34 of an array of 32. */
static void
test_jread_diff_key_twice(void)
{
	static const char *const twice[] = {
	        "\"buckets\":[[1,1,17]],\"buckets\":[[1,1,17]]",
	        "\"buckets\":[ROWS],\"buckets\":[[1,1,17]]",
	        "\"buckets\":[ROWS],\"buckets\":[[1,1]]",
	        "\"buckets\":[[1,1]],\"buckets\":[ROWS]",
	};
	char rows[17 * 8 + 1] = "", *text;

	for (int i = 0; i < 17; i++)
		strcat(rows, i ? ",[1,1,1]" : "[1,1,1]");
	for (size_t i = 0; i < sizeof(twice) / sizeof(*twice); i++) {
		char *member = strdup(twice[i]), *at;
		struct diff_file *f = NULL;
		char *why = NULL;

		CHECK(member);
		while ((at = strstr(member, "ROWS"))) {
			char *m;
			CHECK(asprintf(&m, "%.*s%s%s", (int)(at - member), member, rows, at + 4) >
			      0);
			free(member);
			member = m;
		}
		CHECK(asprintf(&text,
		               "{\"regions\":[{\"name\":\"a\",\"comm\":\"c\",\"count\":17,"
		               "\"events\":{},\"wall_ns\":{\"sum\":17,\"min\":1,\"max\":1,"
		               "\"mean\":1,%s}}]}",
		               member) > 0);
		CHECK(!jansson_takes(text, strlen(text)));
		CHECK(diff_file_parse(text, strlen(text), &f, &why) < 0);
		CHECK(!f);
		CHECK(why && strstr(why, "duplicate"));
		free(why);
		free(text);
		free(member);
	}
	/* the same region with each key once is read */
	CHECK(asprintf(
	              &text,
	              "{\"regions\":[{\"name\":\"a\",\"comm\":\"c\",\"count\":17,\"events\":{},"
	              "\"wall_ns\":{\"sum\":17,\"min\":1,\"max\":1,\"mean\":1,\"buckets\":[%s]}}]}",
	              rows) > 0);
	struct diff_file *f = NULL;
	char *why = NULL;
	CHECK(diff_file_parse(text, strlen(text), &f, &why) == 0);
	CHECK(f);
	diff_file_free(f);
	free(text);
}

int
main(void)
{
	int fds = pmc_test_count_fds();

	RUN(test_jread_by_hand);
	RUN(test_jread_mutations);
	RUN(test_jread_diff_any_order);
	RUN(test_jread_diff_key_twice);
	CHECK(pmc_test_count_fds() == fds);
	return 0;
}
