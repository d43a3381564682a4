#!/usr/bin/env python3
"""Drives a coordfs control socket hard, in rounds, and measures what the serving process
keeps once every client has gone: its resident memory, its descriptors and threads, and the
holds, waits and presenters still in its engine.

    memory_campaign.py SOCKET PID SECONDS CORPUS [WORKERS] [ROUND_SECONDS] [MARGIN_KB]

In each round, each worker connects again and again, says hello and sends one input of CORPUS
(the fuzz corpus: lines of every kind, valid and not, on the items of /tmp/coordfs-fuzz), and
half the time a hold, a watch or a service that it leaves open when it goes; then the server
is left idle 10 s. One JSON line a round on stdout, then the verdict. It fails (exit 1) when
anything stays held, waited for or presented, when descriptors differ from the first round's,
or when resident memory after the last round is more than MARGIN_KB (default 2048) above
its level after the first (which takes in the library code and allocator arenas a first
burst brings in).
"""
import json, os, random, socket, sys, threading, time

sock_path, pid, seconds, corpus = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
workers = int(sys.argv[5]) if len(sys.argv) > 5 else 8
round_seconds = float(sys.argv[6]) if len(sys.argv) > 6 else 60
margin_kb = int(sys.argv[7]) if len(sys.argv) > 7 else 2048
inputs = []
for name in sorted(os.listdir(corpus)):
    with open(os.path.join(corpus, name), "rb") as f:
        inputs.append(f.read())

TREE = "/tmp/coordfs-fuzz"
for d in [TREE, TREE + "/dir", TREE + "/dir/sub"]:
    os.makedirs(d, exist_ok=True)
for f in ["a", "b", "dir/c", "dir/sub/d"]:
    open(os.path.join(TREE, f), "a").close()

def status_kb(field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1

def rss_kb():
    return status_kb("VmRSS")

def anon_kb():
    """Resident memory of the process's own (heap, stacks): what a leak or the allocator's
    retention would grow. The rest is code and data of its libraries, mapped from files."""
    return status_kb("RssAnon")

HELLO = b'{"op":"hello","id":1,"version":1}\n'

def server_state():
    """Holders, waiters and presenters the server still has (none should stay)."""
    s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sock_path)
    f = s.makefile("rwb", buffering=0)
    f.write(HELLO); f.readline()
    f.write(b'{"op":"status","id":2}\n')
    state = json.loads(f.readline())
    s.close()
    return {k: len(state.get(k, [])) for k in ("holders", "waiters", "presenters")}

def descriptors():
    return len(os.listdir("/proc/%d/fd" % pid))

LEFT_OPEN = [
    b'{"op":"hold","id":2,"intents":[{"path":"/tmp/coordfs-fuzz/a","access":"write"}]}\n',
    b'{"op":"watch","id":3,"path":"/tmp/coordfs-fuzz/dir"}\n',
    b'{"op":"vend","id":4,"name":"campaign","path":"/tmp/coordfs-fuzz/b"}\n',
    b'{"op":"hold","id":5,"intents":[{"path":"/tmp/coordfs-fuzz/dir/c","access":"read"}],"timeout":0.2}\n',
]

def campaign_round(length):
    stop = time.monotonic() + length
    sessions = [0]
    peak = [0]
    lock = threading.Lock()

    def worker(seed):
        rng = random.Random(seed)
        while time.monotonic() < stop:
            try:
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(0.5)
                s.connect(sock_path)
                payload = HELLO + rng.choice(inputs) + (rng.choice(LEFT_OPEN) if rng.random() < 0.5 else b"")
                s.sendall(payload)
                try:
                    while s.recv(65536):
                        pass
                except (socket.timeout, OSError):
                    pass
                s.close()
                with lock:
                    sessions[0] += 1
            except OSError:
                time.sleep(0.01)

    def watch_peak():
        while time.monotonic() < stop:
            peak[0] = max(peak[0], rss_kb())
            time.sleep(0.5)

    start_rss, start_anon, start_fds = rss_kb(), anon_kb(), descriptors()
    threads = [threading.Thread(target=worker, args=(n + int(stop),)) for n in range(workers)]
    threads.append(threading.Thread(target=watch_peak))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(10)
    return {"sessions": sessions[0], "rss_start_kb": start_rss, "rss_peak_kb": peak[0], "rss_idle_kb": rss_kb(),
            "anon_start_kb": start_anon, "anon_idle_kb": anon_kb(), "fds_start": start_fds, "fds_idle": descriptors(),
            "threads_idle": status_kb("Threads"), "left": server_state()}

started = time.monotonic()
rounds = []
while not rounds or time.monotonic() - started + round_seconds <= seconds:
    rounds.append(campaign_round(round_seconds))
    print(json.dumps(rounds[-1]), flush=True)
first, last = rounds[0], rounds[-1]
failures = []
for n, r in enumerate(rounds):
    if any(r["left"].values()):
        failures.append("round %d left %s" % (n + 1, r["left"]))
    if r["fds_idle"] != first["fds_idle"]:
        failures.append("round %d: %d descriptors open idle, %d after the first" % (n + 1, r["fds_idle"], first["fds_idle"]))
grown = last["rss_idle_kb"] - first["rss_idle_kb"]
if grown > margin_kb:
    failures.append("resident memory grew %d KiB after the first round (margin %d KiB)" % (grown, margin_kb))
print(json.dumps({"rounds": len(rounds), "sessions": sum(r["sessions"] for r in rounds), "rss_before_kb": first["rss_start_kb"],
                  "rss_idle_first_kb": first["rss_idle_kb"], "rss_idle_last_kb": last["rss_idle_kb"], "grown_kb": grown,
                  "margin_kb": margin_kb, "failures": failures}))
sys.exit(1 if failures else 0)
