/* Tiny harness shared by the C tests: CHECK(), the CHECK_EQ() family that prints both sides,
 * the fd-leak check, PMC_TEST_RUN() and a deterministic random stream. */
#pragma once

#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(expr)                                                                                \
	do {                                                                                       \
		if (!(expr)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* One side of a failed CHECK_EQ() and the like, printed as its type reads best. */
static inline void
pmc_test_print_i(intmax_t v)
{
	fprintf(stderr, "%" PRIdMAX, v);
}

static inline void
pmc_test_print_u(uintmax_t v)
{
	fprintf(stderr, "%" PRIuMAX " (0x%" PRIxMAX ")", v, v);
}

static inline void
pmc_test_print_f(long double v)
{
	fprintf(stderr, "%.17Lg", v);
}

static inline void
pmc_test_print_p(const void *v)
{
	fprintf(stderr, "%p", v);
}

/* Prints @v as its type reads best (clang-format 14 cannot lay out _Generic's list). */
/* clang-format off */
#define PMC_TEST_PRINT(v)                                                                          \
	_Generic((v),                                                                              \
	         _Bool: pmc_test_print_u,                                                          \
	         char: pmc_test_print_i,                                                           \
	         signed char: pmc_test_print_i,                                                    \
	         short: pmc_test_print_i,                                                          \
	         int: pmc_test_print_i,                                                            \
	         long: pmc_test_print_i,                                                           \
	         long long: pmc_test_print_i,                                                      \
	         unsigned char: pmc_test_print_u,                                                  \
	         unsigned short: pmc_test_print_u,                                                 \
	         unsigned: pmc_test_print_u,                                                       \
	         unsigned long: pmc_test_print_u,                                                  \
	         unsigned long long: pmc_test_print_u,                                             \
	         float: pmc_test_print_f,                                                          \
	         double: pmc_test_print_f,                                                         \
	         long double: pmc_test_print_f,                                                    \
	         default: pmc_test_print_p)(v)
/* clang-format on */

/* CHECK_EQ(a, b) and the like: like CHECK(a == b), and on failure both expressions with their
 * values (integers, floating point, pointers), as libuv's ASSERT_EQ does. Each side is
 * evaluated once, and held in the type both are compared in (a ?: b's: CHECK_EQ(count, 100)
 * with a uint64_t count compares and prints as uint64_t). */
#define PMC_CHECK_CMP(a, op, b, sa, sb)                                                            \
	do {                                                                                       \
		__typeof__(0 ? (a) : (b)) _pmc_a = (a), _pmc_b = (b);                              \
		if (!(_pmc_a op _pmc_b)) {                                                         \
			fprintf(stderr, "%s:%d: check failed: %s %s %s\n  %s = ", __FILE__,        \
			        __LINE__, sa, #op, sb, sa);                                        \
			PMC_TEST_PRINT(_pmc_a);                                                    \
			fprintf(stderr, "\n  %s = ", sb);                                          \
			PMC_TEST_PRINT(_pmc_b);                                                    \
			fprintf(stderr, "\n");                                                     \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#define CHECK_EQ(a, b) PMC_CHECK_CMP(a, ==, b, #a, #b)
#define CHECK_NE(a, b) PMC_CHECK_CMP(a, !=, b, #a, #b)
#define CHECK_LT(a, b) PMC_CHECK_CMP(a, <, b, #a, #b)
#define CHECK_LE(a, b) PMC_CHECK_CMP(a, <=, b, #a, #b)
#define CHECK_GT(a, b) PMC_CHECK_CMP(a, >, b, #a, #b)
#define CHECK_GE(a, b) PMC_CHECK_CMP(a, >=, b, #a, #b)

/* CHECK_EQ_U64(a, b): both sides converted to uint64_t (signed values compare by their bit
 * pattern, as a counter's raw register does), printed in decimal and hex on failure. */
#define CHECK_EQ_U64(a, b)                                                                         \
	do {                                                                                       \
		uint64_t _pmc_a = (uint64_t)(a), _pmc_b = (uint64_t)(b);                           \
		if (_pmc_a != _pmc_b) {                                                            \
			fprintf(stderr,                                                            \
			        "%s:%d: check failed: %s == %s (%" PRIu64 " [0x%" PRIx64           \
			        "] != %" PRIu64 " [0x%" PRIx64 "])\n",                             \
			        __FILE__, __LINE__, #a, #b, _pmc_a, _pmc_a, _pmc_b, _pmc_b);       \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* CHECK_STREQ(a, b): two NUL-terminated strings equal (NULL equals only NULL); on failure both,
 * quoted. */
#define CHECK_STREQ(a, b)                                                                          \
	do {                                                                                       \
		const char *_pmc_a = (a), *_pmc_b = (b);                                           \
		if (_pmc_a != _pmc_b && (!_pmc_a || !_pmc_b || strcmp(_pmc_a, _pmc_b))) {          \
			fprintf(stderr,                                                            \
			        "%s:%d: check failed: %s equals %s\n  %s = %s%s%s\n  %s = "        \
			        "%s%s%s\n",                                                        \
			        __FILE__, __LINE__, #a, #b, #a, _pmc_a ? "\"" : "",                \
			        _pmc_a ? _pmc_a : "NULL", _pmc_a ? "\"" : "", #b,                  \
			        _pmc_b ? "\"" : "", _pmc_b ? _pmc_b : "NULL", _pmc_b ? "\"" : ""); \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static inline int
pmc_test_count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Runs one test function and prints "ok N - name" (TAP-like), numbered per program. */
static unsigned pmc_test_n; /* tests run so far */

static inline void
pmc_test_run(void (*fn)(void), const char *name)
{
	fn();
	printf("ok %u - %s\n", ++pmc_test_n, name);
	fflush(stdout);
}

#define PMC_TEST_RUN(fn) pmc_test_run(fn, #fn)

/* splitmix64: deterministic pseudo-random streams for tests. */
static inline uint64_t
pmc_test_rng(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* One random mutation of the @len bytes at @buf into @m (room for @len + 16): 1 to 3 edits,
 * each a flipped bit, a changed, inserted or removed byte, a truncation, or a byte made a
 * varint's continuation. Return: the mutated length. */
static inline size_t
pmc_test_mutate(uint8_t *m, const uint8_t *buf, size_t len, uint64_t *seed)
{
	size_t n = len;
	memcpy(m, buf, len);
	for (unsigned e = 1 + (unsigned)(pmc_test_rng(seed) % 3); e; e--) {
		uint64_t r = pmc_test_rng(seed);
		size_t at = n ? (size_t)(r >> 8) % n : 0;
		switch (r % 6) {
		case 0:
			if (n)
				m[at] ^= (uint8_t)(1u << ((r >> 40) % 8));
			break;
		case 1:
			if (n)
				m[at] = (uint8_t)(r >> 48);
			break;
		case 2:
			if (n < len + 16) {
				memmove(m + at + 1, m + at, n - at);
				m[at] = (uint8_t)(r >> 48);
				n++;
			}
			break;
		case 3:
			if (n) {
				memmove(m + at, m + at + 1, n - at - 1);
				n--;
			}
			break;
		case 4:
			n = at;
			break;
		default:
			if (n)
				m[at] = (uint8_t)(0x80 | (r >> 48));
		}
	}
	return n;
}
