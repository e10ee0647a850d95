"""Hostile DueEvents on the real broker: the executor stays up and accounts for every record.

Each record on a due topic ends in exactly one of: a final result of its execution (it kept
its bounds), or an UNDECODABLE dead letter naming its topic, partition and offset with its raw
bytes and the reason (it broke a bound of ``schemas/bounds.json``, its key is not its job id,
or it is not a DueEvent at all). Which one is predicted by the codec's own check, so the test
holds whatever the bounds say.
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streams.admin import ensure_topics
from streams.codec import RecordKind
from streams.exceptions import DecodeError
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames
from tests.conftest import _delete_topics

from .test_loop_kafka import Calls, start_executor
from .test_service_kit import CODEC, ExecutorThread, TopicReader, due_event, produce

pytestmark = pytest.mark.kafka

_EPOCH_MAX = 253_402_300_799_999
_IDS = itertools.count()
# Values at and past each bound, and some far past it.
_EDGES: dict[str, list[Any]] = {
    "attempt": [-1, 0, 1, 1000, 1001, 2**31 - 1, -(2**31)],
    "job_version": [-1, 0, 2**63 - 1, -(2**63)],
    "scheduled_for_ms": [-1, 0, _EPOCH_MAX, _EPOCH_MAX + 1, 2**62],
    "fire_at_ms": [-1, 0, _EPOCH_MAX + 1, 2**62],
    "timeout_ms": [0, 1, 31_622_400_000, 31_622_400_001, -(2**63)],
    "emitted_at_ms": [-5, 2**62],
    "tenant": ["", "t" * 256, "t" * 257, "é" * 129],
    "handler": ["", "h" * 257],
    "multiplier": [float("nan"), 0.5, 1.0, 100.0, 100.5, float("inf")],
    "max_attempts": [0, 1, 1000, 1001, -7],
    "jitter_ratio": [-0.1, 1.0, 1.5],
}
_ID_EDGES = ["", "x" * 1100, "x" * 1101, "é" * 551, "x" * 70_000]


@st.composite
def hostile_records(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    """(key, value) of a due record: a valid event with 0-2 fields at or past their edges,
    an execution id at its edge, a wrong or missing key, or random bytes."""
    n = next(_IDS)
    job_id = f"hostile-{n}"
    event = due_event(job_id, handler="tests.record")
    event["execution_id"] = f"{job_id}@{event['scheduled_for_ms']}"
    shape = draw(st.sampled_from(["fields", "fields", "execution_id", "key", "bytes"]))
    key: bytes | None = job_id.encode()
    if shape == "bytes":
        return key, draw(st.binary(max_size=200))
    if shape == "execution_id":
        edge = draw(st.sampled_from(_ID_EDGES))  # made unique, at the same length
        event["execution_id"] = (f"{n}:" + edge)[: len(edge.encode())] if edge else edge
    elif shape == "key":
        key = draw(st.sampled_from([None, b"", b"someone-else", job_id.encode() + b"x"]))
    else:
        for name in draw(st.sets(st.sampled_from(sorted(_EDGES)), max_size=2)):
            value = draw(st.sampled_from(_EDGES[name]))
            if name in event["retry"]:
                event["retry"] = {**event["retry"], name: value}
            else:
                event[name] = value
    return key, CODEC.encode(RecordKind.DUE_EVENT, event)


def _expected_execution(key: bytes | None, value: bytes | None) -> str | None:
    """The execution id a record runs as, or None when it must be dead-lettered."""
    try:
        event = CODEC.decode(RecordKind.DUE_EVENT, value or b"")
    except DecodeError:
        return None
    return event["execution_id"] if key == event["job_id"].encode() else None


@pytest.fixture(scope="module")
def module_topics(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaSettings]:
    """One namespace for the module: the executor serves every example of the property."""
    settings = KafkaSettings(
        bootstrap_servers=kafka_bootstrap,
        namespace=f"t{uuid.uuid4().hex[:10]}.",
        partitions=2,
        state_dir=tmp_path_factory.mktemp("hostile") / "state",
    )
    ensure_topics(settings)
    yield settings
    _delete_topics(kafka_bootstrap, settings.namespace)


@pytest.fixture(scope="module")
def module_calls() -> Calls:
    return Calls()


@pytest.fixture(scope="module")
def hostile_executor(module_topics: KafkaSettings, module_calls: Calls) -> Iterator[ExecutorThread]:
    running = start_executor(module_topics, module_calls)
    yield running
    running.stop()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(records=st.lists(hostile_records(), min_size=1, max_size=8))
def test_every_hostile_due_record_has_one_outcome_and_the_executor_stays_up(
    module_topics: KafkaSettings,
    hostile_executor: ExecutorThread,
    records: list[tuple[bytes | None, bytes | None]],
) -> None:
    topic = TopicNames(module_topics.namespace).due(Priority.NORMAL)
    canary = due_event(f"canary-{next(_IDS)}", handler="tests.record")
    canary_value = CODEC.encode(RecordKind.DUE_EVENT, canary)
    landed = produce(
        module_topics,
        [(topic, k, v, 0) for k, v in records]
        + [(topic, canary["job_id"].encode(), canary_value, 0)],
    )
    expected = [_expected_execution(k, v) for k, v in records]
    runs = {e for e in expected if e is not None} | {canary["execution_id"]}
    dead = {where for where, e in zip(landed, expected, strict=False) if e is None}
    reader = TopicReader(module_topics, ["job-results", "dlq"])
    try:

        def accounted(r: TopicReader) -> bool:
            return set(_succeeded(r, runs)) >= runs and set(_letters_at(r, landed)) >= dead

        reader.wait_for(accounted, 60, f"{len(runs)} runs and {len(dead)} dead letters")
        assert set(_succeeded(reader, runs).values()) == {1}  # each ran once
        letters = {
            (d["source_topic"], d["source_partition"], d["source_offset"]): d
            for d in reader.decoded("dlq", RecordKind.DEAD_LETTER)
        }
        for where, (key, value), exec_id in zip(landed, records, expected, strict=False):
            if exec_id is None:
                letter = letters[where]
                assert (letter["raw_key"], letter["raw_value"]) == (key, value)
                assert letter["reason"]
            else:
                assert where not in letters
        assert hostile_executor.alive()
    finally:
        reader.close()


def _succeeded(reader: TopicReader, runs: set[str]) -> Counter[str]:
    """How many SUCCEEDED results each of ``runs`` (execution ids) has so far."""
    return Counter(
        r["execution_id"]
        for r in reader.results()
        if r["status"] == "SUCCEEDED" and r["execution_id"] in runs
    )


def test_the_reported_crashers_are_dead_lettered_with_their_reason(
    module_topics: KafkaSettings, hostile_executor: ExecutorThread
) -> None:
    """Issue 16's defects 1, 2 and 6: attempt -1 and a 70 KB execution id crash-looped the
    executor (struct.error in the dedup store); a null key, a key that is not the job id and
    an empty execution id ran."""
    topic = TopicNames(module_topics.namespace).due(Priority.NORMAL)
    # name: (DueEvent fields replaced, the record's key (None: the job id), the reason)
    cases: dict[str, tuple[dict[str, Any], bytes | None, str]] = {
        "attempt": ({"attempt": -1}, None, "DueEvent.attempt is -1, below its minimum 1"),
        "long-id": (
            {"execution_id": "x" * 70_000},
            None,
            "DueEvent.execution_id has 70000 bytes, more than its maximum 1100",
        ),
        "empty-id": ({"execution_id": ""}, None, "DueEvent.execution_id is empty"),
        "null-key": ({}, b"", "record has no key"),
        "other-key": ({}, b"other", "record key b'other' is not its job_id"),
    }
    records = []
    for name, (fields, key, _) in cases.items():
        event = due_event(f"crasher-{name}-{next(_IDS)}", handler="tests.record", **fields)
        record_key = event["job_id"].encode() if key is None else (key or None)
        records.append((topic, record_key, CODEC.encode(RecordKind.DUE_EVENT, event), 1))
    after = due_event(f"after-crashers-{next(_IDS)}", handler="tests.record")
    records.append((topic, after["job_id"].encode(), CODEC.encode(RecordKind.DUE_EVENT, after), 1))
    landed = produce(module_topics, records)
    reader = TopicReader(module_topics, ["job-results", "dlq"])
    try:
        reader.wait_for(
            lambda r: (
                after["execution_id"] in {x["execution_id"] for x in r.results()}
                and len(_letters_at(r, landed)) == len(cases)
            ),
            60,
            "the crashers' dead letters and the record after them",
        )
        letters = _letters_at(reader, landed)
        for (name, (_, _, reason)), where in zip(cases.items(), landed, strict=False):
            assert letters[where]["reason"].startswith(reason), name
        assert hostile_executor.alive()
    finally:
        reader.close()


def _letters_at(reader: TopicReader, landed: list[tuple[str, int, int]]) -> dict[Any, Any]:
    wanted = set(landed)
    return {
        where: d
        for d in reader.decoded("dlq", RecordKind.DEAD_LETTER)
        if (where := (d["source_topic"], d["source_partition"], d["source_offset"])) in wanted
    }
