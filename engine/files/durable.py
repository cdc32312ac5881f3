"""Durable renames: the one place that makes a directory entry survive a power loss.

Owns ``fsync_directory``: after ``os.replace`` of a temporary file (save points, the disk tier's index,
a reopened MP4), the directory itself is fsynced so that the rename is on the drive, not only the data.
"""
from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(path: Path, required: bool = True) -> None:
    """fsync the directory ``path``. With ``required=False`` a directory that cannot be opened (a
    platform without directory fsync) is skipped instead of raising."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        if required:
            raise
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
