#!/usr/bin/env python3
"""A search indexer for a directory: it hears of every file that appears, changes, moves or
goes, whoever made the change (and says who), and keeps its index where the files are now —
a move is one pair of events with one cookie, not a deletion and a new file. It asks nothing,
so nobody ever waits for it.

    indexer.py /mnt/projects
"""
import os
import sys

import coordfs

root = os.path.realpath(sys.argv[1])
index = {}            # path -> size, as a stand-in for what a real indexer keeps
moving = {}           # cookie -> the path a MOVED_FROM named


def indexed(path):
    try:
        if not os.path.isdir(path):
            index[path] = os.stat(path).st_size
    except FileNotFoundError:
        index.pop(path, None)


def on_event(event):
    who = f"{event.origin.command} (pid {event.origin.pid})" if event.origin and event.origin.pid else "outside"
    if "MOVED_FROM" in event.events:
        moving[event.cookie] = event.path
    elif "MOVED_TO" in event.events:
        old = moving.pop(event.cookie, None)
        for path in [p for p in index if old and (p == old or p.startswith(old + "/"))]:
            index[event.path + path[len(old):]] = index.pop(path)
        print(f"moved {old} -> {event.path} by {who}", flush=True)
    elif "SUBITEM_DELETED" in event.events:
        index.pop(event.path, None)
        print(f"gone {event.path} by {who}", flush=True)
    elif "SUBITEM_APPEARED" in event.events or "SUBITEM_CHANGED" in event.events:
        indexed(event.path)
        if event.path in index:
            print(f"indexed {event.path} ({index[event.path]} bytes) by {who}", flush=True)


for directory, _, files in os.walk(root):
    for name in files:
        indexed(os.path.join(directory, name))

with coordfs.connect(root) as connection:
    # Notifications only: an indexer has nothing to save and never holds anyone up.
    connection.watch(root, on_event, events=["SUBITEM_APPEARED", "SUBITEM_CHANGED", "SUBITEM_DELETED",
                                             "MOVED_FROM", "MOVED_TO"])
    print(f"indexing {root}: {len(index)} files", flush=True)
    connection.wait()
