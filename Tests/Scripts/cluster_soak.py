#!/usr/bin/env python3
"""Hosts that share a store, under faults: a nemesis soak, and the long counter runs.

Both need root, etcd, fio and a built coordfs and CoordinatedCounter. Every host is a coordfs
mount with --cluster of one backing directory (the store), its daemon in a network namespace of
its own (cluster.py), with a 3-member etcd cluster beside them.

    cluster_soak.py nemesis --coordfs PATH --counter PATH [--hosts 3] [--seconds 90] [--random]
    cluster_soak.py counters --coordfs PATH --counter PATH [--runs 20] [--rounds 200]

`nemesis`: every host runs, for the whole time,
  counter   `coordfs coordinate --write counter -- sh -c 'read; write v+1'`, each iteration
            printing the times it read and wrote and the value it wrote;
  swift     CoordinatedCounter (FileCoordinator, a presenter, atomic saves) on one JSON counter;
  blob      a writer rewriting one shared file in chunks, each chunk naming its writer, and a
            reader reading it whole;
  fio       rounds of random writes with crc32c verify on a file of the host's own;
  trees     `cp -r` of a small tree into the mount, read back on the next host with tar.
while the nemesis, one fault at a time with quiet between, cuts a host off from etcd, pauses a
daemon (SIGSTOP) past its lease, kills a daemon (-9) and mounts it again, and kills an etcd
member and the leader and starts them again (in that order; --random draws them and their
lengths). Programs fail while a fault strikes their host (ENOLCK, EIO, ENOTCONN): that is the
contract. What must never happen, checked at the end:
  lost      two successful counter iterations wrote the same value (one read a stale count), or
            a counter ends below its successful increments;
  torn      a read saw the blob part written by a writer that ended successfully, a tree read
            back differs from the tree copied, or fio's verify found a bad block;
  overlap   two successful writers' turns overlapped in time (counter iterations, blob writers).
The mounts use --settle-time 0 (a reader passes no writer because its file stayed quiet), so a
blob read while a writer writes is a failure whatever the machine's load. Exit status 1 on any
of these, on no fault struck, or on a workload that never succeeded.

`counters`: two hosts, no faults, the pattern the product exists for, as acceptance asks: each
run, the shell counter ROUNDS times on both hosts at once, then CoordinatedCounter ROUNDS times on
both at once. Every run must end exact, with no iteration failed (no EBUSY) and none taking 5 s.
"""

from __future__ import annotations

import argparse
import bisect
import errno
import filecmp
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402

TTL = 5
NAMES = "ABCDEFGHI"
CHUNK, CHUNKS = 8192, 8
ITERATION_LIMIT = 60  # seconds: a counter iteration still running then is killed, and counted stuck


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Host:
    """One coordfs host: a mount of the store whose daemon runs in the host's namespace."""

    def __init__(self, soak: "Cluster", index: int):
        self.soak, self.index = soak, index
        self.name = NAMES[index]
        self.node = soak.info["hosts"][index]
        self.point = os.path.join(soak.work, "mount" + self.name)
        self.log_path = os.path.join(soak.work, f"{self.name}.log")
        self.mounted = False
        # Between a daemon killed and its mount made again: the workloads wait, and a read-only
        # tmpfs on the bare mount point keeps what they had under way from landing there. The
        # bare directory is immutable besides (where its filesystem can say so): between the
        # unmount and the guard, an Apple-style update once saved there, and counted a success.
        self.down = False
        self.guarded = False
        os.makedirs(self.point, exist_ok=True)
        subprocess.run(["chattr", "+i", self.point], capture_output=True, timeout=30)

    def path(self, *names: str) -> str:
        return os.path.join(self.point, *names)

    def mount(self, seconds: float = 60) -> None:
        urls = ",".join(url.removeprefix("http://") for url in self.soak.info["client_urls"])
        command = cluster._nsenter(self.node["namespace"]) + [
            self.soak.coordfs, "mount", self.soak.store, self.point, "--cluster", "etcd://" + urls,
            "--cluster-store", "soak", "--host-name", self.name, "--cluster-ttl", str(TTL), "--settle-time", "0",
            "--log", self.log_path]
        deadline = time.monotonic() + seconds
        while True:
            result = subprocess.run(command, capture_output=True, text=True, timeout=90)
            if result.returncode == 0:
                self.mounted = True
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"host {self.name} does not mount: {result.stderr.strip()}")
            time.sleep(1)

    def unmount(self) -> None:
        if not self.mounted:
            return
        result = subprocess.run([self.soak.coordfs, "unmount", self.point], capture_output=True, timeout=60)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", self.point], capture_output=True, timeout=60)
        self.mounted = False

    def guard(self) -> None:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "soak-guard", self.point], check=True, timeout=30)
        self.guarded = True

    def unguard(self) -> None:
        """Takes the guard away, and anything that reached the bare mount point before it."""
        if self.guarded:
            subprocess.run(["umount", self.point], check=True, timeout=30)
            self.guarded = False
        for entry in os.listdir(self.point):
            target = os.path.join(self.point, entry)
            shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.remove(target)

    def daemon(self) -> int:
        """The pid of this host's daemon; raises when it has none."""
        pid = cluster.daemon_of(self.point)
        if pid is None:
            raise RuntimeError(f"no daemon for {self.name}")
        return pid

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log_path, errors="replace") as file:
                return "".join(file.readlines()[-lines:])
        except OSError:
            return "(no log)"


