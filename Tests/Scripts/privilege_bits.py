#!/usr/bin/env python3
"""Writes, fallocates and truncates files with privilege bits in DIR (as whoever runs it) and
prints each file's mode right after, by stat(2): a write through the mount must show the
cleared setuid at once, as the backing filesystem does.

    privilege_bits.py DIR      (DIR holds suid, direct and trunc 04777, sgid 02777, made by root)
"""
import mmap, os, sys
d = sys.argv[1]
def mode(name): return oct(os.stat(os.path.join(d, name)).st_mode & 0o7777)
out = []
fd = os.open(os.path.join(d, "suid"), os.O_WRONLY)
os.write(fd, b"x")
out.append("write-open " + mode("suid"))
os.close(fd)
out.append("write-closed " + mode("suid"))
fd = os.open(os.path.join(d, "direct"), os.O_WRONLY | os.O_DIRECT)
block = mmap.mmap(-1, 4096)
block.write(b"y" * 4096)
os.write(fd, block)
out.append("direct " + mode("direct"))
os.close(fd)
fd = os.open(os.path.join(d, "sgid"), os.O_WRONLY)
os.posix_fallocate(fd, 0, 4096)
out.append("fallocate " + mode("sgid"))
os.close(fd)
fd = os.open(os.path.join(d, "trunc"), os.O_WRONLY | os.O_TRUNC)
out.append("o_trunc " + mode("trunc"))
os.close(fd)
print("\n".join(out))
