/* JSON read in place, value by value (diff's files): no tree of the document, no allocation
 * per value. It accepts exactly what jansson's json_loadb() accepts with
 * JSON_REJECT_DUPLICATES (an object or array at the top, RFC 8259's grammar, strict UTF-8,
 * no "\u0000", no lone surrogate, integers within 64 bits, reals that do not overflow, no
 * duplicate key in any object, 2,048 levels at most), so that a reader may leave the text
 * it refuses to jansson for the message. */

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "pmcctl/jread.h"
#include "pmcctl/pmcctl.h"

/* jansson's JSON_PARSER_MAX_DEPTH: a value deeper than this is refused. */
#define JR_MAX_DEPTH 2048

void
jread_init(struct jr *r, const void *buf, size_t len)
{
	memset(r, 0, sizeof(*r));
	r->p = buf;
	r->end = r->p + len;
}

void
jread_free(struct jr *r)
{
	free(r->keys);
	free(r->frames);
	free(r->text);
	for (size_t i = 0; i < r->n_owned; i++)
		free(r->owned[i]);
	free(r->owned);
	memset(r, 0, sizeof(*r));
}

static void
jr_fail(struct jr *r)
{
	r->bad = true;
	r->p = r->end;
}

static void
jr_space(struct jr *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
		r->p++;
}

enum jr_type
jread_peek(struct jr *r)
{
	jr_space(r);
	if (r->bad || r->p == r->end)
		return JR_NONE;
	switch (*r->p) {
	case '{':
		return JR_OBJECT;
	case '[':
		return JR_ARRAY;
	case '"':
		return JR_STRING;
	case 't':
	case 'f':
		return JR_BOOL;
	case 'n':
		return JR_NULL;
	default:
		return *r->p == '-' || (*r->p >= '0' && *r->p <= '9') ? JR_NUMBER : JR_NONE;
	}
}

/* A value starts: one level deeper than the containers open. */
static bool
jr_value_starts(struct jr *r)
{
	if (r->depth + 1 > JR_MAX_DEPTH) {
		jr_fail(r);
		return false;
	}
	return true;
}

static int
hex4(const char *s)
{
	int v = 0;

	for (int i = 0; i < 4; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
		        : c >= 'a' && c <= 'f' ? c - 'a' + 10
		        : c >= 'A' && c <= 'F' ? c - 'A' + 10
		                               : -1;
		if (d < 0)
			return -1;
		v = v << 4 | d;
	}
	return v;
}

/* Appends @n bytes at @s to @r->text (NUL-terminated). */
static void
text_put(struct jr *r, const char *s, size_t n)
{
	if (r->n_text + n + 1 > r->cap_text) {
		size_t cap = r->cap_text ? 2 * r->cap_text : 256;

		while (cap < r->n_text + n + 1)
			cap *= 2;
		char *t = realloc(r->text, cap);
		if (!t)
			pmcctl_oom();
		r->text = t;
		r->cap_text = cap;
	}
	memcpy(r->text + r->n_text, s, n);
	r->n_text += n;
	r->text[r->n_text] = '\0';
}

/* Appends @cp to @r->text as UTF-8. */
static void
text_cp(struct jr *r, uint32_t cp)
{
	char u[4];
	size_t n;

	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | cp >> 6);
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | cp >> 12);
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | cp >> 18);
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	text_put(r, u, n);
}

/* The escape at @s (after its backslash, before @end) decoded into @r->text. Return: the
 * bytes it took, 0 when it is not one jansson takes. */
static size_t
jr_escape(struct jr *r, const char *s, const char *end)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";

	if (s == end)
		return 0;
	const char *k = *s ? strchr(from, *s) : NULL;
	if (k) {
		text_put(r, &to[k - from], 1);
		return 1;
	}
	if (*s != 'u' || end - s < 5)
		return 0;
	int hi = hex4(s + 1);
	if (hi <= 0)
		return 0; /* not hex, or \u0000 */
	if (hi >= 0xdc00 && hi <= 0xdfff)
		return 0; /* a low surrogate alone */
	if (hi < 0xd800 || hi > 0xdbff) {
		text_cp(r, (uint32_t)hi);
		return 5;
	}
	if (end - s < 11 || s[5] != '\\' || s[6] != 'u')
		return 0;
	int lo = hex4(s + 7);
	if (lo < 0xdc00 || lo > 0xdfff)
		return 0;
	text_cp(r, 0x10000 + (((uint32_t)hi - 0xd800) << 10) + ((uint32_t)lo - 0xdc00));
	return 11;
}

/* Reads the string at @r->p (its '"'): *@s its text, *@n its length. Without escapes the
 * text is in the buffer, not NUL-terminated; with, in @r->text, until the next string. */
