#!/usr/bin/env python3
"""Hosts that share a store coordinate through etcd: coordfs mounts with --cluster.

A 3-member etcd cluster and two hosts, A and B, each in a network namespace of its own
(cluster.py). Each host's coordfs daemon runs in its host's namespace and mounts one shared
backing directory (the "store") on a mount point of its own; the programs that use the mounts
run here. Tests: a read on B waits for a write held on A and sees what it wrote; readers on both
share; a rename on A waits for a reader on B; other files of a directory held on A are not
held up; the keys of files created where both hosts work are given back once idle; a counter
that each host increments 40 times at once, each a `coordfs coordinate --write` hold whose own
cat and write go through its mount, ends exact with no iteration failed or stalled, and so does
CoordinatedCounter (FileCoordinator, atomic saves) on both hosts at once, well within the break
time; a member killed changes nothing visible; a host cut off loses its grants after its
TTL (its programs get ENOLCK, the other host goes ahead); a daemon killed with -9 likewise.
Fencing (both hosts with --no-kernel-passthrough): writes through a file open across a lost
lease are refused with EIO, and status says the lease is lost; a file held open across a
partition is held again once it heals. A nemesis: while a hold on A appends through a file it
keeps open and B's read waits for it, A is cut off from etcd, paused past its TTL (SIGSTOP) or
killed (-9); B goes ahead only once A's lease could have ended, reads exactly the writes that
landed, none lands after, and A's later writes fail (EIO; ENOTCONN once its daemon is dead).
File locks (ClusterLockTests): flock on B waits for A's flock, and flock -n and -w fail as they
would on one host; fcntl locks through Python's fcntl.lockf likewise, F_GETLK on B shows A's; a
host killed while it holds a lock lets the other have it after its TTL; a host cut off past its
TTL takes no lock (ENOLCK), and once healed asks again for the locks its programs still hold.
The same sharing policy on every host (ClusterSharingTests): a `cat` on B reads a log A appends to
at once; it goes past a writer in place on A whose file has stayed unchanged for the settle time,
well before the break time; a presenter on A that refuses makes B's write fail with its errno; and
a presenter on A with unsaved changes is asked to save before B reads, whether A holds a
delegation of the file or only its presenter's presence.
File names hidden from etcd (ClusterHiddenNamesTests, both hosts with --cluster-key-file): B's
read waits for A's write as in clear, B's status shows A's holder at its path, and no key or value
of the store in etcd names the file or its directory; a host without the key file is refused.

Needs root, etcd and a built coordfs (COORDFS, default .build/debug/coordfs):
    python3 Tests/Scripts/cluster_mount_test.py [-v]
"""

import base64
import errno
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))
COORDFS = os.environ.get("COORDFS", os.path.join(ROOT, ".build/debug/coordfs"))
# An Apple-style FilePresenter that prints its messages (Sources/PresenterLog), built beside coordfs.
PRESENTER_LOG = os.path.join(os.path.dirname(COORDFS), "PresenterLog")
# An Apple-style program: a JSON counter updated in coordinated writes with atomic saves
# (Sources/CoordinatedCounter), built beside coordfs.
COUNTER = os.path.join(os.path.dirname(COORDFS), "CoordinatedCounter")
# A presenter on the event channel that answers as told (refuses, saves): Tests/Scripts/presenter.py.
PRESENTER = os.path.join(HERE, "presenter.py")
TTL = 5


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (network namespaces, mounts)"
    for tool in ("etcd", "ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    if not os.access(COORDFS, os.X_OK):
        return f"needs a built coordfs at {COORDFS}"
    if not os.access(PRESENTER_LOG, os.X_OK):
        return f"needs a built PresenterLog at {PRESENTER_LOG}"
    if not os.access(COUNTER, os.X_OK):
        return f"needs a built CoordinatedCounter at {COUNTER}"
    return None


class Opening:
    """A program's open(2) under way in a thread: whether it still waits, and how it ended."""

    def __init__(self, path, flags):
        self.result = None
        self.error = None
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(path, flags), daemon=True)
        self.thread.start()

    def _run(self, path, flags):
        try:
            fd = os.open(path, flags)
            try:
                if flags & (os.O_WRONLY | os.O_RDWR) == 0:
                    self.result = os.read(fd, 1 << 16)
                else:
                    self.result = b""
            finally:
                os.close(fd)
        except OSError as error:
            self.error = error
        self.ended.set()

    def waits(self, seconds=0.8):
        return not self.ended.wait(seconds)

    def finish(self, seconds=15):
        self.assert_ended = self.ended.wait(seconds)
        return self.assert_ended


class Reading(Opening):
    """A program's read of a whole file under way in a thread, as `cat` reads it, which notes when
    its open was granted (`granted`, by time.monotonic(): CLOCK_MONOTONIC, as other processes' clocks)."""

    def __init__(self, path):
        self.granted = None
        super().__init__(path, os.O_RDONLY)

    def _run(self, path, flags):
        try:
            fd = os.open(path, flags)
            self.granted = time.monotonic()
            try:
                self.result = os.read(fd, 1 << 16)
            finally:
                os.close(fd)
        except OSError as error:
            self.error = error
        self.ended.set()


def stop(process, seconds):
    """Ends `process`: asked to, then killed if it has not within `seconds`."""
    process.terminate()
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


daemon_of = cluster.daemon_of


class ClusterHosts:
    """Two hosts, A and B (or as many as HOSTS names), each a coordfs mount of one store in its
    own network namespace."""

    HOSTS = ("A", "B")

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="coordfs-cluster-")
        cls.state = os.path.join(cls.work, "state")
        cls.store = os.path.join(cls.work, "store")
        os.makedirs(cls.store)
        cls.info = cluster.up(cls.state, members=3, hosts=len(cls.HOSTS))
        cls.mounts = {}
        try:
            for host in cls.HOSTS:
                cls.mount(host)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def mount(cls, host, extra=()):
        node = cls.info["hosts"][cls.HOSTS.index(host)]
        point = os.path.join(cls.work, "mount" + host)
        os.makedirs(point, exist_ok=True)
        urls = ",".join(url.removeprefix("http://") for url in cls.info["client_urls"])
        command = cluster._nsenter(node["namespace"]) + [COORDFS, "mount", cls.store, point,
                   "--cluster", "etcd://" + urls, "--cluster-store", "shared", "--host-name", host,
                   "--cluster-ttl", str(TTL), "--wait-timeout", "30", "--log", os.path.join(cls.work, f"{host}.log"),
                   *extra]
        subprocess.run(command, check=True, timeout=60, capture_output=True)
        cls.mounts[host] = point

    @classmethod
    def unmount(cls, host):
        point = cls.mounts.pop(host, None)
        if point is None:
            return
        if subprocess.run([COORDFS, "unmount", point], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)

    @classmethod
    def tearDownClass(cls):
        for host in list(cls.mounts):
            cls.unmount(host)
        try:
            cluster.down(cls.state, quiet=True)
        finally:
            if os.environ.get("CLUSTER_TEST_KEEP") is None:
                shutil.rmtree(cls.work, ignore_errors=True)

    def path(self, host, name):
        return os.path.join(self.mounts[host], name)

    def write(self, host, name, data):
        with open(self.path(host, name), "wb") as file:
            file.write(data)

    @staticmethod
    def read(path):
        with open(path, "rb") as file:
            return file.read()

    def log_tail(self, host):
        try:
            with open(os.path.join(self.work, f"{host}.log")) as file:
                return "".join(file.readlines()[-20:])
        except OSError:
            return "(no log)"

    def cluster_status(self, host):
        """The `cluster` object of `coordfs status --json` on host's mount."""
        result = subprocess.run([COORDFS, "status", self.mounts[host], "--json"], capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout).get("cluster", {})

    def apple_style_counters(self, name, rounds):
        """CoordinatedCounter on A and B at once, `rounds` updates each: both end well, the
        counter exact, well within the break time."""
        runs = [subprocess.Popen([COUNTER, self.path(host, name), str(rounds), host, other],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for host, other in (("A", "B"), ("B", "A"))]
        began = time.monotonic()
        try:
            for run in runs:
                output, error = run.communicate(timeout=90)
                self.assertEqual(run.returncode, 0, output + error + self.log_tail("A") + self.log_tail("B"))
        finally:
            for run in runs:
                if run.poll() is None:
                    run.kill()
                    run.wait()
        took = time.monotonic() - began
        self.assertEqual(json.loads(self.read(os.path.join(self.store, name)))["count"], 2 * rounds)
        self.assertLess(took, 30, f"{2 * rounds} updates took {took:.0f} s: a save waited for the break time")

    def wait_for_lease(self, host, state, seconds):
        """Waits until host's status says its lease is `state` ("held", "lost"); the status then."""
        deadline = time.monotonic() + seconds
        while True:
            status = self.cluster_status(host)
            if status.get("lease") == state:
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"{host}'s lease is not {state} after {seconds} s: {status}\n" + self.log_tail(host))
            time.sleep(0.3)



