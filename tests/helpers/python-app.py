"""The Python test program of e2e-python: regions whose page faults are known exactly.

    python-app.py pages N K        region "pages" writes N fresh pages of an mmap, K times
    python-app.py threads T N K    the same in T threads at once (each its own registration)
    python-app.py fork N K         the same in a multiprocessing child (fork) and the parent
    python-app.py deco N K         a function decorated with pmc.region("deco"), K calls
    python-app.py exc K            K exceptions raised inside region "exc", caught outside it
    python-app.py refused K        a name with a NUL (ValueError: prints nul=ValueError), then
                                   a 1 MiB name used K times with "with" and K times as a
                                   decorator: 2 K runs refused (name-too-long), each counted
    python-app.py asyncio K        asyncio on one thread: two tasks whose regions "task-a" and
                                   "task-b" span an await, K times each (prints crossed=: the
                                   enters refused with RuntimeError, counted_a=, counted_b=);
                                   then two tasks whose regions "step" do not, K times each,
                                   inside one region "gather" (child tasks nest in it); then a
                                   region "to-thread" around asyncio.to_thread() of a region
                                   "in-thread" (another thread: its own regions); then a
                                   child task whose region "orphan-inner" is still open when
                                   its creator's "orphan-outer" ends (orphan=RuntimeError);
                                   and a function decorated with region "deco-b" called in a
                                   task while another's region "holder" is open
                                   (deco_crossed=RuntimeError, deco_ran=0)
    python-app.py exit K           K regions "unsent", then os._exit(0) at once (what the
                                   library had not sent yet is lost: reason unsent)

Prints key=value lines: enabled, count, flush, and child=PID for fork.
"""
import asyncio
import mmap
import multiprocessing
import os
import sys
import threading

import pmc

PAGE = mmap.PAGESIZE
PAGES = pmc.region("pages")
WARM_UP = pmc.region("warm-up")


def pages(n, k, region=PAGES):
    offsets = [i * PAGE for i in range(n)]
    # One pass in a region of its own first: the interpreter's and the library's first
    # writes (first-time allocations; after a fork, every page the parent and the child
    # still share is copied on its first write, in either) fault there, not in the count.
    m = mmap.mmap(-1, n * PAGE)
    with WARM_UP:
        for o in offsets:
            m[o] = 1
    m.close()
    done = 0
    # A fresh mapping per call, made and dropped outside the region: inside it only the
    # N first writes fault (the loop's own objects reuse freed ones).
    for _ in range(k):
        m = mmap.mmap(-1, n * PAGE)
        with region:
            for o in offsets:
                m[o] = 1
        m.close()
        done += 1
    return done


async def crossing(k):
    """Two tasks whose regions span an await: each enter that finds the other task's region
    open is refused (RuntimeError); the counts of what was not."""
    counted = {"a": 0, "b": 0}
    refused = []

    async def task(name):
        reg = pmc.region("task-" + name)
        for _ in range(k):
            try:
                with reg:
                    await asyncio.sleep(0)
                counted[name] += 1
            except RuntimeError as e:
                refused.append(str(e))
                await asyncio.sleep(0)

    await asyncio.gather(task("a"), task("b"))
    return counted, refused


async def crossing_call():
    """A function decorated with pmc.region called in a task while another task's region
    is open across an await: RuntimeError, and the function is not called."""
    ran = []
    opened, done = asyncio.Event(), asyncio.Event()

    @pmc.region("deco-b")
    def work():
        ran.append(1)

    async def holder():
        with pmc.region("holder"):
            opened.set()
            await done.wait()

    t = asyncio.create_task(holder())
    await opened.wait()
    try:
        work()
        verdict = "called"
    except RuntimeError:
        verdict = "RuntimeError"
    done.set()
    await t
    return verdict, len(ran)


async def nested(k):
    """Regions that end before each await, in two child tasks inside one open region."""
    step = pmc.region("step")

    async def task():
        for _ in range(k):
            with step:
                pass
            await asyncio.sleep(0)
        return k

    with pmc.region("gather"):
        done = await asyncio.gather(task(), task())
    with pmc.region("to-thread"):
        await asyncio.to_thread(lambda: pmc.region("in-thread").__enter__().__exit__(None, None, None))
    return sum(done)


async def orphan():
    """A child task begun inside a region keeps its own open past that region's end: the
    end raises RuntimeError and drops the child's (counted as nesting)."""
    began, done = asyncio.Event(), asyncio.Event()

    async def child():
        with pmc.region("orphan-inner"):
            began.set()
            await done.wait()

    try:
        with pmc.region("orphan-outer"):
            t = asyncio.create_task(child())
            await began.wait()
        ended = "ok"
    except RuntimeError:
        ended = "RuntimeError"
    done.set()
    await t
    return ended


def child(n, k, q):
    q.put(pages(n, k))


def main():
    mode = sys.argv[1]
    enabled = pmc.enabled()
    if mode == "pages":
        count = pages(int(sys.argv[2]), int(sys.argv[3]))
    elif mode == "threads":
        t, n, k = (int(a) for a in sys.argv[2:5])
        counts = []
        ths = [threading.Thread(target=lambda: counts.append(pages(n, k))) for _ in range(t)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        count = sum(counts)
    elif mode == "fork":
        n, k = int(sys.argv[2]), int(sys.argv[3])
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(n, k, q))
        p.start()
        got = q.get()
        p.join()
        if p.exitcode != 0:
            sys.exit("child failed")
        print(f"child={p.pid}")
        print(f"child_count={got}")
        count = pages(n, k)
    elif mode == "deco":
        n, k = int(sys.argv[2]), int(sys.argv[3])
        offsets = [i * PAGE for i in range(n)]

        @pmc.region("deco")
        def write(m):
            for o in offsets:
                m[o] = 1
            return len(offsets)

        pages(n, 1, WARM_UP)
        count = 0
        for _ in range(k):
            m = mmap.mmap(-1, n * PAGE)
            count += write(m) // n
            m.close()
    elif mode == "exc":
        exc = pmc.region("exc")
        count = 0
        for i in range(int(sys.argv[2])):
            try:
                with exc:
                    raise KeyError(i)
            except KeyError:
                count += 1
        with pmc.region("after"):
            pass
    elif mode == "refused":
        try:
            pmc.region("nul\0hidden")
            print("nul=accepted")
        except ValueError:
            print("nul=ValueError")
        k = int(sys.argv[2])
        big = pmc.region("x" * (1 << 20))
        count = 0
        for _ in range(k):
            with big:
                count += 1

        @pmc.region("y" * (1 << 20))
        def run():
            return 1

        for _ in range(k):
            count += run()
    elif mode == "asyncio":
        k = int(sys.argv[2])
        counted, refused = asyncio.run(crossing(k))
        print(f"counted_a={counted['a']}")
        print(f"counted_b={counted['b']}")
        print(f"crossed={len(refused)}")
        if refused:
            print(f"message={refused[0]}")
        verdict, ran = asyncio.run(crossing_call())
        print(f"deco_crossed={verdict}")
        print(f"deco_ran={ran}")
        count = asyncio.run(nested(k))
        print(f"orphan={asyncio.run(orphan())}")
    elif mode == "exit":
        unsent = pmc.region("unsent")
        for _ in range(int(sys.argv[2])):
            with unsent:
                pass
        print(f"enabled={int(enabled)}", flush=True)
        os._exit(0)
    else:
        sys.exit(f"unknown mode {mode}")
    print(f"enabled={int(enabled)}")
    print(f"count={count}")
    print(f"flush={pmc.flush()}")


if __name__ == "__main__":
    main()
