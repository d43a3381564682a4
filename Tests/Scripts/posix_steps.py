#!/usr/bin/env python3
"""POSIX steps for comparing a coordfs mount with the filesystem under it.

  posix_steps.py ROOT            run the steps as root in ROOT (created fresh)
  posix_steps.py ROOT --as UID   prepare ROOT as root, then run the unprivileged steps as UID
                                 (group UID, supplementary group OTHER_GROUP)

Prints one JSON object per step: the step's name, "ok" or the errno's name, and for steps that
look at an item its mode, owner, group, size and link count. Paths are relative to ROOT, so both
runs meet NAME_MAX and PATH_MAX at the same places.
"""
import ctypes
import errno
import json
import mmap
import os
import stat
import struct
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
AT_FDCWD = -100
FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE = 0x01, 0x02, 0x10
# The unprivileged steps' supplementary group: a file of that group is theirs to keep setgid on.
OTHER_GROUP = 4242


def renameat2(old, new, flags):
    if libc.syscall(316, AT_FDCWD, old.encode(), AT_FDCWD, new.encode(), flags) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def describe(path):
    info = os.lstat(path)
    kind = stat.S_IFMT(info.st_mode)
    fields = {"mode": oct(info.st_mode), "uid": info.st_uid, "gid": info.st_gid, "nlink": info.st_nlink}
    if kind == stat.S_IFREG or kind == stat.S_IFLNK:
        fields["size"] = info.st_size
    return fields


def step(name, action, look=None):
    record = {"step": name}
    try:
        value = action()
        record["result"] = "ok"
        if value is not None:
            record["value"] = value
        if look:
            record.update(describe(look))
    except OSError as error:
        record["result"] = errno.errorcode.get(error.errno, str(error.errno))
    print(json.dumps(record, sort_keys=True))


def create(path, mode=0o644, data=b""):
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode)
    os.write(fd, data)
    os.close(fd)


# POSIX ACLs as the kernel stores them in system.posix_acl_* (no acl package needed).
ACL_TAGS = {1: "user_obj", 2: "user", 4: "group_obj", 8: "group", 0x10: "mask", 0x20: "other"}


def acl(*entries):
    """entries: (tag, permissions, id) with tags as in ACL_TAGS' names."""
    codes = {name: code for code, name in ACL_TAGS.items()}
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", codes[tag], perm, ident) for tag, perm, ident in entries)


def acl_text(path, kind="access"):
    try:
        raw = os.getxattr(path, "system.posix_acl_" + kind)
    except OSError as error:
        if error.errno == errno.ENODATA:
            return "none"
        raise
    entries = [struct.unpack_from("<HHI", raw, offset) for offset in range(4, len(raw), 8)]
    return ",".join("%s:%s:%o" % (ACL_TAGS.get(tag, tag), ident if tag in (2, 8) else "", perm) for tag, perm, ident in entries)


def acl_steps():
    """Default ACL inheritance (the umask gives way to it), the mask after chmod."""
    os.mkdir("acl", 0o755)
    step("set default acl", lambda: os.setxattr("acl", "system.posix_acl_default",
                                                 acl(("user_obj", 7, 0), ("user", 7, 65534), ("group_obj", 5, 0),
                                                     ("mask", 7, 0), ("other", 5, 0))))
    step("default acl", lambda: acl_text("acl", "default"))
    step("create under default acl", lambda: create("acl/f", 0o666), "acl/f")
    step("inherited access acl", lambda: acl_text("acl/f"))
    step("mkdir under default acl", lambda: os.mkdir("acl/d", 0o777), "acl/d")
    step("inherited acls of a directory", lambda: (acl_text("acl/d"), acl_text("acl/d", "default")))
    step("chmod sets the mask", lambda: os.chmod("acl/f", 0o640), "acl/f")
    step("acl after chmod", lambda: acl_text("acl/f"))
    step("create without default acl", lambda: create("plain-acl", 0o666), "plain-acl")
    step("no acl without a default", lambda: acl_text("plain-acl"))


