"""What the benchmarks measure on: a fresh journaled ext4 image, the caches they drop, and FUSE
programs other than coordfs mounted from a command line (fsbench.py, programbench.py)."""
import os
import subprocess
import sys
import tempfile
import time


def sh(*args, **kwargs):
    """Runs a command, raising if it fails; its output captured as text."""
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


def make_image(directory, size_gib=8):
    """Makes a fresh journaled ext4 image of `size_gib` GiB in `directory` and loop-mounts it with
    direct I/O (no second page cache below it); answers its mount point, `directory`/ext4.

    This machine's root filesystem has no journal, and its metadata timings are bimodal. Every
    block of the image is written once, and on disk, before the filesystem is made: here the
    first write to a region of a fresh image (sparse, only fallocated, or written with zeros,
    which the VM's disk keeps as unwritten) ran at a quarter of the speed of later writes to it.
    A write job's result then turned on its place in the round (the sixth 256 MiB file in a row
    was slow whoever wrote it), not on the filesystem under test. No discard at mkfs, which would
    punch the holes back."""
    image = os.path.join(directory, "ext4.img")
    point = os.path.join(directory, "ext4")
    os.makedirs(point)
    with open(image, "wb") as out:
        pattern = b"\xa5" * (16 << 20)
        for _ in range((size_gib << 30) // len(pattern)):
            out.write(pattern)
        out.flush()
        os.fsync(out.fileno())
    sh("mkfs.ext4", "-q", "-F", "-E", "nodiscard", image)
    device = sh("losetup", "--find", "--show", "--direct-io=on", image).stdout.strip()
    try:
        sh("mount", device, point)
    finally:
        sh("losetup", "--detach", device)   # the mount keeps it; detached once unmounted
    return point


def unmount_image(point):
    """Unmounts a benchmark's ext4 image. A FUSE daemon goes on closing its descriptors of the
    image for a moment after its unmount returns, and the image is busy until then: a single
    try left the image mounted (and its loop device attached) after a run."""
    for _ in range(50):
        if subprocess.run(["umount", point], capture_output=True).returncode == 0:
            return
        time.sleep(0.2)
    # Still busy after 10 s: detached once the last holder lets go.
    subprocess.run(["umount", "--lazy", point])
    print("note: the benchmark image was still busy; unmounted lazily", file=sys.stderr)


def drop_caches(what=3):
    """Writes back what is dirty, then has the kernel drop its clean caches: 3 the page cache,
    dentries and inodes; 2 dentries and inodes only (every name is looked up again, every file's
    data stays cached). Quietly nothing where this process may not (not root)."""
    subprocess.run(["sync"])
    try:
        with open("/proc/sys/vm/drop_caches", "w") as out:
            out.write("%d\n" % what)
    except OSError:
        pass


def mount_fuse_program(command, backing, point):
    """Mounts `backing` on `point` with a FUSE program that puts itself in the background once
    mounted (bindfs, libfuse's examples); `command` is its argument list, in which {backing} and
    {point} stand for the two directories. Answers the function that unmounts it. Raises if it
    fails or the mount has not appeared within 5 s: a target measured on its empty mount point
    would be native under another name. Its output goes to a file, not a pipe: a daemon that kept
    a pipe open would leave this waiting for the pipe's end."""
    with tempfile.TemporaryFile() as errors:
        status = subprocess.run([part.format(backing=backing, point=point) for part in command],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors).returncode
        if status != 0:
            errors.seek(0)
            raise RuntimeError("%s exited with %d: %s"
                               % (command[0], status, errors.read().decode(errors="replace").strip()))
    for _ in range(100):
        if os.path.ismount(point):
            break
        time.sleep(0.05)
    else:
        subprocess.run(["fusermount3", "-u", "-q", point], capture_output=True)   # in case it comes late
        raise RuntimeError("%s: nothing mounted on %s after 5 s" % (command[0], point))
    return lambda: subprocess.run(["fusermount3", "-u", point])