@unittest.skipIf(skip_reason(), skip_reason() or "")
class ClusterMountTests(ClusterHosts, unittest.TestCase):
    @classmethod
    def mount(cls, host, extra=()):
        # B's reads here wait for A's writers that keep a file open without writing: the settle
        # rule, which lets a reader past such a writer once its file has stayed unchanged a
        # second (ClusterSharingTests), is off.
        super().mount(host, ["--settle-time", "0", *extra])

    # ------------------------------------------------------------------ waits and sharing

    def test_0_a_mount_of_the_store_outside_its_cluster_is_refused(self):
        # A and B share the store (same cluster, same store name); a third mount of it that
        # would not coordinate with them is refused, with or without a cluster of its own.
        point = os.path.join(self.work, "mountC")
        os.makedirs(point, exist_ok=True)
        urls = ",".join(url.removeprefix("http://") for url in self.info["client_urls"])
        try:
            plain = subprocess.run([COORDFS, "mount", self.store, point], capture_output=True, text=True, timeout=30)
            self.assertNotEqual(plain.returncode, 0, plain.stderr)
            self.assertIn("is already the backing of the coordfs mount", plain.stderr)
            other = subprocess.run([COORDFS, "mount", self.store, point, "--cluster", "etcd://" + urls, "--cluster-store", "another",
                                    "--host-name", "C"], capture_output=True, text=True, timeout=30)
            self.assertNotEqual(other.returncode, 0, other.stderr)
            self.assertIn("which is not a host of the store 'another' on this cluster", other.stderr)
            # Two hosts of one name would take each other's news.
            twin = subprocess.run([COORDFS, "mount", self.store, point, "--cluster", "etcd://" + urls, "--cluster-store", "shared",
                                   "--host-name", "A"], capture_output=True, text=True, timeout=30)
            self.assertNotEqual(twin.returncode, 0, twin.stderr)
            self.assertIn("is already the host 'A' of the store 'shared'", twin.stderr)
            # Elsewhere too: a daemon that would join as A is refused by the store itself, at
            # once (A's daemon here is live), before it grants anything.
            elsewhere = os.path.join(self.work, "elsewhere")
            os.makedirs(elsewhere, exist_ok=True)
            started = time.monotonic()
            daemon = subprocess.run(cluster._nsenter(self.info["hosts"][0]["namespace"]) + [
                COORDFS, "daemon", "--socket", os.path.join(self.work, "twin.sock"), "--cluster", "etcd://" + urls,
                "--cluster-store", "shared", "--host-name", "A", "--cluster-directory", elsewhere],
                capture_output=True, text=True, timeout=60)
            self.assertNotEqual(daemon.returncode, 0, daemon.stderr)
            self.assertIn("another host of this store is named 'A'", daemon.stderr)
            self.assertIn("give each host its own --host-name", daemon.stderr)
            self.assertLess(time.monotonic() - started, TTL, "a live run on this machine is not waited for")
        finally:
            if os.path.ismount(point):
                subprocess.run([COORDFS, "unmount", point], capture_output=True, timeout=30)

    def test_1_a_read_on_B_waits_for_a_write_held_on_A(self):
        self.write("A", "doc", b"first\n")
        fd = os.open(self.path("A", "doc"), os.O_WRONLY | os.O_TRUNC)
        try:
            reader = Opening(self.path("B", "doc"), os.O_RDONLY)
            self.assertTrue(reader.waits(), "B's read went ahead while A held the file for writing")
            os.write(fd, b"second\n")
        finally:
            os.close(fd)
        self.assertTrue(reader.finish(), "B's read did not go ahead after A closed\n" + self.log_tail("B"))
        self.assertIsNone(reader.error)
        self.assertEqual(reader.result, b"second\n")

    def test_1_status_on_B_shows_A_s_holder_and_who_waits_for_it(self):
        self.write("A", "statusdoc", b"s\n")
        fd = os.open(self.path("A", "statusdoc"), os.O_WRONLY)
        try:
            reader = Opening(self.path("B", "statusdoc"), os.O_RDONLY)
            self.assertTrue(reader.waits())
            result = subprocess.run([COORDFS, "status", self.mounts["B"], "--json"], capture_output=True, text=True, timeout=30)
            self.assertEqual(result.returncode, 0, result.stderr)
            status = json.loads(result.stdout)
            hosts = {host["host"]: host for host in status.get("hosts", [])}
            self.assertIn("A", hosts, result.stdout)
            holders = [(holder.get("pid"), intent.get("path")) for holder in hosts["A"]["holders"]
                       for intent in holder.get("intents", [])]
            self.assertIn((os.getpid(), self.path("B", "statusdoc")), holders, result.stdout)
            waiting = [waiter.get("identity") for waiter in hosts["A"]["waiters"]]
            self.assertIn("host:B", waiting, result.stdout)
            table = subprocess.run([COORDFS, "status", self.mounts["B"]], capture_output=True, text=True, timeout=30).stdout
            self.assertIn("HOLD@A", table)
        finally:
            os.close(fd)
        self.assertTrue(reader.finish(), self.log_tail("B"))

    def test_2_a_write_on_A_waits_for_a_read_held_on_B(self):
        self.write("B", "notes", b"one\n")
        fd = os.open(self.path("B", "notes"), os.O_RDONLY)
        try:
            writer = Opening(self.path("A", "notes"), os.O_WRONLY)
            self.assertTrue(writer.waits(), "A's write went ahead while B read")
        finally:
            os.close(fd)
        self.assertTrue(writer.finish(), self.log_tail("A"))
        self.assertIsNone(writer.error)

    def test_2_a_hold_through_A_s_socket_holds_off_B(self):
        # `coordfs coordinate` on A holds the item through A's control socket, not an open.
        self.write("A", "coordinated", b"c\n")
        holder = subprocess.Popen([COORDFS, "coordinate", "--write", self.path("A", "coordinated"), "--", "sleep", "2"])
        try:
            time.sleep(0.8)
            reader = Opening(self.path("B", "coordinated"), os.O_RDONLY)
            self.assertTrue(reader.waits(0.6), "B's read went ahead while A's coordinator held the item")
        finally:
            holder.wait(timeout=30)
        self.assertEqual(holder.returncode, 0)
        self.assertTrue(reader.finish(), self.log_tail("B"))

    def own_write_while_B_reads(self, name, holder_command):
        """`holder_command` holds `name` on A, says "held", then writes "new" into it through A's
        mount a second later. B's read, begun meanwhile, recalls A's delegation: it waits for the
        hold and reads what the hold's own write made, which does not wait for B in turn."""
        self.write("A", name, b"old\n")
        holder = subprocess.Popen(holder_command, stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "held", self.log_tail("A"))
            started = time.monotonic()
            reader = Opening(self.path("B", name), os.O_RDONLY)
            self.assertTrue(reader.waits(0.5), "B's read went ahead while A's hold held the item")
            self.assertEqual(holder.wait(timeout=15), 0, self.log_tail("A"))
            self.assertLess(time.monotonic() - started, 5, "A's own write waited for B's recall\n" + self.log_tail("A"))
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
            holder.stdout.close()
        self.assertTrue(reader.finish(5), self.log_tail("B"))
        self.assertIsNone(reader.error)
        self.assertEqual(reader.result, b"new\n")

    def test_2_a_coordinated_write_on_A_goes_ahead_while_B_waits_for_it(self):
        target = shlex.quote(self.path("A", "own-item"))
        self.own_write_while_B_reads("own-item", [COORDFS, "coordinate", "--write", self.path("A", "own-item"), "--",
                                                  "sh", "-c", f"echo held; sleep 1; echo new > {target}"])

    def test_2_a_descriptor_hold_on_A_writes_its_item_while_B_waits_for_it(self):
        # flock's descriptor form: the shell holds the item, and its own write is the hold's.
        target = shlex.quote(self.path("A", "own-fd"))
        script = (f"exec 9>>{target}; {shlex.quote(COORDFS)} coordinate -x 9 || exit 10; echo held; "
                  f"sleep 1; echo new > {target}; exec 9>&-")
        self.own_write_while_B_reads("own-fd", ["sh", "-c", script])

    def test_2_a_coordinated_counter_on_both_hosts_loses_no_update(self):
        # The pattern the product exists for, across hosts: each host increments one counter
        # `rounds` times at once, each time in a hold whose own cat and write go through its own
        # mount. When a recall stopped covering the holder's own accessor, that inner cat or
        # write waited for the other host, which waited for the hold, until the break time (45 s);
        # then both went ahead, and updates were lost (30 + 30 ended at 56; 2 x 200 had done 45
        # in 661 s).
        rounds, bound = 40, 60
        self.write("A", "counter", b"0\n")
        runs = {"A": [], "B": []}
        start = threading.Barrier(2)
        deadline = time.monotonic() + bound

        def count(host):
            target = shlex.quote(self.path(host, "counter"))
            # An empty read would count from 0 again unseen (sh's $((v + 1)) takes it for 0).
            script = f'v=$(cat {target}) || exit 3; [ -n "$v" ] || exit 4; echo $((v + 1)) > {target}'
            start.wait()
            for _ in range(rounds):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                began = time.monotonic()
                run = subprocess.Popen([COORDFS, "coordinate", "--write", self.path(host, "counter"), "--", "sh", "-c", script],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
                try:
                    _, error = run.communicate(timeout=left)
                except subprocess.TimeoutExpired:
                    os.killpg(run.pid, signal.SIGKILL)      # the hold, its sh and cat: one group
                    _, error = run.communicate()
                runs[host].append((run.returncode, began, time.monotonic(), error.strip()))

        threads = [threading.Thread(target=count, args=(host,), daemon=True) for host in ("A", "B")]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(1.0, deadline + 10 - time.monotonic()))
        took = time.monotonic() - started
        self.assertFalse(any(thread.is_alive() for thread in threads), f"the counters still run after {took:.0f} s")
        for host, done in runs.items():
            failed = [(status, error) for status, _, _, error in done if status != 0]
            self.assertEqual(failed, [], f"{host}'s failed iterations\n" + self.log_tail(host))
            self.assertEqual(len(done), rounds, f"{host} did {len(done)} of {rounds} iterations in {bound} s\n" + self.log_tail(host))
        # They ran at once: each host began an iteration before the other's last ended.
        self.assertLess(max(done[0][1] for done in runs.values()), min(done[-1][2] for done in runs.values()))
        slowest = max(ended - began for done in runs.values() for _, began, ended, _ in done)
        self.assertLess(slowest, 5, f"an iteration took {slowest:.1f} s (a stall; all {rounds * 2} took {took:.1f} s)")
        self.assertEqual(self.read(os.path.join(self.store, "counter")), b"%d\n" % (2 * rounds), "updates lost")

    def test_2_apple_style_counters_on_both_hosts_lose_no_update(self):
        # CoordinatedCounter on each host at once: each update a coordinated write (forMerging)
        # whose atomic save renames a temporary file over the counter. The rename's temporary
        # file needs a delegation of its own; its destination, the hold's item, was recalled by
        # the other host's waiting update. Asked for again with the temporary file, it queued
        # behind that update, which waited for the hold: each save waited the break time.
        self.apple_style_counters("apple.json", 25)

    def test_3_O_NONBLOCK_opens_on_B_wait_for_what_A_holds_idle(self):
        # A made a tree and nobody holds it: tar on B opens each file with O_NONBLOCK, which
        # waits for A to give back what none of its programs uses (it failed with EAGAIN).
        os.makedirs(self.path("A", "tree"), exist_ok=True)
        names = [f"tree/f{index}" for index in range(20)]
        for name in names:
            self.write("A", name, name.encode())
        time.sleep(0.5)      # A's mount has the closes (each file's release comes after close(2))
        archive = os.path.join(self.work, "tree.tar")
        tar = subprocess.run(["tar", "cf", archive, "-C", self.mounts["B"], "tree"], capture_output=True, text=True, timeout=60)
        self.assertEqual(tar.returncode, 0, tar.stderr + self.log_tail("B"))
        with tarfile.open(archive) as made:
            self.assertEqual(sorted(member.name for member in made.getmembers() if member.isfile()), sorted(names))
        # Where a program on A really holds one, it fails at once, as on one host.
        fd = os.open(self.path("A", "tree/f0"), os.O_WRONLY)
        try:
            started = time.monotonic()
            with self.assertRaises(OSError) as raised:
                os.close(os.open(self.path("B", "tree/f0"), os.O_RDONLY | os.O_NONBLOCK))
            self.assertEqual(raised.exception.errno, errno.EAGAIN)
            self.assertLess(time.monotonic() - started, 0.8, "refused by A, not given up on")
        finally:
            os.close(fd)

    def test_3_readers_on_both_hosts_share(self):
        self.write("A", "shared", b"both\n")
        fd = os.open(self.path("A", "shared"), os.O_RDONLY)
        try:
            reader = Opening(self.path("B", "shared"), os.O_RDONLY)
            self.assertTrue(reader.finish(5), "B's read waited for A's read")
            self.assertEqual(reader.result, b"both\n")
        finally:
            os.close(fd)

    def delegation_keys(self, inside):
        """How many delegation keys the store has in etcd for items inside the directory `inside`."""
        prefix = f"/coordfs/shared/delegations/{inside}/".encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        answer = cluster.run_in_netns(self.info["hosts"][0]["namespace"], cluster.http_json,
                                      self.info["members"][0]["client_url"] + "/v3/kv/range",
                                      {"key": cluster._b64(prefix), "range_end": cluster._b64(end), "count_only": True})
        return int(answer.get("count", 0))

    def test_4_keys_of_files_created_where_both_hosts_work_are_given_back_once_idle(self):
        os.makedirs(self.path("A", "meet"), exist_ok=True)
        self.write("B", "meet/b", b"b\n")
        fd = os.open(self.path("B", "meet/b"), os.O_RDONLY)     # B's program keeps a file there
        try:
            for number in range(40):
                self.write("A", f"meet/a{number}", b"a\n")
            made = self.delegation_keys("meet")
            self.assertGreaterEqual(made, 40, "a delegation per file A created beside B's")
            deadline = time.monotonic() + 25
            while time.monotonic() < deadline and self.delegation_keys("meet") > 1:
                time.sleep(0.5)
            left = self.delegation_keys("meet")
            self.assertLessEqual(left, 1, f"{left} of {made} keys left once A's files went idle (B's stays)\n"
                                 + self.log_tail("A"))
        finally:
            os.close(fd)

    def test_4_other_files_of_a_directory_held_on_A_go_ahead(self):
        os.makedirs(self.path("A", "project"), exist_ok=True)
        self.write("A", "project/held", b"h\n")
        self.write("A", "project/free", b"f\n")
        fd = os.open(self.path("A", "project/held"), os.O_WRONLY)
        try:
            free = Opening(self.path("B", "project/free"), os.O_RDONLY)
            self.assertTrue(free.finish(5), "B waited for a file A does not hold\n" + self.log_tail("A"))
            self.assertEqual(free.result, b"f\n")
            held = Opening(self.path("B", "project/held"), os.O_RDONLY)
            self.assertTrue(held.waits(), "B's read of the held file went ahead")
        finally:
            os.close(fd)
        self.assertTrue(held.finish(), self.log_tail("A"))

    def test_5_a_rename_on_A_waits_for_a_reader_on_B(self):
        self.write("A", "old-name", b"r\n")
        fd = os.open(self.path("B", "old-name"), os.O_RDONLY)
        renamed = threading.Event()
        thread = threading.Thread(target=lambda: (os.rename(self.path("A", "old-name"), self.path("A", "new-name")),
                                                  renamed.set()), daemon=True)
        thread.start()
        try:
            self.assertFalse(renamed.wait(0.8), "the rename went ahead while B read the file")
        finally:
            os.close(fd)
        self.assertTrue(renamed.wait(15), self.log_tail("A"))
        self.assertTrue(os.path.exists(self.path("B", "new-name")))

    def test_5_crossing_renames_on_both_hosts_both_end(self):
        # A renames x to y while B renames y to x: each needs both items, and each host's
        # request may get one delegation first. Neither may end waiting for the other.
        for round in range(8):
            x, y = f"cross-{round}-x", f"cross-{round}-y"
            self.write("A", x, b"x\n")
            self.write("A", y, b"y\n")
            errors, start = [], threading.Barrier(2)

            def rename(host, source, destination):
                start.wait()
                try:
                    os.rename(self.path(host, source), self.path(host, destination))
                except OSError as error:
                    errors.append(f"{host}: {error}")

            threads = [threading.Thread(target=rename, args=("A", x, y), daemon=True),
                       threading.Thread(target=rename, args=("B", y, x), daemon=True)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            self.assertFalse(any(thread.is_alive() for thread in threads),
                             f"round {round}: a rename still waits after 10 s\n" + self.log_tail("A") + self.log_tail("B"))
            self.assertEqual(errors, [], f"round {round}")
            # One of them went first; the other moved what it left: one of the two names remains
            # (in the store: a mount hears the other's rename a moment later).
            self.assertEqual(len([name for name in (x, y) if os.path.exists(os.path.join(self.store, name))]), 1)

    def test_5_a_presenter_on_B_hears_A_s_write_once(self):
        # B watches its backing directory: A's change reaches B's presenter through it (as a
        # change from outside B's mount), and through nothing else.
        self.write("A", "watched", b"1\n")
        watch = Watch(self.path("B", "watched"))
        try:
            time.sleep(1.5)
            self.write("A", "watched", b"2\n")
            self.assertTrue(watch.wait_for("CHANGED"), f"{watch.events}\n" + self.log_tail("B"))
            self.assertTrue(watch.named("RELINQUISH_WRITER"), f"B's presenter was not asked first: {watch.events}")
            time.sleep(1.0)
            self.assertEqual(len(watch.named("CHANGED")), 1, f"told more than once: {watch.events}")
        finally:
            watch.stop()

    @unittest.skipIf(shutil.which("fio") is None, "needs fio")
    def test_5_fio_from_both_hosts_on_the_same_files_verifies(self):
        # Each host's writers write their own blocks of the same two files and read them back
        # (crc32c); the hosts' opens of a file take turns.
        runs = []
        for index, host in enumerate(("A", "B")):
            command = ["fio", "--name=" + host, "--directory=" + self.mounts[host], "--filename_format=fio.$filenum",
                       "--nrfiles=2", "--size=8m", f"--offset={index * 8}m", "--offset_increment=4m", "--numjobs=2",
                       "--ioengine=psync", "--bs=4k", "--rw=randwrite", "--verify=crc32c", "--do_verify=1",
                       "--verify_fatal=1", "--verify_state_save=0", "--file_service_type=roundrobin",
                       "--group_reporting", "--minimal"]
            runs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        for host, run in zip(("A", "B"), runs):
            output, _ = run.communicate(timeout=120)
            self.assertEqual(run.returncode, 0, f"fio on {host}: {output[-2000:]}\n{self.log_tail(host)}")
            # --minimal: the fifth field is the job's error number.
            self.assertEqual(output.strip().splitlines()[-1].split(";")[4], "0", output[-2000:])

    def test_6_the_leader_killed_changes_nothing_visible(self):
        # The worst member to lose: until the others have elected one of them, every request
        # is answered "no leader"; the hosts' programs must not see it.
        leader = cluster.leader(self.state)
        self.assertIsNotNone(leader, "the cluster has no leader")
        cluster.kill_member(self.state, leader)
        try:
            # Through the election: new items on both hosts, each a delegation to ask for.
            failures = []
            ends = time.monotonic() + 3.0
            number = 0
            while time.monotonic() < ends:
                number += 1
                host = "AB"[number % 2]
                try:
                    self.write(host, f"election-{number}", b"e\n")
                except OSError as error:
                    failures.append(f"{host} election-{number}: {error}")
                time.sleep(0.02)
            self.assertEqual(failures, [], self.log_tail("A") + self.log_tail("B"))
            for round in range(3):
                self.write("A", "member", b"a%d\n" % round)
                fd = os.open(self.path("A", "member"), os.O_WRONLY)
                try:
                    reader = Opening(self.path("B", "member"), os.O_RDONLY)
                    self.assertTrue(reader.waits(), "B's read went ahead while A wrote")
                finally:
                    os.close(fd)
                self.assertTrue(reader.finish(), self.log_tail("B"))
                self.assertEqual(reader.result, b"a%d\n" % round)
        finally:
            cluster.start_member(self.state, leader)

    # ------------------------------------------------------------------ failures

    def test_7_the_whole_etcd_cluster_down_refuses_what_it_cannot_grant(self):
        self.write("A", "held-before", b"h\n")            # A holds its delegation now
        killed = time.monotonic()
        for member in (1, 2, 3):
            cluster.kill_member(self.state, member)
        try:
            # What A holds a delegation of it still grants, while its lease can still be valid.
            self.assertEqual(self.read(self.path("A", "held-before")), b"h\n")
            # What it would have to ask for it refuses.
            with self.assertRaises(OSError) as raised:
                open(self.path("A", "new-while-down"), "wb").close()
            self.assertEqual(raised.exception.errno, errno.ENOLCK)
            # Once its lease could have ended, nothing.
            time.sleep(max(0.0, TTL - (time.monotonic() - killed)) + 0.5)
            with self.assertRaises(OSError) as raised:
                self.read(self.path("A", "held-before"))
            self.assertEqual(raised.exception.errno, errno.ENOLCK)
        finally:
            cluster.start_members(self.state, [1, 2, 3])
        # Both hosts join again by themselves.
        for host in ("A", "B"):
            deadline = time.monotonic() + 20
            while True:
                try:
                    self.write(host, f"after-{host}", host.encode())
                    break
                except OSError as error:
                    if error.errno != errno.ENOLCK or time.monotonic() > deadline:
                        raise AssertionError(f"{host} did not join again: {error}\n{self.log_tail(host)}")
                    time.sleep(0.3)
        self.assertEqual(self.read(os.path.join(self.store, "held-before")), b"h\n")
        self.assertFalse(os.path.exists(os.path.join(self.store, "new-while-down")))

    def test_8_a_daemon_killed_lets_the_other_host_go_ahead_after_its_ttl(self):
        self.write("A", "crash", b"before\n")
        fd = os.open(self.path("A", "crash"), os.O_WRONLY)
        try:
            reader = Opening(self.path("B", "crash"), os.O_RDONLY)
            self.assertTrue(reader.waits())
            daemon = daemon_of(self.mounts["A"])
            self.assertIsNotNone(daemon, "A's daemon not found")
            killed = time.monotonic()
            os.kill(daemon, signal.SIGKILL)
            self.assertTrue(reader.finish(TTL + 10), "B still waits after A's daemon died\n" + self.log_tail("B"))
            waited = time.monotonic() - killed
            self.assertIsNone(reader.error)
            self.assertEqual(reader.result, b"before\n")
            self.assertLess(waited, TTL + 5, f"B waited {waited:.1f} s for a dead host")
            # A's mount is gone: its programs' new opens fail. (A file open before goes on
            # where the kernel serves it straight from the backing file: see the failure table.)
            with self.assertRaises(OSError) as raised:
                os.open(self.path("A", "crash"), os.O_RDONLY)
            self.assertEqual(raised.exception.errno, errno.ENOTCONN)
        finally:
            try:
                os.close(fd)
            except OSError:
                pass
            self.unmount("A")
        self.mount("A")
        self.assertEqual(self.read(self.path("A", "crash")), b"before\n")

    def test_9_a_host_cut_off_loses_its_grants(self):
        self.write("A", "cut", b"kept\n")
        fd = os.open(self.path("A", "cut"), os.O_WRONLY)
        try:
            reader = Opening(self.path("B", "cut"), os.O_RDONLY)
            self.assertTrue(reader.waits())
            cluster.cut(self.state, "h1")
            cut = time.monotonic()
            self.assertTrue(reader.finish(TTL + 10), "B still waits after A was cut off\n" + self.log_tail("B"))
            self.assertLess(time.monotonic() - cut, TTL + 5)
            self.assertEqual(reader.result, b"kept\n")
            # A knows it holds nothing: a new open there fails at once.
            with self.assertRaises(OSError) as raised:
                open(self.path("A", "another"), "wb").close()
            self.assertEqual(raised.exception.errno, errno.ENOLCK, self.log_tail("A"))
        finally:
            os.close(fd)
            cluster.heal(self.state, "h1")
        # No byte lost: what each host wrote is there.
        self.assertEqual(self.read(os.path.join(self.store, "cut")), b"kept\n")



# B's side of an fcntl lock A holds of byte 0: a request that does not wait, F_GETLK, then a
# request that waits; a line of JSON.
FCNTL_ON_B = r'''
import errno, fcntl, json, os, struct, sys, time
file = open(sys.argv[1], "r+b")
report = {}
try:
    fcntl.lockf(file, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    report["at_once"] = "granted"
except OSError as error:
    report["at_once"] = errno.errorcode.get(error.errno, str(error.errno))
found = struct.unpack("hhqqi", fcntl.fcntl(file, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)))
report["getlk"] = {"type": found[0], "start": found[2], "length": found[3], "pid": found[4]}
started = time.monotonic()
fcntl.lockf(file, fcntl.LOCK_EX, 1, 0)
report["waited"] = time.monotonic() - started
print(json.dumps(report), flush=True)
'''

# A's side: holds an exclusive fcntl lock of byte 0 for argv[2] seconds, then exits (its close
# drops the lock).
FCNTL_ON_A = r'''
import fcntl, sys, time
file = open(sys.argv[1], "r+b")
fcntl.lockf(file, fcntl.LOCK_EX, 1, 0)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
'''

# One lock taken in a process of its own: argv path, kind (flock-sh, flock-ex: flock(2); ofd-r,
# ofd-w: an OFD lock of the whole file, F_OFD_SETLK(W)), "wait" or "nowait", seconds to hold it.
# Prints "held" once it holds it, or the errno's name; exits after holding it (its close drops it).
LOCKER = r'''
import errno, fcntl, os, struct, sys, time
path, kind, how, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
file = open(path, "r+b")
try:
    if kind.startswith("flock"):
        operation = fcntl.LOCK_SH if kind == "flock-sh" else fcntl.LOCK_EX
        fcntl.flock(file, operation | (fcntl.LOCK_NB if how == "nowait" else 0))
    else:
        command = fcntl.F_OFD_SETLK if how == "nowait" else fcntl.F_OFD_SETLKW
        type_ = fcntl.F_RDLCK if kind == "ofd-r" else fcntl.F_WRLCK
        # struct flock: l_type, l_whence, l_start, l_len (0: to the end), l_pid (0 for OFD locks)
        fcntl.fcntl(file, command, struct.pack("hhqqi4x", type_, os.SEEK_SET, 0, 0, 0))
    print("held", flush=True)
except OSError as error:
    print(errno.errorcode.get(error.errno, str(error.errno)), flush=True)
    sys.exit(0)
time.sleep(hold)
'''


def lock_skip_reason():
    if skip_reason():
        return skip_reason()
    return "needs flock (util-linux)" if shutil.which("flock") is None else None


@unittest.skipIf(lock_skip_reason(), lock_skip_reason() or "")
class ClusterLockTests(ClusterHosts, unittest.TestCase):
    """flock and fcntl locks exclude across hosts (docs/cluster.md, file locks). Files in locks/
    are not coordinated (`mode locks/* = off`): two hosts' writable opens of one file would
    otherwise wait for each other before any lock is asked for."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # The tests' uncoordinated files live in locks/, made once through A.
        os.makedirs(os.path.join(cls.mounts["A"], "locks"), exist_ok=True)

    @classmethod
    def mount(cls, host, extra=()):
        profile = os.path.join(cls.work, "locks.profile")
        with open(profile, "w") as file:
            file.write("mode locks/* = off\n")
        super().mount(host, ["--profile", profile, *extra])

    def hold(self, command):
        """Starts `command` (in a session of its own), which prints "held" once it holds its lock."""
        holder = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
        line = holder.stdout.readline().strip()
        if line != "held":
            holder.kill()
            holder.wait()
            raise AssertionError(f"the holder did not take its lock: {line!r}\n" + self.log_tail("A"))
        return holder

    @staticmethod
    def end(holder):
        try:
            os.killpg(holder.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        holder.wait()

    def test_flock_on_B_waits_until_A_s_flock_ends(self):
        # The issue's case, on a file coordinated as any other (flock opens it read-only: readers
        # share across hosts, and the locks are what keeps B out).
        self.write("A", "l", b"")
        holder = self.hold(["flock", self.path("A", "l"), "-c", "echo held; sleep 2"])
        try:
            started = time.monotonic()
            at_once = subprocess.run(["flock", "-n", self.path("B", "l"), "true"], capture_output=True, text=True, timeout=10)
            self.assertEqual(at_once.returncode, 1, "flock -n on B took the lock A's flock holds\n" + at_once.stderr)
            self.assertLess(time.monotonic() - started, 1.5, "flock -n waited")
            waiter = subprocess.run(["flock", "-w", "10", self.path("B", "l"), "true"], capture_output=True, text=True, timeout=30)
            waited = time.monotonic() - started
            self.assertEqual(waiter.returncode, 0, waiter.stderr + self.log_tail("B"))
            self.assertGreater(waited, 1.5, f"B's flock got A's lock after {waited:.3f} s")
            self.assertLess(waited, 6, f"B's flock waited {waited:.1f} s for a lock held 2 s")
        finally:
            holder.wait(timeout=15)

    def test_flock_w_on_B_times_out_while_A_holds(self):
        # flock -w ends its wait with a signal: the mount answers the kernel's interrupt.
        self.write("A", "locks/timed", b"")
        holder = self.hold(["flock", self.path("A", "locks/timed"), "-c", "echo held; sleep 30"])
        try:
            started = time.monotonic()
            waiter = subprocess.run(["flock", "-w", "1", self.path("B", "locks/timed"), "true"], capture_output=True, text=True,
                                    timeout=20)
            waited = time.monotonic() - started
            self.assertEqual(waiter.returncode, 1, "B's flock got the lock A holds")
            self.assertLess(waited, 4, f"flock -w 1 returned after {waited:.1f} s")
        finally:
            self.end(holder)
        # A's lock went with its holder: B's next flock takes it.
        self.assertEqual(subprocess.run(["flock", "-w", "10", self.path("B", "locks/timed"), "true"], timeout=30).returncode, 0)

    def test_fcntl_locks_through_lockf_exclude_across_hosts(self):
        self.write("A", "locks/db", b"0123456789")
        holder = self.hold([sys.executable, "-c", FCNTL_ON_A, self.path("A", "locks/db"), "3"])
        try:
            started = time.monotonic()
            on_b = subprocess.run([sys.executable, "-c", FCNTL_ON_B, self.path("B", "locks/db")], capture_output=True, text=True,
                                  timeout=30)
            self.assertEqual(on_b.returncode, 0, on_b.stderr + self.log_tail("B"))
            report = json.loads(on_b.stdout)
            self.assertIn(report["at_once"], ("EAGAIN", "EACCES"), report)
            # Another host's lock: the whole file, of no process here.
            self.assertEqual(report["getlk"], {"type": fcntl.F_WRLCK, "start": 0, "length": 0, "pid": 0}, report)
            self.assertGreater(report["waited"], 0.8, f"B locked while A held: {report}")
            self.assertLess(time.monotonic() - started, 8, report)
        finally:
            holder.wait(timeout=15)

    def lock_on(self, host, name, kind, how="nowait"):
        """What LOCKER answers on host for `kind` of name, in a process of its own that ends at
        once (its lock with it): "held", or the errno's name."""
        result = subprocess.run([sys.executable, "-c", LOCKER, self.path(host, name), kind, how, "0"], capture_output=True,
                                text=True, timeout=30)
        return result.stdout.strip() or result.stderr.strip()

    def test_shared_flocks_share_across_hosts_and_keep_exclusive_ones_out(self):
        self.write("A", "locks/shared", b"")
        holder = self.hold([sys.executable, "-c", LOCKER, self.path("A", "locks/shared"), "flock-sh", "wait", "30"])
        try:
            self.assertEqual(self.lock_on("B", "locks/shared", "flock-sh"), "held", "shared flocks share\n" + self.log_tail("B"))
            self.assertIn(self.lock_on("B", "locks/shared", "flock-ex"), ("EAGAIN", "EWOULDBLOCK"),
                          "B's LOCK_EX | LOCK_NB beside A's LOCK_SH")
        finally:
            self.end(holder)
        # A's shared lock went with its holder: B's exclusive one that waits is granted.
        self.assertEqual(self.lock_on("B", "locks/shared", "flock-ex", "wait"), "held", self.log_tail("B"))

    def test_ofd_locks_exclude_across_hosts_and_go_with_their_open(self):
        # An OFD lock belongs to its open file description: no FLUSH names it, the open's
        # RELEASE drops it (here: A's process ends after 2 s).
        self.write("A", "locks/ofd", b"0123456789")
        holder = self.hold([sys.executable, "-c", LOCKER, self.path("A", "locks/ofd"), "ofd-w", "wait", "2"])
        try:
            started = time.monotonic()
            self.assertIn(self.lock_on("B", "locks/ofd", "ofd-r"), ("EAGAIN", "EACCES"), "B's F_OFD_SETLK beside A's write lock")
            self.assertEqual(self.lock_on("B", "locks/ofd", "ofd-w", "wait"), "held", self.log_tail("B"))
            waited = time.monotonic() - started
            self.assertGreater(waited, 1.0, f"B's F_OFD_SETLKW got A's lock after {waited:.3f} s")
            self.assertLess(waited, 8, f"B's F_OFD_SETLKW waited {waited:.1f} s for a lock held 2 s")
        finally:
            self.end(holder)

    @staticmethod
    def flock_at_once(path):
        """What flock(LOCK_EX | LOCK_NB) of `path` answers in a process of its own: "granted" (the
        lock goes with the process), an errno name, or "hung" when it did not answer in time."""
        script = ("import errno, fcntl, sys\n"
                  "file = open(sys.argv[1], 'rb')\n"
                  "try:\n"
                  "    fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
                  "    print('granted')\n"
                  "except OSError as error:\n"
                  "    print(errno.errorcode.get(error.errno, str(error.errno)))\n")
        try:
            result = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return "hung"
        return result.stdout.strip() or result.stderr.strip()

    def test_a_host_cut_off_past_its_ttl_refuses_locks_and_asks_again_for_those_it_holds(self):
        # A's flock of locks/part outlives a partition past A's TTL. Meanwhile A takes no lock
        # across hosts (ENOLCK: its lock lease is lost), and B takes locks/part once etcd has
        # expired A's lease. Once healed, A asks again for the file its program still locks
        # before it grants anything new: B waits for A's holder again, and A's log says that
        # another host may have had the file meanwhile.
        self.write("A", "locks/part", b"")
        self.write("A", "locks/free", b"")
        holder = self.hold(["flock", self.path("A", "locks/part"), "-c", "echo held; sleep 120"])
        try:
            self.wait_for_lease("A", "held", 5)
            cluster.cut(self.state, "h1")
            try:
                self.wait_for_lease("A", "lost", TTL + 5)
                # The lock lease is lost a moment after the accesses' (a renewal apart at most).
                answers = []
                deadline = time.monotonic() + TTL
                while time.monotonic() < deadline and (not answers or answers[-1] != "ENOLCK"):
                    answers.append(self.flock_at_once(self.path("A", "locks/free")))
                self.assertEqual(answers[-1], "ENOLCK", f"A's lock requests while cut off: {answers}\n" + self.log_tail("A"))
                taken = subprocess.run(["flock", "-w", str(TTL + 10), self.path("B", "locks/part"), "true"], capture_output=True,
                                       text=True, timeout=TTL + 30)
                self.assertEqual(taken.returncode, 0, "B did not get the lock of a host cut off past its TTL\n"
                                 + taken.stderr + self.log_tail("B"))
            finally:
                cluster.heal(self.state, "h1")
            self.wait_for_lease("A", "held", 30)
            answers = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and (not answers or answers[-1] != "EAGAIN"):
                answers.append(self.flock_at_once(self.path("B", "locks/part")))
                time.sleep(0.2)
            self.assertEqual(answers[-1], "EAGAIN", f"B's lock requests after A rejoined: {answers}\n" + self.log_tail("A"))
            # Said once the lost lease is revoked, a moment after the file's key is in line.
            deadline = time.monotonic() + 5
            while True:
                with open(os.path.join(self.work, "A.log")) as log:
                    said = "may have been locked by another host meanwhile" in log.read()
                if said or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            self.assertTrue(said, "A's log does not say B may have had locks/part\n" + self.log_tail("A"))
        finally:
            self.end(holder)
        # A's lock went with its holder: B's next flock takes it.
        self.assertEqual(subprocess.run(["flock", "-w", "10", self.path("B", "locks/part"), "true"], timeout=30).returncode, 0)

    def test_a_host_killed_holding_a_lock_lets_the_other_have_it_after_its_ttl(self):
        self.write("A", "locks/crash", b"")
        holder = self.hold(["flock", self.path("A", "locks/crash"), "-c", "echo held; sleep 120"])
        try:
            at_once = subprocess.run(["flock", "-n", self.path("B", "locks/crash"), "true"], timeout=10)
            self.assertEqual(at_once.returncode, 1, "B took the lock A's flock holds")
            daemon = daemon_of(self.mounts["A"])
            self.assertIsNotNone(daemon, "A's daemon not found")
            killed = time.monotonic()
            os.kill(daemon, signal.SIGKILL)
            waiter = subprocess.run(["flock", "-w", str(TTL + 15), self.path("B", "locks/crash"), "true"], capture_output=True,
                                    text=True, timeout=TTL + 30)
            waited = time.monotonic() - killed
            self.assertEqual(waiter.returncode, 0, waiter.stderr + self.log_tail("B"))
            self.assertLess(waited, TTL + 5, f"B waited {waited:.1f} s for a dead host's lock")
        finally:
            self.end(holder)
            self.unmount("A")
        self.mount("A")


class JsonLines:
    """A program running that prints a JSON object a line: the objects as they come."""

    def __init__(self, command, env=None):
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.items = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.process.stdout:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.items.append(item)

    def seen(self):
        with self.lock:
            return list(self.items)

    def wait_until(self, condition, seconds=5.0):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.05)
        return False

    def stop(self):
        stop(self.process, 5)
        self.thread.join(timeout=5)
        self.process.stdout.close()


