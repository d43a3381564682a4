"""The package against real mounts: presenters asked and answered, holds that make an
unmodified `cat` wait, refusals as exceptions, and a mount that goes away under a client.

    COORDFS=/path/to/coordfs python -m unittest discover -s clients/python/tests
"""
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import unittest

import asyncio

import coordfs
import coordfs.aio

HERE = os.path.dirname(os.path.abspath(__file__))
BINARY = os.environ.get("COORDFS") or os.path.join(HERE, "..", "..", "..", ".build", "debug", "coordfs")


class Mount:
    """A coordfs mount of a fresh backing directory, unmounted at the end whatever happens."""

    def __init__(self, options=()):
        self.base = tempfile.mkdtemp(prefix="coordfs-py-")
        self.backing = os.path.join(self.base, "backing")
        self.point = os.path.join(self.base, "mnt")
        os.mkdir(self.backing)
        os.mkdir(self.point)
        subprocess.run([BINARY, "mount", *options, self.backing, self.point], check=True, capture_output=True)

    def path(self, name):
        return os.path.join(self.point, name)

    def seed(self, name, text):
        """Writes a file in the backing directory directly, and returns once the mount has told
        presenters of it as a change from outside (its count of such changes has grown and
        stays): a presenter registered after hears nothing of it."""
        before = self.changes_told()
        with open(os.path.join(self.backing, name), "w") as f:
            f.write(text)
        if before is None:
            return
        last, steady, deadline = before, 0, time.monotonic() + 5
        while steady < 5 and time.monotonic() < deadline:
            time.sleep(0.02)
            now = self.changes_told()
            steady = steady + 1 if now is not None and now > before and now == last else 0
            last = now

    def changes_told(self):
        """How many changes from outside the mount has told; None when it does not watch."""
        try:
            stats = json.loads(os.getxattr(self.point, "user.coordfs.stats"))
        except (OSError, ValueError):
            return None
        return stats.get("changes_behind") if stats.get("watches_backing") == 1 else None

    def unmount(self):
        if os.path.ismount(self.point):
            subprocess.run([BINARY, "unmount", self.point], capture_output=True)
        if os.path.ismount(self.point):
            subprocess.run(["umount", "-l", self.point], capture_output=True)

    def close(self):
        self.unmount()
        shutil.rmtree(self.base, ignore_errors=True)