class Cluster:
    """A 3-member etcd cluster and `hosts` coordfs hosts over one store; torn down on exit."""

    def __init__(self, options, hosts: int):
        self.coordfs = os.path.abspath(options.coordfs)
        self.counter = os.path.abspath(options.counter)
        self.work = tempfile.mkdtemp(prefix="coordfs-soak-")
        self.state = os.path.join(self.work, "state")
        self.store = os.path.join(self.work, "store")
        os.makedirs(self.store)
        self.keep = options.keep
        self.info = cluster.up(self.state, members=3, hosts=hosts)
        self.hosts = [Host(self, index) for index in range(hosts)]

    def __enter__(self):
        try:
            for host in self.hosts:
                host.mount()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *_):
        for host in self.hosts:
            daemon = cluster.daemon_of(host.point)
            if daemon is not None:
                try:
                    os.kill(daemon, signal.SIGCONT)  # a pause the nemesis left
                except OSError:
                    pass
            try:
                cluster.heal(self.state, f"h{host.index + 1}")
            except Exception:
                pass
        for host in self.hosts:
            try:
                host.unmount()
                if host.guarded:
                    host.unguard()
            except Exception as error:
                log(f"unmounting {host.name}: {error}")
        cluster.down(self.state, quiet=True)
        for host in self.hosts:
            subprocess.run(["chattr", "-i", host.point], capture_output=True, timeout=30)
        if self.keep:
            log(f"kept {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)

    def leader(self) -> int | None:
        """The number (1-based) of the etcd member that leads now."""
        return cluster.leader(self.state)

    def reload(self) -> None:
        self.info = cluster.load(self.state)


# ------------------------------------------------------------------------- workloads

COUNTER_SCRIPT = ('s=$(date +%s.%N); v=$(cat {0}) || exit 3; [ -n "$v" ] || exit 4; '
                  'echo $((v + 1)) > {0} || exit 5; e=$(date +%s.%N); echo "$s $e $((v + 1))"')
# Under the nemesis the write goes in place without truncating first (`1<>`: the number only
# grows, so it covers what was there). A truncating write struck between its truncation and its
# write (its daemon killed, its lease ending) leaves the file empty, as on any filesystem; the
# counter could not go on from there. The calm runs keep the truncating form above.
NEMESIS_COUNTER_SCRIPT = COUNTER_SCRIPT.replace("> {0} || exit 5", "1<> {0} || exit 5")


def counter_iteration(coordfs: str, path: str, script: str = COUNTER_SCRIPT) -> dict:
    """One `coordinate --write` iteration of the shell counter: its outcome and what it printed."""
    began = time.time()
    run = subprocess.Popen([coordfs, "coordinate", "--write", path, "--", "sh", "-c", script.format(shlex.quote(path))],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        output, error = run.communicate(timeout=ITERATION_LIMIT)
        status = run.returncode
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)  # the hold, its sh and cat: one group
        output, error = run.communicate()
        status = "stuck"
    record = {"status": status, "began": began, "ended": time.time(), "error": error.strip()[-200:]}
    fields = output.split()
    if status == 0 and len(fields) == 3:
        record.update(read=float(fields[0]), wrote=float(fields[1]), value=int(fields[2]))
    elif status == 0:
        record["status"] = "no report"
    return record


def blob_content(writer: str, sequence: int) -> list[bytes]:
    tag = f"{writer}:{sequence}"
    return [(f"{tag}:{index}:".encode().ljust(64, b"-") + bytes([65 + index]) * (CHUNK - 64)) for index in range(CHUNKS)]


def blob_writers(content: bytes) -> tuple[list[str], bool]:
    """The writers whose chunks `content` holds, in order, and whether it is one whole write."""
    writers, whole = [], len(content) == CHUNK * CHUNKS
    for index in range(0, len(content), CHUNK):
        chunk = content[index:index + CHUNK]
        fields = chunk[:64].split(b":")
        if len(chunk) < CHUNK or len(fields) < 3:
            return writers + ["?"], False
        writer = f"{fields[0].decode(errors='replace')}:{fields[1].decode(errors='replace')}"
        expected = blob_content(fields[0].decode(errors="replace"), int(fields[1]))[index // CHUNK] if fields[1].isdigit() else None
        if chunk != expected:
            return writers + ["?"], False
        if writer not in writers:
            writers.append(writer)
    return writers, whole and len(writers) == 1


def blob_writer_loop(name: str, path: str, stop: str) -> None:
    """A writer of the shared blob, until `stop` exists: each write truncates it and writes its
    chunks one by one; a line of JSON a write (monotonic times: CLOCK_MONOTONIC, any process's)."""
    sequence = 0
    while not os.path.exists(stop):
        sequence += 1
        # `opening`: an open that fails may have truncated the file first (its daemon killed
        # before it answered).
        record = {"host": name, "writer": f"{name}:{sequence}", "outcome": "ok", "opened": None, "opening": time.monotonic()}
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        except OSError as error:
            record["outcome"] = "open " + errno.errorcode.get(error.errno, str(error.errno))
            record["failed"] = time.monotonic()
            print(json.dumps(record), flush=True)
            time.sleep(0.3)
            continue
        record["opened"] = time.monotonic()
        try:
            for chunk in blob_content(name, sequence):
                os.write(fd, chunk)
                time.sleep(0.004)
        except OSError as error:
            record["outcome"] = "write " + errno.errorcode.get(error.errno, str(error.errno))
        record["closing"] = time.monotonic()
        try:
            os.close(fd)
        except OSError as error:
            if record["outcome"] == "ok":
                record["outcome"] = "close " + errno.errorcode.get(error.errno, str(error.errno))
        print(json.dumps(record), flush=True)
        time.sleep(random.uniform(0, 0.2))


def blob_reader_loop(name: str, path: str, stop: str) -> None:
    """A reader of the shared blob, until `stop` exists: what each whole read held."""
    while not os.path.exists(stop):
        record = {"host": name}
        try:
            fd = os.open(path, os.O_RDONLY)
            record["opened"] = time.monotonic()
            try:
                parts = []
                while part := os.read(fd, 1 << 16):
                    parts.append(part)
                record["closing"] = time.monotonic()
            finally:
                os.close(fd)
            content = b"".join(parts)
            record["writers"], record["whole"] = blob_writers(content)
            record["length"] = len(content)
            record["outcome"] = "ok"
        except OSError as error:
            record["outcome"] = errno.errorcode.get(error.errno, str(error.errno))
        print(json.dumps(record), flush=True)
        time.sleep(random.uniform(0.05, 0.3))


def same_tree(source: str, copy: str) -> tuple[bool, str]:
    """Whether `copy` holds the files of `source` byte for byte, and what differs first."""
    if not os.path.isdir(copy):
        return False, "nothing read back"
    comparison = filecmp.dircmp(source, copy)
    if comparison.left_only or comparison.right_only:
        return False, f"missing {comparison.left_only[:3]}, extra {comparison.right_only[:3]}"
    for file in sorted(comparison.common_files):
        if not filecmp.cmp(os.path.join(source, file), os.path.join(copy, file), shallow=False):
            sizes = os.path.getsize(os.path.join(source, file)), os.path.getsize(os.path.join(copy, file))
            return False, f"{file}: {sizes[1]} bytes read back of {sizes[0]}"
    return True, ""


class Workloads:
    """What every host runs until `stop`, and what each run recorded."""

    def __init__(self, soak: Cluster):
        self.soak = soak
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counter: list[dict] = []
        self.swift: list[dict] = []
        self.blob_writes: list[dict] = []
        self.blob_reads: list[dict] = []
        self.fio: list[dict] = []
        self.trees: list[dict] = []
        self.errors: list[str] = []  # the soak's own faults: each fails the run
        self.children: set[subprocess.Popen] = set()  # killed (their groups) once the time is up
        self.source_tree = os.path.join(soak.work, "tree")
        os.makedirs(self.source_tree)
        for index in range(20):
            with open(os.path.join(self.source_tree, f"f{index:02d}"), "wb") as file:
                file.write(os.urandom(random.randrange(1, 40_000)))
        first = soak.hosts[0]
        with open(first.path("counter"), "w") as file:
            file.write("0\n")
        with open(first.path("blob"), "wb") as file:
            file.write(b"".join(blob_content("init", 0)))
        os.makedirs(first.path("trees"), exist_ok=True)

    def note(self, into: list, record: dict) -> None:
        with self.lock:
            into.append(record)

    def threads(self) -> list[threading.Thread]:
        made = []
        for host in self.soak.hosts:
            for work in (self.counter_loop, self.swift_loop, self.blob_writer, self.blob_reader, self.fio_loop, self.tree_loop):
                made.append(threading.Thread(target=self.guarded, args=(work, host), daemon=True, name=f"{work.__name__}-{host.name}"))
        return made

    def guarded(self, work, host: Host) -> None:
        try:
            work(host)
        except Exception as error:  # a fault of the soak itself: reported, not hidden
            self.note(self.errors, f"{work.__name__} on {host.name}: {error!r}")

    def run(self, command: list[str], timeout: float) -> tuple[int | str, str, str]:
        """Runs a workload's program in a process group of its own, killed with it when the time
        is up (fio forks its jobs): its status ("stuck" past `timeout`), output and errors."""
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        with self.lock:
            self.children.add(child)
        try:
            output, error = child.communicate(timeout=timeout)
            return child.returncode, output, error
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            output, error = child.communicate()
            return "stuck", output, error
        finally:
            with self.lock:
                self.children.discard(child)

    def end(self) -> None:
        """Stops the workloads: what still runs is killed, with its process group."""
        self.stop.set()
        with self.lock:
            running = list(self.children)
        for child in running:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except OSError:
                pass

    def pause(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def waits(self, host: Host) -> bool:
        """Whether the host is down (its daemon killed, its mount made again): then a moment
        passes, and the caller looks again."""
        if host.down:
            self.pause(0.2)
        return host.down

    def counter_loop(self, host: Host) -> None:
        while not self.stop.is_set():
            if self.waits(host):
                continue
            record = counter_iteration(self.soak.coordfs, host.path("counter"), NEMESIS_COUNTER_SCRIPT)
            record["host"] = host.name
            self.note(self.counter, record)
            if record["status"] != 0:
                self.pause(0.2)

    def swift_loop(self, host: Host) -> None:
        updates = 10
        while not self.stop.is_set():
            if self.waits(host):
                continue
            began = time.time()
            status, output, _ = self.run([self.soak.counter, host.path("swift.json"), str(updates), host.name, "-"], 300)
            try:
                report = json.loads(output.strip().splitlines()[-1]) if output.strip() else {}
            except ValueError:
                report, status = {}, "no report"
            failed = [error for error in report.get("errors", []) if error.startswith("update")]
            self.note(self.swift, {"host": host.name, "status": status, "began": began, "ended": time.time(),
                                   "updates": updates, "succeeded": updates - len(failed) if report else 0,
                                   "errors": report.get("errors", [])[:3], "wrote": report.get("wrote", [])})
            if status != 0:
                self.pause(0.5)

    def blob_writer(self, host: Host) -> None:
        self.blob_process("blob-writer", host, self.blob_writes)

    def blob_reader(self, host: Host) -> None:
        self.blob_process("blob-reader", host, self.blob_reads)

    def blob_process(self, role: str, host: Host, into: list) -> None:
        """Runs `role` in a process of its own, its records noted as it reports them: one
        process for all would be one program to the mount, whose reads and writes share (C20)."""
        stop = os.path.join(self.soak.work, "stop")
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), role, host.name, host.path("blob"), stop],
                                 stdout=subprocess.PIPE, text=True)
        for line in child.stdout:
            self.note(into, json.loads(line))
        if child.wait() != 0 or not self.stop.is_set():
            self.note(self.errors, f"{role} on {host.name} ended early, status {child.returncode}")

    def fio_loop(self, host: Host) -> None:
        while not self.stop.is_set():
            if self.waits(host):
                continue
            began = time.time()
            command = ["fio", "--name=soak", f"--filename={host.path('fio-' + host.name)}", "--size=4M", "--bs=4k",
                       "--rw=randwrite", "--ioengine=psync", "--verify=crc32c", "--do_verify=1", "--verify_fatal=1",
                       "--output-format=json"]
            status, output, error = self.run(command, 300)
            try:
                report = json.loads(output[output.index("{"):]) if "{" in output else None
            except ValueError:
                report = None
            record = {"host": host.name, "began": began, "ended": time.time()}
            if report is None:
                record["outcome"] = "no report" if status != "stuck" else "stuck"
                record["verify"] = "verify" in error and ("crc32c" in error or "bad" in error)
                record["error"] = error.strip()[-200:]
            else:
                job = report["jobs"][0]
                record["outcome"] = "ok" if job["error"] == 0 else errno.errorcode.get(job["error"], str(job["error"]))
                record["verify"] = job["error"] == errno.EILSEQ or "verify" in error
                record["verified"] = job["read"]["io_bytes"]
            self.note(self.fio, record)
            self.pause(0.5 if record["outcome"] != "ok" else 0)

    def tree_loop(self, host: Host) -> None:
        hosts = self.soak.hosts
        reader = hosts[(host.index + 1) % len(hosts)]
        number = 0
        while not self.stop.is_set():
            if self.waits(host):
                continue
            number += 1
            name = f"{host.name}-{number}"
            began = time.time()
            copied = subprocess.run(["cp", "-r", self.source_tree, host.path("trees", name)], capture_output=True, text=True, timeout=120)
            record = {"host": host.name, "reader": reader.name, "began": began, "copied": copied.returncode == 0}
            if record["copied"]:
                check = tempfile.mkdtemp(dir=self.soak.work)
                try:
                    # pipefail: a file tar could not open (ENOLCK on a host cut off) fails the read.
                    pipeline = f"tar cf - -C {shlex.quote(reader.path('trees'))} {name} | tar xf - -C {shlex.quote(check)}"
                    read = subprocess.run(["bash", "-o", "pipefail", "-c", pipeline], capture_output=True, text=True, timeout=120)
                    record["read"] = read.returncode == 0
                    if record["read"]:
                        record["same"], record["detail"] = same_tree(self.source_tree, os.path.join(check, name))
                        if not record["same"]:  # what the store holds, and what the reader's mount lists now
                            def count(directory: str) -> str:
                                try:
                                    return str(len(os.listdir(directory)))
                                except OSError as error:
                                    return errno.errorcode.get(error.errno, str(error.errno))
                            record["detail"] += (f"; the store has {count(os.path.join(self.soak.store, 'trees', name))} files, "
                                                 f"{reader.name}'s mount lists {count(reader.path('trees', name))} now")
                finally:
                    shutil.rmtree(check, ignore_errors=True)
            subprocess.run(["rm", "-rf", host.path("trees", name)], capture_output=True, timeout=120)
            record["ended"] = time.time()
            self.note(self.trees, record)
            self.pause(0.5 if not record["copied"] else 0.1)


