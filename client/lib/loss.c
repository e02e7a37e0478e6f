/* libpmcclient's losses and warnings, owner of G.loss: the process-wide counts of samples
 * lost by reason (any thread adds to them; batches report them, send.c), and the library's
 * lines on stderr, each said once: one about connecting or registering, one per reason of
 * loss. Locks: client-internal.h. */
#include <stdarg.h>
#include <stdio.h>

#include "lib/client-internal.h"

/* Says the line of @fmt on stderr unless @said was set, and sets it. */
static void
vwarn_once(atomic_flag *said, const char *fmt, va_list ap)
{
	if (atomic_flag_test_and_set(said))
		return;
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(stderr, "pmc: %s\n", line);
}

/* The one line about connecting or registering. */
void
pmc__warn_once(const char *fmt, ...)
{
	static atomic_flag said = ATOMIC_FLAG_INIT;
	va_list ap;
	va_start(ap, fmt);
	vwarn_once(&said, fmt, ap);
	va_end(ap);
}

/* The one line about samples lost for reason @why. */
void
pmc__warn_loss(unsigned why, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vwarn_once(&G.loss.warned[why], fmt, ap);
	va_end(ap);
}

/* The parent's losses are its own; the lines said stay said. */
void
pmc__loss_fork_child(void)
{
	for (unsigned k = 0; k < PMC_LOSS_LIB_N; k++) {
		atomic_store(&G.loss.lost[k], 0);
		G.loss.reported[k] = 0;
	}
}
