#!/usr/bin/env python3
"""A presenter in another process, speaking only the documented control-socket protocol.

  presenter.py PATH [--answer ok|ERRNO|never] [--on-save TEXT] [--mask NAMES]

Finds the socket from PATH's `user.coordfs.socket` attribute, says hello, watches PATH and
prints every event record as one JSON line. It answers requests as told: "ok", an errno name,
or never; with --on-save it writes TEXT into PATH before answering a SAVE request.
"""
import json
import os
import socket
import sys

path = os.path.realpath(sys.argv[1])
answer = "ok"
on_save = None
mask = ["ALL"]
args = sys.argv[2:]
while args:
    flag, value, args = args[0], args[1], args[2:]
    if flag == "--answer":
        answer = value
    elif flag == "--on-save":
        on_save = value
    elif flag == "--mask":
        mask = value.split(",")

sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(os.getxattr(path, "user.coordfs.socket").decode())
stream = sock.makefile("rwb", buffering=0)


def send(message):
    stream.write((json.dumps(message) + "\n").encode())


def receive():
    line = stream.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


send({"op": "hello", "id": 1, "version": 1})
print(json.dumps(receive()), flush=True)
send({"op": "watch", "id": 2, "path": path, "mask": mask})
print(json.dumps(receive()), flush=True)
while True:
    record = receive()
    print(json.dumps(record), flush=True)
    if "REQUEST" in record.get("events", []):
        if on_save is not None and "SAVE" in record["events"]:
            with open(path, "w") as out:
                out.write(on_save)
        if answer == "never":
            continue
        send({"op": "answer", "cookie": record["cookie"], "errno": 0 if answer == "ok" else answer})
