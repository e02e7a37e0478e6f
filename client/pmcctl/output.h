/* output.c: the output formats: escaping of what the daemon relays, the aligned table, CSV,
 * JSON (built, or written as it goes), and numbers with units for tables. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pmc.pb-c.h"

/**
 * output_escape_text() - copy of @s fit for every output (table, CSV, JSON, messages): each
 * character that a terminal acts on, and each byte that is not UTF-8, becomes a visible
 * escape ("\x1b", "\u202e")
 * Return: a valid UTF-8 string, the caller's to free.
 */
char *output_escape_text(const char *s);

/* An aligned table: @head, @right and @ncols set by its owner, the rows added cell by cell
 * (output_table_add()), row by row: kept until printed, or, for a table too large to keep,
 * added twice, measured then printed as they come (output_table_measure(), _stream()). */
struct table {
	size_t ncols;
	const char *const *head;
	const bool *right; /* right-aligned (numeric) columns */
	char **cell;       /* row-major, ncols per row */
	size_t n, cap;
	/* Not kept (TABLE_MEASURE, TABLE_PRINT): the columns' widths, the next cell's column,
	 * where it is printed. */
	int pass;
	size_t *width;
	size_t col;
	FILE *f;
};
enum { TABLE_KEEP, TABLE_MEASURE, TABLE_PRINT };

/**
 * output_table_measure() - the first of two passes over @t's cells: from now on a cell added
 * widens its column in @width (t->ncols entries, zero at first; the header's widths too) and
 * is not kept. @width stays the caller's.
 */
void output_table_measure(struct table *t, size_t *width);

/**
 * output_table_stream() - the second pass: prints @t's header to @f in the columns @width
 * measured (output_table_measure()); from now on each cell added, the same as in the first
 * pass, is printed at once in its column, as output_table_print() would print it.
 */
void output_table_stream(struct table *t, FILE *f);

/** output_table_free() - forget the rows of @t (its cells), keeping its columns */
void output_table_free(struct table *t);

/** output_table_add() - add the next cell of @t, the printf @fmt, escaped (output_escape_text()) */
void output_table_add(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** output_table_add_container() - add the short name of the container (or service, session) that
 * @r's process runs in as the next cell of @t (cgroup_container_name() of its cgroup; "-"
 * for the root cgroup or none known) */
void output_table_add_container(struct table *t, const Pmc__RegionStats *r);

/**
 * output_table_print_part() - print the rows of @t to @f, after the header when @head, then forget
 * them (output_table_free())
 * @width: t->ncols column widths, zero at first, widened to fit: parts printed later with
 * the same @width line up with the first unless they hold wider cells
 */
void output_table_print_part(struct table *t, FILE *f, size_t *width, bool head);

/** output_table_print() - print @t whole to @f, its header first, and forget its rows */
void output_table_print(struct table *t, FILE *f);

/* CSV rows on stdout (RFC 4180 quoting): one call per field, then output_csv_end(). */

/** output_csv_str() - a text field, escaped; one that starts like a spreadsheet formula gets a
 * leading single quote */
void output_csv_str(const char *str);
/** output_csv_u64() - an unsigned integer field */
void output_csv_u64(uint64_t v);
/** output_csv_i64() - a signed integer field */
void output_csv_i64(int64_t v);
/** output_csv_real() - a real field, as short as reads back the same; empty when not finite */
void output_csv_real(double v);
/** output_csv_bool() - "true" or "false" */
void output_csv_bool(bool v);
/** output_csv_end() - end the row */
void output_csv_end(void);
/** output_csv_header() - a row of the @n column names @names */
void output_csv_header(const char *const *names, size_t n);

/* JSON values: each returns a new reference, the caller's (output_jset() and output_jappend() take
 * it); exits on allocation failure. */

/** output_jstr() - a JSON string of @s, escaped (output_escape_text()) */
json_t *output_jstr(const char *s);
/** output_ju64() - a JSON integer, or a (rounded) real above INT64_MAX */
json_t *output_ju64(uint64_t v);
/** output_jreal() - a JSON real, or null when @v is not finite */
json_t *output_jreal(double v);
/** output_jset() - set member @key (escaped) of @obj to @v, taking @v (NULL: out of memory) */
void output_jset(json_t *obj, const char *key, json_t *v);
/** output_jappend() - append @v to @arr, taking @v (NULL: out of memory) */
void output_jappend(json_t *arr, json_t *v);
/** output_jobject() - a new, empty JSON object */
json_t *output_jobject(void);
/** output_jarray() - a new, empty JSON array */
json_t *output_jarray(void);
/** output_json_print() - print @root to stdout, indented, and a newline; takes @root */
void output_json_print(json_t *root);
/** output_json_print_indented() - print @v to stdout, indented by @indent spaces more than at the
 * top level, without a final newline; takes @v */
