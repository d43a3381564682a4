"""The control socket's protocol (docs/protocol.md): one JSON object a line, both ways."""
from __future__ import annotations

import array
import collections
import contextlib
import errno as errnos
import io
import json
import logging
import os
import queue
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Union

_logger = logging.getLogger("coordfs")

PROTOCOL_VERSION = 1

Answer = Union[None, int, str]
"""What a request handler returns: None or 0 consents; an errno (number or name) refuses."""


class CoordfsError(OSError):
    """A refusal of the server: `errno` as the server named it (a number here), and its message."""

    def __init__(self, name: str, message: str):
        code = getattr(errnos, name, errnos.EIO) if isinstance(name, str) else int(name)
        super().__init__(code, message)
        self.name = name


@dataclass(frozen=True)
class Origin:
    """Who made the access an event is about. `via` is "mount" (a program's open, rename or
    unlink through a mount), "coordinator" (a coordinator's access, or a hold such as
    `coordfs coordinate`'s), "outside" (a change nobody coordinated) or "cluster" (another
    host of a shared store, named by `host`); the rest where known."""

    via: str
    pid: Optional[int] = None
    uid: Optional[int] = None
    command: Optional[str] = None
    purpose: Optional[str] = None
    host: Optional[str] = None


@dataclass
class Event:
    """An event of a watch: a request to answer (REQUEST in `events`) or a notification.

    `path` and `name` are strings as `os.fsdecode` makes them: a name that is not UTF-8 keeps
    its bytes as surrogate escapes, so `os.fsencode(event.path)` (or `path_bytes`) is the name
    on disk, and `open(event.path)` opens it."""

    wd: int
    events: List[str]
    cookie: int = 0
    name: str = ""
    path: str = ""
    mask: int = 0
    origin: Optional[Origin] = None
    _connection: Optional["Connection"] = field(default=None, repr=False, compare=False)

    @property
    def path_bytes(self) -> bytes:
        """The item's path as the bytes of its names."""
        return os.fsencode(self.path)

    @property
    def is_request(self) -> bool:
        return "REQUEST" in self.events

    def still_working(self) -> None:
        """Says, from a request's handler (or any thread while it runs), that the answer needs
        longer: the access waits one presenter timeout more from now, up to the server's limit
        (a mount's break time). Call it again before each timeout runs out."""
        if self.is_request and self._connection is not None:
            self._connection._send({"op": "working", "cookie": self.cookie})


def _real(path: Union[str, bytes]) -> str:
    """`path` resolved, as the protocol's string: a name that is not UTF-8 keeps its bytes as
    surrogate escapes (`os.fsdecode`), which the server reads back as those bytes."""
    return os.fsdecode(os.path.realpath(path))


