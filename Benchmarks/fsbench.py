#!/usr/bin/env python3
"""The filesystem benchmark of `make bench`: one fixed job set against the native backing
directory and several FUSE mounts of the same kind of directory, repeats interleaved, printed as
one table of medians with each target's ratio to native.

  fsbench.py COORDFS_BINARY [--repeats N] [--quick] [--on-tmp] [--jobs WORD,...] [--chunks N] [--control]
                            [--baseline OTHER_BINARY ...] [--coordfs-only] [--clients 1,2,4,8]
                            [--anchor NAME=PATH [--anchor-options OPTIONS] ...]

--jobs keeps the jobs whose names contain one of the words (e.g. --jobs write,create).

The data jobs run on one target after another; the metadata jobs run on all targets at once,
interleaved chunk by chunk (see `metadata`), since their differences are a few per cent. The
sequential write, the warm sequential read and the cached random read are also timed that way,
paired chunk by chunk with native (`paired_seq_write`, `paired_reads`).

--clients adds the metadata jobs run by several client processes at once (`many_clients`): for
each count, the clients in directories of their own and all in one directory, chunked and paired
as the other metadata jobs are; the jobs' names say "client" (--jobs client keeps only them). A
table of their ratios to native, in Markdown, follows the others.

Targets: native, coordfs (coordination on), coordfs --coordination off, coordfs without kernel
passthrough, and, when available, bindfs and libfuse's passthrough_ll (built from the
libfuse3-dev examples). --baseline adds another coordfs build (it may be given more than once),
coordination on, and pairs coordfs against it as against --coordination off: what a change to
the code did, measured side by side. --coordfs-only leaves out the targets that are not coordfs
with passthrough. --anchor NAME=PATH adds another passthrough filesystem (libfuse's passthrough_hp,
built as docs/performance.md says) as a column, with --coordfs-only too; coordfs's metadata jobs
are held to the best of passthrough_ll, bindfs and the anchors.

Every target's directory lies on one fresh, journaled ext4 image, loop-mounted with direct I/O
(this machine's root filesystem has no journal and its metadata
timings are bimodal). --on-tmp uses /tmp instead.
"""
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time


from benchargs import add_anchor_arguments, anchor_commands, coordfs_parser, executable, positive, positive_list
from benchdisk import drop_caches, make_image, mount_fuse_program, sh, unmount_image

parser = coordfs_parser("coordfs filesystem benchmark (run by `make bench`).")
parser.add_argument("--repeats", type=positive, default=3, help="rounds, interleaved across targets (default 3)")
parser.add_argument("--quick", action="store_true", help="64 MiB files, 2 s jobs, 1000 metadata operations")
parser.add_argument("--on-tmp", action="store_true", help="benchmark in /tmp instead of a fresh ext4 image")
parser.add_argument("--jobs", metavar="WORD,...", help="keep only the jobs whose names contain one of the words")
parser.add_argument("--chunks", type=positive, default=80,
                    help="chunks a metadata job is cut into, each run on every target in turn (default 80)")
parser.add_argument("--control", action="store_true",
                    help="an A/A run: the coordfs column mounted with --coordination off as well, so the "
                         "paired estimate shows its own bias")
parser.add_argument("--baseline", metavar="BINARY", action="append", default=[],
                    help="another coordfs build, coordination on, as a column of its own, paired chunk by "
                         "chunk with coordfs and with --coordination off (may be given more than once)")
parser.add_argument("--coordfs-options", metavar="OPTIONS", default="",
                    help="more options for every coordfs mount, space-separated (say --coordfs-options=--no-io-uring "
                         "to measure through /dev/fuse)")
parser.add_argument("--column-options", metavar="OPTIONS", default="",
                    help="more options for the coordfs column's mount alone, space-separated: with --baseline naming "
                         "the same build, the two columns compare a mount with these options against one without "
                         "(say --column-options='--cluster etcd://HOST:PORT --cluster-store bench')")
parser.add_argument("--engine-busy", nargs="?", const="elsewhere", choices=["elsewhere", "beside", "coordinate"],
                    help="keep a file open on every mount throughout, so that a coordfs engine always holds "
                         "something: at the mount's root (elsewhere, the default: the metadata jobs' requests "
                         "may pass beside it) or in the metadata jobs' own directory (beside: those about other names "
                         "pass its name's gate); or, on the coordfs mounts, hold a read of a file at the root with "
                         "`coordfs coordinate` (coordinate: every request is coordinated in full, and looks for the "
                         "caller among the descendants the hold is lent to)")
parser.add_argument("--coordfs-only", action="store_true",
                    help="leave out no-passthrough, bindfs and passthrough_ll (quicker A/B runs); anchors stay")
parser.add_argument("--clients", metavar="N,...", type=positive_list,
                    help="also run the metadata jobs (create+close, stat, unlink, create+close+unlink) with this "
                         "many client processes at once, in directories of their own and in one directory "
                         "(`make bench` says 1,2,4,8)")
add_anchor_arguments(parser)
arguments = parser.parse_args()
binary = executable(parser, arguments)
# Column names: "baseline", or "baseline-1", "baseline-2", ... for several.
baselines = [("baseline" if len(arguments.baseline) == 1 else "baseline-%d" % (index + 1),
              executable(parser, arguments, other, named="--baseline"))
             for index, other in enumerate(arguments.baseline)]
baseline_names = {name for name, _ in baselines}
anchors = anchor_commands(parser, arguments, taken={"native", "coordfs", "coordfs-off", "no-passthrough", "bindfs",
                                                   "passthrough_ll", *baseline_names})
anchor_names = [name for name, _ in anchors]
repeats = arguments.repeats
quick = arguments.quick
size_mb = 64 if quick else 256
runtime = 2 if quick else 4
files = 1000 if quick else 4000
base = tempfile.mkdtemp(prefix="coordfs-bench-", dir="/tmp")
image_mount = None