def eventually(condition, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


class MountedTestCase(unittest.TestCase):
    """A mount with doc.txt in it for each test."""

    def setUp(self):
        self.mount = Mount()
        self.addCleanup(self.mount.close)
        self.mount.seed("doc.txt", "saved\n")
        self.doc = self.mount.path("doc.txt")


class PresenterTests(MountedTestCase):

    def cat(self):
        return subprocess.run(["cat", self.doc], capture_output=True, text=True, timeout=30)

    def test_a_presenter_is_asked_to_save_before_cat_reads(self):
        heard = []

        def on_event(event):
            heard.append(event.events)
            if "SAVE" in event.events:
                with open(self.doc, "w") as f:     # its own work, through the mount: it passes
                    f.write("edited\n")
            return 0

        with coordfs.connect(self.doc) as connection:
            connection.watch(self.doc, on_event)
            result = self.cat()
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(result.stdout, "edited\n")
            self.assertTrue(eventually(lambda: any("SAVE" in e for e in heard)), heard)
            self.assertTrue(all("REQUEST" in e for e in heard if "SAVE" in e or "RELINQUISH_READER" in e), heard)

    def test_a_presenters_errno_fails_the_access_with_it(self):
        with coordfs.connect(self.doc) as connection:
            connection.watch(self.doc, lambda event: errno.EACCES if event.is_request else None)
            result = self.cat()
            self.assertNotEqual(result.returncode, 0)
            self.assertIn("Permission denied", result.stderr)

    def test_a_presenter_is_asked_before_an_eviction_and_may_refuse_it(self):
        """A sync client evicting the local content (a write with forEvicting) asks the item's
        presenters first; EBUSY from one keeps the content, and the evicting command never runs."""
        heard = []
        def on_event(event):
            heard.append(event.events)
            return errno.EBUSY if "ACCOMMODATE_EVICTION" in event.events else 0
        marker = self.mount.path("evicted")
        with coordfs.connect(self.doc) as connection:
            connection.watch(self.doc, on_event)
            result = subprocess.run([BINARY, "coordinate", "--write", self.doc, "--write-option", "forEvicting",
                                     "--", "touch", marker], capture_output=True, text=True, timeout=30)
        self.assertNotEqual(result.returncode, 0, result.stdout)
        self.assertIn("busy", result.stderr.lower())
        self.assertFalse(os.path.exists(marker))
        self.assertTrue(any("ACCOMMODATE_EVICTION" in e and "REQUEST" in e for e in heard), heard)

    def test_a_handler_may_use_its_connection(self):
        seen = []
        with coordfs.connect(self.doc) as connection:
            def on_event(event):
                if event.is_request:
                    seen.append(len(connection.status()["presenters"]))
                return 0
            connection.watch(self.doc, on_event)
            result = self.cat()
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertTrue(seen and seen[0] >= 1, seen)

    def test_a_watch_of_notifications_only_is_told_of_a_change(self):
        changed = threading.Event()
        with coordfs.connect(self.doc) as connection:
            connection.watch(self.doc, lambda event: changed.set() if "CHANGED" in event.events else None, events=["changed"])
            # Another process's write: a process's own accesses never message its own presenters.
            subprocess.run(["sh", "-c", 'echo more >> "$1"', "sh", self.doc], check=True)
            self.assertTrue(changed.wait(10))


class OriginTests(MountedTestCase):
    """Who made each access, and a presenter that needs longer saying so."""

    def test_a_request_names_the_program_that_made_the_access(self):
        heard = []
        with coordfs.connect(self.doc) as connection:
            connection.watch(self.doc, lambda event: heard.append(event))
            cat = subprocess.Popen(["cat", self.doc], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            cat.communicate(timeout=30)
            self.assertTrue(eventually(lambda: any(event.is_request for event in heard)), heard)
            request = next(event for event in heard if event.is_request)
            self.assertEqual(request.origin, coordfs.Origin(via="mount", pid=cat.pid, uid=os.getuid(), command="cat"))

    def test_a_change_behind_the_mount_is_told_as_from_outside(self):
        heard = []
        with coordfs.connect(self.doc) as connection:
            connection.watch(self.doc, lambda event: heard.append(event))
            backing = os.path.join(self.mount.backing, "doc.txt")

            def outside():
                # Written straight in the backing directory, by another process.
                subprocess.run(["sh", "-c", 'echo more >> "$1"', "sh", backing], check=True)
                return [event for event in heard if event.origin and event.origin.via == "outside"]
            # The watch is in place once a change is heard: written to until then.
            self.assertTrue(eventually(lambda: outside(), timeout=10), heard)
            told = outside()[0]
            self.assertIn("CHANGED", told.events)
            self.assertEqual(told.origin, coordfs.Origin(via="outside"))
            with open(self.doc) as f:
                self.assertTrue(f.read().startswith("saved\nmore\n"))

    def slow_save(self, still_working):
        """cat of a doc whose presenter takes 2 s to save (the mount waits 1 s for answers),
        saying it is still working every half second or not: what cat read, and how long it took."""
        mount = Mount(["--presenter-timeout", "1"])
        self.addCleanup(mount.close)
        mount.seed("doc.txt", "saved\n")
        doc = mount.path("doc.txt")

        def on_event(event):
            if "SAVE" in event.events:
                for _ in range(4):
                    time.sleep(0.5)
                    if still_working:
                        event.still_working()
                with open(doc, "w") as f:
                    f.write("edited\n")
            return 0

        with coordfs.connect(doc) as connection:
            connection.watch(doc, on_event, events=["SAVE"])
            start = time.monotonic()
            result = subprocess.run(["cat", doc], capture_output=True, text=True, timeout=30)
            elapsed = time.monotonic() - start
            self.assertEqual(result.returncode, 0, result.stderr)
            return result.stdout, elapsed

    def test_a_presenter_still_working_is_waited_for_past_the_presenter_timeout(self):
        read, elapsed = self.slow_save(still_working=True)
        self.assertEqual(read, "edited\n")
        self.assertGreaterEqual(elapsed, 1.9)

    def test_a_slow_presenter_that_says_nothing_is_passed_at_the_presenter_timeout(self):
        read, elapsed = self.slow_save(still_working=False)
        self.assertEqual(read, "saved\n")
        self.assertLess(elapsed, 1.9)


class NameBytesTests(MountedTestCase):
    """A name that is not UTF-8 reaches a presenter with its bytes, and a hold of it by its
    bytes holds that very file."""

    def test_a_latin1_name_keeps_its_bytes_both_ways(self):
        directory = self.mount.path("dir")
        os.mkdir(directory)
        latin1 = os.fsencode(directory) + b"/caf\xe9"
        heard = []
        with coordfs.connect(directory) as connection:
            connection.watch(directory, lambda event: heard.append(event) or 0, events=["SUBITEM_APPEARED"])
            # Made by another process: a process's own accesses are not told to its presenters.
            subprocess.run([sys.executable, "-c", "import os, sys; open(os.fsencode(sys.argv[1]), 'w').write('x')",
                            os.fsdecode(latin1)], check=True)
            self.assertTrue(eventually(lambda: heard), heard)
            self.assertEqual(heard[0].path_bytes, latin1)
            self.assertEqual(os.fsencode(heard[0].name), b"caf\xe9")
            with connection.hold(write=[latin1]) as hold:
                self.assertEqual([os.fsencode(p) for p in hold.paths], [latin1])
                status = connection.status()
                self.assertIn(os.fsdecode(latin1), [i["path"] for h in status["holders"] for i in h["intents"]])


class HoldTests(MountedTestCase):

    def test_a_held_write_makes_cat_wait_until_released(self):
        with coordfs.coordinate(write=[self.doc]):
            reader = subprocess.Popen(["cat", self.doc], stdout=subprocess.PIPE, text=True)
            time.sleep(0.5)
            self.assertIsNone(reader.poll(), "cat did not wait for the hold")
            with open(self.doc, "w") as f:           # the holder's own open passes
                f.write("new\n")
        out, _ = reader.communicate(timeout=10)
        self.assertEqual(out, "new\n")

    def test_an_unknown_event_name_refuses_that_watch_alone(self):
        with coordfs.connect(self.doc) as connection:
            with self.assertRaises(coordfs.CoordfsError) as refused:
                connection.watch(self.doc, lambda event: 0, events=["NOPE"])
            self.assertEqual(refused.exception.errno, errno.EINVAL)
            self.assertIn("NOPE", str(refused.exception))
            self.assertIn("presenters", connection.status())      # the connection goes on

    def test_a_conflict_is_an_exception_with_the_errno(self):
        with coordfs.connect(self.doc) as first, coordfs.connect(self.doc) as second:
            held = first.hold(write=[self.doc])
            with self.assertRaises(coordfs.CoordfsError) as refused:
                second.hold(read=[self.doc], wait=False)
            self.assertEqual(refused.exception.errno, errno.EAGAIN)
            with self.assertRaises(coordfs.CoordfsError) as timed_out:
                second.hold(read=[self.doc], timeout=0.3)
            self.assertEqual(timed_out.exception.errno, errno.EBUSY)
            held.release()
            second.hold(read=[self.doc], wait=False).release()

    def test_status_names_the_holder(self):
        with coordfs.connect(self.doc) as connection, connection.hold(read=[self.doc]):
            holders = connection.status()["holders"]
            self.assertTrue(any(intent.get("path") == os.path.realpath(self.doc)
                                for holder in holders for intent in holder.get("intents", [])), holders)

    def test_a_bad_request_is_refused_with_einval_and_the_connection_goes_on(self):
        with coordfs.connect(self.doc) as connection:
            with self.assertRaises(coordfs.CoordfsError) as refused:
                connection.hold(write=[self.doc], write_option="forNothing")
            self.assertEqual(refused.exception.errno, errno.EINVAL)
            self.assertIn("forNothing", refused.exception.strerror)
            connection.hold(write=[self.doc]).release()


class ServiceTests(MountedTestCase):
    """Named services: vended for a directory, found and connected to from inside it, a socket
    passed each way."""

    def test_a_service_is_found_and_connected_to_and_ends_when_withdrawn(self):
        project = self.mount.path("project")
        os.mkdir(project)
        inner = os.path.join(project, "a.txt")
        with open(inner, "w") as f:
            f.write("a\n")

        def echo(connection, path):
            with connection:
                data = connection.recv(1024)
                connection.sendall(b"echo " + os.path.basename(path).encode() + b": " + data)

        with coordfs.connect(project) as provider, coordfs.connect(inner) as client:
            number = provider.vend("org.example.echo", project, echo)
            found = client.services(inner)
            self.assertEqual(found["org.example.echo"]["pid"], os.getpid(), found)
            with client.connect("org.example.echo", inner) as conversation:
                conversation.sendall(b"hi")
                self.assertEqual(conversation.recv(1024), b"echo a.txt: hi")
            provider.withdraw(number)
            with self.assertRaises(coordfs.CoordfsError) as refused:
                client.connect("org.example.echo", inner)
            self.assertEqual(refused.exception.errno, errno.ENOENT)


class HandlerFailureTests(MountedTestCase):

    def test_a_handler_that_raises_refuses_a_request_and_says_why_and_so_for_a_notification(self):
        consenting = threading.Event()

        def on_event(event):
            if event.is_request and consenting.is_set():
                return 0
            raise RuntimeError(f"broken handler for {','.join(event.events)}")

        def wait_for(records, word):
            deadline = time.monotonic() + 10
            while not any(word in record.getMessage() for record in records) and time.monotonic() < deadline:
                time.sleep(0.02)

        with coordfs.connect(self.doc) as connection, self.assertLogs("coordfs", level="ERROR") as logged:
            connection.watch(self.doc, on_event)
            cat = subprocess.run(["cat", self.doc], capture_output=True, text=True, timeout=30)
            wait_for(logged.records, "RELINQUISH_READER")
            consenting.set()
            # Another process's append: asked, consented; then told CHANGED. (This process's
            # own write would be its presenter's own work, told to nobody.)
            subprocess.run(["sh", "-c", 'echo more >> "$1"', "sh", self.doc], check=True, timeout=30)
            wait_for(logged.records, "CHANGED")
        self.assertNotEqual(cat.returncode, 0)
        self.assertIn("Input/output error", cat.stderr)
        messages = [record.getMessage() for record in logged.records]
        self.assertIn("RELINQUISH_READER", messages[0])
        self.assertIn("refused with EIO", messages[0])
        self.assertTrue(any("CHANGED" in m and "the notification is dropped" in m for m in messages[1:]), messages)
        self.assertTrue(all(record.exc_info and "broken handler" in str(record.exc_info[1]) for record in logged.records), messages)


class VersionTests(MountedTestCase):

    def test_a_rewritten_file_keeps_its_earlier_content_and_it_can_be_read_and_pinned(self):
        with open(self.doc, "w") as f:
            f.write("rewritten\n")
        with coordfs.connect(self.doc) as connection:
            versions = connection.versions(self.doc)
            self.assertEqual([v["cause"] for v in versions], ["truncated"])
            with connection.open_version(self.doc, versions[0]["id"]) as content:
                self.assertEqual(content.read(), b"saved\n")
            connection.version(self.doc, versions[0]["id"], "pin")
            self.assertTrue(connection.versions(self.doc)[0]["pinned"])
            with self.assertRaises(coordfs.CoordfsError) as missing:
                connection.open_version(self.doc, "1")
            self.assertEqual(missing.exception.name, "ENOENT")

    def test_a_version_added_from_a_file_is_kept_and_its_presenters_hear_of_it(self):
        draft = os.path.join(self.mount.base, "draft")
        with open(draft, "w") as f:
            f.write("a draft\n")
        heard = []
        with coordfs.connect(self.doc) as watcher, coordfs.connect(self.doc) as connection:
            watcher.watch(self.doc, heard.append, events=["VERSION_ADDED", "VERSION_REMOVED"])
            with open(draft, "rb") as content:
                added = connection.add_version(self.doc, content)
            self.assertEqual(added["cause"], "added")
            with connection.open_version(self.doc, added["id"]) as kept:
                self.assertEqual(kept.read(), b"a draft\n")
            connection.version(self.doc, added["id"], "remove")
            deadline = time.monotonic() + 10
            while len(heard) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual([(e.events, e.cookie) for e in heard],
                             [(["VERSION_ADDED"], int(added["id"])), (["VERSION_REMOVED"], int(added["id"]))])
            with self.assertRaises(coordfs.CoordfsError) as unsent:
                connection.request({"op": "add_version", "path": self.doc})
            self.assertEqual(unsent.exception.name, "EINVAL")


class AsyncTests(MountedTestCase):
    """The asyncio forms: a coroutine handler answers, and `async with` holds."""

    def test_a_coroutine_presenter_saves_before_cat_reads(self):
        doc = self.doc

        async def main():
            async def on_event(event):
                if "SAVE" in event.events:
                    await asyncio.sleep(0.2)           # the reader waits for the coroutine
                    with open(doc, "w") as f:
                        f.write("edited\n")
                return 0

            async with coordfs.aio.connect(doc) as connection:
                await connection.watch(doc, on_event)
                cat = await asyncio.create_subprocess_exec("cat", doc, stdout=subprocess.PIPE)
                out, _ = await cat.communicate()
                status = await connection.status()
                return out, status

        out, status = asyncio.run(main())
        self.assertEqual(out, b"edited\n")
        self.assertEqual(len(status["presenters"]), 1, status)

    def test_async_with_coordinate_makes_cat_wait(self):
        doc = self.doc

        async def main():
            async with coordfs.aio.coordinate(write=[doc]):
                cat = await asyncio.create_subprocess_exec("cat", doc, stdout=subprocess.PIPE)
                await asyncio.sleep(0.5)
                self.assertIsNone(cat.returncode, "cat did not wait for the hold")
                with open(doc, "w") as f:             # the holder's own open passes
                    f.write("held\n")
            out, _ = await cat.communicate()
            return out

        self.assertEqual(asyncio.run(main()), b"held\n")


class EveryEventTests(MountedTestCase):
    """Every event and request type a watch can get, each from what a program does through the
    mount, and a real daemon outside any mount."""

    def collect(self, path, action, until, events=None):
        heard = []
        with coordfs.connect(path) as connection:
            connection.watch(path, lambda event: heard.append(event) or 0, events=events)
            action()
            self.assertTrue(eventually(lambda: until(heard)), [e.events for e in heard])
        return heard

    def test_a_directory_watch_hears_what_happens_inside_it(self):
        folder = self.mount.path("folder")
        os.mkdir(folder)
        made, renamed = os.path.join(folder, "made.txt"), os.path.join(folder, "renamed.txt")

        def act():
            # Another process: a process's own accesses never reach its own presenters.
            subprocess.run(["sh", "-c", 'echo one > "$1"; echo two >> "$1"; mv "$1" "$2"; rm "$2"', "sh", made, renamed],
                           check=True)

        def done(heard):
            return any("SUBITEM_DELETED" in e.events for e in heard)

        heard = self.collect(folder, act, done)
        names = [name for e in heard for name in e.events if name != "REQUEST"]
        for expected in ["SUBITEM_APPEARED", "SUBITEM_CHANGED", "MOVED_FROM", "MOVED_TO",
                         "ACCOMMODATE_SUBITEM_DELETION", "SUBITEM_DELETED"]:
            self.assertIn(expected, names)
        moved = [e for e in heard if "MOVED_FROM" in e.events or "MOVED_TO" in e.events]
        self.assertEqual(len({e.cookie for e in moved}), 1, moved)
        self.assertEqual(next(e for e in moved if "MOVED_TO" in e.events).name, "renamed.txt")
        self.assertTrue(all(e.origin and e.origin.via == "mount" and e.origin.command == "mv" for e in moved), moved)

    def test_a_file_watch_is_asked_before_a_write_and_a_deletion(self):
        heard = []
        with coordfs.connect(self.doc) as connection:
            connection.watch(self.doc, lambda event: heard.append(event) or 0)
            subprocess.run(["sh", "-c", 'echo more > "$1"', "sh", self.doc], check=True)
            self.assertTrue(eventually(lambda: any("CHANGED" in e.events for e in heard)), heard)
            subprocess.run(["rm", self.doc], check=True)
            self.assertTrue(eventually(lambda: any("PRESENTER_REMOVED" in e.events for e in heard)), heard)
        names = [name for e in heard for name in e.events if name != "REQUEST"]
        for expected in ["RELINQUISH_WRITER", "REACQUIRE", "CHANGED", "ACCOMMODATE_DELETION", "PRESENTER_REMOVED"]:
            self.assertIn(expected, names)
        asked = [e for e in heard if e.is_request]
        self.assertTrue(asked and all(e.origin.command in ("sh", "rm") for e in asked), asked)

    def test_a_reader_going_past_an_idle_writer_is_told_as_broken(self):
        """A program holding the file open for writing and idle past the settle time (1 s) no
        longer holds readers up: cat goes ahead, and the item's watchers hear BROKEN."""
        heard = []
        writer = subprocess.Popen([sys.executable, "-c", "import sys, time\nf = open(sys.argv[1], 'r+')\nprint('open', flush=True)\ntime.sleep(60)",
                                   self.doc], stdout=subprocess.PIPE, text=True)
        self.addCleanup(writer.stdout.close)
        self.addCleanup(writer.wait)
        self.addCleanup(writer.kill)
        self.assertEqual(writer.stdout.readline().strip(), "open")
        with coordfs.connect(self.doc) as connection:
            connection.watch(self.doc, lambda event: heard.append(event) or 0, events=["BROKEN"])
            result = subprocess.run(["cat", self.doc], capture_output=True, text=True, timeout=30)
            self.assertEqual((result.returncode, result.stdout), (0, "saved\n"), result.stderr)
            self.assertTrue(eventually(lambda: any("BROKEN" in event.events for event in heard)), heard)


class DaemonTests(unittest.TestCase):
    """Outside any mount, through a real daemon: holds and presenters meet there."""

    def setUp(self):
        self.base = tempfile.mkdtemp(prefix="coordfs-py-daemon-")
        os.chmod(self.base, 0o700)
        self.socket = os.path.join(self.base, "daemon.sock")
        self.daemon = subprocess.Popen([BINARY, "daemon", "--socket", self.socket],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(self.stop)
        self.assertTrue(eventually(lambda: os.path.exists(self.socket)), "the daemon did not start")
        self.item = os.path.join(self.base, "item.txt")
        with open(self.item, "w") as f:
            f.write("text\n")

    def stop(self):
        self.daemon.terminate()
        self.daemon.wait(10)
        shutil.rmtree(self.base, ignore_errors=True)

    def test_a_hold_and_a_presenter_meet_at_the_daemon(self):
        heard = []
        environment = dict(os.environ, COORDFS_SOCKET=self.socket)
        environment.pop("COORDFS_COORDINATION", None)
        with coordfs.Connection(self.socket) as presenter:
            presenter.watch(self.item, lambda event: heard.append(event) or 0)
            # Another program's hold, through the same daemon (as coordfs finds it by itself).
            held = subprocess.run([BINARY, "coordinate", "--write", self.item, "--", "true"], env=environment,
                                  capture_output=True, text=True, timeout=30)
            self.assertEqual(held.returncode, 0, held.stderr)
            self.assertTrue(eventually(lambda: any("RELINQUISH_WRITER" in e.events for e in heard)), heard)
            asked = next(e for e in heard if "RELINQUISH_WRITER" in e.events)
            self.assertEqual(asked.origin.via, "coordinator")
            # The daemon alone arbitrates: a hold there makes the other program's hold wait.
            with presenter.hold(write=[self.item]):
                refused = subprocess.run([BINARY, "coordinate", "-n", "--write", self.item, "--", "true"], env=environment,
                                         capture_output=True, text=True, timeout=30)
                self.assertNotEqual(refused.returncode, 0)
                self.assertIn("held", refused.stderr)


    def test_a_move_reported_in_a_hold_of_both_places_moves_the_presenter(self):
        moved = os.path.join(self.base, "moved.txt")
        # Another program moves the item: a hold of the item alone may not report where it
        # went; a hold of both places does, after its rename.
        mover = textwrap.dedent("""
            import os, sys, coordfs
            socket, item, moved = sys.argv[1:]
            with coordfs.Connection(socket) as connection:
                with connection.hold(write=[item]) as hold:
                    try:
                        hold.moved(item, moved)
                        print("accepted")
                    except coordfs.CoordfsError as refusal:
                        print(refusal.name)
                with connection.hold(write=[item, moved]) as hold:
                    os.rename(item, moved)
                    hold.moved(item, moved)
                    print("moved")
            """)
        heard = []
        with coordfs.Connection(self.socket) as presenter:
            presenter.watch(self.item, lambda event: heard.append(event) or 0, events=["MOVED_FROM", "MOVED_TO"])
            environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
            result = subprocess.run([sys.executable, "-c", mover, self.socket, self.item, moved], env=environment,
                                    capture_output=True, text=True, timeout=30)
            self.assertEqual(result.stdout.split(), ["EPERM", "moved"], result.stderr)
            self.assertTrue(eventually(lambda: any("MOVED_TO" in e.events for e in heard)), heard)
            self.assertEqual([e.path for e in heard if "MOVED_TO" in e.events], [moved])


class MountGoneTests(unittest.TestCase):
    def test_a_mount_that_goes_away_ends_the_connection_and_calls_raise(self):
        mount = Mount()
        self.addCleanup(mount.close)
        mount.seed("doc.txt", "x\n")
        connection = coordfs.connect(mount.path("doc.txt"))
        self.addCleanup(connection.close)
        connection.watch(mount.path("doc.txt"), lambda event: None)
        mount.unmount()
        self.assertTrue(connection.wait(10), "the connection did not end with the mount")
        with self.assertRaises((ConnectionError, coordfs.CoordfsError)):
            connection.status()

    def test_outside_any_mount_without_a_daemon_it_says_so(self):
        if os.path.exists("/run/coordfs/daemon.sock"):
            self.skipTest("a coordfs daemon runs on this machine")
        with self.assertRaises(coordfs.CoordfsError) as refused:
            coordfs.socket_for(tempfile.gettempdir())
        self.assertIn("not inside a coordfs mount", str(refused.exception))


if __name__ == "__main__":
    unittest.main()
