"""The pre-rendered items of ``GET /api/jobs`` (``w\\0`` and ``l\\0`` values joined by
``services.ingest.list_rows``) equal a fresh ``job_summary`` of the same state after
creates, updates, cancels, pauses, new executions, a one-off's own execution ending and
being replayed, tombstones, in any order and batch split (hypothesis; RocksDB is real, in a
temporary directory); a store of view format 3 (before the pre-rendered rows) is rebuilt.
Filtered pages (every filter kind, combined, with ``id_prefix``, at any page size) equal a
brute-force filter over every job after creates, updates, cancels, tenant/label/handler
changes, a one-off completing, tombstones; paging stays in order under writes between
pages; the term counts equal the records'; a format 4 store is rebuilt."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from services.ingest.job_index import TENANT, TERM_COUNT, JobFilter, term, terms_of
from services.ingest.json_bytes import json_bytes
from services.ingest.list_rows import RowJoiner, last_execution_json, row_parts
from services.ingest.presenters import job_summary
from services.ingest.view_store import NEWEST, ROW, ViewStore
from streams.codec import Codec, RecordKind
from streams.identity import execution_id
from streams.records import CronSchedule, Job, JobStatus
from tests.services.ingest.view_testkit import batches

CODEC = Codec.from_directory()
T0 = 1_800_000_000_000
JOB_IDS = ["a", "b@1", "c", "d"]
KINDS = ["one_off", "cron", "cron_tz", "dependent"]

JOB_STEP = st.fixed_dictionaries(
    {
        "op": st.just("job"),
        "job_id": st.sampled_from(JOB_IDS),
        "kind": st.sampled_from(KINDS),
        "status": st.sampled_from(["SCHEDULED", "SCHEDULED", "PAUSED", "CANCELLED"]),
        "version": st.integers(1, 6),
        "label": st.sampled_from(["x", "y", ""]),
    }
)
RESULT_STEP = st.fixed_dictionaries(
    {
        "op": st.just("result"),
        "job_id": st.sampled_from(JOB_IDS),
        "tick": st.sampled_from([T0, T0 + 60_000, T0 + 120_000]),  # T0: the one-off's own
        "attempt": st.integers(1, 3),
        "status": st.sampled_from(["STARTED", "SUCCEEDED", "FAILED", "DEAD_LETTER"]),
        "trigger": st.sampled_from(["SCHEDULE", "SCHEDULE", "REPLAY"]),
    }
)
DELETE_STEP = st.fixed_dictionaries({"op": st.just("delete"), "job_id": st.sampled_from(JOB_IDS)})
STEPS = st.lists(st.one_of(JOB_STEP, JOB_STEP, RESULT_STEP, RESULT_STEP, DELETE_STEP))


def job_bytes(job_id: str, kind: str, status: str, version: int, label: str) -> bytes:
    extra: dict[str, Any] = {}
    if kind == "one_off":
        extra["run_at_ms"] = T0
    elif kind == "cron":
        extra["cron"] = CronSchedule(expression="*/5 * * * *")
    elif kind == "cron_tz":
        extra["cron"] = CronSchedule(
            expression="30 2 * * *", timezone="Europe/Berlin", start_ms=T0, end_ms=T0 * 2
        )
    else:
        extra["depends_on"] = ["a", "c"]
    job = Job(
        job_id=job_id,
        version=version,
        status=JobStatus(status),
        handler="reports.nightly",
        tenant="acme",
        labels={"team": label} if label else {},
        created_at_ms=T0,
        updated_at_ms=T0 + version,
        **extra,
    )
    return CODEC.encode(RecordKind.JOB, job.to_avro())


def result_bytes(job_id: str, tick: int, attempt: int, status: str, trigger: str) -> bytes:
    record = {
        "execution_id": execution_id(job_id, tick),
        "job_id": job_id,
        "scheduled_for_ms": tick,
        "attempt": attempt,
        "status": status,
        "reason": "boom" if status == "DEAD_LETTER" else None,
        "error": "boom" if status == "FAILED" else None,
        "worker_id": "w1",
        "started_at_ms": tick + attempt,
        "finished_at_ms": None if status == "STARTED" else tick + attempt + 5,
        "next_attempt_at_ms": tick + 1_000 if status == "FAILED" else None,
        "trigger": trigger,
        "job_version": 1,
        "recorded_at_ms": tick + attempt + 6,
    }
    return CODEC.encode(RecordKind.EXECUTION_RESULT, record)


def apply(store: ViewStore, steps: list[dict[str, Any]]) -> None:
    batch = store.begin()
    for step in steps:
        key = step["job_id"].encode()
        if step["op"] == "job":
            args = (step["kind"], step["status"], step["version"], step["label"])
            batch.apply_job(key, job_bytes(step["job_id"], *args))
        elif step["op"] == "delete":
            batch.apply_job(key, None)
        else:
            args = (step["tick"], step["attempt"], step["status"], step["trigger"])
            batch.apply_result(result_bytes(step["job_id"], *args))
    batch.commit()


def fresh_items(store: ViewStore, where: JobFilter, now_ms: int) -> list[bytes]:
    """The items as the API built them before: decoded records and ``job_summary``."""
    rows, _ = store.job_page(where, None, 100)
    return [json_bytes(job_summary(r.job, r.lifecycle, r.last_execution, now_ms)) for r in rows]


@settings(max_examples=150, deadline=None)
@given(
    steps=STEPS,
    cuts=st.lists(st.integers(0, 30), max_size=5),
    now_ms=st.sampled_from([T0 - 3_600_000, T0 + 7_200_000, T0 * 3]),
)
def test_pre_rendered_items_equal_a_fresh_render(
    steps: list[dict[str, Any]], cuts: list[int], now_ms: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = ViewStore(Path(tmp) / "view", CODEC, recent_executions=20, executions_kept=2)
        try:
            for part in batches(steps, cuts):
                apply(store, part)
                for where in (JobFilter(), JobFilter(status="COMPLETED"), JobFilter(tenant="acme")):
                    items, cursor = store.job_page_json(where, None, 100, now_ms)
                    assert items == fresh_items(store, where, now_ms)
                    assert cursor is None
        finally:
            store.close()


def test_an_item_that_does_not_render_is_built_from_its_record(tmp_path: Path) -> None:
    store = ViewStore(tmp_path / "view", CODEC, recent_executions=20)
    try:
        apply(store, [{"op": "job", "job_id": "a", "kind": "one_off", "status": "SCHEDULED",
                       "version": 1, "label": "x"}])  # fmt: skip
        apply(store, [{"op": "result", "job_id": "a", "tick": T0, "attempt": 1,
                       "status": "SUCCEEDED", "trigger": "SCHEDULE"}])  # fmt: skip
        expected = fresh_items(store, JobFilter(), T0)
        assert b'"status":"COMPLETED","outcome":"SUCCEEDED"' in expected[0]
        store.write({ROW + b"a": b""})  # as row_parts leaves a part it cannot render
        assert store.job_page_json(JobFilter(), None, 10, T0)[0] == expected
        assert RowJoiner(T0).row(b"", None, None) == b""
    finally:
        store.close()


def test_parts_out_of_range_are_stored_empty() -> None:
    """The codec's bounds keep times in years 1-9999; a part out of them is left empty."""
    job = CODEC.decode(RecordKind.JOB, job_bytes("a", "one_off", "SCHEDULED", 1, "x"))
    assert row_parts(job)
    assert row_parts({**job, "updated_at_ms": 400_000_000_000_000}) == b""  # year ~14645
    started = {"attempt": 1, "status": "STARTED", "trigger": "SCHEDULE", "started_at_ms": T0}
    assert last_execution_json(started)
    assert last_execution_json({**started, "started_at_ms": 400_000_000_000_000}) == b""


