#!/usr/bin/env python3
"""Unmodified programs doing read-think-write cycles on shared JSON files, and what became of
every change they made.

    lost_updates.py DIRECTORY [--writers N] [--rounds N] [--files N] [--think MS]
                    [--coordfs BINARY] [--refuse] [--json]

Each writer is a process of its own session (as separate agents, editors or scripts are): a
round reads a file, thinks a moment, adds the writer's own token to the list the file holds
and writes it back, in one of three forms, by turns: rewritten in place (open with O_TRUNC, as
`>` and most scripts do), saved atomically (a temporary file renamed over it, as editors do),
and split (read by one process, `cat`, written by another of the same session, as an agent's
tool calls are). A write the mount refuses as stale (ESTALE, under `--versions refuse`) is
taken as a lost race: the writer reads again and retries. Each writer logs the tokens it
applied.

At the end every applied token is looked for in the final files and, on a coordfs mount given
`--coordfs`, in the conflict versions the mount kept (`coordfs versions`); a watcher of the
directory counts the CONFLICT events each version got. On a plain directory a file left torn
by two writers at once is started over by whoever finds it so (`torn_files_started_over`).
Prints one line per figure (or JSON with --json); exits 0. The judge is the caller: on ext4
tokens go missing; on coordfs, none may be missing from the files and the conflicts together,
each conflict must be told exactly once, and with --refuse no token may be missing from the
files alone.
"""
import argparse
import errno
import json
import os
import random
import subprocess
import sys
import time


# How often a read that finds the file half written is tried again, 2 ms apart. Through a mount
# a reader never finds it so unless one was let past a writer: the tries run out, and the run
# fails. On a plain directory (main says so with --torn-is-loss), two writers rewriting the file
# in place at once can leave it torn for good (one's truncation between the other's truncation
# and write): a program finding it so starts it over, losing what it held, as an editor would.
READ_TRIES = 200
TORN_IS_LOSS = False
IN_WRITER = False


def torn(path):
    if not TORN_IS_LOSS:
        raise RuntimeError(f"{path} stayed unreadable")
    if IN_WRITER:
        print("torn " + path, flush=True)
    return []


def read_tokens(path):
    """The file's list, read again while a writer without coordination has it half written."""
    for _ in range(READ_TRIES):
        try:
            with open(path) as f:
                return json.load(f)["applied"]
        except (ValueError, KeyError):
            time.sleep(0.002)
    return torn(path)


def read_by_cat(path):
    for _ in range(READ_TRIES):
        text = subprocess.run(["cat", path], capture_output=True, text=True).stdout
        try:
            return json.loads(text)["applied"]
        except (ValueError, KeyError):
            time.sleep(0.002)
    return torn(path)


def write_in_place(path, tokens):
    with open(path, "w") as f:
        json.dump({"applied": tokens}, f)


def write_atomically(path, tokens):
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as f:
        json.dump({"applied": tokens}, f)
    try:
        os.rename(temporary, path)
    except OSError:
        os.unlink(temporary)
        raise


