"""Row 11 of bench/run: a Python region's begin+end, side by side with its floor.

    PYTHONPATH=BUILD/python PMC_SOCKET=... PMC_EVENTS=... python3 bench/python.py REPS ITERS

Each repetition times ITERS passes of every variant below, one block each, in an order that
rotates between repetitions, by the thread's CPU time (time.thread_time_ns: other processes
on the CPU do not count); the figures are the medians over REPS repetitions of ns per pass,
and each ratio is the median of the per-repetition ratios to the floor:
  floor        a pure-Python context manager whose __enter__ and __exit__ each call
               time.perf_counter_ns() (the cheapest way Python code times a block itself)
  ext          with pmc.region(...):  the extension module (pmc._pmc), counting
  ext_id0      the same with a region of id 0 (pmc.region("")): the binding alone, the
               library returning at once (what the extension adds to pmc_begin/pmc_end)
  ctypes       a context manager calling pmc_begin/pmc_end through ctypes, counting
  ctypes_id0   the same with id 0
Prints key=value lines: <variant>_ns, <variant>_ratio, events, reads (1 rdpmc, 0 read()).
"""
import ctypes
import statistics
import sys
import time

import pmc
import pmc._pmc

perf_counter_ns = time.perf_counter_ns


class Floor:
    __slots__ = ("t0", "dt")

    def __enter__(self):
        self.t0 = perf_counter_ns()
        return self

    def __exit__(self, *exc):
        self.dt = perf_counter_ns() - self.t0
        return False


# The library the extension loaded (dlopen of its soname finds the same one).
_lib = ctypes.CDLL("libpmcclient.so.0")
_lib.pmc_region.argtypes = [ctypes.c_char_p]
_lib.pmc_region.restype = ctypes.c_uint32
_lib.pmc_begin.argtypes = [ctypes.c_uint32]
_lib.pmc_begin.restype = None
_lib.pmc_end.argtypes = [ctypes.c_uint32]
_lib.pmc_end.restype = None


class CtypesRegion:
    """The binding as ctypes makes it: the name interned once, begin and end by ctypes."""

    __slots__ = ("id",)

    def __init__(self, name):
        self.id = _lib.pmc_region(name.encode()) if name else 0

    def __enter__(self):
        _lib.pmc_begin(self.id)
        return self

    def __exit__(self, *exc):
        _lib.pmc_end(self.id)
        return False


def block(cm, iters):
    t0 = time.thread_time_ns()
    for _ in range(iters):
        with cm:
            pass
    return (time.thread_time_ns() - t0) / iters


def main():
    reps, iters = int(sys.argv[1]), int(sys.argv[2])
    variants = {
        "floor": Floor(),
        "ext": pmc.region("bench-python-ext"),
        "ext_id0": pmc.region(""),
        "ctypes": CtypesRegion("bench-python-ctypes"),
        "ctypes_id0": CtypesRegion(""),
    }
    names = list(variants)
    for name in names:  # registration and first-time work, outside the timing
        block(variants[name], 100)
    got = {name: [] for name in names}
    for rep in range(reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            got[name].append(block(variants[name], iters))
    for name in names:
        print(f"{name}_ns={statistics.median(got[name]):.1f}")
        ratios = [v / f for v, f in zip(got[name], got["floor"])]
        print(f"{name}_ratio={statistics.median(ratios):.3f}")
    print(f"reads={pmc.thread_uses_rdpmc()}")
    print(f"enabled={int(pmc.enabled())}")
    pmc.flush()


if __name__ == "__main__":
    main()