class Watch(JsonLines):
    """`coordfs watch PATH --json` running: its events as they come."""

    def __init__(self, path):
        super().__init__([COORDFS, "watch", path, "--json", "-q"])

    @property
    def events(self):
        return self.seen()

    def named(self, name):
        return [event for event in self.seen() if name in event.get("events", [])]

    def wait_for(self, name, seconds=5.0):
        return self.wait_until(lambda: self.named(name), seconds)


class SwiftPresenter(JsonLines):
    """PresenterLog PATH running: an Apple-style FilePresenter's messages as they come."""

    def __init__(self, path, env=None):
        super().__init__([PRESENTER_LOG, path], env)

    @property
    def lines(self):
        return self.seen()

    def said(self):
        """The messages so far, in order ("ready" first)."""
        return ["ready" if line.get("ready") else line.get("message") for line in self.seen()]

    def wait_for(self, message, seconds=5.0):
        return self.wait_until(lambda: message in self.said(), seconds)


@unittest.skipIf(skip_reason(), skip_reason() or "")
class ClusterPresenterTests(ClusterHosts, unittest.TestCase):
    """Presenters on one host hear of other hosts' programs: B's mount does not watch its backing
    directory (as on NFS, where it could not see A's changes), so all it hears comes through etcd."""

    @classmethod
    def mount(cls, host, extra=()):
        super().mount(host, ["--break-time", "2"] + (["--no-backing-watch"] if host == "B" else []))

    def test_a_presenter_on_B_breaks_no_writer_on_A(self):
        # A appends to a log it keeps open; B's presenter wants to be asked before A's next
        # write, but waits for A's writer however long it holds (past A's break time, 2 s).
        self.write("A", "log", b"")
        fd = os.open(self.path("A", "log"), os.O_WRONLY | os.O_APPEND)
        watch = None
        try:
            os.write(fd, b"first\n")
            watch = Watch(self.path("B", "log"))
            time.sleep(3.5)
            os.write(fd, b"second\n")
            with open(os.path.join(self.work, "A.log")) as log:
                self.assertNotIn("broken", log.read(), "A's writer was broken for B's presenter")
        finally:
            os.close(fd)
            if watch:
                watch.stop()
        self.assertEqual(self.read(self.path("B", "log")), b"first\nsecond\n")

    def test_a_presenter_on_B_is_asked_before_and_told_after_A_writes(self):
        self.write("A", "presented", b"one\n")
        watch = Watch(self.path("B", "presented"))
        try:
            time.sleep(1.5)      # B publishes its presenter and takes a read delegation of the item
            self.write("A", "presented", b"two\n")
            self.assertTrue(watch.wait_for("CHANGED"), f"B's presenter heard no change: {watch.events}\n" + self.log_tail("B"))
            self.assertTrue(watch.named("RELINQUISH_WRITER"), f"B's presenter was not asked first: {watch.events}")
            time.sleep(1.0)
            changed = watch.named("CHANGED")
            self.assertEqual(len(changed), 1, f"told more than once: {watch.events}")
            self.assertEqual((changed[0].get("via"), changed[0].get("host")), ("cluster", "A"), changed[0])
            self.assertEqual(watch.named("RELINQUISH_WRITER")[0].get("host"), "A", watch.events)
            self.assertEqual(self.read(self.path("B", "presented")), b"two\n")
        finally:
            watch.stop()

    def test_a_rename_on_A_moves_B_s_presenter(self):
        self.write("A", "before-move", b"m\n")
        watch = Watch(self.path("B", "before-move"))
        try:
            time.sleep(1.5)
            os.rename(self.path("A", "before-move"), self.path("A", "after-move"))
            self.assertTrue(watch.wait_for("MOVED_TO"), f"B's presenter did not follow: {watch.events}\n" + self.log_tail("B"))
            self.assertTrue(watch.named("MOVED_TO")[0]["path"].endswith("/after-move"), watch.events)
            # It presents the new path now: A's write of it reaches it.
            time.sleep(1.0)
            self.write("A", "after-move", b"n\n")
            self.assertTrue(watch.wait_for("CHANGED"), f"{watch.events}\n" + self.log_tail("B"))
        finally:
            watch.stop()

    def test_a_swift_presenter_on_B_is_asked_before_and_told_after_A_writes(self):
        self.write("A", "swift-presented", b"one\n")
        presenter = SwiftPresenter(self.path("B", "swift-presented"))
        try:
            self.assertTrue(presenter.wait_for("ready"), f"PresenterLog did not start: {presenter.lines}")
            time.sleep(1.5)
            self.write("A", "swift-presented", b"two\n")
            self.assertTrue(presenter.wait_for("didChange"), f"{presenter.lines}\n" + self.log_tail("B"))
            time.sleep(1.0)
            said = presenter.said()
            self.assertIn("relinquishToWriter", said, f"B's presenter was not asked first: {presenter.lines}")
            self.assertLess(said.index("relinquishToWriter"), said.index("didChange"), presenter.lines)
            for line in presenter.lines[1:]:
                if line["message"] != "reacquire":
                    self.assertEqual((line.get("via"), line.get("host")), ("cluster", "A"), presenter.lines)
            self.assertEqual(said.count("didChange"), 1, f"told more than once: {presenter.lines}")
        finally:
            presenter.stop()

    def test_swift_presenters_on_B_accommodate_A_s_deletion_first(self):
        os.makedirs(self.path("A", "doomed-folder"))
        self.write("A", "doomed-folder/doomed", b"d\n")
        file_presenter = SwiftPresenter(self.path("B", "doomed-folder/doomed"))
        folder_presenter = SwiftPresenter(self.path("B", "doomed-folder"))
        try:
            for presenter in (file_presenter, folder_presenter):
                self.assertTrue(presenter.wait_for("ready"), f"PresenterLog did not start: {presenter.lines}")
            time.sleep(1.5)
            os.unlink(self.path("A", "doomed-folder/doomed"))
            self.assertTrue(file_presenter.wait_for("accommodateDeletion"), f"{file_presenter.lines}\n" + self.log_tail("B"))
            self.assertTrue(folder_presenter.wait_for("accommodateSubitemDeletion"), f"{folder_presenter.lines}")
            asked = [line for line in folder_presenter.lines if line.get("message") == "accommodateSubitemDeletion"]
            self.assertTrue(asked[0]["url"].endswith("/doomed-folder/doomed"), folder_presenter.lines)
        finally:
            file_presenter.stop()
            folder_presenter.stop()

    def test_presenters_inside_a_directory_A_renames_relinquish_first_and_follow(self):
        os.makedirs(self.path("A", "folder"))
        self.write("A", "folder/inside", b"i\n")
        watch = Watch(self.path("B", "folder/inside"))
        try:
            time.sleep(1.5)
            os.rename(self.path("A", "folder"), self.path("A", "folder-moved"))
            self.assertTrue(watch.wait_for("MOVED_TO"), f"B's presenter did not follow: {watch.events}\n" + self.log_tail("B"))
            self.assertTrue(watch.named("MOVED_TO")[0]["path"].endswith("/folder-moved/inside"), watch.events)
            names = [name for event in watch.events for name in event.get("events", [])]
            self.assertIn("RELINQUISH_WRITER", names, f"B's presenter was not asked before the move: {watch.events}")
            self.assertLess(names.index("RELINQUISH_WRITER"), names.index("MOVED_TO"), watch.events)
        finally:
            watch.stop()


