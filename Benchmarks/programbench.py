#!/usr/bin/env python3
"""Real programs through coordfs, each run a fresh process (`make bench-programs`).

The same small tree (5000 files of 100 bytes to 9 KiB, and a copy of this repository's
Sources/) is made on several backing directories; each is mounted a different way, all at once.
Every round runs each program on every target, in a shuffled order, each run waiting past the
mounts' 1 s entry cache first (so that names are looked up again, as a new program's usually
are). It prints each target's median time per program and, paired round by round, its ratio to
the first coordfs target.

The targets: native (the backing directory itself), coordfs as mounted by default, coordfs
with its serving threads at the daemon's nice value (`--serve-nice=0`, see the README),
coordfs `--coordination off`, and with `--baseline OLD_BINARY` coordfs as another build mounts
it.
"""
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchargs import coordfs_parser, executable, positive  # noqa: E402

parser = coordfs_parser("real programs through coordfs mounts, each run a fresh process")
parser.add_argument("--rounds", type=positive, default=8, help="rounds, each running every program on every target (default 8)")
parser.add_argument("--baseline", metavar="BINARY",
                    help="another coordfs build, mounted as coordfs is, as a target of its own: what a change did")
arguments = parser.parse_args()
binary = executable(parser, arguments)
baseline = executable(parser, arguments, arguments.baseline, "--baseline") if arguments.baseline else None
sources = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Sources")

# (name, mount options or None for the backing directory itself, the build that mounts it)
TARGETS = [("native", None, None), ("coordfs", [], binary), ("serve-nice=0", ["--serve-nice=0"], binary),
           ("coordination off", ["--coordination", "off"], binary)]
if baseline:
    TARGETS.append(("baseline", [], baseline))
PROGRAMS = [
    ("cat 5000 files", "cat {d}/many/* > /dev/null"),
    # A process per file, as shell loops and builds run programs: each one's first call is new
    # to the mount.
    ("a cat each, 500 files", "for f in {d}/many/f00[0-4]*; do cat \"$f\"; done > /dev/null"),
    ("ls -l 5000 files", "ls -l {d}/many > /dev/null"),
    ("find -newer", "find {d} -newer /etc/hostname > /dev/null"),
    ("grep -r Sources/", "grep -r coordfs-never-there {d}/src > /dev/null; true"),
    ("du -s", "du -s {d} > /dev/null"),
    ("tar c 5000 files", "tar cf /dev/null -C {d} many"),
    ("cp -r Sources/ out", "rm -rf {scratch}/out && cp -r {d}/src {scratch}/out"),
    ("cp -r Sources/ in", "rm -rf {d}/in && cp -r {sources} {d}/in"),
    ("tar x Sources/ in", "rm -rf {d}/untar && mkdir {d}/untar && tar xf {scratch}/sources.tar -C {d}/untar"),
]

base = tempfile.mkdtemp(prefix="coordfs-programs-")
mounted = []
try:
    directories = {}
    for name, options, build in TARGETS:
        slot = os.path.join(base, "t%d" % len(directories))
        backing = os.path.join(slot, "backing")
        os.makedirs(os.path.join(backing, "many"))
        for index in range(5000):
            with open(os.path.join(backing, "many", "f%05d" % index), "w") as f:
                f.write(("line %d\n" % index) * (1 + index % 1000))
        shutil.copytree(sources, os.path.join(backing, "src"))
        if options is None:
            directories[name] = backing
            continue
        point = os.path.join(slot, "mnt")
        os.makedirs(point)
        subprocess.run([build, "mount", backing, point] + options, check=True)
        mounted.append((build, point))
        directories[name] = point
    scratch = os.path.join(base, "scratch")
    os.makedirs(scratch)
    subprocess.run(["tar", "cf", os.path.join(scratch, "sources.tar"), "-C", os.path.dirname(sources), "Sources"], check=True)
    times = {(program, name): [] for program, _ in PROGRAMS for name, _, _ in TARGETS}
    order = [name for name, _, _ in TARGETS]
    shuffler = random.Random(2026)
    for _ in range(arguments.rounds):
        for program, command in PROGRAMS:
            shuffler.shuffle(order)
            for name in order:
                time.sleep(1.1)
                began = time.perf_counter()
                subprocess.run(command.format(d=directories[name], scratch=scratch, sources=sources), shell=True, check=True)
                times[(program, name)].append(time.perf_counter() - began)
finally:
    for build, point in mounted:
        subprocess.run([build, "unmount", point])
    shutil.rmtree(base, ignore_errors=True)

names = [name for name, _, _ in TARGETS]
reference = names[1]
print("real programs, each a fresh process: %d rounds, shuffled; median seconds, and the paired median ratio to %s"
      % (arguments.rounds, reference))
width = max(len(program) for program, _ in PROGRAMS)
print("%-*s  %s" % (width, "program", "  ".join("%-20s" % name for name in names)))
for program, _ in PROGRAMS:
    cells = []
    for name in names:
        values = times[(program, name)]
        ratios = [mine / theirs for mine, theirs in zip(values, times[(program, reference)])]
        cells.append("%-20s" % ("%.3f" % statistics.median(values) if name == reference
                                else "%.3f (%.2fx)" % (statistics.median(values), statistics.median(ratios))))
    print("%-*s  %s" % (width, program, "  ".join(cells)))