def test_a_format_3_store_is_rebuilt_with_pre_rendered_items(tmp_path: Path) -> None:
    path = tmp_path / "view"
    old = Rdict(str(path), options=Options(raw_mode=True))
    old[b"m\0format"] = b"3"  # before w\0<job_id> and the rendered last_execution in l\0
    old[b"j\0a"] = (1).to_bytes(8, "big") + job_bytes("a", "cron", "SCHEDULED", 1, "x")
    old[NEWEST + b"a"] = b"\0\0"
    old[b"o\0kafkron.jobs\0" + b"0"] = (42).to_bytes(8, "big")
    old.close()
    store = ViewStore(path, CODEC, recent_executions=20)
    try:
        assert store.offsets() == {} and store.job("a") is None  # reread from offset 0
        assert store.job_page_json(JobFilter(), None, 10, T0) == ([], None)
        apply(store, [{"op": "job", "job_id": "a", "kind": "cron", "status": "SCHEDULED",
                       "version": 1, "label": "x"}])  # fmt: skip
        assert store.get(ROW + b"a")
        assert store.job_page_json(JobFilter(), None, 10, T0)[0] == fresh_items(
            store, JobFilter(), T0
        )
    finally:
        store.close()


# Filtered pages (one scan of the rarest term, the others checked on each job's term list)

