/* escape: what the daemon's metrics page and pmcctl show of a name a client sent (region
 * names, comm, event names: any bytes, since protobuf-c does not check strings). Pure and
 * header-only, shared by daemon/metrics/metrics-page.c and client/pmcctl/output.c so that both hide
 * the same characters the same way. Internal only. */
#pragma once

#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Bytes of the longest escape escape_next() writes, "\u202e" or "\x9b", with its NUL. */
#define ESCAPE_MAX 16

/**
 * escape_utf8_decode() - the well-formed UTF-8 sequence at @s
 * @s: at least @n bytes (@n > 0)
 * @cp: set to its code point on success
 * Return: its length (1 to 4), or 0 when the bytes at @s are not one (overlong, a
 * surrogate, beyond U+10FFFF, cut short by @n).
 */
static inline size_t
escape_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	unsigned char c = s[0];
	uint32_t v;
	size_t len;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		v = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		v = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		v = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10ffff)) ||
	    (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return len;
}

/**
 * escape_is_hidden() - whether a terminal or a browser acts on @cp instead of showing it
 * Return: true for C0 and C1 controls (ESC, CSI 0x9b), DEL, and the bidirectional
 * formatting characters that reorder what follows them.
 */
static inline bool
escape_is_hidden(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x061c || cp == 0x200e ||
	       cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/**
 * escape_next() - the next character of a name, and how it is shown
 * @s: at least @n bytes (@n > 0)
 * @esc: set to its visible escape when it is hidden, "\x1b" for a byte below 0x80 and
 *       "\u202e" for a code point above, or for a byte that is not UTF-8 ("\xff"); set to ""
 *       when it is shown as it is
 * Return: the bytes it takes (1 for an escaped byte that is not UTF-8).
 */
static inline size_t
escape_next(const char *s, size_t n, char esc[ESCAPE_MAX])
{
	uint32_t cp = 0;
	size_t k = escape_utf8_decode((const unsigned char *)s, n, &cp);

	esc[0] = '\0';
	if (!k || (cp < 0x80 && escape_is_hidden(cp))) {
		snprintf(esc, ESCAPE_MAX, "\\x%02x", (unsigned char)*s);
		k = 1;
	} else if (escape_is_hidden(cp)) {
		snprintf(esc, ESCAPE_MAX, "\\u%04" PRIx32, cp);
	}
	return k;
}

/**
 * escape_copy() - @s (@n bytes) as shown, each character as escape_next() says
 * @out: room for 4 * @n + 1 bytes (an escape is at most 4 bytes a byte), borrowed
 * Return: the address of the NUL that ends the copy in @out.
 */
static inline char *
escape_copy(char *out, const char *s, size_t n)
{
	while (n) {
		char esc[ESCAPE_MAX];
		size_t k = escape_next(s, n, esc);

		if (*esc) {
			out = stpcpy(out, esc);
		} else {
			memcpy(out, s, k);
			out += k;
		}
		s += k;
		n -= k;
	}
	*out = '\0';
	return out;
}
