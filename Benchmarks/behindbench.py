#!/usr/bin/env python3
"""How soon a change made behind a mount reaches a watcher: a file written directly in the
backing directory (open, write, close), until `coordfs watch` on the mounted directory prints
its line. Once with the watch's mark on the backing directory's filesystem, once with a mark on
each directory (`--backing-watch-by-directory`). Prints p50, p99 and the largest, in ms.

The figure includes the watch's gathering window (5 ms after a first change) and the channel's
delivery to a separate process: what a presenter in another program sees.
"""
import os
import select
import subprocess
import sys
import tempfile
import time

import benchargs


def measure(binary, options, rounds):
    with tempfile.TemporaryDirectory(prefix="coordfs-behind-") as base:
        backing, point = os.path.join(base, "backing"), os.path.join(base, "mnt")
        os.makedirs(os.path.join(backing, "dir"))
        os.mkdir(point)
        subprocess.run([binary, "mount", backing, point, *options], check=True)
        watcher = None
        try:
            watcher = subprocess.Popen([binary, "watch", os.path.join(point, "dir")], stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL,
                                       bufsize=0)
            lines = watcher.stdout
            buffered = b""

            def next_line(timeout):
                nonlocal buffered
                deadline = time.monotonic() + timeout
                while b"\n" not in buffered:
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([lines], [], [], left)[0]:
                        return None
                    chunk = os.read(lines.fileno(), 65536)
                    if not chunk:
                        return None
                    buffered += chunk
                line, buffered = buffered.split(b"\n", 1)
                return line

            target = os.path.join(backing, "dir", "doc.txt")

            def write():
                with open(target, "w") as f:
                    f.write("x\n")

            # The watch is in place once a change is heard.
            for _ in range(50):
                write()
                if next_line(0.2) is not None:
                    break
            else:
                sys.exit("the watcher heard nothing")
            while next_line(0.3) is not None:
                pass
            delays = []
            for _ in range(rounds):
                started = time.monotonic()
                write()
                if next_line(5) is None:
                    sys.exit("a change was not heard within 5 s")
                delays.append((time.monotonic() - started) * 1000)
                while next_line(0.02) is not None:     # the rare second line of one change
                    pass
            return sorted(delays)
        finally:
            if watcher:
                watcher.kill()
                watcher.wait()
            if subprocess.run([binary, "unmount", point], capture_output=True).returncode != 0:
                subprocess.run(["umount", "--lazy", point])


def main():
    parser = benchargs.coordfs_parser(__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=benchargs.positive, default=200)
    arguments = parser.parse_args()
    binary = benchargs.executable(parser, arguments)
    print(f"change behind the mount -> coordfs watch line, {arguments.rounds} changes (ms):")
    print(f"{'mark':<28}{'p50':>8}{'p99':>8}{'max':>8}")
    for name, options in [("filesystem", []), ("each directory", ["--backing-watch-by-directory"])]:
        delays = measure(binary, options, arguments.rounds)
        p50 = delays[len(delays) // 2]
        p99 = delays[min(len(delays) - 1, (len(delays) * 99) // 100)]
        print(f"{name:<28}{p50:>8.1f}{p99:>8.1f}{delays[-1]:>8.1f}")


if __name__ == "__main__":
    main()
