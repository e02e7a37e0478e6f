/* escape_next() and escape_copy() (proto/common/escape.h), the one escaper of names behind pmcctl's
 * output and the daemon's metrics page: what is shown as it is, what becomes a visible escape, and
 * how many bytes each step takes. */
#include <stdio.h>
#include <string.h>

#include "common/escape.h"
#include "pmc-test.h"

static void
test_escape_table(void)
{
	static const struct {
		const char *in, *want;
	} table[] = {
	        {"plain", "plain"},
	        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
	         "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
	        {"a\x1b[31mb", "a\\x1b[31mb"},
	        {"tab\there", "tab\\x09here"},
	        {"del\x7f", "del\\x7f"},
	        /* C1 CSI as UTF-8 (U+009B) and bidirectional overrides */
	        {"\xc2\x9b", "\\u009b"},
	        {"x\xe2\x80\xaey", "x\\u202ey"},
	        {"\xe2\x81\xa6", "\\u2066"},
	        {"\xd8\x9c", "\\u061c"},
	        /* not UTF-8: each byte escaped alone */
	        {"\xff", "\\xff"},
	        {"\xc0\xaf", "\\xc0\\xaf"},                   /* overlong */
	        {"\xed\xa0\x80", "\\xed\\xa0\\x80"},          /* a surrogate */
	        {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"}, /* beyond U+10FFFF */
	        {"\xe2\x82", "\\xe2\\x82"},                   /* cut short */
	        /* the label's own quoting is the page's: shown as they are here */
	        {"a\\b\"c", "a\\b\"c"},
	};
	char out[128];

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		CHECK(escape_copy(out, table[i].in, strlen(table[i].in)) ==
		      out + strlen(table[i].want));
		if (strcmp(out, table[i].want)) {
			fprintf(stderr, "entry %zu: got '%s', want '%s'\n", i, out, table[i].want);
			CHECK(0);
		}
	}
}

/* A sequence cut by the length given is not read past it. */
static void
test_escape_bounded(void)
{
	char esc[ESCAPE_MAX];

	CHECK(escape_next("\xc3\xa9", 1, esc) == 1);
	CHECK(!strcmp(esc, "\\xc3"));
	CHECK(escape_next("\xc3\xa9", 2, esc) == 2);
	CHECK(!strcmp(esc, ""));
}

int
main(void)
{
	PMC_TEST_RUN(test_escape_table);
	PMC_TEST_RUN(test_escape_bounded);
	return 0;
}
