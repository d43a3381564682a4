#!/usr/bin/env python3
"""Several processes at once create, write, rename and remove files in one tree (shared
directories), as a build or a mail spool does. Prints one JSON line: the seconds it took and the
errors the programs got.

    dir_stress.py ROOT [PROCESSES] [ROUNDS]
"""
import json, os, sys, time
from multiprocessing import Process, Queue

root = sys.argv[1]
processes = int(sys.argv[2]) if len(sys.argv) > 2 else 4
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 300
directories = [os.path.join(root, "d%d" % i) for i in range(3)]
for directory in directories:
    os.makedirs(directory, exist_ok=True)


def worker(index, errors):
    failures = []
    for n in range(rounds):
        directory = directories[n % len(directories)]
        other = directories[(n + 1) % len(directories)]
        name = os.path.join(directory, "w%d-%d" % (index, n))
        shared = os.path.join(directory, "shared-%d" % (n % 5))
        try:
            with open(name, "w") as f:
                f.write("x" * 100)
            os.rename(name, os.path.join(other, "w%d-%d.moved" % (index, n)))
            # Everyone also rewrites and replaces a few names they share.
            with open(shared + ".tmp%d" % index, "w") as f:
                f.write("%d %d" % (index, n))
            os.replace(shared + ".tmp%d" % index, shared)
            with open(shared) as f:
                f.read()
            if n % 3 == 0:
                os.unlink(os.path.join(other, "w%d-%d.moved" % (index, n)))
        except OSError as error:
            failures.append("%s: %s" % (type(error).__name__, error))
    errors.put(failures)


started = time.monotonic()
errors = Queue()
workers = [Process(target=worker, args=(index, errors)) for index in range(processes)]
for w in workers:
    w.start()
failures = []
for _ in workers:
    failures += errors.get(timeout=300)
for w in workers:
    w.join()
print(json.dumps({"seconds": round(time.monotonic() - started, 3), "errors": failures[:20], "error_count": len(failures)}))
