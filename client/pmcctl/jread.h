/* jread.c: JSON read in place, value by value, for diff: exactly what jansson's json_loadb()
 * takes with JSON_REJECT_DUPLICATES, so that a reader leaves the text it refuses to jansson
 * for the message. Once the text is found bad, every call fails at once. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum jr_type {
	JR_NONE, /* the end, or not a value */
	JR_OBJECT,
	JR_ARRAY,
	JR_STRING,
	JR_NUMBER,
	JR_BOOL,
	JR_NULL,
	JR_INT, /* jread_number(): an integer (within int64_t) */
	JR_REAL,
};

struct jr_key {
	const char *s;
	size_t n;
};

/* A text being read; the buffer is borrowed, never written. */
struct jr {
	const char *p, *end;
	unsigned depth;      /* containers open */
	bool first;          /* none read yet in the container open now */
	bool bad;            /* not JSON as jansson takes it */
	struct jr_key *keys; /* those of the objects open (duplicates) */
	size_t n_keys, cap_keys;
	size_t *frames; /* where each open object's keys start */
	size_t n_frames, cap_frames;
	char *text; /* the last string with escapes, decoded */
	size_t n_text, cap_text;
	char **owned; /* keys with escapes, decoded */
	size_t n_owned;
};

/** jread_init() - start reading the @len bytes at @buf (borrowed: it must outlive @r) */
void jread_init(struct jr *r, const void *buf, size_t len);
/** jread_free() - free what @r holds; the strings it gave are then gone */
void jread_free(struct jr *r);
/** jread_peek() - the type of the next value (JR_NUMBER for both kinds), nothing taken */
enum jr_type jread_peek(struct jr *r);
/** jread_object() - take the '{' of the next value; false (bad) when it is not an object */
bool jread_object(struct jr *r);
/**
 * jread_member() - the next member of the object open now: its key in *@key, *@n bytes, valid
 * until the object ends (not NUL-terminated unless it had escapes); its value is next, for
 * the caller to take (jread_skip() at least)
 * Return: false at the object's end (taken), or when the text is bad.
 */
bool jread_member(struct jr *r, const char **key, size_t *n);
/** jread_array() - take the '[' of the next value; false (bad) when it is not an array */
bool jread_array(struct jr *r);
/** jread_element() - whether an element of the array open now is next (the caller takes it);
 * false at the array's end (taken), or when the text is bad */
bool jread_element(struct jr *r);
/** jread_string() - take the next value, a string: *@s (valid until the next string is taken;
 * NUL-terminated only when it had escapes) and its length *@n; false when it is not one */
bool jread_string(struct jr *r, const char **s, size_t *n);
/** jread_number() - take the next value, a number: JR_INT (*@i, and *@d the same as a double)
 * or JR_REAL (*@d); JR_NONE (bad) when it is not one, or past int64_t or a double */
enum jr_type jread_number(struct jr *r, int64_t *i, double *d);
/** jread_skip() - take the next value, whatever it is, checking it whole */
void jread_skip(struct jr *r);
/** jread_end() - whether nothing but white space is left and the text was good */
bool jread_end(struct jr *r);
