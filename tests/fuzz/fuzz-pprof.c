/* libFuzzer target: pmcctl's pprof writer (pprof_write()) on the replies of a daemon that
 * sends anything: the input is two packed QueryReply messages, the per-name one and the
 * Query.tree one (a 2-byte length, then the first; the rest is the second), which protobuf-c
 * decodes, and whatever decodes is written as a profile, with and without --region. Call
 * path nodes that name unknown, later or their own parents, repeated ids, pids and names,
 * events named in one node and not the next, negative self figures: no crash, no leak, no
 * sanitizer report.
 *
 * Seeds: tests/fuzz/corpus-pprof (replies of a real daemon, written by e2e-pprof's
 * PMC_PPROF_SEEDS). */
#include <stdio.h>
#include <stdlib.h>

#include "pmcctl/pmcctl.h"
#include "pmcctl/pprof.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const region[] = {"parse*"};
	struct opts o = {0};

	if (size < 3)
		return 0;
	size_t first = (size_t)data[0] << 8 | data[1];
	if (first > size - 2)
		return 0;
	Pmc__QueryReply *flat = pmc__query_reply__unpack(NULL, first, data + 2);
	Pmc__QueryReply *tree = pmc__query_reply__unpack(NULL, size - 2 - first, data + 2 + first);

	if (flat) {
		pprof_write(flat, tree, &o, NULL, NULL, NULL);
		o.regions = (const char **)region;
		o.n_regions = 1;
		pprof_write(flat, tree, &o, NULL, NULL, NULL);
	}
	pmc__query_reply__free_unpacked(flat, NULL);
	pmc__query_reply__free_unpacked(tree, NULL);
	return 0;
}
