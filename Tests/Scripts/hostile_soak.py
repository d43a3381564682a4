#!/usr/bin/env python3
"""A mount shared with -o allow_other, hammered by hostile users while root works on it.

  hostile_soak.py --coordfs BINARY [--counter COORDINATED_COUNTER] [--seconds S] [options]
  hostile_soak.py agent CONFIG      (run by the soak itself, as each hostile user)

Mounts a fresh backing directory with -o allow_other and short times (--break-time,
--lock-time, --presenter-timeout, --settle-time, --wait-timeout below), as root, and lays it out:

  root/probeN/     root's files (0644: anyone may read, hold and present them), worked on by
                   root's probe threads, one directory each
  root/files/      root's files that `coordfs coordinate` holds, root's service vended above
  root/fio/        fio's files (Tests/fio/contention.fio, crc32c verify), root's
  root/counter/    CoordinatedCounter's JSON counter (a Swift FileCoordinator and presenter)
  root/private/    0700: secret (what a spoofed move names)
  shared/          1777, as /tmp: everyone's files side by side
  shared/common/   root's directory of files anyone may write (0666)
  users/UID/       each hostile user's own directory

Root runs, for the whole time: fio rounds in root/fio; CoordinatedCounter (--counter-updates
updates and a move a run; every run must succeed and the counter end exact); `coordfs coordinate -x` of a file in
root/files, timed; probe threads making every kind of call on root's files (opens of each
kind, atomic saves, renames, unlinks, creates, mkdir and rmdir, chmod, truncate, holds of one
and two items through the control socket), each timed; a thread a directory timing a listing
and a lookup of a new name there, every 50 ms; and the daemon's resident memory, every 250 ms.

After a warm-up of root's work alone, each hostile user (nobody and throwaway uids, through
setpriv, at nice 5: what their holds do to root is the question, not the CPU they take) runs
an agent of several threads, each doing at random, until the time is up:

  hold           read holds of anything readable (root's files among them), kept a while and
                 taken again at once when broken; holds of names not made yet
  hold-write     write holds of what it may write (shared/common, its own files)
  hold-many      one hold of several items
  watch          presenters that never answer, answer late, keep sending `working`, or veto
  moved          `moved` from root's items into its own file (must be refused), and its own
                 moves done right
  vend           services on its own files, and root's service's name on root's directories
                 (root must still find its own)
  status         the whole status, page after page (must always be answered)
  open           root's files open for reading, kept a while (as `tail -f`)
  write-shared   shared/common written in place, appended to, rewritten and truncated
  rename         its own names renamed, saved over atomically, and root's tried
  unlink         its own names made and removed, and root's tried
  churn          connections that end mid-way: no hello, a hold never released, a bad line, a
                 half line, a reader that never reads
  memory         holds of 64 items each until the socket refuses them (ENOMEM), then watches
                 up to --watches, kept a while, then let go; again and again
  presenter-work a presenter that, asked to relinquish root's file, opens it itself (its own
                 work goes first) and keeps it open
  self-freeze    its own file in shared/ held, and removed by another of its processes, so the
                 removal waits for its own user's hold with shared/ locked by the kernel

and asserts:

  - root never waits past the break time: each of root's calls, holds and coordinated
    accesses ends within the break time for holders and open files, then the presenters'
    answers (the presenter timeout, or the break time for a presenter that keeps saying it is
    still working, docs/protocol.md), and --margin; none fails. (Calls past the break time and
    one presenter timeout are counted apart.)
  - fio verifies every block: no job errors, every round ends
  - CoordinatedCounter: every run succeeds and the counter ends at the updates of all runs (an
    access a hostile reader went past after the break time is told, counted and allowed: its
    update stands)
  - the daemon's resident memory stays under what root's work alone took, plus
    --rss-slack-mib, plus --rss-per-user-mib for each hostile user
  - no directory freezes: each listing and lookup ends within --frozen (1 s); a freeze is shown
    with what the kernel showed of the tasks then, root's calls under way in the directory, and
    the daemon's log lines about its items (which rule let each access go ahead)
  - no spoofed move is accepted, root's lookups find root's own service, every status is
    answered, and the daemon serves on and holds nothing once everyone has gone

Prints a summary and a last line of JSON ({"ok", "failures", "figures"}); exits 1 if anything
failed. Run as root. `make soak-hostile` runs it for HOSTILE_SECONDS. Two attacks the mount
does not withstand yet can be left out (--without presenter-work,self-freeze).
"""
import argparse
import calendar
import errno
import faulthandler
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

SCRIPT = os.path.abspath(__file__)
HERE = os.path.dirname(SCRIPT)
FIO_JOB = os.path.join(HERE, "..", "fio", "contention.fio")
ATTACKS = ["hold", "hold-write", "hold-many", "watch", "moved", "vend", "status", "open", "write-shared", "rename",
           "unlink", "churn", "memory", "presenter-work", "self-freeze"]
# Root's service, which no other user's may shadow.
SERVICE = "org.coordfs.soak.root"
PROBE_FILES = 8
COMMON_FILES = 8


# The control socket, with the standard library only (docs/protocol.md)

SOCKETS = {}


def socket_path(mount):
    if mount not in SOCKETS:
        SOCKETS[mount] = os.getxattr(mount, "user.coordfs.socket").decode()
    return SOCKETS[mount]


def task_state(pid, tid):
    """A task's command, state and the top of its kernel stack, on one line."""
    base = "/proc/%d/task/%d/" % (pid, tid)
    try:
        with open(base + "stat") as f:
            stat = f.read()
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        state = stat[stat.rindex(")") + 2]
        with open(base + "stack") as f:
            frames = [line.split()[1].split("+")[0] for line in f if len(line.split()) > 1]
    except (OSError, ValueError, IndexError):
        return "%d/%d gone" % (pid, tid)
    return "%d/%d %s %s %s" % (pid, tid, comm, state, " < ".join(frames[:5]))