@unittest.skipIf(skip_reason(), skip_reason() or "")
class ClusterDaemonTests(ClusterHosts, unittest.TestCase):
    """A host whose programs use the store directly, not through a mount: B runs `coordfs
    daemon --cluster ... --cluster-directory STORE`, and its Swift programs, presenters and
    `coordfs coordinate` reach that daemon (COORDFS_SOCKET). A is a mount, as before."""

    daemon = None

    @classmethod
    def mount(cls, host, extra=()):
        if host == "A":
            return super().mount(host, extra)
        node = cls.info["hosts"][1]
        cls.socket = os.path.join(cls.work, "B.sock")
        urls = ",".join(url.removeprefix("http://") for url in cls.info["client_urls"])
        log = open(os.path.join(cls.work, "B.log"), "w")
        cls.daemon = subprocess.Popen(cluster._nsenter(node["namespace"]) + [
            COORDFS, "daemon", "--socket", cls.socket, "--cluster", "etcd://" + urls, "--cluster-store", "shared",
            "--host-name", "B", "--cluster-ttl", str(TTL), "--cluster-directory", cls.store, "--break-time", "5"],
            stdout=log, stderr=log)
        log.close()
        cls.mounts[host] = cls.store        # stopped by tearDownClass even if it never serves
        deadline = time.monotonic() + 30
        while not os.path.exists(cls.socket):
            if cls.daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("B's daemon did not serve: see B.log")
            time.sleep(0.1)

    @classmethod
    def unmount(cls, host):
        if host == "A":
            return super().unmount(host)
        cls.mounts.pop(host, None)
        if cls.daemon is None:
            return
        stop(cls.daemon, 10)

    def on_B(self):
        """The environment of B's programs: they find B's daemon."""
        return dict(os.environ, COORDFS_SOCKET=self.socket)

    def test_a_hold_through_B_s_daemon_holds_off_A(self):
        self.write("A", "held-on-B", b"b\n")
        holder = subprocess.Popen([COORDFS, "coordinate", "--write", self.path("B", "held-on-B"), "--",
                                   "sh", "-c", "echo held; sleep 2"], stdout=subprocess.PIPE, text=True, env=self.on_B())
        try:
            self.assertEqual(holder.stdout.readline().strip(), "held")
            reader = Opening(self.path("A", "held-on-B"), os.O_RDONLY)
            self.assertTrue(reader.waits(0.8), "A's read went ahead while B's coordinator held the item")
        finally:
            holder.wait(timeout=30)
            holder.stdout.close()
        self.assertEqual(holder.returncode, 0)
        self.assertTrue(reader.finish(), self.log_tail("A"))
        self.assertEqual(reader.result, b"b\n")

    def test_a_hold_through_B_s_daemon_waits_for_A_s_writer(self):
        self.write("A", "written-on-A", b"a\n")
        fd = os.open(self.path("A", "written-on-A"), os.O_WRONLY)
        granted = []
        holder = subprocess.Popen([COORDFS, "coordinate", "--read", self.path("B", "written-on-A"), "--", "echo", "granted"],
                                  stdout=subprocess.PIPE, text=True, env=self.on_B())
        reader = threading.Thread(target=lambda: granted.append((holder.stdout.readline().strip(), time.monotonic())), daemon=True)
        reader.start()
        try:
            time.sleep(1.5)
        finally:
            closed = time.monotonic()
            os.close(fd)
        self.assertEqual(holder.wait(timeout=20), 0, self.log_tail("B"))
        reader.join(5)
        holder.stdout.close()
        self.assertEqual(len(granted), 1)
        self.assertEqual(granted[0][0], "granted")
        self.assertGreater(granted[0][1], closed, "B's coordinator went ahead while A's program wrote the file")

    def test_a_swift_presenter_on_B_s_daemon_hears_A_s_write(self):
        self.write("A", "presented-on-B", b"one\n")
        presenter = SwiftPresenter(self.path("B", "presented-on-B"), env=self.on_B())
        try:
            self.assertTrue(presenter.wait_for("ready"), f"PresenterLog did not start: {presenter.lines}")
            time.sleep(1.5)      # B publishes its presenter and holds a presence of the item
            self.write("A", "presented-on-B", b"two\n")
            self.assertTrue(presenter.wait_for("didChange"), f"{presenter.lines}\n" + self.log_tail("B"))
            time.sleep(1.0)
            said = presenter.said()
            self.assertIn("relinquishToWriter", said, f"B's presenter was not asked first: {presenter.lines}")
            self.assertLess(said.index("relinquishToWriter"), said.index("didChange"), presenter.lines)
            self.assertEqual(said.count("didChange"), 1, f"told more than once: {presenter.lines}")
            told = [line for line in presenter.lines if line.get("message") == "didChange"][0]
            self.assertEqual((told.get("via"), told.get("host")), ("cluster", "A"), presenter.lines)
        finally:
            presenter.stop()


