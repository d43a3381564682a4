#!/usr/bin/env python3
"""Self-test of cluster.py, the harness for several coordfs hosts coordinating through etcd.

Brings a 3-member cluster and 3 hosts up, each in a network namespace of its own, and checks
what tests of the feature will lean on: a put through one member is read through another, the
cluster keeps working with a member killed and a restarted member catches up, a cut host reaches
neither etcd nor other hosts while the others still do, `exec` runs a command in a host's network
namespace only, nothing appears in the root namespace's network, and `down` leaves nothing.

Needs root and etcd (apt-get install etcd-server etcd-client); skipped otherwise.
    python3 Tests/Scripts/cluster_test.py [-v]
CLUSTER_TEST_STATE=DIR keeps the state (logs) in DIR instead of a temporary directory.
"""

import atexit
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402

CLUSTER_PY = os.path.join(HERE, "cluster.py")


def skip_reason():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("etcd", "ip", "nsenter"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    return None


def root_network():
    """The root namespace's interfaces and IPv4 addresses, to see the harness adds none."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    addresses = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                               check=True).stdout
    names = sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
    return names, sorted(line.split()[3] for line in addresses.splitlines())


def retry(function, seconds, *args, **kwargs):
    """function(*args, **kwargs), tried again on OSError/ClusterError until seconds have passed."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return function(*args, **kwargs)
        except (OSError, cluster.ClusterError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def is_unreachable(error):
    """A timeout or an unreachable host or network, not a refusal: nothing got through."""
    reason = getattr(error, "reason", error)  # urllib wraps socket errors in URLError
    return isinstance(reason, TimeoutError) or getattr(reason, "errno", None) in (
        errno.EHOSTUNREACH, errno.ENETUNREACH)


def unique_key(name):
    return f"test/{name}/{uuid.uuid4().hex[:8]}"


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = skip_reason()
        if reason:
            raise unittest.SkipTest(reason)
        cls.state = os.environ.get("CLUSTER_TEST_STATE") or tempfile.mkdtemp(prefix="coordfs-cluster-")
        print(f"\ncluster state in {cls.state}", file=sys.stderr)
        cls.root_before = root_network()
        cls.info = None
        cls.addClassCleanup(cls.tear_down_and_check)
        atexit.register(cluster.down, cls.state, True)  # after ^C too (down is idempotent)
        cls.info = cluster.up(cls.state)

    @classmethod
    def tear_down_and_check(cls):
        if cls.info is None:  # up failed and cleaned up after itself; check that it did
            leftovers = [ns for ns in cluster._namespaces()
                         if ns.startswith(f"cfs{os.getpid()}-") or ns.startswith(f"cfs{os.getpid()}.")]
            if leftovers:
                raise AssertionError(f"a failed up left namespaces {leftovers}")
            return
        info = cluster.load(cls.state) or cls.info  # members restarted since up have new pids
        prefix = info["prefix"]
        pids = [member["pid"] for member in info["members"] if member["pid"]]
        if not cluster.down(cls.state, quiet=True):
            raise AssertionError("down found nothing to clean")
        if cluster.down(cls.state, quiet=True):
            raise AssertionError("a second down found something to clean")
        problems = []
        leftovers = [ns for ns in cluster._namespaces() if ns.startswith(prefix + "-")]
        if leftovers:
            problems.append(f"namespaces {leftovers} remain")
        running = [pid for pid in pids if cluster._alive(pid)]
        if running:
            problems.append(f"etcd pids {running} still run")
        if os.path.exists(os.path.join(cls.state, "data")) or os.path.exists(os.path.join(cls.state, "cluster.json")):
            problems.append("data or cluster.json remain")
        if os.path.exists(os.path.join(cluster.REGISTRY_DIR, prefix + ".json")):
            problems.append("registry entry remains")
        if problems:
            raise AssertionError("; ".join(problems))
        if not os.environ.get("CLUSTER_TEST_STATE"):
            shutil.rmtree(cls.state, ignore_errors=True)

    # Helpers ----------------------------------------------------------------------------------

    def member(self, number):
        return self.info["members"][number - 1]

    def host(self, number):
        return self.info["hosts"][number - 1]

    def on_host(self, number, function, *args, **kwargs):
        return cluster.run_in_netns(self.host(number)["namespace"], function, *args, **kwargs)

    def cli(self, *args, check=True):
        result = subprocess.run([sys.executable, CLUSTER_PY, *args[:1], "--state", self.state, *args[1:]],
                                capture_output=True, text=True, timeout=60)
        if check:
            self.assertEqual(result.returncode, 0, f"cluster.py {' '.join(args)}: {result.stderr}{result.stdout}")
        return result

    # Tests ------------------------------------------------------------------------------------

    def test_put_through_member1_is_read_through_member3(self):
        key = unique_key("replication")
        revision = self.on_host(1, cluster.kv_put, self.member(1)["client_url"], key, "through e1")
        self.assertGreater(revision, 1)
        self.assertEqual(self.on_host(1, cluster.kv_get, self.member(3)["client_url"], key), b"through e1")
        self.assertEqual(self.on_host(2, cluster.kv_get, self.member(2)["client_url"], key), b"through e1")

    def test_exec_runs_a_command_in_the_host_network_namespace_only(self):
        key = unique_key("exec")
        self.on_host(1, cluster.kv_put, self.member(1)["client_url"], key, "seen from h2")
        reader = (f"import sys; sys.path.insert(0, {HERE!r}); import cluster; "
                  f"print(cluster.kv_get({self.member(3)['client_url']!r}, {key!r}).decode())")
        result = self.cli("exec", "h2", "--", sys.executable, "-c", reader)
        self.assertEqual(result.stdout.strip(), "seen from h2")
        # etcdctl finds the cluster through ETCDCTL_ENDPOINTS.
        result = self.cli("exec", "h3", "--", "etcdctl", "get", "--print-value-only", key)
        self.assertEqual(result.stdout.strip(), "seen from h2")
        result = self.cli("exec", "2", "--", "sh", "-c",
                          'ip -o -4 addr show dev eth0; echo "$CLUSTER_NODE"; readlink /proc/self/ns/mnt; exit 7',
                          check=False)
        self.assertEqual(result.returncode, 7, result.stderr)
        address_line, node, mount_namespace = result.stdout.strip().splitlines()
        self.assertIn(f"inet {self.host(2)['address']}/24", address_line)
        self.assertEqual(node, "h2")
        self.assertEqual(mount_namespace, os.readlink("/proc/self/ns/mnt"), "exec must keep the mount namespace")

    def test_root_network_namespace_is_untouched(self):
        self.assertEqual(root_network(), self.root_before)

    def test_hosts_reach_each_other(self):
        server = self.on_host(2, socket.create_server, (self.host(2)["address"], 7000))
        with server:
            server.settimeout(5)
            client = self.on_host(1, socket.create_connection, (self.host(2)["address"], 7000), 5)
            with client:
                connection, (peer, _) = server.accept()
                connection.close()
        self.assertEqual(peer, self.host(1)["address"])

    def test_killed_member_then_put_still_works_and_restarted_member_catches_up(self):
        victim = self.member(2)
        pid = cluster.load(self.state)["members"][1]["pid"]
        self.assertTrue(cluster.kill_member(self.state, 2))
        try:
            self.assertFalse(cluster._alive(pid))
            self.assertIsNone(cluster.load(self.state)["members"][1]["pid"])
            with self.assertRaises(OSError):  # nothing listens there any more
                self.on_host(1, cluster.kv_get, victim["client_url"], "x", timeout=1)
            key = unique_key("quorum")
            # If e2 led, a new leader is elected within about 2 election timeouts.
            retry(self.on_host, 10, 1, cluster.kv_put, self.member(1)["client_url"], key, "two of three")
            self.assertEqual(self.on_host(1, cluster.kv_get, self.member(3)["client_url"], key), b"two of three")
            self.assertIn("2/3 members healthy", self.cli("status", check=False).stdout)
        finally:
            report = cluster.start_member(self.state, 2)
        self.assertTrue(report["healthy"], report)
        # Its data dir kept, the restarted member catches up and serves the write it missed.
        self.assertEqual(self.on_host(3, cluster.kv_get, victim["client_url"], key), b"two of three")
        self.assertIn("3/3 members healthy", self.cli("status").stdout)

    def test_cut_host_reaches_neither_etcd_nor_hosts_until_healed(self):
        url = self.member(1)["client_url"]
        h2 = (self.host(2)["address"], 7001)
        server = self.on_host(2, socket.create_server, h2)
        self.addCleanup(server.close)
        self.on_host(1, socket.create_connection, h2, 5).close()  # reachable before the cut
        self.on_host(1, cluster.kv_get, url, "warm up")
        self.cli("cut", "h1")
        try:
            self.assertIn("h1  10.231.0.21  link cut", self.cli("status").stdout)
            with self.assertRaises(OSError) as caught:
                self.on_host(1, cluster.kv_get, url, "x", timeout=1)
            self.assertTrue(is_unreachable(caught.exception), repr(caught.exception))
            with self.assertRaises(OSError) as caught:
                self.on_host(1, socket.create_connection, h2, 1)
            self.assertTrue(is_unreachable(caught.exception), repr(caught.exception))
            key = unique_key("cut")
            self.on_host(2, cluster.kv_put, url, key, "h2 still reaches etcd")
            self.assertEqual(self.on_host(2, cluster.kv_get, self.member(2)["client_url"], key),
                             b"h2 still reaches etcd")
            self.on_host(3, socket.create_connection, h2, 5).close()
        finally:
            self.cli("heal", "h1")
        self.assertIn("h1  10.231.0.21  link up", self.cli("status").stdout)
        self.assertEqual(retry(self.on_host, 10, 1, cluster.kv_get, url, key, timeout=1), b"h2 still reaches etcd")
        retry(self.on_host, 10, 1, socket.create_connection, h2, 1).close()

    def test_local_cut_fails_at_once(self):
        cluster.cut(self.state, "h3", local=True)
        try:
            started = time.monotonic()
            with self.assertRaises(OSError) as caught:
                self.on_host(3, cluster.kv_get, self.member(1)["client_url"], "x", timeout=5)
            self.assertLess(time.monotonic() - started, 1)
            self.assertEqual(getattr(caught.exception.reason, "errno", None), errno.ENETUNREACH,
                             repr(caught.exception))
            self.assertIn("h3  10.231.0.23  link cut-local", self.cli("status").stdout)
        finally:
            cluster.heal(self.state, "h3")
        retry(self.on_host, 10, 3, cluster.kv_get, self.member(1)["client_url"], "x", timeout=1)

    def test_sweep_leaves_a_cluster_of_a_running_owner(self):
        self.assertNotIn(self.info["prefix"], cluster.sweep(quiet=True))
        self.assertTrue(os.path.exists(f"/run/netns/{self.info['prefix']}-sw"))


class FailedUpTest(unittest.TestCase):
    """An up that fails once namespaces exist and members run (the wait for health made to
    fail, or interrupted as by ^C) leaves nothing behind and raises the original error."""

    def setUp(self):
        reason = skip_reason()
        if reason:
            self.skipTest(reason)
        self.state = tempfile.mkdtemp(prefix="coordfs-cluster-failing-")
        self.addCleanup(shutil.rmtree, self.state, True)
        self.addCleanup(cluster.down, self.state, True)
        self.original_wait = cluster._wait_healthy
        self.addCleanup(setattr, cluster, "_wait_healthy", self.original_wait)

    def fail_up_with(self, error):
        started = []

        def failing_wait(info, members, timeout):
            started.extend((member["pid"], member["pid_start"]) for member in members)
            self.assertTrue(all(os.path.exists(f"/run/netns/{ns}") for ns in info["namespaces"]))
            raise error

        cluster._wait_healthy = failing_wait
        before = set(cluster._namespaces())
        with self.assertRaises(type(error)):
            cluster.up(self.state, members=3, hosts=2)
        self.assertEqual(len(started), 3)
        self.assertEqual(set(cluster._namespaces()) - before, set())
        self.assertFalse([pid for pid, start in started if cluster._alive(pid, start)])
        self.assertFalse(os.path.exists(os.path.join(self.state, "cluster.json")))
        self.assertFalse(os.path.exists(os.path.join(self.state, "data")))
        self.assertFalse(cluster.down(self.state, quiet=True))

    def test_failed_up_leaves_nothing(self):
        self.fail_up_with(cluster.ClusterError("injected failure"))

    def test_interrupted_up_leaves_nothing(self):
        self.fail_up_with(KeyboardInterrupt())


if __name__ == "__main__":
    # SIGTERM as ^C: the run stops and atexit takes the cluster down.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    unittest.main()
