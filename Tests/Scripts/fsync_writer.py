#!/usr/bin/env python3
"""Writes numbered, checksummed 4 KiB blocks to a file and fsyncs after each batch, recording
in a ledger (outside the mount) how many blocks were fsynced. Killing the mount midway must not
lose any of them.

  fsync_writer.py write FILE LEDGER     (until it fails or is killed; prints "started" first)
  fsync_writer.py verify FILE LEDGER    (prints "verified N of N")
"""
import os
import struct
import sys
import zlib

BLOCK = 4096


def block(number):
    payload = struct.pack("<Q", number) * ((BLOCK - 4) // 8)
    payload += b"\0" * (BLOCK - 4 - len(payload))
    return payload + struct.pack("<I", zlib.crc32(payload))


mode, path, ledger = sys.argv[1:4]
if mode == "write":
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    print("started", flush=True)
    written = 0
    try:
        while True:
            for _ in range(16):
                os.write(fd, block(written))
                written += 1
            os.fsync(fd)
            with open(ledger + ".tmp", "w") as out:
                out.write(str(written))
                out.flush()
                os.fsync(out.fileno())
            os.rename(ledger + ".tmp", ledger)
    except OSError as error:
        print("stopped:", error.strerror, flush=True)
else:
    synced = int(open(ledger).read())
    data = open(path, "rb").read()
    good = 0
    for number in range(synced):
        chunk = data[number * BLOCK:(number + 1) * BLOCK]
        if len(chunk) == BLOCK and chunk == block(number):
            good += 1
    print("verified %d of %d" % (good, synced), flush=True)