TERM_JOB_STEP = st.fixed_dictionaries(
    {
        "op": st.just("job"),
        "job_id": st.sampled_from(JOB_IDS),
        "kind": st.sampled_from(["one_off", "cron"]),
        "status": st.sampled_from(["SCHEDULED", "SCHEDULED", "PAUSED", "CANCELLED"]),
        "version": st.integers(1, 6),
        "tenant": st.sampled_from(["acme", "globex"]),
        "handler": st.sampled_from(["etl.load", "etl.clean"]),
        "labels": st.dictionaries(
            st.sampled_from(["team", "env"]), st.sampled_from(["x", "y"]), max_size=2
        ),
    }
)
TERM_STEPS = st.lists(st.one_of(TERM_JOB_STEP, TERM_JOB_STEP, RESULT_STEP, DELETE_STEP))
FILTERS = st.builds(
    JobFilter,
    status=st.sampled_from([None, "SCHEDULED", "PAUSED", "CANCELLED", "COMPLETED"]),
    tenant=st.sampled_from([None, "acme", "globex"]),
    handler=st.sampled_from([None, "etl.load", "etl.clean"]),
    labels=st.lists(
        st.tuples(st.sampled_from(["team", "env"]), st.sampled_from(["x", "y"])), max_size=2
    ).map(tuple),
    id_prefix=st.sampled_from(["", "b", "c"]),
)


def apply_terms(store: ViewStore, steps: list[dict[str, Any]]) -> None:
    batch = store.begin()
    for step in steps:
        key = step["job_id"].encode()
        if step["op"] == "job":
            job = Job(
                job_id=step["job_id"],
                version=step["version"],
                status=JobStatus(step["status"]),
                handler=step["handler"],
                tenant=step["tenant"],
                labels=step["labels"],
                created_at_ms=T0,
                updated_at_ms=T0 + step["version"],
                **(
                    {"run_at_ms": T0}
                    if step["kind"] == "one_off"
                    else {"cron": CronSchedule(expression="*/5 * * * *")}
                ),
            )
            batch.apply_job(key, CODEC.encode(RecordKind.JOB, job.to_avro()))
        elif step["op"] == "delete":
            batch.apply_job(key, None)
        else:
            args = (step["tick"], step["attempt"], step["status"], step["trigger"])
            batch.apply_result(result_bytes(step["job_id"], *args))
    batch.commit()


def brute_force(store: ViewStore, where: JobFilter) -> list[str]:
    """The ids of every job matching ``where``, from the records and lifecycles."""
    rows, cursor = store.job_page(JobFilter(), None, 100)
    assert cursor is None
    found = []
    for row in rows:
        job, shown = row.job, row.lifecycle.shown if row.lifecycle else row.job["status"]
        if (
            where.status in (None, shown)
            and where.tenant in (None, job["tenant"])
            and where.handler in (None, job["handler"])
            and all(job["labels"].get(k) == v for k, v in where.labels)
            and job["job_id"].startswith(where.id_prefix)
        ):
            found.append(job["job_id"])
    return found


def paged_ids(store: ViewStore, where: JobFilter, limit: int, now_ms: int) -> list[str]:
    """Every page of ``where`` through both routes' reads (they must agree page by page)."""
    seen: list[str] = []
    cursor = None
    while True:
        rows, following = store.job_page(where, cursor, limit)
        items, following_json = store.job_page_json(where, cursor, limit, now_ms)
        assert following_json == following
        assert items == [
            json_bytes(job_summary(r.job, r.lifecycle, r.last_execution, now_ms)) for r in rows
        ]
        seen += [r.job["job_id"] for r in rows]
        if following is None:
            return seen
        cursor = following


