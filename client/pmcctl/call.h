/* call.c: talking to pmcdaemon: connecting, Hello, one request and its checked reply, the
 * Query with its filters (streamed in parts or gathered whole), and the arena a reply's parts
 * are unpacked into. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "pmc.pb-c.h"
#include "pmcctl/pmcctl.h"

/* An arena for what protobuf-c unpacks: blocks of @block_size bytes at least (0: 1 MiB), all
 * freed at once, none per message. */
struct arena {
	char **block;
	size_t n_block;
	char *at; /* room left in the last block */
	size_t left, block_size;
};

/** call_arena_allocator() - protobuf-c's allocator taking from @a (borrowed: it must outlive what
 * is unpacked); freeing one message through it does nothing, call_arena_free() frees them all.
 * Exits on allocation failure. */
ProtobufCAllocator call_arena_allocator(struct arena *a);
/** call_arena_reset() - forget what @a holds (its first block kept, for the next message) */
void call_arena_reset(struct arena *a);
/** call_arena_free() - free what @a holds; it is then empty */
void call_arena_free(struct arena *a);

/** call_response_freep() - cleanup helper: free *@r (NULL ok), protobuf-c's unpacked Response */
void call_response_freep(Pmc__Response **r);

#define _cleanup_response_ _cleanup_(call_response_freep)

/** call_stats_or_zero() - @s, or all-zero statistics for a reply that left them out (NULL) */
const Pmc__Stats *call_stats_or_zero(const Pmc__Stats *s);

/**
 * call_connect() - connect to pmcdaemon's socket at @path
 * Return: the connected fd (O_CLOEXEC), the caller's to close; when nothing answers, says
 * why and exits EX_UNAVAILABLE.
 */
int call_connect(const char *path);

/**
 * call_request() - send @req on @sock (borrowed) and wait for the reply, which must have body @want
 * @what: names the call in messages
 * Return: the Response, which the caller frees (pmc__response__free_unpacked(), or
 * _cleanup_response_); when the call fails, times out or the daemon refuses, says why
 * (with the daemon's message) and exits.
 */
Pmc__Response *call_request(int sock, const char *what, const Pmc__Request *req,
                            Pmc__Response__BodyCase want);

/** What the daemon of the last call_hello() said of itself. */
struct hello_said {
	char version[64]; /* its version, escaped ("(unknown version)" where it said none) */
	bool commands;    /* it takes OpenCommand (pmcctl run's whole-program figures) */
};
extern struct hello_said call_hello_said;

/** call_hello() - say Hello on @sock (borrowed), what the daemon says of itself in call_hello_said;
 * exits, naming both versions, when the call fails or the daemon speaks another protocol
 * version */
void call_hello(int sock);

/** call_has_glob() - whether @s holds a shell glob character (*, ?, [ or \) */
bool call_has_glob(const char *s);

/** call_new_filters() - whether @o (or a start time @min_start, from run) asks for more than
 * pmcdaemon's first Query could match: several names, globs, process names */
bool call_new_filters(const struct opts *o, uint64_t min_start);

/** call_query_init() - initialise @q with the filters of @o; its strings point into @o, which
 * must outlive it */
void call_query_init(Pmc__Query *q, const struct opts *o);

/**
 * call_query_stream() - send @q on @sock (borrowed), asking for its reply in parts, and hand each
 * part to @on_part(part, @ctx) as it arrives (a daemon that does not stream sends one part;
 * the part is freed after the callback returns). @on_part returns the bytes its caller holds
 * beyond what the parts it has read are charged (twice their bytes are allowed for), 0 for
 * none (trees set aside: tree-print.c): they count against --max-reply with the parts.
 * @what: names the call in messages
 * @o: the filters @q came from (to tell a daemon too old for them)
 * Return: the last part's Response (its visible and hidden: the whole reply's), which the
 * caller frees; on any failure, or a daemon too old for the filters, says why and exits.
 */
Pmc__Response *call_query_stream(int sock, const char *what, Pmc__Query *q, const struct opts *o,
                                 uint64_t (*on_part)(const Pmc__QueryReply *part, void *ctx),
                                 void *ctx);

/**
 * call_query() - send @q on @sock (borrowed) and gather its whole reply
 * Return: one Response holding every part's regions and losses, which the caller frees; on
 * any failure, or a daemon too old for the filters of @o, says why and exits.
 */
Pmc__Response *call_query(int sock, const char *what, Pmc__Query *q, const struct opts *o);