def blocked_tasks():
    """Every task of the system in uninterruptible sleep (state D)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir("/proc/%s/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%s/task/%s/stat" % (pid, tid)) as f:
                    stat = f.read()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2:stat.rindex(")") + 3] == "D":
                found.append((int(pid), int(tid)))
    return found


class Channel:
    """One connection to the mount's control socket: requests wait for their replies (up to a
    timeout); events go to `on_event` on the thread that reads them."""

    def __init__(self, mount, on_event=None, hello=True, timeout=10.0):
        self.on_event = on_event or (lambda channel, message: None)
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.socket.settimeout(timeout)
        self.socket.connect(socket_path(mount))
        self.socket.settimeout(None)
        self.sending = threading.Lock()
        self.arrived = threading.Condition()
        self.replies = {}
        self.number = 0
        self.ended = False
        threading.Thread(target=self.read, daemon=True).start()
        if hello:
            reply = self.request({"op": "hello", "version": 1}, timeout)
            if "error" in reply:
                self.close()
                raise ConnectionError("hello refused: %s" % reply["error"])

    def send(self, message):
        with self.sending:
            self.socket.sendall(json.dumps(message).encode() + b"\n")

    def request(self, message, timeout=10.0):
        """The reply (with "ok" or "error"); TimeoutError when none came in time, ConnectionError
        when the connection ended first."""
        with self.arrived:
            self.number += 1
            number = self.number
        self.send(dict(message, id=number))
        with self.arrived:
            if not self.arrived.wait_for(lambda: number in self.replies or self.ended, timeout):
                raise TimeoutError("no reply to %s in %.0f s" % (message.get("op"), timeout))
            if number not in self.replies:
                raise ConnectionError("the connection ended before the reply to %s" % message.get("op"))
            return self.replies.pop(number)

    def read(self):
        try:
            for line in self.socket.makefile("rb"):
                message = json.loads(line)
                if "wd" in message and "ok" not in message and "error" not in message:
                    try:
                        self.on_event(self, message)
                    except Exception:
                        pass
                    continue
                with self.arrived:
                    self.replies[message.get("id")] = message
                    self.arrived.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self.arrived:
                self.ended = True
                self.arrived.notify_all()

    def close(self):
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.socket.close()


def hold_message(paths, access, wait=True, timeout=5.0):
    return {"op": "hold", "intents": [{"path": path, "access": access} for path in paths], "wait": wait, "timeout": timeout}


def errno_name(number):
    return errno.errorcode.get(number, str(number))


# A hostile user: `hostile_soak.py agent CONFIG`

class Agent:
    """One hostile user's threads, each doing the enabled attacks at random until the deadline;
    then one JSON line of what came of them."""

    def __init__(self, config):
        self.config = config
        self.mount = config["mount"]
        self.uid = os.getuid()
        self.deadline = time.monotonic() + config["seconds"]
        self.attacks = [attack for attack in config["attacks"] if attack != "memory"]
        self.lock = threading.Lock()
        self.counts = {}
        self.findings = []
        self.bugs = []
        self.own = os.path.join(self.mount, "users", str(self.uid))
        self.shared = os.path.join(self.mount, "shared")
        self.common = os.path.join(self.shared, "common")
        self.targets = ([], [])
        self.targets_at = 0.0
        self.memory_files = []
        self.figures = {"most holds": 0, "most watches": 0}

    def note(self, action, outcome):
        with self.lock:
            kinds = self.counts.setdefault(action, {})
            kinds[outcome] = kinds.get(outcome, 0) + 1

    def find(self, finding):
        with self.lock:
            if len(self.findings) < 50:
                self.findings.append(finding)

    def left(self):
        return self.deadline - time.monotonic()

    def path(self, *parts):
        return os.path.join(self.mount, *parts)

    def look(self):
        """What it could aim at, files and directories of the layout, looked up again every two
        seconds."""
        with self.lock:
            if time.monotonic() - self.targets_at < 2 and self.targets[0]:
                return self.targets
        files, directories = [], [self.path("root"), self.path("root", "files"), self.path("root", "fio"),
                                  self.path("root", "counter"), self.shared, self.common]
        directories += [self.path("root", name) for name in self.listdir(self.path("root")) if name.startswith("probe")]
        directories += [self.path("users", name) for name in self.listdir(self.path("users"))]
        for directory in list(directories):
            try:
                entries = list(os.scandir(directory))[:64]
            except OSError:
                continue
            for entry in entries:
                try:
                    (directories if entry.is_dir(follow_symlinks=False) else files).append(entry.path)
                except OSError:
                    pass
        with self.lock:
            self.targets, self.targets_at = (files, directories), time.monotonic()
        return files, directories

    def candidates(self):
        files, directories = self.look()
        return files + directories

    @staticmethod
    def listdir(directory):
        try:
            return os.listdir(directory)
        except OSError:
            return []

    def root_files(self, rng):
        """root's files: anyone may read them, and root works on them all the time."""
        mine = self.path("root") + os.sep
        return [path for path in self.look()[0] if path.startswith(mine)] or [self.path("root", "files", "f0")]

    # The threads

    def run(self):
        try:
            self.prepare()
        except Exception:
            self.bugs.append(traceback.format_exc())
        threads = [threading.Thread(target=self.loop, args=(number,), daemon=True) for number in range(self.config["threads"])]
        if "memory" in self.config["attacks"]:
            threads.append(threading.Thread(target=self.memory_loop, daemon=True))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.0, self.left()) + 40)
        with self.lock:
            report = json.dumps({"uid": self.uid, "counts": self.counts, "findings": self.findings, "bugs": self.bugs,
                                 "figures": self.figures, "actions": sum(sum(kinds.values()) for kinds in self.counts.values()),
                                 "stuck threads": sum(thread.is_alive() for thread in threads)})
        sys.stdout.write(report + "\n")
        sys.stdout.flush()
        os._exit(0)

    def prepare(self):
        """Its own files: a few to work on, and 64 with long names for the memory attack."""
        os.makedirs(os.path.join(self.own, "mem"), exist_ok=True)
        for number in range(64):
            name = os.path.join(self.own, "mem", "a-rather-long-name-for-counting-memory-%02d" % number)
            if not os.path.exists(name):
                with open(name, "w") as file:
                    file.write("mine\n")
            self.memory_files.append(name)
        for number in range(8):
            with open(os.path.join(self.own, "own%d" % number), "w") as file:
                file.write("own %d\n" % number)

    def loop(self, number):
        rng = random.Random(self.uid * 1000 + number)
        state = ThreadState(self, number)
        while self.left() > 0:
            time.sleep(rng.uniform(0.0, 0.05))
            action = rng.choice(self.attacks)
            try:
                getattr(self, "act_" + action.replace("-", "_"))(rng, state)
            except OSError as error:
                # ConnectionError and TimeoutError among them: the server ended or kept quiet.
                self.note(action, errno_name(error.errno) if error.errno else type(error).__name__)
            except Exception:
                self.note(action, "bug")
                with self.lock:
                    if len(self.bugs) < 10:
                        self.bugs.append(traceback.format_exc())
        state.close()

    # The attacks

    def act_hold(self, rng, state):
        """A read hold of something readable, kept up to 4 s, taken again at once when broken."""
        candidates = self.candidates()
        if rng.random() < 0.15:
            # A name root makes and removes in shared/common, before it is made.
            target = os.path.join(self.common, "root-%d" % rng.randrange(0, 4000))
        else:
            target = rng.choice(candidates)
        self.keep_hold(rng, state, "hold", [target], "read")

    def act_hold_write(self, rng, state):
        writable = [os.path.join(self.common, "c%d" % rng.randrange(COMMON_FILES)), os.path.join(self.own, "own%d" % rng.randrange(8))]
        self.keep_hold(rng, state, "hold-write", [rng.choice(writable)], "write")

    def act_hold_many(self, rng, state):
        candidates = self.candidates()
        targets = rng.sample(candidates, min(len(candidates), rng.randint(2, 8)))
        self.keep_hold(rng, state, "hold-many", targets, "read")

    def keep_hold(self, rng, state, action, targets, access):
        channel = state.channel()
        for attempt in range(2):
            reply = channel.request(hold_message(targets, access, timeout=5), timeout=15)
            if "error" in reply:
                return self.note(action, reply["error"])
            hold = reply["hold"]
            broken = state.expect_broken(hold)
            was_broken = broken.wait(min(max(0.0, self.left()), rng.uniform(0.05, 4.0)))
            state.forget_broken(hold)
            channel.request({"op": "release", "hold": hold, "changed": False}, timeout=10)
            self.note(action, "broken" if was_broken else "held")
            if not was_broken or self.left() <= 0:
                return

    def act_watch(self, rng, state):
        """A presenter of anything readable that never answers, answers late, keeps saying it is
        still working, or vetoes; kept up to 8 s."""
        policy = rng.choice(["silent", "silent", "late", "working", "veto"])
        self.present(rng, state, "watch", rng.choice(self.candidates()), policy)

    def act_presenter_work(self, rng, state):
        self.present(rng, state, "presenter-work", rng.choice(self.root_files(rng)), "work")

    def present(self, rng, state, action, target, policy):
        channel = state.channel()
        reply = channel.request({"op": "watch", "path": target}, timeout=10)
        if "error" in reply:
            return self.note(action, reply["error"])
        wd = reply["wd"]
        state.policies[wd] = policy
        time.sleep(min(max(0.0, self.left()), rng.uniform(0.5, 8.0)))
        state.policies.pop(wd, None)
        channel.request({"op": "unwatch", "wd": wd}, timeout=10)
        self.note(action, policy)

    def act_moved(self, rng, state):
        """`moved` naming root's items as where its own file came from, or went: each must be
        refused. Then a move of its own inside a hold of both places."""
        channel = state.channel()
        mine = os.path.join(self.own, "own%d" % rng.randrange(8))
        reply = channel.request(hold_message([mine], "write", timeout=5), timeout=15)
        if "error" in reply:
            return self.note("moved", reply["error"])
        hold = reply["hold"]
        spoofs = [(self.path("root", "private", "secret"), mine), (rng.choice(self.root_files(rng)), mine),
                  (self.path("root", "counter", "count.json"), mine), (mine, rng.choice(self.root_files(rng)))]
        for source, destination in spoofs:
            answer = channel.request({"op": "moved", "hold": hold, "from": source, "to": destination}, timeout=10)
            if "error" not in answer:
                self.find("uid %d: a spoofed move from %s to %s was accepted" % (self.uid, source, destination))
            self.note("moved", "spoof " + answer.get("error", "ACCEPTED"))
        channel.request({"op": "release", "hold": hold, "changed": False}, timeout=10)
        away = os.path.join(self.own, "away-%d" % state.number)
        reply = channel.request(hold_message([mine, away], "write", timeout=5), timeout=15)
        if "error" in reply:
            return self.note("moved", "own " + reply["error"])
        hold = reply["hold"]
        try:
            os.rename(mine, away)
            answer = channel.request({"op": "moved", "hold": hold, "from": mine, "to": away}, timeout=10)
            self.note("moved", "own " + answer.get("error", "ok"))
            os.rename(away, mine)
        finally:
            channel.request({"op": "release", "hold": hold, "changed": True}, timeout=10)

    def act_vend(self, rng, state):
        """Root's service's name vended nearer root's files (root must still find its own), and
        services of its own; lookups and connections."""
        channel = state.channel()
        places = [self.path("root", "files"), self.path("root", "probe0"), os.path.join(self.own, "own0")]
        reply = channel.request({"op": "vend", "name": SERVICE, "path": rng.choice(places)}, timeout=10)
        self.note("vend", "shadow " + reply.get("error", "vended"))
        mine = channel.request({"op": "vend", "name": "org.coordfs.soak.%d" % self.uid, "path": os.path.join(self.own, "own1")},
                               timeout=10)
        self.note("vend", "own " + mine.get("error", "vended"))
        looked = channel.request({"op": "services", "path": rng.choice(self.root_files(rng))}, timeout=10)
        self.note("vend", "services " + looked.get("error", "ok"))
        connected = channel.request({"op": "connect", "name": SERVICE, "path": self.path("root", "files", "f0")}, timeout=10)
        self.note("vend", "connect " + connected.get("error", "ok"))
        time.sleep(min(max(0.0, self.left()), rng.uniform(0.2, 3.0)))
        for answer in (reply, mine):
            if "service" in answer:
                channel.request({"op": "withdraw", "service": answer["service"]}, timeout=10)

    def act_status(self, rng, state):
        """The whole status, a page at a time and as large pages as the server gives (each of
        a list that goes on, up to 20 pages an action, while its time lasts)."""
        started = time.monotonic()
        pages = 0
        try:
            reply = state.channel().request({"op": "status"}, timeout=20)
            cursors = dict(reply.get("next") or {})
            while cursors and pages < 20 and self.left() > 0 and "error" not in reply:
                name, cursor = cursors.popitem()
                page = state.channel().request({"op": "status", "list": name, "after": cursor, "limit": 10000},
                                               timeout=20)
                pages += 1
                if "error" in page:
                    reply = page
                elif (page.get("next") or {}).get(name) is not None:
                    cursors[name] = page["next"][name]
        except TimeoutError:
            self.find("uid %d: status unanswered after 20 s" % self.uid)
            state.drop()
            return self.note("status", "unanswered")
        self.note("status", reply.get("error", "ok") + (" paged" if pages else "")
                  + (" slow" if time.monotonic() - started > 5 else ""))

    def act_open(self, rng, state):
        """One of root's files open for reading, read now and then, kept up to 4 s."""
        target = rng.choice(self.root_files(rng))
        flags = os.O_RDONLY | (os.O_NONBLOCK if rng.random() < 0.2 else 0)
        fd = os.open(target, flags)
        try:
            end = time.monotonic() + min(max(0.0, self.left()), rng.uniform(0.1, 4.0))
            while time.monotonic() < end:
                os.pread(fd, 4096, 0)
                time.sleep(0.2)
        finally:
            os.close(fd)
        self.note("open", "kept")

    def act_write_shared(self, rng, state):
        target = os.path.join(self.common, "c%d" % rng.randrange(COMMON_FILES))
        if rng.random() < 0.15:
            os.truncate(target, 0)
            return self.note("write-shared", "truncated")
        kind = rng.choice(["in place", "append", "rewrite"])
        flags = {"in place": os.O_WRONLY, "append": os.O_WRONLY | os.O_APPEND, "rewrite": os.O_WRONLY | os.O_TRUNC}[kind]
        fd = os.open(target, flags)
        try:
            for _ in range(rng.randint(1, 5)):
                os.write(fd, b"uid %d was here\n" % self.uid)
                time.sleep(rng.uniform(0.0, 0.3))
        finally:
            os.close(fd)
        self.note("write-shared", kind)

    def act_rename(self, rng, state):
        here = rng.choice([self.own, self.shared])
        name = os.path.join(here, "%d-r%d" % (self.uid, state.number))
        with open(name + ".tmp", "w") as file:
            file.write("saved\n")
        os.rename(name + ".tmp", name)                         # an atomic save over its own
        os.rename(name, name + ".moved")
        os.rename(name + ".moved", name)
        self.note("rename", "own")
        victim = rng.choice(self.root_files(rng) + [os.path.join(self.shared, "root-a")])
        try:
            os.rename(victim, os.path.join(self.shared, "%d-stolen" % self.uid))
            self.note("rename", "root's RENAMED")
            self.find("uid %d renamed root's %s" % (self.uid, victim))
        except OSError as error:
            self.note("rename", "root's " + errno_name(error.errno))

    def act_unlink(self, rng, state):
        here = rng.choice([self.own, self.shared])
        name = os.path.join(here, "%d-u%d-%d" % (self.uid, state.number, rng.randrange(4)))
        with open(name, "w") as file:
            file.write("to go\n")
        if rng.random() < 0.3:
            os.mkdir(name + ".d")
            os.rmdir(name + ".d")
        os.unlink(name)
        self.note("unlink", "own")
        victim = rng.choice(self.root_files(rng))
        try:
            os.unlink(victim)
            self.note("unlink", "root's UNLINKED")
            self.find("uid %d removed root's %s" % (self.uid, victim))
        except OSError as error:
            self.note("unlink", "root's " + errno_name(error.errno))

    def act_churn(self, rng, state):
        """A connection that ends mid-way, in one of several ways."""
        way = rng.choice(["no hello", "hold left", "bad line", "half line", "never reads"])
        if way == "no hello":
            channel = Channel(self.mount, hello=False)
            time.sleep(rng.uniform(0.0, 0.5))
            channel.close()
        elif way == "hold left":
            channel = Channel(self.mount)
            channel.request(hold_message([rng.choice(self.candidates())], "read", wait=False), timeout=10)
            channel.close()
        elif way == "bad line":
            channel = Channel(self.mount)
            channel.socket.sendall(b"{this is not json\n")
            time.sleep(0.2)
            channel.close()
        elif way == "half line":
            channel = Channel(self.mount)
            channel.socket.sendall(b'{"op": "status", "id": 7')
            time.sleep(rng.uniform(0.0, 0.5))
            channel.close()
        else:
            # Watches of busy directories, and nothing read for a while: events pile up.
            raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            raw.connect(socket_path(self.mount))
            lines = [{"op": "hello", "id": 1, "version": 1}]
            lines += [{"op": "watch", "id": 2 + number, "path": path}
                      for number, path in enumerate([self.path("root", "probe0"), self.path("root", "probe1"), self.common])]
            raw.sendall(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
            time.sleep(min(max(0.0, self.left()), rng.uniform(1.0, 5.0)))
            raw.close()
        self.note("churn", way)

    def act_self_freeze(self, rng, state):
        """Its own file in shared/ held for writing, and removed by another of its own processes:
        the removal waits for the hold with shared/ locked by the kernel."""
        name = os.path.join(self.shared, "%d-freeze-%d" % (self.uid, state.number))
        with open(name, "w") as file:
            file.write("mine\n")
        channel = state.channel()
        reply = channel.request(hold_message([name], "write", timeout=5), timeout=15)
        if "error" in reply:
            return self.note("self-freeze", reply["error"])
        remover = subprocess.Popen(["/bin/rm", "-f", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2.0)
        channel.request({"op": "release", "hold": reply["hold"], "changed": False}, timeout=10)
        try:
            remover.wait(timeout=30)
        except subprocess.TimeoutExpired:
            remover.kill()
        self.note("self-freeze", "held 2 s")

    def memory_loop(self):
        """Holds of 64 items each (its own files) on new connections until the socket says ENOMEM,
        then watches up to --watches; kept 3 s and let go; again while time is left."""
        rng = random.Random(self.uid)
        while self.left() > 5:
            connections, holds, refused = [], 0, None
            try:
                while refused is None and len(connections) < 64 and self.left() > 3:
                    channel = Channel(self.mount)
                    connections.append(channel)
                    for _ in range(4096):
                        reply = channel.request(hold_message(self.memory_files, "read", wait=False), timeout=20)
                        if "error" in reply:
                            refused = reply["error"]
                            break
                        holds += 1
                self.note("memory", "holds refused %s" % (refused or "never"))
                watches = 0
                channel = None
                while watches < self.config["watches"] and self.left() > 3:
                    if watches % 4096 == 0:
                        channel = Channel(self.mount)
                        connections.append(channel)
                    reply = channel.request({"op": "watch", "path": self.memory_files[watches % 64]}, timeout=20)
                    if "error" in reply:
                        self.note("memory", "watches refused " + reply["error"])
                        break
                    watches += 1
                self.note("memory", "rounds")
                with self.lock:
                    self.figures["most holds"] = max(holds, self.figures["most holds"])
                    self.figures["most watches"] = max(watches, self.figures["most watches"])
                time.sleep(min(max(0.0, self.left()), 3.0))
            except (OSError, ConnectionError, TimeoutError) as error:
                self.note("memory", type(error).__name__)
            except Exception:
                self.note("memory", "bug")
                with self.lock:
                    self.bugs.append(traceback.format_exc())
            finally:
                for channel in connections:
                    channel.close()
            time.sleep(min(max(0.0, self.left()), rng.uniform(1.0, self.config["memory_pause"])))


class ThreadState:
    """A thread's connection (made again when it ends), its presenters' policies and its holds
    waiting to hear BROKEN."""

    def __init__(self, agent, number):
        self.agent = agent
        self.number = number
        self.current = None
        self.policies = {}
        self.broken = {}
        self.lock = threading.Lock()

    def channel(self):
        if self.current is None or self.current.ended:
            if self.current is not None:
                self.current.close()
            self.current = Channel(self.agent.mount, self.on_event)
            self.policies = {}
        return self.current

    def drop(self):
        if self.current is not None:
            self.current.close()
            self.current = None

    def close(self):
        self.drop()

    def expect_broken(self, hold):
        event = threading.Event()
        with self.lock:
            self.broken[hold] = event
        return event

    def forget_broken(self, hold):
        with self.lock:
            self.broken.pop(hold, None)

    def on_event(self, channel, message):
        events = message.get("events", [])
        if "BROKEN" in events and message.get("wd") == 0:
            with self.lock:
                event = self.broken.get(message.get("cookie"))
            if event:
                event.set()
            return
        if "REQUEST" not in events:
            return
        policy = self.policies.get(message.get("wd"), "answer")
        cookie = message["cookie"]

        def answer(number=0):
            try:
                channel.send({"op": "answer", "cookie": cookie, "errno": number})
            except OSError:
                pass

        if policy == "silent":
            return
        if policy == "late":
            threading.Timer(random.uniform(0.2, 3.0), answer).start()
        elif policy == "veto":
            answer("EACCES")
        elif policy == "working":
            def keep_working():
                for _ in range(20):
                    try:
                        channel.send({"op": "working", "cookie": cookie})
                    except OSError:
                        return
                    time.sleep(0.5)
                answer()
            threading.Thread(target=keep_working, daemon=True).start()
        elif policy == "work":
            # Its own work on the item first (it goes ahead of the access that asked), kept.
            def work():
                try:
                    fd = os.open(message.get("path", ""), os.O_RDONLY)
                except OSError:
                    return answer()
                answer()
                time.sleep(min(20.0, max(0.0, self.agent.left())))
                os.close(fd)
            threading.Thread(target=work, daemon=True).start()
        else:
            answer()


def agent_main(config_text):
    # SIGUSR1 prints where every thread is: what the soak asks of an agent that does not end.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # What its holds, presenters and calls do to root is the question, not the CPU it takes.
    os.nice(5)
    agent = Agent(json.loads(config_text))
    agent.run()


# Root's side

class Figures:
    """Root's timed calls, and what went wrong, under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = {}
        self.slow = []
        self.errors = []
        self.frozen = []
        # (directory, from, to) of each freeze, by the wall clock: the daemon's log lines then.
        self.frozen_at = []
        self.listings = {}
        self.findings = []
        self.past_one_break = 0

    def call(self, kind, seconds, bound, what, one_break):
        with self.lock:
            count, longest = self.calls.get(kind, (0, 0.0))
            self.calls[kind] = (count + 1, max(longest, seconds))
            if seconds >= one_break:
                self.past_one_break += 1
            if seconds >= bound and len(self.slow) < 40:
                self.slow.append("%s %s took %.2f s (bound %.2f s)" % (kind, what, seconds, bound))

    def error(self, text):
        with self.lock:
            if len(self.errors) < 40:
                self.errors.append(text)

    def finding(self, text):
        with self.lock:
            if len(self.findings) < 40:
                self.findings.append(text)

    def listing(self, directory, seconds, bound):
        with self.lock:
            count, longest = self.listings.get(directory, (0, 0.0))
            self.listings[directory] = (count + 1, max(longest, seconds))
            if seconds >= bound and len(self.frozen) < 40:
                self.frozen.append("%s frozen %.2f s at %s" % (directory, seconds, time.strftime("%H:%M:%S")))
                self.frozen_at.append((directory, time.time() - seconds, time.time()))


class Soak:
    def __init__(self, options):
        self.options = options
        self.figures = Figures()
        self.failures = []
        # The holders' wait, then the presenters' answers (a presenter still working: up to the
        # break time from when it was asked), then the margin.
        self.bound = options.break_time + max(options.presenter_timeout, options.break_time) + options.margin
        self.one_break = options.break_time + options.presenter_timeout + options.margin
        self.stop = threading.Event()
        self.base = tempfile.mkdtemp(prefix="coordfs-it-hostile-", dir="/tmp")
        os.chmod(self.base, 0o755)
        self.backing = os.path.join(self.base, "backing")
        # The daemon's log: which rule let each access go ahead, shown for a frozen directory.
        self.daemon_log = os.path.join(self.base, "daemon.log")
        self.mount = os.path.join(self.base, "mnt")
        self.mounted = False
        self.agents = []
        self.rss = []
        # The listings under way (native thread id -> directory, start), and what the kernel
        # showed of the slow ones.
        self.listing_now = {}
        # Root's calls under way, by thread: (kind, path, started), for the freeze samples.
        self.calls_now = {}
        self.freeze_samples = []
        self.daemon = None
        self.fio = {"rounds": 0, "ios": 0, "verified": 0, "errors": []}
        self.counter = {"runs": 0, "failed": [], "expected": 0, "broken": []}
        self.coordinate = {"runs": 0, "baseline": 0.0, "broken": 0}
        self.channels = []

    def fail(self, text):
        self.failures.append(text)

    def path(self, *parts):
        return os.path.join(self.mount, *parts)

    # Setting up and tearing down

    def mount_it(self):
        os.makedirs(self.backing)
        os.makedirs(self.mount)
        os.chmod(self.backing, 0o755)
        o = self.options
        result = subprocess.run([o.coordfs, "mount", self.backing, self.mount, "-o", "allow_other", "--log", self.daemon_log,
                                 "--break-time", str(o.break_time),
                                 "--lock-time", str(o.lock_time), "--presenter-timeout", str(o.presenter_timeout),
                                 "--settle-time", str(o.settle_time), "--wait-timeout", str(o.wait_timeout)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            raise RuntimeError("coordfs mount failed: " + result.stderr.strip()[-600:])
        self.mounted = True
        self.daemon = int(os.getxattr(self.mount, "user.coordfs.pid").decode())

    def lay_out(self):
        def directory(relative, mode, owner=None):
            made = self.path(relative)
            os.makedirs(made, exist_ok=True)
            os.chmod(made, mode)
            if owner is not None:
                os.chown(made, owner, owner)
            return made

        def file(relative, content, mode=0o644):
            made = self.path(relative)
            with open(made, "w") as handle:
                handle.write(content)
            os.chmod(made, mode)

        os.chmod(self.mount, 0o755)
        directory("root", 0o755)
        for number in range(self.options.probes):
            directory("root/probe%d" % number, 0o755)
            for index in range(PROBE_FILES):
                file("root/probe%d/f%d" % (number, index), "root's %d %d\n" % (number, index))
        directory("root/files", 0o755)
        for index in range(8):
            file("root/files/f%d" % index, "root's file %d\n" % index)
        directory("root/fio", 0o755)
        directory("root/counter", 0o755)
        directory("root/private", 0o700)
        file("root/private/secret", "root's secret\n", 0o600)
        directory("shared", 0o1777)
        file("shared/root-a", "root's, in shared\n")
        directory("shared/common", 0o755)
        for index in range(COMMON_FILES):
            file("shared/common/c%d" % index, "anyone's %d\n" % index, 0o666)
        directory("users", 0o755)
        for uid in self.options.users:
            directory("users/%d" % uid, 0o755, owner=uid)
        # Another user runs a copy (the repository may lie where it cannot read).
        shutil.copy(SCRIPT, os.path.join(self.base, "hostile_soak.py"))
        os.chmod(os.path.join(self.base, "hostile_soak.py"), 0o644)

    def directories(self):
        names = ["root", "root/files", "root/fio", "root/counter", "shared", "shared/common", "users"]
        names += ["root/probe%d" % number for number in range(self.options.probes)]
        names += ["users/%d" % uid for uid in self.options.users]
        return names

    def tear_down(self):
        self.stop.set()
        for agent in self.agents:
            if agent.poll() is None:
                agent.kill()
        for channel in self.channels:
            channel.close()
        if self.mounted:
            result = subprocess.run([self.options.coordfs, "unmount", self.mount], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if result.returncode != 0:
                subprocess.run(["fusermount3", "-uz", self.mount], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.mounted = False
        shutil.rmtree(self.base, ignore_errors=True)

    # Root's work

    def timed(self, kind, what, call, bound=None):
        started = time.monotonic()
        thread = threading.get_native_id()
        self.calls_now[thread] = (kind, what, started)
        try:
            call()
        except Exception as error:
            self.figures.error("root's %s of %s failed after %.2f s: %r" % (kind, what, time.monotonic() - started, error))
        finally:
            self.calls_now.pop(thread, None)
        self.figures.call(kind, time.monotonic() - started, bound or self.bound, what, self.one_break)

    def probe(self, number):
        """Every kind of call on root's own files in root/probeN (anyone may read, hold and present
        them); the first thread also in shared/ and shared/common, and its service looked up."""
        rng = random.Random(number)
        directory = self.path("root", "probe%d" % number)
        channel = Channel(self.mount)
        self.channels.append(channel)
        made = 0

        def write(path, flags, data=b"root's\n"):
            fd = os.open(path, flags, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

        def read(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                os.read(fd, 4096)
            finally:
                os.close(fd)

        def hold(paths):
            reply = channel.request(hold_message(paths, "write", timeout=self.options.wait_timeout), timeout=self.options.wait_timeout + 10)
            if "error" in reply:
                raise OSError(getattr(errno, reply["error"], errno.EIO), "hold: %s" % reply.get("message", reply["error"]))
            channel.request({"op": "release", "hold": reply["hold"], "changed": True}, timeout=10)

        def atomic_save(path):
            temporary = "%s.save-%d" % (path, rng.randrange(1 << 30))
            write(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            os.rename(temporary, path)

        def services():
            reply = channel.request({"op": "services", "path": os.path.join(directory, "f0")}, timeout=10)
            found = [entry for entry in reply.get("services", []) if entry.get("name") == SERVICE]
            if not found or found[0].get("pid") != os.getpid():
                self.figures.finding("root's lookup of %s found %s, not root's own (pid %d)" % (SERVICE, found, os.getpid()))

        while not self.stop.is_set():
            target = os.path.join(directory, "f%d" % rng.randrange(PROBE_FILES))
            other = os.path.join(directory, "f%d" % rng.randrange(PROBE_FILES))
            kind = rng.choice(["read", "rewrite", "append", "in place", "atomic save", "rename", "unlink", "mkdir",
                               "chmod", "truncate", "hold", "hold of two"] + (["shared", "common read", "common create", "services"]
                                                                              if number == 0 else []))
            if kind == "read":
                self.timed(kind, target, lambda: read(target))
            elif kind == "rewrite":
                self.timed(kind, target, lambda: write(target, os.O_WRONLY | os.O_TRUNC))
            elif kind == "append":
                self.timed(kind, target, lambda: write(target, os.O_WRONLY | os.O_APPEND))
            elif kind == "in place":
                self.timed(kind, target, lambda: write(target, os.O_WRONLY))
            elif kind == "atomic save":
                self.timed(kind, target, lambda: atomic_save(target))
            elif kind == "rename":
                self.timed("rename away", target, lambda: os.rename(target, target + ".moved"))
                self.timed("rename back", target, lambda: os.rename(target + ".moved", target))
            elif kind == "unlink":
                self.timed("unlink", target, lambda: os.unlink(target))
                self.timed("create", target, lambda: write(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            elif kind == "mkdir":
                made += 1
                sub = os.path.join(directory, "d%d" % made)
                self.timed("mkdir", sub, lambda: os.mkdir(sub))
                self.timed("rmdir", sub, lambda: os.rmdir(sub))
            elif kind == "chmod":
                self.timed(kind, target, lambda: os.chmod(target, 0o644))
            elif kind == "truncate":
                self.timed(kind, target, lambda: os.truncate(target, 0))
            elif kind == "hold":
                self.timed("socket hold", target, lambda: hold([target]))
            elif kind == "hold of two":
                pair = [target, other] if other != target else [target]
                self.timed("socket hold of two", target, lambda: hold(pair))
            elif kind == "shared":
                mine, moved = self.path("shared", "root-a"), self.path("shared", "root-b")
                self.timed("rename in shared", mine, lambda: (os.rename(mine, moved), os.rename(moved, mine)))
            elif kind == "common read":
                common = self.path("shared", "common", "c%d" % rng.randrange(COMMON_FILES))
                self.timed("read of shared/common", common, lambda: read(common))
            elif kind == "common create":
                made += 1
                name = self.path("shared", "common", "root-%d" % made)
                self.timed("create in shared/common", name, lambda: write(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
                self.timed("unlink in shared/common", name, lambda: os.unlink(name))
            elif kind == "services":
                self.timed("services", directory, services)
            time.sleep(rng.uniform(0.0, 0.05))

    def list_loop(self, relative):
        """A listing of the directory and a lookup of a name not there, every 50 ms, timed: what
        everyone else's `ls` and create would wait for."""
        directory = self.path(relative)
        missing = 0
        thread = threading.get_native_id()
        while not self.stop.is_set():
            missing += 1
            started = time.monotonic()
            self.listing_now[thread] = (relative, started)
            try:
                os.listdir(directory)
                os.lstat(os.path.join(directory, ".not-there-%d" % missing))
            except FileNotFoundError:
                pass
            except OSError as error:
                self.figures.error("listing %s: %r" % (relative, error))
            self.listing_now.pop(thread, None)
            self.figures.listing(relative, time.monotonic() - started, self.options.frozen)
            self.stop.wait(0.05)

    def freeze_loop(self):
        """What a listing that takes long waits on, seen by the kernel: the listing thread's
        state and kernel stack, and every task then blocked (state D) with the top of its own.
        Tells a directory lock held by a waiting call from a mount slow to answer from a CPU
        too busy to run the caller (state R)."""
        sampled = set()
        while not self.stop.wait(0.1):
            now = time.monotonic()
            for thread, (relative, started) in list(self.listing_now.items()):
                if now - started < 0.7 * self.options.frozen or (thread, started) in sampled:
                    continue
                sampled.add((thread, started))
                if len(self.freeze_samples) >= 12:
                    return
                lines = ["%s after %.2f s: listing thread %s" % (relative, now - started, task_state(os.getpid(), thread))]
                # Root's own calls in that directory then, the likely holder of its lock.
                for tid, (kind, what, since) in list(self.calls_now.items()):
                    if os.path.dirname(os.path.relpath(what, self.mount)) == relative:
                        lines.append("  root's %s of %s for %.2f s: %s" % (kind, os.path.basename(what), now - since, task_state(os.getpid(), tid)))
                for pid, tid in blocked_tasks():
                    if tid != thread and pid != self.daemon:
                        lines.append("  blocked: " + task_state(pid, tid))
                lines = lines[:8]
                # The mount's own threads, alike ones counted together: busy ones (R), ones
                # stuck in the kernel (D), and what the others sleep in.
                kinds = {}
                try:
                    tids = [int(tid) for tid in os.listdir("/proc/%d/task" % self.daemon)]
                except OSError:
                    tids = []
                for tid in tids:
                    state = task_state(self.daemon, tid).split(" ", 2)
                    kind = state[2] if len(state) > 2 else "gone"
                    kinds[kind] = kinds.get(kind, 0) + 1
                for kind, count in sorted(kinds.items(), key=lambda item: -item[1])[:8]:
                    lines.append("  mount x%d: %s" % (count, kind))
                with open("/proc/loadavg") as f:
                    lines.append("  load: " + f.read().strip())
                self.freeze_samples.append("\n".join(lines))

    def rss_loop(self):
        while not self.stop.is_set():
            rss = self.rss_now()
            if rss is not None:
                self.rss.append((time.monotonic(), rss))
            self.stop.wait(0.25)

    def rss_now(self):
        try:
            with open("/proc/%d/status" % self.daemon) as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def fio_loop(self, until):
        fio = shutil.which("fio")
        if fio is None:
            self.fail("fio is not installed (`make setup` installs it)")
            return
        while time.monotonic() < until and not self.stop.is_set():
            self.fio["rounds"] += 1
            environment = dict(os.environ, FIO_DIR=self.path("root", "fio"), FIO_SIZE=self.options.fio_size)
            try:
                result = subprocess.run([fio, FIO_JOB, "--output-format=json"], env=environment, capture_output=True,
                                        text=True, timeout=self.options.seconds + 300)
            except subprocess.TimeoutExpired:
                self.fio["errors"].append("round %d did not end" % self.fio["rounds"])
                return
            try:
                report = json.loads(result.stdout[result.stdout.index("{"):])
            except ValueError:
                self.fio["errors"].append("round %d: no report: %s" % (self.fio["rounds"], result.stderr.strip()[:300]))
                continue
            for job in report["jobs"]:
                self.fio["ios"] += job["write"]["total_ios"] + job["read"]["total_ios"]
                self.fio["verified"] += job["read"]["io_bytes"]
                if job["error"]:
                    self.fio["errors"].append("round %d: %s: error %d (%s)" % (self.fio["rounds"], job["jobname"], job["error"],
                                                                               os.strerror(job["error"])))
            if result.returncode != 0:
                self.fio["errors"].append("round %d: fio exited %d: %s" % (self.fio["rounds"], result.returncode,
                                                                           result.stderr.strip()[:300]))

    def counter_loop(self, until):
        """CoordinatedCounter alone on root's counter: --counter-updates coordinated updates (atomic
        saves) and a move away and back a run, its presenter hearing everyone's accesses."""
        counter = self.options.counter
        if not counter:
            return
        file = self.path("root", "counter", "count.json")
        while time.monotonic() < until and not self.stop.is_set():
            self.counter["runs"] += 1
            try:
                result = subprocess.run([counter, file, str(self.options.counter_updates), "root", "-"], capture_output=True, text=True,
                                        timeout=120)
            except subprocess.TimeoutExpired:
                self.counter["failed"].append("run %d did not end in 120 s" % self.counter["runs"])
                continue
            try:
                report = json.loads(result.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                report = {"errors": ["no report: %s" % result.stderr.strip()[:300]]}
            # A hostile reader that waited the break time for root's access goes past it (the lease,
            # docs/sharing.md): the library says so, and what the accessor wrote stands, so the
            # update still counts. Only readers may go past here: the counter stays exact.
            self.counter["broken"] += [seconds for _, seconds in report.get("broken", [])]
            if result.returncode != 0 or report.get("errors"):
                self.counter["failed"].append("run %d exited %d: %s" % (self.counter["runs"], result.returncode,
                                                                         report.get("errors")))
            else:
                self.counter["expected"] += self.options.counter_updates

    def coordinate_once(self, rng):
        target = self.path("root", "files", "f%d" % rng.randrange(8))
        started = time.monotonic()
        result = subprocess.run([self.options.coordfs, "coordinate", "-x", target, "-w", str(self.options.wait_timeout), "--",
                                 "/bin/true"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return target, time.monotonic() - started, result

    def coordinate_loop(self, until):
        """`coordfs coordinate -x` of root's files, each timed less what the command takes with
        nobody in its way (measured before the other users came)."""
        rng = random.Random(7)
        while time.monotonic() < until and not self.stop.is_set():
            target, took, result = self.coordinate_once(rng)
            self.coordinate["runs"] += 1
            # Another user's access may go past root's hold at the break time: told (75), allowed.
            if result.returncode == 75 and "went ahead past the hold" in result.stderr:
                self.coordinate["broken"] += 1
            elif result.returncode != 0:
                self.figures.error("root's coordinate -x %s exited %d after %.2f s: %s" % (target, result.returncode, took,
                                                                                        result.stderr.strip()[:200]))
            self.figures.call("coordinate -x (less its start)", max(0.0, took - self.coordinate["baseline"]), self.bound, target,
                              self.one_break)
            self.stop.wait(rng.uniform(0.0, 0.3))

    # The run

    def start_agents(self):
        script = os.path.join(self.base, "hostile_soak.py")
        for uid in self.options.users:
            config = {"mount": self.mount, "seconds": self.options.seconds, "threads": self.options.threads,
                      "attacks": self.options.attacks, "watches": self.options.watches, "memory_pause": self.options.memory_pause}
            command = ["/usr/bin/setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups",
                       sys.executable, script, "agent", json.dumps(config)]
            self.agents.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/"))

    def run(self):
        o = self.options
        self.mount_it()
        self.lay_out()
        warm = time.monotonic() + o.warm_up
        until = warm + o.seconds
        threads = [threading.Thread(target=self.rss_loop, daemon=True),
                   threading.Thread(target=self.freeze_loop, daemon=True)]
        threads += [threading.Thread(target=self.list_loop, args=(relative,), daemon=True) for relative in self.directories()]
        threads += [threading.Thread(target=self.fio_loop, args=(until,), daemon=True),
                    threading.Thread(target=self.counter_loop, args=(until,), daemon=True)]
        # Root's service, vended on root/ itself: another user's of the same name nearer its files
        # must not capture root's lookups.
        provider = Channel(self.mount)
        self.channels.append(provider)
        vended = provider.request({"op": "vend", "name": SERVICE, "path": self.path("root")}, timeout=10)
        if "error" in vended:
            self.fail("root could not vend its service: %s" % vended)
        # What `coordfs coordinate` takes with nobody in its way.
        rng = random.Random(3)
        starts = sorted(self.coordinate_once(rng)[1] for _ in range(3))
        self.coordinate["baseline"] = starts[1]
        for thread in threads:
            thread.start()
        probes = [threading.Thread(target=self.probe, args=(number,), daemon=True) for number in range(o.probes)]
        for thread in probes:
            thread.start()
        coordinating = threading.Thread(target=self.coordinate_loop, args=(until,), daemon=True)
        coordinating.start()
        # Root's work alone first: what it takes of the daemon's memory.
        time.sleep(max(0.0, warm - time.monotonic()))
        baseline = max([rss for _, rss in self.rss] or [self.rss_now() or 0])
        hammered = time.monotonic()
        self.start_agents()
        reports = []
        for agent in self.agents:
            try:
                output, errors = agent.communicate(timeout=max(0.0, until - time.monotonic()) + 60)
            except subprocess.TimeoutExpired:
                # Where its threads are, as the kernel sees them, before it goes.
                try:
                    stuck = [task_state(agent.pid, int(tid)) for tid in os.listdir("/proc/%d/task" % agent.pid)]
                except OSError:
                    stuck = []
                # And where its Python threads are: the agent's traceback of each, on its stderr.
                agent.send_signal(signal.SIGUSR1)
                time.sleep(1)
                agent.kill()
                output, errors = agent.communicate()
                self.fail("a hostile agent did not end within 60 s of its time (a call of it stuck in the mount?): "
                          + "; ".join(state for state in stuck if " S do_epoll_wait" not in state)
                          + "\n" + "\n".join((errors or "").splitlines()[-80:]))
            try:
                reports.append(json.loads(output.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                self.fail("a hostile agent gave no report (exit %s): %s" % (agent.returncode, errors.strip()[-600:]))
        ended = time.monotonic()
        self.stop.set()
        coordinating.join(o.wait_timeout + 30)
        for thread in probes + threads:
            thread.join(o.wait_timeout + 30 if thread not in threads[-2:] else o.seconds + 300)
        for channel in self.channels:
            channel.close()
        self.channels = []
        self.judge(reports, baseline, hammered, ended)

    def judge(self, reports, baseline, hammered, ended):
        o = self.options
        figures = self.figures
        # Root never waits past the break time (and a presenter timeout), and nothing of root's fails.
        for slow in figures.slow:
            self.fail("root waited too long: " + slow)
        for error in figures.errors:
            self.fail(error)
        if not figures.calls:
            self.fail("root made no calls")
        # fio verifies every block.
        for error in self.fio["errors"]:
            self.fail("fio: " + error)
        if self.fio["rounds"] == 0:
            self.fail("fio ran no round")
        # The Swift coordinators.
        for failed in self.counter["failed"]:
            self.fail("CoordinatedCounter: " + failed)
        if o.counter and not self.counter["failed"]:
            try:
                with open(self.path("root", "counter", "count.json")) as file:
                    count = json.load(file)["count"]
            except (OSError, ValueError, KeyError) as error:
                count = "unreadable (%r)" % error
            if count != self.counter["expected"]:
                self.fail("CoordinatedCounter: the counter is %s, not %d" % (count, self.counter["expected"]))
        if self.coordinate["runs"] == 0:
            self.fail("coordfs coordinate never ran")
        # Memory: what root's work alone took, a slack, and a share a hostile user.
        peak = max([rss for _, rss in self.rss] or [0])
        allowed = baseline + (o.rss_slack_mib + o.rss_per_user_mib * len(o.users)) * 2**20
        if peak > allowed:
            self.fail("the daemon's resident memory reached %.0f MiB: more than %.0f MiB (%.0f MiB with root's work alone, %d MiB "
                      "slack, %d MiB a hostile user)" % (peak / 2**20, allowed / 2**20, baseline / 2**20, o.rss_slack_mib,
                                                         o.rss_per_user_mib))
        # No directory frozen.
        for frozen in figures.frozen:
            self.fail("a directory was frozen: " + frozen)
        # The users' side: security, status answered, agents working.
        for finding in figures.findings:
            self.fail(finding)
        for report in reports:
            for finding in report["findings"]:
                self.fail(finding)
            for bug in report["bugs"]:
                self.fail("the agent of uid %d failed: %s" % (report["uid"], bug.strip().splitlines()[-1]))
            if report["actions"] < 10:
                self.fail("the agent of uid %d did next to nothing: %s" % (report["uid"], report["counts"]))
            if report["stuck threads"]:
                self.fail("the agent of uid %d had %d threads stuck at the end" % (report["uid"], report["stuck threads"]))
        # The daemon serves on, and holds nothing once everyone has gone.
        left = None
        if self.rss_now() is None:
            self.fail("the daemon has gone")
        else:
            deadline = time.monotonic() + 15
            while True:
                try:
                    state = os.getxattr(self.mount, "user.coordfs.state").decode()
                    left = [line for line in state.splitlines() if line.split(" ", 1)[0] in ("HOLD", "WAIT")]
                except OSError as error:
                    left = ["state unreadable: %r" % error]
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.25)
            if left:
                self.fail("held or waited for once everyone had gone: %s" % left[:5])
            try:
                os.listdir(self.mount)
            except OSError as error:
                self.fail("the mount no longer serves: %r" % error)
        # The mount gives free memory back to the system after two seconds without requests
        # (docs/sharing.md, memory): what it keeps past that is what it holds on to.
        time.sleep(6)
        idle = self.rss_now()
        self.report(reports, baseline, peak, idle, hammered, ended)

    def log_while_frozen(self):
        """The daemon's log lines about a frozen directory's items from a second before it froze
        to its end (the log's times are whole seconds), at most 20 a freeze."""
        try:
            with open(self.daemon_log, errors="replace") as log:
                lines = log.read().splitlines()
        except OSError:
            return []
        shown = []
        for directory, began, ended in self.figures.frozen_at[:3]:
            place = "/" + directory + "/"
            found = 0
            for line in lines:
                try:  # 2026-01-02T03:04:05+0000
                    offset = (int(line[20:22]) * 3600 + int(line[22:24]) * 60) * (-1 if line[19] == "-" else 1)
                    when = calendar.timegm(time.strptime(line[:19], "%Y-%m-%dT%H:%M:%S")) - offset
                except ValueError:
                    continue
                if began - 1 <= when <= ended + 1 and place in line and "lost update" not in line and found < 20:
                    shown.append(line[:400])
                    found += 1
        return shown

    def report(self, reports, baseline, peak, idle, hammered, ended):
        o = self.options
        figures = self.figures
        longest = max((longest for _, longest in figures.calls.values()), default=0.0)
        frozen = max((longest for _, longest in figures.listings.values()), default=0.0)
        print("coordfs hostile soak: %.0f s hammered by uids %s (%s), root's work beside" %
              (ended - hammered, ",".join(map(str, o.users)), ", ".join(o.attacks)))
        print("  times: break %.2f s, lock %.2f s, presenter timeout %.2f s; root's bound %.2f s a call, %.2f s a listing"
              % (o.break_time, o.lock_time, o.presenter_timeout, self.bound, o.frozen))
        print("  root's calls: %d, the longest %.2f s; %d past one break time and a presenter timeout (%.2f s)" %
              (sum(count for count, _ in figures.calls.values()), longest, figures.past_one_break, self.one_break))
        for kind in sorted(figures.calls):
            count, most = figures.calls[kind]
            print("    %-32s %6d  longest %.2f s" % (kind, count, most))
        print("  listings and lookups: %d, the longest %.2f s" % (sum(count for count, _ in figures.listings.values()), frozen))
        for sample in self.freeze_samples:
            print("    " + sample.replace("\n", "\n    "))
        for line in self.log_while_frozen():
            print("    log: " + line)
        print("  fio: %d rounds, %d I/Os, %.2f GiB verified (crc32c), %d errors" %
              (self.fio["rounds"], self.fio["ios"], self.fio["verified"] / 2**30, len(self.fio["errors"])))
        broken = self.counter["broken"]
        print("  CoordinatedCounter: %d runs, %d failed, %d accesses gone past by another user (accessor ran %.2f s at most);"
              " coordfs coordinate: %d runs (%.2f s to start), %d gone past" %
              (self.counter["runs"], len(self.counter["failed"]), len(broken), max(broken, default=0.0),
               self.coordinate["runs"], self.coordinate["baseline"], self.coordinate["broken"]))
        print("  daemon memory: %.0f MiB with root's work alone, %.0f MiB at most (%.1f MiB a hostile user), %.0f MiB idle after"
              % (baseline / 2**20, peak / 2**20, max(0, peak - baseline) / 2**20 / max(1, len(o.users)), (idle or 0) / 2**20))
        for report in reports:
            print("  uid %d: %d actions; at most %d holds of 64 items and %d watches at once" %
                  (report["uid"], report["actions"], report["figures"]["most holds"], report["figures"]["most watches"]))
            for action in sorted(report["counts"]):
                outcomes = ", ".join("%s %s" % (outcome, count) for outcome, count in sorted(report["counts"][action].items()))
                print("    %-16s %s" % (action, outcomes))
        print("  failures: %d" % len(self.failures))
        for failure in self.failures[:60]:
            print("    " + failure)
        summary = {"ok": not self.failures, "failures": self.failures[:200], "figures": {
            "seconds": round(ended - hammered, 1), "root calls": sum(count for count, _ in figures.calls.values()),
            "longest root call": round(longest, 3), "bound": round(self.bound, 3), "longest listing": round(frozen, 3),
            "fio rounds": self.fio["rounds"], "fio verified bytes": self.fio["verified"],
            "counter runs": self.counter["runs"], "counter accesses gone past": len(self.counter["broken"]),
            "coordinate runs": self.coordinate["runs"],
            "coordinate turns broken": self.coordinate["broken"],
            "rss baseline": baseline, "rss peak": peak, "rss idle": idle,
            "agent actions": {str(report["uid"]): report["actions"] for report in reports}}}
        print(json.dumps(summary))


def parse(arguments):
    parser = argparse.ArgumentParser(description="A shared mount under hostile users (see the top of this file).")
    parser.add_argument("--coordfs", required=True, help="the coordfs binary")
    parser.add_argument("--counter", default="", help="the CoordinatedCounter binary (none: no CoordinatedCounter runs)")
    parser.add_argument("--seconds", type=float, default=600, help="how long the hostile users hammer (default 600)")
    parser.add_argument("--counter-updates", type=int, default=5, help="updates a CoordinatedCounter run (default 5)")
    parser.add_argument("--warm-up", type=float, default=3, help="seconds of root's work alone first (default 3)")
    parser.add_argument("--users", default="65534,61001,61002", help="the hostile uids (default nobody and two throwaway uids)")
    parser.add_argument("--threads", type=int, default=4, help="threads a hostile user (default 4)")
    parser.add_argument("--probes", type=int, default=3, help="root's probe threads (default 3)")
    parser.add_argument("--without", default="", help="attacks left out, comma-separated, of: " + ",".join(ATTACKS))
    parser.add_argument("--watches", type=int, default=65536, help="watches the memory attack takes a user (default 65536, the cap)")
    parser.add_argument("--memory-pause", type=float, default=20, help="seconds between rounds of the memory attack (default 20)")
    parser.add_argument("--fio-size", default="32m", help="FIO_SIZE of each fio job (default 32m)")
    parser.add_argument("--break-time", type=float, default=3)
    parser.add_argument("--lock-time", type=float, default=0.25)
    parser.add_argument("--presenter-timeout", type=float, default=1)
    parser.add_argument("--settle-time", type=float, default=0.5)
    parser.add_argument("--wait-timeout", type=float, default=20)
    parser.add_argument("--margin", type=float, default=1.5, help="seconds root's calls may take past their bound (default 1.5)")
    parser.add_argument("--frozen", type=float, default=1.0, help="seconds a listing or lookup may take (default 1)")
    parser.add_argument("--rss-per-user-mib", type=int, default=160,
                        help="MiB of the daemon's resident memory a hostile user may add (default 160: 64 MiB of holds and "
                             "unread lines, the rest for 65 536 watches, connections and open files)")
    parser.add_argument("--rss-slack-mib", type=int, default=48, help="MiB past root's work alone besides (default 48)")
    options = parser.parse_args(arguments)
    options.users = [int(uid) for uid in options.users.split(",") if uid]
    left_out = [name for name in options.without.split(",") if name]
    unknown = [name for name in left_out if name not in ATTACKS]
    if unknown:
        parser.error("unknown attacks: %s (known: %s)" % (", ".join(unknown), ", ".join(ATTACKS)))
    options.attacks = [attack for attack in ATTACKS if attack not in left_out]
    if not [attack for attack in options.attacks if attack != "memory"]:
        parser.error("no attack left to make")
    return options


def main(arguments):
    if arguments[:1] == ["agent"]:
        agent_main(arguments[1])
        return 0
    options = parse(arguments)
    if os.geteuid() != 0:
        sys.stderr.write("hostile_soak.py runs as root (it mounts with allow_other and runs other users through setpriv)\n")
        return 2
    soak = Soak(options)

    def interrupted(number, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    try:
        soak.run()
    except KeyboardInterrupt:
        soak.fail("interrupted")
        print(json.dumps({"ok": False, "failures": soak.failures}))
    except Exception:
        soak.fail("the soak failed: " + traceback.format_exc())
        print(json.dumps({"ok": False, "failures": soak.failures}))
    finally:
        soak.tear_down()
    return 0 if not soak.failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