static bool
jr_string_raw(struct jr *r, const char **s, size_t *n)
{
	const char *p = r->p + 1, *start = p;
	bool escaped = false;

	while (p < r->end) {
		unsigned char c = (unsigned char)*p;

		if (c == '"') {
			if (escaped) {
				text_put(r, start, (size_t)(p - start));
				*s = r->text;
				*n = r->n_text;
			} else {
				*s = start;
				*n = (size_t)(p - start);
			}
			r->p = p + 1;
			return true;
		}
		if (c < 0x20)
			break;
		if (c == '\\') {
			if (!escaped) {
				escaped = true;
				r->n_text = 0;
			}
			text_put(r, start, (size_t)(p - start));
			size_t k = jr_escape(r, p + 1, r->end);
			if (!k)
				break;
			p += 1 + k;
			start = p;
			continue;
		}
		if (c >= 0x80) {
			uint32_t cp;
			size_t k = escape_utf8_decode((const unsigned char *)p,
			                              (size_t)(r->end - p), &cp);
			if (!k)
				break;
			p += k;
			continue;
		}
		p++;
	}
	jr_fail(r);
	return false;
}

bool
jread_string(struct jr *r, const char **s, size_t *n)
{
	if (jread_peek(r) != JR_STRING || !jr_value_starts(r)) {
		jr_fail(r);
		return false;
	}
	return jr_string_raw(r, s, n);
}

/* Whether @word is next, not followed by a letter (jansson reads a word whole): then taken. */
static bool
jr_word(struct jr *r, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n))
		return false;
	if (r->p + n < r->end) {
		char c = r->p[n];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
			return false;
	}
	r->p += n;
	return true;
}

static bool
is_digit(const char *p, const char *end)
{
	return p < end && *p >= '0' && *p <= '9';
}

enum jr_type
jread_number(struct jr *r, int64_t *i, double *d)
{
	bool integer = true;

	if (jread_peek(r) != JR_NUMBER || !jr_value_starts(r))
		goto bad;
	const char *p = r->p, *start = p;
	if (*p == '-')
		p++;
	if (!is_digit(p, r->end))
		goto bad;
	if (*p == '0')
		p++;
	else
		while (is_digit(p, r->end))
			p++;
	if (is_digit(p, r->end))
		goto bad; /* a leading zero */
	if (p < r->end && *p == '.') {
		integer = false;
		if (!is_digit(++p, r->end))
			goto bad;
		while (is_digit(p, r->end))
			p++;
	}
	if (p < r->end && (*p == 'e' || *p == 'E')) {
		integer = false;
		p++;
		if (p < r->end && (*p == '+' || *p == '-'))
			p++;
		if (!is_digit(p, r->end))
			goto bad;
		while (is_digit(p, r->end))
			p++;
	}
	r->p = p;
	if (integer) {
		/* 19 digits and a sign at most, within int64_t, as strtoll() reads them */
		bool neg = *start == '-';
		uint64_t v = 0;

		for (const char *q = start + neg; q < p; q++) {
			unsigned dig = (unsigned)(*q - '0');

			if (v > (UINT64_MAX - dig) / 10)
				goto bad;
			v = v * 10 + dig;
		}
		if (v > (uint64_t)INT64_MAX + neg)
			goto bad;
		*i = neg ? (int64_t)(0 - v) : (int64_t)v;
		*d = (double)*i;
		return JR_INT;
	}
	char small[64], *tok = small;
	size_t n = (size_t)(p - start);
	if (n >= sizeof(small) && !(tok = malloc(n + 1)))
		pmcctl_oom();
	memcpy(tok, start, n);
	tok[n] = '\0';
	errno = 0;
	*d = strtod(tok, NULL);
	bool overflow = errno == ERANGE && (*d == HUGE_VAL || *d == -HUGE_VAL);
	if (tok != small)
		free(tok);
	if (overflow)
		goto bad;
	return JR_REAL;
bad:
	jr_fail(r);
	return JR_NONE;
}

/* The frames of open objects: where each one's keys start in @r->keys. */
static void
frame_push(struct jr *r)
{
	if (r->n_frames == r->cap_frames) {
		size_t cap = r->cap_frames ? 2 * r->cap_frames : 32;
		size_t *f = reallocarray(r->frames, cap, sizeof(*f));

		if (!f)
			pmcctl_oom();
		r->frames = f;
		r->cap_frames = cap;
	}
	r->frames[r->n_frames++] = r->n_keys;
}

static int
key_cmp(const void *a, const void *b)
{
	const struct jr_key *x = a, *y = b;
	int c = memcmp(x->s, y->s, x->n < y->n ? x->n : y->n);

	return c ? c : x->n < y->n ? -1 : x->n > y->n;
}

