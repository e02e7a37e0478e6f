"""The README's Python example: a training-like loop with two regions.

    PYTHONPATH=build/python python3 examples/example.py      # from the build tree
    pmcctl query --pid PID                                   # the figures (PID printed)
"""
import os

import pmc

STEP = pmc.region("step")  # interned once; the loop pays begin and end only


@pmc.region("load")  # each call of load() is the region "load"
def load(i):
    return bytearray(b"\x01") * (4096 * (1 + i % 4))  # fresh memory: page faults


def main():
    total = 0
    for i in range(100):
        batch = load(i)
        with STEP:  # ended however the block is left, an exception too
            total += sum(batch[::512])
    pmc.flush()  # optional: each thread's samples are also sent within 1 s and at exit
    print(f"pid={os.getpid()} total={total} counted={pmc.enabled()}")


if __name__ == "__main__":
    main()