# ------------------------------------------------------------------------- the nemesis

class Nemesis:
    """One fault at a time, with quiet between: each recorded with when it began and ended."""

    KINDS = ("cut", "pause", "kill-daemon", "kill-member", "kill-leader")

    def __init__(self, soak: Cluster, drawn: bool, quiet: float, kinds: tuple[str, ...] = KINDS):
        self.soak, self.drawn, self.quiet, self.kinds = soak, drawn, quiet, kinds
        self.faults: list[dict] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self, until: float) -> None:
        turn = 0
        while time.monotonic() < until and not self.stop.is_set():
            quiet = random.uniform(self.quiet, 2 * self.quiet) if self.drawn else self.quiet
            if self.stop.wait(min(quiet, until - time.monotonic())) or time.monotonic() >= until:
                return
            kind = random.choice(self.kinds) if self.drawn else self.kinds[turn % len(self.kinds)]
            turn += 1
            host = random.choice(self.soak.hosts)
            fault = {"kind": kind, "began": time.time()}
            try:
                self.strike(kind, host, fault)
            except Exception as error:
                self.errors.append(f"{kind}: {error!r}")
                log(f"fault {kind} failed: {error!r}")
            fault["ended"] = time.time()
            self.faults.append(fault)
            log(f"fault {kind} {fault.get('target', '')} for {fault['ended'] - fault['began']:.1f} s")

    def strike(self, kind: str, host: Host, fault: dict) -> None:
        soak = self.soak
        if kind == "cut":
            fault["target"] = host.name
            cluster.cut(soak.state, f"h{host.index + 1}")
            try:
                time.sleep(random.uniform(1, TTL + 7) if self.drawn else TTL + 3)
            finally:
                cluster.heal(soak.state, f"h{host.index + 1}")
        elif kind == "pause":
            fault["target"] = host.name
            daemon = host.daemon()
            os.kill(daemon, signal.SIGSTOP)
            try:
                time.sleep(random.uniform(1, TTL + 4) if self.drawn else TTL + 2)
            finally:
                os.kill(daemon, signal.SIGCONT)
        elif kind == "kill-daemon":
            fault["target"] = host.name
            host.down = True
            os.kill(host.daemon(), signal.SIGKILL)
            time.sleep(1)
            host.unmount()
            host.guard()
            time.sleep(1)
            host.unguard()
            host.mount()
            host.down = False
        else:
            number = soak.leader() if kind == "kill-leader" else None
            if number is None:
                number = random.randrange(1, len(soak.info["members"]) + 1)
            fault["target"] = f"e{number}"
            if not cluster.kill_member(soak.state, number):
                raise RuntimeError(f"etcd member {number} was not running")
            try:
                time.sleep(random.uniform(1, 8) if self.drawn else 4)
            finally:
                cluster.start_member(soak.state, number)
                soak.reload()


