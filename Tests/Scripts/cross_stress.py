#!/usr/bin/env python3
"""Runs the cross-process set-ups of CoordinatedCounter ROUNDS times each and counts what went
wrong: a count other than expected, a message heard other than once, an error (EDEADLK, EBUSY,
…), a hang (no end within the time limit). Exit status 0 only when nothing did.

    cross_stress.py COORDFS COUNTER [ROUNDS] [UPDATES]
"""
import json, os, shutil, signal, socket, subprocess, sys, tempfile, time

coordfs, counter = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 20
updates = int(sys.argv[4]) if len(sys.argv) > 4 else 25
limit = 120
environment = {k: v for k, v in os.environ.items() if k not in ("COORDFS_COORDINATION", "COORDFS_SOCKET")}
expected_log = "RSCA" * updates + "RMMA"
tally = {"runs": 0, "failures": 0, "EDEADLK": 0, "EBUSY": 0, "hangs": 0}


def pair(file, env):
    procs = [subprocess.Popen([counter, file, str(updates), a, b], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for a, b in (("a", "b"), ("b", "a"))]
    problems = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            p.kill(); p.communicate()
            tally["hangs"] += 1
            problems.append("hang")
            continue
        text = out + err
        for name in ("EDEADLK", "EBUSY"):
            if name in text or ("deadlock" in text and name == "EDEADLK") or ("timed out" in text and name == "EBUSY"):
                tally[name] += 1
        try:
            report = json.loads(out)
        except ValueError:
            problems.append(f"no report: {text.strip()[:200]}")
            continue
        if report["errors"]:
            problems.append(f"{report['name']}: {report['errors']}")
        if report["log"] != expected_log:
            problems.append(f"{report['name']} heard {report['log']}")
    try:
        count = json.load(open(file))["count"]
    except (OSError, ValueError) as error:
        count = f"unreadable ({error})"
    if count != 2 * updates:
        problems.append(f"count {count}, not {2 * updates}")
    return problems


def stop_daemon(path):
    try:
        s = socket.socket(socket.AF_UNIX); s.connect(path)
        s.sendall(b'{"op":"hello","id":1,"version":1}\n')
        pid = json.loads(s.makefile().readline())["pid"]
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError, KeyError):
        pass


def outside():
    directory = tempfile.mkdtemp(prefix="coordfs-stress-")
    os.chmod(directory, 0o700)
    try:
        env = dict(environment, COORDFS_SOCKET=directory + "/daemon.sock")
        try:
            return pair(directory + "/count.json", env)
        finally:
            stop_daemon(directory + "/daemon.sock")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def inside():
    base = tempfile.mkdtemp(prefix="coordfs-stress-")
    backing, mountpoint = base + "/backing", base + "/mnt"
    os.mkdir(backing); os.mkdir(mountpoint)
    subprocess.run([coordfs, "mount", backing, mountpoint], check=True)
    try:
        return pair(mountpoint + "/count.json", environment)
    finally:
        subprocess.run([coordfs, "unmount", mountpoint])
        shutil.rmtree(base, ignore_errors=True)


BESIDE_LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "beside_loop.sh")


def beside_shell():
    """One copy beside an unmodified shell loop of cat, cp, mv and rm in its directory."""
    base = tempfile.mkdtemp(prefix="coordfs-stress-")
    backing, mountpoint = base + "/backing", base + "/mnt"
    os.mkdir(backing); os.mkdir(mountpoint)
    subprocess.run([coordfs, "mount", backing, mountpoint], check=True)
    problems = []
    try:
        with open(mountpoint + "/count.json", "w") as seed:
            seed.write('{"count":0,"by":"seed"}')
        loop = subprocess.Popen(["/bin/sh", BESIDE_LOOP, mountpoint], stdout=subprocess.DEVNULL)
        try:
            result = subprocess.run([counter, mountpoint + "/count.json", str(updates), "a", "-"], capture_output=True,
                                    text=True, env=environment, timeout=limit)
        except subprocess.TimeoutExpired:
            tally["hangs"] += 1
            problems.append("hang")
            result = None
        try:
            loop.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            loop.kill(); tally["hangs"] += 1; problems.append("the shell loop hung")
        if result is not None and result.returncode != 0:
            problems.append(f"exit {result.returncode}: {result.stdout} {result.stderr}")
        if json.load(open(mountpoint + "/count.json"))["count"] != updates:
            problems.append("count is not the updates")
        errors = open(mountpoint + "/errors").read() if os.path.exists(mountpoint + "/errors") else ""
        for name in ("EDEADLK", "EBUSY"):
            if name in errors or ("deadlock" in errors.lower() and name == "EDEADLK") or ("busy" in errors.lower() and name == "EBUSY"):
                tally[name] += 1
        if errors:
            problems.append(f"the loop's programs failed: {errors.strip()[:200]}")
        for name in os.listdir(mountpoint):
            if name.startswith(("read.", "copy.")):
                try:
                    json.load(open(os.path.join(mountpoint, name)))
                except ValueError:
                    problems.append(f"{name} is not whole")
    finally:
        subprocess.run([coordfs, "unmount", mountpoint])
        shutil.rmtree(base, ignore_errors=True)
    return problems


for setup in (outside, inside, beside_shell):
    for round in range(rounds):
        tally["runs"] += 1
        problems = setup()
        if problems:
            tally["failures"] += 1
            print(f"{setup.__name__} round {round + 1}: {'; '.join(problems)}", flush=True)
print(json.dumps(tally))
print(f"{tally['runs'] - tally['failures']} passed, {tally['failures']} failed")
sys.exit(0 if tally["failures"] == 0 else 1)
