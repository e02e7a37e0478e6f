/* wire: one protobuf-c message per AF_UNIX SOCK_SEQPACKET datagram, with
 * optional SCM_RIGHTS fds. Shared by the daemon, libpmcclient and pmcctl.
 * Every function returns 0 (or a size) on success and -errno on failure. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pmc.pb-c.h"

/* Most fds one datagram may carry (a thread's events). */
#define WIRE_MAX_FDS 64
/* The most fds one SCM_RIGHTS message may carry (the kernel's SCM_MAX_FD): receive buffers
 * have room for all of them, so that none is left for the kernel to close in the receiving
 * thread (MSG_CTRUNC), where its close could block; those over WIRE_MAX_FDS are refused. */
#define WIRE_RX_FDS 253
/* Most datagrams pmc_wire_drain() takes from a queue: more than a connected socket's queue holds
 * (net.unix.max_dgram_qlen, 512 by default), a bound whatever the kernel does. */
#define WIRE_DRAIN_MAX 65536u
/* Largest datagram either side accepts. */
#define WIRE_MAX_DATAGRAM (4u << 20)

/**
 * pmc_wire_send() - pack @msg and send it as one datagram with @fds attached
 * @sock: connected SOCK_SEQPACKET socket, borrowed
 * @msg: message to pack, borrowed
 * @fds: fds to pass (borrowed: the caller keeps and closes its copies), may be NULL
 * @n_fds: number of @fds, at most WIRE_MAX_FDS
 * @flags: extra sendmsg() flags (MSG_DONTWAIT); MSG_NOSIGNAL is always added
 * Return: 0, -EMSGSIZE (message over WIRE_MAX_DATAGRAM or too many fds), -ENOMEM,
 * -EAGAIN (MSG_DONTWAIT and the peer's queue is full), -EPIPE, or another sendmsg() errno.
 */
int pmc_wire_send(int sock, const ProtobufCMessage *msg, const int *fds, size_t n_fds, int flags);

/**
 * pmc_wire_recv() - receive one datagram and the fds attached to it
 * @sock: SOCK_SEQPACKET socket, borrowed
 * @buf: where the datagram goes; @cap: its size
 * @fds: array of @max_fds slots for the received fds (O_CLOEXEC); the caller owns them
 * @n_fds: set to the number of fds received
 * @flags: extra recvmsg() flags (MSG_DONTWAIT)
 *
 * Fds are only ever handed to the caller together with a well-formed datagram: on any
 * error every fd that arrived has been closed (by pmc_fdcheck_close(), which never blocks)
 * and *@n_fds is 0.
 * Return: the datagram's length (> 0), -ECONNRESET when the peer closed the connection,
 * -EMSGSIZE when the datagram was longer than @cap, -EBADMSG when the fds were truncated
 * (MSG_CTRUNC) or more than @max_fds arrived, -EAGAIN, or another recvmsg() errno.
 */
ssize_t pmc_wire_recv(int sock, void *buf, size_t cap, int *fds, size_t max_fds, size_t *n_fds,
                      int flags);

/**
 * pmc_wire_recv_from() - pmc_wire_recv(), the fds it refuses counted against @owner
 * @owner: passed to pmc_fdcheck_close() for each fd refused (the daemon: the peer's uid)
 */
ssize_t pmc_wire_recv_from(int sock, void *buf, size_t cap, int *fds, size_t max_fds, size_t *n_fds,
                           int flags, unsigned owner);

/**
 * pmc_wire_recv_cut() - pmc_wire_recv(), also handing over a datagram whose fds were cut short
 * @cut: set to whether the kernel cut the fds short (MSG_CTRUNC: the receiver had no room
 *       for them under its RLIMIT_NOFILE, or a security module refused one)
 *
 * As pmc_wire_recv(), except for a datagram that came with its fds cut short: no error, its
 * length is returned (its bytes in @buf, whatever else is wrong with it: the caller decides
 * from them), every fd that did arrive closed (pmc_fdcheck_close()), *@n_fds 0 and *@cut true.
 * libpmcclient: the reply to a registration whose counter fds the thread could not take.
 * Return: as pmc_wire_recv().
 */
