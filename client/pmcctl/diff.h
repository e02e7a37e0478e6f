/* diff.c: pmcctl diff BASE CURRENT, two files of dump or run --format json compared region
 * by region, event by event, with the run-to-run noise; its files read with jread.h. */
#pragma once

#include <stddef.h>

#include "pmcctl/pmcctl.h"

/** cmd_diff() - pmcctl diff (the contract of struct command in pmcctl.h): compares two files of
 * dump --format json (or run's), region by region; exits 2 on a file it cannot read, 1 when
 * --fail-above or --fail-below is passed */
int cmd_diff(int sock, const struct command *cmd, const struct opts *o);

/* A file diff reads (its regions by name and its call path nodes), for diff_compare(). */
struct diff_file;

/**
 * diff_file_parse() - read @len bytes at @buf (borrowed), the JSON of dump or run --format
 * json, into *@out (set only on success; diff_file_free() frees it)
 * Return: 0; -EBADMSG when it is not such a file (not JSON, truncated, a newer
 * format_version, a pprof profile, over 1 GiB, a region without its figures), with *@why
 * set to a sentence saying so, the caller's to free. Exits on allocation failure.
 */
int diff_file_parse(const void *buf, size_t len, struct diff_file **out, char **why);

/** diff_file_free() - free @f (NULL ok) */
void diff_file_free(struct diff_file *f);

/**
 * diff_compare() - print to stdout, in @o->format, @base (borrowed) against @cur (borrowed)
 * region by region, with @o->event's gate (--fail-above, --fail-below)
 * Return: 0; 1 (EXIT_FAIL) when a figure is past the gate; 2 when no region of both files
 * counted @o->event (said on stderr).
 */
int diff_compare(const struct diff_file *base, const struct diff_file *cur, const struct opts *o);
