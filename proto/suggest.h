/* suggest: the did-you-mean of a mistyped name (an event for pmcdaemon, a command for
 * pmcctl): the nearest of a list by edit distance, when near enough to be a typo. Pure and
 * header-only, shared by daemon/perf.c and client/pmcctl/main.c. Internal only. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The longest name suggest_distance() compares; longer ones are never near. */
#define SUGGEST_NAME_MAX 256

/**
 * suggest_distance() - the Levenshtein distance between @a and @b: the fewest characters to
 * insert, delete or replace to make one the other
 * Return: the distance; SIZE_MAX when either is longer than SUGGEST_NAME_MAX.
 */
static inline size_t
suggest_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t row[SUGGEST_NAME_MAX + 1];

	if (la > SUGGEST_NAME_MAX || lb > SUGGEST_NAME_MAX)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/**
 * suggest_near() - whether a name at distance @d from @name (suggest_distance()) looks like
 * a typo of it rather than another name: at most 1 + a third of @name's length
 */
static inline int
suggest_near(const char *name, size_t d)
{
	return d <= 1 + strlen(name) / 3;
}