void output_json_print_indented(json_t *v, int indent);
/**
 * output_json_print_open() - output_json_print_indented() of an object @v whose last member is
 * an empty array, written open ("[" and a newline) for the caller to write its elements
 * (each indented by @indent + 4, separated by ",\n") and close with output_json_close(@indent):
 * the same text as the whole object's; takes @v; exits when @v's last member is not an empty
 * array
 */
void output_json_print_open(json_t *v, int indent);
/** output_json_close() - closes what output_json_print_open(@indent) left open: the array, then
 * the object */
void output_json_close(int indent);

/*
 * JSON written as it goes, for outputs too large to build first (a query's regions): the
 * same text jansson writes with JSON_INDENT(2) | JSON_PRESERVE_ORDER, objects only. @indent:
 * the spaces before the members of the object open now; @first: none written in it yet.
 * Names and strings are escaped as output_jstr() escapes them.
 */
struct jw {
	FILE *f;
	int indent;
	bool first;
	char *buf; /* NULL: each piece written to @f at once; else @cap bytes kept until full */
	size_t len, cap;
};

/** output_jw_flush() - write to @w->f what @w's buffer holds: before anything else writes to it */
void output_jw_flush(struct jw *w);
/** output_jw_raw() - write @s as it is */
void output_jw_raw(struct jw *w, const char *s);
/** output_jw_string() - write @s as a JSON string, escaped (output_escape_text()) */
void output_jw_string(struct jw *w, const char *s);
/** output_jw_key() - start the member @key of the object open now */
void output_jw_key(struct jw *w, const char *key);
/** output_jw_open() - open an object: member @key's value, or (@key NULL) a value where the
 * caller placed it */
void output_jw_open(struct jw *w, const char *key);
/** output_jw_close() - close the object open now ("{}" when it has no member) */
void output_jw_close(struct jw *w);
/** output_jw_str() - member @key, the string @v (escaped) */
void output_jw_str(struct jw *w, const char *key, const char *v);
/** output_jw_int() - member @key, an integer */
void output_jw_int(struct jw *w, const char *key, int64_t v);
/** output_jw_u64() - member @key, an integer, or a (rounded) real above INT64_MAX, as
 * output_ju64() */
void output_jw_u64(struct jw *w, const char *key, uint64_t v);
/** output_jw_real() - member @key, a real as jansson writes it, null when not finite */
void output_jw_real(struct jw *w, const char *key, double v);
/** output_jw_bool() - member @key, true or false */
void output_jw_bool(struct jw *w, const char *key, bool v);
/** output_jw_u64_value() - an unsigned integer where the caller placed it (an array's element) */
void output_jw_u64_value(struct jw *w, uint64_t v);

/* Bytes of the longest text output_json_real_text() writes, with its NUL. */
#define JSON_REAL_MAX 40

/**
 * output_json_real_text() - @v (finite) as jansson writes a real: "%.17g", a ".0" where that shows
 * no fraction nor exponent, the exponent without '+' or leading zeros; without printf where
 * that is fixed notation (1e-4 <= |v| < 1e17)
 * @buf: JSON_REAL_MAX bytes
 * Return: the length of the text (NUL-terminated) in @buf.
 */
size_t output_json_real_text(char *buf, double v);

/* Numbers for tables, written to @buf (@len bytes); "-" when not finite. */

/** output_format_count() - a count with 3 significant digits above 999 (1.23k, 4.56M, 7.89G),
 * below it whole (@whole) or with 2 decimals under 100
 * Return: whether that rounded it. */
bool output_format_count(char *buf, size_t len, double v, bool whole);
/** output_format_time() - nanoseconds, 3 significant digits (850ns, 1.23us, 45.6ms, 2.50s)
 * Return: whether that rounded it. */
bool output_format_time(char *buf, size_t len, double ns);
/** output_format_si() - a rate or count for a narrow column: 0, 2.50, 12.3, 1.2k, 45.6M */
void output_format_si(char *buf, size_t len, double v);
/** output_format_ns() - nanoseconds for a narrow column: 850ns, 1.2us, 45.6ms, 2.50s */
void output_format_ns(char *buf, size_t len, double ns);