def mapped_write():
    """A write through a shared mapping, then msync: mtime moves on, as for write(2)."""
    create("mapped", 0o644, b"\0" * 4096)
    os.utime("mapped", (1, 1))
    fd = os.open("mapped", os.O_RDWR)
    try:
        mapping = mmap.mmap(fd, 4096)
        mapping[0:5] = b"hello"
        mapping.flush()
        advanced = os.stat("mapped").st_mtime > 1
        mapping.close()
    finally:
        os.close(fd)
    return [advanced, open("mapped", "rb").read(5).decode()]


def privileged(name, mode):
    create(name, 0o755, b"data")
    os.chmod(name, mode)


def append(path):
    with open(path, "ab") as out:
        out.write(b"x")


def pwrite(path):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"x", 1)
    finally:
        os.close(fd)


def fallocate(path, mode, offset, length):
    fd = os.open(path, os.O_WRONLY)
    try:
        if libc.fallocate(fd, mode, offset, length) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    finally:
        os.close(fd)


# What the unprivileged steps do to root's files with privilege bits (`bits_steps`).
BIT_CHANGES = {
    "write": pwrite,
    "fallocate": lambda p: fallocate(p, 0, 0, 16384),
    "fpunch": lambda p: fallocate(p, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096),
    "fzero": lambda p: fallocate(p, FALLOC_FL_ZERO_RANGE, 0, 4096),
    "truncate": lambda p: os.truncate(p, 4096),
    "o_trunc": lambda p: os.close(os.open(p, os.O_WRONLY | os.O_TRUNC)),
}


def bit_files(uid):
    """Root's files in bits/ (name, mode, group): each change above of setgid files without
    group execute (fstests generic/683-685's first and third), and with it, in root's group,
    which the writer is not in; a write and an fallocate in the writer's own group and in its
    supplementary group, whose setgid a writer keeps."""
    files = []
    for change in BIT_CHANGES:
        for mode in (0o2666, 0o6666, 0o6766, 0o2676):
            files.append(("bits/%s-%o-root" % (change, mode), mode, 0))
    for change in ("write", "fallocate"):
        files.append(("bits/%s-2666-own" % change, 0o2666, uid))
        files.append(("bits/%s-2666-supplementary" % change, 0o2666, OTHER_GROUP))
    return files


def bits_steps(uid):
    """Writes, fallocates (punch, zero), truncations and O_TRUNC opens of root's setgid files by
    another user: setgid goes where group execute is set or the writer is not in the file's group
    (Linux's setattr_should_drop_suidgid), setuid always."""
    for path, mode, group in bit_files(uid):
        change = os.path.basename(path).split("-")[0]
        step("%s of %o, group %s" % (change, mode, path.rsplit("-", 1)[1]), lambda: BIT_CHANGES[change](path), path)


def privilege_steps(folder):
    """Writing, truncating or opening with O_TRUNC clears setuid, and setgid with group
    execute, unless the writer has CAP_FSETID (root)."""
    for name, mode, action in [("w", 0o6755, pwrite), ("a", 0o4755, append), ("t", 0o6755, lambda p: os.truncate(p, 1)),
                               ("o", 0o6755, lambda p: os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))),
                               ("g", 0o2745, pwrite), ("l", 0o2645, pwrite)]:
        path = folder + "/priv-" + name
        step("make %s %o" % (name, mode), lambda: privileged(path, mode), path)
        step("change %s" % name, lambda: action(path), path)


