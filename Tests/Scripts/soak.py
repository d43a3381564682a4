#!/usr/bin/env python3
"""`make soak`: fio rounds against a fresh mount for SECONDS while neighbours churn and a
presenter answers every request; then a summary. Exits 1 if anything failed.

  soak.py COORDFS_BINARY SECONDS [MOUNT_OPTION ...]

The mount options go to `coordfs mount` (`--no-kernel-passthrough` soaks the daemon's own data
path, which kernel passthrough otherwise bypasses).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

binary, seconds, mount_options = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
here = os.path.dirname(os.path.abspath(__file__))
fio_job = os.path.join(here, "..", "fio", "contention.fio")
base = tempfile.mkdtemp(prefix="coordfs-soak-", dir="/tmp")
backing, mount = os.path.join(base, "backing"), os.path.join(base, "mnt")
os.makedirs(backing)
os.makedirs(mount)
subprocess.run([binary, "mount", backing, mount, *mount_options], check=True)
work = os.path.join(mount, "work")
os.makedirs(work)
presenter = subprocess.Popen([sys.executable, os.path.join(here, "presenter.py"), work],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
churn = subprocess.Popen([sys.executable, os.path.join(here, "churn.py"), os.path.join(work, "churn"), str(seconds)],
                         stdout=subprocess.PIPE, text=True)
ios = verified = errors = rounds = 0
failures = []
start = time.time()
try:
    while time.time() - start < seconds:
        rounds += 1
        environment = dict(os.environ, FIO_DIR=work, FIO_SIZE="32m")
        result = subprocess.run(["fio", fio_job, "--output-format=json"], env=environment,
                                capture_output=True, text=True)
        try:
            report = json.loads(result.stdout[result.stdout.index("{"):])
        except ValueError:
            failures.append("round %d: fio gave no report: %s" % (rounds, result.stderr.strip()[:200]))
            errors += 1
            continue
        for job in report["jobs"]:
            ios += job["write"]["total_ios"] + job["read"]["total_ios"]
            verified += job["read"]["io_bytes"]
            if job["error"]:
                errors += 1
                failures.append("round %d: %s: error %d" % (rounds, job["jobname"], job["error"]))
        if result.returncode != 0:
            errors += 1
            failures.append("round %d: fio exited %d" % (rounds, result.returncode))
finally:
    churn_line = churn.communicate(timeout=seconds + 60)[0].strip()
    stats = json.loads(os.getxattr(mount, "user.coordfs.stats").decode())
    presenter.kill()
    subprocess.run([binary, "unmount", mount])
    shutil.rmtree(base, ignore_errors=True)

churn_ops, churn_errors = (int(word) for word in churn_line.split()[1::2]) if churn_line else (0, 1)
errors += churn_errors
elapsed = time.time() - start
print("coordfs soak: %.0f s, %d fio rounds (every engine of Tests/fio/contention.fio)" % (elapsed, rounds))
print("  operations:     %d fio I/Os, %d churn operations, %d coordinated opens/renames/unlinks"
      % (ios, churn_ops, stats["coordinated"]))
print("  bytes verified: %.2f GiB (crc32c, read back)" % (verified / 2**30))
print("  waits: %d   timeouts: %d   deadlocks: %d   interrupted: %d   presenter timeouts: %d"
      % (stats["waited"], stats["timed_out"], stats["deadlocks"], stats["interrupted"], stats["presenter_timeouts"]))
print("  errors: %d" % errors)
for failure in failures[:20]:
    print("    " + failure)
sys.exit(1 if errors else 0)
