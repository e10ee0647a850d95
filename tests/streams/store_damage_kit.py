"""Ways to damage a closed RocksDB directory, as a bad disk, a careless operator or a crash
of the filesystem would; no tests here.

``damage(path, how)`` applies one of :data:`DAMAGES` to the RocksDB in ``path`` and
returns what it touched. Those found when RocksDB opens the directory are in
:data:`FOUND_AT_OPEN`; ``sst-garbage`` (random bytes over the middle of a table file's data
blocks, its size unchanged) is found only when a read meets the bad block.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

FOUND_AT_OPEN = (
    "current-garbage",
    "current-empty",
    "current-deleted",
    "manifest-truncated",
    "manifest-deleted",
    "sst-truncated",
    "sst-deleted",
    "sst-footer-garbage",
)
DAMAGES = (*FOUND_AT_OPEN, "sst-garbage")


def table_files(path: Path) -> list[Path]:
    return sorted(path.glob("*.sst"))


def damage(path: Path, how: str, seed: int = 0) -> list[Path]:
    """Damage the closed RocksDB in ``path`` as ``how`` says; returns the files touched.

    The ``sst-*`` kinds need a table file (written by a flush) and damage each of them,
    except ``sst-garbage``: the largest only (a small one, such as the offsets' column
    family's, is read whole when RocksDB opens the database).
    """
    rng = random.Random(seed)
    manifests = sorted(path.glob("MANIFEST-*"))
    tables = table_files(path)
    if how.startswith("sst") and not tables:
        raise AssertionError(f"{path} has no table file to damage: flush the store first")
    if how == "current-garbage":
        (path / "CURRENT").write_text("MANIFEST-999999-garbage\n")
        return [path / "CURRENT"]
    if how == "current-empty":
        os.truncate(path / "CURRENT", 0)
        return [path / "CURRENT"]
    if how == "current-deleted":
        (path / "CURRENT").unlink()
        return [path / "CURRENT"]
    if how == "manifest-truncated":
        for manifest in manifests:
            os.truncate(manifest, min(10, manifest.stat().st_size))
        return manifests
    if how == "manifest-deleted":
        for manifest in manifests:
            manifest.unlink()
        return manifests
    if how == "sst-garbage":
        tables = sorted(tables, key=lambda t: t.stat().st_size)[-1:]
    for table in tables:
        size = table.stat().st_size
        if how == "sst-truncated":
            os.truncate(table, size // 2)
        elif how == "sst-deleted":
            table.unlink()
        elif how == "sst-footer-garbage":
            _overwrite(table, size - 64, rng.randbytes(64))
        elif how == "sst-garbage":
            _overwrite(table, 0, rng.randbytes(max(1, size // 2)))
        else:
            raise ValueError(f"unknown damage {how!r}; one of {DAMAGES}")
    return tables


def _overwrite(file: Path, offset: int, data: bytes) -> None:
    with file.open("r+b") as handle:
        handle.seek(max(0, offset))
        handle.write(data)