@unittest.skipIf(skip_reason(), skip_reason() or "")
class ClusterSharingTests(ClusterHosts, unittest.TestCase):
    """A request from B meets A's programs and presenters as one made on A would (docs/cluster.md,
    the same sharing policy on every host): it shares a file with an appender, goes past a writer
    in place whose file has settled, is refused where A's presenter refuses, and asks A's
    presenters to save before a read whatever A holds. The mounts keep the default break time
    (45 s): what goes ahead here does so long before it."""

    def delegations_at(self, name):
        """The delegation keys etcd has of exactly `name` (a file at the store's root), as
        "HOST MODE" (`w` a write, `p` a presence, ...)."""
        prefix = f"/coordfs/shared/delegations/{name}\0".encode()
        end = prefix[:-1] + b"\x01"
        answer = cluster.run_in_netns(self.info["hosts"][0]["namespace"], cluster.http_json,
                                      self.info["members"][0]["client_url"] + "/v3/kv/range",
                                      {"key": cluster._b64(prefix), "range_end": cluster._b64(end)})
        found = set()
        for item in answer.get("kvs", []):
            host, _, mode = base64.b64decode(item["key"])[len(prefix):].split(b"\0")
            found.add(f"{host.decode()} {mode.decode()}")
        return found

    def wait_for_delegations(self, name, wanted, seconds=10):
        """Waits until `wanted` (a predicate of `delegations_at(name)`) holds; the keys then."""
        deadline = time.monotonic() + seconds
        while True:
            keys = self.delegations_at(name)
            if wanted(keys):
                return keys
            if time.monotonic() > deadline:
                raise AssertionError(f"the keys of {name} are {keys} after {seconds} s\n" + self.log_tail("A"))
            time.sleep(0.1)

    def presenter_on_A(self, name, *arguments):
        """presenter.py presenting `name` on A, once it watches and A holds its presence."""
        presenter = JsonLines([sys.executable, PRESENTER, self.path("A", name), *arguments])
        try:
            if not presenter.wait_until(lambda: len(presenter.seen()) >= 2, 10):
                raise AssertionError(f"presenter.py did not start: {presenter.seen()}")
            self.wait_for_delegations(name, lambda keys: "A p" in keys)
        except BaseException:
            presenter.stop()
            raise
        return presenter

    @staticmethod
    def asked(presenter, request):
        """The requests `presenter` was asked that name `request` (SAVE, RELINQUISH_WRITER)."""
        return [record for record in presenter.seen()
                if "REQUEST" in record.get("events", []) and request in record.get("events", [])]

    def test_a_reader_on_B_reads_a_log_A_appends_to_at_once(self):
        # tail -f's writer: A appends a line every 0.2 s through a file it keeps open. On one
        # host cat reads it at once (a reader sees a prefix); from B too, and A's appender goes
        # on undisturbed. (Before, B's cat waited for the appender up to the break time.)
        self.write("A", "tail-log", b"")
        fd = os.open(self.path("A", "tail-log"), os.O_WRONLY | os.O_APPEND)
        stop, written, failed = threading.Event(), [], []

        def append():
            while not stop.is_set():
                try:
                    os.write(fd, b"line %d\n" % (len(written) + 1))
                    written.append(time.monotonic())
                except OSError as error:
                    failed.append(error)
                    return
                stop.wait(0.2)

        appender = threading.Thread(target=append, daemon=True)
        appender.start()
        try:
            time.sleep(0.7)
            started = time.monotonic()
            cat = subprocess.run(["cat", self.path("B", "tail-log")], capture_output=True, timeout=60)
            took = time.monotonic() - started
            time.sleep(0.7)
        finally:
            stop.set()
            appender.join(5)
            os.close(fd)
        self.assertEqual(cat.returncode, 0, cat.stderr)
        self.assertLess(took, 2, f"cat on B took {took:.1f} s beside A's appender\n" + self.log_tail("A"))
        self.assertTrue(cat.stdout.startswith(b"line 1\nline 2\n"), cat.stdout[:200])
        self.assertEqual(failed, [], "A's appender failed")
        gaps = [later - earlier for earlier, later in zip(written, written[1:])]
        self.assertLess(max(gaps), 1.0, f"A's appender was held up ({max(gaps):.1f} s between two lines)")
        self.assertTrue([moment for moment in written if moment > started + took], "A's appender stopped")

    def test_a_reader_on_B_goes_past_a_writer_in_place_on_A_once_its_file_has_settled(self):
        # A keeps the file open read-write (in place, as a database or a server's port file) and
        # writes nothing: on one host a reader goes ahead once the file has stayed unchanged for
        # the settle time (1 s); from B too, long before the break time (45 s), and A's writer
        # keeps its file (it writes on).
        self.write("A", "settled", b"settled\n")
        fd = os.open(self.path("A", "settled"), os.O_RDWR)
        try:
            started = time.monotonic()
            reader = Reading(self.path("B", "settled"))
            self.assertTrue(reader.finish(30), "B's read did not go past A's idle writer\n" + self.log_tail("A"))
            self.assertIsNone(reader.error)
            took = reader.granted - started
            self.assertEqual(reader.result, b"settled\n")
            self.assertGreater(took, 0.5, f"B's read went ahead {took:.2f} s after A's write: before it settled")
            self.assertLess(took, 5, f"B's read waited {took:.1f} s for a settled writer\n" + self.log_tail("A"))
            os.pwrite(fd, b"S", 0)  # A's writer still holds its file
        finally:
            os.close(fd)
        self.assertEqual(self.read(os.path.join(self.store, "settled")), b"Settled\n")

    def test_a_presenter_on_A_that_refuses_makes_B_s_write_fail_with_its_errno(self):
        # On one host a presenter that refuses to relinquish fails the write with its errno.
        self.write("A", "refusing", b"kept\n")
        presenter = self.presenter_on_A("refusing", "--answer", "EACCES")
        try:
            started = time.monotonic()
            with self.assertRaises(OSError) as raised:
                os.close(os.open(self.path("B", "refusing"), os.O_WRONLY))
            self.assertEqual(raised.exception.errno, errno.EACCES, self.log_tail("B"))
            self.assertLess(time.monotonic() - started, 5, "refused by A's presenter, not at the break time")
            self.assertTrue(self.asked(presenter, "RELINQUISH_WRITER"), f"A's presenter was not asked: {presenter.seen()}")
        finally:
            presenter.stop()
        self.assertEqual(self.read(os.path.join(self.store, "refusing")), b"kept\n")

    def test_a_presenter_on_A_saves_before_B_reads_whatever_A_holds(self):
        # presenter.py on A writes "saved" into the file when asked to save (its unsaved
        # changes), before it answers. B's read gets what it saved, whether A holds a delegation
        # of the file (A's program wrote it just now) or only its presenter's presence (B's
        # program wrote it since).
        self.write("A", "unsaved", b"on disk\n")
        presenter = self.presenter_on_A("unsaved", "--on-save", "saved\n")
        try:
            self.write("A", "unsaved", b"on disk\n")
            held = self.wait_for_delegations("unsaved", lambda keys: {"A w", "A p"} <= keys)
            reader = Reading(self.path("B", "unsaved"))
            self.assertTrue(reader.finish(15), f"B's read did not end (keys: {held})\n" + self.log_tail("A"))
            self.assertIsNone(reader.error)
            self.assertEqual(reader.result, b"saved\n", f"A's presenter did not save first (keys: {held})")
            self.assertEqual(len(self.asked(presenter, "SAVE")), 1, presenter.seen())

            self.write("B", "unsaved", b"changed on B\n")
            # (B's own keys of it may stay a few seconds, idle.)
            held = self.wait_for_delegations("unsaved", lambda keys: {key for key in keys if key[0] == "A"} == {"A p"}, 15)
            reader = Reading(self.path("B", "unsaved"))
            self.assertTrue(reader.finish(15), f"B's read did not end (keys: {held})\n" + self.log_tail("A"))
            self.assertIsNone(reader.error)
            self.assertEqual(reader.result, b"saved\n", f"A's presenter did not save first (keys: {held})")
            self.assertEqual(len(self.asked(presenter, "SAVE")), 2, presenter.seen())
        finally:
            presenter.stop()


