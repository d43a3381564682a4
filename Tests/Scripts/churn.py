#!/usr/bin/env python3
"""Keeps opening, writing, renaming and unlinking files beside a workload until stdin closes
(or SECONDS pass), then prints: ops N errors N.

  churn.py DIR [SECONDS]
"""
import os
import random
import select
import sys
import time

directory = sys.argv[1]
deadline = time.time() + float(sys.argv[2]) if len(sys.argv) > 2 else None
os.makedirs(directory, exist_ok=True)
random.seed(os.getpid())
ops = errors = 0
while True:
    if deadline and time.time() > deadline:
        break
    if not deadline and select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
        break
    name = os.path.join(directory, "neighbour-%d" % random.randint(0, 15))
    other = os.path.join(directory, "neighbour-%d" % random.randint(0, 15))
    try:
        action = random.randint(0, 4)
        if action == 0:
            with open(name, "wb") as out:
                out.write(os.urandom(random.randint(0, 65536)))
                out.flush()
                os.fsync(out.fileno())
        elif action == 1 and os.path.exists(name):
            with open(name, "rb") as source:
                source.read()
        elif action == 2 and os.path.exists(name):
            os.rename(name, other)
        elif action == 3 and os.path.exists(name):
            os.unlink(name)
        else:
            os.listdir(directory)
        ops += 1
    except FileNotFoundError:
        ops += 1        # a neighbour went between the check and the call: expected
    except OSError as error:
        errors += 1
        print("churn error:", error, file=sys.stderr)
print("ops %d errors %d" % (ops, errors), flush=True)