# ------------------------------------------------------------------------- the checker

def overlaps(turns: list[tuple[float, float, str]]) -> list[str]:
    """Pairs of turns (start, end, who) of different writers that overlap in time."""
    found, ordered = [], sorted(turns)
    latest = None
    for start, end, who in ordered:
        if latest is not None and start < latest[1] and latest[2].split(":")[0] != who.split(":")[0]:
            found.append(f"{latest[2]} [{latest[0]:.3f}, {latest[1]:.3f}] and {who} [{start:.3f}, {end:.3f}]")
        if latest is None or end > latest[1]:
            latest = (start, end, who)
    return found


def reads_during_writes(reads: list[dict], writes: list[dict]) -> list[str]:
    """Reads whose turn (open to close) overlaps a successful write's."""
    found = []
    ordered = sorted((write["opened"], write["closing"], write["writer"]) for write in writes)
    starts = [start for start, _, _ in ordered]
    for read in reads:
        # Writes that opened before the read closed; of those, any still writing once it opened.
        for start, end, writer in ordered[:bisect.bisect_left(starts, read["closing"])][-50:]:
            if end > read["opened"]:
                found.append(f"{read['host']} [{read['opened']:.3f}, {read['closing']:.3f}] and {writer} [{start:.3f}, {end:.3f}]")
    return found


