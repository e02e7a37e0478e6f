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
#include "common/util.h"
#include "pmcctl/output.h"
#include "pmcctl/pmcctl.h"

/* The decimal digits of @v at the end of the @len bytes of @buf, NUL-terminated (@len >= 21);
 * returns where they begin. */
static char *
u64_digits(char *buf, size_t len, uint64_t v)
{
	char *p = buf + len;

	*--p = '\0';
	do
		*--p = (char)('0' + v % 10);
	while (v /= 10);
	return p;
}

/* Shortest "%g" text that reads back as the same double. */
static void
format_real(char *buf, size_t len, double v)
{
	/* A whole number below 10^15 (a mean or a percentile of whole counts, most often):
	 * "%.15g" writes its digits, and they read back exactly. */
	if (fabs(v) < 1e15 && v == (double)(int64_t)v && (v != 0 || !signbit(v)) && len > 22) {
		char digits[24], *d = u64_digits(digits, sizeof(digits), (uint64_t)fabs(v));

		snprintf(buf, len, "%s%s", v < 0 ? "-" : "", d);
		return;
	}
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
output_escape_text(const char *s)
{
	size_t n = strlen(s);
	char *out = malloc(4 * n + 1);

	if (!out)
		pmcctl_oom();
	escape_copy(out, s, n);
	return out;
}

/* ---- aligned tables ---- */

void
output_table_free(struct table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->cell[i]);
	free(t->cell);
	t->cell = NULL;
	t->n = t->cap = 0;
}

static void cell_widen(size_t *width, size_t c, const char *s);
static void cell_print(const struct table *t, FILE *f, const size_t *width, size_t c,
                       const char *s);

/* A cell of a table not kept: measured, or printed. */
static void
table_cell_pass(struct table *t, const char *s)
{
	size_t c = t->col;

	if (t->pass == TABLE_MEASURE)
		cell_widen(t->width, c, s);
	else
		cell_print(t, t->f, t->width, c, s);
	t->col = c + 1 == t->ncols ? 0 : c + 1;
}

void
output_table_add(struct table *t, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		pmcctl_oom();
	va_end(ap);
	/* Names reach the operator's terminal: nothing in them may act on it. */
	char *safe = output_escape_text(s);
	free(s);
	s = safe;
	if (t->pass != TABLE_KEEP) {
		table_cell_pass(t, s);
		free(s);
		return;
	}
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 64;
		char **c = reallocarray(t->cell, cap, sizeof(*c));
		if (!c)
			pmcctl_oom();
		t->cell = c;
		t->cap = cap;
	}
	t->cell[t->n++] = s;
}

