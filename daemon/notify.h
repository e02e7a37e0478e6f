/* notify: pmcdaemon's messages to the service manager (sd_notify): READY=1 once it
 * serves, the WATCHDOG=1 keep-alive that WatchdogSec= asks for, the STATUS= line that
 * `systemctl status pmcdaemon` shows, and STOPPING=1. Does nothing outside systemd. */
#pragma once

struct server;
struct notify;

/**
 * notify_start() - tell the service manager the daemon is ready, and keep telling it
 * @srv: the server, borrowed; it must outlive the returned object, whose timer runs in
 *       @srv's loop
 *
 * Sends READY=1 and a first STATUS=. With a watchdog (WATCHDOG_USEC set and
 * WATCHDOG_PID unset or naming this process) a timer sends WATCHDOG=1 and a fresh
 * STATUS= every half interval: a loop stuck for longer gets the daemon restarted. Under
 * a service manager without a watchdog the timer only refreshes STATUS=.
 * Return: 0 with *@out set (NULL when not run by a service manager), or -errno.
 */
int notify_start(struct server *srv, struct notify **out);

/** notify_stop() - send STOPPING=1 and free @n; NULL is fine (then it only sends). */
void notify_stop(struct notify *n);
