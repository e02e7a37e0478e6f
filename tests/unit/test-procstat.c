/* procstat_parse() and procstat_read() (proto/common/procstat.h), the one /proc/PID/stat reader of
 * the daemon, pmcctl run and the ingest bench: a comm with spaces and parentheses, the
 * fields counted after the last ')', short or broken lines refused, a process that is gone. */
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/procstat.h"
#include "pmc-test.h"

/* Fields 3 to 22 after the comm: ppid 7, utime 11, stime 12, start 1234567. */
#define TAIL " S 7 3 3 0 -1 4194560 100 0 0 0 11 12 0 0 20 0 1 0 1234567 4096 1 0 0 0\n"

static void
test_procstat_parse_fields(void)
{
	struct procstat st;

	CHECK_EQ(procstat_parse("42 (cat)" TAIL, &st), 0);
	CHECK_STREQ(st.comm, "cat");
	CHECK_EQ(st.ppid, 7);
	CHECK(st.utime == 11 && st.stime == 12);
	CHECK_EQ(st.start, 1234567);
}

static void
test_procstat_parse_odd_comm(void)
{
	struct procstat st;

	/* A comm can hold spaces, '(' and ')': the fields start after the last ')'. */
	CHECK(procstat_parse("42 (a) b (c) d)" TAIL, &st) == 0);
	CHECK(!strcmp(st.comm, "a) b (c) d"));
	CHECK(st.ppid == 7 && st.start == 1234567);
	/* Cut at 16 bytes. */
	CHECK_EQ(procstat_parse("42 (0123456789abcdefXYZ)" TAIL, &st), 0);
	CHECK_STREQ(st.comm, "0123456789abcdef");
	CHECK_EQ(procstat_parse("42 ()" TAIL, &st), 0);
	CHECK_STREQ(st.comm, "");
}

static void
test_procstat_parse_refuses(void)
{
	struct procstat st = {.ppid = 99};

	CHECK_EQ(procstat_parse("", &st), -EIO);
	CHECK_EQ(procstat_parse("42 cat S 7", &st), -EIO);
	CHECK_EQ(procstat_parse("42 )cat( S 7" TAIL, &st), -EIO);
	/* 21 fields: no start time. */
	CHECK(procstat_parse("42 (cat) S 7 3 3 0 -1 4194560 100 0 0 0 11 12 0 0 20 0 1 0", &st) ==
	      -EIO);
	/* A number without digits. */
	CHECK(procstat_parse("42 (cat) S x 3 3 0 -1 4194560 100 0 0 0 11 12 0 0 20 0 1 0 9", &st) ==
	      -EIO);
	CHECK(procstat_parse("42 (cat) S 7 3 3 0 -1 4194560 100 0 0 0 11 12 0 0 20 0 1 0 ", &st) ==
	      -EIO);
	CHECK_EQ(st.ppid, 99); /* untouched on failure */
}

static void
test_procstat_read_self(void)
{
	struct procstat st;
	char name[17] = {0};

	CHECK_EQ(prctl(PR_SET_NAME, "proc stat (t)"), 0);
	CHECK_EQ(prctl(PR_GET_NAME, name), 0);
	CHECK_EQ(procstat_read(getpid(), &st), 0);
	CHECK_STREQ(st.comm, name);
	CHECK_EQ(st.ppid, getppid());
	CHECK(st.start > 0);
}

static void
test_procstat_read_gone(void)
{
	struct procstat st;
	pid_t pid = fork();

	CHECK(pid >= 0);
	if (!pid)
		_exit(0);
	CHECK_EQ(waitpid(pid, NULL, 0), pid);
	CHECK_EQ(procstat_read(pid, &st), -ESRCH);
}

int
main(void)
{
	int fds = pmc_test_count_fds();

	PMC_TEST_RUN(test_procstat_parse_fields);
	PMC_TEST_RUN(test_procstat_parse_odd_comm);
	PMC_TEST_RUN(test_procstat_parse_refuses);
	PMC_TEST_RUN(test_procstat_read_self);
	PMC_TEST_RUN(test_procstat_read_gone);
	CHECK_EQ(pmc_test_count_fds(), fds);
	return 0;
}