void
output_table_add_container(struct table *t, const Pmc__RegionStats *r)
{
	char name[CGROUP_NAME_MAX];

	output_table_add(t, "%s", cgroup_container_name(r->cgroup, name, sizeof(name)));
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

/* Column @c of @width widened to fit @s. */
static void
cell_widen(size_t *width, size_t c, const char *s)
{
	size_t w = display_width(s);

	if (w > width[c])
		width[c] = w;
}

/* @s printed to @f as column @c of @t's rows, @width wide (the last column ends the line). */
static void
cell_print(const struct table *t, FILE *f, const size_t *width, size_t c, const char *s)
{
	fputs(c ? "  " : "", f);
	print_padded(f, s, width[c], t->right[c], c + 1 == t->ncols);
	if (c + 1 == t->ncols)
		fputc('\n', f);
}

/* Prints the rows of @t, in columns at least @width wide (widened to fit them; @width has
 * t->ncols entries, zero at first), after the header when @head; then forgets the rows, so
 * that a table printed part by part keeps only one part. Parts printed later line up
 * with the first unless they hold wider cells. */
void
output_table_print_part(struct table *t, FILE *f, size_t *width, bool head)
{
	for (size_t c = 0; c < t->ncols; c++)
		cell_widen(width, c, t->head[c]);
	for (size_t i = 0; i < t->n; i++)
		cell_widen(width, i % t->ncols, t->cell[i]);
	for (size_t c = 0; head && c < t->ncols; c++)
		cell_print(t, f, width, c, t->head[c]);
	for (size_t i = 0; i < t->n; i++)
		cell_print(t, f, width, i % t->ncols, t->cell[i]);
	output_table_free(t);
}

void
output_table_measure(struct table *t, size_t *width)
{
	t->pass = TABLE_MEASURE;
	t->width = width;
	t->col = 0;
	for (size_t c = 0; c < t->ncols; c++)
		cell_widen(width, c, t->head[c]);
}

void
output_table_stream(struct table *t, FILE *f)
{
	t->pass = TABLE_PRINT;
	t->f = f;
	t->col = 0;
	for (size_t c = 0; c < t->ncols; c++)
		cell_print(t, f, t->width, c, t->head[c]);
}

/* Prints @t whole, its header first, and forgets its rows. */
void
output_table_print(struct table *t, FILE *f)
{
	_cleanup_free_ size_t *width = calloc(t->ncols, sizeof(*width));

	if (!width)
		pmcctl_oom();
	output_table_print_part(t, f, width, true);
}

/* ---- CSV (RFC 4180 quoting) ---- */

static bool csv_mid_row;

/* CSV is written by one thread (pmcctl has no other that writes stdout): stdio's unlocked
 * calls, a lock each field was a fifth of query --tree's CSV. */
static void
csv_sep(void)
{
	if (csv_mid_row)
		putchar_unlocked(',');
	csv_mid_row = true;
}

/* A field that starts like a spreadsheet formula gets a leading single quote, which the
 * spreadsheet shows as text (OWASP's rule against CSV injection). */
void
output_csv_str(const char *str)
{
	bool plain = true; /* printable ASCII only: shown as it is (output_escape_text()) */

	for (const unsigned char *c = (const unsigned char *)str; *c && plain; c++)
		plain = *c >= 0x20 && *c < 0x7f;
	_cleanup_free_ char *copy = plain ? NULL : output_escape_text(str);
	const char *s = copy ? copy : str;
	const char *formula = str[0] && strchr("=+-@\t\r", str[0]) ? "'" : "";

	csv_sep();
	if (!s[strcspn(s, ",\"\r\n")]) {
		fputs_unlocked(formula, stdout);
		fputs_unlocked(s, stdout);
		return;
	}
	printf("\"%s", formula);
	for (const char *p = s; *p; p++) {
		if (*p == '"')
			putchar_unlocked('"');
		putchar_unlocked(*p);
	}
	putchar_unlocked('"');
}

void
output_csv_u64(uint64_t v)
{
	char buf[24];

	csv_sep();
	fputs_unlocked(u64_digits(buf, sizeof(buf), v), stdout);
}

void
output_csv_i64(int64_t v)
{
	char buf[24];

	csv_sep();
	if (v < 0)
		putchar_unlocked('-');
	fputs_unlocked(u64_digits(buf, sizeof(buf), v < 0 ? -(uint64_t)v : (uint64_t)v), stdout);
}

/* Non-finite values become empty fields: CSV has no spelling for them. */
void
output_csv_real(double v)
{
	char buf[64];

	csv_sep();
	if (!isfinite(v))
		return;
	format_real(buf, sizeof(buf), v);
	fputs_unlocked(buf, stdout);
}

void
output_csv_bool(bool v)
{
	output_csv_str(v ? "true" : "false");
}

void
output_csv_end(void)
{
	putchar_unlocked('\n');
	csv_mid_row = false;
}

void
output_csv_header(const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		output_csv_str(names[i]);
	output_csv_end();
}

/* ---- JSON ---- */

json_t *
output_jstr(const char *s)
{
	_cleanup_free_ char *safe = output_escape_text(s);

	return json_string_nocheck(safe);
}

/* jansson integers are signed 64-bit: larger counts fall back to a (rounded) real. */
json_t *
output_ju64(uint64_t v)
{
	if (v <= INT64_MAX)
		return json_integer((json_int_t)v);
	return json_real((double)v);
}

/* JSON has no NaN or infinity; null says "no value". */
json_t *
output_jreal(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* Steals @v, like json_object_set_new(). */
void
output_jset(json_t *obj, const char *key, json_t *v)
{
	_cleanup_free_ char *safe = output_escape_text(key);

	if (!v || json_object_set_new_nocheck(obj, safe, v) < 0)
		pmcctl_oom();
}

void
output_jappend(json_t *arr, json_t *v)
{
	if (!v || json_array_append_new(arr, v) < 0)
		pmcctl_oom();
}

json_t *
output_jobject(void)
{
	json_t *o = json_object();

	if (!o)
		pmcctl_oom();
	return o;
}

json_t *
output_jarray(void)
{
	json_t *a = json_array();

	if (!a)
		pmcctl_oom();
	return a;
}

void
output_json_print(json_t *root)
{
	int r = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	json_decref(root);
	if (r < 0)
		pmcctl_fail("cannot write JSON");
	putchar('\n');
}

/* Writes @v, indented by @indent spaces more than jansson would at the top level; @open: @v's
 * last member is an empty array, written open ("[" and a newline) instead. */
static void
json_print_at(json_t *v, int indent, bool open)
{
	_cleanup_free_ char *text = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	size_t len = text ? strlen(text) : 0;

	json_decref(v);
	if (!text)
		pmcctl_fail("cannot write JSON");
	if (open) {
		/* The object's last lines are `"key": []` and `}`. */
		if (len < 4 || strcmp(text + len - 4, "[]\n}"))
			pmcctl_fail("cannot write JSON: an object not as expected");
		text[len - 3] = '\0';
	}
	for (char *line = text, *end; line; line = end) {
		end = strchr(line, '\n');
		if (end)
			*end++ = '\0';
		printf("%*s%s%s", indent, "", line, end ? "\n" : "");
	}
	if (open)
		putchar('\n');
}

void
output_json_print_indented(json_t *v, int indent)
{
	json_print_at(v, indent, false);
}

void
output_json_print_open(json_t *v, int indent)
{
	json_print_at(v, indent, true);
}

void
output_json_close(int indent)
{
	printf("\n%*s]\n%*s}", indent + 2, "", indent, "");
}

/* ---- JSON written as it goes ---- */

/* Text written as it goes is most of what a large query or diff prints: no allocation, no
 * printf, runs of bytes written at once. */

static const char jw_spaces[] = "                                ";

void
output_jw_flush(struct jw *w)
{
	if (w->len)
		fwrite_unlocked(w->buf, 1, w->len, w->f);
	w->len = 0;
}

static inline void
jw_put(struct jw *w, const char *s, size_t n)
{
	if (!w->buf) {
		fwrite_unlocked(s, 1, n, w->f);
		return;
	}
	if (w->len + n > w->cap) {
		output_jw_flush(w);
		if (n > w->cap) {
			fwrite_unlocked(s, 1, n, w->f);
			return;
		}
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
}

static inline void
jw_putc(struct jw *w, char c)
{
	if (!w->buf) {
		putc_unlocked(c, w->f);
		return;
	}
	if (w->len == w->cap)
		output_jw_flush(w);
	w->buf[w->len++] = c;
}

static void
jw_indent(struct jw *w, int n)
{
	for (; n > 0; n -= (int)sizeof(jw_spaces) - 1)
		jw_put(w, jw_spaces,
		       n < (int)sizeof(jw_spaces) - 1 ? (size_t)n : sizeof(jw_spaces) - 1);
}

void
output_jw_raw(struct jw *w, const char *s)
{
	jw_put(w, s, strlen(s));
}

/* A byte that is written as it is: printable ASCII but '"' and '\\'. */
static inline bool
jw_plain(unsigned char c)
{
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

/* An escape of escape_next() ("\x1b"), as jansson writes it: its backslash doubled. */
static void
jw_escape(struct jw *w, const char *esc)
{
	for (; *esc; esc++) {
		if (*esc == '\\' || *esc == '"')
			jw_putc(w, '\\');
		jw_putc(w, *esc);
	}
}

void
output_jw_string(struct jw *w, const char *s)
{
	size_t n = strlen(s);

	/* What jansson writes of output_escape_text(@s): each character escape_next() hides as its
	 * visible escape, then '"' and '\\' escaped (no control character is left), the rest
	 * (UTF-8) as it is. */
	jw_putc(w, '"');
	while (n) {
		size_t k = 0;

		while (k < n && jw_plain((unsigned char)s[k]))
			k++;
		if (k) {
			jw_put(w, s, k);
		} else if (*s == '"' || *s == '\\') {
			jw_putc(w, '\\');
			jw_putc(w, *s);
			k = 1;
		} else {
			char esc[ESCAPE_MAX];

			k = escape_next(s, n, esc);
			if (*esc)
				jw_escape(w, esc);
			else
				jw_put(w, s, k);
		}
		s += k;
		n -= k;
	}
	jw_putc(w, '"');
}

void
output_jw_key(struct jw *w, const char *key)
{
	if (w->first)
		jw_putc(w, '\n');
	else
		jw_put(w, ",\n", 2);
	jw_indent(w, w->indent);
	output_jw_string(w, key);
	jw_put(w, ": ", 2);
	w->first = false;
}

void
output_jw_open(struct jw *w, const char *key)
{
	if (key)
		output_jw_key(w, key);
	jw_putc(w, '{');
	w->indent += 2;
	w->first = true;
}

void
output_jw_close(struct jw *w)
{
	w->indent -= 2;
	if (!w->first) {
		jw_putc(w, '\n');
		jw_indent(w, w->indent);
	}
	jw_putc(w, '}');
	w->first = false;
}

void
output_jw_str(struct jw *w, const char *key, const char *v)
{
	output_jw_key(w, key);
	output_jw_string(w, v);
}

static const char digit_pairs[201] = "00010203040506070809"
                                     "10111213141516171819"
                                     "20212223242526272829"
                                     "30313233343536373839"
                                     "40414243444546474849"
                                     "50515253545556575859"
                                     "60616263646566676869"
                                     "70717273747576777879"
                                     "80818283848586878889"
                                     "90919293949596979899";

/* @v in decimal, written backwards to end at @end. Return: where it begins. */
static char *
u64_text(char *end, uint64_t v)
{
	while (v >= 100) {
		unsigned d = (unsigned)(v % 100) * 2;

		v /= 100;
		*--end = digit_pairs[d + 1];
		*--end = digit_pairs[d];
	}
	if (v >= 10) {
		*--end = digit_pairs[v * 2 + 1];
		*--end = digit_pairs[v * 2];
	} else {
		*--end = (char)('0' + v);
	}
	return end;
}

void
output_jw_u64_value(struct jw *w, uint64_t v)
{
	char buf[24], *e = buf + sizeof(buf), *p = u64_text(e, v);

	jw_put(w, p, (size_t)(e - p));
}

void
output_jw_int(struct jw *w, const char *key, int64_t v)
{
	char buf[24], *e = buf + sizeof(buf), *p;

	output_jw_key(w, key);
	p = u64_text(e, v < 0 ? -(uint64_t)v : (uint64_t)v);
	if (v < 0)
		*--p = '-';
	jw_put(w, p, (size_t)(e - p));
}

/* 10^k, 0 <= k <= 22. */
static unsigned __int128
pow10_u128(int k)
{
	static const uint64_t p[20] = {1,
	                               10,
	                               100,
	                               1000,
	                               10000,
	                               100000,
	                               1000000,
	                               10000000,
	                               100000000,
	                               1000000000,
	                               10000000000,
	                               100000000000,
	                               1000000000000,
	                               10000000000000,
	                               100000000000000,
	                               1000000000000000,
	                               10000000000000000,
	                               100000000000000000,
	                               1000000000000000000,
	                               10000000000000000000u};

	return k < 20 ? p[k] : (unsigned __int128)p[19] * p[k - 19];
}

/* The rounding of |@v| * 10^@k to an integer, as printf rounds it (to nearest, ties to
 * even), for 1e-5 < |v| < 1e17 and 0 <= k <= 22: exact in 128 bits (|v| = m * 2^e, m below
 * 2^53, m * 10^22 below 2^127). */
static uint64_t
scaled_round(uint64_t m, int e, int k)
{
	unsigned __int128 x = (unsigned __int128)m * pow10_u128(k);

	if (e >= 0)
		return (uint64_t)(x << e);
	unsigned __int128 q = x >> -e, rem = x & (((unsigned __int128)1 << -e) - 1);
	unsigned __int128 half = (unsigned __int128)1 << (-e - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return (uint64_t)q;
}

/* "%.17g" of @v as glibc writes it where that is fixed notation (17 significant digits,
 * trailing zeros dropped), then ".0" where no fraction is left, as jansson writes a real;
 * into @buf (32 bytes at least), without its NUL. Return: its length; 0 where @v needs an
 * exponent (below 1e-4, from 1e17 on) or is not finite: the caller asks snprintf(). */
static size_t
real17_fixed(char *buf, double v)
{
	uint64_t bits, m;
	char *p = buf;

	memcpy(&bits, &v, sizeof(bits));
	if (bits << 1 == 0) { /* 0 and -0 */
		if (bits)
			*p++ = '-';
		memcpy(p, "0.0", 3);
		return (size_t)(p + 3 - buf);
	}
	double a = fabs(v);
	if (!(a > 1e-5 && a < 1e17))
		return 0;
	int be = (int)((bits >> 52) & 0x7ff);
	m = (bits & ((UINT64_C(1) << 52) - 1)) | (UINT64_C(1) << 52);
	int e = be - 1075;
	/* The decimal exponent: floor(log10(2^(be - 1023))) or one off, set right below. */
	int d = (int)(((int64_t)(be - 1023) * 78913) >> 18);
	uint64_t q;
	for (;;) {
		if (d < -5 || d > 16)
			return 0;
		q = scaled_round(m, e, 16 - d);
		if (q >= UINT64_C(100000000000000000))
			d++;
		else if (q < UINT64_C(10000000000000000))
			d--;
		else
			break;
	}
	if (d < -4)
		return 0;
	char dig[17];
	u64_text(dig + 17, q);
	int last = 16; /* the last digit written: trailing zeros after the point dropped */
	while (last > d && last > 0 && dig[last] == '0')
		last--;
	if (v < 0)
		*p++ = '-';
	if (d >= 0) {
		memcpy(p, dig, (size_t)d + 1);
		p += d + 1;
		*p++ = '.';
		if (last > d) {
			memcpy(p, dig + d + 1, (size_t)(last - d));
			p += last - d;
		} else {
			*p++ = '0'; /* jansson's ".0" where the text shows no fraction */
		}
	} else {
		*p++ = '0';
		*p++ = '.';
		for (int z = -1; z > d; z--)
			*p++ = '0';
		memcpy(p, dig, (size_t)last + 1);
		p += last + 1;
	}
	return (size_t)(p - buf);
}

size_t
output_json_real_text(char *buf, double v)
{
	size_t n = real17_fixed(buf, v);

	if (n) {
		buf[n] = '\0';
		return n;
	}
	/* jansson's form: 17 significant digits, a ".0" where that shows no fraction or
	 * exponent, and an exponent with no '+' or leading zeros (1e20, 1.5e-7). */
	snprintf(buf, JSON_REAL_MAX, "%.17g", v);
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
	return strlen(buf);
}

void
output_jw_real(struct jw *w, const char *key, double v)
{
	char buf[JSON_REAL_MAX];

	output_jw_key(w, key);
	if (!isfinite(v)) {
		jw_put(w, "null", 4);
		return;
	}
	jw_put(w, buf, output_json_real_text(buf, v));
}

void
output_jw_u64(struct jw *w, const char *key, uint64_t v)
{
	if (v <= INT64_MAX)
		output_jw_int(w, key, (int64_t)v);
	else
		output_jw_real(w, key, (double)v);
}

void
output_jw_bool(struct jw *w, const char *key, bool v)
{
	output_jw_key(w, key);
	if (v)
		jw_put(w, "true", 4);
	else
		jw_put(w, "false", 5);
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
output_format_count(char *buf, size_t len, double v, bool whole)
{
	static const char *const unit[] = {"", "k", "M", "G", "T", "P", "E"};
	static const double step[] = {1e3, 1e3, 1e3, 1e3, 1e3, 1e3};

	return format_unit(buf, len, v, whole, unit, ARRAY_SIZE(unit), step);
}

/* Nanoseconds: 850ns, 1.23us, 45.6ms, 2.50s, 3600s. */
bool
output_format_time(char *buf, size_t len, double ns)
{
	static const char *const unit[] = {"ns", "us", "ms", "s"};
	static const double step[] = {1e3, 1e3, 1e3};

	return format_unit(buf, len, ns, true, unit, ARRAY_SIZE(unit), step);
}

/* 1234, 12.3k, 4.5M...: rates and counts in a narrow column. */
void
output_format_si(char *buf, size_t len, double v)
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
output_format_ns(char *buf, size_t len, double ns)
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
