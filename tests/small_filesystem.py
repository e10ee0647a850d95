"""A small filesystem that a test can fill up: a tmpfs of a few MiB, mounted for the test.

Mounting needs root (CAP_SYS_ADMIN); where the test cannot mount, it is skipped and says
why. The disk-full tests use a real filesystem's ENOSPC rather than an injected error, so
that RocksDB's own behaviour on a full disk (a failed WAL append, then a database that
refuses every write until it is reopened) is what kafkron meets.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_filesystem(path: Path, size_mib: int) -> Iterator[Path]:
    """A tmpfs of ``size_mib`` MiB mounted at ``path`` inside the block, unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    mount = ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(path)]
    try:
        result = subprocess.run(mount, capture_output=True, text=True, timeout=30)
    except FileNotFoundError as exc:
        pytest.skip(f"no mount command to make a small filesystem: {exc}")
    if result.returncode != 0:
        pytest.skip(
            f"cannot mount a {size_mib} MiB tmpfs at {path} (needs root with CAP_SYS_ADMIN): "
            f"{result.stderr.strip() or result.returncode}"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill_up(directory: Path) -> Path:
    """Write a file in ``directory`` until its filesystem is full; returns the file."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for chunk in (1 << 20, 4096, 1):  # then the last pages' worth
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return filler
