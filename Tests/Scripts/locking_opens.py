#!/usr/bin/env python3
"""Two programs that serialise with a record lock while one holds a file the other opens: the
first holds the lock (fcntl) and opens FILE for writing while the second keeps FILE open for
reading and waits for the lock. Each waits for the other: the first for the reader's open, the
reader for the first's lock, which it lets go only once its open is done.

Usage: locking_opens.py [--threaded] FILE LOCKFILE
Prints "open SECONDS" (how long the first's open took) and exits 0 when both did what they do on
a local filesystem. --threaded: the first runs a second thread (which could let the lock go), so
it is no single waiting process.
"""
import fcntl
import os
import subprocess
import sys
import threading
import time

WAITER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
print("open", flush=True)
fcntl.lockf(os.open(sys.argv[2], os.O_RDWR), fcntl.LOCK_EX)
os.close(fd)
"""


def main():
    threaded = "--threaded" in sys.argv
    path, lock_path = [argument for argument in sys.argv[1:] if not argument.startswith("--")]
    with open(path, "wb") as file:
        file.write(b"before\n")
    with open(lock_path, "wb"):
        pass
    lock = os.open(lock_path, os.O_RDWR)
    fcntl.lockf(lock, fcntl.LOCK_EX)
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, path, lock_path], stdout=subprocess.PIPE, text=True)
    if waiter.stdout.readline().strip() != "open":
        sys.exit("the waiter could not open the file")
    time.sleep(0.3)  # asleep in fcntl(F_SETLKW) by now
    if threaded:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    started = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    took = time.monotonic() - started
    os.write(fd, b"after\n")
    os.close(fd)
    fcntl.lockf(lock, fcntl.LOCK_UN)
    status = waiter.wait(timeout=60)
    print("open %.2f" % took, flush=True)
    with open(path, "rb") as file:
        sys.exit(0 if status == 0 and file.read() == b"after\n" else 1)


main()
