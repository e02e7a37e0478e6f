/* Writes fuzz-pprof's seeds to DIR (tests/fuzz/corpus-pprof; target regen-seeds): a
 * per-name QueryReply and a Query.tree one, in the harness's format (the first's length in
 * 2 bytes, big-endian, the first, then the second): a process whose tree is main > parse >
 * lex with a multiplexed event and a region no node holds; the same without a tree; two
 * processes of one program. */
#include <stdio.h>
#include <stdlib.h>

#include "pmc.pb-c.h"

static void
write_seed(const char *dir, const char *name, const Pmc__QueryReply *flat,
           const Pmc__QueryReply *tree)
{
	char path[4096];
	size_t n1 = pmc__query_reply__get_packed_size(flat);
	size_t n2 = tree ? pmc__query_reply__get_packed_size(tree) : 0;
	uint8_t *buf = malloc(2 + n1 + n2);
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (!buf || n1 > 0xffff || !(f = fopen(path, "wb"))) {
		perror(path);
		exit(1);
	}
	buf[0] = (uint8_t)(n1 >> 8);
	buf[1] = (uint8_t)n1;
	pmc__query_reply__pack(flat, buf + 2);
	if (tree)
		pmc__query_reply__pack(tree, buf + 2 + n1);
	if (fwrite(buf, 1, 2 + n1 + n2, f) != 2 + n1 + n2 || fclose(f)) {
		perror(path);
		exit(1);
	}
	free(buf);
}

int
main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : ".";
	Pmc__Stats st[6];
	Pmc__EventStats ev[6], *evp[6];
	Pmc__RegionStats rs[6], *flat_r[3], *tree_r[3];
	static const char *const names[] = {"main", "parse", "old-style"};

	for (int i = 0; i < 6; i++) {
		pmc__stats__init(&st[i]);
		st[i].sum = 100 >> (i % 3);
		st[i].min = st[i].max = 1;
		pmc__event_stats__init(&ev[i]);
		ev[i].name = "page-faults";
		ev[i].stats = &st[i];
		evp[i] = &ev[i];
		pmc__region_stats__init(&rs[i]);
		rs[i].pid = 42;
		rs[i].comm = "app";
		rs[i].cgroup = "/system.slice/app.service";
		rs[i].uid = 1000;
		rs[i].count = 3;
		rs[i].wall_ns = &st[i];
		rs[i].n_events = 1;
		rs[i].events = &evp[i];
	}
	ev[1].scaled_count = 2;
	ev[1].scaled_ratio = 0.5;
	for (int i = 0; i < 3; i++) {
		rs[i].name = (char *)names[i];
		flat_r[i] = &rs[i];
		tree_r[i] = &rs[3 + i];
		rs[3 + i].path = (uint32_t)i + 1;
		rs[3 + i].parent = (uint32_t)i;
	}
	rs[3].name = "main";
	rs[4].name = "parse";
	rs[5].name = "lex";
	Pmc__QueryReply flat = PMC__QUERY_REPLY__INIT, tree = PMC__QUERY_REPLY__INIT;
	flat.n_regions = 3;
	flat.regions = flat_r;
	tree.n_regions = 3;
	tree.regions = tree_r;
	write_seed(dir, "tree", &flat, &tree);
	write_seed(dir, "no-tree", &flat, NULL);
	rs[5].pid = 43; /* lex: another process of app, its parent unknown there */
	write_seed(dir, "two-processes", &flat, &tree);
	return 0;
}