def term_counts(store: ViewStore) -> dict[bytes, int]:
    """The ``k`` counts as stored."""
    return {
        key[len(TERM_COUNT) :]: int.from_bytes(store.get(key) or b"", "big")
        for key in store.keys_from(TERM_COUNT, TERM_COUNT)
    }


@settings(max_examples=150, deadline=None)
@given(
    steps=TERM_STEPS,
    cuts=st.lists(st.integers(0, 30), max_size=5),
    wheres=st.lists(FILTERS, min_size=1, max_size=4),
    limit=st.integers(1, 3),
)
def test_filtered_pages_equal_a_brute_force_filter(
    steps: list[dict[str, Any]], cuts: list[int], wheres: list[JobFilter], limit: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = ViewStore(Path(tmp) / "view", CODEC, recent_executions=20, executions_kept=2)
        try:
            for part in batches(steps, cuts):
                apply_terms(store, part)
                for where in wheres:
                    assert paged_ids(store, where, limit, T0) == brute_force(store, where)
                rows, _ = store.job_page(JobFilter(), None, 100)
                expected: dict[bytes, int] = {}
                for row in rows:
                    shown = row.lifecycle.shown if row.lifecycle else row.job["status"]
                    for found in terms_of(row.job, shown):
                        expected[found] = expected.get(found, 0) + 1
                assert term_counts(store) == expected
        finally:
            store.close()


@settings(max_examples=100, deadline=None)
@given(
    before=st.lists(TERM_JOB_STEP, min_size=1),
    meanwhile=st.lists(TERM_STEPS, max_size=6),
    where=FILTERS,
    limit=st.integers(1, 2),
)
def test_filtered_pages_stay_stable_under_concurrent_writes(
    before: list[dict[str, Any]],
    meanwhile: list[list[dict[str, Any]]],
    where: JobFilter,
    limit: int,
) -> None:
    """Writes between pages: ids come in order, none twice, and every job that matched
    before and was not written meanwhile is seen."""
    with tempfile.TemporaryDirectory() as tmp:
        store = ViewStore(Path(tmp) / "view", CODEC, recent_executions=20, executions_kept=2)
        try:
            apply_terms(store, before)
            untouched = set(brute_force(store, where)) - {
                s["job_id"] for part in meanwhile for s in part
            }
            seen: list[str] = []
            cursor = None
            for step in range(100):
                items, cursor = store.job_page_json(where, cursor, limit, T0)
                seen += [orjson.loads(item)["job_id"] for item in items]
                if cursor is None:
                    break
                if step < len(meanwhile):
                    apply_terms(store, meanwhile[step])
            assert seen == sorted(set(seen))
            assert untouched <= set(seen)
        finally:
            store.close()


def test_a_format_4_store_is_rebuilt_with_term_lists(tmp_path: Path) -> None:
    path = tmp_path / "view"
    old = Rdict(str(path), options=Options(raw_mode=True))
    old[b"m\0format"] = b"4"  # index keys with empty values, no k\0 counts
    old[b"x\0" + term(TENANT, "acme") + b"a"] = b""
    old[b"o\0kafkron.jobs\0" + b"0"] = (42).to_bytes(8, "big")
    old.close()
    store = ViewStore(path, CODEC, recent_executions=20)
    try:
        assert store.offsets() == {}  # reread from offset 0
        assert store.job_page_json(JobFilter(tenant="acme"), None, 10, T0) == ([], None)
        step = {"op": "job", "job_id": "a", "kind": "cron", "status": "SCHEDULED", "version": 1,
                "tenant": "acme", "handler": "etl.load", "labels": {"team": "x"}}  # fmt: skip
        apply_terms(store, [step])
        where = JobFilter(tenant="acme", labels=(("team", "x"),))
        assert paged_ids(store, where, 10, T0) == ["a"]
        assert store.get(TERM_COUNT + term(TENANT, "acme")) == (1).to_bytes(8, "big")
    finally:
        store.close()