# Open failures that may come after the mount truncated the file: its daemon killed before it
# answered (the connection aborted, the request cancelled), or a write refused as fenced.
TRUNCATED_MAYBE = {"ENOTCONN", "ECONNABORTED", "ECANCELED", "EIO", "EINTR"}


def emptied_by_a_failed_write(writes: list[dict], before: float) -> bool:
    """Whether the blob may be empty at `before` (monotonic) for a writer's own failure: a
    writer that truncates it as its open is granted, somewhere between `opening` and `opened`
    (a daemon stopped right after the truncation answers only when it runs again), and then
    failed to write it whole (or whose open failed as one that may follow the truncation),
    with no write that ended well begun after that truncation and ended before `before`."""
    for write in writes:
        outcome = write["outcome"]
        truncates = outcome.startswith(("write", "close")) or (
            outcome.startswith("open") and outcome.split()[-1] in TRUNCATED_MAYBE)
        began = write.get("opening", write["opened"])
        if not truncates or began is None or began >= before:
            continue
        # A failed open truncated, if at all, before it failed (`failed`: when it was told).
        truncated_by = write["opened"] if write["opened"] is not None else write.get("failed", began)
        if not any(other["outcome"] == "ok" and other.get("opening", other["opened"]) >= truncated_by
                   and other["closing"] < before for other in writes):
            return True
    return False


