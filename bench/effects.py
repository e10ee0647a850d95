"""Handlers that leave a trace of every run in a file, so that runs are counted across
processes (the executors of a fault test or of ``bench.chaos``); no Kafka here.

Both append lines ``<phase> <execution_id> <attempt> <worker> <ms>`` to the file named by
``KAFKRON_TEST_EFFECTS`` (``O_APPEND``: whole lines from any number of processes):

- ``record_effect`` (``tests.effect``): ``start``, sleeps ``payload`` seconds on an
  execution's first run only, ``done``;
- ``dedup_effect`` (``chaos.dedup``): ``start``, sleeps ``payload`` seconds, then makes its
  effect once per execution id, as the handler contract asks (services/executor/context.py):
  a marker file named after the id, created ``O_EXCL``; the one run that creates it logs
  ``effect``, a rerun logs ``deduped``; then ``done``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections import Counter
from pathlib import Path

from services.executor.context import HandlerContext

EFFECTS_ENV = "KAFKRON_TEST_EFFECTS"
EFFECT_SPEC = "tests.effect=bench.effects:record_effect"
DEDUP_HANDLER = "chaos.dedup"
DEDUP_SPEC = f"{DEDUP_HANDLER}=bench.effects:dedup_effect"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def append_line(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def effects(path: Path) -> Counter[tuple[str, str]]:
    """(phase, execution_id) -> how often a handler logged it."""
    if not path.exists():
        return Counter()
    return Counter(
        (line.split()[0], line.split()[1]) for line in path.read_text().splitlines() if line
    )


def marks_dir(path: Path) -> Path:
    """Where ``dedup_effect`` keeps one marker file per execution id made effective."""
    return path.with_name(path.name + ".marks")


def _seconds(ctx: HandlerContext) -> float:
    return float(ctx.payload.decode() or "0")


def _line(phase: str, ctx: HandlerContext) -> str:
    return f"{phase} {ctx.execution_id} {ctx.attempt} {ctx.worker_id} {now_ms()}"


async def record_effect(ctx: HandlerContext) -> None:
    """Logs ``start``, sleeps ``payload`` s (on an execution's first run only), logs ``done``."""
    path = Path(os.environ[EFFECTS_ENV])
    seconds = _seconds(ctx)
    first = not seconds or effects(path)[("start", ctx.execution_id)] == 0
    append_line(path, _line("start", ctx))
    if seconds and first:
        await asyncio.sleep(seconds)
    append_line(path, _line("done", ctx))


def make_effect_once(path: Path, execution_id: str) -> bool:
    """Create the execution's marker (True), or find it made by an earlier run (False)."""
    marks = marks_dir(path)
    marks.mkdir(exist_ok=True)
    name = hashlib.sha256(execution_id.encode()).hexdigest()[:32]
    try:
        fd = os.open(marks / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


async def dedup_effect(ctx: HandlerContext) -> None:
    """Logs ``start``, sleeps ``payload`` s, makes its effect once per execution id (logs
    ``effect`` or ``deduped``), logs ``done``."""
    path = Path(os.environ[EFFECTS_ENV])
    append_line(path, _line("start", ctx))
    seconds = _seconds(ctx)
    if seconds:
        await asyncio.sleep(seconds)
    made = make_effect_once(path, ctx.execution_id)
    append_line(path, _line("effect" if made else "deduped", ctx))
    append_line(path, _line("done", ctx))
