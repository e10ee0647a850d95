"""A RocksDB held open by another process, as a running service holds its store."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_HOLD = (
    "import sys, time; from rocksdict import Options, Rdict; "
    "o = Options(raw_mode=True); o.create_if_missing(True); "
    "db = Rdict(sys.argv[1], options=o); print('open', flush=True); time.sleep(60)"
)


@contextmanager
def held_open(path: Path) -> Iterator[None]:
    """Another process has the RocksDB at ``path`` open (as the API holds its view) inside
    the block; it is killed, and its lock released, at the end."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        yield
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
