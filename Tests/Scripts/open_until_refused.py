#!/usr/bin/env python3
"""Creates files in DIR and keeps them open until a create is refused, and prints one JSON
line: how many it opened and the errno of the refusal. Then waits for a line on stdin, closes
everything, creates one more file and prints whether that worked (its errno, or 0).

    open_until_refused.py DIR [MAX]
"""
import errno, json, os, resource, sys, time
folder = sys.argv[1]
most = int(sys.argv[2]) if len(sys.argv) > 2 else 19000
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
held, refusal = [], 0
for i in range(most):
    try:
        held.append(os.open(os.path.join(folder, "f%d" % i), os.O_CREAT | os.O_RDWR, 0o644))
    except OSError as e:
        refusal = e.errno
        break
print(json.dumps({"opened": len(held), "errno": refusal}), flush=True)
sys.stdin.readline()
for fd in held:
    os.close(fd)
# The kernel tells the mount of a close after close(2) has returned: a place freed by the last
# few closes may come back a moment later.
deadline = time.monotonic() + 5
while True:
    try:
        os.close(os.open(os.path.join(folder, "after"), os.O_CREAT | os.O_RDWR, 0o644))
        print(json.dumps({"after": 0}), flush=True)
        break
    except OSError as e:
        if e.errno != errno.EMFILE or time.monotonic() > deadline:
            print(json.dumps({"after": e.errno}), flush=True)
            break
        time.sleep(0.05)
