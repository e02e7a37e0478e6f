/* A program with functions of its own named as pmc's internals were named before they took
 * the pmc_ prefix (wire_send, fdcheck_close, list_add), linked with the static library: it
 * must link (no "multiple definition") and each call must reach the program's own function,
 * while pmc_begin()/pmc_end() still work (here without a daemon: one warning, then no-ops).
 * Exits 0 when all three of its functions answered and pmc_region() returned. */
#include <stdio.h>
#include <stdlib.h>

#include <pmc/pmc.h>

static int calls;

int wire_send(int fd, const void *msg, int flags);
int fdcheck_close(int fd, int owner);
void list_add(void *list, void *item);

int
wire_send(int fd, const void *msg, int flags)
{
	(void)msg;
	calls++;
	return fd + flags + 1;
}

int
fdcheck_close(int fd, int owner)
{
	calls++;
	return fd * 2 + owner;
}

void
list_add(void *list, void *item)
{
	(void)list;
	(void)item;
	calls++;
}

int
main(void)
{
	int ok = 1;
	{
		PMC_SCOPE("own-names");
		ok &= wire_send(1, NULL, 2) == 4;
		ok &= fdcheck_close(3, 1) == 7;
		list_add(NULL, NULL);
	}
	pmc_flush();
	if (!ok || calls != 3) {
		fprintf(stderr,
		        "FAIL: the program's own functions answered %d of 3 calls (ok=%d)\n", calls,
		        ok);
		return 1;
	}
	printf("ok - wire_send, fdcheck_close and list_add of the program's own, beside the static "
	       "libpmcclient\n");
	return 0;
}
