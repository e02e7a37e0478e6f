/* tests/lib/pmc-test.h itself: a failed CHECK_EQ() and the like exits 1 and prints both
 * expressions with both values (signed, unsigned, floating point, pointers, strings), a passing
 * one goes on, and each side is evaluated once. */
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pmc-test.h"

/* Runs @fn in a child; returns its exit status and what it wrote on stderr, in @out. */
static int
run_child(void (*fn)(void), char *out, size_t size)
{
	int pfd[2];
	pid_t pid;
	int status;
	size_t n = 0;

	CHECK(pipe(pfd) == 0);
	pid = fork();
	CHECK(pid >= 0);
	if (!pid) {
		dup2(pfd[1], 2);
		close(pfd[0]);
		close(pfd[1]);
		fn();
		_exit(0);
	}
	close(pfd[1]);
	for (ssize_t k; n < size - 1 && (k = read(pfd[0], out + n, size - 1 - n)) > 0;)
		n += (size_t)k;
	out[n] = '\0';
	close(pfd[0]);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void
fail_signed(void)
{
	int regions = 4;
	long want = -5;
	CHECK_EQ(regions, want);
}

static void
fail_unsigned(void)
{
	uint64_t count = 100;
	CHECK_LT(count, 100);
}

static void
fail_double(void)
{
	CHECK_GE(0.25, 0.5);
}

static void
fail_pointer(void)
{
	static int x;
	CHECK_EQ(&x, (int *)NULL);
}

static void
fail_string(void)
{
	CHECK_STREQ("caf\xc3\xa9", (const char *)NULL);
}

static void
pass_all(void)
{
	int calls = 0;
	CHECK_EQ(++calls, 1); /* each side once */
	CHECK_EQ(calls, 1);
	CHECK_NE(1u, 2u);
	CHECK_LE(-1, 0);
	CHECK_GT(3.5, 3.25);
	CHECK_STREQ("a", "a");
	CHECK_STREQ((const char *)NULL, (const char *)NULL);
}

static void
test_harness_prints_both_sides(void)
{
	char out[1024];

	CHECK(run_child(fail_signed, out, sizeof(out)) == 1);
	CHECK(strstr(out, "check failed: regions == want"));
	CHECK(strstr(out, "regions = 4\n") && strstr(out, "want = -5\n"));
	CHECK(run_child(fail_unsigned, out, sizeof(out)) == 1);
	CHECK(strstr(out, "count = 100 (0x64)\n"));
	CHECK(run_child(fail_double, out, sizeof(out)) == 1);
	CHECK(strstr(out, "0.25 = 0.25\n") && strstr(out, "0.5 = 0.5\n"));
	CHECK(run_child(fail_pointer, out, sizeof(out)) == 1);
	CHECK(strstr(out, "&x = 0x") && strstr(out, "(int *)NULL = (nil)\n"));
	CHECK(run_child(fail_string, out, sizeof(out)) == 1);
	CHECK(strstr(out, "= \"caf\xc3\xa9\"\n") && strstr(out, "(const char *)NULL = NULL\n"));
}

static void
test_harness_passes(void)
{
	char out[256];

	CHECK(run_child(pass_all, out, sizeof(out)) == 0);
	CHECK(out[0] == '\0');
}

int
main(void)
{
	PMC_TEST_RUN(test_harness_prints_both_sides);
	PMC_TEST_RUN(test_harness_passes);
	return 0;
}