def reasons(failures) -> list[str]:
    """The commonest reasons among `failures`, a summary line each."""
    counted: dict[str, int] = {}
    for failure in failures:
        counted[failure] = counted.get(failure, 0) + 1
    return [f"  failed {count}x: {reason}" for reason, count in sorted(counted.items(), key=lambda item: -item[1])[:5]]


def check(soak: Cluster, work: Workloads, faults: list[dict]) -> tuple[list[str], list[str]]:
    """The violations, and the summary lines."""
    violations, summary = [], []

    # Counter: each successful value once; the end at or above the successes.
    succeeded = [record for record in work.counter if record["status"] == 0]
    values = [record["value"] for record in succeeded]
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        violations.append(f"lost: counter values written by two successful iterations: {repeated[:10]}")
    with open(os.path.join(soak.store, "counter")) as file:
        text = file.read().strip()
    final = int(text) if text.isdigit() else None
    if final is None:
        violations.append(f"torn: the counter holds {text[:40]!r}")
    elif final < len(succeeded):
        violations.append(f"lost: the counter ends at {final}, below its {len(succeeded)} successful increments")
    attempts = len(work.counter)
    for problem in overlaps([(record["read"], record["wrote"], record["host"] + ":" + str(record["value"])) for record in succeeded]):
        violations.append("overlap: counter iterations " + problem)
    failed: dict[str, int] = {}
    for record in work.counter:
        if record["status"] != 0:
            key = str(record["status"]) + (": " + record["error"].splitlines()[-1][:80] if record["error"] else "")
            failed[key] = failed.get(key, 0) + 1
    summary.append(f"counter: {len(succeeded)} of {attempts} iterations succeeded; ends at {final}")
    for key, count in sorted(failed.items(), key=lambda item: -item[1])[:8]:
        summary.append(f"  failed {count}x: {key}")
    stuck = [record for record in work.counter if record["status"] == "stuck"]
    if stuck:
        summary.append(f"  stuck past {ITERATION_LIMIT} s: {len(stuck)}")

    # CoordinatedCounter: the JSON counter at or above its successful updates.
    successes = sum(record["succeeded"] for record in work.swift)
    try:
        with open(os.path.join(soak.store, "swift.json")) as file:
            count = json.load(file)["count"]
    except (OSError, ValueError, KeyError) as error:
        count = None
        if successes:
            violations.append(f"torn: CoordinatedCounter's file: {error}")
    if count is not None and count < successes:
        violations.append(f"lost: CoordinatedCounter ends at {count}, below its {successes} successful updates")
    # Which: two successful updates that wrote one count (one read what the other had replaced).
    written: dict[int, list[str]] = {}
    for record in work.swift:
        for value, when in record.get("wrote", []):
            stamp = time.strftime("%H:%M:%S", time.gmtime(when)) + f".{int(when % 1 * 1000):03d}"
            written.setdefault(int(value), []).append(f"{record['host']} at {stamp}")
    twice = sorted((value, hosts) for value, hosts in written.items() if len(hosts) > 1)
    if twice:
        violations.append("lost: CoordinatedCounter counts written by two successful updates: "
                          + "; ".join(f"{value} by {', '.join(hosts)}" for value, hosts in twice[:10]))
    runs_ok = sum(1 for record in work.swift if record["status"] == 0)
    summary.append(f"CoordinatedCounter: {runs_ok} of {len(work.swift)} runs clean, {successes} updates succeeded; ends at {count}")
    summary.extend(reasons(str(error)[:100] for record in work.swift for error in record["errors"]))

    # Blob: a read shows one whole write, or what a writer that failed left, and no read's turn
    # overlaps a successful writer's.
    outcome = {record["writer"]: record for record in work.blob_writes}
    reads = [record for record in work.blob_reads if record["outcome"] == "ok"]
    torn = []
    for record in reads:
        names = [writer for writer in record["writers"] if writer != "?"]
        if record["whole"]:
            continue
        if len(names) > 1:
            torn.append(record)                 # two writers' chunks: impossible after O_TRUNC
        elif names:
            if outcome.get(names[0], {}).get("outcome") == "ok" or names[0] == "init:0":
                torn.append(record)             # part of a write that ended well
        elif record["length"] or not emptied_by_a_failed_write(work.blob_writes, record["opened"]):
            torn.append(record)                 # empty, though every truncation before it was written
    for record in torn[:5]:
        violations.append(f"torn: {record['host']} read {record['length']} bytes of {record['writers']}")
    if len(torn) > 5:
        violations.append(f"torn: {len(torn) - 5} more blob reads")
    writes_ok = [record for record in work.blob_writes if record["outcome"] == "ok"]
    for problem in overlaps([(record["opened"], record["closing"], record["writer"]) for record in writes_ok]):
        violations.append("overlap: blob writers " + problem)
    for problem in reads_during_writes(reads, writes_ok)[:5]:
        violations.append("overlap: a blob read and a write " + problem)
    left = sum(1 for record in reads if not record["whole"]) - len(torn)
    summary.append(f"blob: {len(writes_ok)} of {len(work.blob_writes)} writes succeeded; {len(reads)} of "
                   f"{len(work.blob_reads)} reads, {left} of them what a failed writer left")
    summary.extend(reasons(record["outcome"] for record in work.blob_writes + work.blob_reads if record["outcome"] != "ok"))

    # fio and trees.
    bad = [record for record in work.fio if record["verify"]]
    for record in bad[:5]:
        violations.append(f"torn: fio on {record['host']} failed verify: {record.get('error', record['outcome'])}")
    fio_ok = [record for record in work.fio if record["outcome"] == "ok"]
    verified = sum(record.get("verified", 0) for record in fio_ok)
    summary.append(f"fio: {len(fio_ok)} of {len(work.fio)} rounds succeeded, {verified / 2**20:.0f} MiB verified")
    differing = [record for record in work.trees if record.get("same") is False]
    for record in differing[:5]:
        violations.append(f"torn: the tree {record['host']} copied at {time.strftime('%H:%M:%S', time.localtime(record['began']))} "
                          f"read back different on {record['reader']}: {record['detail']}")
    compared = sum(1 for record in work.trees if "same" in record)
    summary.append(f"trees: {compared} of {len(work.trees)} copies read back and compared")

    # Work was done, and faults struck.
    for name, done in (("counter", len(succeeded)), ("CoordinatedCounter", successes), ("blob writes", len(writes_ok)),
                       ("blob reads", len(reads)), ("fio", len(fio_ok)), ("trees", compared)):
        if done == 0:
            violations.append(f"no work: {name} never succeeded")
    kinds: dict[str, int] = {}
    for fault in faults:
        kinds[fault["kind"]] = kinds.get(fault["kind"], 0) + 1
    summary.append("faults: " + (", ".join(f"{kind} {count}" for kind, count in kinds.items()) or "none"))

    # Liveness, reported: the longest counter iteration that began away from any fault.
    def near_fault(moment: float) -> bool:
        return any(fault["began"] - 1 <= moment <= fault["ended"] + TTL + 5 for fault in faults)
    calm = [record["ended"] - record["began"] for record in work.counter if not near_fault(record["began"])]
    if calm:
        calm.sort()
        summary.append(f"counter iterations away from faults: {len(calm)}, p50 {calm[len(calm) // 2] * 1000:.0f} ms, "
                       f"longest {calm[-1]:.2f} s")
    # And near each kind of fault: those begun during one or within the TTL and 5 s after it.
    for kind in sorted(kinds):
        near = [record for record in work.counter
                if any(fault["kind"] == kind and fault["began"] - 1 <= record["began"] <= fault["ended"] + TTL + 5
                       for fault in faults)]
        if not near:
            continue
        times = sorted(record["ended"] - record["began"] for record in near)
        slow = sum(1 for taken in times if taken > 5)
        summary.append(f"counter iterations near {kind}: {len(near)}, p50 {times[len(times) // 2]:.2f} s, "
                       f"longest {times[-1]:.2f} s, {slow} over 5 s")
    return violations, summary


