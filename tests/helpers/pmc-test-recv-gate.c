/* pmc-test-recv-gate: an LD_PRELOAD module for pmcdaemon that stops it, once, inside the
 * recvmsg() that would find a client's socket empty, until the test lets it go: so that a test
 * can put a frame in the client's SampleRing and send a datagram between the daemon's look at
 * the ring and its read of the socket (the order daemon/session/session.c parks a datagram
 * for), which no client can time from outside.
 *
 * PMC_TEST_GATE=DIR in the daemon's environment; DIR holds two FIFOs, notify and go, made by
 * the test. Once DIR/arm exists (a client makes it), the gate is armed: the next recvmsg() that
 * reads a datagram names the socket; the first recvmsg() on that socket after it that would
 * find nothing queued opens DIR/notify and writes a byte (waiting for a reader), then reads a
 * byte from DIR/go (waiting for a writer), then reads the socket. It fires once. Without
 * PMC_TEST_GATE, recvmsg() is the C library's, untouched. Errors of its own go to stderr; errno
 * is the C library's recvmsg()'s. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

enum gate_state { GATE_IDLE, GATE_ARMED, GATE_PRIMED, GATE_DONE };

static enum gate_state state;
static int gate_fd = -1;

/* Writes a byte to DIR/@name, or reads one from it, each end waiting for the other's. */
static void
fifo_byte(const char *dir, const char *name, int write_it)
{
	char path[PATH_MAX], c = 'g';
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, write_it ? O_WRONLY : O_RDONLY);
	if (fd < 0 || (write_it ? write(fd, &c, 1) : read(fd, &c, 1)) != 1)
		fprintf(stderr, "pmc-test-recv-gate: %s: %m\n", path);
	if (fd >= 0)
		close(fd);
}

/* Before a recvmsg() on @fd: arms, or fires where the armed socket has nothing queued. */
static void
gate_before(const char *dir, int fd)
{
	char path[PATH_MAX], c;
	if (state == GATE_IDLE) {
		snprintf(path, sizeof(path), "%s/arm", dir);
		if (access(path, F_OK) == 0 && unlink(path) == 0)
			state = GATE_ARMED;
		return;
	}
	if (state != GATE_PRIMED || fd != gate_fd)
		return;
	if (recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) >= 0 || errno != EAGAIN)
		return;
	state = GATE_DONE;
	fifo_byte(dir, "notify", 1);
	fifo_byte(dir, "go", 0);
}

ssize_t
recvmsg(int fd, struct msghdr *msg, int flags)
{
	static ssize_t (*real)(int, struct msghdr *, int);
	const char *dir = getenv("PMC_TEST_GATE");
	if (!real)
		real = (ssize_t(*)(int, struct msghdr *, int))dlsym(RTLD_NEXT, "recvmsg");
	if (dir && state != GATE_DONE) {
		int saved = errno;
		gate_before(dir, fd);
		errno = saved;
	}
	ssize_t r = real(fd, msg, flags);
	if (dir && state == GATE_ARMED && r > 0) {
		state = GATE_PRIMED;
		gate_fd = fd;
	}
	return r;
}
