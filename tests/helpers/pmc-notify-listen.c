/* pmc-notify-listen: the service manager's end of sd_notify(3) for the tests, in place
 * of PID 1 systemd. It binds an AF_UNIX datagram socket at PATH (to be passed as
 * NOTIFY_SOCKET) and prints each line of each message it receives as "PID LINE", PID
 * being the sender's process as the kernel reports it (SCM_CREDENTIALS), which is
 * what systemd checks against the service's main process.
 *
 *   pmc-notify-listen PATH SECONDS
 *
 * Exits 0 after a message holding STOPPING=1, 1 when SECONDS pass first or on error. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static long long
now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Prints the lines of one message; returns whether one of them is STOPPING=1. */
static bool
print_message(pid_t pid, char *msg)
{
	bool stopping = false;
	char *save = NULL;
	for (char *line = strtok_r(msg, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		printf("%d %s\n", (int)pid, line);
		stopping |= !strcmp(line, "STOPPING=1");
	}
	fflush(stdout);
	return stopping;
}

/* Receives one message; returns 1 after STOPPING=1, 0 otherwise, -errno on error. */
static int
receive(int fd)
{
	char buf[4096];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(16 * sizeof(int))];
	} control;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf) - 1};
	struct msghdr mh = {
	        .msg_iov = &iov,
	        .msg_iovlen = 1,
	        .msg_control = &control,
	        .msg_controllen = sizeof(control),
	};
	ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	buf[n] = 0;

	pid_t pid = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET)
			continue;
		if (c->cmsg_type == SCM_CREDENTIALS) {
			struct ucred uc;
			memcpy(&uc, CMSG_DATA(c), sizeof(uc));
			pid = uc.pid;
		} else if (c->cmsg_type == SCM_RIGHTS) {
			/* FDSTORE=1 and the like: not ours to keep. */
			size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < nfd; i++) {
				int f;
				memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(f));
				close(f);
			}
		}
	}
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		fprintf(stderr, "pmc-notify-listen: a message was truncated\n");
	return print_message(pid, buf);
}

int
main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: pmc-notify-listen PATH SECONDS\n");
		return 2;
	}
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(argv[1]) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "pmc-notify-listen: %s: path too long\n", argv[1]);
		return 2;
	}
	strcpy(sa.sun_path, argv[1]);
	long long deadline = now_ms() + atoll(argv[2]) * 1000;

	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "pmc-notify-listen: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	for (;;) {
		long long left = deadline - now_ms();
		if (left <= 0) {
			fprintf(stderr, "pmc-notify-listen: no STOPPING=1 within %s s\n", argv[2]);
			break;
		}
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR) {
			fprintf(stderr, "pmc-notify-listen: poll: %s\n", strerror(errno));
			break;
		}
		if (r <= 0)
			continue;
		r = receive(fd);
		if (r < 0) {
			fprintf(stderr, "pmc-notify-listen: recvmsg: %s\n", strerror(-r));
			break;
		}
		if (r == 1) {
			close(fd);
			unlink(argv[1]);
			return 0;
		}
	}
	close(fd);
	unlink(argv[1]);
	return 1;
}
