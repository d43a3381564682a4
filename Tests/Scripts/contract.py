#!/usr/bin/env python3
"""docs/contract.md's table, every cell run on a real mount.

  contract.py check DOC
      reads the table and says what is wrong with it (no mount needed)
  contract.py run DOC MOUNT --coordfs BINARY --times S,L,P,T,B,R,W [--workers N] [--only WORDS]
      runs every cell on MOUNT (made by root with -o allow_other and the times: --settle-time S,
      --lock-time L, --presenter-timeout T, --break-time B, --wait-timeout W; P is how long the
      saving presenter takes to save, R when a party lets go of what it has)
  contract.py party KIND ITEM DIRECTORY TIMES COORDFS      (for run) the other party of a cell
  contract.py act ROW ITEM DIRECTORY TIMES COORDFS [own]   (for run) the call of a cell

For each cell `run` makes a directory of its own under MOUNT/contract, starts the column's party
(a program with the item open, a hold or a presenter through the control socket, as another user
for the cross-user columns), then the row's call in another process, and judges what happened
by the cell's words: the errno, how long the call took (each verdict's time, with generous
bounds), whether a call that failed left its items as they were, whether a hold it went past
heard BROKEN ("told") and still holds afterwards ("revoked" or not), and what a presenter of the
item was asked. Cells run side by side, each in
its own directory; one that fails is run once more alone, so that a slow moment of a small
machine is not taken for a broken rule. It prints a JSON object a line for each cell and a last
one with the totals; the exit status is 0 when every cell held. Run as root.
"""
import concurrent.futures
import errno
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time

SCRIPT = os.path.abspath(__file__)

# The words of the table, and what the runner does for each. A label the runner does not know
# fails the check: the table and this file change together.
COLUMNS = {
    "nothing": "nothing",
    "a reader": "reader",
    "an appender": "appender",
    "a writer in place": "writer-in-place",
    "a quiet writer in place": "quiet-writer-in-place",
    "an O_TRUNC writer": "truncating-writer",
    "a quiet O_TRUNC writer": "quiet-truncating-writer",
    "a read hold": "read-hold",
    "a write hold": "write-hold",
    "coordinate -x 9": "descriptor-hold",
    "a saving presenter": "saving-presenter",
    "a stuck holder": "stuck-holder",
    "another user's hold": "other-users-hold",
    "another user's presenter": "other-users-presenter",
    "the same process": "same-process",
}
ROWS = {
    "read open": "read",
    "read open, O_NONBLOCK": "read-nonblocking",
    "in-place open": "in-place",
    "in-place open, O_NONBLOCK": "in-place-nonblocking",
    "O_TRUNC open": "truncating",
    "O_TRUNC open, O_NONBLOCK": "truncating-nonblocking",
    "append open": "append",
    "append open, O_NONBLOCK": "append-nonblocking",
    "create": "create",
    "rename away": "rename-away",
    "rename over": "rename-over",
    "unlink": "unlink",
    "rmdir": "rmdir",
    "truncate": "truncate",
    "chmod, chown, utime": "chmod",
    "coordinate -x 9": "descriptor-hold",
    "read hold": "read-hold",
    "write hold": "write-hold",
}
OPENS = {
    "read": os.O_RDONLY, "read-nonblocking": os.O_RDONLY | os.O_NONBLOCK,
    "in-place": os.O_WRONLY, "in-place-nonblocking": os.O_WRONLY | os.O_NONBLOCK,
    "truncating": os.O_WRONLY | os.O_TRUNC, "truncating-nonblocking": os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK,
    "append": os.O_WRONLY | os.O_APPEND, "append-nonblocking": os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK,
}
VERDICTS = ["at once", "settled", "EAGAIN", "until released", "until saved", "presenter timeout",
            "2 × presenter timeout", "lock time", "EBUSY", "break time", "once stuck", "—"]
# Verdicts that are a failure with that errno, not a call that goes ahead.
FAILURES = ["EAGAIN", "EBUSY"]
FLAGS = ["told", "revoked"]
REQUESTS = ["RELINQUISH_READER", "RELINQUISH_WRITER", "SAVE", "ACCOMMODATE_DELETION", "ACCOMMODATE_SUBITEM_DELETION",
            "ACCOMMODATE_EVICTION"]
