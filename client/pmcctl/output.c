/* pmcctl's output formats: escaping of what the daemon relays, aligned tables, CSV, JSON,
 * and numbers with units for tables. */

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "common/cgroup.h"
#include "common/escape.h"
#include "pmcctl/pmcctl.h"

/* Shortest "%g" text that reads back as the same double. */
static void
format_real(char *buf, size_t len, double v)
{
	snprintf(buf, len, "%.15g", v);
	if (strtod(buf, NULL) != v)
		snprintf(buf, len, "%.17g", v);
}

/* Copy of @s fit for every output (table, CSV, JSON, messages): region names, comm and
 * event names come from any application that links the library, and protobuf-c does not
 * check strings. A hidden character becomes a visible escape, "\x1b" for a byte below 0x80,
 * "\u202e" for a code point above, and so does each byte that is not UTF-8 ("\x9b"): the
 * result is valid UTF-8 (jansson refuses anything else) with nothing hidden. The daemon's
 * metrics page hides the same (escape_next(), proto/common/escape.h). */
char *
escape_text(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(4 * n + 1);

	if (!out)
		oom();
	escape_copy(out, s, n);
	return out;
}

/* ---- aligned tables ---- */

void
table_free(struct table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->cell[i]);
	free(t->cell);
	t->cell = NULL;
	t->n = t->cap = 0;
}

void
table_add(struct table *t, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		oom();
	va_end(ap);
	/* Names reach the operator's terminal: nothing in them may act on it. */
	char *safe = escape_text(s);
	free(s);
	s = safe;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 64;
		char **c = reallocarray(t->cell, cap, sizeof(*c));
		if (!c)
			oom();
		t->cell = c;
		t->cap = cap;
	}
	t->cell[t->n++] = s;
}

void
table_add_container(struct table *t, const Pmc__RegionStats *r)
{
	char name[CGROUP_NAME_MAX];

	table_add(t, "%s", cgroup_container_name(r->cgroup, name, sizeof(name)));
}

/* Columns the text takes on a terminal; bytes that do not decode count one each. */
static size_t
display_width(const char *s)
{
	mbstate_t st;
	size_t n = strlen(s), w = 0;

	memset(&st, 0, sizeof(st));
	while (n) {
		wchar_t wc;
		size_t k = mbrtowc(&wc, s, n, &st);

		if (k == (size_t)-1 || k == (size_t)-2) {
			memset(&st, 0, sizeof(st));
			k = 1;
			w++;
		} else if (k == 0) {
			break;
		} else {
			int cw = wcwidth(wc);
			w += cw > 0 ? (size_t)cw : 0;
		}
		s += k;
		n -= k;
	}
	return w;
}

static void
print_padded(FILE *f, const char *s, size_t width, bool right, bool last)
{
	size_t w = display_width(s);
	size_t pad = width > w ? width - w : 0;

	if (right)
		fprintf(f, "%*s", (int)pad, "");
	fputs(s, f);
	if (!right && !last)
		fprintf(f, "%*s", (int)pad, "");
}

/* Prints the rows of @t, in columns at least @width wide (widened to fit them; @width has
 * t->ncols entries, zero at first), after the header when @head; then forgets the rows, so
 * that a table printed part by part keeps only one part. Parts printed later line up
 * with the first unless they hold wider cells. */
void
table_print_part(struct table *t, FILE *f, size_t *width, bool head)
{
	for (size_t c = 0; c < t->ncols; c++) {
		size_t w = display_width(t->head[c]);
		if (w > width[c])
			width[c] = w;
	}
	for (size_t i = 0; i < t->n; i++) {
		size_t w = display_width(t->cell[i]);
		if (w > width[i % t->ncols])
			width[i % t->ncols] = w;
	}
	for (size_t c = 0; head && c < t->ncols; c++) {
		fputs(c ? "  " : "", f);
		print_padded(f, t->head[c], width[c], t->right[c], c + 1 == t->ncols);
		if (c + 1 == t->ncols)
			fputc('\n', f);
	}
	for (size_t i = 0; i < t->n; i++) {
		size_t c = i % t->ncols;
		fputs(c ? "  " : "", f);
		print_padded(f, t->cell[i], width[c], t->right[c], c + 1 == t->ncols);
		if (c + 1 == t->ncols)
			fputc('\n', f);
	}
	table_free(t);
}

/* Prints @t whole, its header first, and forgets its rows. */
void
table_print(struct table *t, FILE *f)
{
	_cleanup_free_ size_t *width = calloc(t->ncols, sizeof(*width));

	if (!width)
		oom();
	table_print_part(t, f, width, true);
}

/* ---- CSV (RFC 4180 quoting) ---- */

static bool csv_mid_row;

static void
csv_sep(void)
{
	if (csv_mid_row)
		putchar(',');
	csv_mid_row = true;
}

