"""The control socket for asyncio programs: the same connection, with coroutines in place of
blocking calls, and watch handlers that may be coroutine functions.

    import coordfs.aio

    async def on_event(event):
        if "SAVE" in event.events:
            await save_buffer()            # the reader waits for this
        return 0

    async with coordfs.aio.connect("/mnt/doc.txt") as connection:
        await connection.watch("/mnt/doc.txt", on_event)
        await connection.wait()

    async with coordfs.aio.coordinate(write=["/mnt/doc.txt"]):
        ...
"""
from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Iterable, Optional, Union

from .client import Answer, Connection, Event, Hold, socket_for

Handler = Callable[[Event], Union[Answer, Awaitable[Answer]]]


class AsyncConnection:
    """A `Connection` for asyncio. Its calls run on the loop's default executor, so the loop never
    blocks on a reply (a hold may wait long). A watch's handler may be a coroutine function: it
    runs on the loop, and a request is answered with its result once it returns, so the access
    waits for it as for a plain handler. Events of one connection are handled in order."""

    def __init__(self, connection: Connection, loop: asyncio.AbstractEventLoop):
        self.connection = connection
        self._loop = loop

    @property
    def server(self) -> Dict[str, Any]:
        return self.connection.server

    async def _run(self, call: Callable[..., Any], *arguments: Any, **named: Any) -> Any:
        return await self._loop.run_in_executor(None, lambda: call(*arguments, **named))

    async def watch(self, path: str, handler: Handler, events: Optional[Iterable[str]] = None) -> int:
        """Presents `path` (see `Connection.watch`); `handler` may be a coroutine function."""
        loop = self._loop

        def bridge(event: Event) -> Answer:
            result = handler(event)
            if asyncio.iscoroutine(result):
                # On the connection's event thread: the answer waits for the coroutine.
                return asyncio.run_coroutine_threadsafe(result, loop).result()
            return result  # type: ignore[return-value]

        return await self._run(self.connection.watch, path, bridge, events)

    async def unwatch(self, wd: int) -> None:
        await self._run(self.connection.unwatch, wd)

    async def hold(self, read: Iterable[str] = (), write: Iterable[str] = (), wait: bool = True,
                   timeout: Optional[float] = None) -> Hold:
        """Holds the intents (see `Connection.hold`); cancelling the task does not cancel a wait
        already sent, so prefer `timeout`."""
        return await self._run(self.connection.hold, read=list(read), write=list(write), wait=wait, timeout=timeout)

    async def release(self, hold: Hold, changed: bool = True) -> None:
        await self._run(hold.release, changed)

    async def status(self) -> Dict[str, Any]:
        return await self._run(self.connection.status)

    async def vend(self, name: str, path: str, handler: Callable[[socket.socket, str], None]) -> int:
        return await self._run(self.connection.vend, name, path, handler)

    async def withdraw(self, service: int) -> None:
        await self._run(self.connection.withdraw, service)

    async def services(self, path: str) -> Dict[str, Dict[str, Any]]:
        return await self._run(self.connection.services, path)

    async def connect(self, name: str, path: str) -> socket.socket:
        return await self._run(self.connection.connect, name, path)

    async def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the server closes the connection (True) or `timeout` passes (False)."""
        return await self._run(self.connection.wait, timeout)

    async def close(self) -> None:
        await self._run(self.connection.close)

    async def __aenter__(self) -> "AsyncConnection":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class _Opening:
    """`connect`'s result: awaited, or entered with `async with`."""

    def __init__(self, path: str):
        self._path = path
        self._connection: Optional[AsyncConnection] = None

    async def _open(self) -> AsyncConnection:
        loop = asyncio.get_running_loop()
        connection = await loop.run_in_executor(None, lambda: Connection(socket_for(self._path)))
        return AsyncConnection(connection, loop)

    def __await__(self):
        return self._open().__await__()

    async def __aenter__(self) -> AsyncConnection:
        self._connection = await self._open()
        return self._connection

    async def __aexit__(self, *exc: Any) -> None:
        if self._connection is not None:
            await self._connection.close()


def connect(path: str) -> _Opening:
    """An `AsyncConnection` to the server of `path`: `await connect(path)`, or `async with`."""
    return _Opening(path)


@contextlib.asynccontextmanager
async def coordinate(read: Iterable[str] = (), write: Iterable[str] = (), wait: bool = True,
                     timeout: Optional[float] = None) -> AsyncIterator[Hold]:
    """Holds the intents for the `async with` block, as `coordfs.coordinate` does for `with`."""
    read, write = list(read), list(write)
    if not read and not write:
        raise ValueError("name at least one item to read or write")
    async with connect((read + write)[0]) as connection:
        held = await connection.hold(read=read, write=write, wait=wait, timeout=timeout)
        changed = True
        try:
            yield held
        except BaseException:
            changed = False
            raise
        finally:
            await connection.release(held, changed=changed)