def write_by_another_process(path, tokens):
    text = json.dumps({"applied": tokens})
    done = subprocess.run([sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path, text],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(errno.ESTALE if "Stale" in done.stderr else errno.EIO, done.stderr.strip())


def writer(directory, number, rounds, files, think, run, forms):
    rng = random.Random(number)
    for round_ in range(rounds):
        name = os.path.join(directory, f"doc{(number + round_) % files}.json")
        token = f"{run}w{number}r{round_}"
        form = forms[round_ % len(forms)]
        while True:
            tokens = read_by_cat(name) if form == 2 else read_tokens(name)
            time.sleep(rng.uniform(0, think) / 1000)
            try:
                [write_in_place, write_atomically, write_by_another_process][form](name, tokens + [token])
                break
            except OSError as error:
                if error.errno != errno.ESTALE:
                    raise
                print(f"refused {token}", flush=True)
        print(f"applied {token}", flush=True)


def conflict_tokens(binary, path, since):
    """Tokens in the conflict versions the mount kept of `path` from `since` (seconds since
    1970) on, and those versions' ids."""
    listed = subprocess.run([binary, "versions", path, "--json"], capture_output=True, text=True, check=True)
    ids = [v["id"] for v in json.loads(listed.stdout)["versions"] if v["conflict"] and int(v["id"]) >= since * 1e6]
    tokens = set()
    for version in ids:
        shown = subprocess.run([binary, "versions", path, "--show", version], capture_output=True, text=True, check=True)
        tokens.update(json.loads(shown.stdout)["applied"])
    return tokens, ids


def main():
    global TORN_IS_LOSS, IN_WRITER
    parser = argparse.ArgumentParser()
    parser.add_argument("directory")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--think", type=float, default=20.0, help="milliseconds, at most, between read and write")
    parser.add_argument("--coordfs", help="the coordfs binary: DIRECTORY is in a mount, whose conflicts count")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--role", help=argparse.SUPPRESS)
    parser.add_argument("--run", default="", help=argparse.SUPPRESS)
    parser.add_argument("--torn-is-loss", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--forms", default="012", help="which writes, by turns: 0 in place, 1 atomically, 2 split (default all)")
    arguments = parser.parse_args()
    TORN_IS_LOSS = arguments.torn_is_loss or not arguments.coordfs
    IN_WRITER = arguments.role is not None
    if arguments.role is not None:
        writer(arguments.directory, int(arguments.role), arguments.rounds, arguments.files, arguments.think, arguments.run,
               [int(form) for form in arguments.forms])
        return
    for index in range(arguments.files):
        write_in_place(os.path.join(arguments.directory, f"doc{index}.json"), [])
    watcher = None
    if arguments.coordfs:
        watcher = subprocess.Popen([arguments.coordfs, "watch", arguments.directory, "--json", "-e", "CONFLICT"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        time.sleep(0.5)
    started, since = time.monotonic(), time.time()
    command = [sys.executable, os.path.abspath(__file__), arguments.directory, "--rounds", str(arguments.rounds),
               "--files", str(arguments.files), "--think", str(arguments.think), "--run", "%x-" % int(since * 1000), "--forms", arguments.forms]
    command += ([] if arguments.coordfs else ["--torn-is-loss"]) + ["--role"]
    writers = [subprocess.Popen(command + [str(n)], stdout=subprocess.PIPE, text=True, start_new_session=True)
               for n in range(arguments.writers)]
    applied, refused, started_over = set(), 0, 0
    for process in writers:
        output, _ = process.communicate()
        if process.returncode != 0:
            sys.exit(f"a writer failed ({process.returncode})")
        for line in output.splitlines():
            if line.startswith("applied "):
                applied.add(line.split()[1])
            elif line.startswith("refused "):
                refused += 1
            elif line.startswith("torn "):
                started_over += 1
    seconds = time.monotonic() - started
    final = set()
    for index in range(arguments.files):
        final.update(read_tokens(os.path.join(arguments.directory, f"doc{index}.json")))
    in_conflicts, versions = set(), []
    told = {}
    if arguments.coordfs:
        for index in range(arguments.files):
            tokens, ids = conflict_tokens(arguments.coordfs, os.path.join(arguments.directory, f"doc{index}.json"), since)
            in_conflicts |= tokens
            versions += ids
        time.sleep(0.5)
        watcher.terminate()
        for line in watcher.communicate()[0].splitlines():
            event = json.loads(line)
            if "CONFLICT" in event.get("events", []):
                told[str(event["cookie"])] = told.get(str(event["cookie"]), 0) + 1
    figures = {
        "applied": len(applied),
        "refused_then_retried": refused,
        "torn_files_started_over": started_over,
        "missing_from_files": len(applied - final),
        "missing_from_files_and_conflicts": len(applied - final - in_conflicts),
        "conflict_versions": len(versions),
        "conflicts_told_once": sum(1 for v in versions if told.get(v) == 1),
        "conflicts_told_otherwise": sum(1 for v in versions if told.get(v, 0) != 1),
        "events_for_no_version": sum(1 for cookie in told if cookie not in versions),
        "seconds": round(seconds, 1),
        "lost": sorted(applied - final - in_conflicts),
    }
    if arguments.json:
        print(json.dumps(figures))
    else:
        for name, value in figures.items():
            print(f"{name}: {value}")


if __name__ == "__main__":
    main()
