/* procstat: one reader of /proc/PID/stat for the daemon (a process's start time and comm),
 * pmcctl run (the process tree's parents) and the ingest bench (a process's CPU time).
 * Internal only. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* The fields of /proc/PID/stat that pmc reads (proc(5) numbers them from 1). */
struct procstat {
	char comm[17];  /* field 2 without its parentheses, cut at 16 bytes */
	pid_t ppid;     /* field 4 */
	uint64_t utime; /* field 14, clock ticks */
	uint64_t stime; /* field 15, clock ticks */
	uint64_t start; /* field 22: start time, clock ticks since boot */
};

/**
 * procstat_parse() - parse the text of one /proc/PID/stat
 * @buf: the file's text, NUL-terminated, borrowed
 * @out: filled on success only
 *
 * comm may hold spaces and parentheses: the fields after it start after the last ')'.
 * Return: 0, or -EIO when the text is not such a line (no parentheses, fewer than 22
 * fields, a field read as a number without digits).
 */
int procstat_parse(const char *buf, struct procstat *out);

/**
 * procstat_read() - read and parse /proc/@pid/stat
 * @pid: a process (or thread) id
 * @out: filled on success only
 *
 * Return: 0; -ESRCH when the process is gone (no such file, or nothing to read);
 * -EIO when the text does not parse; another -errno from open().
 */
int procstat_read(pid_t pid, struct procstat *out);
