#!/usr/bin/env python3
"""Test harness: an etcd cluster and coordfs "hosts", each in a network namespace of its own.

For tests of several coordfs hosts that share one backing directory and coordinate through etcd.
`up` builds a private network: a "switch" namespace holding a Linux bridge, one namespace per etcd
member (10.231.0.11, .12, ...) and per host (10.231.0.21, .22, ...), each joined to the bridge by
a veth pair. Addresses exist only inside these namespaces: nothing is added to the root
namespace's network, and several clusters can run side by side. Members run Debian's `etcd`
(3.4) under `nsenter --net` only, never `ip netns exec`, which would also give them a mount
namespace of their own: hosts are started the same way, so their FUSE mounts stay visible in
the root mount namespace.

    cluster.py up --state DIR [--members 3] [--hosts 3] [--timeout 30] [--owner PID]
    cluster.py down --state DIR             kill everything, delete namespaces and data (idempotent)
    cluster.py sweep                        tear down clusters whose owner process is gone
    cluster.py status --state DIR [--json]  member health (exit 1 unless all are healthy)
    cluster.py kill-member --state DIR N [--signal TERM]   (SIGKILL by default: a crash)
    cluster.py start-member --state DIR N   restart on its data dir (--initial-cluster-state existing)
    cluster.py cut --state DIR NODE [--local] / heal --state DIR NODE
    cluster.py exec --state DIR NODE -- CMD...

NODE is a host (`h1` or `1`) or a member (`e2`). `cut` takes the node's link down at the switch:
its packets are then dropped silently, as in a real partition (connections time out; new ones
fail once ARP gives up, after about 3 s). With `--local` the node's own interface goes down
instead: its connections fail at once with "Network is unreachable". `heal` undoes either.
`exec` runs CMD in the node's network namespace only, with ETCDCTL_ENDPOINTS (so `etcdctl`
just works), CLUSTER_ENDPOINTS, CLUSTER_NODE and CLUSTER_ADDRESS set; it returns CMD's exit
status.

Timings, set explicitly: --heartbeat-interval 100 (ms) and --election-timeout 1000 (ms), etcd's
defaults, which are already short (shorter ones invite needless elections on a loaded 2-core
machine). A killed leader is replaced in 0.7-1.8 s; the shortest lease etcd grants is 2 s (a
shorter TTL is raised to it); a request sent to a member with no quorum waits 7 s before it
fails (5 s + 2 election timeouts). Watch progress notifications come every 2 s
(--experimental-watch-progress-notify-interval; etcd's default is 10 minutes). --pre-vote is on
(3.4's default is off, 3.5's on): without it a member back from a cut, its log behind, starts
election after election at ever higher terms that it cannot win, and the cluster had no leader
for seconds after a heal.

Names are `cfs<OWNER>-sw`, `cfs<OWNER>-e1`, `cfs<OWNER>-h1`, ... (`cfs<OWNER>.2-...` for a second
cluster of the same owner), where OWNER is the pid of the process the cluster belongs to: the
calling Python process for `up()`, the parent of `cluster.py` (usually the shell or the test
script) for the command, or `--owner` (give it when that parent exits at once, as a line of a
Makefile recipe does, or a later sweep takes the cluster down). `sweep`, which `up` also runs first, tears down every
cluster whose owner has exited, so a killed run leaves nothing behind for long. DIR/cluster.json
describes the cluster (namespaces, addresses, client URLs, pids); member data lives in DIR/data,
logs in DIR/logs (kept by `down`).

As a module (root required, as for the command):

    import cluster
    info = cluster.up(state_dir)
    try:
        url = info["members"][0]["client_url"]
        cluster.run_in_netns(info["hosts"][0]["namespace"], cluster.kv_put, url, "k", "v")
    finally:
        cluster.down(state_dir)
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

SUBNET = "10.231.0"
PREFIX_LENGTH = 24
MEMBER_BASE = 10  # member N is 10.231.0.(10+N)
HOST_BASE = 20  # host N is 10.231.0.(20+N)
MAX_MEMBERS = 9
MAX_HOSTS = 99
CLIENT_PORT = 2379
PEER_PORT = 2380
BRIDGE = "br0"
NODE_INTERFACE = "eth0"

HEARTBEAT_INTERVAL_MS = 100
ELECTION_TIMEOUT_MS = 1000
PROGRESS_NOTIFY_INTERVAL = "2s"
PRE_VOTE = True

NETNS_DIR = "/run/netns"
REGISTRY_DIR = "/run/coordfs-cluster"
NAME_PATTERN = re.compile(r"^(cfs(\d+)(?:\.\d+)?)-(sw|e\d+|h\d+)$")
STATE_FILE = "cluster.json"

_CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_children: dict[int, subprocess.Popen] = {}  # etcd processes this process started, to reap
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy


class ClusterError(Exception):
    """A harness step failed; the message says which and why."""


class EtcdError(ClusterError):
    """etcd's gateway answered with an HTTP error; `status` and `body` (parsed JSON or text)."""

    def __init__(self, url: str, status: int, body):
        super().__init__(f"{url}: HTTP {status}: {body}")
        self.status = status
        self.body = body


