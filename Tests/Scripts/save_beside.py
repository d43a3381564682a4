#!/usr/bin/env python3
"""Holds PATH for writing through its mount's control socket, starts COMMAND beside it, and
then saves PATH atomically (a temporary file beside it, renamed over it) as an editor's
coordinated save does; with --no-save it only holds. Prints one JSON line: when the save ended,
and how COMMAND ended.

    save_beside.py [--no-save] [--hold-for SECONDS] PATH COMMAND...
"""
import json, os, socket, subprocess, sys, time

args = sys.argv[1:]
no_save = args[0] == "--no-save"
if no_save:
    args = args[1:]
hold_for = 0.3
if args[0] == "--hold-for":
    hold_for = float(args[1]); args = args[2:]
path, command = args[0], args[1:]

s = socket.socket(socket.AF_UNIX)
s.connect(os.getxattr(path, "user.coordfs.socket").decode())
f = s.makefile("rwb", buffering=0)
def ask(message):
    f.write(json.dumps(message).encode() + b"\n")
    return json.loads(f.readline())
ask({"op": "hello", "id": 1, "version": 1})
hold = ask({"op": "hold", "id": 2, "intents": [{"path": path, "access": "write"}]})["hold"]
started = time.monotonic()
other = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
time.sleep(hold_for)
running_while_held = other.poll() is None
if not no_save:
    temporary = path + ".saving"
    with open(temporary, "w") as out:
        out.write("saved\n")
    os.replace(temporary, path)
saved = time.monotonic() - started
ask({"op": "release", "id": 3, "hold": hold})
errors = other.communicate(timeout=120)[1]
print(json.dumps({"saved_after": round(saved, 3), "status": other.returncode, "errors": errors.strip(),
                  "ended_after": round(time.monotonic() - started, 3), "running_while_held": running_while_held}))