def mount_image():
    """The run's fresh journaled ext4 image (`benchdisk.make_image`): every target's directory lies on it.

    16 GiB: a round's data files take about 0.6 GiB a target, and each coordfs mount keeps what
    the jobs replace and remove as versions, up to its 1 GiB default; 8 GiB filled up before the
    metadata jobs of the first round."""
    global base, image_mount
    image_mount = base = make_image(base, size_gib=16 if not quick else 8)


def build_passthrough_ll():
    examples = "/usr/share/doc/libfuse3-dev/examples"
    if not os.path.exists(examples + "/passthrough_ll.c"):
        return None
    os.makedirs(os.path.join(base, "bin"), exist_ok=True)
    target = os.path.join(base, "bin", "passthrough_ll")
    try:
        flags = sh("pkg-config", "fuse3", "--cflags", "--libs").stdout.split()
        sh("gcc", "-O2", "-o", target, examples + "/passthrough_ll.c", "-I", examples, *flags)
        return target
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


# The file --engine-busy keeps open, left alone between rounds.
BUSY_NAME = ".engine-busy"
# The metadata jobs' directory.
META = "meta"


class Target:
    def __init__(self, name, mount):
        self.name = name
        self.mount = mount          # a function(backing, mountpoint) -> unmount function, or None for native
        self.backing = os.path.join(base, name, "backing")
        self.point = os.path.join(base, name, "mnt")
        os.makedirs(self.backing)
        os.makedirs(self.point)
        self.unmount = mount(self.backing, self.point) if mount else None
        self.directory = self.point if mount else self.backing
        self.held = None
        self.holder = None          # the `coordfs coordinate` process of --engine-busy=coordinate
        if arguments.engine_busy == "coordinate":
            path = os.path.join(self.directory, BUSY_NAME)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
            build = getattr(mount, "build", None)
            if build:
                self.holder = subprocess.Popen([build, "coordinate", "--read", path, "--", "sleep", "1000000"])
                for _ in range(200):    # held once `coordfs status` lists it
                    listing = subprocess.run([build, "status", self.point], capture_output=True, text=True).stdout
                    if "HOLD" in listing:
                        break
                    time.sleep(0.05)
        elif arguments.engine_busy:
            # A hold for the run's length: the engine is never idle (see --engine-busy).
            if arguments.engine_busy == "beside":
                os.makedirs(os.path.join(self.directory, META))
            path = os.path.join(self.directory, META if arguments.engine_busy == "beside" else "", BUSY_NAME)
            try:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
                self.held = os.open(path, os.O_RDONLY)
            except OSError:
                if self.unmount:
                    self.unmount()
                raise


def coordfs(*extra, build=None):
    """Mounts with `build` (default: the binary named on the command line)."""
    program = build or binary

    def mount(backing, point):
        sh(program, "mount", backing, point, *extra, *arguments.coordfs_options.split())
        return lambda: subprocess.run([program, "unmount", point])
    mount.build = program
    return mount


def fuse_program(*command):
    """Mounts with a FUSE program other than coordfs ({backing} and {point} in `command`)."""
    return lambda backing, point: mount_fuse_program(command, backing, point)


targets = []


def fio(directory, name, *options):
    result = subprocess.run(["fio", "--name=" + name, "--directory=" + directory, "--output-format=json",
                             "--group_reporting", *options], capture_output=True, text=True)
    report = json.loads(result.stdout[result.stdout.index("{"):])["jobs"][0]
    return report


def settle():
    """Writes back what earlier jobs and targets left dirty (the read jobs' files are not
    fsynced, the random writes are timed without, and a round ends by deleting every file), so
    that a write job is not charged with writing back a previous one's data."""
    subprocess.run(["sync"])


def job_seq_write(t):
    # Until the data is on disk: a filesystem's write throughput, not the page cache's.
    settle()
    r = fio(t.directory, "seqwrite", "--rw=write", "--bs=1m", "--size=%dm" % size_mb, "--end_fsync=1", "--ioengine=psync")
    return r["write"]["bw_bytes"] / 2**20


# Sequential writes paired chunk by chunk (`paired_seq_write`): each chunk this many MiB.
write_chunk_mb = 16 if quick else 32
write_chunks = 8 if quick else 16


def same_path_targets(ts):
    """The targets whose reads and writes take the same path as coordfs's (kernel passthrough)
    or none: native, coordfs, --coordination off and the baselines."""
    return [t for t in ts if t.name in ("native", "coordfs", "coordfs-off") or t.name in baseline_names]


def paired_seq_write(ts):
    """Sequential writes timed as the metadata jobs are, chunk by chunk: a fresh file of
    `write_chunk_mb` MiB written in 1 MiB blocks and fsynced on each target in turn (a shuffled
    order per chunk), so that each pair of chunks ran within a second of each other. The fio job
    above times 256 MiB per target a minute or more apart, and this VM's disk drifts so much in
    between that its repeats lie 100-500 % apart; a chunk's pair shares the disk's mood.
    Only `same_path_targets`."""
    block = os.urandom(1 << 20)
    order = same_path_targets(ts)
    for _ in range(write_chunks):
        shuffler.shuffle(order)
        settle()
        rates = {}
        for t in order:
            path = os.path.join(t.directory, "paired-write")
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            try:
                began = time.perf_counter()
                for _ in range(write_chunk_mb):
                    os.write(fd, block)
                os.fsync(fd)
                rates[t.name] = write_chunk_mb / (time.perf_counter() - began)
            finally:
                os.close(fd)
            os.unlink(path)
        chunks.setdefault("seq write", []).append(rates)


