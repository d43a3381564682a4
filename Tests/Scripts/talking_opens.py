#!/usr/bin/env python3
"""Two programs that talk to each other over TCP while one holds a file the other opens, as
fstests' generic/571 (src/locktest -L) does: the server tells the client what to do and waits for
its answer; the client, asleep in a read of the connection between commands, keeps the file open
across them. When the server then opens the file in a conflicting mode, each waits for the other:
the server for the client's open, the client for the server's next command.

Usage: talking_opens.py [--bystander] FILE
Runs as the server, starts the client itself (a separate program: it shares no descriptor with
the server but the connection), and prints one line a step, "STEP SECONDS", then "total SECONDS".
Exits 0 when every step did what it would do on a local filesystem. --bystander: a third process
holds the server's end of the connection too (it sends nothing), so that the client could hear
from someone else while the server waits.
"""
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time

F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)
F_SETSIG = getattr(fcntl, "F_SETSIG", 10)


def client(port, path):
    """Obeys one command a line: open MODE, lease, close; answers "ok" or "err ERRNO"."""
    connection = socket.create_connection(("127.0.0.1", port))
    stream = connection.makefile("rw")
    fd = -1

    def lease_broken(signum, frame):
        # As locktest's client does: the lease goes as soon as it is broken.
        fcntl.fcntl(fd, F_SETLEASE, fcntl.F_UNLCK)

    # A mask inherited from whoever started the test (a test runner blocks signals for its
    # threads) would keep the lease-break signal from coming: the kernel would then wait its
    # own lease-break time (45 s), which is no coordination's.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGIO})

    for line in stream:
        command, _, argument = line.strip().partition(" ")
        try:
            if command == "open":
                fd = os.open(path, {"r": os.O_RDONLY, "rw": os.O_RDWR}[argument])
            elif command == "lease":
                signal.signal(signal.SIGIO, lease_broken)
                fcntl.fcntl(fd, F_SETSIG, signal.SIGIO)
                fcntl.fcntl(fd, F_SETLEASE, fcntl.F_RDLCK)
            elif command == "close":
                os.close(fd)
                fd = -1
            stream.write("ok\n")
        except OSError as error:
            stream.write("err %d\n" % error.errno)
        stream.flush()


# Each step: what the client does first (and keeps), then what the server does meanwhile.
STEPS = [
    ("read-then-write", ["open r"], lambda path: os.close(os.open(path, os.O_RDWR))),
    ("leased-read-then-write", ["open r", "lease"], lambda path: os.close(os.open(path, os.O_RDWR))),
    ("read-then-truncate", ["open r"], lambda path: os.truncate(path, 512)),
    ("write-then-read", ["open rw"], lambda path: os.close(os.open(path, os.O_RDONLY))),
]


def server(path, bystander):
    with open(path, "wb") as file:
        file.write(b":" * 1024)
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(1)
    port = listening.getsockname()[1]
    child = subprocess.Popen(
        [sys.executable, __file__, "--client", str(port), path], stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL)
    connection, _ = listening.accept()
    listening.close()
    third = subprocess.Popen(
        ["sleep", "600"], pass_fds=(connection.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL) if bystander else None
    stream = connection.makefile("rw")

    def ask(command):
        stream.write(command + "\n")
        stream.flush()
        answer = stream.readline().strip()
        if answer != "ok":
            raise SystemExit("client: %s: %s" % (command, answer))

    began = time.monotonic()
    for name, first, meanwhile in STEPS:
        start = time.monotonic()
        for command in first:
            ask(command)
        meanwhile(path)
        ask("close")
        print("%s %.2f" % (name, time.monotonic() - start), flush=True)
    print("total %.2f" % (time.monotonic() - began), flush=True)
    stream.close()
    connection.close()
    if third:
        third.kill()
        third.wait()
    return child.wait()


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        client(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(server(sys.argv[-1], "--bystander" in sys.argv[1:-1]))
