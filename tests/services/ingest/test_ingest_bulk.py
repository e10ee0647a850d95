"""The bulk fast path equals the pydantic path byte for byte, or defers to it (pure)."""

from __future__ import annotations

import base64
import json
import logging
import struct
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.ingest.bulk import BulkJobBuilder, fast_job_ids
from services.ingest.exceptions import JobRequestError
from services.ingest.settings import IngestSettings
from streams.avro_binary import avro_long
from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings

CODEC = Codec.from_directory()
NOW_US = time.time_ns() // 1000
NOW_MS = NOW_US // 1000


@pytest.fixture(scope="module")
def builder(tmp_path_factory: pytest.TempPathFactory) -> BulkJobBuilder:
    state = Path(tmp_path_factory.mktemp("bulk"))
    kafka = KafkaSettings(bootstrap_servers="unused:1", state_dir=state)
    return BulkJobBuilder(IngestSettings(kafka=kafka, max_payload_bytes=300), CODEC)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.text(max_size=8)
    | st.floats(allow_nan=True, allow_infinity=True),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)

requests = st.fixed_dictionaries(
    {"handler": st.sampled_from(["reports.nightly", "a.b_c", "Bad.Name", ""])},
    optional={
        "job_id": st.sampled_from(["j-1", "a:b.c", "bad/id", "", "up", 7]) | st.none(),
        "run_at": st.one_of(
            st.integers(NOW_MS - 120_000, NOW_MS + 10**10),
            st.sampled_from(["2030-01-01T00:00:00Z", "2030-01-01T00:00:00", "nope", True]),
            st.none(),
        ),
        "payload": json_values | st.tuples(st.integers()) | st.builds(lambda: {1: "x"}),
        "payload_b64": st.sampled_from([base64.b64encode(b"\x00\xff").decode(), "!!", 5]),
        "priority": st.sampled_from(["HIGH", "low", "urgent"]),
        "timeout_s": st.sampled_from([1, 2.5, -1, True, "3"]),
        "retry": st.sampled_from(
            [{"max_attempts": 5}, {"max_attempts": 0}, {"initial_backoff_s": 900}]
        ),
        "cron": st.sampled_from(
            [
                {"expression": "0 2 * * *"},
                {"expression": "bad"},
                {"expression": "* * * * *", "end": NOW_MS - 1},
            ]
        ),
        "depends_on": st.sampled_from([["up"], ["j-1"], []]),
        "labels": st.sampled_from([{"team": "data"}, {"bad key": "x"}, {"k": 1}]),
        "tenant": st.sampled_from(["acme", "a b"]),
    },
)


def slow(builder: BulkJobBuilder, request: Any, job_id: str) -> bytes | JobRequestError:
    try:
        return builder._slow(request, job_id, NOW_US)[1]
    except JobRequestError as exc:
        return exc


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests)
def test_fast_path_equals_the_pydantic_path_or_defers(
    builder: BulkJobBuilder, request: dict[str, Any]
) -> None:
    fast = builder._fast(dict(request), "generated-1", NOW_US)
    expected = slow(builder, request, "generated-1")
    if fast is not None:
        assert not isinstance(expected, JobRequestError), expected
        assert fast[1] == expected
    built: Any
    try:
        built = builder.build(request, "generated-1", NOW_US)[1]
    except JobRequestError as exc:
        built = exc
    assert type(built) is type(expected)
    if isinstance(expected, JobRequestError):
        assert isinstance(built, JobRequestError)
        assert built.errors == expected.errors
    else:
        assert built == expected


