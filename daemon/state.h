/* state: the daemon's aggregates in a file (--state), so that they survive a restart.
 * Written atomically: a temporary file in the same directory, fsync, rename, fsync of
 * the directory; a crash leaves the previous complete file. */
#pragma once

struct server;

/**
 * state_save() - write every process's aggregates and the daemon's totals to @path
 * Return: 0 or -errno (the previous file is then untouched).
 */
int state_save(struct server *srv, const char *path);

/**
 * state_load() - restore what state_save() wrote into an empty registry
 * Return: 0, -ENOENT when there is no file yet, -EBADMSG for a file that does not
 * decode (left in place), or another -errno.
 */
int state_load(struct server *srv, const char *path);
