/* log: the daemon's messages on stderr, with sd-daemon "<N>" priority prefixes when
 * stderr goes to the journal (JOURNAL_STREAM set), "pmcdaemon: " otherwise. */
#pragma once

#include <stdbool.h>
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

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_warn_limited(...) log_limited(LOG_WARNING, __VA_ARGS__)