ssize_t pmc_wire_recv_cut(int sock, void *buf, size_t cap, int *fds, size_t max_fds, size_t *n_fds,
                          int flags, bool *cut);

/**
 * pmc_wire_drain() - shut the receiving side of @sock and close every fd its queue still holds
 * @sock: SOCK_SEQPACKET socket, borrowed (it stays open: sending still works)
 * @owner: passed to pmc_fdcheck_close() for each fd found queued (the daemon: the peer's uid)
 *
 * Closing a socket frees the datagrams queued in it and the fds they carry, in the closing
 * thread; the last close of such a file may block there (a TCP socket's SO_LINGER, an
 * AF_UNIX socket whose own queue holds one). So the receiving side is shut first (the
 * peer's later sends fail with EPIPE: the queue can only shrink), then every datagram still
 * queued is received and dropped, its fds closed by pmc_fdcheck_close(), which never blocks.
 * Never blocks; keeps errno. Later receives on @sock return 0.
 */
void pmc_wire_drain(int sock, unsigned owner);

/**
 * pmc_wire_close_draining() - pmc_wire_drain(), then close @sock (taken); for every socket a peer
 * not trusted could have queued fds in
 */
void pmc_wire_close_draining(int sock, unsigned owner);

/**
 * pmc_wire_unpack_request() - decode a datagram into a Request
 * @out: set on success; free with pmc__request__free_unpacked(*out, NULL)
 * Return: 0, or -EBADMSG when the bytes are not a Request or name no body.
 */
int pmc_wire_unpack_request(const uint8_t *buf, size_t len, Pmc__Request **out);

/**
 * pmc_wire_unpack_response() - decode a datagram into a Response
 * @out: set on success; free with pmc__response__free_unpacked(*out, NULL)
 * Return: 0, or -EBADMSG when the bytes are not a Response.
 */
int pmc_wire_unpack_response(const uint8_t *buf, size_t len, Pmc__Response **out);

/**
 * pmc_wire_call() - send @req and wait up to @timeout_ms for one Response
 * @sock: connected socket, borrowed; nothing else may read it meanwhile
 * @fds: received fds (owned by the caller on success), @max_fds slots, may be NULL if 0
 * @out: the decoded Response, freed by the caller with pmc__response__free_unpacked()
 * Return: 0 (even when (*out)->error is set), -ETIMEDOUT, or a pmc_wire_send()/pmc_wire_recv()
 * error.
 */
int pmc_wire_call(int sock, const Pmc__Request *req, int timeout_ms, int *fds, size_t max_fds,
                  size_t *n_fds, Pmc__Response **out);

/**
 * pmc_wire_wait() - wait up to @timeout_ms for one datagram and receive it whole, undecoded
 * @buf: set to the bytes (malloc'd, the caller frees them), @len to their number
 * @fds: received fds, @max_fds slots (may be NULL if 0); owned by the caller when
 *       @n_fds is not NULL, closed otherwise
 * Return: 0, -ETIMEDOUT (-ECONNRESET when @timeout_ms is 0), -EMSGSIZE (over
 * WIRE_MAX_DATAGRAM), -ENOMEM, or a pmc_wire_recv() error.
 */
int pmc_wire_wait(int sock, int timeout_ms, uint8_t **buf, size_t *len, int *fds, size_t max_fds,
                  size_t *n_fds);

struct sockaddr_un;

/**
 * pmc_wire_sockaddr() - fill @sa with the AF_UNIX address of @path
 * Return: 0, or -ENAMETOOLONG when @path does not fit in sun_path.
 */
int pmc_wire_sockaddr(const char *path, struct sockaddr_un *sa);

/**
 * pmc_wire_connect() - connect a SOCK_SEQPACKET socket to @path
 * Return: the socket (O_CLOEXEC, blocking), or -errno (-ENAMETOOLONG for a long path).
 */
int pmc_wire_connect(const char *path);

/**
 * pmc_wire_connect_flags() - pmc_wire_connect() with extra socket() type flags
 * @sock_flags: SOCK_NONBLOCK: the connect fails with -EAGAIN at once when the listener's
 *              backlog is full, instead of waiting
 */
int pmc_wire_connect_flags(const char *path, int sock_flags);
