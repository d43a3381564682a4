#!/usr/bin/env python3
"""A presenter written with the coordfs Python package, for the cross-language test: prints
"watching", then each event's names (REQUEST left out) a line, and consents to every request.

    package_presenter.py PATH
"""
import sys

import coordfs

path = sys.argv[1]


def on_event(event):
    print(",".join(name for name in event.events if name != "REQUEST"), flush=True)
    return 0


with coordfs.connect(path) as connection:
    connection.watch(path, on_event)
    print("watching", flush=True)
    connection.wait()