FOOTNOTES = "⁰¹²³⁴⁵⁶⁷⁸⁹"

# Parties that are programs with the item open: a name that does not exist yet (create) or a
# directory (rmdir) has none, nor do the same process's own opens.
PROGRAMS = {"reader", "appender", "writer-in-place", "quiet-writer-in-place", "truncating-writer",
            "quiet-truncating-writer", "descriptor-hold"}
# Parties that hold through the control socket and hear BROKEN: "told" and "revoked" are theirs.
SOCKET_HOLDERS = {"stuck-holder", "other-users-hold"}
OTHER_USER = {"other-users-hold", "other-users-presenter"}
# Verdicts after which a socket holder's hold is probed: the call went past it.
WENT_PAST = {"once stuck", "lock time", "break time"}
NOBODY = ["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# How long a busy writer waits between writes, and when a stuck holder makes its create.
WRITE_EVERY = 0.1
BLOCK_AFTER = 0.3
# A call "at once" takes less than this; one that waits ends within `MARGIN` of its time.
AT_ONCE = 0.35
MARGIN = 0.6
# The descriptor form starts `coordfs coordinate` twice (the command, then its holder): its
# start-up, measured beside and taken off, varies with the machine's load by this much more.
DESCRIPTOR_SLACK = 0.5


class Times:
    """The mount's times (settle S, lock L, presenter timeout T, break B, wait timeout W), and the
    cell's own: how long the saving presenter takes to save (P), when a party lets go (R)."""

    def __init__(self, text):
        values = [float(value) for value in text.split(",")]
        self.settle, self.lock, self.save, self.presenter, self.breaking, self.release, self.wait = values
        self.text = text

    def centre(self, verdict):
        return {"until released": self.release, "until saved": self.save, "presenter timeout": self.presenter,
                "2 × presenter timeout": 2 * self.presenter, "lock time": self.lock, "EBUSY": self.lock,
                "break time": self.breaking}.get(verdict)

    def overlaps(self):
        """Verdicts whose bounds overlap, which no cell could then tell apart (a failure is told
        apart by its errno)."""
        spans = sorted((self.centre(verdict) - 0.05, self.centre(verdict) + MARGIN, verdict)
                       for verdict in VERDICTS if self.centre(verdict) is not None and verdict not in FAILURES)
        found = [f"{a[2]} and {b[2]}" for a, b in zip(spans, spans[1:]) if a[1] > b[0]]
        if self.lock - 0.1 <= AT_ONCE or self.settle <= AT_ONCE:
            found.append("the lock time or the settle time and at once")
        if self.release <= self.breaking + 0.5:
            found.append("a party must let go well after the break time")
        if self.wait <= max(self.release, 2 * self.presenter) + MARGIN + DESCRIPTOR_SLACK:
            found.append("the wait timeout must come after every other time")
        return found


def bounds(verdict, column, times, row):
    """The seconds a call judged by `verdict` may take: (at least, less than)."""
    slack = DESCRIPTOR_SLACK if row == "descriptor-hold" else 0
    if verdict in ("at once", "settled", "EAGAIN"):
        return 0, AT_ONCE + slack
    if verdict == "once stuck":
        return (BLOCK_AFTER - 0.05 if column == "stuck-holder" else 0), times.lock - 0.1 + slack
    centre = times.centre(verdict)
    # The descriptor form's time is measured less its shell's start, which may be counted long.
    return centre - 0.05 - slack, centre + MARGIN + slack


# The document

def table(text, start, end):
    """The rows of the Markdown table between the markers: lists of cells, backticks taken off."""
    opening, closing = text.find(start), text.find(end)
    if opening < 0 or closing < opening:
        raise ValueError(f"no table between '{start}' and '{end}'")
    rows = []
    for line in text[opening:closing].splitlines():
        if not line.startswith("|"):
            continue
        cells = [cell.strip().replace("`", "") for cell in line.strip().strip("|").split("|")]
        if not cells[0].startswith("---"):
            rows.append(cells)
    return rows


def parse_cell(text):
    """A cell's verdict and flags; footnote marks are left out."""
    words = [word.strip().strip(FOOTNOTES) for word in text.split(",")]
    return words[0], words[1:]


def read_document(path):
    """The cells and the presenter requests of the document, and what is wrong with them."""
    text = open(path, encoding="utf-8").read()
    problems, cells = [], []
    grid = table(text, "<!-- contract:", "<!-- end of contract -->")
    header, body = grid[0], grid[1:]
    columns = [COLUMNS.get(label) for label in header[1:]]
    problems += [f"unknown column '{label}'" for label, column in zip(header[1:], columns) if column is None]
    if sorted(filter(None, columns)) != sorted(COLUMNS.values()):
        problems.append(f"the columns are not {sorted(COLUMNS)}")
    rows_seen = []
    for line in body:
        row = ROWS.get(line[0])
        if row is None:
            problems.append(f"unknown row '{line[0]}'")
            continue
        rows_seen.append(row)
        if len(line) != len(header):
            problems.append(f"row '{line[0]}' has {len(line) - 1} cells, not {len(header) - 1}")
            continue
        for label, column, text_cell in zip(header[1:], columns, line[1:]):
            if column is None:
                continue
            verdict, flags = parse_cell(text_cell)
            where = f"'{line[0]}' × '{label}'"
            if verdict not in VERDICTS:
                problems.append(f"{where}: '{verdict}' is none of {VERDICTS}")
            if any(flag not in FLAGS for flag in flags):
                problems.append(f"{where}: {flags} are not among {FLAGS}")
            if flags and (column not in SOCKET_HOLDERS or verdict not in WENT_PAST):
                problems.append(f"{where}: 'told' and 'revoked' are said of a hold through the socket that a call went past")
            impossible = row in ("create", "rmdir") and column in PROGRAMS | {"same-process"}
            if impossible != (verdict == "—"):
                problems.append(f"{where}: '—' is for what does not arise (a program's open of a new name or of a directory)")
            cells.append({"row": row, "column": column, "row label": line[0], "column label": label, "text": text_cell,
                          "verdict": verdict, "flags": flags})
    if sorted(rows_seen) != sorted(ROWS.values()):
        problems.append(f"the rows are not {sorted(ROWS)}")
    asked = {}
    for line in table(text, "<!-- presenter requests:", "<!-- end of presenter requests -->")[1:]:
        row = ROWS.get(line[0])
        names = [] if line[1] == "nothing" else [name.strip() for name in line[1].split(",")]
        if row is None or any(name not in REQUESTS for name in names):
            problems.append(f"presenter requests: '{line[0]}' | '{line[1]}'")
            continue
        asked[row] = sorted(names)
    if sorted(asked) != sorted(ROWS.values()):
        problems.append("presenter requests: not one line for each row")
    return cells, asked, problems


# The control socket, with the standard library only (docs/protocol.md)

ERRNO_NAMES = {errno.EAGAIN: "EAGAIN", errno.EDEADLK: "EDEADLK"}    # not EWOULDBLOCK, EDEADLOCK


def errno_name(number):
    return ERRNO_NAMES.get(number) or errno.errorcode.get(number, str(number))


class Channel:
    """One connection to the mount's control socket: requests wait for their replies; events go
    to `on_event` on the thread that reads them."""

    def __init__(self, directory, on_event=None, timeout=30):
        self.on_event = on_event or (lambda message: None)
        self.timeout = timeout
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.socket.connect(os.getxattr(directory, "user.coordfs.socket").decode())
        self.sending = threading.Lock()
        self.arrived = threading.Condition()
        self.replies = {}
        self.number = 0
        self.ended = False
        threading.Thread(target=self.read, daemon=True).start()
        self.request({"op": "hello", "version": 1})

    def send(self, message):
        with self.sending:
            self.socket.sendall(json.dumps(message).encode() + b"\n")

    def request(self, message):
        with self.arrived:
            self.number += 1
            number = self.number
        self.send(dict(message, id=number))
        with self.arrived:
            if not self.arrived.wait_for(lambda: number in self.replies or self.ended, self.timeout) or self.ended:
                raise ConnectionError(f"no reply to {message['op']}")
            return self.replies.pop(number)

    def read(self):
        try:
            for line in self.socket.makefile("rb"):
                message = json.loads(line)
                if "wd" in message and "ok" not in message and "error" not in message:
                    self.on_event(message)
                    continue
                with self.arrived:
                    self.replies[message.get("id")] = message
                    self.arrived.notify_all()
        finally:
            with self.arrived:
                self.ended = True
                self.arrived.notify_all()

    def hold(self, path, access, timeout):
        """The hold's number, or the errno name that refused it."""
        reply = self.request({"op": "hold", "intents": [{"path": path, "access": access}], "wait": True, "timeout": timeout})
        return reply.get("hold", reply.get("error"))


class Output:
    """Lines to the runner, one writer at a time (events arrive on the socket's thread)."""
    lock = threading.Lock()

    @classmethod
    def say(cls, line):
        with cls.lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def hold_descriptor(path, number, coordfs, wait):
    """flock's descriptor form, `exec N>>PATH; coordfs coordinate -x N`, this process being the
    shell: the seconds the open took, those `coordinate` took, and its exit status."""
    started = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    opened = time.monotonic() - started
    if fd != number:
        os.dup2(fd, number)
        os.close(fd)
    started = time.monotonic()
    status = subprocess.run([coordfs, "coordinate", "-x", str(number), "-w", str(wait)], pass_fds=(number,),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return opened, time.monotonic() - started, status


# A cell's other party: `contract.py party KIND ITEM DIRECTORY TIMES COORDFS`

def party(kind, item, directory, times, coordfs):
    """Takes what the column says, says "ready", then follows the runner's commands: "block"
    (make a file beside the item), "release" (let go of everything). Says "held N" of its hold,
    "broken N" for each BROKEN its connection hears, and "asked NAMES" for each request to its
    presenter."""
    fd, channel, hold, stop = None, None, None, threading.Event()

    def on_event(message):
        events = message.get("events", [])
        if "BROKEN" in events and message.get("wd") == 0:
            Output.say(f"broken {message.get('cookie')}")
        if "REQUEST" not in events:
            return
        Output.say("asked " + ",".join(name for name in events if name != "REQUEST"))
        if kind == "other-users-presenter":
            return                                           # it never answers
        answer = {"op": "answer", "cookie": message["cookie"], "errno": 0}
        delay = times.save if "SAVE" in events else 0
        threading.Timer(delay, lambda: channel.send(answer)).start()

    if kind == "reader":
        fd = os.open(item, os.O_RDONLY)
    elif kind == "appender":
        fd = os.open(item, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"appended\n")
    elif kind in ("writer-in-place", "quiet-writer-in-place"):
        fd = os.open(item, os.O_WRONLY)
        os.pwrite(fd, b"w", 0)
    elif kind in ("truncating-writer", "quiet-truncating-writer"):
        fd = os.open(item, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, b"t")
    elif kind == "descriptor-hold":
        _, _, status = hold_descriptor(item, 9, coordfs, times.wait)
        fd = 9
        if status != 0:
            return Output.say(f"failed: coordinate -x 9 exited {status}")
    elif kind in ("read-hold", "write-hold", "stuck-holder", "other-users-hold"):
        channel = Channel(directory, on_event)
        hold = channel.hold(item, "read" if kind == "read-hold" else "write", times.wait)
        if not isinstance(hold, int):
            return Output.say(f"failed: hold {hold}")
        Output.say(f"held {hold}")
    elif kind in ("saving-presenter", "other-users-presenter"):
        channel = Channel(directory, on_event)
        if "wd" not in channel.request({"op": "watch", "path": item}):
            return Output.say("failed: watch")
    if kind in ("writer-in-place", "truncating-writer"):
        def keep_writing():
            while not stop.wait(WRITE_EVERY):
                if kind == "writer-in-place":
                    os.pwrite(fd, b"w", 0)
                else:
                    os.write(fd, b"t")
        threading.Thread(target=keep_writing, daemon=True).start()
    if kind.startswith("quiet-"):
        time.sleep(times.settle + 0.3)                        # unchanged for longer than the settle time
    Output.say("ready")

    def block():
        made = os.open(os.path.join(directory, "beside"), os.O_WRONLY | os.O_CREAT, 0o666)
        os.close(made)
        Output.say("made beside")

    for line in sys.stdin:
        command = line.strip()
        if command == "block":
            threading.Thread(target=block, daemon=True).start()
        elif command == "release":
            stop.set()
            if fd is not None:
                os.close(fd)
                fd = None
            if isinstance(hold, int):
                channel.request({"op": "release", "hold": hold, "changed": False})
                hold = None
            if channel is not None and kind in ("saving-presenter", "other-users-presenter"):
                channel.socket.close()
            Output.say("released")


# A cell's call: `contract.py act ROW ITEM DIRECTORY TIMES COORDFS [own]`

def act(row, item, directory, times, coordfs, own):
    """Gets ready (with `own`, opens the item with O_TRUNC itself first), says "ready", makes the
    row's call on "go" and says "done ERRNO SECONDS"; lets go of everything on "end"."""
    other = os.path.join(directory, "g")
    kept = []
    if own:
        kept.append(os.open(item, os.O_WRONLY | os.O_TRUNC))
    channel = Channel(directory) if row in ("read-hold", "write-hold") else None
    baseline = 0.0
    if row == "descriptor-hold":
        # What `coordfs coordinate -x` takes with nobody in its way, on a file of its own.
        _, baseline, _ = hold_descriptor(os.path.join(directory, "scratch"), 8, coordfs, times.wait)
        os.close(8)
    Output.say("ready")
    if sys.stdin.readline().strip() != "go":
        return
    failure, took = 0, 0.0
    started = time.monotonic()
    try:
        if row in OPENS:
            kept.append(os.open(item, OPENS[row]))
        elif row == "create":
            kept.append(os.open(item, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666))
        elif row == "rename-away":
            os.rename(item, other)
        elif row == "rename-over":
            os.rename(other, item)
        elif row == "unlink":
            os.unlink(item)
        elif row == "rmdir":
            os.rmdir(item)
        elif row == "truncate":
            os.truncate(item, 0)
        elif row == "chmod":
            os.chmod(item, 0o666)
        elif row == "descriptor-hold":
            # The open's wait, and the hold's less what `coordinate` takes to start.
            opened, held, status = hold_descriptor(item, 9, coordfs, times.wait)
            took = opened + max(0.0, held - baseline)
            kept.append(9)
            failure = 0 if status == 0 else errno.EBUSY
        else:
            answer = channel.hold(item, "read" if row == "read-hold" else "write", times.wait)
            failure = 0 if isinstance(answer, int) else getattr(errno, answer, errno.EIO)
    except OSError as error:
        failure = error.errno
    if row != "descriptor-hold":
        took = time.monotonic() - started
    Output.say(f"done {errno_name(failure) if failure else 0} {took:.3f}")
    sys.stdin.readline()                                      # "end", or the runner's end
    for fd in kept:
        os.close(fd)


# The runner

class Child:
    """A process of the cell, driven line by line; ended (killed if need be) by `end`."""

    def __init__(self, arguments):
        self.process = subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, line):
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def next(self, timeout):
        """The next line, or None at the end or after `timeout`; every line is kept in `seen`."""
        try:
            line = self.lines.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if line is not None:
            self.seen.append(line)
        return line

    def wait_for(self, prefix, timeout):
        deadline = time.monotonic() + timeout
        while True:
            line = self.next(deadline - time.monotonic())
            if line is None or line.startswith(prefix):
                return line
            if line.startswith("failed"):
                return line

    def drain(self):
        while self.next(0) is not None:
            pass

    def end(self):
        try:
            self.process.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def lay_out(root, cells):
    """A directory for each cell under `root` (anyone may use them), with its items, made
    through the mount."""
    os.makedirs(root, exist_ok=True)
    os.chmod(root, 0o777)
    for number, cell in enumerate(cells):
        directory = os.path.join(root, f"{number:03d}-{cell['row']}-{cell['column']}")
        os.mkdir(directory)
        os.chmod(directory, 0o777)
        cell["directory"] = directory
        cell["item"] = os.path.join(directory, "d" if cell["row"] == "rmdir" else "f")
        if cell["row"] == "rmdir":
            os.mkdir(cell["item"])
            os.chmod(cell["item"], 0o777)
        elif cell["row"] != "create":
            write(cell["item"], b"seed\n")
        if cell["row"] == "rename-over":
            write(os.path.join(directory, "g"), b"new\n")


def write(path, content):
    with open(path, "wb") as file:
        file.write(content)
    os.chmod(path, 0o666)


def unchanged(cell):
    """Whether a call that failed left its items as they were: a new name not made, a name
    neither removed nor moved."""
    item, other = cell["item"], os.path.join(cell["directory"], "g")
    row = cell["row"]
    if row == "create":
        return not os.path.lexists(item)
    if row == "rename-away":
        return os.path.lexists(item) and not os.path.lexists(other)
    if row == "rename-over":
        return os.path.lexists(item) and os.path.lexists(other)
    return os.path.lexists(item)


def probe(cell):
    """Whether the runner, another process of root's, gets past the hold now without waiting:
    what a later access of the item finds once the call is done."""
    item, other = cell["item"], os.path.join(cell["directory"], "g")
    attempts = [(other, os.O_RDONLY)] if cell["row"] == "rename-away" else []
    if os.path.lexists(item):
        attempts.append((item, os.O_RDONLY))
    else:                                                    # gone: a new item of that name
        attempts.append((item, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
    deadline = time.monotonic() + 1.0                         # the descriptor form lets go within 0.1 s
    while True:
        try:
            for path, flags in attempts:
                os.close(os.open(path, flags | os.O_NONBLOCK, 0o666))
            return True
        except OSError as error:
            if error.errno != errno.EAGAIN or time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def run_cell(cell, times, coordfs, asked):
    """Runs one cell; the cell with what happened and what is wrong (`problems`)."""
    try:
        return try_cell(cell, times, coordfs, asked)
    except Exception as error:                               # the runner's own failure, told as the cell's
        return {"row label": cell["row label"], "column label": cell["column label"], "text": cell["text"],
                "ok": False, "problems": [f"the runner failed: {error!r}"]}


def try_cell(cell, times, coordfs, asked):
    result = {key: cell[key] for key in ("row label", "column label", "text")}
    problems = []
    column, row, verdict = cell["column"], cell["row"], cell["verdict"]
    python = [sys.executable, SCRIPT]
    other_party = None
    if column not in ("nothing", "same-process"):
        arguments = python + ["party", column, cell["item"], cell["directory"], times.text, coordfs]
        other_party = Child((NOBODY if column in OTHER_USER else []) + arguments)
        said = other_party.wait_for("ready", 20)
        if said != "ready":
            other_party.end()
            return dict(result, ok=False, problems=[f"the party did not get ready: {said}"])
    actor = Child(python + ["act", row, cell["item"], cell["directory"], times.text, coordfs]
                  + (["own"] if column == "same-process" else []))
    said = actor.wait_for("ready", 20)
    if said != "ready":
        for child in (actor, other_party):
            if child:
                child.end()
        return dict(result, ok=False, problems=[f"the call did not get ready: {said}"])
    go = time.monotonic()
    actor.send("go")
    done, blocked, released = None, False, False
    while done is None:
        elapsed = time.monotonic() - go
        if other_party and column == "stuck-holder" and not blocked and elapsed >= BLOCK_AFTER:
            other_party.send("block")
            blocked = True
        if other_party and not released and elapsed >= times.release:
            other_party.send("release")
            released = True
        if elapsed > times.release + times.wait + 5:
            problems.append("the call never ended")
            break
        line = actor.next(0.01)
        if line is not None and line.startswith("done"):
            done = line.split()
    outcome = done[1] if done else "none"
    took = float(done[2]) if done else -1.0
    result.update(errno=outcome, seconds=round(took, 3))
    # What a later access finds: checked before the party lets go, once the call's process
    # (and the descriptor form's holder, with it) has let go of its own.
    if column in SOCKET_HOLDERS and verdict in WENT_PAST and not released:
        actor.send("end")
        actor.end()
        result["later access goes ahead"] = probe(cell)
        if result["later access goes ahead"] != ("revoked" in cell["flags"]):
            problems.append("the hold it went past " + ("still holds" if "revoked" in cell["flags"] else "holds nothing any more"))
    time.sleep(0.3)                                          # BROKEN and requests are sent after the call
    if other_party:
        other_party.drain()
        heard = other_party.seen
        if column in SOCKET_HOLDERS:
            held = [line.split()[1] for line in heard if line.startswith("held ")]
            result["told"] = bool(held) and f"broken {held[0]}" in heard
            if "told" in cell["flags"] and not result["told"]:
                problems.append("the hold it went past was not told (no BROKEN)")
        if verdict == "EBUSY" and any(line.startswith("broken ") for line in heard):
            problems.append("it failed with EBUSY, and told a hold it waited for all the same")
        if column == "saving-presenter":
            names = sorted({name for line in heard if line.startswith("asked ") for name in line[6:].split(",")})
            result["asked"] = names
            if names != asked[row]:
                problems.append(f"the presenter was asked {names or 'nothing'}, not {asked[row] or 'nothing'}")
        if not released:
            other_party.send("release")
    if verdict in FAILURES:
        if outcome != verdict:
            problems.append(f"expected {verdict}, got {outcome}")
        elif not unchanged(cell):
            problems.append(f"it failed with {verdict}, and changed its items all the same")
    elif outcome != "0":
        problems.append(f"failed with {outcome}")
    low, high = bounds(verdict, column, times, row)
    if done and not low <= took < high:
        problems.append(f"took {took:.3f} s, not from {low:.2f} to {high:.2f} s")
    actor.send("end")
    actor.end()
    if other_party:
        other_party.end()
    return dict(result, ok=not problems, problems=problems)


def expected_seconds(cell, times):
    centre = times.centre(cell["verdict"]) or 0
    return centre + (times.settle + 0.3 if cell["column"].startswith("quiet-") else 0)


def settle_down(mount, seconds):
    """Waits until the engine holds, waits for and presents nothing: what the cells took is let go."""
    deadline = time.monotonic() + seconds
    while True:
        state = os.getxattr(mount, "user.coordfs.state").decode()
        busy = [line for line in state.splitlines() if line.split(" ", 1)[0] in ("HOLD", "WAIT", "PRESENT")]
        if not busy or time.monotonic() > deadline:
            return busy
        time.sleep(0.2)


def run(document, mount, coordfs, times, workers, only):
    cells, asked, problems = read_document(document)
    if problems:
        print(json.dumps({"problems": problems}))
        return 1
    overlapping = times.overlaps()
    if overlapping:
        print(json.dumps({"problems": [f"the times cannot tell {pair} apart" for pair in overlapping]}))
        return 1
    mount = os.path.realpath(mount)
    if only:
        cells = [cell for cell in cells if any(word in (cell["row"], cell["column"]) for word in only)]
    cells = [cell for cell in cells if cell["verdict"] != "—"]
    lay_out(os.path.join(mount, "contract"), cells)
    started = time.monotonic()
    # The longest first, so that the last to start are short.
    ordered = sorted(cells, key=lambda cell: -expected_seconds(cell, times))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda cell: run_cell(cell, times, coordfs, asked), ordered))
    side_by_side = time.monotonic() - started
    # A cell that failed among the others is run once more, alone, in a directory of its own.
    failed = [(index, cell) for index, (cell, result) in enumerate(zip(ordered, results)) if not result["ok"]]
    if failed:
        again = [dict(cell) for _, cell in failed]
        lay_out(os.path.join(mount, "contract-again"), again)
        for (index, _), cell in zip(failed, again):
            first = results[index]
            results[index] = dict(run_cell(cell, times, coordfs, asked), first_try=first["problems"])
    left = settle_down(mount, 10)
    for result in results:
        print(json.dumps(result, ensure_ascii=False))
    failures = sum(not result["ok"] for result in results)
    print(json.dumps({"cells": len(results), "failed": failures, "run again": len(failed),
                      "seconds": round(time.monotonic() - started, 1), "side by side": round(side_by_side, 1), "left held": left}, ensure_ascii=False))
    return 0 if failures == 0 and not left else 1


def main(arguments):
    command = arguments[0] if arguments else ""
    if command == "check" and len(arguments) == 2:
        cells, asked, problems = read_document(arguments[1])
        print(json.dumps({"cells": len(cells), "run": sum(cell["verdict"] != "—" for cell in cells), "problems": problems},
                         ensure_ascii=False))
        return 1 if problems else 0
    if command == "run" and len(arguments) >= 3:
        document, mount, rest = arguments[1], arguments[2], arguments[3:]
        options = {"--workers": "16", "--only": ""}
        while rest:
            options[rest[0]] = rest[1]
            rest = rest[2:]
        only = [word for word in options["--only"].split(",") if word]
        return run(document, mount, options["--coordfs"], Times(options["--times"]), int(options["--workers"]), only)
    if command == "party":
        party(arguments[1], arguments[2], arguments[3], Times(arguments[4]), arguments[5])
        return 0
    if command == "act":
        act(arguments[1], arguments[2], arguments[3], Times(arguments[4]), arguments[5], arguments[6:] == ["own"])
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
