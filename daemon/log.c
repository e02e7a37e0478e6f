/* log: stderr logging for pmcdaemon; the journal reads the "<N>" prefixes. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int log_max = LOG_INFO;
static int log_journal;

void
log_setup(int max_prio)
{
	log_max = max_prio;
	log_journal = getenv("JOURNAL_STREAM") != NULL;
}

static void
log_vprint(int prio, const char *suffix, const char *fmt, va_list ap)
{
	char line[1024];

	if (prio > log_max)
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	if (log_journal)
		fprintf(stderr, "<%d>%s%s\n", prio, line, suffix ? suffix : "");
	else
		fprintf(stderr, "pmcdaemon: %s%s\n", line, suffix ? suffix : "");
}

void
log_msg(int prio, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	log_vprint(prio, NULL, fmt, ap);
	va_end(ap);
}

int
log_errno(int r, const char *fmt, ...)
{
	char suffix[256];
	va_list ap;

	snprintf(suffix, sizeof(suffix), ": %s", strerror(r < 0 ? -r : r));
	va_start(ap, fmt);
	log_vprint(LOG_ERR, suffix, fmt, ap);
	va_end(ap);
	return r;
}
