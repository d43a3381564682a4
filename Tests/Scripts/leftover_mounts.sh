#!/bin/sh
# The test mounts (MountFixture's /tmp/coordfs-it-*) still mounted: each is unmounted
# (lazily: its daemon may be gone) and named. A fixture unmounts what it mounted even when its
# test fails; one left behind means a test that does not, or a run that was killed.
#
#     leftover_mounts.sh [--fail]     exits 1 with --fail when it found any
found=0
for mount_point in $(awk '$5 ~ "^/tmp/coordfs-it-" { print $5 }' /proc/self/mountinfo); do
    echo "left mounted: $mount_point ($(awk -v m="$mount_point" '$5 == m { print $9 }' /proc/self/mountinfo)); unmounting it" >&2
    umount -l "$mount_point" 2>/dev/null || fusermount3 -uz "$mount_point"
    found=1
done
[ "$1" = "--fail" ] && [ "$found" = 1 ] && exit 1
exit 0