def root_steps():
    step("create 0640", lambda: create("f", 0o640, b"0123456789"), "f")
    step("create excl existing", lambda: create("f"))
    step("truncate down", lambda: os.truncate("f", 4), "f")
    step("truncate up sparse", lambda: os.truncate("f", 1 << 20), "f")
    step("read", lambda: open("f", "rb").read(4).decode())
    step("chmod 0600", lambda: os.chmod("f", 0o600), "f")
    step("chown 1000:1000", lambda: os.chown("f", 1000, 1000), "f")
    step("chown back", lambda: os.chown("f", 0, 0), "f")
    step("utime", lambda: os.utime("f", (1000000000, 1000000000)))
    step("mtime", lambda: int(os.stat("f").st_mtime))
    step("mkdir 0750", lambda: os.mkdir("d", 0o750), "d")
    step("create in dir", lambda: create("d/inner"), "d/inner")
    step("rmdir non-empty", lambda: os.rmdir("d"))
    step("rmdir file", lambda: os.rmdir("f"))
    step("unlink dir", lambda: os.unlink("d"))
    step("open dir for writing", lambda: os.open("d", os.O_RDWR))
    step("open missing", lambda: os.open("missing", os.O_RDONLY))
    step("rename", lambda: os.rename("f", "g"), "g")
    step("create h", lambda: create("h", 0o644, b"hh"))
    step("rename over file", lambda: os.rename("h", "g"), "g")
    step("mkdir e", lambda: os.mkdir("e"))
    step("rename dir", lambda: os.rename("e", "e2"), "e2")
    step("rename dir over non-empty dir", lambda: os.rename("e2", "d"))
    step("rename file over dir", lambda: os.rename("g", "d"))
    step("create x y", lambda: (create("x", 0o644, b"x"), create("y", 0o644, b"yyy")))
    step("rename noreplace", lambda: renameat2("x", "y", RENAME_NOREPLACE))
    step("rename exchange", lambda: renameat2("x", "y", RENAME_EXCHANGE), "x")
    step("after exchange y", lambda: None, "y")
    step("link", lambda: os.link("x", "x-link"), "x")
    step("link existing", lambda: os.link("x", "y"))
    step("symlink", lambda: os.symlink("x", "x-sym"), "x-sym")
    step("readlink", lambda: os.readlink("x-sym"))
    step("symlink dangling", lambda: os.symlink("nowhere", "dangling"), "dangling")
    step("stat dangling", lambda: os.stat("dangling"))
    step("mkfifo", lambda: os.mkfifo("fifo", 0o600), "fifo")
    step("setxattr", lambda: os.setxattr("x", "user.coordfs-test", b"value"))
    step("getxattr", lambda: os.getxattr("x", "user.coordfs-test").decode())
    step("listxattr", lambda: sorted(n for n in os.listxattr("x") if n.startswith("user.")))
    step("getxattr missing", lambda: os.getxattr("x", "user.missing"))
    step("removexattr", lambda: os.removexattr("x", "user.coordfs-test"))
    step("removexattr missing", lambda: os.removexattr("x", "user.coordfs-test"))
    step("name of NAME_MAX", lambda: create("n" * 255), "n" * 255)
    step("name over NAME_MAX", lambda: create("n" * 256))
    step("setgid dir", lambda: (os.mkdir("sg"), os.chown("sg", 0, 1000), os.chmod("sg", 0o2775)), "sg")
    step("file in setgid dir", lambda: create("sg/file"), "sg/file")
    step("dir in setgid dir", lambda: os.mkdir("sg/sub"), "sg/sub")
    step("sticky dir", lambda: (os.mkdir("st"), os.chmod("st", 0o1777)), "st")
    # PATH_MAX: nest 250-byte names; a path under 4096 bytes works, one over does not.
    part = "p" * 250
    path = part
    step("deep mkdir 1", lambda: os.mkdir(part))
    for level in range(2, 17):
        path = path + "/" + part
        step("deep mkdir %d (%d bytes)" % (level, len(path)), lambda p=path: os.mkdir(p))
    step("deep file over PATH_MAX", lambda: create(path + "/" + "f" * 100))
    step("unlink", lambda: os.unlink("x-link"), "x")
    step("rmdir", lambda: (os.unlink("d/inner"), os.rmdir("d")))
    privilege_steps(".")
    acl_steps()
    step("mmap write and msync", mapped_write)
    step("listing", lambda: sorted(os.listdir("."))[:12])