# A hold's own writer (the command of `coordfs coordinate --write PATH`): opens PATH to append
# once, then appends its number as a line every 0.1 s through that open, for argv[2] seconds at
# most and while its hold runs, saying each write's outcome as a line of JSON: number, began and
# ended (time.monotonic(), the test's clock), outcome ("ok" or the errno's name).
WRITER = r'''
import errno, json, os, sys, time
path, seconds = sys.argv[1], float(sys.argv[2])
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
hold, until, number = os.getppid(), time.monotonic() + seconds, 0
print(json.dumps({"held": True}), flush=True)
while time.monotonic() < until and os.getppid() == hold:
    number += 1
    began = time.monotonic()
    try:
        os.write(fd, b"%d\n" % number)
        outcome = "ok"
    except OSError as error:
        outcome = errno.errorcode.get(error.errno, str(error.errno))
    print(json.dumps({"number": number, "began": began, "ended": time.monotonic(), "outcome": outcome}), flush=True)
    time.sleep(0.1)
'''


@unittest.skipIf(skip_reason(), skip_reason() or "")
class ClusterThreeHostTests(ClusterHosts, unittest.TestCase):
    """Three hosts at one file all the time: each grant of a host is recalled as it comes (the
    other two hosts' requests wait behind it), and still serves the request that waited for it."""

    HOSTS = ("A", "B", "C")

    def test_every_request_of_three_hosts_at_one_file_is_served(self):
        # CoordinatedCounter (through each mount's socket) and a plain writer (through each
        # mount's opens) on every host at once. A host once handed each grant on before the
        # request that waited for it could use it; the request asked again behind the others
        # and, after sixteen rounds, failed ENOLCK (CoordinatedCounter saw EIO).
        rounds, writes = 30, 60
        errors = []

        def writer(host):
            for number in range(writes):
                try:
                    with open(self.path(host, "blob"), "wb") as file:
                        file.write(b"%s %d\n" % (host.encode(), number))
                except OSError as error:
                    errors.append(f"{host} write {number}: {error}")

        threads = [threading.Thread(target=writer, args=(host,), daemon=True) for host in self.HOSTS]
        runs = [subprocess.Popen([COUNTER, self.path(host, "three.json"), str(rounds), host, "-"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for host in self.HOSTS]
        for thread in threads:
            thread.start()
        try:
            for host, run in zip(self.HOSTS, runs):
                output, error = run.communicate(timeout=120)
                if run.returncode != 0:
                    errors.append(f"CoordinatedCounter on {host}: {output}{error}")
        finally:
            for run in runs:
                if run.poll() is None:
                    run.kill()
                    run.wait()
        for thread in threads:
            thread.join(120)
        logs = "".join(self.log_tail(host) for host in self.HOSTS)
        self.assertFalse(any(thread.is_alive() for thread in threads), "the writers still run after 120 s")
        self.assertEqual(errors, [], logs)
        self.assertEqual(json.loads(self.read(os.path.join(self.store, "three.json")))["count"], 3 * rounds)


class HeldWriter(JsonLines):
    """WRITER running in a `coordfs coordinate --write PATH` hold: its writes as they are reported."""

    def __init__(self, path, seconds=90):
        super().__init__([COORDFS, "coordinate", "--write", path, "--", sys.executable, "-c", WRITER, path, str(seconds)])

    def writes(self):
        return [item for item in self.seen() if "number" in item]

    def landed(self):
        return [write for write in self.writes() if write["outcome"] == "ok"]

    def next_write(self, seconds=5.0):
        """The next write reported (None if none is within `seconds`), as soon as it is: a fault
        struck then finds the writer between two writes, not in one."""
        count = len(self.writes())
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            writes = self.writes()
            if len(writes) > count:
                return writes[count]
            time.sleep(0.002)
        return None

    def write_begun_after(self, moment, seconds=5.0):
        """The first write reported that began after `moment` (None if none within `seconds`)."""
        def found():
            return next((write for write in self.writes() if write["began"] > moment), None)
        self.wait_until(lambda: found() is not None, seconds)
        return found()


@unittest.skipIf(skip_reason(), skip_reason() or "")
class ClusterFencingTests(ClusterHosts, unittest.TestCase):
    """Fencing on the data path. Both hosts mount with --no-kernel-passthrough, so every write
    through an open file reaches the mount: A refuses it (EIO) once its lease may have ended, and
    for good once the file's item may have been another host's since it was opened; a read that
    reaches the mount likewise. A host that
    joins again asks again for the items its programs hold before it grants anything new, so the
    other hosts wait for those programs as before. `coordfs status` says when the lease is lost.
    The nemesis (test_3 to test_5) strikes A while its hold writes and B's read waits, and checks
    that no write of A's landed once B's read was granted, and that B read exactly those that had."""

    CUT = TTL + 7  # seconds: past the TTL and its margin, so etcd expires the cut-off host's lease

    @classmethod
    def mount(cls, host, extra=()):
        # (No settle rule: B's reads wait for A's programs that keep their file open.)
        super().mount(host, ["--no-kernel-passthrough", "--settle-time", "0", *extra])

    def test_1_a_file_held_open_across_a_partition_is_held_again_once_it_heals(self):
        # A keeps rj open for writing while it is cut off past its TTL, then rejoins. B's `cat
        # rj` and `echo y > rj` went ahead at once then, for as long as A's program kept it open.
        self.write("A", "rj", b"before\n")
        fd = os.open(self.path("A", "rj"), os.O_WRONLY)
        reader = writer = None
        try:
            os.write(fd, b"a")
            self.wait_for_lease("A", "held", 5)
            cluster.cut(self.state, "h1")
            try:
                time.sleep(self.CUT)
            finally:
                cluster.heal(self.state, "h1")
            joined = self.wait_for_lease("A", "held", 30)
            self.assertEqual(joined.get("leases_lost"), 1, joined)
            # The lease had ended in etcd: B might have written rj meanwhile, so nothing more
            # lands through the open A's program kept (as NFS answers writes under a lost lock).
            with self.assertRaises(OSError) as raised:
                os.write(fd, b"late")
            self.assertEqual(raised.exception.errno, errno.EIO, self.log_tail("A"))
            # But rj is A's program's again: B's read and write wait for it.
            reader = Opening(self.path("B", "rj"), os.O_RDONLY)
            self.assertTrue(reader.waits(1.0), "B's read went ahead while A's program kept rj open\n" + self.log_tail("A"))
            writer = Opening(self.path("B", "rj"), os.O_WRONLY | os.O_TRUNC)
            self.assertTrue(writer.waits(0.5), "B's write went ahead while A's program kept rj open\n" + self.log_tail("A"))
        finally:
            os.close(fd)
        self.assertTrue(reader.finish(), "B's read did not go ahead after A closed rj\n" + self.log_tail("B"))
        self.assertTrue(writer.finish(), "B's write did not go ahead after A closed rj\n" + self.log_tail("B"))
        self.assertIsNone(reader.error)
        self.assertIsNone(writer.error)
        self.assertIn(reader.result, (b"aefore\n", b""), "what A wrote before the cut, or B's write first")
        with open(os.path.join(self.work, "A.log")) as log:
            self.assertIn("1 fenced", log.read())

    def test_2_writes_through_an_open_file_are_refused_once_the_lease_is_lost_and_status_says_so(self):
        # Reads too: a reader on a host whose lease may have ended could read a file another
        # host is writing (read here at an offset never read, so that the kernel asks the mount).
        self.write("A", "wf", b"")
        fd = os.open(self.path("A", "wf"), os.O_WRONLY | os.O_APPEND)
        reader = os.open(self.path("A", "wf"), os.O_RDONLY)
        try:
            os.write(fd, b"one\n")
            held = self.wait_for_lease("A", "held", 5)
            self.assertGreater(held.get("valid_ms", 0), 0, held)
            cluster.cut(self.state, "h1")
            try:
                lost = self.wait_for_lease("A", "lost", TTL + 5)
                self.assertIn("lost_ms", lost)
                with self.assertRaises(OSError) as raised:
                    os.write(fd, b"two\n")
                self.assertEqual(raised.exception.errno, errno.EIO, "a write landed after A's lease was lost")
                with self.assertRaises(OSError) as raised:
                    os.pread(reader, 100, 0)
                self.assertEqual(raised.exception.errno, errno.EIO, "a read was served after A's lease was lost")
                table = subprocess.run([COORDFS, "status", self.mounts["A"]], capture_output=True, text=True, timeout=30)
                self.assertIn("LEASE LOST", table.stdout, table.stdout + table.stderr)
                # B goes ahead once etcd has expired A's lease.
                self.write("B", "wf", b"B's\n")
            finally:
                cluster.heal(self.state, "h1")
            self.wait_for_lease("A", "held", 30)
            with self.assertRaises(OSError) as raised:
                os.write(fd, b"three\n")
            self.assertEqual(raised.exception.errno, errno.EIO, "fenced for good: B wrote the file meanwhile")
            with self.assertRaises(OSError) as raised:
                os.pread(reader, 100, 0)
            self.assertEqual(raised.exception.errno, errno.EIO, "a read fenced for good too")
            status = self.cluster_status("A")
            counted = (status.get("leases_lost", 0) - held.get("leases_lost", 0), status.get("fenced_opens", 0) - held.get("fenced_opens", 0))
            self.assertEqual(counted, (1, 2), f"{held} then {status}: the write open and the read open fenced")
        finally:
            os.close(fd)
            os.close(reader)
        self.assertEqual(self.read(os.path.join(self.store, "wf")), b"B's\n")
        with open(os.path.join(self.work, "A.log")) as log:
            self.assertIn("this host's lease is lost", log.read())

    # ------------------------------------------------------------------ the nemesis

    def wait_for_rejoin(self, host, before, seconds=30):
        """Waits until host has lost a lease more than its status `before` counted, and holds one
        again; its status then."""
        deadline = time.monotonic() + seconds
        while True:
            status = self.cluster_status(host)
            if status.get("lease") == "held" and status.get("leases_lost", 0) > before.get("leases_lost", 0):
                return status
            if time.monotonic() > deadline:
                raise AssertionError(f"{host} has not joined again after {seconds} s: {status}\n" + self.log_tail(host))
            time.sleep(0.3)

    def hold_writing_on_A_while_B_reads(self, name):
        """A's hold of `name` appending to it through a file it keeps open (a HeldWriter, a few
        writes landed), B's Reading of it waiting for that hold, and A's status before: what each
        fault strikes. The caller stops the writer."""
        before = self.wait_for_lease("A", "held", 30)
        self.write("A", name, b"start\n")
        writer = HeldWriter(self.path("A", name))
        try:
            self.assertTrue(writer.wait_until(lambda: len(writer.landed()) >= 3, 10),
                            f"A's hold did not write: {writer.seen()}\n" + self.log_tail("A"))
            reading = Reading(self.path("B", name))
            self.assertTrue(reading.waits(1.0), "B's read went ahead while A's hold wrote\n" + self.log_tail("B"))
        except BaseException:
            writer.stop()
            raise
        return writer, reading, before

    def assert_B_read_what_landed_and_nothing_after(self, name, writer, reading, struck):
        """The nemesis's checker, once the writer has stopped. B's read was granted once A's lease
        could have ended in etcd (A renews it every TTL/5 s: its last renewal came at most that
        long before the fault) and within the TTL and a few seconds; every write of A's hold that
        landed ended before B's read was granted (no two writers' turns overlap), and B read
        exactly those (none older, none torn); once a write was refused none landed; and the store
        holds what B read (nothing landed after it)."""
        self.assertIsNone(reading.error)
        waited = reading.granted - struck
        self.assertGreater(waited, TTL - TTL / 5 - 1, f"B went ahead {waited:.1f} s after the fault: A's lease could not have ended")
        self.assertLess(waited, TTL + 5, f"B waited {waited:.1f} s for A's lease")
        writes, landed = writer.writes(), writer.landed()
        last = max(write["ended"] for write in landed)
        self.assertLess(last, reading.granted,
                        f"A's write landed {last - reading.granted:.3f} s after B's read was granted: {writes}")
        self.assertEqual(reading.result, b"start\n" + b"".join(b"%d\n" % write["number"] for write in landed),
                         f"B did not read exactly the writes that had landed: {writes}")
        refused = next((index for index, write in enumerate(writes) if write["outcome"] != "ok"), None)
        self.assertIsNotNone(refused, f"no write of A's was refused: {writes}")
        self.assertEqual([write for write in writes[refused:] if write["outcome"] == "ok"], [],
                         f"a write landed after one was refused: {writes}")
        self.assertEqual(self.read(os.path.join(self.store, name)), reading.result, "a write landed after B's read")

    def test_3_a_host_cut_off_while_its_hold_writes_lands_nothing_once_B_reads(self):
        # A partition: A's hold appends through its open file while B's read waits for it, and A
        # is cut off from etcd. A's writes go on landing while its lease may still be valid, and
        # fail (EIO) from a margin before etcd can end it; B reads once etcd has: what landed, no
        # more. Without fencing, A's writes went on landing after B's read, and after A rejoined.
        writer, reading, before = self.hold_writing_on_A_while_B_reads("nemesis-cut")
        try:
            cluster.cut(self.state, "h1")
            struck = time.monotonic()
            try:
                self.assertTrue(reading.finish(TTL + 10), "B still waits after A was cut off\n" + self.log_tail("B"))
                # A's program wrote on once its lease could have ended, and once B had read.
                late = writer.write_begun_after(max(struck + TTL, reading.granted or struck))
                self.assertIsNotNone(late, f"A's writer stopped: {writer.seen()}")
            finally:
                cluster.heal(self.state, "h1")
            self.wait_for_rejoin("A", before)
            rejoined = writer.write_begun_after(time.monotonic())
        finally:
            writer.stop()
        self.assert_B_read_what_landed_and_nothing_after("nemesis-cut", writer, reading, struck)
        writes = writer.writes()
        self.assertTrue([write for write in writer.landed() if write["began"] > struck],
                        f"no write landed after the cut, while A's lease was still valid: {writes}")
        self.assertEqual([write for write in writer.landed() if write["began"] >= struck + TTL], [],
                         f"a write landed once A's lease could have ended in etcd: {writes}")
        self.assertEqual({write["outcome"] for write in writes if write["outcome"] != "ok"}, {"EIO"}, writes)
        # Fenced for good: etcd ended the lease A's open was granted under, and B may have written.
        self.assertIsNotNone(rejoined, f"A's writer stopped: {writes}")
        self.assertEqual(rejoined["outcome"], "EIO", "a write through the open landed once A had joined again")
        self.assertGreater(self.cluster_status("A").get("fenced_opens", 0), before.get("fenced_opens", 0))

    def test_4_a_daemon_paused_past_its_ttl_refuses_the_write_that_waited_for_it(self):
        # A pause (a process stopped, a virtual machine frozen): A's daemon is stopped between two
        # writes of its hold, past its TTL. B reads once etcd has ended A's lease; A's program's
        # next write waits in the kernel for the daemon meanwhile, and the daemon, woken, must
        # refuse it (EIO) by its clock, before it has noticed anything: landed, it would land after
        # B's read.
        writer, reading, before = self.hold_writing_on_A_while_B_reads("nemesis-pause")
        daemon = daemon_of(self.mounts["A"])
        try:
            self.assertIsNotNone(daemon, "A's daemon not found")
            writer.next_write()
            os.kill(daemon, signal.SIGSTOP)
            struck = time.monotonic()
            try:
                finished = reading.finish(TTL + 10)
            finally:
                resumed = time.monotonic()
                os.kill(daemon, signal.SIGCONT)
            self.assertTrue(finished, "B still waited for A's paused daemon\n" + self.log_tail("B"))
            pending = writer.write_begun_after(struck)
            self.wait_for_rejoin("A", before)
            rejoined = writer.write_begun_after(time.monotonic())
        finally:
            writer.stop()
        self.assert_B_read_what_landed_and_nothing_after("nemesis-pause", writer, reading, struck)
        writes = writer.writes()
        self.assertIsNotNone(pending, f"A's writer stopped: {writes}")
        self.assertLess(pending["began"], resumed, pending)
        self.assertGreater(pending["ended"], resumed, f"a write was answered while A's daemon was stopped: {pending}")
        self.assertEqual(pending["outcome"], "EIO", f"the write that waited for A's paused daemon: {pending}")
        self.assertEqual({write["outcome"] for write in writes if write["outcome"] != "ok"}, {"EIO"}, writes)
        self.assertIsNotNone(rejoined, f"A's writer stopped: {writes}")
        self.assertEqual(rejoined["outcome"], "EIO", "a write through the open landed once A had joined again")
        self.assertGreater(self.cluster_status("A").get("fenced_opens", 0), before.get("fenced_opens", 0))

    def test_5_a_daemon_killed_while_its_hold_writes_lands_nothing_once_B_reads(self):
        # A crash: A's daemon is killed (-9) between two writes of its hold. B reads once etcd has
        # ended A's lease: what landed. A's program's writes through its open fail from the kill
        # on (the mount is gone; with no kernel passthrough, none reaches the store uncoordinated).
        writer, reading, _ = self.hold_writing_on_A_while_B_reads("nemesis-crash")
        try:
            daemon = daemon_of(self.mounts["A"])
            self.assertIsNotNone(daemon, "A's daemon not found")
            writer.next_write()
            os.kill(daemon, signal.SIGKILL)
            struck = time.monotonic()
            self.assertTrue(reading.finish(TTL + 10), "B still waits after A's daemon died\n" + self.log_tail("B"))
            late = writer.write_begun_after(reading.granted or struck)
        finally:
            writer.stop()
            self.unmount("A")
        self.mount("A")
        self.assert_B_read_what_landed_and_nothing_after("nemesis-crash", writer, reading, struck)
        writes = writer.writes()
        self.assertEqual([write for write in writer.landed() if write["began"] > struck], [],
                         f"a write landed after A's daemon was killed: {writes}")
        self.assertIsNotNone(late, f"A's writer stopped: {writes}")
        self.assertLessEqual({write["outcome"] for write in writes if write["outcome"] != "ok"},
                             {"ENOTCONN", "ECONNABORTED", "EIO"}, writes)
        self.assertEqual(self.read(self.path("A", "nemesis-crash")), reading.result)

    # ------------------------------------------------------------------ a hold's own save

    def hold_updating_on_A(self, name):
        """An Apple-style update of counter `name` held on A: `coordfs coordinate --write` whose
        accessor reads the number, writes the next into a temporary file, says "ready", and once
        the file `go` (outside the mount) exists, renames the temporary file over the counter.
        The process and `go`'s path."""
        self.write("A", name, b"1\n")
        go = os.path.join(self.work, name + ".go")
        target, temporary = shlex.quote(self.path("A", name)), shlex.quote(self.path("A", name + ".tmp"))
        script = (f'v=$(cat {target}) || exit 3; echo $((v + 1)) > {temporary} || exit 4; echo ready; '
                  f'while [ ! -e {shlex.quote(go)} ]; do sleep 0.05; done; mv {temporary} {target}')
        holder = subprocess.Popen([COORDFS, "coordinate", "--write", self.path("A", name), "--", "sh", "-c", script],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "ready", self.log_tail("A"))
        except BaseException:
            holder.kill()
            holder.communicate()
            raise
        return holder, go

    def assert_the_save_was_refused(self, name, holder, go):
        """Lets A's hold save, and checks its rename was refused (EIO), B's write kept."""
        with open(go, "w"):
            pass
        try:
            _, error = holder.communicate(timeout=30)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.communicate()
        self.assertNotEqual(holder.returncode, 0, "A's hold renamed its save over B's write")
        self.assertIn("Input/output error", error, error + self.log_tail("A"))
        self.assertEqual(self.read(os.path.join(self.store, name)), b"100\n", "B's write was undone: an update lost")
        self.assertGreater(json.loads(os.getxattr(self.mounts["A"], "user.coordfs.stats")).get("fenced_accessor_requests", 0), 0)

    def test_6_a_hold_cut_off_past_its_ttl_saves_nothing_over_what_B_wrote_meanwhile(self):
        # A's hold read the counter, A is cut off past its TTL, B writes it once etcd has ended
        # A's lease, and A joins again. The hold's own rename then found its item covered again
        # (the rejoin asks again for what A's programs hold) and landed: B's write was undone.
        holder, go = self.hold_updating_on_A("cut-counter")
        before = self.wait_for_lease("A", "held", 5)
        cluster.cut(self.state, "h1")
        try:
            self.write("B", "cut-counter", b"100\n")
        finally:
            cluster.heal(self.state, "h1")
        self.wait_for_rejoin("A", before)
        self.assert_the_save_was_refused("cut-counter", holder, go)

    def test_7_a_hold_whose_daemon_was_paused_past_its_ttl_saves_nothing_over_what_B_wrote(self):
        # A's daemon is stopped as the hold's rename reaches it; B writes once etcd has ended A's
        # lease; woken, the daemon must refuse the rename that waited for it by its clock, before
        # its renewal has noticed anything (the hold's item still counts as held then).
        holder, go = self.hold_updating_on_A("paused-counter")
        daemon = daemon_of(self.mounts["A"])
        self.assertIsNotNone(daemon, "A's daemon not found")
        before = self.wait_for_lease("A", "held", 5)
        os.kill(daemon, signal.SIGSTOP)
        try:
            with open(go, "w"):
                pass
            time.sleep(0.5)  # the rename waits in the kernel for the daemon
            self.assertIsNone(holder.poll(), "A's hold ended while its daemon was stopped")
            self.write("B", "paused-counter", b"100\n")
        finally:
            os.kill(daemon, signal.SIGCONT)
        self.assert_the_save_was_refused("paused-counter", holder, go)
        self.wait_for_rejoin("A", before)

    def test_8_a_turn_whose_hold_lost_its_cover_does_not_end_as_a_success(self):
        # The shell counter's turn under a pause: A's command writes, then A's daemon is stopped
        # past its TTL and B writes once etcd has ended A's lease. The command itself succeeds
        # (its write came before the pause), but its turn was not A's alone: exiting 0, the
        # hold let a script count it as a whole turn that overlapped B's.
        self.write("A", "turn", b"1\n")
        go = os.path.join(self.work, "turn.go")
        target = shlex.quote(self.path("A", "turn"))
        script = f'echo 2 > {target} || exit 3; echo ready; while [ ! -e {shlex.quote(go)} ]; do sleep 0.05; done'
        holder = subprocess.Popen([COORDFS, "coordinate", "--write", self.path("A", "turn"), "--", "sh", "-c", script],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "ready", self.log_tail("A"))
            daemon = daemon_of(self.mounts["A"])
            self.assertIsNotNone(daemon, "A's daemon not found")
            before = self.wait_for_lease("A", "held", 5)
            os.kill(daemon, signal.SIGSTOP)
            try:
                self.write("B", "turn", b"100\n")  # goes ahead once etcd has ended A's lease
            finally:
                os.kill(daemon, signal.SIGCONT)
            with open(go, "w"):
                pass
            _, error = holder.communicate(timeout=30)
        finally:
            if holder.poll() is None:
                holder.kill()
                holder.communicate()
        self.assertEqual(holder.returncode, 75, error + self.log_tail("A"))
        self.assertIn("lost its cover while the command ran", error)
        self.assertEqual(self.read(os.path.join(self.store, "turn")), b"100\n")
        # A turn that keeps its cover ends with its command's status, and says nothing.
        self.wait_for_rejoin("A", before)
        whole = subprocess.run([COORDFS, "coordinate", "--write", self.path("A", "turn"), "--", "true"],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual((whole.returncode, whole.stderr), (0, ""))


@unittest.skipIf(skip_reason(), skip_reason() or "")
class ClusterCoherenceTests(ClusterHosts, unittest.TestCase):
    """What one host reads after another host's turn is what that host wrote (NFS's
    close-to-open). Both hosts mount without a backing watch, as over a shared store whose
    changes by other machines no watch sees: the kernel keeps names a second."""

    @classmethod
    def mount(cls, host, extra=()):
        super().mount(host, ["--no-backing-watch", "--settle-time", "0", *extra])

    def test_an_open_on_B_after_A_saved_atomically_reads_the_new_file(self):
        # B read f a moment ago: its kernel still names f by the item it read. A's hold then
        # saves f atomically (a new file renamed over f) while B's `cat f` waits for it. B's cat
        # went on to the old item, which B's mount still had open: "v0", an update lost by
        # whoever writes back what it read.
        for round in range(3):
            self.write("A", "saved", b"v0\n")
            self.assertEqual(self.read(self.path("B", "saved")), b"v0\n")
            target = shlex.quote(self.path("A", "saved"))
            hold = subprocess.Popen([COORDFS, "coordinate", "--write", self.path("A", "saved"), "--", "sh", "-c",
                                     f"echo held; sleep 0.4; echo v1 > {target}.tmp && mv {target}.tmp {target}"],
                                    stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(hold.stdout.readline(), "held\n")
                reading = Reading(self.path("B", "saved"))
                self.assertTrue(reading.waits(0.2), "B's read went ahead while A's hold wrote")
                self.assertEqual(hold.wait(timeout=15), 0)
            finally:
                if hold.poll() is None:
                    hold.kill()
                    hold.wait()
            self.assertTrue(reading.finish(), self.log_tail("B"))
            self.assertIsNone(reading.error)
            self.assertEqual(reading.result, b"v1\n", f"round {round}: B read the item A's save replaced")

    def test_a_read_on_B_that_waited_for_A_s_write_in_place_reads_all_of_it(self):
        # B asks f's size while A writes it in place (one chunk of four written): B's kernel
        # keeps that size a while. B's read waits for A's write, and once A has closed f, reads
        # it: the kernel stopped the read at the size it kept, one chunk of A's four, a torn
        # read (the nemesis soak saw it with a backing watch too, when its notice of A's writes
        # came after B's read).
        chunk = 16384
        for round in range(3):
            name = f"inplace-{round}"
            self.write("A", name, b"")
            with open(self.path("A", name), "r+b") as file:
                file.write(bytes([65 + round]) * chunk)
                file.flush()
                self.assertEqual(os.stat(self.path("B", name)).st_size, chunk)
                reading = Reading(self.path("B", name))
                self.assertTrue(reading.waits(0.1), "B's read went ahead while A wrote")
                file.write(bytes([65 + round]) * (3 * chunk))
            self.assertTrue(reading.finish(), self.log_tail("B"))
            self.assertIsNone(reading.error)
            self.assertEqual(len(reading.result), 4 * chunk, f"round {round}: B read {len(reading.result)} bytes of A's write")


@unittest.skipIf(skip_reason(), skip_reason() or "")
class ClusterHiddenNamesTests(ClusterHosts, unittest.TestCase):
    """Both hosts hide the store's file names from etcd with one key file (docs/cluster.md)."""

    @classmethod
    def mount(cls, host, extra=()):
        key = os.path.join(cls.work, "cluster.key")
        if not os.path.exists(key):
            with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
                file.write(os.urandom(32))
        super().mount(host, ["--cluster-key-file", key, "--settle-time", "0", *extra])

    def stored(self):
        """Every key of the store in etcd, with its value."""
        prefix = b"/coordfs/shared/"
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        answer = cluster.run_in_netns(self.info["hosts"][0]["namespace"], cluster.http_json,
                                      self.info["members"][0]["client_url"] + "/v3/kv/range",
                                      {"key": cluster._b64(prefix), "range_end": cluster._b64(end)})
        return [(base64.b64decode(kv["key"]), base64.b64decode(kv.get("value", "")))
                for kv in answer.get("kvs") or []]

    def test_a_read_on_B_waits_for_A_and_no_key_names_the_file(self):
        os.makedirs(self.path("A", "confidential"), exist_ok=True)
        self.write("A", "confidential/secret-plans", b"first\n")
        fd = os.open(self.path("A", "confidential/secret-plans"), os.O_WRONLY | os.O_TRUNC)
        try:
            reader = Opening(self.path("B", "confidential/secret-plans"), os.O_RDONLY)
            self.assertTrue(reader.waits(), "B's read went ahead while A held the file for writing")
            # B learns A's paths from the sealed status answer.
            result = subprocess.run([COORDFS, "status", self.mounts["B"], "--json"], capture_output=True, text=True,
                                    timeout=30)
            self.assertEqual(result.returncode, 0, result.stderr)
            hosts = {host["host"]: host for host in json.loads(result.stdout).get("hosts", [])}
            paths = [intent.get("path") for holder in hosts.get("A", {}).get("holders", [])
                     for intent in holder.get("intents", [])]
            self.assertIn(self.path("B", "confidential/secret-plans"), paths, result.stdout)
            stored = self.stored()
            os.write(fd, b"second\n")
        finally:
            os.close(fd)
        self.assertTrue(reader.finish(), "B's read did not go ahead after A closed\n" + self.log_tail("B"))
        self.assertIsNone(reader.error)
        self.assertEqual(reader.result, b"second\n")
        delegations = [key for key, _ in stored if key.startswith(b"/coordfs/shared/delegations/")]
        self.assertGreaterEqual(len(delegations), 2, f"A's key and B's waiting one: {stored}")
        for key, value in stored:
            for word in (b"confidential", b"secret-plans"):
                self.assertNotIn(word, key, f"a key names the file: {key!r}")
                self.assertNotIn(word, value, f"the value of {key!r} names the file")

    def test_a_host_without_the_key_file_is_refused(self):
        elsewhere = os.path.join(self.work, "elsewhere-hidden")
        os.makedirs(elsewhere, exist_ok=True)
        urls = ",".join(url.removeprefix("http://") for url in self.info["client_urls"])
        daemon = subprocess.run(cluster._nsenter(self.info["hosts"][0]["namespace"]) + [
            COORDFS, "daemon", "--socket", os.path.join(self.work, "plain.sock"), "--cluster", "etcd://" + urls,
            "--cluster-store", "shared", "--host-name", "C", "--cluster-directory", elsewhere],
            capture_output=True, text=True, timeout=60)
        self.assertNotEqual(daemon.returncode, 0, daemon.stderr)
        self.assertIn("hides its file names in etcd (--cluster-key-file), and this host was given no key file",
                      daemon.stderr)


if __name__ == "__main__":
    unittest.main()
