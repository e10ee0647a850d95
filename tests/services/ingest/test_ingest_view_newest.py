"""The view's ``l\\0<job_id>`` key: each job's newest kept execution, written at apply time
(a page of jobs reads it instead of seeking the job's history). Checked against the
history itself whatever the order, repeats, batch splits, bound and tombstones
(hypothesis; RocksDB is real, in a temporary directory)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from services.ingest.job_index import JobFilter
from services.ingest.view_store import (
    NEWEST,
    ViewStore,
    history_prefix,
    split_newest,
)
from streams.codec import Codec, RecordKind
from streams.identity import execution_id
from streams.records import Job
from tests.services.ingest.view_testkit import batches

CODEC = Codec.from_directory()
T0 = 1_800_000_000_000
JOB_IDS = ["a", "b@1", "c"]

RESULT = st.fixed_dictionaries(
    {
        "job_id": st.sampled_from(JOB_IDS),
        "tick": st.integers(0, 5).map(lambda i: T0 + i * 60_000),
        "attempt": st.integers(1, 3),
        "status": st.sampled_from(["STARTED", "SUCCEEDED", "FAILED", "TIMED_OUT"]),
    }
)
# A step is a result, or a tombstone of a job (None): its history and newest go.
STEPS = st.lists(st.one_of(RESULT, st.sampled_from(JOB_IDS).map(lambda j: ("delete", j))))


def result_bytes(job_id: str, tick: int, attempt: int, status: str) -> bytes:
    record = {
        "execution_id": execution_id(job_id, tick),
        "job_id": job_id,
        "scheduled_for_ms": tick,
        "attempt": attempt,
        "status": status,
        "reason": None,
        "error": "boom" if status == "FAILED" else None,
        "worker_id": "w1",
        "started_at_ms": tick + attempt,
        "finished_at_ms": None if status == "STARTED" else tick + attempt + 5,
        "next_attempt_at_ms": tick + 1_000 if status == "FAILED" else None,
        "trigger": "SCHEDULE",
        "job_version": 1,
        "recorded_at_ms": tick + attempt + 6,
    }
    return CODEC.encode(RecordKind.EXECUTION_RESULT, record)


def job_bytes(job_id: str) -> bytes:
    job = Job(
        job_id=job_id,
        version=1,
        handler="reports.nightly",
        run_at_ms=T0,
        created_at_ms=T0,
        updated_at_ms=T0,
    )
    return CODEC.encode(RecordKind.JOB, job.to_avro())


def open_store(path: Path, executions_kept: int) -> ViewStore:
    return ViewStore(path, CODEC, recent_executions=20, executions_kept=executions_kept)


def newest_in_history(store: ViewStore, job_id: str) -> tuple[bytes, bytes] | None:
    """The last ``h`` key's position and value: what a page used to seek for."""
    prefix = history_prefix(job_id)
    last = None
    for key in store.keys_from(prefix, prefix):
        last = key
    if last is None:
        return None
    value = store.get(last)
    assert value is not None
    return last[len(prefix) :], value


def stored_newest(store: ViewStore, job_id: str) -> tuple[bytes, bytes] | None:
    value = store.get(NEWEST + job_id.encode())
    return None if value is None else split_newest(value)


@settings(max_examples=120, deadline=None)
@given(
    steps=STEPS,
    cuts=st.lists(st.integers(0, 40), max_size=6),
    executions_kept=st.integers(1, 4),
)
def test_newest_is_the_last_kept_execution_whatever_the_order(
    steps: list[Any], cuts: list[int], executions_kept: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "view", executions_kept)
        try:
            for part in batches(steps, cuts):
                batch = store.begin()
                for step in part:
                    if isinstance(step, tuple):
                        batch.apply_job(step[1].encode(), None)
                    else:
                        batch.apply_result(result_bytes(**step))
                batch.commit()
            for job_id in JOB_IDS:
                assert stored_newest(store, job_id) == newest_in_history(store, job_id)
        finally:
            store.close()


def test_a_late_older_tick_and_a_repeat_leave_the_newest(tmp_path: Path) -> None:
    store = open_store(tmp_path / "view", executions_kept=10)
    try:
        for tick, status in [(T0 + 60_000, "STARTED"), (T0, "SUCCEEDED")]:
            batch = store.begin()
            batch.apply_result(result_bytes("a", tick, 1, status))
            batch.commit()
        newest = stored_newest(store, "a")
        assert newest is not None
        assert orjson.loads(newest[1])["execution_id"] == execution_id("a", T0 + 60_000)
        assert orjson.loads(newest[1])["status"] == "STARTED"
        batch = store.begin()  # the newest's own outcome, then a repeat of the older one
        batch.apply_result(result_bytes("a", T0 + 60_000, 1, "SUCCEEDED"))
        batch.apply_result(result_bytes("a", T0, 1, "SUCCEEDED"))
        batch.commit()
        newest = stored_newest(store, "a")
        assert newest is not None
        assert orjson.loads(newest[1])["status"] == "SUCCEEDED"
        assert orjson.loads(newest[1])["execution_id"] == execution_id("a", T0 + 60_000)
    finally:
        store.close()


def test_a_page_shows_each_jobs_newest_execution(tmp_path: Path) -> None:
    store = open_store(tmp_path / "view", executions_kept=3)
    try:
        batch = store.begin()
        for job_id in JOB_IDS:
            batch.apply_job(job_id.encode(), job_bytes(job_id))
        for i in (4, 1, 7, 2):  # "a" over its bound, out of order
            batch.apply_result(result_bytes("a", T0 + i * 1_000, 1, "SUCCEEDED"))
        batch.apply_result(result_bytes("c", T0, 2, "FAILED"))
        batch.commit()
        rows, cursor = store.job_page(JobFilter(), None, 10)
        assert cursor is None
        shown = {r.job["job_id"]: r.last_execution for r in rows}
        assert shown["a"] == store.executions("a", 1)[0]
        assert shown["a"] is not None and shown["a"]["scheduled_for_ms"] == T0 + 7_000
        assert shown["b@1"] is None
        assert shown["c"] == store.executions("c", 1)[0]
        assert shown["c"] is not None and shown["c"]["status"] == "FAILED"
    finally:
        store.close()