def _log(message: str) -> None:
    print(f"cluster: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- commands

def _run(args: list[str], *, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as error:
        raise ClusterError(f"{args[0]} not found: {error}") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{' '.join(args)}: no answer within {timeout} s") from None
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip()
        raise ClusterError(f"{' '.join(args)} failed with status {result.returncode}: {detail}")
    return result


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["ip", *args], check=check)


def _require_tools(etcd: bool = False) -> None:
    if os.geteuid() != 0:
        raise ClusterError("network namespaces need root: run as root")
    needed = ["ip", "nsenter"] + (["etcd"] if etcd else [])
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if missing:
        hint = " (apt-get install etcd-server)" if "etcd" in missing else ""
        raise ClusterError(f"missing {', '.join(missing)}{hint}")


# ----------------------------------------------------------------------------- processes

def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            text = file.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[19])


def _alive(pid: int | None, start: int | None = None) -> bool:
    """Whether pid runs (not a zombie) and, if start is given, is still the same process."""
    if not pid:
        return False
    child = _children.get(pid)
    if child is not None and child.poll() is not None:
        del _children[pid]
        return False
    stat = _proc_stat(pid)
    if stat is None or stat[0] in "ZXx":
        return False
    return start is None or stat[1] == start


def _start_time(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def _stop(processes: list[tuple[int, int | None]], grace: float = 5.0, first: int = signal.SIGTERM) -> list[int]:
    """Signals processes (first, then SIGKILL after grace seconds); returns any still running."""
    def living():
        return [(pid, start) for pid, start in processes if _alive(pid, start)]

    for sig, wait in ((first, grace), (signal.SIGKILL, 5.0)):
        remaining = living()
        if not remaining:
            return []
        for pid, _ in remaining:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while living() and time.monotonic() < deadline:
            time.sleep(0.05)
        if sig == signal.SIGKILL:
            break
    return [pid for pid, _ in living()]


def _netns_pids(namespace: str) -> list[tuple[int, int | None]]:
    if not os.path.exists(os.path.join(NETNS_DIR, namespace)):
        return []
    result = _ip("netns", "pids", namespace, check=False)
    pids = [int(word) for word in result.stdout.split() if word.isdigit()]
    return [(pid, _start_time(pid)) for pid in pids if pid != os.getpid()]


# ----------------------------------------------------------------------------- namespaces

def _namespaces() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def _ns_exists(namespace: str) -> bool:
    return os.path.exists(os.path.join(NETNS_DIR, namespace))


def _ns_path(namespace: str) -> str:
    return namespace if namespace.startswith("/") else os.path.join(NETNS_DIR, namespace)


def run_in_netns(namespace: str, function, *args, **kwargs):
    """Calls function(*args, **kwargs) on a thread that has joined the network namespace
    (a name under /run/netns or a path), so its sockets live there; returns its result or raises
    its exception. Only the network namespace changes; the calling thread is untouched."""
    path = _ns_path(namespace)
    outcome: dict = {}

    def body():
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, _CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"setns({path}): {os.strerror(error)}")
            finally:
                os.close(fd)
            outcome["value"] = function(*args, **kwargs)
        except BaseException as error:  # handed to the caller
            outcome["error"] = error

    thread = threading.Thread(target=body, name=f"netns {namespace}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _nsenter(namespace: str) -> list[str]:
    return ["nsenter", f"--net={_ns_path(namespace)}", "--"]


# ----------------------------------------------------------------------------- etcd over HTTP

def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def http_json(url: str, body: dict | None = None, timeout: float = 2.0) -> dict:
    """POSTs body as JSON (a GET without one) and returns the parsed answer. Raises EtcdError
    for an HTTP error status, OSError (URLError, timeout) when nothing answers."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with _opener.open(request, timeout=timeout) as response:
            text = response.read()
    except urllib.error.HTTPError as error:
        payload = error.read()
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = payload.decode(errors="replace").strip()
        raise EtcdError(url, error.code, parsed) from None
    return json.loads(text) if text.strip() else {}


def kv_put(client_url: str, key: str | bytes, value: str | bytes, lease: int | None = None,
           timeout: float = 2.0) -> int:
    """Puts key=value through the member at client_url; returns the revision of the put."""
    body = {"key": _b64(key), "value": _b64(value)}
    if lease:
        body["lease"] = str(lease)
    answer = http_json(f"{client_url}/v3/kv/put", body, timeout)
    return int(answer["header"]["revision"])


def kv_get(client_url: str, key: str | bytes, timeout: float = 2.0) -> bytes | None:
    """The value of key read (linearizably) through the member at client_url, None if absent."""
    answer = http_json(f"{client_url}/v3/kv/range", {"key": _b64(key)}, timeout)
    kvs = answer.get("kvs") or []
    return base64.b64decode(kvs[0].get("value", "")) if kvs else None


def member_health(client_url: str, timeout: float = 3.0) -> dict:
    """What one member says of itself: healthy (its /health, which needs a leader and a quorum
    read), member_id, leader, raft_term, revision, or error. Call it inside a namespace that
    reaches the member (run_in_netns)."""
    report: dict = {"healthy": False}
    try:
        status = http_json(f"{client_url}/v3/maintenance/status", {}, timeout)
        header = status.get("header", {})
        report.update(member_id=header.get("member_id"), leader=status.get("leader"),
                      raft_term=int(status.get("raftTerm", 0)), revision=int(header.get("revision", 0)),
                      version=status.get("version"))
        health = http_json(f"{client_url}/health", None, timeout)
        report["healthy"] = health.get("health") == "true"
        if not report["healthy"]:
            report["error"] = f"/health says {health}"
    except (OSError, ClusterError, ValueError) as error:
        report["error"] = str(getattr(error, "reason", None) or error)
    return report


# ----------------------------------------------------------------------------- state

def _state_path(state_dir: str) -> str:
    return os.path.join(os.path.abspath(state_dir), STATE_FILE)


def load(state_dir: str) -> dict | None:
    """DIR/cluster.json, or None when there is none."""
    try:
        with open(_state_path(state_dir)) as file:
            return json.load(file)
    except FileNotFoundError:
        return None
    except ValueError as error:
        raise ClusterError(f"{_state_path(state_dir)} is not valid JSON: {error}") from None


def _save(info: dict) -> None:
    path = _state_path(info["state_dir"])
    temporary = path + ".tmp"
    with open(temporary, "w") as file:
        json.dump(info, file, indent=2)
        file.write("\n")
    os.replace(temporary, path)


def _registry_path(prefix: str) -> str:
    return os.path.join(REGISTRY_DIR, prefix + ".json")


def _register(info: dict) -> None:
    os.makedirs(REGISTRY_DIR, exist_ok=True)
    entry = {"prefix": info["prefix"], "owner": info["owner"], "state_dir": info["state_dir"]}
    with open(_registry_path(info["prefix"]), "w") as file:
        json.dump(entry, file)


def _registry(prefix: str) -> dict | None:
    try:
        with open(_registry_path(prefix)) as file:
            return json.load(file)
    except (FileNotFoundError, ValueError):
        return None


def _unregister(prefix: str) -> None:
    try:
        os.unlink(_registry_path(prefix))
    except FileNotFoundError:
        pass


# ----------------------------------------------------------------------------- up

def _member(prefix: str, state_dir: str, index: int) -> dict:
    name = f"e{index}"
    address = f"{SUBNET}.{MEMBER_BASE + index}"
    return {
        "index": index, "name": name, "namespace": f"{prefix}-{name}", "address": address,
        "switch_port": name, "interface": NODE_INTERFACE,
        "client_url": f"http://{address}:{CLIENT_PORT}", "peer_url": f"http://{address}:{PEER_PORT}",
        "data_dir": os.path.join(state_dir, "data", name), "log": os.path.join(state_dir, "logs", f"{name}.log"),
        "pid": None, "pid_start": None,
    }


def _host(prefix: str, index: int) -> dict:
    name = f"h{index}"
    return {"index": index, "name": name, "namespace": f"{prefix}-{name}",
            "address": f"{SUBNET}.{HOST_BASE + index}", "switch_port": name, "interface": NODE_INTERFACE}


def _claim_prefix(info: dict) -> None:
    """Picks a prefix no namespace uses and creates its switch namespace (the claim)."""
    base = f"cfs{info['owner']['pid']}"
    taken = {match.group(1) for match in map(NAME_PATTERN.match, _namespaces()) if match}
    for number in range(1, 100):
        prefix = base if number == 1 else f"{base}.{number}"
        if prefix in taken:
            continue
        info.update(prefix=prefix, cluster_token=prefix, claimed=False,
                    switch={"namespace": f"{prefix}-sw", "bridge": BRIDGE})
        _save(info)
        if _ip("netns", "add", info["switch"]["namespace"], check=False).returncode != 0:
            continue  # taken meanwhile
        info["claimed"] = True
        info["namespaces"].append(info["switch"]["namespace"])
        _save(info)
        _register(info)
        return
    raise ClusterError(f"no free namespace prefix {base}[.N]")


def _build_network(info: dict) -> None:
    switch = info["switch"]["namespace"]
    _ip("-n", switch, "link", "set", "lo", "up")
    _ip("-n", switch, "link", "add", BRIDGE, "type", "bridge")
    _ip("-n", switch, "link", "set", BRIDGE, "up")
    for node in info["members"] + info["hosts"]:
        namespace = node["namespace"]
        _ip("netns", "add", namespace)
        info["namespaces"].append(namespace)
        _save(info)
        _ip("-n", namespace, "link", "set", "lo", "up")
        # Both ends are made inside the test namespaces: the root namespace never sees them.
        _ip("-n", switch, "link", "add", node["switch_port"], "type", "veth",
            "peer", "name", NODE_INTERFACE, "netns", namespace)
        _ip("-n", switch, "link", "set", node["switch_port"], "master", BRIDGE)
        _ip("-n", switch, "link", "set", node["switch_port"], "up")
        _ip("-n", namespace, "addr", "add", f"{node['address']}/{PREFIX_LENGTH}", "dev", NODE_INTERFACE)
        _ip("-n", namespace, "link", "set", NODE_INTERFACE, "up")


def _etcd_command(info: dict, member: dict, cluster_state: str) -> list[str]:
    timings = info["timings"]
    return _nsenter(member["namespace"]) + [
        shutil.which("etcd") or "etcd",
        "--name", member["name"],
        "--data-dir", member["data_dir"],
        "--listen-client-urls", f"{member['client_url']},http://127.0.0.1:{CLIENT_PORT}",
        "--advertise-client-urls", member["client_url"],
        "--listen-peer-urls", member["peer_url"],
        "--initial-advertise-peer-urls", member["peer_url"],
        "--initial-cluster", info["initial_cluster"],
        "--initial-cluster-token", info["cluster_token"],
        "--initial-cluster-state", cluster_state,
        "--heartbeat-interval", str(timings["heartbeat_interval_ms"]),
        "--election-timeout", str(timings["election_timeout_ms"]),
        "--experimental-watch-progress-notify-interval", timings["progress_notify_interval"],
        "--pre-vote=" + ("true" if timings["pre_vote"] else "false"),
        "--logger", "zap", "--log-outputs", "stderr",
    ]


def _start_member(info: dict, member: dict, cluster_state: str) -> None:
    os.makedirs(os.path.dirname(member["log"]), exist_ok=True)
    os.makedirs(os.path.dirname(member["data_dir"]), exist_ok=True)
    # etcd takes any ETCD_* variable as a flag; a proxy must never carry peer traffic.
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith("ETCD") and not key.lower().endswith("_proxy")}
    command = _etcd_command(info, member, cluster_state)
    with open(member["log"], "a") as log:
        log.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} cluster.py starts: {' '.join(command)}\n")
        log.flush()
        try:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       env=environment, start_new_session=True, close_fds=True)
        except OSError as error:
            raise ClusterError(f"cannot start etcd member {member['name']}: {error}") from None
    _children[process.pid] = process
    member["pid"] = process.pid
    member["pid_start"] = _start_time(process.pid)
    _save(info)


def _log_tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, errors="replace") as file:
            return "".join(file.readlines()[-lines:]).rstrip()
    except OSError:
        return "(no log)"


def _wait_healthy(info: dict, members: list[dict], timeout: float) -> dict[str, dict]:
    """Waits until every one of members answers healthy and all name the same leader."""
    deadline = time.monotonic() + timeout
    while True:
        reports = {}
        for member in members:
            if not _alive(member["pid"], member["pid_start"]):
                raise ClusterError(f"etcd member {member['name']} exited; the end of {member['log']}:\n"
                                   + _log_tail(member["log"]))
            reports[member["name"]] = run_in_netns(member["namespace"], member_health, member["client_url"], 1.5)
        leaders = {report.get("leader") for report in reports.values()}
        if all(report["healthy"] for report in reports.values()) and len(leaders) == 1 and None not in leaders:
            return reports
        if time.monotonic() >= deadline:
            problems = "; ".join(f"{name}: {report.get('error', 'leader ' + str(report.get('leader')))}"
                                 for name, report in reports.items())
            raise ClusterError(f"cluster not healthy within {timeout:g} s ({problems}); logs in "
                               f"{os.path.join(info['state_dir'], 'logs')}")
        time.sleep(0.2)


def up(state_dir: str, members: int = 3, hosts: int = 3, timeout: float = 30.0,
       owner: int | None = None) -> dict:
    """Builds the network, starts the members, waits until the cluster is healthy (at most
    timeout seconds) and returns what DIR/cluster.json holds. On any failure, everything made so
    far is torn down before the error is raised. owner: the pid the cluster belongs to for
    `sweep` (default: this process)."""
    if not 1 <= members <= MAX_MEMBERS:
        raise ClusterError(f"members must be 1 to {MAX_MEMBERS}")
    if not 0 <= hosts <= MAX_HOSTS:
        raise ClusterError(f"hosts must be 0 to {MAX_HOSTS}")
    _require_tools(etcd=True)
    state_dir = os.path.abspath(state_dir)
    os.makedirs(os.path.join(state_dir, "logs"), exist_ok=True)
    sweep(quiet=True)
    previous = load(state_dir)
    if previous is not None:
        if _is_running(previous):
            raise ClusterError(f"a cluster ({previous.get('prefix')}) is already up in {state_dir}: "
                               f"run `cluster.py down --state {state_dir}` first")
        down(state_dir)

    owner_pid = owner or os.getpid()
    if _proc_stat(owner_pid) is None:
        raise ClusterError(f"owner process {owner_pid} does not exist")
    info: dict = {
        "state_dir": state_dir,
        "phase": "starting",
        "owner": {"pid": owner_pid, "start": _start_time(owner_pid)},
        "subnet": f"{SUBNET}.0/{PREFIX_LENGTH}",
        "timings": {"heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS, "election_timeout_ms": ELECTION_TIMEOUT_MS,
                    "progress_notify_interval": PROGRESS_NOTIFY_INTERVAL, "pre_vote": PRE_VOTE},
        "namespaces": [],
    }
    try:
        _claim_prefix(info)
        prefix = info["prefix"]
        info["members"] = [_member(prefix, state_dir, index) for index in range(1, members + 1)]
        info["hosts"] = [_host(prefix, index) for index in range(1, hosts + 1)]
        info["client_urls"] = [member["client_url"] for member in info["members"]]
        info["initial_cluster"] = ",".join(f"{m['name']}={m['peer_url']}" for m in info["members"])
        _save(info)
        _build_network(info)
        for member in info["members"]:
            if os.path.exists(member["data_dir"]):
                shutil.rmtree(member["data_dir"])
            _start_member(info, member, "new")
        _wait_healthy(info, info["members"], timeout)
        info["phase"] = "up"
        _save(info)
        return info
    except BaseException as error:
        _log(f"up failed ({error.__class__.__name__}: {error}); tearing down")
        try:
            down(state_dir, quiet=True)
        except Exception as cleanup_error:  # the first error is the one to report
            _log(f"teardown after the failure failed too: {cleanup_error}")
        raise


# ----------------------------------------------------------------------------- down, sweep

def _is_running(info: dict) -> bool:
    namespaces = set(info.get("namespaces", []))
    return any(_ns_exists(ns) for ns in namespaces) or any(
        _alive(m.get("pid"), m.get("pid_start")) for m in info.get("members", []))


def _teardown(namespaces: list[str], processes: list[tuple[int, int | None]]) -> bool:
    """Stops processes and everything inside namespaces, then deletes the namespaces."""
    existing = [ns for ns in namespaces if _ns_exists(ns)]
    did = bool(existing) or any(_alive(pid, start) for pid, start in processes)
    for _ in range(3):  # again, in case something started meanwhile
        targets = list(processes) + [entry for ns in existing for entry in _netns_pids(ns)]
        processes = []
        if not any(_alive(pid, start) for pid, start in targets):
            break
        stuck = _stop(targets)
        if stuck:
            raise ClusterError(f"processes {stuck} survive SIGKILL (in uninterruptible sleep?)")
    for ns in existing:
        _ip("netns", "del", ns)
    return did


def _prefix_namespaces(prefix: str) -> list[str]:
    return [ns for ns in _namespaces() if (match := NAME_PATTERN.match(ns)) and match.group(1) == prefix]


def down(state_dir: str, quiet: bool = False) -> bool:
    """Stops every process the cluster started and any other process inside its namespaces,
    deletes the namespaces and the members' data (logs stay). Idempotent: True if there was
    anything to clean. Works on a partial `up` and after a crashed test."""
    state_dir = os.path.abspath(state_dir)
    info = load(state_dir)
    if info is None:
        if not quiet:
            _log(f"nothing to clean in {state_dir}")
        return False
    namespaces = list(info.get("namespaces", []))
    prefix = info.get("prefix")
    if prefix and info.get("claimed"):
        namespaces += [ns for ns in _prefix_namespaces(prefix) if ns not in namespaces]
    members = [(m["pid"], m.get("pid_start")) for m in info.get("members", []) if m.get("pid")]
    # Members die at once: their data goes anyway, and a leader asked to stop first tries to hand
    # over its leadership to followers that are stopping too, for seconds. Anything else inside
    # the namespaces (hosts with mounts) is asked with SIGTERM first.
    did = any(_alive(pid, start) for pid, start in members)
    stuck = _stop(members, first=signal.SIGKILL)
    if stuck:
        raise ClusterError(f"etcd processes {stuck} survive SIGKILL")
    # Nodes first, the switch last: deleting a node's namespace also removes its veth pair.
    namespaces.sort(key=lambda ns: ns.endswith("-sw"))
    did = _teardown(namespaces, []) or did
    data = os.path.join(state_dir, "data")
    if os.path.exists(data):
        shutil.rmtree(data)
        did = True
    os.unlink(_state_path(state_dir))
    if prefix and info.get("claimed"):
        _unregister(prefix)
    if not quiet:
        _log(f"{prefix or 'cluster'} down" if did else f"nothing was running for {state_dir}")
    return did


def sweep(quiet: bool = False) -> list[str]:
    """Tears down every harness cluster whose owner process is gone (by the pid in its names,
    and the start time recorded in /run/coordfs-cluster when there is one); returns their
    prefixes. Clusters of running owners are left alone."""
    if os.geteuid() != 0:
        raise ClusterError("sweep needs root")
    prefixes: dict[str, int] = {}
    for ns in _namespaces():
        match = NAME_PATTERN.match(ns)
        if match:
            prefixes[match.group(1)] = int(match.group(2))
    if os.path.isdir(REGISTRY_DIR):
        for name in os.listdir(REGISTRY_DIR):
            entry = _registry(name[:-5]) if name.endswith(".json") else None
            if entry:
                prefixes.setdefault(entry["prefix"], entry["owner"]["pid"])
    swept = []
    for prefix, owner_pid in sorted(prefixes.items()):
        entry = _registry(prefix)
        owner_start = entry["owner"].get("start") if entry else None
        if _alive(owner_pid, owner_start):
            continue
        state_dir = entry.get("state_dir") if entry else None
        info = load(state_dir) if state_dir and os.path.exists(_state_path(state_dir)) else None
        if info is not None and info.get("prefix") == prefix:
            down(state_dir, quiet=True)
        else:
            namespaces = sorted(_prefix_namespaces(prefix), key=lambda ns: ns.endswith("-sw"))
            _teardown(namespaces, [])
        _unregister(prefix)
        swept.append(prefix)
        _log(f"swept {prefix} (owner {owner_pid} is gone)")
    if not swept and not quiet:
        _log("nothing stale")
    return swept


# ----------------------------------------------------------------------------- operations

def _require(state_dir: str) -> dict:
    info = load(state_dir)
    if info is None:
        raise ClusterError(f"no cluster in {os.path.abspath(state_dir)} (no {STATE_FILE})")
    return info


def _node(info: dict, spec: str, default: str = "host") -> dict:
    """A host or member by name (h1, e2), by full namespace name, or by number (default kind)."""
    nodes = info.get("hosts", []) + info.get("members", [])
    if spec.isdigit():
        spec = ("h" if default == "host" else "e") + spec
    for node in nodes:
        if spec in (node["name"], node["namespace"]):
            return node
    names = ", ".join(node["name"] for node in nodes)
    raise ClusterError(f"no node {spec!r} in {info.get('prefix')} (there are {names})")


def _member_of(info: dict, spec: str | int) -> dict:
    node = _node(info, str(spec), default="member")
    if node not in info.get("members", []):
        raise ClusterError(f"{spec} is not an etcd member")
    return node


def daemon_of(mount_point: str) -> int | None:
    """The pid of the coordfs daemon serving mount_point (its `daemon-start` process), or None."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                arguments = file.read().split(b"\0")
        except OSError:
            continue
        if b"daemon-start" in arguments and mount_point.encode() in arguments:
            return int(entry)
    return None


def leader(state_dir: str) -> int | None:
    """The number (1-based) of the etcd member that leads now, as the live members say; None
    while they have none."""
    report = status(state_dir)
    for number, (name, member) in enumerate(report["members"].items(), 1):
        if any(other.get("leader_name") == name for other in report["members"].values()):
            return number
    return None


def kill_member(state_dir: str, number: str | int, sig: int = signal.SIGKILL) -> bool:
    """Stops member number (SIGKILL by default: a crash) and waits until it is gone. False if it
    was not running."""
    info = _require(state_dir)
    member = _member_of(info, number)
    if not _alive(member.get("pid"), member.get("pid_start")):
        return False
    stuck = _stop([(member["pid"], member["pid_start"])], first=sig)
    if stuck:
        raise ClusterError(f"member {member['name']} (pid {member['pid']}) does not exit")
    member["pid"] = member["pid_start"] = None
    _save(info)
    return True


def start_member(state_dir: str, number: str | int, timeout: float = 30.0) -> dict:
    """Starts member number again on its data dir (--initial-cluster-state existing) and waits
    until it is healthy; returns its health report."""
    _require_tools(etcd=True)
    info = _require(state_dir)
    member = _member_of(info, number)
    if _alive(member.get("pid"), member.get("pid_start")):
        raise ClusterError(f"member {member['name']} is running (pid {member['pid']})")
    _start_member(info, member, "existing")
    return _wait_healthy(info, [member], timeout)[member["name"]]


def start_members(state_dir: str, numbers: list[str | int], timeout: float = 30.0) -> dict:
    """Starts several stopped members together (a cluster without quorum needs more than one
    back before any is healthy) and waits until all are healthy."""
    _require_tools(etcd=True)
    info = _require(state_dir)
    members = [_member_of(info, number) for number in numbers]
    for member in members:
        if _alive(member.get("pid"), member.get("pid_start")):
            raise ClusterError(f"member {member['name']} is running (pid {member['pid']})")
    for member in members:
        _start_member(info, member, "existing")
    return _wait_healthy(info, members, timeout)


def cut(state_dir: str, node: str, local: bool = False) -> None:
    """Takes node's link down: at the switch (silent drops), or its own interface (local)."""
    info = _require(state_dir)
    target = _node(info, str(node))
    if local:
        _ip("-n", target["namespace"], "link", "set", target["interface"], "down")
    else:
        _ip("-n", info["switch"]["namespace"], "link", "set", target["switch_port"], "down")


def heal(state_dir: str, node: str) -> None:
    """Brings both ends of node's link up again (undoes either kind of cut)."""
    info = _require(state_dir)
    target = _node(info, str(node))
    _ip("-n", info["switch"]["namespace"], "link", "set", target["switch_port"], "up")
    _ip("-n", target["namespace"], "link", "set", target["interface"], "up")


def link_state(info: dict, node: dict) -> str:
    """'up', 'cut' (switch port down) or 'cut-local' (own interface down)."""
    def is_up(namespace: str, interface: str) -> bool:
        result = _ip("-n", namespace, "-o", "link", "show", interface, check=False)
        flags = re.search(r"<([^>]*)>", result.stdout)
        return bool(flags) and "UP" in flags.group(1).split(",")
    if not is_up(info["switch"]["namespace"], node["switch_port"]):
        return "cut"
    if not is_up(node["namespace"], node["interface"]):
        return "cut-local"
    return "up"


def environment_for(info: dict, node: dict) -> dict[str, str]:
    """The variables `exec` adds for a command run as node."""
    endpoints = ",".join(info["client_urls"])
    return {"ETCDCTL_API": "3", "ETCDCTL_ENDPOINTS": endpoints, "CLUSTER_ENDPOINTS": endpoints,
            "CLUSTER_NODE": node["name"], "CLUSTER_ADDRESS": node["address"]}


def exec_in(state_dir: str, node: str, command: list[str]) -> int:
    """Runs command in node's network namespace only (nsenter --net), stdio passed through;
    returns its exit status (128+N for signal N)."""
    if not command:
        raise ClusterError("exec needs a command")
    info = _require(state_dir)
    target = _node(info, str(node))
    environment = dict(os.environ)
    environment.update(environment_for(info, target))
    try:
        process = subprocess.Popen(_nsenter(target["namespace"]) + command, env=environment)
    except OSError as error:
        raise ClusterError(f"cannot run nsenter: {error}") from None
    while True:
        try:
            status = process.wait()
            break
        except KeyboardInterrupt:  # the command got it too; its exit status tells
            continue
    return 128 - status if status < 0 else status


def status(state_dir: str) -> dict:
    """Each member's health (asked inside its own namespace) and each node's link."""
    info = _require(state_dir)
    members = {}
    for member in info["members"]:
        running = _alive(member.get("pid"), member.get("pid_start"))
        report = (run_in_netns(member["namespace"], member_health, member["client_url"], 2.0)
                  if running else {"healthy": False, "error": "not running"})
        report.update(pid=member.get("pid") if running else None, link=link_state(info, member))
        members[member["name"]] = report
    ids = {report.get("member_id"): name for name, report in members.items() if report.get("member_id")}
    for report in members.values():
        report["leader_name"] = ids.get(report.get("leader"))
    hosts = {host["name"]: {"namespace": host["namespace"], "address": host["address"],
                            "link": link_state(info, host)} for host in info["hosts"]}
    healthy = sum(report["healthy"] for report in members.values())
    return {"prefix": info["prefix"], "phase": info.get("phase"), "members": members, "hosts": hosts,
            "healthy": healthy, "all_healthy": healthy == len(members)}


# ----------------------------------------------------------------------------- command line

def _print_up(info: dict) -> None:
    print(f"cluster {info['prefix']} up; {_state_path(info['state_dir'])}")
    for member in info["members"]:
        print(f"  member {member['name']}  {member['client_url']}  netns {member['namespace']}  pid {member['pid']}")
    for host in info["hosts"]:
        print(f"  host   {host['name']}  {host['address']}  netns {host['namespace']}")
    print(f"  switch netns {info['switch']['namespace']}; ETCDCTL_ENDPOINTS={','.join(info['client_urls'])}")


def _print_status(report: dict) -> None:
    print(f"cluster {report['prefix']}: {report['healthy']}/{len(report['members'])} members healthy")
    for name, member in report["members"].items():
        if member["healthy"]:
            role = "leader" if member.get("leader_name") == name else f"follower of {member.get('leader_name')}"
            state = f"healthy  {role}  term {member['raft_term']}  revision {member['revision']}"
        else:
            state = f"UNHEALTHY ({member.get('error')})"
        pid = f"pid {member['pid']}" if member.get("pid") else "stopped"
        print(f"  {name}  {pid:<10}  link {member['link']:<9}  {state}")
    for name, host in report["hosts"].items():
        print(f"  {name}  {host['address']:<10}  link {host['link']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cluster.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help: str, state: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help)
        if state:
            sub.add_argument("--state", required=True, metavar="DIR", help="the cluster's state directory")
        return sub

    sub = command("up", "build the namespaces and start the members")
    sub.add_argument("--members", type=int, default=3)
    sub.add_argument("--hosts", type=int, default=3)
    sub.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for health (30)")
    sub.add_argument("--owner", type=int, help="pid the cluster belongs to for sweep (default: the parent)")
    command("down", "stop everything and delete namespaces and data")
    command("sweep", "tear down clusters whose owner is gone", state=False)
    sub = command("status", "print member health")
    sub.add_argument("--json", action="store_true")
    sub = command("kill-member", "stop a member (SIGKILL unless --signal)")
    sub.add_argument("member")
    sub.add_argument("--signal", default="KILL", help="KILL (default), TERM, ...")
    sub = command("start-member", "start a stopped member on its data")
    sub.add_argument("member")
    sub.add_argument("--timeout", type=float, default=30.0)
    sub = command("cut", "take a node's link down")
    sub.add_argument("node")
    sub.add_argument("--local", action="store_true", help="its own interface instead of the switch port")
    sub = command("heal", "bring a node's link up")
    sub.add_argument("node")
    sub = command("exec", "run a command in a node's network namespace")
    sub.add_argument("node")
    sub.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD...")

    arguments = parser.parse_args(argv)
    try:
        if arguments.command == "up":
            _print_up(up(arguments.state, arguments.members, arguments.hosts, arguments.timeout,
                         owner=arguments.owner or os.getppid()))
        elif arguments.command == "down":
            down(arguments.state)
        elif arguments.command == "sweep":
            sweep()
        elif arguments.command == "status":
            report = status(arguments.state)
            if arguments.json:
                print(json.dumps(report, indent=2))
            else:
                _print_status(report)
            return 0 if report["all_healthy"] else 1
        elif arguments.command == "kill-member":
            name = arguments.signal.upper()
            try:
                sig = signal.Signals[name if name.startswith("SIG") else "SIG" + name]
            except KeyError:
                raise ClusterError(f"unknown signal {arguments.signal}") from None
            if not kill_member(arguments.state, arguments.member, sig):
                _log(f"member {arguments.member} was not running")
        elif arguments.command == "start-member":
            start_member(arguments.state, arguments.member, arguments.timeout)
        elif arguments.command == "cut":
            cut(arguments.state, arguments.node, arguments.local)
        elif arguments.command == "heal":
            heal(arguments.state, arguments.node)
        elif arguments.command == "exec":
            argv_rest = arguments.argv[1:] if arguments.argv[:1] == ["--"] else arguments.argv
            return exec_in(arguments.state, arguments.node, argv_rest)
    except ClusterError as error:
        _log(f"error: {error}")
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
