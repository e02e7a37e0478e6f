/* pmc-test-fuse-hold: a FUSE file system whose server never answers a flush, as a hostile
 * local user can mount one (fusermount) and send its files to a daemon: every close() of such
 * a file, in any process that holds it, waits for the answer, and the kernel lets no signal
 * end that wait. The tests send a file of it where the daemon does not expect one.
 *
 *   pmc-test-fuse-hold DIR     mounts on DIR (as root) a file system with one file, DIR/f
 *                              (mode 0666, empty); prints "mounted", then "flush N" for each
 *                              flush it leaves unanswered; at SIGTERM or SIGINT it unmounts
 *                              (lazily) and exits, which ends every wait on it
 *
 * Exit: 0 at a signal; 77 when FUSE cannot be mounted here (no /dev/fuse, not root); 1 on
 * another error.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define NODE_FILE 2

static volatile sig_atomic_t stop;

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* One answer: the header and @len bytes of @body. */
static void
answer(int dev, uint64_t unique, int error, const void *body, size_t len)
{
	char out[sizeof(struct fuse_out_header) + 256];
	struct fuse_out_header h = {
	        .len = (uint32_t)(sizeof(h) + len), .error = -error, .unique = unique};
	memcpy(out, &h, sizeof(h));
	if (len)
		memcpy(out + sizeof(h), body, len);
	if (write(dev, out, h.len) < 0 && errno != ENOENT) /* ENOENT: the request was interrupted */
		perror("fuse-hold: answer");
}

static void
fill_attr(struct fuse_attr *a, uint64_t node)
{
	memset(a, 0, sizeof(*a));
	a->ino = node;
	a->mode = node == NODE_FILE ? S_IFREG | 0666 : S_IFDIR | 0755;
	a->nlink = node == NODE_FILE ? 1 : 2;
	a->blksize = 4096;
}

int
main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: pmc-test-fuse-hold DIR\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int dev = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		fprintf(stderr, "fuse-hold: /dev/fuse: %s\n", strerror(errno));
		return 77;
	}
	char opts[128];
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", dev);
	if (mount("pmc-test", argv[1], "fuse.pmc-test", MS_NOSUID | MS_NODEV, opts) < 0) {
		fprintf(stderr, "fuse-hold: mount on %s: %s\n", argv[1], strerror(errno));
		return errno == EPERM || errno == ENODEV ? 77 : 1;
	}
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: read() returns */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("mounted\n");
	static char buf[FUSE_MIN_READ_BUFFER + (1 << 20)];
	unsigned flushes = 0;
	while (!stop) {
		ssize_t n = read(dev, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR || errno == ENOENT)
				continue;
			if (errno != ENODEV) /* unmounted */
				perror("fuse-hold: read");
			break;
		}
		if ((size_t)n < sizeof(struct fuse_in_header))
			continue;
		struct fuse_in_header *in = (struct fuse_in_header *)buf;
		const char *arg = buf + sizeof(*in);
		switch (in->opcode) {
		case FUSE_INIT: {
			const struct fuse_init_in *ii = (const void *)arg;
			struct fuse_init_out o = {.major = FUSE_KERNEL_VERSION,
			                          .minor = FUSE_KERNEL_MINOR_VERSION,
			                          .max_readahead = ii->max_readahead,
			                          .max_write = 4096};
			answer(dev, in->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_GETATTR: {
			struct fuse_attr_out o = {.attr_valid = 1};
			fill_attr(&o.attr, in->nodeid);
			answer(dev, in->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_LOOKUP: {
			if (in->nodeid != FUSE_ROOT_ID || strcmp(arg, "f")) {
				answer(dev, in->unique, ENOENT, NULL, 0);
				break;
			}
			struct fuse_entry_out o = {.nodeid = NODE_FILE,
			                           .generation = 1,
			                           .entry_valid = 1,
			                           .attr_valid = 1};
			fill_attr(&o.attr, NODE_FILE);
			answer(dev, in->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_OPEN:
		case FUSE_OPENDIR: {
			struct fuse_open_out o = {.fh = 1};
			answer(dev, in->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_FLUSH:
			/* Never answered: the close that sent it waits until this server ends. */
			printf("flush %u\n", ++flushes);
			break;
		case FUSE_STATFS: {
			struct fuse_statfs_out o = {.st = {.bsize = 4096, .namelen = 255}};
			answer(dev, in->unique, 0, &o, sizeof(o));
			break;
		}
		case FUSE_READ:
			answer(dev, in->unique, 0, NULL, 0); /* end of file */
			break;
		case FUSE_RELEASE:
		case FUSE_RELEASEDIR:
		case FUSE_ACCESS:
		case FUSE_DESTROY:
			answer(dev, in->unique, 0, NULL, 0);
			break;
		case FUSE_FORGET:
		case FUSE_BATCH_FORGET:
		case FUSE_INTERRUPT:
			break; /* no answer expected */
		default:
			answer(dev, in->unique, ENOSYS, NULL, 0);
			break;
		}
	}
	umount2(argv[1], MNT_DETACH);
	return 0;
}