def prepare_read_file(t):
    path = os.path.join(t.directory, "seqread.0.0")
    if not os.path.exists(path):
        fio(t.directory, "seqread", "--rw=write", "--bs=1m", "--size=%dm" % size_mb)


def job_seq_read_cold(t):
    prepare_read_file(t)
    drop_caches()
    return fio(t.directory, "seqread", "--rw=read", "--bs=1m", "--size=%dm" % size_mb)["read"]["bw_bytes"] / 2**20


# fio drops a file's cached pages before each job unless told not to (invalidate=0).
def cache_read_file(t):
    """Makes the read file if need be and reads it once, so that all of it is cached."""
    prepare_read_file(t)
    fio(t.directory, "seqread", "--rw=read", "--bs=1m", "--size=%dm" % size_mb, "--invalidate=0")


def job_seq_read_warm(t):
    cache_read_file(t)
    # Time-based: one pass over the cached file took 12 ms on a fast VM (run 46), too short for
    # fio's clock, which gave native and both coordfs columns the same 21333 MiB/s.
    return fio(t.directory, "seqread", "--rw=read", "--bs=1m", "--size=%dm" % size_mb, "--invalidate=0",
               "--time_based", "--runtime=%d" % runtime)["read"]["bw_bytes"] / 2**20


def job_rand_read(t):
    cache_read_file(t)
    return fio(t.directory, "seqread", "--rw=randread", "--bs=4k", "--size=%dm" % size_mb, "--invalidate=0",
               "--time_based", "--runtime=%d" % runtime)["read"]["iops"]


# Reads of cached data paired chunk by chunk (`paired_reads`): chunks per round, and each
# random read's seconds.
read_chunks = 4 if quick else 8
paired_read_seconds = 1
# Each warm read chunk reads the file this many times: one pass takes about a tenth of a second.
warm_read_loops = 4


def paired_reads(ts, phases):
    """The warm sequential read and the cached random read, timed as the sequential writes are
    paired: short fio jobs on each target in turn, a shuffled order per chunk, so that a chunk's
    pair ran within a second or two of each other. The table's fio jobs run a minute or more
    apart per target, and the host's pace drifts between them: in run 43 the warm read's repeats
    lay 39-58 % apart, and its medians said 0.82x where its rounds said 0.96x.

    `phases`: "seq read warm" (the read file `warm_read_loops` times in 1 MiB blocks from the
    page cache) and/or "rand read cached" (4 KiB random reads of it for `paired_read_seconds`).
    Only `same_path_targets`; each one's read file is made and cached first."""
    order = same_path_targets(ts)
    for t in order:
        cache_read_file(t)
    for _ in range(read_chunks):
        if "seq read warm" in phases:
            shuffler.shuffle(order)
            chunks.setdefault("seq read warm", []).append({
                t.name: fio(t.directory, "seqread", "--rw=read", "--bs=1m", "--size=%dm" % size_mb,
                            "--invalidate=0", "--loops=%d" % warm_read_loops)["read"]["bw_bytes"] / 2**20
                for t in order})
        if "rand read cached" in phases:
            shuffler.shuffle(order)
            chunks.setdefault("rand read cached", []).append({
                t.name: fio(t.directory, "seqread", "--rw=randread", "--bs=4k", "--size=%dm" % size_mb,
                            "--invalidate=0", "--time_based", "--runtime=%d" % paired_read_seconds)["read"]["iops"]
                for t in order})


