/* suggest: the did-you-mean of a mistyped name (an event for pmcdaemon, a command for
 * pmcctl): the nearest of a list by edit distance, when near enough to be a typo. Pure and
 * header-only, shared by daemon/kernel/perf.c and client/pmcctl/main.c. Internal only. */
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

/* The nearest candidate so far to a mistyped name. */
struct suggest {
	const char *name; /* the mistyped name, borrowed */
	const char *best; /* the nearest candidate so far, borrowed (NULL: none yet) */
	size_t d;         /* its distance */
};

/** suggest_init() - start looking for the candidate nearest to @name (borrowed) */
static inline struct suggest
suggest_init(const char *name)
{
	return (struct suggest){.name = name, .d = SIZE_MAX};
}

/** suggest_try() - take @cand (borrowed) as @s's best if it is nearer than the best so far */
static inline void
suggest_try(struct suggest *s, const char *cand)
{
	size_t d = suggest_distance(s->name, cand);

	if (d < s->d) {
		s->d = d;
		s->best = cand;
	}
}

/**
 * suggest_result() - the nearest candidate tried, when it looks like a typo of the name
 * rather than another name: at most 1 + a third of the name's length away
 * Return: that candidate (borrowed), or NULL.
 */
static inline const char *
suggest_result(const struct suggest *s)
{
	return s->best && s->d <= 1 + strlen(s->name) / 3 ? s->best : NULL;
}
