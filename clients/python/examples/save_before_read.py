#!/usr/bin/env python3
"""An editor's buffer, saved whenever another program is about to read the file.

    save_before_read.py /mnt/notes.txt
"""
import sys

import coordfs

path = sys.argv[1]
buffer = "text typed in the editor\n"


def on_event(event):
    if "SAVE" in event.events:
        with open(path, "w") as f:      # this process's own write passes the waiting reader
            f.write(buffer)
        print("saved before", event.events, flush=True)
    return 0


with coordfs.connect(path) as connection:
    connection.watch(path, on_event)
    print("presenting", path, flush=True)
    connection.wait()
