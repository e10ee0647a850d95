"""The status view's applying thread steps aside while a read runs, for a bounded time
(services.ingest.view_reads_first)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from services.ingest.job_index import JobFilter
from services.ingest.settings import IngestSettings
from services.ingest.view import StatusView
from services.ingest.view_reads_first import ReadsFirst
from streams.codec import Codec


def _step_aside_in_thread(
    reads: ReadsFirst, until_s: float
) -> tuple[threading.Thread, list[float]]:
    returned: list[float] = []

    def run() -> None:
        reads.step_aside(until_s)
        returned.append(time.monotonic())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, returned


def test_without_a_read_in_progress_it_does_not_wait() -> None:
    reads = ReadsFirst()
    started = time.monotonic()
    reads.step_aside(started + 60)
    assert time.monotonic() - started < 5  # not the minute it could have waited


def test_it_waits_until_the_reads_end() -> None:
    reads = ReadsFirst()
    first, second = reads.reading(), reads.reading()
    first.__enter__()
    second.__enter__()
    thread, returned = _step_aside_in_thread(reads, time.monotonic() + 60)
    thread.join(0.3)
    assert thread.is_alive() and not returned  # both reads still in progress
    first.__exit__(None, None, None)
    thread.join(0.3)
    assert thread.is_alive() and not returned  # one still is
    ended_s = time.monotonic()
    second.__exit__(None, None, None)
    thread.join(10)
    assert returned and returned[0] >= ended_s
    reads.step_aside(time.monotonic() + 60)  # none in progress any more: returns at once


def test_a_read_that_raises_still_ends() -> None:
    reads = ReadsFirst()
    try:
        with reads.reading():
            raise ValueError("a failed read")
    except ValueError:
        pass
    started = time.monotonic()
    reads.step_aside(started + 60)
    assert time.monotonic() - started < 5


def test_it_waits_no_longer_than_its_deadline() -> None:
    reads = ReadsFirst()
    with reads.reading():  # a read that outlasts the deadline
        started = time.monotonic()
        thread, returned = _step_aside_in_thread(reads, started + 0.2)
        thread.join(10)
        assert returned
        assert 0.2 <= returned[0] - started < 10
        reads.step_aside(time.monotonic() - 1)  # a deadline passed: returns at once


class _StoreSeeingReads:
    """A stand-in for the view's store: notes whether a read was marked in progress."""

    def __init__(self, reads: ReadsFirst) -> None:
        self._reads = reads
        self.marked: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        def read(*args: Any) -> Any:
            self.marked.append(not self._reads._no_reads.is_set())
            return None

        return read


def test_the_views_reads_are_marked_in_progress(tmp_path: Path) -> None:
    view = StatusView(IngestSettings(view_dir=tmp_path / "view"), Codec.from_directory())
    store = _StoreSeeingReads(view._reads_first)
    view._store = store  # type: ignore[assignment]
    where = JobFilter()
    view.job("a")
    view.lifecycle("a")
    view.jobs(where, None, 10)
    view.jobs_json(where, None, 10, 0)
    view.executions("a")
    view.execution_page("a", None, 10)
    view.execution("a-1")
    view.dead_letter_of("a-1")
    view.running("a")
    view.dependents("a", 10)
    view.dead_letters(None, 10)
    assert store.marked == [True] * 11
    started = time.monotonic()
    view._reads_first.step_aside(started + 60)  # and none is once they returned
    assert time.monotonic() - started < 5