/* A field that starts like a spreadsheet formula gets a leading single quote, which the
 * spreadsheet shows as text (OWASP's rule against CSV injection). */
void
csv_str(const char *str)
{
	_cleanup_free_ char *s = escape_text(str);
	const char *formula = str[0] && strchr("=+-@\t\r", str[0]) ? "'" : "";

	csv_sep();
	if (!s[strcspn(s, ",\"\r\n")]) {
		printf("%s%s", formula, s);
		return;
	}
	printf("\"%s", formula);
	for (const char *p = s; *p; p++) {
		if (*p == '"')
			putchar('"');
		putchar(*p);
	}
	putchar('"');
}

void
csv_u64(uint64_t v)
{
	csv_sep();
	printf("%" PRIu64, v);
}

void
csv_i64(int64_t v)
{
	csv_sep();
	printf("%" PRId64, v);
}

/* Non-finite values become empty fields: CSV has no spelling for them. */
void
csv_real(double v)
{
	char buf[64];

	csv_sep();
	if (!isfinite(v))
		return;
	format_real(buf, sizeof(buf), v);
	fputs(buf, stdout);
}

void
csv_bool(bool v)
{
	csv_str(v ? "true" : "false");
}

void
csv_end(void)
{
	putchar('\n');
	csv_mid_row = false;
}

void
csv_header(const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		csv_str(names[i]);
	csv_end();
}

/* ---- JSON ---- */

json_t *
jstr(const char *s)
{
	_cleanup_free_ char *safe = escape_text(s);

	return json_string_nocheck(safe);
}

/* jansson integers are signed 64-bit: larger counts fall back to a (rounded) real. */
json_t *
ju64(uint64_t v)
{
	if (v <= INT64_MAX)
		return json_integer((json_int_t)v);
	return json_real((double)v);
}

