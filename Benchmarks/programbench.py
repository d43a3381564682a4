#!/usr/bin/env python3
"""Real programs through coordfs, each run a fresh process (`make bench-programs`).

  programbench.py COORDFS_BINARY [--rounds N] [--quick] [--on-tmp] [--programs WORD,...] [--build-jobs N]
                                 [--baseline OLD_BINARY] [--anchor NAME=PATH [--anchor-options OPTIONS] ...]

Every target's directory lies on one fresh journaled ext4 image (as fsbench.py's do; --on-tmp
uses /tmp instead), and so does a scratch directory holding what the programs read from outside
the targets: a generated source tree of small files (5000, of 200 bytes to 25 KiB, in directories
of 50), a bare git repository of it, a tar of it, a generated C tree and a copy of this
repository's Sources/. Each target's backing directory also holds 5000 files of 100 bytes to
9 KiB (`many`) and a copy of Sources/ (`src`), made before it is mounted.

Every round runs each program on every target, in a shuffled order (from a fixed seed). Before
each run, untimed: what the program needs (its output of the last round removed, the clone it
reads made if an earlier program did not), then `sync` (nothing dirty left by an earlier run),
then either a wait past the mounts' 1 s entry cache (names looked up again, as a new program's
usually are) or, for the programs marked "names dropped", the kernel made to drop its dentries
and inodes (every name costs a LOOKUP whatever a mount lets the kernel keep, as fsbench's
uncached jobs). Programs:

- the reading ones (cat, ls -l, find -newer, grep -r, du -s, tar c) and cp -r and tar x of
  Sources/, as before (find and du over `many` and `src` alone, the same tree in every round);
- `git clone` of the generated repository (--no-hardlinks: objects copied on every target, as
  they must be into a mount), `git status` in the clone just made (whose first status may
  rehash the files written in the clone's last tick) and again with names dropped;
  `find | xargs stat` of the clone, names dropped (named "find + xargs stat": a bar would
  split a Markdown table's cell); `rm -rf` of the clone, names dropped;
- `tar x` and `rsync -a` of the generated tree into the target;
- a parallel build: `make -jN` of a generated C tree of small units (with `cc -MMD`: an object
  and a dependency file per unit) copied into the target once; cleaned, untimed, before each
  round's build. Without a C compiler each unit is "compiled" by `cat`, still a process per
  file writing small files (the row says so).

It prints, as Markdown tables docs/performance.md takes, each target's speed against native
paired round by round (native's time over the target's in the same round: 1.0 is native's
speed, 0.5 half of it), median [smallest - largest] over the rounds; coordfs against
--coordination off and against the best other passthrough the same way; then the median
seconds.

The targets: native (the backing directory itself), coordfs as mounted by default, coordfs with
its serving threads at the daemon's nice value (`--serve-nice=0`, see the README; not with
--quick), coordfs `--coordination off`, each --anchor (libfuse's passthrough_hp, built as
docs/performance.md says; nothing here builds it), and with --baseline coordfs as another build
mounts it.
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
from benchargs import add_anchor_arguments, anchor_commands, coordfs_parser, executable, positive  # noqa: E402
from benchdisk import drop_caches, make_image, mount_fuse_program, unmount_image  # noqa: E402

parser = coordfs_parser("real programs through coordfs mounts, each run a fresh process")
parser.add_argument("--rounds", type=positive,
                    help="rounds, each running every program on every target (default 8, 3 with --quick)")
parser.add_argument("--quick", action="store_true",
                    help="smaller trees (2000 files to read, 1000 to clone, unpack and copy, 60 C units), "
                         "3 rounds, no --serve-nice=0 column: a few minutes")
parser.add_argument("--on-tmp", action="store_true", help="run in /tmp instead of a fresh ext4 image")
parser.add_argument("--programs", metavar="WORD,...",
                    help="keep only the programs whose names contain one of the words (e.g. --programs git,make)")
parser.add_argument("--build-jobs", type=positive, default=max(4, os.cpu_count() or 1),
                    help="make's -j for the parallel build (default the CPUs, at least 4)")
parser.add_argument("--baseline", metavar="BINARY",
                    help="another coordfs build, mounted as coordfs is, as a target of its own: what a change did")
add_anchor_arguments(parser)
arguments = parser.parse_args()
binary = executable(parser, arguments)
baseline = executable(parser, arguments, arguments.baseline, "--baseline") if arguments.baseline else None
quick = arguments.quick
rounds = arguments.rounds or (3 if quick else 8)
sources = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "Sources")
if not arguments.on_tmp and os.geteuid() != 0:
    parser.error("the ext4 image needs root (losetup, mount); --on-tmp runs in /tmp")

# (name, mount options or None for the backing directory itself, the build that mounts it, or,
# for an anchor, its command line)
TARGETS = [("native", None, None), ("coordfs", [], binary)]
if not quick:
    TARGETS.append(("serve-nice=0", ["--serve-nice=0"], binary))
TARGETS.append(("coordination off", ["--coordination", "off"], binary))
anchors = anchor_commands(parser, arguments, taken={name for name, _, _ in TARGETS} | {"baseline"})
TARGETS += [(name, command, None) for name, command in anchors]
anchor_names = [name for name, _ in anchors]
if baseline:
    TARGETS.append(("baseline", [], baseline))

# The sizes of what the programs work on.
many_files = 2000 if quick else 5000        # each target's `many`
tree_files = 1000 if quick else 5000        # the generated source tree: cloned, unpacked, copied
c_units = 60 if quick else 300              # the generated C tree's units
compiler = shutil.which("cc") or shutil.which("gcc")
jobs = arguments.build_jobs

clone = "[ -d {d}/clone ] || git clone -q --no-hardlinks {scratch}/repo.git {d}/clone"
# (name, command, untimed before it or None, names dropped before it, programs it needs). In
# each command {d} is the target's directory, {scratch} the scratch directory, {sources} its
# copy of Sources/.
PROGRAMS = [
    ("cat %d files" % many_files, "cat {d}/many/* > /dev/null", None, False, ["cat"]),
    # A process per file, as shell loops and builds run programs: each one's first call is new
    # to the mount.
    ("a cat each, 500 files", "for f in {d}/many/f00[0-4]*; do cat \"$f\"; done > /dev/null", None, False, ["cat"]),
    ("ls -l %d files" % many_files, "ls -l {d}/many > /dev/null", None, False, ["ls"]),
    # The walks go over `many` and `src` alone: the same tree in every round, whatever the
    # programs after them leave in the target.
    ("find -newer", "find {d}/many {d}/src -newer /etc/hostname > /dev/null", None, False, ["find"]),
    ("grep -r Sources/", "grep -r coordfs-never-there {d}/src > /dev/null; true", None, False, ["grep"]),
    ("du -s", "du -s {d}/many {d}/src > /dev/null", None, False, ["du"]),
    ("tar c %d files" % many_files, "tar cf /dev/null -C {d} many", None, False, ["tar"]),
    ("cp -r Sources/ out", "rm -rf {scratch}/out && cp -r {d}/src {scratch}/out", None, False, ["cp"]),
    ("cp -r Sources/ in", "rm -rf {d}/in && cp -r {sources} {d}/in", None, False, ["cp"]),
    ("tar x Sources/ in", "rm -rf {d}/untar && mkdir {d}/untar && tar xf {scratch}/sources.tar -C {d}/untar",
     None, False, ["tar"]),
    ("git clone, %d files" % tree_files, "git clone -q --no-hardlinks {scratch}/repo.git {d}/clone",
     "rm -rf {d}/clone", False, ["git"]),
    ("git status", "git -C {d}/clone status --porcelain > /dev/null", clone, False, ["git"]),
    ("git status, names dropped", "git -C {d}/clone status --porcelain > /dev/null", clone, True, ["git"]),
    ("find + xargs stat, names dropped", "find {d}/clone -print0 | xargs -0 stat > /dev/null", clone, True,
     ["git", "find", "xargs", "stat"]),
    ("rm -rf %d files, names dropped" % tree_files, "rm -rf {d}/clone", clone, True, ["git", "rm"]),
    ("tar x, %d files" % tree_files, "tar xf {scratch}/tree.tar -C {d}/untar-tree",
     "rm -rf {d}/untar-tree && mkdir {d}/untar-tree", False, ["tar"]),
    ("rsync -a, %d files" % tree_files, "rsync -a {scratch}/tree/ {d}/rsync/", "rm -rf {d}/rsync", False, ["rsync"]),
    ("make -j%d, %d C units%s" % (jobs, c_units, "" if compiler else " by cat"),
     "make -s -C {d}/build -j%d > /dev/null" % jobs,
     "{{ [ -d {d}/build ] || cp -r {scratch}/ctree {d}/build; }} && make -s -C {d}/build clean", False, ["make"]),
]
if arguments.programs:
    words = [word for word in arguments.programs.split(",") if word]
    PROGRAMS = [program for program in PROGRAMS if any(word in program[0] for word in words)]
    if not PROGRAMS:
        parser.error(f"--programs {arguments.programs}: no program matches")
missing = {tool for *_, tools in PROGRAMS for tool in tools if not shutil.which(tool)}
left_out = [name for name, *_, tools in PROGRAMS if set(tools) & missing]
PROGRAMS = [program for program in PROGRAMS if not set(program[4]) & missing]
# Git as the user's configuration does not shape it (none read), and the build's make as the
# make that may have started this does not (its flags and jobserver left out).
ENVIRONMENT = {name: value for name, value in os.environ.items() if name not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
ENVIRONMENT.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null")


def text_block(rng, size=1 << 16):
    """`size` bytes of source-like text: lines of words, slices of which make the tree's files."""
    words = ["int", "return", "static", "const", "struct", "self", "value", "count", "name", "index", "buffer",
             "if", "else", "for", "while", "let", "func", "import", "#include", "{", "}", "(", ")", ";", "=", "+"]
    lines, total = [], 0
    while total < size:
        line = "    " * rng.randrange(4) + " ".join(rng.choice(words) for _ in range(rng.randrange(1, 12))) + "\n"
        lines.append(line)
        total += len(line)
    return "".join(lines)


