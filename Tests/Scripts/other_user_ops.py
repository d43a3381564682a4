#!/usr/bin/env python3
"""Every operation of the control socket, tried by a user against what another user has.

Run as that user (the test runs it as nobody) with the mount point as its argument, on a mount
laid out by the test: private/ (root's, 0700) holding secret, shared/doc (root's, 0644, in a
0755 directory), both presented and vended by root; nobody/ (0777) holding a and b, nobody's.
Prints one JSON object: each attempt's name and what the server answered (its errno name, or
"ok"), for the test to judge. It asserts nothing itself.
"""
import json
import os
import sys

import coordfs
from coordfs.client import CoordfsError, Connection

mount = sys.argv[1]
results = {}


def attempt(name, call):
    try:
        call()
        results[name] = "ok"
    except CoordfsError as error:
        results[name] = error.name
    except ConnectionError:
        results[name] = "closed"


def path(relative):
    return os.path.join(mount, relative)


connection = Connection(coordfs.socket_for(mount))
secret, doc, own_a, own_b = path("private/secret"), path("shared/doc"), path("nobody/a"), path("nobody/b")


def request(**message):
    return lambda: connection.request(message, timeout=10)


def write_hold(*paths):
    return connection.request({"op": "hold", "intents": [{"path": p, "access": "write"} for p in paths]}, timeout=10)["hold"]


# Holds: only what this user could read or write.
attempt("hold read private/secret", request(op="hold", intents=[{"path": secret, "access": "read"}]))
attempt("hold write shared/doc", request(op="hold", intents=[{"path": doc, "access": "write"}]))
attempt("hold write shared/doc and nobody/a", request(op="hold", intents=[{"path": doc, "access": "write"},
                                                                         {"path": own_a, "access": "write"}]))
attempt("hold for a process of another user", request(op="hold", intents=[{"path": own_a, "access": "write"}], holder=os.getppid()))
attempt("hold for a presenter not its own", request(op="hold", intents=[{"path": own_a, "access": "write"}], presenter=1))

# Moves: a hold of its own file names another user's item as where it came from, or as
# where it went; then a move of its own, inside a hold of both places.
own = write_hold(own_a)
attempt("moved private/secret to nobody/a", request(op="moved", hold=own, **{"from": secret, "to": own_a}))
attempt("moved shared/doc to nobody/a", request(op="moved", hold=own, **{"from": doc, "to": own_a}))
attempt("moved nobody/a to shared/doc", request(op="moved", hold=own, **{"from": own_a, "to": doc}))
attempt("moved nobody/b to nobody/a, holding only a", request(op="moved", hold=own, **{"from": own_b, "to": own_a}))
connection.request({"op": "release", "hold": own, "changed": False}, timeout=10)
both = write_hold(own_a, own_b)
os.rename(own_b, path("nobody/c"))
os.rename(path("nobody/c"), own_b)
attempt("moved private/secret to nobody/a, holding a and b", request(op="moved", hold=both, **{"from": secret, "to": own_a}))
attempt("moved nobody/b to nobody/a, holding both", request(op="moved", hold=both, **{"from": own_b, "to": own_a}))
attempt("release another connection's hold", request(op="release", hold=both + 1000))
attempt("cancel another connection's request", request(op="cancel", request=1))

# Watches and answers.
attempt("watch private/secret", request(op="watch", path=secret))
attempt("unwatch another connection's watch", request(op="unwatch", wd=1))

# Services: root's are neither found through an unreadable path nor taken over.
attempt("vend on private/secret", request(op="vend", name="org.example.root", path=secret))
attempt("services of private/secret", request(op="services", path=secret))
attempt("connect to private/secret's service", request(op="connect", name="org.example.root", path=secret))
attempt("withdraw another connection's service", request(op="withdraw", service=1))
attempt("vend root's name on shared/doc", request(op="vend", name="org.example.shared", path=doc))

# The mount's options and its state.
attempt("remount", request(op="remount", options=["settle-time=0"]))
status = connection.request({"op": "status"}, timeout=10)
results["status names private/secret"] = "yes" if "private/secret" in json.dumps(status) else "no"

# An answer to a request never sent ends this client's connection, nobody else's.
attempt("answer a cookie never sent", lambda: (connection._send({"op": "answer", "cookie": 999999, "errno": 0}),
                                               connection.request({"op": "status"}, timeout=10)))
print(json.dumps(results, sort_keys=True))
