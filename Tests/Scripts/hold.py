#!/usr/bin/env python3
"""A process that opens and holds files on command, for coordination tests.

Reads commands from stdin, one a line, answers each with one line on stdout:
  open r|w|rw|wt|a|rn|wn|wtn PATH   open (t: O_TRUNC, a writer that excludes every other open;
                           a: O_APPEND, an appender; n: O_NONBLOCK); answers "ok N" or "err ERRNO_NAME"
  read N                   read file N to the end; answers "data <text>" (newlines as |)
  write N TEXT             write TEXT at the end of file N; answers "ok"
  close N | close all      answers "ok"
  unlink PATH / rename A B answers "ok" or "err ERRNO_NAME"
  pid                      answers the process id
  exit                     closes everything and exits
"""
import errno
import os
import sys

files = {}
counter = 0
MODES = {"r": os.O_RDONLY, "w": os.O_WRONLY, "rw": os.O_RDWR, "wt": os.O_WRONLY | os.O_TRUNC, "a": os.O_WRONLY | os.O_APPEND,
         "rn": os.O_RDONLY | os.O_NONBLOCK, "wn": os.O_WRONLY | os.O_NONBLOCK, "wtn": os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK}


def answer(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


PREFERRED = {errno.EDEADLK: "EDEADLK", errno.EAGAIN: "EAGAIN"}  # not EDEADLOCK, EWOULDBLOCK


def failed(error):
    name = PREFERRED.get(error.errno) or errno.errorcode.get(error.errno, str(error.errno))
    answer("err " + name)


for line in sys.stdin:
    words = line.rstrip("\n").split(" ", 2)
    command = words[0]
    try:
        if command == "open":
            fd = os.open(words[2], MODES[words[1]])
            counter += 1
            files[counter] = fd
            answer("ok %d" % counter)
        elif command == "read":
            fd = files[int(words[1])]
            os.lseek(fd, 0, os.SEEK_SET)
            chunks = []
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
            answer("data " + b"".join(chunks).decode(errors="replace").replace("\n", "|"))
        elif command == "write":
            fd = files[int(words[1])]
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, (words[2] + "\n").encode())
            answer("ok")
        elif command == "close":
            targets = list(files) if words[1] == "all" else [int(words[1])]
            for number in targets:
                os.close(files.pop(number))
            answer("ok")
        elif command == "unlink":
            os.unlink(words[1])
            answer("ok")
        elif command == "rename":
            os.rename(words[1], words[2])
            answer("ok")
        elif command == "pid":
            answer(str(os.getpid()))
        elif command == "exit":
            break
        else:
            answer("err EINVAL")
    except OSError as error:
        failed(error)
for fd in files.values():
    os.close(fd)
