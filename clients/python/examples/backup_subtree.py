#!/usr/bin/env python3
"""A backup that holds a read of a whole subtree while it copies it: no writer changes a file
half-way through the copy, and presenters save first.

    backup_subtree.py /mnt/project /backups/project
"""
import shutil
import sys

import coordfs

source, target = sys.argv[1], sys.argv[2]
with coordfs.coordinate(read=[source]):
    shutil.copytree(source, target, dirs_exist_ok=True)
print("copied", source, "to", target)