def nemesis(options) -> int:
    unknown = sorted(set(options.faults.split(",")) - set(Nemesis.KINDS))
    if unknown:
        print(f"cluster_soak.py: no such fault: {', '.join(unknown)} (kinds: {', '.join(Nemesis.KINDS)})", file=sys.stderr)
        return 2
    with Cluster(options, options.hosts) as soak:
        work = Workloads(soak)
        threads = work.threads()
        faults = Nemesis(soak, options.random, options.quiet, tuple(options.faults.split(",")))
        started = time.monotonic()
        until = started + options.seconds
        log(f"{options.hosts} hosts, {options.seconds} s; store {soak.store}")
        for thread in threads:
            thread.start()
        try:
            faults.run(until)
            work.stop.wait(max(0.0, until - time.monotonic()))
        finally:
            faults.stop.set()
            open(os.path.join(soak.work, "stop"), "w").close()
            work.stop.set()
            # What runs on is given the time of one iteration, then killed with its group.
            deadline = time.monotonic() + 30
            while any(thread.is_alive() for thread in threads) and time.monotonic() < deadline:
                time.sleep(0.2)
            work.end()
            for thread in threads:
                thread.join(ITERATION_LIMIT + 30)
        alive = [thread.name for thread in threads if thread.is_alive()]
        if options.keep:
            # Every record and fault, for whoever looks into a violation afterwards.
            with open(os.path.join(soak.work, "records.json"), "w") as file:
                json.dump({"faults": faults.faults, "counter": work.counter, "swift": work.swift,
                           "blob_writes": work.blob_writes, "blob_reads": work.blob_reads,
                           "fio": work.fio, "trees": work.trees}, file, default=str)
        violations, summary = check(soak, work, faults.faults)
        if alive:
            violations.append(f"workloads did not end: {alive}")
        violations.extend("soak: " + error for error in work.errors)
        struck = {fault["kind"] for fault in faults.faults}
        if not options.random and options.seconds >= 75 and struck != set(faults.kinds):
            violations.append(f"not every kind of fault struck: {sorted(struck)}")
        if not faults.faults and options.seconds > 0:
            violations.append("no fault struck")
        violations.extend("nemesis: " + error for error in faults.errors)
        print(f"--- {time.monotonic() - started:.0f} s, {options.hosts} hosts")
        for line in summary:
            print("  " + line)
        if violations:
            print("VIOLATIONS:")
            for line in violations:
                print("  " + line)
            for host in soak.hosts:
                print(f"--- {host.name}'s log\n{host.log_tail()}")
            return 1
        print("no update lost, no read torn, no writers overlapping")
        return 0


