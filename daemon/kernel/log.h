/* log: the daemon's messages on stderr, with sd-daemon "<N>" priority prefixes when
 * stderr goes to the journal (JOURNAL_STREAM set), "pmcdaemon: " otherwise. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <syslog.h>

/**
 * log_setup() - choose the prefix style and the most verbose priority printed
 * @max_prio: LOG_INFO normally, LOG_DEBUG with --verbose
 */
void log_setup(int max_prio);

/** log_enabled() - whether a line at priority @prio would be printed (LOG_DEBUG: --verbose),
 * so that a caller may skip gathering what only such a line says */
bool log_enabled(int prio);

/** log_msg() - print one line at priority @prio (LOG_ERR ... LOG_DEBUG). */
void log_msg(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/**
 * log_errno() - print "MESSAGE: strerror(-r)" at LOG_ERR
 * @r: negative errno
 * Return: @r, so that callers can `return log_errno(r, "...");`.
 */
int log_errno(int r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/**
 * log_limited() - log_msg() for lines a client can cause: at most 20 every 10 s over all
 * clients; the rest are counted and their number logged when the next window opens
 */
void log_limited(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A rate limit on the lines a condition logs (zero: nothing logged yet). */
struct log_gate {
	uint64_t start_ns;  /* when the current window opened (0: none yet) */
	unsigned passed;    /* lines let through in it */
	unsigned long held; /* occurrences held back in it */
};

/**
 * log_gate_pass() - whether @n occurrences (usually 1) of @g's condition are logged now
 * @g: the gate, borrowed; zeroed memory is a fresh one
 * @now_ns: a monotonic clock, now
 * @window_ns: a window opens at the first occurrence after the last window closed, and
 *	closes @window_ns later
 * @burst: lines let through per window (at least 1)
 * @n: occurrences now
 * @held: set to the occurrences held back in the window that closed at this call (to be
 *	said in the line, or a line of its own), 0 when none closed
 * @held_ns: set, when not NULL, to how long that window lasted (0 when none closed)
 *
 * Never logs itself: the caller says what to. Not thread-safe (the daemon's one loop).
 * Return: true when the caller is to log now; false when the occurrences are held back.
 */
bool log_gate_pass(struct log_gate *g, uint64_t now_ns, uint64_t window_ns, unsigned burst,
                   unsigned long n, unsigned long *held, uint64_t *held_ns);

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_warn_limited(...) log_limited(LOG_WARNING, __VA_ARGS__)