def job_rand_write(t):
    settle()
    return fio(t.directory, "randwrite", "--rw=randwrite", "--bs=4k", "--size=%dm" % (size_mb // 4),
               "--time_based", "--runtime=%d" % runtime)["write"]["iops"]


def job_four_writers(t):
    settle()
    return fio(t.directory, "four", "--rw=write", "--bs=1m", "--size=%dm" % (size_mb // 4), "--numjobs=4",
               "--end_fsync=1")["write"]["bw_bytes"] / 2**20


shuffler = random.Random(2026)
# Each metadata chunk's rate per target, by phase: coordfs and --coordination off ran the same
# chunk moments apart, so their ratio chunk by chunk is free of the drift between chunks.
chunks = {}


def metadata(ts, phase):
    """One metadata job on every target at once, chunk by chunk: chunk k runs on each target in
    turn before chunk k+1 runs anywhere, so whatever drifts during the job (a journal commit,
    the host's other guests) falls on all targets alike. A target's result is the median of its
    chunks' rates.

    The order is shuffled for each chunk (from a fixed seed, so runs compare). A fixed order,
    even one alternating forwards and backwards, puts the same target next to native's chunk
    every time, and on this VM whichever target that was ran up to a quarter slower: a
    position, not a filesystem, was being measured.

    Each job makes its own starting state. The stat and unlink jobs wait past every mount's 1 s
    entry and attribute cache first, and make the kernel drop its dentries and inodes (a mount
    may let it keep them longer): each call then costs a LOOKUP as well, the per-request cost
    of the mount rather than the timing of the kernel's cache (and an old tree's `rm -r` looks
    up every name too); "stat just created" stats files made just before, chunk by chunk,
    which the kernel may still know (a build's `make` checking what it wrote): there a mount's
    cache timeouts count.
    "stat, asked again" stats files that were stat'ed twice before, 1.5 s apart, the last
    1.5 s before (a build checking its tree once more): what a mount lets the kernel keep past
    a short timeout. "cycle" creates, closes and unlinks each file in turn (a build's temporary
    files): three round trips, and an inode made and forgotten, per file."""
    names = {}
    for t in ts:
        directory = os.path.join(t.directory, META)
        os.makedirs(directory, exist_ok=True)
        names[t.name] = [os.path.join(directory, "f%05d" % i) for i in range(files)]
        if phase not in ("create", "cycle", "stat just created"):
            for name in names[t.name]:
                fd = os.open(name, os.O_CREAT | os.O_WRONLY, 0o644)
                # A document to save over: content a version of it keeps.
                if phase == "save":
                    os.write(fd, DOCUMENT)
                os.close(fd)
    if phase == "stat asked again":
        for _ in range(2):
            for t in ts:
                for name in names[t.name]:
                    os.stat(name)
            time.sleep(1.5)
    if phase in ("stat", "unlink"):
        time.sleep(1.5)
        # Past a 1 s timeout, and out of the kernel's caches whatever a mount's timeout: a
        # coordfs mount that watches its backing directory lets the kernel keep names for a day.
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as caches:
            caches.write("2\n")
    rates = {t.name: [] for t in ts}
    chunk = max(1, files // arguments.chunks)
    order = list(ts)
    for start in range(0, files, chunk):
        shuffler.shuffle(order)
        for t in order:
            batch = names[t.name][start:start + chunk]
            if phase == "stat just created":
                # Made right before they are stat'ed, chunk by chunk: made all at first, the
                # files of the targets made first had outlived a mount's short cache time by
                # the time their stats came, those made last had not.
                for name in batch:
                    os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))
            began = time.perf_counter()
            for name in batch:
                if phase == "create":
                    os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))
                elif phase == "cycle":
                    os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))
                    os.unlink(name)
                elif phase in ("stat", "stat just created", "stat asked again"):
                    os.stat(name)
                elif phase == "rename":
                    os.rename(name, name + "r")
                elif phase == "save":
                    # An editor's atomic save: the new content beside, renamed over the old.
                    fd = os.open(name + ".tmp", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
                    os.write(fd, DOCUMENT)
                    os.close(fd)
                    os.rename(name + ".tmp", name)
                else:
                    os.unlink(name)
            rates[t.name].append(len(batch) / (time.perf_counter() - began))
        chunks.setdefault(phase, []).append({t.name: rates[t.name][-1] for t in ts})
    for t in ts:
        if arguments.engine_busy == "beside":
            for name in names[t.name]:     # the held file stays
                if os.path.lexists(name):
                    os.unlink(name)
        else:
            shutil.rmtree(os.path.join(t.directory, META))
    return {name: statistics.median(values) for name, values in rates.items()}


def job_walk(ts):
    """`ls -l` of every directory of a tree walked once just before (a second `find -ls`, a
    build's check of what is up to date): a readdir and an lstat of each entry, answered from
    what the kernel keeps, for as long as a mount lets it. Chunked and shuffled as `metadata`;
    the rate is entries a second."""
    per_directory = 100
    directories = {}
    for t in ts:
        tree = os.path.join(t.directory, META)
        directories[t.name] = [os.path.join(tree, "d%04d" % d) for d in range(max(1, files // per_directory))]
        for directory in directories[t.name]:
            os.makedirs(directory)
            for i in range(per_directory):
                os.close(os.open(os.path.join(directory, "f%03d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
    def walk(some):
        count = 0
        for directory in some:
            with os.scandir(directory) as entries:
                for entry in entries:
                    entry.stat(follow_symlinks=False)
                    count += 1
        return count
    for t in ts:
        walk(directories[t.name])
    rates = {t.name: [] for t in ts}
    total = len(directories[ts[0].name])
    chunk = max(1, total // arguments.chunks)
    order = list(ts)
    for start in range(0, total, chunk):
        shuffler.shuffle(order)
        for t in order:
            began = time.perf_counter()
            count = walk(directories[t.name][start:start + chunk])
            rates[t.name].append(count / (time.perf_counter() - began))
        chunks.setdefault("walk", []).append({t.name: rates[t.name][-1] for t in ts})
    for t in ts:
        shutil.rmtree(os.path.join(t.directory, META))
    return {name: statistics.median(values) for name, values in rates.items()}


def job_create(ts): return metadata(ts, "create")
def job_stat(ts): return metadata(ts, "stat")
def job_stat_just_created(ts): return metadata(ts, "stat just created")
def job_stat_asked_again(ts): return metadata(ts, "stat asked again")
def job_unlink(ts): return metadata(ts, "unlink")
def job_cycle(ts): return metadata(ts, "cycle")
def job_rename(ts): return metadata(ts, "rename")
def job_save(ts): return metadata(ts, "save")


# What "save" writes: a small document.
DOCUMENT = b"x" * 512


# The many-clients jobs (--clients): chunks per job, and each client's calls in a chunk.
client_chunks = 10 if quick else 20
client_calls = 25 if quick else 50
# The phases the clients run, as the jobs name them.
CLIENT_PHASES = [("create", "create+close"), ("stat", "stat, uncached"), ("unlink", "unlink, uncached"),
                 ("cycle", "create+close+unlink")]


def client_calls_run(phase, names):
    """One client's calls of `phase` on `names` (see `metadata`; "prepare" makes the files)."""
    for name in names:
        if phase in ("create", "prepare"):
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))
        elif phase == "stat":
            os.stat(name)
        elif phase == "unlink":
            os.unlink(name)
        else:   # cycle
            os.close(os.open(name, os.O_CREAT | os.O_WRONLY, 0o644))
            os.unlink(name)


def client_loop(connection, barrier):
    """A client process: for each (phase, names) it is sent, waits at the barrier until every
    client has its work, runs it and answers (began, ended) on the monotonic clock, one clock for
    every process of the machine; a failure's text instead. None ends it."""
    while True:
        message = connection.recv()
        if message is None:
            return
        phase, names = message
        try:
            barrier.wait(timeout=300)
            began = time.monotonic()
            client_calls_run(phase, names)
            connection.send((began, time.monotonic()))
        except Exception as error:  # noqa: BLE001 -- told to the parent, which raises
            barrier.abort()
            connection.send("%s: %s" % (type(error).__name__, error))


class ClientPool:
    """`count` client processes forked once for a job, all its chunks and all its targets: a new
    process's first call costs a FUSE daemon more than its later ones (coordfs reads its /proc
    entries), which belongs to the process, not to the chunk it happens in. Each chunk starts them
    at one barrier."""

    def __init__(self, count):
        context = multiprocessing.get_context("fork")
        self.barrier = context.Barrier(count)
        self.connections, self.processes = [], []
        for _ in range(count):
            mine, theirs = context.Pipe()
            process = context.Process(target=client_loop, args=(theirs, self.barrier), daemon=True)
            process.start()
            theirs.close()
            self.connections.append(mine)
            self.processes.append(process)

    def run(self, phase, batches):
        """Has client i run `phase` on batches[i], all at once; answers the seconds from the first
        client's start to the last one's end."""
        for connection, batch in zip(self.connections, batches):
            connection.send((phase, batch))
        answers = [connection.recv() for connection in self.connections]
        failures = [answer for answer in answers if isinstance(answer, str)]
        if failures:
            self.barrier.reset()    # every client has answered: none waits at it
            raise RuntimeError("a client's %s failed: %s" % (phase, "; ".join(failures)))
        return max(ended for _, ended in answers) - min(began for began, _ in answers)

    def close(self):
        for connection in self.connections:
            try:
                connection.send(None)
            except OSError:
                pass
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()


def many_clients(ts, phase, count, layout):
    """A metadata job run by `count` client processes at once on every target, chunk by chunk as
    `metadata` runs one: in chunk k each client runs `client_calls` calls of `phase` on names of
    its own, all clients started together, on each target in turn (a shuffled order per chunk).
    A chunk's rate is the calls of all clients over the time from the first client's start to the
    last one's end; a target's result is the median of its chunks' rates.

    `layout` "own": client i works in a directory of its own (the kernel's lock of a directory is
    never shared between clients); "one": all of them in one directory, each on names of its own
    (every create and unlink takes that directory's lock, and the mount's engine sees the
    clients' requests side by side under one parent). The stat and unlink jobs wait past every
    mount's 1 s cache and have the kernel drop its dentries and inodes first, as `metadata`'s do;
    their files are made by the clients, untimed."""
    per_client = client_chunks * client_calls
    names = {}
    for t in ts:
        names[t.name] = []
        for client in range(count):
            directory = os.path.join(t.directory, META, *(["c%d" % client] if layout == "own" else []))
            os.makedirs(directory, exist_ok=True)
            names[t.name].append([os.path.join(directory, "c%d-f%05d" % (client, i)) for i in range(per_client)])
    key = client_phase_key(phase, count, layout)
    rates = {t.name: [] for t in ts}
    pool = ClientPool(count)
    try:
        if phase in ("stat", "unlink"):
            for t in ts:
                pool.run("prepare", names[t.name])
            time.sleep(1.5)
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as caches:
                caches.write("2\n")
        order = list(ts)
        for k in range(client_chunks):
            shuffler.shuffle(order)
            for t in order:
                seconds = pool.run(phase, [mine[k * client_calls:(k + 1) * client_calls] for mine in names[t.name]])
                rates[t.name].append(count * client_calls / seconds)
            chunks.setdefault(key, []).append({t.name: rates[t.name][-1] for t in ts})
    finally:
        pool.close()
    for t in ts:
        if arguments.engine_busy == "beside":
            # The held file in META stays.
            for client in range(count):
                if layout == "own":
                    shutil.rmtree(os.path.join(t.directory, META, "c%d" % client), ignore_errors=True)
                else:
                    for name in names[t.name][client]:
                        if os.path.lexists(name):
                            os.unlink(name)
        else:
            shutil.rmtree(os.path.join(t.directory, META))
    return {name: statistics.median(values) for name, values in rates.items()}


def client_phase_key(phase, count, layout):
    """A many-clients job's name without its unit: its key in `chunks`."""
    who = ("1 client" if count == 1 else
           "%d clients, %s" % (count, "own directories" if layout == "own" else "one directory"))
    return "%s, %s" % (dict(CLIENT_PHASES)[phase], who)


def client_job(phase, count, layout):
    """(name, function, paired) of a many-clients job; the function knows its (phase, count, layout)."""
    def run(ts):
        return many_clients(ts, phase, count, layout)
    run.spec = (phase, count, layout)
    unit = "files/s" if phase == "cycle" else "ops/s"
    return "%s (%s)" % (client_phase_key(phase, count, layout), unit), run, True


# (name, function, paired): a paired job takes every target at once and returns their results.
jobs = [("seq write 1 MiB (MiB/s)", job_seq_write, False), ("seq read cold 1 MiB (MiB/s)", job_seq_read_cold, False),
        ("seq read warm 1 MiB (MiB/s)", job_seq_read_warm, False), ("rand read 4 KiB cached (IOPS)", job_rand_read, False),
        ("rand write 4 KiB (IOPS)", job_rand_write, False), ("4 seq writers 1 MiB (MiB/s)", job_four_writers, False),
        ("create+close (ops/s)", job_create, True), ("stat, uncached (ops/s)", job_stat, True),
        ("unlink, uncached (ops/s)", job_unlink, True), ("create+close+unlink (files/s)", job_cycle, True),
        ("stat, just created (ops/s)", job_stat_just_created, True),
        ("stat, asked again (ops/s)", job_stat_asked_again, True),
        ("rename (ops/s)", job_rename, True), ("save: write beside, rename over (ops/s)", job_save, True),
        ("walk, ls -l again (entries/s)", job_walk, True)]
# The many-clients jobs: one client once (its directory is its own and the only one), then each
# count in directories of their own and in one directory.
client_jobs = [client_job(phase, count, layout)
               for count in arguments.clients or []
               for layout in (["own"] if count == 1 else ["own", "one"])
               for phase, _ in CLIENT_PHASES]
jobs += client_jobs
# The key in `chunks` of each paired job's chunks.
chunk_phase = {job_create: "create", job_stat: "stat", job_unlink: "unlink", job_cycle: "cycle",
               job_stat_just_created: "stat just created", job_stat_asked_again: "stat asked again",
               job_rename: "rename", job_save: "save", job_walk: "walk"}
chunk_phase.update({run: client_phase_key(*run.spec) for _, run, _ in client_jobs})
client_runs = {run for _, run, _ in client_jobs}

if arguments.jobs:
    words = [word for word in arguments.jobs.split(",") if word]
    kept = [(job, run, paired) for job, run, paired in jobs if any(word in job for word in words)]
    if not kept:
        os.rmdir(base)
        parser.error(f"--jobs {arguments.jobs}: no job matches; the jobs are: " + "; ".join(job for job, _, _ in jobs))
    jobs = kept

# The paired phase of each data job that has one, and after which job the paired reads run
# (the later of the two read jobs kept).
paired_phase = {job_seq_write: "seq write", job_seq_read_warm: "seq read warm", job_rand_read: "rand read cached",
                job_stat_just_created: "stat just created", job_stat_asked_again: "stat asked again"}
read_phases = [paired_phase[run] for _, run, _ in jobs if run in (job_seq_read_warm, job_rand_read)]
last_read_job = next((run for _, run, _ in reversed(jobs) if run in (job_seq_read_warm, job_rand_read)), None)

results = {}
scratch = base
transport = None    # how the kernel's requests reach the coordfs mounts, from their statistics
try:
    # Mounted inside the try: whatever fails, what was mounted is unmounted.
    if not arguments.on_tmp:
        mount_image()
    targets.append(Target("native", None))
    column = arguments.column_options.split()
    targets.append(Target("coordfs", coordfs("--coordination", "off", *column) if arguments.control else coordfs(*column)))
    try:
        stats = json.loads(os.getxattr(targets[-1].point, "user.coordfs.stats"))
        transport = ("FUSE over io_uring, %d queues at nice %d" % (stats["ring_queues"], stats.get("serve_nice", 0))
                     if stats.get("ring_queues") else "/dev/fuse, workers at nice %d" % stats.get("serve_nice", 0))
    except (OSError, ValueError, KeyError):
        transport = "unknown"
    targets.append(Target("coordfs-off", coordfs("--coordination", "off")))
    for name, other in baselines:
        targets.append(Target(name, coordfs(build=other)))
    if not arguments.coordfs_only:
        targets.append(Target("no-passthrough", coordfs("--no-kernel-passthrough")))
        if shutil.which("bindfs"):
            targets.append(Target("bindfs", fuse_program("bindfs", "{backing}", "{point}")))
        passthrough_ll = build_passthrough_ll()
        if passthrough_ll:
            targets.append(Target("passthrough_ll", fuse_program(passthrough_ll, "-o", "source={backing}", "{point}")))
    for name, command in anchors:
        targets.append(Target(name, fuse_program(*command)))
    results = {(job, t.name): [] for job, _, _ in jobs for t in targets}
    for round_number in range(repeats):
        for job, run, paired in jobs:
            order = targets if round_number % 2 == 0 else list(reversed(targets))
            if paired:
                for name, value in run(order).items():
                    results[(job, name)].append(value)
            else:
                for t in order:
                    results[(job, t.name)].append(run(t))
            if run is job_seq_write:
                paired_seq_write(order)
            if run is last_read_job:
                paired_reads(order, read_phases)
        for t in targets:
            for entry in os.listdir(t.directory):
                if entry == BUSY_NAME:
                    continue
                path = os.path.join(t.directory, entry)
                shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
finally:
    for t in targets:
        if t.held is not None:
            os.close(t.held)
        if t.holder is not None:
            t.holder.terminate()
            t.holder.wait()
        if t.unmount:
            t.unmount()
    if image_mount:
        unmount_image(image_mount)
    shutil.rmtree(scratch, ignore_errors=True)

names = [t.name for t in targets]
print("filesystem benchmark on %s: %d repeats interleaved, %d MiB files, %d metadata ops; medians, ratio to native"
      % ("a loop-mounted journaled ext4" if image_mount else "/tmp", repeats, size_mb, files))
print("coordfs requests: %s" % transport)
for name, command in anchors:
    print("anchor %s: %s" % (name, " ".join(command).replace("{{", "{").replace("}}", "}")))
if client_jobs:
    print("many clients: %s processes at once; each job %d chunks a round, each client %d calls a chunk"
          % (", ".join(str(count) for count in arguments.clients), client_chunks, client_calls))
if arguments.control:
    print("control run: the coordfs column is mounted with --coordination off too (an A/A run)")
if arguments.coordfs_options:
    print("every coordfs mount with: %s" % arguments.coordfs_options)
if arguments.column_options:
    print("the coordfs column's mount with: %s" % arguments.column_options)
if arguments.engine_busy == "elsewhere":
    print("engine busy: every mount had a file open throughout, at its root: coordfs's metadata requests could pass "
          "beside it, not the gate of an idle engine")
elif arguments.engine_busy == "beside":
    print("engine busy: every mount had a file open throughout, in the metadata jobs' directory: coordfs's requests "
          "about other names there could pass beside it")
elif arguments.engine_busy == "coordinate":
    print("engine busy: every coordfs mount had a `coordfs coordinate --read` hold throughout: its requests were "
          "coordinated in full, each looking for its caller among the hold's descendants")
width = max(len(job) for job, _, _ in jobs)
print("%-*s  %s" % (width, "job", "  ".join("%-20s" % name for name in names)))
for job, _, _ in jobs:
    native = statistics.median(results[(job, "native")])
    cells = []
    for name in names:
        value = statistics.median(results[(job, name)])
        cells.append("%-20s" % ("%.0f" % value if name == "native" else "%.0f (%.2fx)" % (value, value / native if native else 0)))
    print("%-*s  %s" % (width, job, "  ".join(cells)))

# The noise the medians hide: how far the repeats of each cell lie apart.
if repeats > 1:
    print()
    print("spread of the repeats, (largest - smallest) / median:")
    print("%-*s  %s" % (width, "job", "  ".join("%-20s" % name for name in names)))
    for job, _, _ in jobs:
        cells = []
        for name in names:
            values = results[(job, name)]
            middle = statistics.median(values)
            cells.append("%-20s" % ("%.0f %%" % (100 * (max(values) - min(values)) / middle if middle else 0)))
        print("%-*s  %s" % (width, job, "  ".join(cells)))

# The data jobs' ratios round by round: in a round a target ran its job within a minute or two of
# native's, so the ratio within the round is free of what drifts between rounds (the host, the
# image's state), which the medians of the table above are not. Smallest to largest, since a few
# repeats give no useful interval; a ratio of 1 inside the range says "level with native".
def round_ratios(job, name, base_name):
    """`name`'s result over `base_name`'s, round by round."""
    return [value / base for value, base in zip(results[(job, name)], results[(job, base_name)]) if base]


data_jobs = [job for job, _, paired in jobs if not paired]
if repeats > 1 and data_jobs:
    print()
    print("ratio to native round by round: median [smallest - largest]:")
    others = [name for name in names if name != "native"]
    print("%-*s  %s" % (width, "job", "  ".join("%-20s" % name for name in others)))
    for job in data_jobs:
        cells = []
        for name in others:
            ratios = round_ratios(job, name, "native")
            cells.append("%-20s" % ("%.2f [%.2f - %.2f]" % (statistics.median(ratios), min(ratios), max(ratios))
                                    if ratios else "-"))
        print("%-*s  %s" % (width, job, "  ".join(cells)))

# Coordination's own cost, paired: coordfs against --coordination off chunk by chunk (each pair
# ran within moments), the median of those ratios, their quartiles, and a 95 % confidence
# interval of the median. The interval is distribution-free (order statistics): the chunks' ratios
# are skewed and their tails are the VM's, not coordination's. The verdict holds the interval to
# the target (within 5 % of --coordination off): met only if all of it is within.
def median_interval(values, confidence=0.95):
    """The order statistics (low, high) that cover the median with at least `confidence`."""
    ordered = sorted(values)
    n = len(ordered)
    # P(Binomial(n, 1/2) < k), summed until it passes half of what the interval may miss.
    cumulative, k, term = 0.0, 0, 0.5 ** n
    while True:
        if cumulative + term > (1 - confidence) / 2: break
        cumulative += term
        term = term * (n - k) / (k + 1)
        k += 1
    if k == 0: return None
    return ordered[k - 1], ordered[n - k]

def paired_ratios(name, base_name, phase):
    """`name`'s chunks over `base_name`'s in `phase`, minus 1."""
    return [c[name] / c[base_name] - 1 for c in chunks.get(phase, []) if c.get(name) and c.get(base_name)]


def print_paired(name, base_name, target=True, phases=None):
    """`name` against `base_name` chunk by chunk, for each paired job both ran (of `phases`,
    if given). With `target`, each job is held to the target (within 5 % of the base); without,
    the verdict says which was faster, if the interval says so."""
    pairs = [(phase, paired_ratios(name, base_name, phase)) for phase in chunks if phases is None or phase in phases]
    if not any(len(ratios) >= 4 for _, ratios in pairs):
        return
    print()
    print("%s against %s, paired chunk by chunk: median ratio - 1 (quartiles; 95 %% interval of the median):"
          % (name, base_name))
    for phase, ratios in pairs:
        if len(ratios) < 4: continue
        low, middle, high = statistics.quantiles(ratios, n=4)
        label = {"create": "create+close", "stat": "stat, uncached", "unlink": "unlink, uncached",
                 "cycle": "create+close+unlink",
                 "stat just created": "stat, just created", "stat asked again": "stat, asked again",
                 "walk": "walk, ls -l again",
                 "seq write": "seq write, %d MiB chunks" % write_chunk_mb,
                 "seq read warm": "seq read warm, %d MiB" % (size_mb * warm_read_loops),
                 "rand read cached": "rand read cached, %d s" % paired_read_seconds}.get(phase, phase)
        interval = median_interval(ratios)
        if interval is None:
            verdict, shown = "too few chunks to say", ""
        else:
            shown = "; %+.1f %% to %+.1f %%" % (100 * interval[0], 100 * interval[1])
            if target:
                verdict = ("within 5 %" if interval[0] >= -0.05 else
                           "not within 5 %" if interval[1] < -0.05 else "undecided at 5 %")
            else:
                verdict = ("faster" if interval[0] > 0 else "slower" if interval[1] < 0 else "no difference resolved")
        print("%-*s  %+.1f %%  (%+.1f %% to %+.1f %%%s), %d chunks: %s"
              % (width, label, 100 * statistics.median(ratios), 100 * low, 100 * high, shown, len(ratios), verdict))


print_paired("coordfs", "coordfs-off")
# The data jobs against native itself, paired: the fio jobs' medians cannot tell 1.0x from 0.9x
# on this VM.
print_paired("coordfs", "native", target=False, phases=list(paired_phase.values()))
for name, _ in baselines:
    # Two builds of coordfs, both coordinating: what a change to the code did.
    print_paired("coordfs", name, target=False)
    print_paired(name, "coordfs-off")

# The targets coordfs is held to (ratios to native with coordination on; the metadata jobs at
# least the best other passthrough's, the many-clients jobs 0.9 of it), each read
# two ways: from the table's medians, and from the median of the round-by-round ratios, which the
# drift between rounds does not move; and, where the job was paired chunk by chunk, a third way.
# (The paired estimate above is the last target, within 5 % of --coordination off.)
data_targets = {job_seq_write: 1.0, job_seq_read_cold: 0.8, job_seq_read_warm: 0.9,
                job_rand_read: 0.9, job_rand_write: 0.4, job_four_writers: 0.8}
# The passthroughs other than coordfs in the run.
other_passthroughs = [name for name in names if name in ("passthrough_ll", "bindfs") or name in anchor_names]


def best_other(job):
    """The other passthrough with the highest median in `job`."""
    return max(other_passthroughs, key=lambda name: statistics.median(results[(job, name)]))


if not arguments.control:
    rows = []
    for job, run, paired in jobs:
        if run in (job_stat_just_created, job_stat_asked_again):
            # What the kernel keeps answers: held to native itself.
            target, base_name = 0.9, "native"
        elif paired and other_passthroughs:
            target, base_name = (0.9 if run in client_runs else 1.0), best_other(job)
        elif run in data_targets:
            target, base_name = data_targets[run], "native"
        else:
            continue
        base_median = statistics.median(results[(job, base_name)])
        rounds = round_ratios(job, "coordfs", base_name)
        if not base_median or not rounds:
            continue
        medians = statistics.median(results[(job, "coordfs")]) / base_median
        by_round = statistics.median(rounds)
        verdict = ("met" if medians >= target and by_round >= target else
                   "not met" if medians < target and by_round < target else "met one way only")
        phase = paired_phase.get(run) if base_name == "native" else chunk_phase.get(run)
        paired = paired_ratios("coordfs", base_name, phase) if phase else []
        interval = median_interval(paired) if len(paired) >= 4 else None
        if interval:
            # The third reading: the chunks' ratios, paired (above).
            low, high = 1 + interval[0], 1 + interval[1]
            verdict += "; paired %.2fx [%.2f - %.2f]: %s" % (1 + statistics.median(paired), low, high,
                                                           "met" if low >= target else "not met" if high < target else "undecided")
        rows.append("%-*s  >= %.1fx %-18s  %.2fx  %.2fx  %s" % (width, job, target, "of " + base_name, medians, by_round, verdict))
    if rows:
        print()
        print("targets, coordfs against native (data) or the best other passthrough of the run (metadata: of %s): "
              "from the medians, round by round:" % (", ".join(other_passthroughs) or "none"))
        for row in rows:
            print(row)


def rate_text(value):
    """A rate as the docs' tables write it."""
    return "%.1f k/s" % (value / 1000) if value >= 1000 else "%.0f /s" % value


def ratio_cell(ratios):
    """The median of ratios and their quartiles, as the docs' tables write them: "0.37× [0.35–0.40]"."""
    if not ratios:
        return "–"
    if len(ratios) < 2:
        return "%.2f×" % ratios[0]
    low, _, high = statistics.quantiles(ratios, n=4)
    return "%.2f× [%.2f–%.2f]" % (statistics.median(ratios), low, high)


def chunk_ratios(phase, name, base_name):
    """`name`'s chunks over `base_name`'s in `phase`: paired ratios, not minus 1."""
    return [1 + ratio for ratio in paired_ratios(name, base_name, phase)]


# The many-clients jobs as Markdown tables docs/performance.md takes: each target's rate against
# native's, paired chunk by chunk (all chunks of all rounds), and coordfs's against the best other
# passthrough; then each target's rate with N clients over its own with one client (medians).
# Grouped by phase, then by count, own directories before one.
phase_order = [phase for phase, _ in CLIENT_PHASES]
client_rows = sorted(((run.spec, job) for job, run, _ in jobs if run in client_runs),
                     key=lambda row: (phase_order.index(row[0][0]), row[0][1], row[0][2] != "own"))
if client_rows:
    others = [name for name in names if name != "native"]
    best_column = other_passthroughs and not arguments.control
    print()
    print("many clients: rate against native, paired chunk by chunk (%d chunks a round): median [quartiles]; "
          "native's median rate" % client_chunks)
    print()
    print("| job | clients | directories | native | %s%s |"
          % (" | ".join(others), " | coordfs against the best other" if best_column else ""))
    print("|" + " --- |" * (4 + len(others) + (1 if best_column else 0)))
    for (phase, count, layout), job in client_rows:
        key = client_phase_key(phase, count, layout)
        cells = [dict(CLIENT_PHASES)[phase], str(count), "–" if count == 1 else ("own" if layout == "own" else "one"),
                 rate_text(statistics.median(results[(job, "native")]))]
        cells += [ratio_cell(chunk_ratios(key, name, "native")) for name in others]
        if best_column:
            best = best_other(job)
            cells.append("%s of %s" % (ratio_cell(chunk_ratios(key, "coordfs", best)), best))
        print("| " + " | ".join(cells) + " |")
    ones = {(phase, layout): job for (phase, count, layout), job in client_rows if count == 1}
    scaled = [(spec, job) for spec, job in client_rows if spec[1] > 1 and (spec[0], "own") in ones]
    if scaled:
        print()
        print("many clients: each target's rate over its own with 1 client (medians of the rounds)")
        print()
        print("| job | clients | directories | %s |" % " | ".join(names))
        print("|" + " --- |" * (3 + len(names)))
        for (phase, count, layout), job in scaled:
            single = ones[(phase, "own")]
            cells = [dict(CLIENT_PHASES)[phase], str(count), "own" if layout == "own" else "one"]
            for name in names:
                one = statistics.median(results[(single, name)])
                cells.append("%.2f×" % (statistics.median(results[(job, name)]) / one) if one else "–")
            print("| " + " | ".join(cells) + " |")