# ------------------------------------------------------------------------- the long counter runs

def shell_counters(soak: Cluster, rounds: int) -> tuple[list[str], float, float]:
    """Both hosts' shell counters at once: the problems, the slowest iteration, the run's time."""
    a, b = soak.hosts[:2]
    with open(a.path("counter"), "w") as file:
        file.write("0\n")
    records: dict[str, list[dict]] = {a.name: [], b.name: []}
    barrier = threading.Barrier(2)

    def count(host: Host) -> None:
        barrier.wait()
        for _ in range(rounds):
            records[host.name].append(counter_iteration(soak.coordfs, host.path("counter")))

    started = time.monotonic()
    threads = [threading.Thread(target=count, args=(host,)) for host in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - started
    problems = []
    for name, done in records.items():
        failed = [f"{record['status']}: {record['error'][-80:]}" for record in done if record["status"] != 0]
        if failed:
            problems.append(f"{name}: {len(failed)} iterations failed, e.g. {failed[0]}")
    slowest = max(record["ended"] - record["began"] for done in records.values() for record in done)
    if slowest >= 5:
        problems.append(f"an iteration took {slowest:.1f} s")
    with open(os.path.join(soak.store, "counter")) as file:
        final = file.read().strip()
    if final != str(2 * rounds):
        problems.append(f"the counter ends at {final}, not {2 * rounds}")
    return problems, slowest, took


def swift_counters(soak: Cluster, rounds: int, run: int) -> tuple[list[str], float]:
    """CoordinatedCounter on both hosts at once: the problems and the run's time."""
    a, b = soak.hosts[:2]
    name = f"swift-{run}.json"
    started = time.monotonic()
    processes = [subprocess.Popen([soak.counter, host.path(name), str(rounds), host.name, other.name], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for host, other in ((a, b), (b, a))]
    problems = []
    for process in processes:
        try:
            output, error = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            process.kill()
            output, error = process.communicate()
            problems.append("a CoordinatedCounter did not end in 600 s")
        if process.returncode != 0:
            problems.append(f"CoordinatedCounter exited {process.returncode}: {output.strip()[-300:]} {error.strip()[-300:]}")
    took = time.monotonic() - started
    try:
        with open(os.path.join(soak.store, name)) as file:
            count = json.load(file)["count"]
    except (OSError, ValueError, KeyError) as error:
        count = f"unreadable ({error})"
    if count != 2 * rounds:
        problems.append(f"CoordinatedCounter ends at {count}, not {2 * rounds}")
    return problems, took


def counters(options) -> int:
    failed = done = 0
    with Cluster(options, 2) as soak:
        for run in range(1, options.runs + 1):
            problems, slowest, took = shell_counters(soak, options.rounds)
            swift_problems, swift_took = swift_counters(soak, options.rounds, run)
            problems += swift_problems
            done += 1
            failed += bool(problems)
            log(f"run {run}: shell 2 x {options.rounds} in {took:.1f} s (slowest iteration {slowest * 1000:.0f} ms); "
                f"CoordinatedCounter 2 x {options.rounds} in {swift_took:.1f} s" + (": " + "; ".join(problems) if problems else ""))
            if problems and options.stop_on_failure:
                for host in soak.hosts:
                    print(f"--- {host.name}'s log\n{host.log_tail()}")
                break
    print(f"{done - failed} of {done} runs exact, with no iteration failed or taking 5 s")
    return 1 if failed or done == 0 else 0


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] in ("blob-writer", "blob-reader"):
        (blob_writer_loop if sys.argv[1] == "blob-writer" else blob_reader_loop)(*sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("nemesis", "counters"):
        command = commands.add_parser(name)
        command.add_argument("--coordfs", required=True)
        command.add_argument("--counter", required=True, help="CoordinatedCounter")
        command.add_argument("--keep", action="store_true", help="keep the work directory (logs, store, and every record in records.json)")
    commands.choices["nemesis"].add_argument("--hosts", type=int, default=3)
    commands.choices["nemesis"].add_argument("--seconds", type=float, default=90)
    commands.choices["nemesis"].add_argument("--quiet", type=float, default=6, help="seconds between faults (doubled at most with --random)")
    commands.choices["nemesis"].add_argument("--random", action="store_true", help="faults, targets and lengths drawn at random")
    commands.choices["nemesis"].add_argument("--faults", default=",".join(Nemesis.KINDS),
                                             help="the kinds of fault to strike, comma-separated (default: all: %(default)s)")
    commands.choices["counters"].add_argument("--runs", type=int, default=20)
    commands.choices["counters"].add_argument("--rounds", type=int, default=200)
    commands.choices["counters"].add_argument("--stop-on-failure", action="store_true")
    options = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, mounts)", file=sys.stderr)
        return 1
    for tool in ("etcd", "fio", "ip", "nsenter"):
        if shutil.which(tool) is None:
            print(f"needs {tool} (`make setup` installs it)", file=sys.stderr)
            return 1
    return nemesis(options) if options.command == "nemesis" else counters(options)


if __name__ == "__main__":
    sys.exit(main())
