"""Presenters and coordinated intents for coordfs, from Python.

    import coordfs

    def on_event(event: coordfs.Event):
        if "SAVE" in event.events:
            editor.save()            # before the reader reads
        return 0                     # consent (an errno refuses)

    with coordfs.connect("/mnt/doc.txt") as conn:
        conn.watch("/mnt/doc.txt", on_event)
        conn.wait()                  # until interrupted or the server goes

    with coordfs.coordinate(write=["/mnt/doc.txt"]):
        ...                          # others wait; presenters relinquished first

For asyncio, `coordfs.aio` has the same calls as coroutines. Standard library only. The
protocol is documented in docs/protocol.md of coordfs.
"""
from .client import (Connection, CoordfsError, Event, Hold, Origin, PROTOCOL_VERSION, connect, coordinate,
                     socket_for)

__all__ = ["Connection", "CoordfsError", "Event", "Hold", "Origin", "PROTOCOL_VERSION", "connect", "coordinate",
           "socket_for"]