/* JSON has no NaN or infinity; null says "no value". */
json_t *
jreal(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* Steals @v, like json_object_set_new(). */
void
jset(json_t *obj, const char *key, json_t *v)
{
	_cleanup_free_ char *safe = escape_text(key);

	if (!v || json_object_set_new_nocheck(obj, safe, v) < 0)
		oom();
}

void
jappend(json_t *arr, json_t *v)
{
	if (!v || json_array_append_new(arr, v) < 0)
		oom();
}

json_t *
jobject(void)
{
	json_t *o = json_object();

	if (!o)
		oom();
	return o;
}

json_t *
jarray(void)
{
	json_t *a = json_array();

	if (!a)
		oom();
	return a;
}

void
json_print(json_t *root)
{
	int r = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	json_decref(root);
	if (r < 0)
		fail("cannot write JSON");
	putchar('\n');
}

/* Writes @v, indented by @indent spaces more than jansson would at the top level. */
void
json_print_indented(json_t *v, int indent)
{
	_cleanup_free_ char *text = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	json_decref(v);
	if (!text)
		fail("cannot write JSON");
	for (char *line = text, *end; line; line = end) {
		end = strchr(line, '\n');
		if (end)
			*end++ = '\0';
		printf("%*s%s%s", indent, "", line, end ? "\n" : "");
	}
}

/* ---- JSON written as it goes ---- */

void
jw_raw(struct jw *w, const char *s)
{
	fputs_unlocked(s, w->f);
}

void
jw_string(struct jw *w, const char *s)
{
	_cleanup_free_ char *safe = escape_text(s);
	FILE *f = w->f;

	/* What jansson writes: '"' and '\\' escaped, control characters too (escape_text()
	 * left none), the rest as it is (UTF-8). */
	putc_unlocked('"', f);
	for (const char *c = safe; *c; c++) {
		unsigned char u = (unsigned char)*c;

		if (u == '"' || u == '\\') {
			putc_unlocked('\\', f);
			putc_unlocked(*c, f);
		} else if (u < 0x20) {
			fprintf(f, "\\u%04x", u);
		} else {
			putc_unlocked(*c, f);
		}
	}
	putc_unlocked('"', f);
}

void
jw_key(struct jw *w, const char *key)
{
	fputs_unlocked(w->first ? "\n" : ",\n", w->f);
	for (int i = 0; i < w->indent; i++)
		putc_unlocked(' ', w->f);
	jw_string(w, key);
	fputs_unlocked(": ", w->f);
	w->first = false;
}

void
jw_open(struct jw *w, const char *key)
{
	if (key)
		jw_key(w, key);
	putc_unlocked('{', w->f);
	w->indent += 2;
	w->first = true;
}

void
jw_close(struct jw *w)
{
	w->indent -= 2;
	if (!w->first) {
		putc_unlocked('\n', w->f);
		for (int i = 0; i < w->indent; i++)
			putc_unlocked(' ', w->f);
	}
	putc_unlocked('}', w->f);
	w->first = false;
}

void
jw_str(struct jw *w, const char *key, const char *v)
{
	jw_key(w, key);
	jw_string(w, v);
}

void
jw_int(struct jw *w, const char *key, int64_t v)
{
	char buf[24], *e = buf + sizeof(buf), *p = e;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;

	jw_key(w, key);
	do
		*--p = (char)('0' + u % 10);
	while (u /= 10);
	if (v < 0)
		*--p = '-';
	fwrite_unlocked(p, 1, (size_t)(e - p), w->f);
}

void
jw_real(struct jw *w, const char *key, double v)
{
	char buf[40];

	jw_key(w, key);
	if (!isfinite(v)) {
		fputs_unlocked("null", w->f);
		return;
	}
	/* jansson's form: 17 significant digits, a ".0" where that shows no fraction or
	 * exponent, and an exponent with no '+' or leading zeros (1e20, 1.5e-7). */
	snprintf(buf, sizeof(buf), "%.17g", v);
	char *exp = strchr(buf, 'e');
	if (!exp && !strchr(buf, '.')) {
		strcat(buf, ".0");
	} else if (exp) {
		char *from = exp + 1, *to = exp + 1;
		if (*from == '+')
			from++;
		else if (*from == '-')
			*to++ = *from++;
		while (*from == '0' && from[1])
			from++;
		memmove(to, from, strlen(from) + 1);
	}
	fputs_unlocked(buf, w->f);
}

void
jw_u64(struct jw *w, const char *key, uint64_t v)
{
	if (v <= INT64_MAX)
		jw_int(w, key, (int64_t)v);
	else
		jw_real(w, key, (double)v);
}

void
jw_bool(struct jw *w, const char *key, bool v)
{
	jw_key(w, key);
	fputs_unlocked(v ? "true" : "false", w->f);
}

/* ---- numbers ---- */

/* @v with a unit: below 1000 of the first unit, whole (@whole: an integer, exact) or with 2
 * decimals under 100; above, in the next unit up with 3 significant digits (1.23k, 45.6M,
 * 789G; 1.23us, 45.6ms), the last unit taking any size. True when that rounded it. */
static bool
format_unit(char *buf, size_t len, double v, bool whole, const char *const *unit, size_t n_unit,
            const double *step)
{
	size_t i = 0;

	if (!isfinite(v)) {
		snprintf(buf, len, "-");
		return false;
	}
	if (v < 999.5 || n_unit == 1) {
		snprintf(buf, len, whole || v >= 100 ? "%.0f%s" : "%.2f%s", v, unit[0]);
		return false;
	}
	while (i + 1 < n_unit && v >= 999.5) {
		v /= step[i];
		i++;
	}
	snprintf(buf, len, v < 9.995 ? "%.2f%s" : v < 99.95 ? "%.1f%s" : "%.0f%s", v, unit[i]);
	return true;
}

/* Counts: 40, 12.5, 1.23k, 4.56M, 7.89G, 1.00T. */
bool
format_count(char *buf, size_t len, double v, bool whole)
{
	static const char *const unit[] = {"", "k", "M", "G", "T", "P", "E"};
	static const double step[] = {1e3, 1e3, 1e3, 1e3, 1e3, 1e3};

	return format_unit(buf, len, v, whole, unit, ARRAY_SIZE(unit), step);
}

/* Nanoseconds: 850ns, 1.23us, 45.6ms, 2.50s, 3600s. */
bool
format_time(char *buf, size_t len, double ns)
{
	static const char *const unit[] = {"ns", "us", "ms", "s"};
	static const double step[] = {1e3, 1e3, 1e3};

	return format_unit(buf, len, ns, true, unit, ARRAY_SIZE(unit), step);
}

/* 1234, 12.3k, 4.5M...: rates and counts in a narrow column. */
void
format_si(char *buf, size_t len, double v)
{
	static const char prefix[] = "kMGTPE";
	int i = -1;

	if (!isfinite(v)) {
		snprintf(buf, len, "-");
		return;
	}
	if (v == 0) {
		snprintf(buf, len, "0");
		return;
	}
	if (v < 999.95) {
		snprintf(buf, len, v < 9.995 ? "%.2f" : "%.1f", v);
		return;
	}
	while (v >= 999.95 && prefix[i + 1]) {
		v /= 1000;
		i++;
	}
	snprintf(buf, len, "%.1f%c", v, prefix[i]);
}

void
format_ns(char *buf, size_t len, double ns)
{
	if (!isfinite(ns))
		snprintf(buf, len, "-");
	else if (ns < 1e3)
		snprintf(buf, len, "%.0fns", ns);
	else if (ns < 1e6)
		snprintf(buf, len, "%.1fus", ns / 1e3);
	else if (ns < 1e9)
		snprintf(buf, len, "%.1fms", ns / 1e6);
	else
		snprintf(buf, len, "%.2fs", ns / 1e9);
}
