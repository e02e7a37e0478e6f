"""pmc: hardware performance counters over named regions of Python code.

    import pmc

    STEP = pmc.region("step")          # the name is interned once, here

    for batch in data:
        with STEP:                     # the block is the region "step"
            train(batch)

    @pmc.region("load")                # each call of load() is the region "load"
    def load(path): ...

    pmc.flush()                        # send this thread's samples now (optional)

A thin binding over libpmcclient (libpmcclient(3)): each Python thread registers with
pmcdaemon on its first region and reads its own counters; a fork()ed child (multiprocessing)
is counted as a process of its own. An exception leaving a region ends it and goes on.
With no daemon every region is a no-op after one warning line on stderr; PMC_DISABLE=1
turns everything off. Environment: PMC_SOCKET, PMC_EVENTS, PMC_FLUSH_MS, PMC_DISABLE, as
for C. The figures: pmcctl query --pid PID.

A name with a NUL character raises ValueError. asyncio: regions nest per thread, which the
tasks of an event loop share. While a region is open across an await, another task's region
may not begin: its `with` raises RuntimeError (naming both) and begins nothing; end regions
before such awaits, or use asyncio.to_thread(). Tasks created inside a region nest in it; a
region of theirs still open when it ends is dropped (counted as "nesting") and that end
raises RuntimeError. Nothing is checked with PMC_DISABLE=1.
"""
import threading as _threading

from ._pmc import enabled, flush, region, thread_uses_rdpmc

__all__ = ["region", "flush", "enabled", "thread_uses_rdpmc"]

# The library sends every thread's samples at exit(), but a multiprocessing child (and any
# os._exit()) skips exit(): multiprocessing's child calls threading's shutdown hooks just
# before os._exit(), as the interpreter does at a normal exit, so the main thread's samples
# are sent there. (Other threads send theirs when they end.)
_register = getattr(_threading, "_register_atexit", None)
if _register is not None:
    _register(flush)
