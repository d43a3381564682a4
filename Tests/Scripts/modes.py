#!/usr/bin/env python3
"""Makes the same items natively and through a mount, under each of several umasks, and prints
one JSON line: every item whose mode differs, with both modes in octal.

    modes.py NATIVE_DIR MOUNTED_DIR
"""
import json, os, stat, sys

native, mounted = sys.argv[1], sys.argv[2]
steps = [
    ("open O_CREAT 0662", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o662))),
    ("open O_CREAT 0777", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o777))),
    ("open O_CREAT 04755", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o4755))),
    ("open O_CREAT 02755", lambda p: os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o2755))),
    ("mkdir 01777", lambda p: os.mkdir(p, 0o1777)),
    ("mkdir 02775", lambda p: os.mkdir(p, 0o2775)),
    ("mkdir 0700", lambda p: os.mkdir(p, 0o700)),
    ("mknod fifo 0666", lambda p: os.mkfifo(p, 0o666)),
    ("mknod file 0640", lambda p: os.mknod(p, 0o640 | stat.S_IFREG)),
]
differences = []
count = 0
for mask in (0o000, 0o002, 0o022, 0o077):
    for index, (name, make) in enumerate(steps):
        item = "m%03o-%d" % (mask, index)
        modes = []
        for base in (native, mounted):
            previous = os.umask(mask)
            try:
                make(os.path.join(base, item))
            finally:
                os.umask(previous)
            modes.append(oct(stat.S_IMODE(os.lstat(os.path.join(base, item)).st_mode)))
        count += 1
        if modes[0] != modes[1]:
            differences.append({"umask": oct(mask), "step": name, "native": modes[0], "mounted": modes[1]})
print(json.dumps({"compared": count, "differences": differences}))