def prepare_for_other(uid):
    create("rootfile", 0o644, b"root's")
    os.mkdir("rootdir", 0o755)
    create("rootdir/f", 0o644, b"f")
    os.mkdir("pub", 0o777)
    os.chmod("pub", 0o777)
    os.mkdir("st", 0o777)
    os.chmod("st", 0o1777)
    create("st/other", 0o666, b"o")
    os.chown("st/other", 1000, 1000)
    os.mkdir("sg", 0o777)
    os.chown("sg", 0, 1000)
    os.chmod("sg", 0o2777)
    # Root's file that the mode keeps from others and an ACL entry opens to them.
    create("aclfile", 0o600, b"by acl")
    os.setxattr("aclfile", "system.posix_acl_access",
                acl(("user_obj", 6, 0), ("user", 4, 65534), ("group_obj", 0, 0), ("mask", 4, 0), ("other", 0, 0)))
    os.mkdir("bits", 0o777)
    os.chmod("bits", 0o777)
    for path, mode, group in bit_files(uid):
        create(path, 0o644, b"\0" * 8192)
        os.chown(path, 0, group)
        os.chmod(path, mode)


def other_steps(uid):
    step("read rootfile", lambda: open("rootfile", "rb").read().decode())
    step("write rootfile", lambda: os.open("rootfile", os.O_WRONLY))
    step("truncate rootfile", lambda: os.truncate("rootfile", 0))
    step("chmod rootfile", lambda: os.chmod("rootfile", 0o777))
    step("chown rootfile", lambda: os.chown("rootfile", uid, uid))
    step("utime now rootfile", lambda: os.utime("rootfile"))
    step("utime set rootfile", lambda: os.utime("rootfile", (1, 1)))
    step("setxattr rootfile", lambda: os.setxattr("rootfile", "user.x", b"1"))
    step("unlink in rootdir", lambda: os.unlink("rootdir/f"))
    step("rename in rootdir", lambda: os.rename("rootdir/f", "rootdir/g"))
    step("create in rootdir", lambda: create("rootdir/mine"))
    step("create in pub", lambda: create("pub/mine", 0o640, b"mine"), "pub/mine")
    step("mkdir in pub", lambda: os.mkdir("pub/dir", 0o700), "pub/dir")
    step("chmod own file", lambda: os.chmod("pub/mine", 0o600), "pub/mine")
    step("chown own file to root", lambda: os.chown("pub/mine", 0, 0))
    step("unlink other's file in sticky dir", lambda: os.unlink("st/other"))
    step("rename other's file in sticky dir", lambda: os.rename("st/other", "st/taken"))
    step("create in sticky dir", lambda: create("st/mine"), "st/mine")
    step("unlink own file in sticky dir", lambda: os.unlink("st/mine"))
    step("create in setgid dir", lambda: create("sg/mine"), "sg/mine")
    step("mkdir in setgid dir", lambda: os.mkdir("sg/dir"), "sg/dir")
    step("hard link to rootfile", lambda: os.link("rootfile", "pub/link"))
    step("read a file an acl opens", lambda: open("aclfile", "rb").read().decode())
    step("write a file an acl opens for reading only", lambda: os.open("aclfile", os.O_WRONLY))
    privilege_steps("pub")
    bits_steps(uid)


def main():
    root = sys.argv[1]
    os.umask(0o022)
    os.mkdir(root, 0o755)
    os.chmod(root, 0o755)
    os.chdir(root)
    if len(sys.argv) > 3 and sys.argv[2] == "--as":
        uid = int(sys.argv[3])
        prepare_for_other(uid)
        os.setgroups([OTHER_GROUP])
        os.setgid(uid)
        os.setuid(uid)
        other_steps(uid)
    else:
        root_steps()


main()