def test_plain_bulk_requests_take_the_fast_path(
    builder: BulkJobBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    shapes: list[dict[str, Any]] = [
        {"handler": "a.b", "run_at": NOW_MS + 1, "payload": {"i": 1, "s": "zoë"}},
        {"handler": "a.b", "run_at": "2030-01-01T00:00:00+02:00", "job_id": "x-1"},
        {
            "handler": "a.b",
            "cron": {"expression": "*/5 * * * *", "timezone": "Europe/Berlin"},
            "payload_b64": "AAEC",
            "labels": {"a": "b"},
            "retry": {"max_attempts": 9},
        },
        {"handler": "a.b", "depends_on": ["up"], "priority": "HIGH", "payload": [1, 2.5, None]},
    ]
    for request in shapes:
        for i in range(3):
            fast = builder._fast(dict(request), f"gen-{i}", NOW_US + i)
            assert fast is not None, request
            assert fast[1] == builder._slow(request, f"gen-{i}", NOW_US + i)[1]
    assert "differs" not in caplog.text


@given(st.integers(-(2**63), 2**63 - 1))
def test_avro_long_matches_fastavro(n: int) -> None:
    buf = BytesIO()
    schemaless_writer(buf, "long", n)
    assert avro_long(n) == buf.getvalue()


def test_fast_job_ids_are_uuid4_strings() -> None:
    import uuid

    ids = list(fast_job_ids(1000))
    assert len(set(ids)) == 1000
    for value in ids[:50]:
        parsed = uuid.UUID(value)
        assert str(parsed) == value
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_double_and_nested_constants_round_trip(builder: BulkJobBuilder) -> None:
    request = {
        "handler": "a.b",
        "run_at": NOW_MS + 5,
        "retry": {"multiplier": 1.7},
        "labels": {f"k{i}": "v" * i for i in range(70 // 7)},
    }
    fast = builder._fast(dict(request), "j", NOW_US)
    assert fast is not None
    record = CODEC.decode(RecordKind.JOB, fast[1])
    assert record["retry"]["multiplier"] == 1.7
    assert struct.pack("<d", 1.7) in fast[1]
    assert record["labels"] == request["labels"]


def slow_keyed(request: Any, key: str) -> tuple[str, bytes, str] | JobRequestError:
    """What the pydantic path writes for a keyed create: job id, record bytes, hash."""
    from services.ingest.creates import encode_create, plan_create

    kafka = KafkaSettings(bootstrap_servers="unused:1")
    settings = IngestSettings(kafka=kafka, max_payload_bytes=300)
    try:
        planned = plan_create(request, key)
        value, _ = encode_create(planned, settings, CODEC, NOW_US)
    except JobRequestError as exc:
        return exc
    return planned.job_id, value, planned.request_hash


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=requests, key=st.sampled_from(["order-42", "k", "zoë/ключ"]))
def test_keyed_fast_path_equals_the_pydantic_path_or_defers(
    builder: BulkJobBuilder, request: dict[str, Any], key: str
) -> None:
    """Job id, record bytes and request hash all equal: a repeat that takes the other path
    (or a repeat after an upgrade) must hash the same, or it would answer 409."""
    fast = builder.build_keyed(dict(request), key, NOW_US)
    if fast is None:
        return
    expected = slow_keyed(request, key)
    assert not isinstance(expected, JobRequestError), expected
    assert fast == expected
    record = CODEC.decode(RecordKind.JOB, fast[1])
    assert record["idempotency_key"] == key and record["request_hash"] == fast[2]


def test_plain_keyed_one_offs_take_the_fast_path(builder: BulkJobBuilder) -> None:
    bodies: list[dict[str, Any]] = [
        {"handler": "a.b", "run_at": NOW_MS + 1, "payload": {"i": 1, "s": "zoë", "f": 1.0}},
        {"handler": "a.b", "run_at": "2030-01-01T00:00:00+02:00", "payload": None},
        {"handler": "a.b", "run_at": NOW_MS + 9, "priority": "high", "timeout_s": 30,
         "labels": {"b": "1", "a": "2"}, "tenant": "acme", "retry": {"max_attempts": 9}},
    ]  # fmt: skip
    for body in bodies:
        for i in range(3):
            request = {**body, "payload": {"i": i}} if i else body
            fast = builder.build_keyed(dict(request), f"key-{i}", NOW_US)
            assert fast is not None, request
            assert fast == slow_keyed(request, f"key-{i}")
    # Not for the fast path: an explicit job id, a base64 payload (pydantic path instead).
    assert builder.build_keyed({**bodies[0], "job_id": "j"}, "k", NOW_US) is None
    assert builder.build_keyed({**bodies[0], "payload_b64": "AA=="}, "k", NOW_US) is None


def test_fast_job_ids_of_a_large_batch_are_distinct_uuid4_strings() -> None:
    import uuid

    ids = list(fast_job_ids(20_000))
    assert len(set(ids)) == 20_000
    assert all(str(uuid.UUID(value)) == value for value in ids)
    assert {uuid.UUID(value).version for value in ids} == {4}
    assert {uuid.UUID(value).variant for value in ids} == {uuid.RFC_4122}
    assert list(fast_job_ids(0)) == []


def json_dumps_payload(value: Any) -> bytes:
    """What the pydantic path stores as a JSON payload (validation._serialize_payload)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


TRICKY_PAYLOADS: list[Any] = [
    '\x00\x1f\x7f\b\f\n\r\t"\\/',
    "\u2028\u2029 é 😀 \ufeff",
    {"a": [1, -(2**63), 2**64 - 1, True, False, None], "": {"b": []}, "c": {}},
    [2**64, -(2**63) - 1],  # beyond orjson's integers: the json.dumps fallback
    {"nested": [[[{"a": [[{"b": [None]}]]}]]]},
    [1.5, 1e16, 1e-05, -0.0, 123456789.125],  # floats: json.dumps, not orjson
    0,
    "",
]


@pytest.mark.parametrize("payload", TRICKY_PAYLOADS)
def test_payload_bytes_equal_json_dumps(payload: Any) -> None:
    assert BulkJobBuilder._payload({"payload": payload}) == json_dumps_payload(payload)


def test_payloads_deeper_than_the_limit_defer_to_pydantic() -> None:
    """Past MAX_PAYLOAD_DEPTH pydantic rejects the payload naming it (test_ingest_nesting)."""
    deep: Any = 1
    for _ in range(300):  # past orjson's 254 levels too
        deep = [deep]
    assert BulkJobBuilder._payload({"payload": deep}) is None


def test_unencodable_payloads_defer_to_pydantic() -> None:
    for payload in ["\ud800", {"x": float("nan")}, {"x": {1, 2}}, (1, 2)]:
        assert BulkJobBuilder._payload({"payload": payload}) is None


plain_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**65), 2**65) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(plain_json_values.filter(lambda value: value is not None))  # None: no payload
def test_float_free_payloads_equal_json_dumps(payload: Any) -> None:
    assert BulkJobBuilder._payload({"payload": payload}) == json_dumps_payload(payload)
