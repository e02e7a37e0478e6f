/* threadid: which thread, in the daemon's pid namespace, a client's registration is for.
 *
 * A program in a container has a pid namespace of its own: the id gettid() gives it means
 * nothing in the daemon's. SO_PEERCRED names the connected process in the daemon's
 * namespace, but no socket option names a thread. The client therefore proves the thread:
 * it attaches a pidfd of it (pidfd_open(tid, PIDFD_THREAD), Linux 6.9), which the daemon
 * asks for the thread's id in its own namespace (ioctl PIDFD_GET_INFO, Linux 6.13; the
 * fdinfo's Pid: line before). Where the client's kernel has no thread pidfds, the id it
 * claims is looked up only among the connected process's own threads. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/**
 * threadid_from_pidfd() - the thread @pidfd names, in the daemon's pid namespace
 * @pidfd: a pidfd the client sent (borrowed); any other kind of fd is refused
 * @pid: the connected process (the daemon's namespace): the thread must be one of its
 * @why: set to a message (@len bytes) when the answer is -EPERM or -EBADF
 *
 * A pidfd pins its thread's struct pid: while threadid_check() finds the same id again,
 * that id has named this very thread in between (a pid number is reused only after its
 * task is gone, and a pidfd never comes back to life).
 * Return: the thread id (> 0); -ESRCH when the thread has exited; -EPERM when it is not a
 * thread of @pid (another process's, or one the daemon's namespace cannot see); -EBADF
 * when @pidfd is not a pidfd.
 */
pid_t threadid_from_pidfd(int pidfd, pid_t pid, char *why, size_t len);

/**
 * threadid_child_from_pidfd() - the process @pidfd names, in the daemon's pid namespace,
 * when it is a child of @parent
 * @pidfd: a pidfd the client sent (borrowed); any other kind of fd is refused
 * @why: set to a message (@len bytes) when the answer is -EPERM or -EBADF
 * Return: the child's pid (> 0); -ESRCH when it has exited; -EPERM when it is not a child
 * process of @parent (or a thread, or out of the daemon's sight); -EBADF when @pidfd is not
 * a pidfd.
 */
pid_t threadid_child_from_pidfd(int pidfd, pid_t parent, char *why, size_t len);

/**
 * threadid_check() - whether @pidfd still names thread @tid of process @pid (the daemon's
 * namespace)
 * Return: 0, or -ESRCH when the thread has exited.
 */
int threadid_check(int pidfd, pid_t pid, pid_t tid);

/**
 * threadid_same_ns() - whether process @pid is in the daemon's own pid namespace (then the
 * ids it names its threads by are the daemon's)
 */
bool threadid_same_ns(pid_t pid);

/**
 * threadid_claimed() - the thread of process @pid whose id in its own pid namespace is
 * @ns_tid, in the daemon's namespace
 * @why: set to a message (@len bytes) when the answer is -EPERM
 *
 * Only @pid's own threads are searched: a process can name no thread but its own, whatever
 * it writes. @same_ns (threadid_same_ns()): @ns_tid is the daemon's id too, and
 * /proc/PID/task/NS_TID is all there is to look at. Otherwise the last field of NSpid: in
 * /proc/PID/task/ * /status: first that of NS_TID itself (an id that happens to be the
 * same in both), then every thread's (one read per thread of the process).
 * Races: a thread found may end and its id be reused before the daemon opens its counters;
 * the caller checks after the open that the id is still a thread of @pid (a reuse by
 * another thread of @pid counts a thread the process could have registered itself).
 * Return: the thread id (> 0), -EPERM when @pid has no such thread (@why says so), or
 * -ESRCH when @pid is gone.
 */
pid_t threadid_claimed(pid_t pid, bool same_ns, pid_t ns_tid, char *why, size_t len);

/**
 * threadid_ns_depth() - the number of ids on a /proc status text's NSpid: line (1: the
 * task is in the namespace of that /proc), 0 when there is none. For tests.
 */
int threadid_ns_depth(const char *status);

/**
 * threadid_ns_last() - the last field of a /proc status text's NSpid: line (the id in the
 * task's own pid namespace), or -1 when there is none. For tests and threadid_claimed().
 */
pid_t threadid_ns_last(const char *status);
