"""Hostile nesting never crashes a create: too deep a payload answers 422 naming ``payload``.

A payload nests arrays and objects at most ``MAX_PAYLOAD_DEPTH`` levels. Every path that
takes one agrees on that bound and checks it without recursing: the pydantic model, the
bulk fast path (single creates, keyed creates, batches), echoing inputs in 422 bodies, and
the body decoder's json.loads fallback past orjson's 1,024 levels. The API tests build their
bodies as text: json.dumps itself would recurse as deep as the payload.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.ingest.bulk import BulkJobBuilder, _freeze, _is_json
from services.ingest.create_lane import NestedTooDeepError, decode_json, too_deep_path
from services.ingest.exceptions import JobRequestError
from services.ingest.settings import IngestSettings
from services.ingest.validation import MAX_PAYLOAD_DEPTH, nests_deeper_than, parse_job_create
from streams.admin import ensure_topics
from streams.codec import Codec
from streams.settings import KafkaSettings
from tests.conftest import _delete_topics
from tests.services.ingest.test_ingest_api import HOUR_MS, Http, now_ms, serving

LIMIT = MAX_PAYLOAD_DEPTH
TOO_DEEP = f"more than {LIMIT} levels deep"


def arrays(depth: int) -> str:
    """``depth`` nested arrays as JSON text, the innermost holding a 1."""
    return "[" * depth + "1" + "]" * depth


def objects(depth: int) -> str:
    """``depth`` nested objects as JSON text, the innermost holding a 1."""
    return '{"a":' * depth + "1" + "}" * depth


def nested_arrays(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def nested_objects(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


# Pure: the bound itself ------------------------------------------------------------------


def test_depth_counts_arrays_and_objects() -> None:
    assert not nests_deeper_than(1, 0)
    assert not nests_deeper_than([1, {"a": []}], 3)
    assert nests_deeper_than([1, {"a": []}], 2)
    assert nests_deeper_than({"a": 1, "b": [[{}]]}, 3)
    assert not nests_deeper_than(nested_arrays(LIMIT), LIMIT)
    assert nests_deeper_than(nested_objects(LIMIT + 1), LIMIT)
    assert nests_deeper_than(nested_arrays(200_000), LIMIT)  # iterative: no RecursionError


@pytest.mark.parametrize("build", [nested_arrays, nested_objects])
def test_validation_accepts_the_limit_and_names_payload_past_it(build: Any) -> None:
    base = {"handler": "a.b", "run_at": "2030-01-01T00:00:00Z"}
    at_limit = parse_job_create({**base, "payload": build(LIMIT)})
    assert json.loads(at_limit.payload_bytes) == build(LIMIT)
    for depth in (LIMIT + 1, 600, 1000, 100_000):
        with pytest.raises(JobRequestError) as caught:
            parse_job_create({**base, "payload": build(depth)})
        (error,) = caught.value.errors
        assert error["loc"] == ["payload"]
        assert TOO_DEEP in error["msg"]
        assert error["input"] is None  # not echoed: writing it would recurse that deep


@pytest.mark.parametrize(
    "body",
    [
        nested_arrays(5000),
        {"handler": "a.b", "run_at": 1, "labels": {"x": nested_arrays(5000)}},
        {"handler": "a.b", "depends_on": nested_arrays(5000)},
        {"handler": "a.b", "run_at": nested_objects(5000)},
        {"handler": "a.b", "run_at": 1, "unknown": nested_objects(5000)},
    ],
)
def test_deep_values_in_other_fields_are_errors_without_their_input(body: Any) -> None:
    with pytest.raises(JobRequestError) as caught:
        parse_job_create(body)
    assert all(error["input"] is None for error in caught.value.errors)


@pytest.mark.parametrize("build", [nested_arrays, nested_objects])
def test_bulk_fast_path_takes_the_limit_and_defers_past_it(build: Any) -> None:
    at_limit = build(LIMIT)
    expected = json.dumps(at_limit, separators=(",", ":")).encode()
    assert BulkJobBuilder._payload({"payload": at_limit}) == expected
    for depth in (LIMIT + 1, 600, 1000):
        assert BulkJobBuilder._payload({"payload": build(depth)}) is None  # pydantic rejects
    assert _freeze(build(LIMIT)) == _freeze(build(LIMIT))
    with pytest.raises(TypeError):  # the shape key defers to pydantic too
        _freeze(build(LIMIT + 1))


def test_submit_many_names_the_too_deep_payload_and_builds_the_others(tmp_path: Path) -> None:
    kafka = KafkaSettings(bootstrap_servers="unused:1", state_dir=tmp_path)
    builder = BulkJobBuilder(IngestSettings(kafka=kafka), Codec.from_directory())
    run_at = now_ms() + HOUR_MS
    payloads = [
        build(d) for build in (nested_arrays, nested_objects) for d in (LIMIT, LIMIT + 1, 5000)
    ]
    requests = [{"handler": "a.b", "run_at": run_at, "payload": p} for p in payloads]
    ids, records, errors = builder.build_all(requests, now_ms() * 1000)
    assert len(ids) == len(records) == 2
    assert [e["loc"] for e in errors] == [[i, "payload"] for i in (1, 2, 4, 5)]


json_trees = st.recursive(
    st.integers(0, 3) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=12,
)


@given(json_trees, st.integers(0, 8))
def test_bulk_and_validation_agree_on_depth(tree: Any, wrap: int) -> None:
    value = nested_arrays(LIMIT - 4 + wrap) if wrap % 2 else nested_objects(LIMIT - 4 + wrap)
    inner = value
    while isinstance(inner, list | dict):
        inner_next = inner[0] if isinstance(inner, list) else inner["a"]
        if not isinstance(inner_next, list | dict):
            if isinstance(inner, list):
                inner[0] = tree
            else:
                inner["a"] = tree
            break
        inner = inner_next
    assert _is_json(value) is not nests_deeper_than(value, LIMIT)


# Pure: the decoder's fallback ------------------------------------------------------------


def test_too_deep_path_names_keys_and_indexes() -> None:
    raw = b'{"x": "[[[{{", "q\\"[": [1, 2], "payload": [0, {"b": ' + arrays(8).encode() + b"}]}"
    assert too_deep_path(raw, 11) is None
    assert too_deep_path(raw, 10) is not None
    assert too_deep_path(raw, 5) == ["payload", 1, "b", 0, 0]
    assert too_deep_path(b"[" * 1_000_000, 64) == [0] * 64  # iterative: no RecursionError
    assert too_deep_path(b'{"a": [}}}]]] "unterminated', 2) is None  # never raises


def test_decode_json_fallback_reads_shallow_bodies_and_refuses_deep_ones() -> None:
    # NaN: orjson refuses it, json.loads reads it (validation then names the field).
    shallow = f'{{"payload": [NaN, {arrays(LIMIT - 1)}]}}'.encode()
    assert decode_json(shallow, LIMIT + 1)["payload"][1] == nested_arrays(LIMIT - 1)
    deep = f'{{"n": NaN, "payload": {arrays(LIMIT + 1)}}}'.encode()
    with pytest.raises(NestedTooDeepError) as caught:
        decode_json(deep, LIMIT + 1)
    assert caught.value.path[:1] == ["payload"]
    with pytest.raises(NestedTooDeepError):  # past orjson's 1,024 levels
        decode_json(f'{{"payload": {objects(5000)}}}'.encode(), LIMIT + 1)


# The API, on the real broker ---------------------------------------------------------------


@contextmanager
def module_api(bootstrap: str, state_dir: Path) -> Iterator[Http]:
    """An API on topics of its own, for tests that only create jobs (each with a fresh id):
    one app for a whole module instead of one per test; its topics are deleted at the end."""
    namespace = f"t{uuid.uuid4().hex[:10]}."
    kafka = KafkaSettings(
        bootstrap_servers=bootstrap, namespace=namespace, partitions=4, state_dir=state_dir
    )
    ensure_topics(kafka)
    settings = IngestSettings(kafka=kafka, view_dir=state_dir / "view", view_catch_up_timeout_s=20)
    try:
        with serving(settings) as client:
            yield client
    finally:
        _delete_topics(bootstrap, namespace)


@pytest.fixture(scope="module")
def http(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    with module_api(kafka_bootstrap, tmp_path_factory.mktemp("nesting")) as client:
        yield client


def create_body(payload: str, run_at: int | None = None) -> str:
    return f'{{"handler":"a.b","run_at":{run_at or now_ms() + HOUR_MS},"payload":{payload}}}'


def post_create(http: Http, payload: str, key: str | None = None) -> Any:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return http.post("/api/jobs", content=create_body(payload).encode(), headers=headers)


def post_batch(http: Http, *payloads: str) -> Any:
    items = ",".join(f'{{"job":{create_body(p)}}}' for p in payloads)
    return http.post(
        "/api/jobs/batch",
        content=f'{{"items":[{items}]}}'.encode(),
        headers={"content-type": "application/json"},
    )


def assert_names_payload(detail: list[dict[str, Any]], loc: list[Any]) -> None:
    assert [e["loc"] for e in detail] == [loc], detail
    assert TOO_DEEP in detail[0]["msg"]


TOO_DEEP_PAYLOADS = [
    pytest.param(arrays(LIMIT + 1), id="arrays-limit+1"),
    pytest.param(objects(LIMIT + 1), id="objects-limit+1"),
    pytest.param(arrays(600), id="arrays-600"),
    pytest.param(objects(1000), id="objects-1000"),
]
BEYOND_ORJSON = [
    pytest.param(arrays(1100), id="arrays-1100"),
    pytest.param(objects(5000), id="objects-5000"),
    pytest.param(f"[NaN,{arrays(LIMIT)}]", id="NaN-limit+1"),  # orjson refuses NaN
]
AT_LIMIT = [
    pytest.param(arrays(LIMIT), id="arrays-limit"),
    pytest.param(objects(LIMIT), id="objects-limit"),
]


@pytest.mark.kafka
@pytest.mark.parametrize("payload", AT_LIMIT)
def test_create_at_the_limit_is_created(http: Http, payload: str) -> None:
    response = post_create(http, payload)
    assert response.status_code == 201, response.text
    keyed = post_create(http, payload, key=f"nesting-{now_ms()}-{len(payload)}")
    assert keyed.status_code == 201, keyed.text
    stored = http.get(f"/api/jobs/{response.json()['job_id']}").json()
    assert stored["payload"] == json.loads(payload)


@pytest.mark.kafka
@pytest.mark.parametrize("payload", TOO_DEEP_PAYLOADS + BEYOND_ORJSON)
def test_create_past_the_limit_answers_422_naming_payload(http: Http, payload: str) -> None:
    for key in (None, f"deep-{len(payload)}"):  # the plain and the keyed fast path
        response = post_create(http, payload, key)
        assert response.status_code == 422, response.text
        assert_names_payload(response.json()["detail"], ["body", "payload"])


@pytest.mark.kafka
@pytest.mark.parametrize("payload", AT_LIMIT)
def test_batch_at_the_limit_is_created(http: Http, payload: str) -> None:
    response = post_batch(http, payload, payload)
    assert response.status_code == 200, response.text
    assert [a["status_code"] for a in response.json()["items"]] == [201, 201]


@pytest.mark.kafka
@pytest.mark.parametrize("payload", TOO_DEEP_PAYLOADS)
def test_batch_item_past_the_limit_answers_422_naming_payload(http: Http, payload: str) -> None:
    response = post_batch(http, arrays(2), payload)
    assert response.status_code == 200, response.text
    good, bad = response.json()["items"]
    assert good["status_code"] == 201  # one bad item never holds up the others
    assert bad["status_code"] == 422
    assert_names_payload(bad["detail"], ["body", "items", 1, "job", "payload"])


@pytest.mark.kafka
@pytest.mark.parametrize("payload", BEYOND_ORJSON)
def test_batch_too_deep_to_read_answers_422_naming_payload(http: Http, payload: str) -> None:
    """A body orjson cannot read is refused whole (like malformed JSON), naming the field."""
    response = post_batch(http, arrays(2), payload)
    assert response.status_code == 422, response.text
    assert_names_payload(response.json()["detail"], ["body", "items", 1, "job", "payload"])


DEEP_ELSEWHERE = [
    arrays(5000),
    objects(600),
    '{"handler":"a.b","run_at":1,"labels":{"x":' + arrays(600) + "}}",
    '{"handler":"a.b","depends_on":' + arrays(600) + "}",
    '{"handler":"a.b","cron":' + objects(600) + "}",
    '{"handler":"a.b","run_at":1,"retry":' + objects(600) + "}",
    '{"handler":"a.b","run_at":1,"unknown":' + objects(2000) + "}",
]


@pytest.mark.kafka
@pytest.mark.parametrize("body", DEEP_ELSEWHERE)
def test_deep_nesting_anywhere_is_a_422(http: Http, body: str) -> None:
    headers = {"content-type": "application/json"}
    single = http.post("/api/jobs", content=body.encode(), headers=headers)
    assert single.status_code == 422, single.text
    batch = http.post(
        "/api/jobs/batch", content=f'{{"items":[{{"job":{body}}}]}}'.encode(), headers=headers
    )
    assert batch.status_code in (200, 422), batch.text
    if batch.status_code == 200:
        assert batch.json()["items"][0]["status_code"] == 422
    bare = http.post("/api/jobs/batch", content=body.encode(), headers=headers)
    assert bare.status_code == 422, bare.text
