#!/usr/bin/env python3
"""The first walk of a big tree (`make bench-walk`): the slowest calls of one `stat` of every file,
through a fresh coordfs mount, against the same walk natively.

  walkbench.py COORDFS_BINARY [--files N] [--budget N] [--repeats N]

A first walk is where the mount's inode table grows and, past the descriptor budget, evicts:
each eviction, and each growth of a table, falls on the call that causes it. The median call
shows the per-request cost; the slowest calls show those pauses. The walking process runs on
CPU 0 (the mount's queue for that CPU serves it), and each repeat mounts afresh.
"""
import os
import shutil
import statistics
import subprocess
import tempfile
import time


from benchargs import coordfs_parser, executable, positive

parser = coordfs_parser("first-walk latency of a coordfs mount (run by `make bench-walk`).")
parser.add_argument("--files", type=positive, default=40_000, help="files in the tree (default 40 000)")
parser.add_argument("--budget", type=positive, default=12_000, help="the mount's --descriptor-budget (default 12 000)")
parser.add_argument("--repeats", type=positive, default=3, help="fresh mounts walked (default 3)")
arguments = parser.parse_args()
binary = executable(parser, arguments)

base = tempfile.mkdtemp(prefix="coordfs-walk-", dir="/tmp")
backing, point = os.path.join(base, "backing"), os.path.join(base, "mnt")
directories = 40
names = [f"d{d}/f{i}" for d in range(directories) for i in range(arguments.files // directories)]


def walk(root):
    """Each file's stat time in µs, in walk order."""
    times = []
    for name in names:
        path = os.path.join(root, name)
        began = time.perf_counter()
        os.stat(path)
        times.append((time.perf_counter() - began) * 1e6)
    return times


def summary(label, times):
    """Percentiles, and the five slowest calls with their place in the walk (call 1 is the
    first: a fresh mount's first lookups of the root and a directory)."""
    ordered = sorted(times)
    count = len(ordered)
    slowest = sorted(range(count), key=times.__getitem__)[-5:]
    print("%-22s p50 %5.1f µs  p99 %5.1f µs  p99.9 %6.1f µs  slowest: %s"
          % (label, ordered[count // 2], ordered[count * 99 // 100], ordered[count * 999 // 1000],
             ", ".join("%.2f ms (call %d)" % (times[index] / 1000, index + 1) for index in reversed(slowest))))


try:
    os.makedirs(point)
    for d in range(directories):
        os.makedirs(os.path.join(backing, f"d{d}"))
    for name in names:
        open(os.path.join(backing, name), "w").close()
    os.sched_setaffinity(0, {0})
    print("first walk: stat of %d files in %d directories, one process on CPU 0; descriptor budget %d"
          % (len(names), directories, arguments.budget))
    for repeat in range(arguments.repeats):
        subprocess.run(["sync"])
        summary(f"native, repeat {repeat + 1}", walk(backing))
        subprocess.run([binary, "mount", backing, point, "--descriptor-budget", str(arguments.budget)],
                       check=True)
        try:
            summary(f"coordfs, repeat {repeat + 1}", walk(point))
        finally:
            subprocess.run(["umount", point], check=False)
finally:
    if os.path.ismount(point):
        subprocess.run(["umount", "--lazy", point])
    shutil.rmtree(base, ignore_errors=True)
