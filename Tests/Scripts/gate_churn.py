#!/usr/bin/env python3
"""Churn that opens and closes the quiet gate many times a second, for the quiet-passage test.

  gate_churn.py COORDFS_BINARY MOUNT SECONDS

Three processes make, rename, chmod and remove directories and write, rename, read back and
unlink files (requests that pass the gate while the engine holds nothing); their own opens,
one process that opens and closes files, and `coordfs watch` started and killed again and
again close it. Prints one JSON line: each worker's rounds and the rounds whose read-back
differed from what was written.
"""
import json
import multiprocessing
import os
import subprocess
import sys
import time

binary, mount, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])


def namer(index, results):
    rounds, wrong = 0, []
    directory = os.path.join(mount, "n%d" % index)
    path = os.path.join(mount, "s%d" % index)
    end = time.time() + seconds
    while time.time() < end:
        os.mkdir(directory)
        os.rename(directory, directory + "x")
        os.chmod(directory + "x", 0o700)
        os.rmdir(directory + "x")
        with open(path, "wb") as f:
            f.write(b"%d" % rounds)
        os.rename(path, path + "y")
        with open(path + "y", "rb") as f:
            if f.read() != b"%d" % rounds:
                wrong.append(rounds)
        os.unlink(path + "y")
        rounds += 1
    results.put(("namer", rounds, wrong))


def opener(results):
    rounds = 0
    end = time.time() + seconds
    while time.time() < end:
        fd = os.open(os.path.join(mount, "o%d" % (rounds % 10)), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, b"x" * 100)
        os.close(fd)
        time.sleep(0.001)
        rounds += 1
    results.put(("opener", rounds, []))


def watcher(results):
    rounds = 0
    end = time.time() + seconds
    while time.time() < end:
        watch = subprocess.Popen([binary, "watch", mount], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.05)
        watch.kill()
        watch.wait()
        rounds += 1
    results.put(("watcher", rounds, []))


results = multiprocessing.Queue()
workers = ([multiprocessing.Process(target=namer, args=(i, results)) for i in range(3)]
           + [multiprocessing.Process(target=opener, args=(results,)),
              multiprocessing.Process(target=watcher, args=(results,))])
for worker in workers:
    worker.start()
reports = [results.get(timeout=seconds + 60) for _ in workers]
for worker in workers:
    worker.join(timeout=30)
print(json.dumps([{"worker": name, "rounds": rounds, "wrong": wrong} for name, rounds, wrong in reports]))