def socket_for(path: Union[str, bytes]) -> str:
    """The control socket serving `path`: its mount's (the `user.coordfs.socket` attribute of
    the item or of its nearest existing ancestor), else the user's daemon's."""
    current = os.path.abspath(os.fsdecode(path))
    while True:
        try:
            return os.getxattr(current, "user.coordfs.socket").decode()
        except FileNotFoundError:
            if current == "/":
                break
            current = os.path.dirname(current)
        except OSError as error:
            if error.errno in (errnos.ENODATA, errnos.ENOTSUP):
                break          # a path outside any mount
            if error.errno == errnos.ENOTCONN:
                raise CoordfsError("ENOTCONN", f"'{path}' is on a coordfs mount whose daemon has gone") from None
            raise
    runtime = "/run/coordfs" if os.geteuid() == 0 else os.path.join(
        os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/coordfs-{os.geteuid()}", "coordfs")
    daemon = os.path.join(runtime, "daemon.sock")
    if os.path.exists(daemon):
        return daemon
    raise CoordfsError("ENOENT", f"'{path}' is not inside a coordfs mount, and no coordfs daemon runs ({daemon})")


class Hold:
    """Intents held by a connection until `release` (or the end of a `with` block)."""

    def __init__(self, connection: "Connection", number: int, paths: List[str]):
        self.connection = connection
        self.number = number
        self.paths = paths
        self.released = False

    def release(self, changed: bool = True) -> None:
        """Ends the hold; `changed` tells presenters the written items changed."""
        if not self.released:
            self.released = True
            self.connection.request({"op": "release", "hold": self.number, "changed": changed})

    def moved(self, source: Union[str, bytes], destination: Union[str, bytes]) -> None:
        """Reports that the item at `source` is now at `destination`, after renaming it inside
        this hold, which must write both places: presenters of the item follow it. Needed only
        outside a mount (a mount sees its own renames). Refused (`CoordfsError`) with EPERM for
        a hold that does not write both places and EACCES for a move this user could not make."""
        self.connection.request({"op": "moved", "hold": self.number, "from": _real(source), "to": _real(destination)})

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release(changed=exc[0] is None)


class Connection:
    """One connection to a control socket. Replies are matched to requests by id. Events go to
    their watch's handler, in order, on a thread of the connection's own (so a handler may use
    the connection: hold, status), and a request's answer is sent as soon as the handler
    returns (the access waits for it, not for anything after)."""

    def __init__(self, socket_path: str):
        self.socket_path = socket_path
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(socket_path)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._next_id = 1
        self._replies: Dict[int, Dict[str, Any]] = {}
        self._arrived = threading.Condition(self._lock)
        self._handlers: Dict[int, Callable[[Event], Answer]] = {}
        self._providers: Dict[int, Callable[[socket.socket, str], None]] = {}
        # Held across a vend and its registration: a client may connect before the reply is read.
        self._providers_lock = threading.Lock()
        self._closed = False
        self._ended = threading.Event()
        self.server: Dict[str, Any] = {}
        self._events: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="coordfs-reader", daemon=True)
        self._reader.start()
        self._dispatcher = threading.Thread(target=self._dispatch, name="coordfs-events", daemon=True)
        self._dispatcher.start()
        hello = self.request({"op": "hello", "version": PROTOCOL_VERSION})
        if hello.get("version") != PROTOCOL_VERSION:
            self.close()
            raise CoordfsError("EPROTONOSUPPORT", f"the server speaks protocol {hello.get('version')}, this package {PROTOCOL_VERSION}")
        self.server = hello

    # Plumbing

    def _send(self, message: Dict[str, Any], descriptor: Optional[int] = None) -> None:
        line = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        with self._write_lock:
            if self._closed:
                raise CoordfsError("ENOTCONN", "the connection is closed")
            if descriptor is not None:
                # The descriptor rides on the line's first byte.
                sent = socket.send_fds(self._socket, [line], [descriptor])
                line = line[sent:]
            self._socket.sendall(line)

    def request(self, message: Dict[str, Any], timeout: Optional[float] = None,
                descriptor: Optional[int] = None) -> Dict[str, Any]:
        """Sends `message` with a fresh id (and `descriptor` attached, for `add_version`) and
        returns the reply's fields; a refusal raises `CoordfsError`, a connection that ends
        first `ConnectionError`."""
        with self._lock:
            number = self._next_id
            self._next_id += 1
        self._send(dict(message, id=number), descriptor)
        with self._arrived:
            if not self._arrived.wait_for(lambda: number in self._replies or self._ended.is_set(), timeout):
                raise TimeoutError(f"no reply to {message.get('op')} within {timeout} s")
            reply = self._replies.pop(number, None)
        if reply is None:
            raise ConnectionError(f"the coordfs server at {self.socket_path} closed the connection")
        if "error" in reply:
            raise CoordfsError(reply["error"], reply.get("message", ""))
        return reply

    @staticmethod
    def _carries_descriptor(message: Dict[str, Any]) -> bool:
        """A `connect` reply and a SERVICE_CONNECTION event carry a socket (docs/protocol.md)."""
        if "wd" in message and "ok" not in message and "error" not in message:
            return "SERVICE_CONNECTION" in message.get("events", [])
        return message.get("descriptor") is True

    def _read(self) -> None:
        # Read with recvmsg: descriptors come beside the bytes, in the order of the lines that
        # carry them, each with its line's first byte.
        pending: "collections.deque[int]" = collections.deque()
        buffer = b""
        room = socket.CMSG_SPACE(64 * array.array("i").itemsize)
        try:
            while True:
                data, ancillary, _, _ = self._socket.recvmsg(65536, room)
                for level, kind, payload in ancillary:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        numbers = array.array("i")
                        numbers.frombytes(payload[:len(payload) - len(payload) % numbers.itemsize])
                        pending.extend(numbers)
                if not data:
                    break
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = json.loads(line)
                    if self._carries_descriptor(message) and pending:
                        message["_descriptor"] = pending.popleft()
                    if "wd" in message and "ok" not in message and "error" not in message:
                        self._events.put(message)
                        continue
                    with self._arrived:
                        self._replies[message.get("id", 0)] = message
                        self._arrived.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            for descriptor in pending:          # for lines that never came
                with contextlib.suppress(OSError):
                    os.close(descriptor)
            self._ended.set()
            self._events.put(None)
            with self._arrived:
                self._arrived.notify_all()

    def _dispatch(self) -> None:
        while True:
            message = self._events.get()
            if message is None:
                return
            with contextlib.suppress(CoordfsError, OSError):
                self._deliver(message)

    def _deliver(self, message: Dict[str, Any]) -> None:
        if "SERVICE_CONNECTION" in message.get("events", []):
            return self._serve(message)
        origin = None
        if "via" in message:
            origin = Origin(via=message["via"], pid=message.get("pid"), uid=message.get("uid"),
                            command=message.get("command"), purpose=message.get("purpose"), host=message.get("host"))
        event = Event(wd=message["wd"], events=list(message.get("events", [])), cookie=message.get("cookie", 0),
                      name=message.get("name", ""), path=message.get("path", ""), mask=message.get("mask", 0),
                      origin=origin, _connection=self)
        handler = self._handlers.get(event.wd)
        answer: Answer = 0
        if handler is not None:
            try:
                answer = handler(event)
            except Exception as error:
                # A handler that fails refuses a request, and says why (with its traceback, on the
                # "coordfs" logger: standard error unless the program configures logging).
                answer = getattr(error, "errno", None) or errnos.EIO
                what = (f"refused with {errnos.errorcode.get(answer, answer)}" if event.is_request
                        else "the notification is dropped")
                _logger.error("the handler of %s raised on %s: %s", event.path, ",".join(event.events), what, exc_info=True)
        if event.is_request:
            self._send({"op": "answer", "cookie": event.cookie, "errno": answer or 0})

    def _serve(self, message: Dict[str, Any]) -> None:
        """A client connected to one of our services: its handler gets the socket on a thread
        of its own (a connection may last as long as it likes)."""
        descriptor = message.get("_descriptor")
        if descriptor is None:
            return
        connection = socket.socket(fileno=descriptor)
        with self._providers_lock:
            provider = self._providers.get(message["wd"])
        if provider is None:
            connection.close()
            return
        threading.Thread(target=provider, args=(connection, message.get("path", "")),
                         name="coordfs-service", daemon=True).start()

    # The protocol

    def watch(self, path: Union[str, bytes], handler: Callable[[Event], Answer], events: Optional[Iterable[str]] = None) -> int:
        """Presents `path`: `handler` gets every event of it (only `events`, when given, such
        as ["SAVE", "CHANGED"]); for a request its return value is the answer. Returns the watch
        descriptor."""
        message: Dict[str, Any] = {"op": "watch", "path": _real(path)}
        if events is not None:
            message["mask"] = [name.upper() for name in events]
        reply = self.request(message)
        self._handlers[reply["wd"]] = handler
        return reply["wd"]

    def unwatch(self, wd: int) -> None:
        self._handlers.pop(wd, None)
        self.request({"op": "unwatch", "wd": wd})

    def hold(self, read: Iterable[Union[str, bytes]] = (), write: Iterable[Union[str, bytes]] = (), wait: bool = True,
             timeout: Optional[float] = None, write_option: Optional[str] = None) -> Hold:
        """Holds reads of `read` and writes of `write`, all or none: once granted (presenters
        asked first), or refused (`CoordfsError`: EAGAIN when `wait` is false and another
        holds an item, EBUSY after `timeout` seconds, by default the server's wait timeout (a
        mount's --wait-timeout, 60 s unless set), EDEADLK). Another user's holds keep it
        waiting at most a mount's break time."""
        intents = [{"path": _real(p), "access": "read"} for p in read]
        intents += [dict({"path": _real(p), "access": "write"}, **({"options": [write_option]} if write_option else {}))
                    for p in write]
        message: Dict[str, Any] = {"op": "hold", "intents": intents, "wait": wait}
        if timeout is not None:
            message["timeout"] = timeout
        reply = self.request(message)
        return Hold(self, reply["hold"], list(reply.get("paths", [])))

    def vend(self, name: str, path: Union[str, bytes], handler: Callable[[socket.socket, str], None]) -> int:
        """Vends the service `name` for the item at `path` and everything inside it: each client
        that connects reaches `handler`, on a thread of its own, as a connected socket and the
        path it asked about. Returns the service's number, for `withdraw`."""
        with self._providers_lock:
            reply = self.request({"op": "vend", "name": name, "path": _real(path)})
            self._providers[reply["service"]] = handler
        return reply["service"]

    def withdraw(self, service: int) -> None:
        """Stops vending `service`: clients no longer find it."""
        self._providers.pop(service, None)
        self.request({"op": "withdraw", "service": service})

    def services(self, path: Union[str, bytes]) -> Dict[str, Dict[str, Any]]:
        """The services of the item at `path`, by name: for each, the nearest provider up the
        tree (`path` where it was vended, `pid` of its provider)."""
        reply = self.request({"op": "services", "path": _real(path)})
        return {entry["name"]: entry for entry in reply.get("services", [])}

    def connect(self, name: str, path: Union[str, bytes]) -> socket.socket:
        """A connected socket to the provider of the service `name` of the item at `path`
        (`CoordfsError` ENOENT where it has none)."""
        reply = self.request({"op": "connect", "name": name, "path": _real(path)})
        descriptor = reply.get("_descriptor")
        if descriptor is None:
            raise CoordfsError("EPROTO", "the server's connect reply carried no socket")
        return socket.socket(fileno=descriptor)

    def versions(self, path: Union[str, bytes]) -> List[Dict[str, Any]]:
        """The versions a mount keeps of the item at `path` (which may be gone), oldest first:
        each a dict with `id`, `cause`, `time`, `modified`, `size`, `conflict`, `resolved`,
        `pinned` and `replaced_by` (docs/versions.md)."""
        return list(self.request({"op": "versions", "path": _real(path)})["versions"])

    def open_version(self, path: Union[str, bytes], version: str) -> "io.BufferedReader":
        """Version `version` of the item at `path`, open for reading (binary)."""
        reply = self.request({"op": "version", "path": _real(path), "version": version, "action": "open"})
        descriptor = reply.get("_descriptor")
        if descriptor is None:
            raise CoordfsError("EPROTO", "the reply carried no descriptor")
        return os.fdopen(descriptor, "rb")

    def add_version(self, path: Union[str, bytes], content: Any) -> Dict[str, Any]:
        """Keeps the content of `content` (a file object or descriptor open for reading) as a
        new version of the item at `path` (cause `added`); returns its record. Presenters of the
        item hear VERSION_ADDED. Outside any mount the daemon keeps it."""
        descriptor = content if isinstance(content, int) else content.fileno()
        return dict(self.request({"op": "add_version", "path": _real(path)}, descriptor=descriptor)["version"])

    def version(self, path: Union[str, bytes], version: str, action: str) -> None:
        """Acts on version `version` of the item at `path`: `resolve`, `unresolve`, `pin`,
        `unpin` or `remove` (the right to write the item is needed)."""
        self.request({"op": "version", "path": _real(path), "version": version, "action": action})

    def status(self) -> Dict[str, Any]:
        """Who holds, waits, presents and vends services (`holders`, `waiters`, `presenters`, `services`).

        The server answers a page at a time; the lists that go on (its `next`) are read to the
        end here, so the result is the whole status."""
        lists = ("holders", "waiters", "presenters", "services")
        whole = self.request({"op": "status"})
        cursors = dict(whole.pop("next", None) or {})
        for name in lists:
            cursor = cursors.get(name)
            while cursor is not None:
                page = self.request({"op": "status", "list": name, "after": cursor, "limit": 10000})
                for key in lists:
                    whole.setdefault(key, []).extend(page.get(key) or [])
                for key, count in (page.get("omitted") or {}).items():
                    whole.setdefault("omitted", {})[key] = whole.get("omitted", {}).get(key, 0) + count
                following = (page.get("next") or {}).get(name)
                # A cursor only goes forward: a server that answered the same again would loop.
                cursor = following if following is not None and following > cursor else None
        return whole

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the server closes the connection (True) or `timeout` passes (False)."""
        return self._ended.wait(timeout)

    @property
    def closed(self) -> bool:
        return self._closed or self._ended.is_set()

    def close(self) -> None:
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect(path: Union[str, bytes]) -> Connection:
    """A connection to the server of `path` (its mount's, else the daemon's)."""
    return Connection(socket_for(path))


@contextlib.contextmanager
def coordinate(read: Iterable[str] = (), write: Iterable[str] = (), wait: bool = True,
               timeout: Optional[float] = None) -> Iterator[Hold]:
    """Holds the intents for the `with` block, like `coordfs coordinate`: others wait, and
    presenters relinquish first. This process's own opens of the items through the mount
    pass (they are the block's own work)."""
    paths = list(read) + list(write)
    if not paths:
        raise ValueError("name at least one item to read or write")
    with connect(paths[0]) as connection:
        held = connection.hold(read=read, write=write, wait=wait, timeout=timeout)
        try:
            yield held
        except BaseException:
            held.release(changed=False)
            raise
        held.release(changed=bool(list(write)))
