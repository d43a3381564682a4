#!/usr/bin/env python3
"""File handles of a file and its directories, opened again while the kernel has their inodes
and after it has dropped them (drop_caches), after they were dropped and named again by path
before the handles were used, after a rename of the directory, after the file was linked to a
second name and then (the kernel's inodes dropped between) its first name unlinked, as
fstests generic/426 does, and, given a
remount command, after the filesystem was remounted read-only and read-write again: prints one
line a step, the same on any filesystem that keeps handles good for as long as the items live.

    file_handles.py DIR [REMOUNT]
        DIR is made fresh (or is an empty directory); REMOUNT is a command with {} for the
        options (run as "ro", then "rw"), e.g. 'mount -o remount,{} /mnt'

Or one handle kept across a whole unmount and mount (the file system's life):

    file_handles.py save HANDLE PATH     writes PATH's handle to the file HANDLE
    file_handles.py open HANDLE DIR      opens it on DIR's file system: prints what it reads
                                         (its first line; a directory's names) or the error's
                                         name (e.g. ESTALE)
"""
import errno
import ctypes, os, shlex, stat, subprocess, sys

libc = ctypes.CDLL(None, use_errno=True)


class FileHandle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 128)]


def handle(path):
    found, mount_id = FileHandle(), ctypes.c_int()
    found.handle_bytes = 128
    if libc.name_to_handle_at(-100, path.encode(), ctypes.byref(found), ctypes.byref(mount_id), 0) != 0:
        raise OSError(ctypes.get_errno(), "name_to_handle_at " + path)
    return found


def reopen(mount_fd, found):
    fd = libc.open_by_handle_at(mount_fd, ctypes.byref(found), os.O_RDONLY)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return fd


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as caches:
        caches.write("3\n")


def save(handle_file, path):
    found = handle(path)
    with open(handle_file, "w") as kept:
        kept.write(f"{found.handle_type} {bytes(found.f_handle[:found.handle_bytes]).hex()}\n")


def open_saved(handle_file, directory):
    with open(handle_file) as kept:
        kind, data = kept.read().split()
    found = FileHandle()
    found.handle_type, found.handle_bytes = int(kind), len(bytes.fromhex(data))
    ctypes.memmove(found.f_handle, bytes.fromhex(data), found.handle_bytes)
    mount_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = reopen(mount_fd, found)
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            print("directory of " + " ".join(sorted(os.listdir(fd))))
        else:
            print(os.read(fd, 100).decode().split("\n")[0])
        os.close(fd)
    except OSError as error:
        print(errno.errorcode.get(error.errno, str(error.errno)))


if sys.argv[1:2] == ["save"]:
    save(sys.argv[2], sys.argv[3])
    sys.exit(0)
if sys.argv[1:2] == ["open"]:
    open_saved(sys.argv[2], sys.argv[3])
    sys.exit(0)


def remount(options):
    subprocess.run(shlex.split(sys.argv[2].replace("{}", options)), check=True)


root = sys.argv[1]
os.makedirs(root + "/a/b")
with open(root + "/a/b/file", "w") as made:
    made.write("content\n")
handles = {name: handle(root + "/" + name) for name in ["a/b/file", "a/b", "a"]}
mount_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
steps = ["cached", "dropped", "dropped and named", "renamed and dropped", "linked and dropped",
         "first name unlinked and dropped"]
if len(sys.argv) > 2:
    steps += ["remounted read-only", "remounted read-write"]
for when in steps:
    if when == "dropped":
        drop_caches()
    if when == "dropped and named":
        # Another program (or the mount itself) finds the items by name before the handles'
        # owner opens them.
        drop_caches()
        os.stat(root + "/a/b/file")
    if when == "renamed and dropped":
        os.rename(root + "/a", root + "/moved")
        drop_caches()
    if when == "linked and dropped":
        os.link(root + "/moved/b/file", root + "/moved/b/link")
        drop_caches()
    if when == "first name unlinked and dropped":
        # The file lives on under its link: its handle still opens it.
        os.unlink(root + "/moved/b/file")
        drop_caches()
    if when.startswith("remounted"):
        remount("ro" if when.endswith("read-only") else "rw")
        drop_caches()
    for name, found in handles.items():
        try:
            fd = reopen(mount_fd, found)
            seen = os.read(fd, 100).decode().strip() if name.endswith("file") else sorted(os.listdir(fd))
            os.close(fd)
            print(when, name, "ok", seen)
        except OSError as error:
            print(when, name, "error", os.strerror(error.errno))
