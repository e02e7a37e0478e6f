"""The Python test program of e2e-python: regions whose page faults are known exactly.

    python-app.py pages N K        region "pages" writes N fresh pages of an mmap, K times
    python-app.py threads T N K    the same in T threads at once (each its own registration)
    python-app.py fork N K         the same in a multiprocessing child (fork) and the parent
    python-app.py deco N K         a function decorated with pmc.region("deco"), K calls
    python-app.py exc K            K exceptions raised inside region "exc", caught outside it
    python-app.py refused K        a name with a NUL (ValueError: prints nul=ValueError), then
                                   a 1 MiB name used K times with "with" and K times as a
                                   decorator: 2 K runs refused (name-too-long), each counted

Prints key=value lines: enabled, count, flush, and child=PID for fork.
"""
import mmap
import multiprocessing
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
    else:
        sys.exit(f"unknown mode {mode}")
    print(f"enabled={int(enabled)}")
    print(f"count={count}")
    print(f"flush={pmc.flush()}")


if __name__ == "__main__":
    main()
