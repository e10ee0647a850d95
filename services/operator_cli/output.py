"""Output for people (rich tables, times as UTC and relative to now) and for scripts (JSON).

Tables go to stdout; when stdout is not a terminal they are drawn 160 columns wide without
colour, so piped output keeps one row per line.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

PIPED_WIDTH = 160


def console() -> Console:
    """A console on stdout, 160 columns wide when stdout is not a terminal."""
    terminal = sys.stdout.isatty()
    return Console(file=sys.stdout, width=None if terminal else PIPED_WIDTH, highlight=False)


def print_json(data: Any) -> None:
    """``data`` as indented JSON on stdout."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def now_ms() -> int:
    """Wall-clock time in epoch ms."""
    return time.time_ns() // 1_000_000


def epoch_ms(iso: str | None) -> int | None:
    """An API time (``2026-07-12T02:00:00.000Z``) as epoch ms; None stays None."""
    if not iso:
        return None
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def span(ms: int) -> str:
    """A duration as its two largest units: ``3d 4h``, ``5m 2s``, ``800ms``."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:2])


def human_time(iso: str | None, now: int) -> str:
    """``2026-07-12 02:00:00Z (in 3h 5m)`` / ``(... ago)``; ``-`` for no time."""
    at = epoch_ms(iso)
    if at is None:
        return "-"
    stamp = datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    delta = at - now
    relative = f"in {span(delta)}" if delta > 0 else f"{span(-delta)} ago"
    return f"{stamp} ({relative})"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A plain table: a header line, one line per row; only the last column wraps."""
    drawn = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for index, header in enumerate(headers):
        last = index == len(headers) - 1
        drawn.add_column(header, overflow="fold", no_wrap=not last, ratio=1 if last else None)
    for row in rows:
        drawn.add_row(*("-" if cell is None else str(cell) for cell in row))
    return drawn


def fields(pairs: Iterable[tuple[str, Any]]) -> Table:
    """``name  value`` lines, for one object."""
    drawn = Table(box=None, show_header=False, pad_edge=False)
    drawn.add_column(style="bold")
    drawn.add_column(overflow="fold")
    for name, value in pairs:
        drawn.add_row(name, "-" if value is None else str(value))
    return drawn
