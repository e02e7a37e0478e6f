/* log: stderr logging for pmcdaemon; the journal reads the "<N>" prefixes. */
#include "kernel/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/util.h"

/* Lines a client can cause: at most LOG_LIMIT_BURST every LOG_LIMIT_WINDOW_S seconds. */
#define LOG_LIMIT_BURST 20
#define LOG_LIMIT_WINDOW_S 10

static int log_max = LOG_INFO;
static int log_journal;

bool
log_enabled(int prio)
{
	return prio <= log_max;
}

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
	/* Names in a message come from clients: no control character reaches the log, nor
	 * any byte beyond ASCII (a C1 control, a bidi override, invalid UTF-8). */
	char safe[4 * sizeof(line)];
	size_t o = 0;
	for (const unsigned char *c = (const unsigned char *)line; *c; c++)
		if (*c < 0x20 || *c >= 0x7f)
			o += (size_t)snprintf(safe + o, sizeof(safe) - o, "\\x%02x", *c);
		else
			safe[o++] = (char)*c;
	safe[o] = 0;
	if (log_journal)
		fprintf(stderr, "<%d>%s%s\n", prio, safe, suffix ? suffix : "");
	else
		fprintf(stderr, "pmcdaemon: %s%s\n", safe, suffix ? suffix : "");
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

bool
log_gate_pass(struct log_gate *g, uint64_t now_ns, uint64_t window_ns, unsigned burst,
              unsigned long n, unsigned long *held, uint64_t *held_ns)
{
	*held = 0;
	if (held_ns)
		*held_ns = 0;
	if (!g->start_ns || now_ns - g->start_ns >= window_ns) {
		*held = g->held;
		if (held_ns && g->start_ns)
			*held_ns = now_ns - g->start_ns;
		g->start_ns = now_ns ? now_ns : 1;
		g->passed = 0;
		g->held = 0;
	}
	if (g->passed >= burst) {
		g->held += n;
		return false;
	}
	g->passed++;
	return true;
}

void
log_limited(int prio, const char *fmt, ...)
{
	static struct log_gate gate;
	unsigned long held;
	uint64_t held_ns;
	va_list ap;

	if (prio > log_max)
		return;
	bool pass = log_gate_pass(&gate, util_now_ns(CLOCK_MONOTONIC_COARSE),
	                          LOG_LIMIT_WINDOW_S * 1000000000ull, LOG_LIMIT_BURST, 1, &held,
	                          &held_ns);
	if (held)
		log_msg(LOG_WARNING,
		        "%lu messages about clients suppressed in %d s (at most %d are "
		        "logged per %d s)",
		        held, (int)(held_ns / 1000000000u), LOG_LIMIT_BURST, LOG_LIMIT_WINDOW_S);
	if (!pass)
		return;
	va_start(ap, fmt);
	log_vprint(prio, NULL, fmt, ap);
	va_end(ap);
}
