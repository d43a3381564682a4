#!/usr/bin/env python3
"""Creates and holds open files through MOUNT until creates fail 20 times in a row (the
daemon out of descriptors), and prints one JSON line: how many were opened, the errnos of the
failures, and which failed creates left a file behind in BACKING.

    exhaust_creates.py MOUNT BACKING
"""
import os, sys, json
mnt, backing = sys.argv[1], sys.argv[2]
held = []; failures = []
for i in range(3000):
    p = os.path.join(mnt, "f%d" % i)
    try:
        held.append(os.open(p, os.O_CREAT | os.O_RDWR, 0o644))
    except OSError as e:
        failures.append((p, e.errno))
        if len(failures) > 20: break
left = [p for p, _ in failures if os.path.exists(os.path.join(backing, os.path.basename(p)))]
print(json.dumps({"opened": len(held), "failed": len(failures), "errnos": sorted({e for _, e in failures}), "left_behind": left}))
