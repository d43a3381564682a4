#!/usr/bin/env python3
"""Churn that opens and closes the quiet gate many times a second, for the quiet-passage test.

  gate_churn.py COORDFS_BINARY MOUNT BACKING SECONDS [HELD]

Three processes make, rename, chmod and remove directories and write, rename, read back and
unlink files (requests that pass the gate while the engine holds nothing, or beside files held
open by other names); their own opens, one process that opens and closes files, and
`coordfs watch` started and killed again and again close it. A keeper holds files of its
directory open in turn while a raider renames, chmods and replaces them: the keeper checks
that nothing happened to a name while it held it (the raider's requests must have waited),
looking in the backing directory: the kernel's caches may show a change a moment late.
With HELD, the script itself holds that many files of a directory of their own open throughout:
past the engine's short list (32 grants), every other open's grant then comes from its tables.
Prints one JSON line: each worker's rounds and the rounds whose check failed.
"""
import json
import multiprocessing
import os
import subprocess
import sys
import time

binary, mount, backing, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
held_count = int(sys.argv[5]) if len(sys.argv) > 5 else 0


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


KEPT = 5


def kept(index, under=None):
    return os.path.join(under or mount, "k", "f%d" % index)


def keeper(results):
    rounds, wrong = 0, []
    end = time.time() + seconds
    while time.time() < end:
        path, behind = kept(rounds % KEPT), kept(rounds % KEPT, backing)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            rounds += 1     # moved away by the raider just now
            continue
        # The open's lookup and its request are two steps: the raider may have moved the file
        # between them, and the open then holds the name the file had at its request. Only
        # when the name still leads to the file is that name the one held.
        held = os.fstat(fd)
        try:
            named = os.stat(behind)
        except FileNotFoundError:
            named = None
        if named is not None and named.st_ino == held.st_ino:
            # Held, the name leads to the same file, with the same mode, until the close.
            time.sleep(0.002)
            try:
                after = os.stat(behind)
            except FileNotFoundError:
                after = None
            if after is None or (after.st_ino, after.st_mode) != (named.st_ino, named.st_mode):
                wrong.append(rounds)
        os.close(fd)
        rounds += 1
    results.put(("keeper", rounds, wrong))


def raider(results):
    rounds = 0
    end = time.time() + seconds
    while time.time() < end:
        path = kept(rounds % KEPT)
        os.chmod(path, 0o600 if rounds % 2 else 0o644)
        os.rename(path, path + ".away")
        os.rename(path + ".away", path)
        with open(path + ".new", "wb") as f:
            f.write(b"%d" % rounds)
        os.rename(path + ".new", path)      # replaces the kept name with another file
        rounds += 1
    results.put(("raider", rounds, []))


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


os.makedirs(os.path.join(mount, "k"), exist_ok=True)
for index in range(KEPT):
    with open(kept(index), "wb") as f:
        f.write(b"kept")
os.makedirs(os.path.join(mount, "h"), exist_ok=True)
held = [os.open(os.path.join(mount, "h", "f%d" % index), os.O_CREAT | os.O_RDWR, 0o644) for index in range(held_count)]
results = multiprocessing.Queue()
workers = ([multiprocessing.Process(target=namer, args=(i, results)) for i in range(3)]
           + [multiprocessing.Process(target=target, args=(results,)) for target in (opener, watcher, keeper, raider)])
for worker in workers:
    worker.start()
reports = [results.get(timeout=seconds + 60) for _ in workers]
for worker in workers:
    worker.join(timeout=30)
for fd in held:
    os.close(fd)
print(json.dumps([{"worker": name, "rounds": rounds, "wrong": wrong} for name, rounds, wrong in reports]))
