/* libFuzzer target: pmcctl diff's reader (diff_file_parse()) on files of arbitrary bytes,
 * and what it read compared (diff_compare()) in every output format, with and without a
 * gate. The first byte chooses the format and the gate; the rest is the BASE file, up to a
 * NUL byte, then the CURRENT one (none: BASE against itself). A file refused must come
 * with a reason; one read, compared against itself, must trip no gate; the reader (jread.c)
 * must take exactly the JSON that jansson's json_loadb() takes. A crash, a leak or a
 * sanitizer report fails.
 *
 * Seeds: tests/fuzz/corpus-diff (files of dump and run --format json, each behind a
 * choosing byte). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pmcctl/diff.h"
#include "pmcctl/pmcctl.h"

static struct diff_file *
parse(const uint8_t *data, size_t len)
{
	struct diff_file *f = NULL;
	char *why = NULL;
	json_error_t err;
	json_t *root = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, &err);
	bool gzip = len >= 2 && data[0] == 0x1f && data[1] == 0x8b;
	/* A NUL byte is never JSON; jansson takes one after a number (its reader skips it). */
	bool nul = memchr(data, 0, len) != NULL;

	json_decref(root);
	if (diff_file_parse(data, len, &f, &why) < 0) {
		if (!why || !why[0])
			abort(); /* a refusal says why */
		/* The reader takes the JSON jansson takes, no more, no less. */
		if (!gzip && (!strncmp(why, "not valid JSON", 14) != (!root || nul) ||
		              !strncmp(why, "not JSON as pmcctl reads it", 27)))
			abort();
		free(why);
		return NULL;
	}
	if (!root || nul)
		abort();
	return f;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const events[] = {NULL, "page-faults", "wall", "ipc"};
	struct opts o = {0};

	if (size < 1)
		return 0;
	o.format = (enum format)(data[0] % 3);
	o.event = events[(data[0] >> 2) % 4];
	o.fail_above_set = o.event && (data[0] & 0x10);
	o.fail_below_set = o.event && (data[0] & 0x20);
	o.fail_above = o.fail_below = (data[0] & 0x40) ? 0 : 5;
	data++;
	size--;

	const uint8_t *nul = memchr(data, 0, size);
	size_t first = nul ? (size_t)(nul - data) : size;
	struct diff_file *a = parse(data, first);
	struct diff_file *b = nul ? parse(nul + 1, size - first - 1) : NULL;

	if (a && !nul && diff_compare(a, a, &o) == EXIT_FAIL)
		abort(); /* a file against itself: no change, no gate tripped */
	if (a && b)
		diff_compare(a, b, &o);
	fflush(stdout);
	diff_file_free(a);
	diff_file_free(b);
	return 0;
}
