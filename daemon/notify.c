/* notify: READY=1, WATCHDOG=1, STATUS= and STOPPING=1 for the service manager, sent
 * from the daemon's own event loop so that a keep-alive proves the loop still turns. */
#include "notify.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef PMC_WITH_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "common/util.h"
#include "kernel/log.h"
#include "session/server.h"

/* How often STATUS= is refreshed when no watchdog asks for more. */
#define NOTIFY_STATUS_PERIOD_USEC (5 * 1000000ull)

struct notify {
	struct server *srv;
	struct event *timer;
	int watchdog;
};

#ifdef PMC_WITH_SYSTEMD
/* Sends @head (READY=1, WATCHDOG=1 or nothing) with the current figures as STATUS=. */
static void
send_status(const struct server *srv, const char *head)
{
	char msg[256];
	snprintf(msg, sizeof(msg), "%s%sSTATUS=serving %u clients, %u threads; %" PRIu64 " samples",
	         head ? head : "", head ? "\n" : "", srv->n_sessions, srv->n_threads,
	         srv->model.samples);
	int r = sd_notify(0, msg);
	if (r < 0)
		log_debug("sd_notify: %s", strerror(-r));
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct notify *n = arg;
	send_status(n->srv, n->watchdog ? "WATCHDOG=1" : NULL);
}
#endif

int
notify_start(struct server *srv, struct notify **out)
{
#ifdef PMC_WITH_SYSTEMD
	if (!getenv("NOTIFY_SOCKET")) {
		*out = NULL;
		return 0;
	}
	uint64_t usec = 0;
	int wd = sd_watchdog_enabled(0, &usec);
	if (wd < 0) {
		log_errno(wd, "ignoring the watchdog settings (WATCHDOG_USEC, WATCHDOG_PID)");
		wd = 0;
	}
	/* Half the interval, as sd_watchdog_enabled(3) advises: one late tick is no kill. */
	uint64_t period = wd > 0 ? usec / 2 : NOTIFY_STATUS_PERIOD_USEC;
	if (period == 0)
		period = 1;

	_cleanup_free_ struct notify *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->srv = srv;
	n->watchdog = wd > 0;
	n->timer = event_new(srv->base, -1, EV_PERSIST, on_tick, n);
	if (!n->timer)
		return -ENOMEM;
	struct timeval tv = {.tv_sec = (time_t)(period / 1000000),
	                     .tv_usec = (suseconds_t)(period % 1000000)};
	if (event_add(n->timer, &tv) < 0) {
		event_free(n->timer);
		return -ENOMEM;
	}
	if (n->watchdog)
		log_info("watchdog: telling systemd every %" PRIu64 " ms", period / 1000);
	send_status(srv, "READY=1");
	*out = TAKE_PTR(n);
	return 0;
#else
	*out = NULL;
	return 0;
#endif
}

void
notify_stop(struct notify *n)
{
#ifdef PMC_WITH_SYSTEMD
	(void)sd_notify(0, "STOPPING=1\nSTATUS=stopping");
#endif
	if (!n)
		return;
	event_free(n->timer);
	free(n);
}
