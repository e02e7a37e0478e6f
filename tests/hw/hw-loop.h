/* hw-loop: a loop of exactly 2 instructions per iteration, the ground truth of the hardware
 * suite (x86-64: dec; jnz; arm64: subs; b.ne). */
#pragma once

#include <stdint.h>

/**
 * hw_loop2() - execute 2 * @n instructions in user space
 * @n: iterations, at least 1
 *
 * Never inlined, so the instructions around it (the call and return) are the same wherever it
 * is called from.
 */
static __attribute__((noinline)) void
hw_loop2(uint64_t n)
{
#if defined(__x86_64__)
	__asm__ __volatile__("1: dec %0\n\tjnz 1b" : "+r"(n) : : "cc");
#elif defined(__aarch64__)
	__asm__ __volatile__("1: subs %0, %0, #1\n\tb.ne 1b" : "+r"(n) : : "cc");
#else
#error "hw-loop.h: no 2-instruction loop for this architecture"
#endif
}
