"""What a partition store does when its RocksDB directory is gone, damaged, full or in use.

A partition store is a cache of its changelog: every change reaches the changelog inside
the Kafka transaction that commits it, and only then the local RocksDB
(``Checkpoint.commit``, step 5), so the changelog always holds everything committed and a
store rebuilt from it loses nothing. Hence one policy, applied here and nowhere else:

- **Deleted** (the directory is missing): a new database, restored from the changelog's
  beginning (``PartitionStore.created``).
- **Damaged, found at open**: RocksDB refuses the directory (``CURRENT``, ``MANIFEST``, a
  missing or truncated SST file, a bad table footer: RocksDB checks these when it opens a
  database), or it holds files but no ``CURRENT``, or it carries the damage mark below.
  The directory is moved aside to ``<partition>.damaged-<UTC time>`` (an ERROR log line
  names both paths and what RocksDB said), a new one is created, and the partition is
  restored from its changelog like a deleted one. The moved directory is kept for
  inspection; deleting it is the operator's call.
- **Damaged, found while running**: RocksDB checks a data block's checksum only when it
  reads the block. A read that meets a bad block raises :class:`StoreCorruptedError`
  (a scan that RocksDB's iterator ended early is checked for this too, see
  ``PartitionStore.scan``), the directory gets the damage mark, and the service stops: its
  open transaction aborts, so nothing decided on a half-read store is committed. Its
  restart finds the mark and rebuilds as above. A store never answers from a partly
  readable database.
- **Disk full** (ENOSPC): :class:`StoreDiskFullError`, and the service stops. Everything
  committed is in the changelog, so after space is freed the restart resumes from the last
  commit and the store catches up from its changelog. Nothing is moved: the files are fine.
- **In use** (another process holds RocksDB's ``LOCK``): :class:`StoreInUseError`, nothing
  moved; two processes must not share a state directory.
- Any other I/O error: :class:`StoreError` naming the directory, nothing moved.

Errors that are not RocksDB's (a wrong argument type) pass through unchanged.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from streams.state.exceptions import (
    StoreCorruptedError,
    StoreDiskFullError,
    StoreError,
    StoreInUseError,
)

log = logging.getLogger(__name__)

DAMAGE_MARK = "KAFKRON-DAMAGED"
"""A file in a partition directory whose store was found damaged while running: the next
open moves the directory aside and rebuilds the partition from its changelog."""

_T = TypeVar("_T")


def store_error(exc: Exception, path: Path, doing: str) -> StoreError | None:
    """The kafkron error for RocksDB's ``exc`` while ``doing`` (e.g. "reading") the store
    in ``path``; None when ``exc`` is not a RocksDB status (rocksdict raises those as bare
    ``Exception`` whose message starts with the status)."""
    if type(exc) is not Exception:
        return None
    message = str(exc)
    if "No space left on device" in message:
        return StoreDiskFullError(
            f"the disk holding the store {path} is full while {doing} it ({message}). The "
            "service stops here; nothing committed is lost. Free space on that disk (or give "
            "KAFKRON_STATE_DIR a bigger one) and restart the service: it resumes from its "
            "last commit, and the store catches up from its changelog."
        )
    if message.startswith("IO error") and "lock" in message.lower():
        return StoreInUseError(
            f"the store {path} is in use by another process ({message}). Stop that process, "
            "or give each process its own KAFKRON_STATE_DIR."
        )
    if message.startswith("Corruption") or message.startswith("IO error: No such file"):
        return StoreCorruptedError(
            f"the store {path} is damaged ({message}), found while {doing} it. It is marked "
            "to be rebuilt: restart the service, and it moves the directory aside and "
            "restores the partition from its changelog (which holds every committed change)."
        )
    if message.startswith("IO error"):
        return StoreError(
            f"{doing} the store {path} failed: {message}. Check the disk; if the directory "
            "is damaged, move it away and restart the service: the partition is rebuilt "
            "from its changelog."
        )
    return None


def mark_damaged(path: Path, reason: str) -> None:
    """Leave the damage mark in ``path``, so that the next open rebuilds it (best effort:
    when the mark cannot be written either, the error already raised names the directory)."""
    try:
        (path / DAMAGE_MARK).write_text(reason + "\n")
    except OSError as exc:
        log.error("could not mark %s as damaged (%s): move it away before restarting", path, exc)


def damage_before_open(path: Path) -> str | None:
    """Why ``path`` must be rebuilt before RocksDB even opens it, or None."""
    mark = path / DAMAGE_MARK
    if mark.exists():
        return f"marked damaged while running: {mark.read_text(errors='replace').strip()}"
    if path.is_dir() and not (path / "CURRENT").exists() and any(path.iterdir()):
        return "it holds files but no CURRENT file"
    return None


def set_aside(path: Path, reason: str, what: str) -> Path:
    """Move the damaged directory ``path`` of ``what`` aside; returns where it went."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = path.with_name(f"{path.name}.damaged-{stamp}")
    suffix = 1
    while target.exists():
        target = path.with_name(f"{path.name}.damaged-{stamp}-{suffix}")
        suffix += 1
    try:
        shutil.move(path, target)
    except OSError as exc:
        raise StoreCorruptedError(
            f"{what} in {path} is damaged ({reason}) and could not be moved aside ({exc}). "
            "Move or delete the directory yourself and restart: the partition is rebuilt "
            "from its changelog."
        ) from exc
    log.error(
        "%s in %s is damaged (%s): moved it to %s and rebuilding the partition from its "
        "changelog; delete the moved directory once you no longer need it",
        what,
        path,
        reason,
        target,
    )
    return target


def open_or_rebuild(path: Path, open_store: Callable[[], _T], what: str) -> _T:
    """``open_store()`` (which opens the RocksDB in ``path``), after moving a damaged
    directory aside: then it opens a new, empty one, which its restore fills from the
    changelog. Raises the :class:`StoreError` of a full disk, a locked or unreadable
    directory without moving anything."""
    reason = damage_before_open(path)
    if reason is not None:
        set_aside(path, reason, what)
    try:
        return open_store()
    except Exception as exc:
        error = store_error(exc, path, "opening")
        if error is None:
            raise
        if not isinstance(error, StoreCorruptedError):
            raise error from exc
        set_aside(path, str(exc).splitlines()[0], what)
    return open_store()