def make_source_tree(root, files, rng):
    """`files` files of 200 bytes to 25 KiB (most of them small, as a source tree's), 50 to a
    directory, ten directories to a parent: deterministic for a seed."""
    block = text_block(rng)
    extensions = ["c", "h", "swift", "py", "md", "txt"]
    for index in range(files):
        directory = os.path.join(root, "m%02d" % (index // 500), "s%d" % (index // 50 % 10))
        os.makedirs(directory, exist_ok=True)
        size = int(200 * 2 ** rng.uniform(0, 7))
        start = rng.randrange(len(block) - size)
        with open(os.path.join(directory, "f%04d.%s" % (index, rng.choice(extensions))), "w") as out:
            out.write(block[start:start + size])


def make_c_tree(root, units, compiler):
    """A C program of `units` small units (each including three of 20 headers) and a Makefile
    building one object and one dependency file per unit into obj/, then linking them; without
    a compiler the Makefile "compiles" with cat: still a process per unit writing small files."""
    os.makedirs(os.path.join(root, "include"))
    os.makedirs(os.path.join(root, "src"))
    for header in range(20):
        with open(os.path.join(root, "include", "h%02d.h" % header), "w") as out:
            out.write("#ifndef H%02d_H\n#define H%02d_H\n#define H%02d_CONST %d\n"
                      % (header, header, header, header + 1))
            out.write("struct h%02d { int a, b; long c[%d]; };\n#endif\n" % (header, header + 1))
    for unit in range(units):
        headers = [(unit * 7 + k * 3) % 20 for k in range(3)]
        with open(os.path.join(root, "src", "u%03d.c" % unit), "w") as out:
            out.write("".join('#include "h%02d.h"\n' % header for header in headers))
            for function in range(8):
                out.write("int u%03d_f%d(int x) {\n    int y = x * %d;\n    for (int i = 0; i < x; i++) y ^= y << 3;\n"
                          "    return y + H%02d_CONST;\n}\n" % (unit, function, function + 1, headers[function % 3]))
    with open(os.path.join(root, "src", "main.c"), "w") as out:
        out.write("int main(void) { return 0; }\n")
    if compiler:
        compile_rule = "\t%s -Og -Iinclude -MMD -MP -c $< -o $@\n" % compiler
        link_rule = "\t%s -o $@ $(OBJS)\n" % compiler
    else:
        compile_rule = "\tcat $< > $@ && echo '$@: $<' > $(@:.o=.d)\n"
        link_rule = "\tcat $(OBJS) > $@\n"
    with open(os.path.join(root, "Makefile"), "w") as out:
        out.write("SRCS := $(wildcard src/*.c)\nOBJS := $(patsubst src/%.c,obj/%.o,$(SRCS))\n"
                  "prog: $(OBJS)\n" + link_rule +
                  "obj/%.o: src/%.c | obj\n" + compile_rule +
                  "obj:\n\tmkdir -p obj\n"
                  "clean:\n\trm -rf obj prog\n"
                  ".PHONY: clean\n"
                  "-include $(OBJS:.o=.d)\n")


def run(command, **places):
    """Runs `command` in a shell; what it says on stderr is passed on, and kept in the error
    when it fails."""
    result = subprocess.run(command.format(**places), shell=True, env=ENVIRONMENT, stderr=subprocess.PIPE)
    sys.stderr.buffer.write(result.stderr)
    result.check_returncode()


# The anchors that failed a program: what failed, and how.
failed = {}


base = tempfile.mkdtemp(prefix="coordfs-programs-", dir="/tmp")
image = None
unmounts = []
times = {}
try:
    root = base if arguments.on_tmp else make_image(base, size_gib=2 if quick else 4)
    image = None if arguments.on_tmp else root
    scratch = os.path.join(root, "scratch")
    os.makedirs(scratch)
    rng = random.Random(58)
    # What the programs read from outside the targets, on the same filesystem as the targets.
    shutil.copytree(sources, os.path.join(scratch, "Sources"))
    subprocess.run(["tar", "cf", os.path.join(scratch, "sources.tar"), "-C", scratch, "Sources"], check=True)
    make_source_tree(os.path.join(scratch, "tree"), tree_files, rng)
    subprocess.run(["tar", "cf", os.path.join(scratch, "tree.tar"), "-C", os.path.join(scratch, "tree"), "."],
                   check=True)
    if shutil.which("git"):
        git = ["git", "--git-dir=" + os.path.join(scratch, "repo.git"), "--work-tree=" + os.path.join(scratch, "tree")]
        subprocess.run(["git", "init", "-q", "--bare", os.path.join(scratch, "repo.git")], check=True, env=ENVIRONMENT)
        subprocess.run(git + ["add", "-A"], check=True, env=ENVIRONMENT)
        subprocess.run(git + ["-c", "user.name=coordfs bench", "-c", "user.email=bench@localhost",
                              "commit", "-q", "-m", "a generated tree"], check=True, env=ENVIRONMENT)
        subprocess.run(git + ["gc", "-q"], check=True, env=ENVIRONMENT)
    make_c_tree(os.path.join(scratch, "ctree"), c_units, compiler)

    directories = {}
    for name, options, build in TARGETS:
        slot = os.path.join(root, "t%d" % len(directories))
        backing = os.path.join(slot, "backing")
        os.makedirs(os.path.join(backing, "many"))
        for index in range(many_files):
            with open(os.path.join(backing, "many", "f%05d" % index), "w") as f:
                f.write(("line %d\n" % index) * (1 + index % 1000))
        shutil.copytree(sources, os.path.join(backing, "src"))
        if options is None:
            directories[name] = backing
            continue
        point = os.path.join(slot, "mnt")
        os.makedirs(point)
        if name in anchor_names:
            unmounts.append(mount_fuse_program(options, backing, point))
        else:
            subprocess.run([build, "mount", backing, point] + options, check=True)
            unmounts.append(lambda build=build, point=point: subprocess.run([build, "unmount", point]))
        directories[name] = point

    times = {(program, name): [] for program, *_ in PROGRAMS for name, _, _ in TARGETS}
    order = [name for name, _, _ in TARGETS]
    shuffler = random.Random(2026)
    for _ in range(rounds):
        for program, command, before, dropped, _ in PROGRAMS:
            shuffler.shuffle(order)
            for name in order:
                if name in failed:
                    continue
                places = {"d": directories[name], "scratch": scratch, "sources": os.path.join(scratch, "Sources")}
                try:
                    if before:
                        run(before, **places)
                    if dropped:
                        drop_caches(2)
                    else:
                        subprocess.run(["sync"])
                        time.sleep(1.1)
                    began = time.perf_counter()
                    run(command, **places)
                except subprocess.CalledProcessError as error:
                    # Another passthrough that fails a program is left out from then on, and the
                    # tables say where and how; coordfs and native failing ends the run.
                    if name not in anchor_names:
                        raise
                    failed[name] = "%s: %s" % (program, (error.stderr or b"").decode(errors="replace").strip()[-300:]
                                               or "exit %d" % error.returncode)
                    continue
                times[(program, name)].append(time.perf_counter() - began)
finally:
    for unmount in unmounts:
        unmount()
    if image:
        unmount_image(image)
    shutil.rmtree(base, ignore_errors=True)

names = [name for name, _, _ in TARGETS]
others = names[1:]


def speeds(name, base_name, program):
    """`name`'s speed against `base_name`'s round by round: the base's seconds over its own."""
    return [theirs / mine for mine, theirs in zip(times[(program, name)], times[(program, base_name)]) if mine]


def speed_cell(ratios):
    """The median of round-by-round speeds and the smallest and largest: "0.45× [0.41–0.48]"."""
    if not ratios:
        return "–"
    if len(ratios) == 1:
        return "%.2f×" % ratios[0]
    return "%.2f× [%.2f–%.2f]" % (statistics.median(ratios), min(ratios), max(ratios))


def target_cell(program, name):
    """`name`'s speed in `program` against native; the rounds it ran where it failed one."""
    ran = len(times[(program, name)])
    if ran == 0:
        return "failed"
    return speed_cell(speeds(name, "native", program)) + ("" if ran == rounds else " (%d of %d rounds)" % (ran, rounds))


def best_other(program):
    """The anchor with the shortest median time in `program`, of those that ran it every round
    (None: none did)."""
    ran = [name for name in anchor_names if len(times[(program, name)]) == rounds]
    return min(ran, key=lambda name: statistics.median(times[(program, name)])) if ran else None


def median_seconds(program, name):
    seconds = times[(program, name)]
    return "%.3f" % statistics.median(seconds) if len(seconds) == rounds else "–"


print("real programs, each a fresh process: %d rounds, shuffled; %s; make -j%d%s"
      % (rounds, "a loop-mounted journaled ext4" if image else "/tmp", jobs,
         "" if compiler else ", no C compiler: units made by cat"))
for name, command in anchors:
    print("anchor %s: %s" % (name, " ".join(command).replace("{{", "{").replace("}}", "}")))
print("trees: %d files to read, %d to clone, unpack and copy, %d C units" % (many_files, tree_files, c_units))
if os.geteuid() != 0 and any(program[3] for program in PROGRAMS):
    print("not root: the kernel's caches could not be dropped; the rows that say \"names dropped\" are not")
if left_out:
    print("left out, for want of %s: %s" % (", ".join(sorted(missing)), "; ".join(left_out)))
for name, why in failed.items():
    print("%s failed %s; left out from then on" % (name, why))
print()
print("speed against native, paired round by round (native's seconds over the target's): "
      "median [smallest–largest]; native's median seconds")
print()
columns = others + (["coordfs against off"] if "coordination off" in names else []) + \
    (["coordfs against baseline"] if baseline else []) + \
    (["coordfs against the best other"] if anchor_names else [])
print("| program | native | %s |" % " | ".join(columns))
print("|" + " --- |" * (2 + len(columns)))
for program, *_ in PROGRAMS:
    cells = [program, "%.3f s" % statistics.median(times[(program, "native")])]
    cells += [target_cell(program, name) for name in others]
    if "coordination off" in names:
        cells.append(speed_cell(speeds("coordfs", "coordination off", program)))
    if baseline:
        cells.append(speed_cell(speeds("coordfs", "baseline", program)))
    if anchor_names:
        best = best_other(program)
        cells.append("%s of %s" % (speed_cell(speeds("coordfs", best, program)), best) if best else "–")
    print("| " + " | ".join(cells) + " |")
print()
print("median seconds")
print()
print("| program | %s |" % " | ".join(names))
print("|" + " --- |" * (1 + len(names)))
for program, *_ in PROGRAMS:
    print("| " + " | ".join([program] + [median_seconds(program, name) for name in names]) + " |")
