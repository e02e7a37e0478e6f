/* pmc-test-hw-ref: what the kernel itself gives for the events the hardware suite asks pmc
 * for, opened exactly as pmcdaemon opens them (daemon/perf.c: names, the PMU's format bits,
 * groups), but on this thread, with no daemon and no libpmcclient. Needs the right to count
 * itself (root where perf_event_paranoid is 3). Prints "key=value" lines.
 *
 *   caps EVENT       opens EVENT, enables it, runs a little and prints its user page's
 *                    cap_user_rdpmc, cap_user_time, cap_user_time_short, index, pmc_width, and
 *                    user_reads=0|1 and hint= as pmcdaemon finds them (perf_user_reads()):
 *                    whether libpmcclient can read this event in user space here
 *   mux N K EVENT... opens the events in pmcdaemon's groups (the kernel multiplexes them when
 *                    they do not fit) and runs K regions of hw_loop2(N), each read with read()
 *                    of every group before and after and scaled as libpmcclient scales; prints
 *                    truth=2NK, and per event "NAME=SUM RATIO_MIN RATIO_MAX": the sum of the
 *                    scaled deltas and the range of running/enabled
 *
 * Exit 0 on success, 1 on a failure (said on stderr), 2 on a usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hw-loop.h"
#include "perf.h"
#include "reader.h"

static uint64_t
parse_u64(const char *s, uint64_t min)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || end == s || *end || v < min) {
		fprintf(stderr, "pmc-test-hw-ref: bad number '%s'\n", s);
		exit(2);
	}
	return v;
}

/* Opens @n events on this thread as pmcdaemon would, in @order (opening order) and @group, and
 * enables every group. */
static void
open_events(char **names, size_t n, char **ordered, uint32_t *group, int *fds)
{
	size_t order[PMC_LIMIT_EVENTS], failed = 0;
	int r = perf_plan(names, n, order, group);

	if (r < 0) {
		fprintf(stderr, "pmc-test-hw-ref: %s\n", strerror(-r));
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		ordered[i] = names[order[i]];
	r = perf_open_group(gettid(), ordered, group, n, fds, &failed);
	if (r < 0) {
		fprintf(stderr, "pmc-test-hw-ref: perf_event_open(%s): %s\n", ordered[failed],
		        strerror(-r));
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		if ((i == 0 || group[i] != group[i - 1]) &&
		    ioctl(fds[i], PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP) < 0) {
			perror("pmc-test-hw-ref: PERF_EVENT_IOC_ENABLE");
			exit(1);
		}
}

static int
cmd_caps(char *name)
{
	char *ordered[1];
	uint32_t group[1];
	int fd;
	const char *hint;

	open_events(&name, 1, ordered, group, &fd);
	void *p = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		perror("pmc-test-hw-ref: mmap");
		return 1;
	}
	const volatile struct perf_event_mmap_page *pc = p;
	hw_loop2(1000);
	printf("cap_user_rdpmc=%u\ncap_user_time=%u\ncap_user_time_short=%u\nindex=%u\n"
	       "pmc_width=%u\n",
	       (unsigned)pc->cap_user_rdpmc, (unsigned)pc->cap_user_time,
	       (unsigned)pc->cap_user_time_short, pc->index, (unsigned)pc->pmc_width);
	printf("user_reads=%d\nhint=%s\n", perf_user_reads(&hint), hint ? hint : "");
	munmap(p, (size_t)sysconf(_SC_PAGESIZE));
	close(fd);
	return 0;
}

/* Reads every group into v: counts in v[0..n), enabled in v[n..2n), running in v[2n..3n). */
static void
read_all(const int *fds, const uint32_t *group, size_t n, uint64_t *v)
{
	uint64_t buf[3 + PMC_LIMIT_EVENTS];

	for (size_t g = 0; g < n;) {
		size_t end = g + 1;
		while (end < n && group[end] == group[g])
			end++;
		ssize_t r = read(fds[g], buf, sizeof(buf));
		if (r < 0 || pmc_reader_parse_group(buf, (size_t)r / sizeof(uint64_t), end - g,
		                                    v + g, &v[n + g], &v[2 * n + g]) < 0) {
			fprintf(stderr, "pmc-test-hw-ref: read of a group failed\n");
			exit(1);
		}
		for (size_t i = g + 1; i < end; i++) {
			v[n + i] = v[n + g];
			v[2 * n + i] = v[2 * n + g];
		}
		g = end;
	}
}

static int
cmd_mux(uint64_t iters, long k, char **names, size_t n)
{
	char *ordered[PMC_LIMIT_EVENTS];
	uint32_t group[PMC_LIMIT_EVENTS];
	int fds[PMC_LIMIT_EVENTS];
	uint64_t v0[3 * PMC_LIMIT_EVENTS], v1[3 * PMC_LIMIT_EVENTS], sum[PMC_LIMIT_EVENTS] = {0};
	double rmin[PMC_LIMIT_EVENTS], rmax[PMC_LIMIT_EVENTS];

	open_events(names, n, ordered, group, fds);
	for (size_t j = 0; j < n; j++) {
		rmin[j] = 2;
		rmax[j] = -1;
	}
	for (long i = 0; i < k; i++) {
		read_all(fds, group, n, v0);
		hw_loop2(iters);
		read_all(fds, group, n, v1);
		for (size_t j = 0; j < n; j++) {
			uint64_t dv = v1[j] - v0[j], de = v1[n + j] - v0[n + j];
			uint64_t dr = v1[2 * n + j] - v0[2 * n + j];
			double ratio = de ? (double)dr / (double)de : 0;

			sum[j] += pmc_scale(dv, de, dr);
			rmin[j] = ratio < rmin[j] ? ratio : rmin[j];
			rmax[j] = ratio > rmax[j] ? ratio : rmax[j];
		}
	}
	printf("truth=%" PRIu64 "\n", 2 * iters * (uint64_t)k);
	for (size_t j = 0; j < n; j++) {
		printf("%s=%" PRIu64 " %.4f %.4f\n", ordered[j], sum[j], rmin[j], rmax[j]);
		close(fds[j]);
	}
	return 0;
}

int
main(int argc, char **argv)
{
	int r = 2;

	setvbuf(stdout, NULL, _IOLBF, 0);
	perf_setup();
	if (argc == 3 && !strcmp(argv[1], "caps"))
		r = cmd_caps(argv[2]);
	else if (argc >= 5 && argc - 4 <= PMC_LIMIT_EVENTS && !strcmp(argv[1], "mux"))
		r = cmd_mux(parse_u64(argv[2], 1), (long)parse_u64(argv[3], 1), argv + 4,
		            (size_t)argc - 4);
	else
		fprintf(stderr, "usage: pmc-test-hw-ref caps EVENT | mux N K EVENT...\n");
	perf_cleanup();
	return r;
}