/* Whether the keys of the object closing repeat one, then forgets them. */
static bool
frame_pop(struct jr *r)
{
	size_t from = r->frames[--r->n_frames], n = r->n_keys - from;
	if (!n)
		return true; /* (no key yet: r->keys may be NULL) */
	struct jr_key *k = r->keys + from;
	bool dup = false;

	if (n <= 32) {
		for (size_t i = 0; i < n && !dup; i++)
			for (size_t j = i + 1; j < n && !dup; j++)
				dup = k[i].n == k[j].n && !memcmp(k[i].s, k[j].s, k[i].n);
	} else {
		qsort(k, n, sizeof(*k), key_cmp);
		for (size_t i = 1; i < n && !dup; i++)
			dup = !key_cmp(&k[i - 1], &k[i]);
	}
	r->n_keys = from;
	return !dup;
}

/* Keeps @n bytes at @s as a key of the object open now; escaped ones are copied. */
static const char *
key_keep(struct jr *r, const char *s, size_t n, bool copy)
{
	if (r->n_keys == r->cap_keys) {
		size_t cap = r->cap_keys ? 2 * r->cap_keys : 64;
		struct jr_key *k = reallocarray(r->keys, cap, sizeof(*k));

		if (!k)
			pmcctl_oom();
		r->keys = k;
		r->cap_keys = cap;
	}
	if (copy) {
		char *c = malloc(n + 1);
		char **o = reallocarray(r->owned, r->n_owned + 1, sizeof(*o));

		if (!c || !o)
			pmcctl_oom();
		memcpy(c, s, n);
		c[n] = '\0';
		r->owned = o;
		r->owned[r->n_owned++] = c;
		s = c;
	}
	r->keys[r->n_keys++] = (struct jr_key){s, n};
	return s;
}

bool
jread_object(struct jr *r)
{
	if (jread_peek(r) != JR_OBJECT || !jr_value_starts(r)) {
		jr_fail(r);
		return false;
	}
	r->p++;
	r->depth++;
	r->first = true;
	frame_push(r);
	return true;
}

bool
jread_member(struct jr *r, const char **key, size_t *n)
{
	jr_space(r);
	if (r->bad || r->p == r->end)
		goto bad;
	if (*r->p == '}') {
		r->p++;
		r->depth--;
		r->first = false;
		if (!frame_pop(r))
			goto bad;
		return false;
	}
	if (!r->first) {
		if (*r->p != ',')
			goto bad;
		r->p++;
		jr_space(r);
	}
	r->first = false;
	if (r->p == r->end || *r->p != '"')
		goto bad;
	const char *s;
	if (!jr_string_raw(r, &s, n))
		goto bad;
	*key = key_keep(r, s, *n, s == r->text);
	jr_space(r);
	if (r->p == r->end || *r->p != ':')
		goto bad;
	r->p++;
	return true;
bad:
	jr_fail(r);
	return false;
}

bool
jread_array(struct jr *r)
{
	if (jread_peek(r) != JR_ARRAY || !jr_value_starts(r)) {
		jr_fail(r);
		return false;
	}
	r->p++;
	r->depth++;
	r->first = true;
	return true;
}

bool
jread_element(struct jr *r)
{
	jr_space(r);
	if (r->bad || r->p == r->end)
		goto bad;
	if (*r->p == ']') {
		r->p++;
		r->depth--;
		r->first = false;
		return false;
	}
	if (!r->first) {
		if (*r->p != ',')
			goto bad;
		r->p++;
	}
	r->first = false;
	return true;
bad:
	jr_fail(r);
	return false;
}

void
jread_skip(struct jr *r)
{
	const char *s;
	size_t n;
	int64_t i;
	double d;

	switch (jread_peek(r)) {
	case JR_OBJECT:
		if (jread_object(r))
			while (jread_member(r, &s, &n))
				jread_skip(r);
		break;
	case JR_ARRAY:
		if (jread_array(r))
			while (jread_element(r))
				jread_skip(r);
		break;
	case JR_STRING:
		jread_string(r, &s, &n);
		break;
	case JR_NUMBER:
		jread_number(r, &i, &d);
		break;
	case JR_BOOL:
		if (!jr_value_starts(r) || !(jr_word(r, "true") || jr_word(r, "false")))
			jr_fail(r);
		break;
	case JR_NULL:
		if (!jr_value_starts(r) || !jr_word(r, "null"))
			jr_fail(r);
		break;
	default:
		jr_fail(r);
	}
}

bool
jread_end(struct jr *r)
{
	jr_space(r);
	if (r->p != r->end)
		jr_fail(r);
	return !r->bad;
}
