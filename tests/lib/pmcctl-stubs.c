/* What pmcctl's main.c gives the rest of pmcctl (pmcctl_fail(), pmcctl_oom(),
 * pmcctl_usage_error()), for the tests and fuzzers that link pmcctl's files without it: each
 * aborts, after saying why, as a failure a test must never reach. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "pmcctl/pmcctl.h"

static void __attribute__((noreturn, format(printf, 1, 0))) vdie(const char *fmt, va_list ap)
{
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	abort();
}

void
pmcctl_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie(fmt, ap);
}

void
pmcctl_usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie(fmt, ap);
}

void
pmcctl_oom(void)
{
	pmcctl_fail("out of memory");
}
