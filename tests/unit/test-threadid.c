/* threadid and fdcheck: the NSpid fields of /proc status texts, a thread's pidfd resolved
 * in this namespace (and refused when it is another process's, ended, or no pidfd), the
 * claimed-id search among a process's own threads, and fds told apart by kind and closed
 * without blocking. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdcheck.h"
#include "pmc-test.h"
#include "threadid.h"

static void
test_nspid_fields(void)
{
	static const struct {
		const char *text;
		int depth;
		pid_t last;
	} cases[] = {
	        {"Name:\tx\nTgid:\t7\nNSpid:\t4242\nUid:\t0\n", 1, 4242},
	        {"Name:\tx\nNSpid:\t4242\t17\n", 2, 17},
	        {"NSpid:\t4242\t17\t1\nNSsid:\t1\n", 3, 1},
	        {"Name:\tx\n", 0, -1},
	        {"NSpid:\t\n", 0, -1},
	        {"NSpid:\t99999999999\n", 1, -1}, /* past pid_t */
	        {"Pid:\t5\nNSpid:\t5 6 7", 3, 7}, /* no final newline */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int d = threadid_ns_depth(cases[i].text);
		pid_t l = threadid_ns_last(cases[i].text);
		if (d != cases[i].depth || l != cases[i].last) {
			fprintf(stderr, "case %zu: depth %d (want %d), last %d (want %d)\n", i, d,
			        cases[i].depth, (int)l, (int)cases[i].last);
			exit(1);
		}
	}
}

static pid_t
gettid_(void)
{
	return (pid_t)syscall(SYS_gettid);
}

struct held {
	pid_t tid;
	int go[2];
};

static void *
held_main(void *p)
{
	struct held *h = p;
	char c;
	__atomic_store_n(&h->tid, gettid_(), __ATOMIC_RELEASE);
	while (read(h->go[0], &c, 1) > 0)
		;
	return NULL;
}

static void
test_pidfd(void)
{
	char why[256];
	int pfd = (int)syscall(SYS_pidfd_open, gettid_(), O_EXCL /* PIDFD_THREAD */);
	if (pfd < 0 && errno == EINVAL) {
		printf("# no PIDFD_THREAD on this kernel: pidfd checks skipped\n");
		return;
	}
	CHECK(pfd >= 0);
	CHECK(threadid_from_pidfd(pfd, getpid(), why, sizeof(why)) == gettid_());
	CHECK(threadid_check(pfd, getpid(), gettid_()) == 0);
	/* Not this process's: the parent (when it is not init). */
	pid_t pp = getppid();
	int other = (int)syscall(SYS_pidfd_open, pp, 0);
	if (pp > 1 && other >= 0) {
		CHECK(threadid_from_pidfd(other, getpid(), why, sizeof(why)) == -EPERM);
		CHECK(strstr(why, "not a thread of the calling process"));
		close(other);
	}
	close(pfd);
	/* A thread of this process, ended. */
	struct held h = {0};
	pthread_t th;
	CHECK(pipe(h.go) == 0 && pthread_create(&th, NULL, held_main, &h) == 0);
	while (!__atomic_load_n(&h.tid, __ATOMIC_ACQUIRE))
		;
	pfd = (int)syscall(SYS_pidfd_open, h.tid, O_EXCL);
	CHECK(pfd >= 0);
	CHECK(threadid_from_pidfd(pfd, getpid(), why, sizeof(why)) == h.tid);
	close(h.go[1]);
	pthread_join(th, NULL);
	/* pthread_join() returns once the kernel cleared the thread's tid word, which it does
	 * before the thread's last steps out (its pidfd still names it for a moment: a loaded
	 * CI machine saw it): wait for the end, up to 5 s. */
	for (int i = 0; i < 500 && threadid_check(pfd, getpid(), h.tid) != -ESRCH; i++)
		usleep(10000);
	CHECK(threadid_check(pfd, getpid(), h.tid) == -ESRCH);
	CHECK(threadid_from_pidfd(pfd, getpid(), why, sizeof(why)) == -ESRCH);
	close(pfd);
	close(h.go[0]);
	/* Not a pidfd at all. */
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(threadid_from_pidfd(null, getpid(), why, sizeof(why)) == -EBADF);
	CHECK(strstr(why, "not a pidfd"));
	close(null);
}

static void
test_claimed(void)
{
	char why[256];
	CHECK(threadid_same_ns(getpid()));
	CHECK(threadid_claimed(getpid(), true, gettid_(), why, sizeof(why)) == gettid_());
	/* The search that a process in another namespace gets finds the same thread. */
	CHECK(threadid_claimed(getpid(), false, gettid_(), why, sizeof(why)) == gettid_());
	struct held h = {0};
	pthread_t th;
	CHECK(pipe(h.go) == 0 && pthread_create(&th, NULL, held_main, &h) == 0);
	while (!__atomic_load_n(&h.tid, __ATOMIC_ACQUIRE))
		;
	CHECK(threadid_claimed(getpid(), false, h.tid, why, sizeof(why)) == h.tid);
	close(h.go[1]);
	pthread_join(th, NULL);
	close(h.go[0]);
	/* Another process's id: never found, whatever the namespace. */
	pid_t child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	CHECK(threadid_claimed(getpid(), true, child, why, sizeof(why)) == -EPERM);
	CHECK(threadid_claimed(getpid(), false, child, why, sizeof(why)) == -EPERM);
	CHECK(strstr(why, "not a thread of the calling process"));
	CHECK(threadid_claimed(getpid(), false, 0, why, sizeof(why)) == -EPERM);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

static void
test_fdcheck(void)
{
	int sv[2], p[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0 && pipe(p) == 0);
	int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int pfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	CHECK(pmc_fdcheck_kind(sv[0]) == FDCHECK_SOCKET);
	CHECK(pmc_fdcheck_kind(p[0]) == FDCHECK_PIPE);
	CHECK(pmc_fdcheck_kind(null) == FDCHECK_OTHER);
	CHECK(pfd < 0 || pmc_fdcheck_kind(pfd) == FDCHECK_PIDFD);
	CHECK(pmc_fdcheck_kind(1000000) == FDCHECK_BAD);
	int before = pmc_test_count_fds();
	pmc_fdcheck_close(sv[0], 7);
	pmc_fdcheck_close(sv[1], 7);
	pmc_fdcheck_close(p[0], 7);
	pmc_fdcheck_close(p[1], 7);
	pmc_fdcheck_close(pfd, 7);
	/* A path goes to the closer thread: closed soon, counted meanwhile. */
	pmc_fdcheck_close(null, 7);
	for (int i = 0; i < 1000 && pmc_fdcheck_pending(7); i++)
		usleep(1000);
	CHECK(pmc_fdcheck_pending(7) == 0);
	CHECK(pmc_test_count_fds() == before - 6 + (pfd < 0));
	CHECK(pmc_fdcheck_leaked() == 0);
}

int
main(void)
{
	PMC_TEST_RUN(test_nspid_fields);
	PMC_TEST_RUN(test_pidfd);
	PMC_TEST_RUN(test_claimed);
	PMC_TEST_RUN(test_fdcheck);
	return 0;
}
