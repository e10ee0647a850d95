"""The Avro single-object codec: wire layout, round trips, schema evolution, and bad input."""

import copy
import io
import json
import struct
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import to_parsing_canonical_form
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import SCHEMA_DIR, latest_schema_path
from streams.codec import HEADER_LEN, Codec, RecordKind, schema_fingerprint
from streams.exceptions import (
    ConfigurationError,
    DecodeError,
    EncodeError,
    InvalidRecordError,
    KafkronError,
)
from tests.streams.codec_testkit import codec_without_bounds


def load_schema(kind: RecordKind, version: int | None = None) -> dict[str, Any]:
    """The shipped schema of ``kind``: ``version``, or the newest."""
    path = (
        latest_schema_path(kind.value)
        if version is None
        else SCHEMA_DIR / f"{kind.value}.v{version}.avsc"
    )
    schema: dict[str, Any] = json.loads(path.read_text())
    return schema


# --- an implementation of CRC-64-AVRO written from the spec, independent of fastavro ---

_EMPTY64 = 0xC15D213AA4D7A795


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY64 & -(fp & 1))
        table.append(fp)
    return table


_TABLE = _crc64_table()


def crc64_avro(data: bytes) -> int:
    fp = _EMPTY64
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


# --- sample records with non-default values everywhere (bytes that are not UTF-8, unicode,
# --- negative and extreme numbers, filled unions) ---

RETRY = {
    "max_attempts": 7,
    "initial_backoff_ms": 250,
    "multiplier": 1.5,
    "max_backoff_ms": 60_000,
    "jitter_ratio": 0.25,
}
OUTCOME = {
    "attempt": 1,
    "status": "TIMED_OUT",
    "error": "handler exceeded 30000 ms",
    "worker_id": "w-1",
    "started_at_ms": 1_700_000_000_000,
    "finished_at_ms": 1_700_000_030_000,
}
DUE = {
    "execution_id": "reports.nightly@1700000000000",
    "job_id": "reports.nightly",
    "job_version": 2**63 - 1,
    "scheduled_for_ms": 1_700_000_000_000,
    "fire_at_ms": -1,
    "attempt": 2**31 - 1,
    "handler": "reports.nightly",
    "payload": b"\x00\xff\xc3\x01 not utf-8",
    "timeout_ms": 30_000,
    "priority": "LOW",
    "retry": RETRY,
    "trigger": "BACKFILL",
    "tenant": "acme-é",
    "emitted_at_ms": 1_700_000_000_005,
    "history": [OUTCOME, {**OUTCOME, "attempt": 2, "status": "FAILED", "error": None}],
}
SAMPLES: dict[RecordKind, dict[str, Any]] = {
    RecordKind.JOB: {
        "job_id": "reports.nightly",
        "version": 3,
        "status": "PAUSED",
        "handler": "reports.nightly",
        "payload": b"\x80\x81",
        "run_at_ms": None,
        "cron": {
            "expression": "0 2 * * *",
            "timezone": "Europe/Berlin",
            "start_ms": 0,
            "end_ms": None,
            "fold_policy": "EVERY",
        },
        "depends_on": [],  # a job has one schedule kind (bounds.json): cron here
        "priority": "HIGH",
        "timeout_ms": 1,
        "retry": RETRY,
        "overlap": "QUEUE_ONE",
        "catchup": "ALL",
        "catchup_window_ms": 3_600_000,
        "jitter_ms": 500,
        "dag_wait_ms": 86_400_000,
        "tenant": "acme",
        "labels": {"team": "data", "ünïcode": "✓"},
        "manual_fire_at_ms": 1_700_000_000_000,
        "backfill": {
            "from_ms": 1_600_000_000_000,
            "to_ms": 1_600_086_400_000,
            "per_s": 50,
            "requested_at_ms": 1_700_000_000_000,
        },
        "idempotency_key": "create-42",
        "request_hash": "ab" * 32,
        "created_at_ms": 1_600_000_000_000,
        "updated_at_ms": 1_600_000_000_001,
    },
    RecordKind.DUE_EVENT: DUE,
    RecordKind.EXECUTION_RESULT: {
        "execution_id": "reports.nightly@1700000000000",
        "job_id": "reports.nightly",
        "scheduled_for_ms": 1_700_000_000_000,
        "attempt": 3,
        "status": "DEAD_LETTER",
        "reason": "attempts exhausted",
        "error": "boom",
        "worker_id": "w-2",
        "started_at_ms": 1,
        "finished_at_ms": 2,
        "next_attempt_at_ms": None,
        "trigger": "RETRY",
        "job_version": 9,
        "recorded_at_ms": 3,
    },
    RecordKind.RETRY_REQUEST: {"due": {**DUE, "attempt": 3}, "requested_at_ms": 42},
    RecordKind.DEAD_LETTER: {
        "kind": "UNDECODABLE",
        "reason": "bad magic",
        "execution": DUE,
        "last_error": None,
        "source_topic": "kafkron.due.low",
        "source_partition": 7,
        "source_offset": 123_456_789_012,
        "raw_key": b"",
        "raw_value": b"\xde\xad\xbe\xef",
        "dead_at_ms": 1_700_000_000_999,
    },
    RecordKind.TIMER_STATE: {
        "job_id": "reports.nightly",
        "version": 3,
        "status": "SCHEDULED",
        "sched_rank": 17,
        "job_bytes": b"\xc3\x01\x00",
        "one_off_run_at_ms": None,
        "sched_tick_ms": 1_700_000_060_000,
        "sched_fire_ms": 1_700_000_060_500,
        "fast": False,
        "last_tick_ms": 1_700_000_000_000,
        "running": [1_700_000_000_000, -1],
        "queued": {"tick_ms": 1_700_000_030_000, "trigger": "MANUAL"},
        "manual": [{"key_ms": 1_700_000_040_000, "tick_ms": 1_700_000_040_000}],
        "manual_done_ms": 1_700_000_040_000,
        "completed": False,
        "tombstone_fire_ms": None,
    },
    RecordKind.DAG_SIGNAL: {
        "job_id": "join",
        "kind": "UPSTREAM_ENDED",
        "upstream_job_id": "extract",
        "dependent_job_id": "join",
        "dependent_version": 4,
        "dependent_created_at_ms": 1_699_999_000_000,
        "run_key_ms": 1_700_000_000_000,
        "upstream_execution_id": "extract@1700000000000",
        "upstream_status": "DEAD_LETTER",
        "reason": "upstream extract@1700000000000 dead-lettered",
        "emitted_at_ms": 1_700_000_000_500,
    },
    RecordKind.DAG_RELEASE: {
        "job_id": "join",
        "run_key_ms": 1_700_000_000_000,
        "verdict": "RUN",
        "reason": None,
        "upstream_execution_ids": ["extract@1700000000000", "load-refs@1700000000000"],
        "emitted_at_ms": 1_700_000_000_600,
    },
    RecordKind.DAG_RUN: {
        "job_id": "join",
        "run_key_ms": 1_700_000_000_000,
        "verdict": "OPEN",
        "deadline_ms": 1_700_086_400_000,
        "upstreams": {"extract": {"status": "SUCCEEDED", "ended_at_ms": 1_700_000_000_400}},
        "opened_at_ms": 1_700_000_000_450,
    },
}
MINIMAL_DUE = {
    "execution_id": "j@1",
    "job_id": "j",
    "job_version": 1,
    "scheduled_for_ms": 1,
    "fire_at_ms": 1,
    "attempt": 1,
    "handler": "h",
    "timeout_ms": 10,
    "emitted_at_ms": 2,
}

CODEC = Codec.from_directory()
SHAPE_CODEC = codec_without_bounds()  # every Avro value, whatever bounds.json says


def test_samples_set_every_field_of_their_schema() -> None:
    for kind, sample in SAMPLES.items():
        assert list(sample) == [f["name"] for f in load_schema(kind)["fields"]], kind


@pytest.mark.parametrize("kind", list(RecordKind))
def test_round_trip_of_every_kind(kind: RecordKind) -> None:
    data = SHAPE_CODEC.encode(kind, SAMPLES[kind])
    assert SHAPE_CODEC.decode(kind, data) == SAMPLES[kind]
    assert SHAPE_CODEC.decode_any(data) == (kind, SAMPLES[kind])
    assert CODEC.decode(kind, data, check=False) == SAMPLES[kind]


def test_decode_checks_the_bounds_of_every_kind_and_names_the_field() -> None:
    """The samples' extreme values keep their Avro types but break bounds.json."""
    data = CODEC.encode(RecordKind.DUE_EVENT, DUE)
    with pytest.raises(InvalidRecordError, match=r"^DueEvent\.fire_at_ms is -1, below"):
        CODEC.decode(RecordKind.DUE_EVENT, data)
    with pytest.raises(InvalidRecordError, match=r"DueEvent\.fire_at_ms"):
        CODEC.decode_any(CODEC.encode(RecordKind.RETRY_REQUEST, SAMPLES[RecordKind.RETRY_REQUEST]))
    valid = {**DUE, "fire_at_ms": 1_700_000_000_000, "attempt": 2}
    assert CODEC.decode(RecordKind.DUE_EVENT, CODEC.encode(RecordKind.DUE_EVENT, valid)) == valid


def test_encode_fills_schema_defaults_with_decoded_types() -> None:
    decoded = CODEC.decode(RecordKind.DUE_EVENT, CODEC.encode(RecordKind.DUE_EVENT, MINIMAL_DUE))
    assert decoded["payload"] == b""
    assert type(decoded["payload"]) is bytes
    assert decoded["priority"] == "NORMAL"
    assert decoded["retry"]["max_backoff_ms"] == 300_000
    assert (decoded["trigger"], decoded["tenant"], decoded["history"]) == (
        "SCHEDULE",
        "default",
        [],
    )


# --- wire layout ---


@pytest.mark.parametrize(
    ("canonical", "signed_fingerprint"),
    [
        ('"null"', 7195948357588979594),
        (
            '{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"}]}',
            7843277075252814651,
        ),
        (
            '{"name":"PigValue","type":"record","fields":'
            '[{"name":"value","type":["null","int","long","PigValue"]}]}',
            -1759257747318642341,
        ),
    ],
)
def test_crc64_helper_matches_the_avro_projects_published_vectors(
    canonical: str, signed_fingerprint: int
) -> None:
    # Vectors from apache/avro share/test/data/schema-tests.txt (Java longs, so signed).
    assert crc64_avro(canonical.encode()) == signed_fingerprint & (2**64 - 1)


def test_schema_fingerprint_is_little_endian_and_ignores_doc_and_defaults() -> None:
    schema = {
        "type": "record",
        "name": "foo",
        "doc": "docs and defaults are not part of the parsing canonical form",
        "fields": [{"name": "f1", "type": "boolean", "default": True, "doc": "x"}],
    }
    assert schema_fingerprint(schema) == struct.pack("<q", 7843277075252814651)


@pytest.mark.parametrize("kind", list(RecordKind))
def test_encoding_is_the_spec_single_object_layout(kind: RecordKind) -> None:
    schema = fastavro.parse_schema(load_schema(kind))
    fingerprint = crc64_avro(to_parsing_canonical_form(schema).encode())
    body = io.BytesIO()
    fastavro.schemaless_writer(body, schema, SAMPLES[kind])
    expected = b"\xc3\x01" + struct.pack("<Q", fingerprint) + body.getvalue()
    assert CODEC.encode(kind, SAMPLES[kind]) == expected
    assert CODEC.writer_fingerprint(kind) == expected[2:HEADER_LEN]


def test_canonical_form_uses_full_names_and_no_docs() -> None:
    canonical = to_parsing_canonical_form(fastavro.parse_schema(load_schema(RecordKind.DUE_EVENT)))
    assert canonical.startswith('{"name":"kafkron.DueEvent","type":"record","fields":[')
    assert '"doc"' not in canonical
    assert '"default"' not in canonical


# --- schema evolution: v0 (older) and v2 (newer) of DueEvent around the shipped v1 ---


def _field(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return next(f for f in schema["fields"] if f["name"] == name)


def due_v0() -> dict[str, Any]:
    """v1 without the defaulted fields tenant and history, and without Trigger BACKFILL."""
    schema = load_schema(RecordKind.DUE_EVENT)
    schema["fields"] = [f for f in schema["fields"] if f["name"] not in ("tenant", "history")]
    _field(schema, "trigger")["type"]["symbols"].remove("BACKFILL")
    return schema


def due_v2() -> dict[str, Any]:
    """v1 plus a defaulted string and bytes field, and a Trigger symbol CATCHUP."""
    schema = load_schema(RecordKind.DUE_EVENT)
    schema["fields"].append({"name": "region", "type": "string", "default": "eu-west"})
    schema["fields"].append({"name": "checksum", "type": "bytes", "default": "\u00ff\u0000"})
    _field(schema, "trigger")["type"]["symbols"].append("CATCHUP")
    return schema


def due_v1() -> dict[str, Any]:
    return load_schema(RecordKind.DUE_EVENT)


def evolving_codec(*versions: int, **pins: Any) -> Codec:
    """A codec knowing the given versions of DueEvent (pins: writer_/reader_versions)."""
    builders = {0: due_v0, 1: due_v1, 2: due_v2}
    return Codec({RecordKind.DUE_EVENT: {v: builders[v]() for v in versions}}, **pins)


V0_RECORD = {k: v for k, v in DUE.items() if k not in ("tenant", "history")} | {"trigger": "REPLAY"}


def test_old_writer_new_reader_fills_new_fields_with_defaults() -> None:
    old, new = evolving_codec(0), evolving_codec(0, 1, 2)
    data = old.encode(RecordKind.DUE_EVENT, V0_RECORD)
    assert data[2:HEADER_LEN] == schema_fingerprint(due_v0())
    decoded = new.decode(RecordKind.DUE_EVENT, data)
    assert decoded == V0_RECORD | {
        "tenant": "default",
        "history": [],
        "region": "eu-west",
        "checksum": b"\xff\x00",
    }
    assert type(decoded["checksum"]) is bytes


def test_new_writer_old_reader_drops_new_fields_and_maps_unknown_symbols_to_the_default() -> None:
    new, old = (
        evolving_codec(0, 1, 2),
        evolving_codec(0, 1, 2, reader_versions={RecordKind.DUE_EVENT: 1}),
    )
    record = DUE | {"trigger": "CATCHUP", "region": "ap-south", "checksum": b"\x01"}
    data = new.encode(RecordKind.DUE_EVENT, record)
    assert data[2:HEADER_LEN] == schema_fingerprint(due_v2())
    assert old.decode(RecordKind.DUE_EVENT, data) == DUE | {"trigger": "SCHEDULE"}


def test_oldest_reader_reads_a_current_record() -> None:
    oldest = evolving_codec(0, 1, reader_versions={RecordKind.DUE_EVENT: 0})
    data = CODEC.encode(RecordKind.DUE_EVENT, DUE)  # trigger BACKFILL is unknown to v0
    assert oldest.decode(RecordKind.DUE_EVENT, data) == V0_RECORD | {"trigger": "SCHEDULE"}


def test_new_status_symbol_reads_as_unknown_in_an_old_reader() -> None:
    def with_new_status() -> dict[str, Any]:
        schema = due_v1()
        outcome = _field(schema, "history")["type"]["items"]
        _field(outcome, "status")["type"]["symbols"].append("PAUSED")
        return schema

    versions = {1: due_v1(), 2: with_new_status()}
    new = Codec({RecordKind.DUE_EVENT: versions})
    old = Codec({RecordKind.DUE_EVENT: versions}, reader_versions={RecordKind.DUE_EVENT: 1})
    data = new.encode(RecordKind.DUE_EVENT, DUE | {"history": [OUTCOME | {"status": "PAUSED"}]})
    assert old.decode(RecordKind.DUE_EVENT, data)["history"][0]["status"] == "UNKNOWN"


def test_new_symbol_of_an_enum_without_default_is_an_incompatible_change() -> None:
    def without_default(schema: dict[str, Any]) -> dict[str, Any]:
        outcome = _field(schema, "history")["type"]["items"]
        _field(outcome, "status")["type"].pop("default")
        return schema

    def with_new_status() -> dict[str, Any]:
        schema = without_default(due_v1())
        outcome = _field(schema, "history")["type"]["items"]
        _field(outcome, "status")["type"]["symbols"].append("PAUSED")
        return schema

    versions = {1: without_default(due_v1()), 2: with_new_status()}
    new = Codec({RecordKind.DUE_EVENT: versions})
    old = Codec({RecordKind.DUE_EVENT: versions}, reader_versions={RecordKind.DUE_EVENT: 1})
    data = new.encode(RecordKind.DUE_EVENT, DUE | {"history": [OUTCOME | {"status": "PAUSED"}]})
    with pytest.raises(DecodeError, match=r"cannot be resolved.*PAUSED"):
        old.decode(RecordKind.DUE_EVENT, data)


def test_reader_without_the_writers_schema_says_to_deploy_schemas_first() -> None:
    data = evolving_codec(1, 2).encode(RecordKind.DUE_EVENT, DUE | {"region": "x"})
    with pytest.raises(DecodeError) as caught:
        evolving_codec(0, 1).decode(RecordKind.DUE_EVENT, data)
    message = str(caught.value)
    assert schema_fingerprint(due_v2()).hex() in message
    assert schema_fingerprint(due_v0()).hex() in message  # lists what it knows
    assert "deploy" in message


def test_writer_version_can_be_pinned_for_a_rolling_upgrade() -> None:
    codec = evolving_codec(0, 1, 2, writer_versions={RecordKind.DUE_EVENT: 1})
    assert codec.writer_version(RecordKind.DUE_EVENT) == 1
    data = codec.encode(RecordKind.DUE_EVENT, DUE)
    assert data[2:HEADER_LEN] == schema_fingerprint(load_schema(RecordKind.DUE_EVENT))
    assert codec.decode(RecordKind.DUE_EVENT, data) == DUE | {
        "region": "eu-west",
        "checksum": b"\xff\x00",
    }


def test_defaults_filled_in_by_resolution_are_not_shared_between_records() -> None:
    new = evolving_codec(0, 1, 2)
    data = evolving_codec(0).encode(RecordKind.DUE_EVENT, V0_RECORD)
    first = new.decode(RecordKind.DUE_EVENT, data)
    first["history"].append(OUTCOME)
    assert new.decode(RecordKind.DUE_EVENT, data)["history"] == []


def test_explicit_schemas_are_not_modified() -> None:
    schema = due_v2()
    before = copy.deepcopy(schema)
    Codec({RecordKind.DUE_EVENT: {2: schema}})
    assert schema == before


def test_directory_with_several_versions_writes_the_highest(tmp_path: Path) -> None:
    for kind in RecordKind:
        (tmp_path / f"{kind.value}.v1.avsc").write_text(json.dumps(load_schema(kind)))
    (tmp_path / "due_event.v2.avsc").write_text(json.dumps(due_v2()))
    codec = Codec.from_directory(tmp_path)
    assert codec.writer_version(RecordKind.DUE_EVENT) == 2
    assert codec.writer_version(RecordKind.JOB) == 1
    old_data = CODEC.encode(RecordKind.DUE_EVENT, DUE)
    assert codec.decode(RecordKind.DUE_EVENT, old_data)["region"] == "eu-west"


# --- configuration errors ---


def test_directory_missing_a_kind_is_refused(tmp_path: Path) -> None:
    (tmp_path / "job.v1.avsc").write_text(json.dumps(load_schema(RecordKind.JOB)))
    with pytest.raises(ConfigurationError, match="due_event"):
        Codec.from_directory(tmp_path)


@pytest.mark.parametrize("name", ["job.avsc", "jobs.v1.avsc", "job.v1.json.avsc"])
def test_badly_named_schema_file_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text(json.dumps(load_schema(RecordKind.JOB)))
    with pytest.raises(ConfigurationError, match=name):
        Codec.from_directory(tmp_path)


def test_pin_to_a_missing_version_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="version 3"):
        evolving_codec(1, 2, writer_versions={RecordKind.DUE_EVENT: 3})


def test_pin_of_a_kind_without_schemas_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="job"):
        evolving_codec(1, reader_versions={RecordKind.JOB: 1})


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="'jobs'"):
        Codec({"jobs": {1: load_schema(RecordKind.JOB)}})  # type: ignore[dict-item]


def test_same_schema_for_two_kinds_is_refused() -> None:
    schema = load_schema(RecordKind.JOB)
    with pytest.raises(ConfigurationError, match="same fingerprint"):
        Codec({RecordKind.JOB: {1: schema}, RecordKind.EXECUTION_RESULT: {1: schema}})


# --- encode errors ---


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({k: v for k, v in MINIMAL_DUE.items() if k != "job_id"}, "job_id"),
        (MINIMAL_DUE | {"jobid": "typo"}, "jobid"),
        (MINIMAL_DUE | {"attempt": "1"}, "attempt"),
        (MINIMAL_DUE | {"payload": "text, not bytes"}, "payload"),
        (MINIMAL_DUE | {"priority": "URGENT"}, "URGENT"),
        (MINIMAL_DUE | {"job_version": 2**64}, "too large"),
    ],
)
def test_encoding_a_record_that_does_not_fit_raises_encode_error(
    record: dict[str, Any], field: str
) -> None:
    with pytest.raises(EncodeError, match=field) as caught:
        CODEC.encode(RecordKind.DUE_EVENT, record)
    assert isinstance(caught.value, KafkronError)
    assert "due_event" in str(caught.value)


def test_encoding_an_unknown_kind_raises_encode_error() -> None:
    with pytest.raises(EncodeError, match="no schema"):
        evolving_codec(1).encode(RecordKind.JOB, SAMPLES[RecordKind.JOB])


# --- decode errors ---

VALID = CODEC.encode(RecordKind.DUE_EVENT, DUE)


@pytest.mark.parametrize("data", [b"", None, b"\xc3", VALID[: HEADER_LEN - 1]])
def test_empty_or_too_short(data: Any) -> None:
    with pytest.raises(DecodeError, match="shorter than the 10-byte"):
        CODEC.decode(RecordKind.DUE_EVENT, data)


def test_bad_magic_shows_the_first_bytes() -> None:
    data = b'{"job_id": "j", "x": 1}'
    with pytest.raises(DecodeError, match="bad magic 7b22") as caught:
        CODEC.decode_any(data)
    assert data[:16].hex() in str(caught.value)


def test_unknown_fingerprint_is_shown_in_hex() -> None:
    data = VALID[:2] + bytes.fromhex("0011223344556677") + VALID[HEADER_LEN:]
    with pytest.raises(DecodeError, match="unknown writer schema fingerprint 0011223344556677"):
        CODEC.decode(RecordKind.DUE_EVENT, data)


def test_fingerprint_of_another_kind() -> None:
    with pytest.raises(DecodeError, match=r"expected a job record .* due_event v1"):
        CODEC.decode(RecordKind.JOB, VALID)


@pytest.mark.parametrize("cut", range(HEADER_LEN, len(VALID)))
def test_every_truncation_of_the_body_is_a_decode_error(cut: int) -> None:
    with pytest.raises(DecodeError, match="due_event v1"):
        CODEC.decode(RecordKind.DUE_EVENT, VALID[:cut])


def test_trailing_bytes_are_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="1 bytes remain"):
        CODEC.decode(RecordKind.DUE_EVENT, VALID + b"\x00")


def test_invalid_utf8_in_a_string_is_a_decode_error() -> None:
    body_start = HEADER_LEN + 1  # after the length of execution_id
    data = VALID[:body_start] + b"\xff" + VALID[body_start + 1 :]
    with pytest.raises(DecodeError, match="UnicodeDecodeError"):
        CODEC.decode(RecordKind.DUE_EVENT, data)


def _decodes_or_raises_decode_error(data: bytes) -> None:
    """Anything but a dict or a DecodeError propagates and fails the test."""
    try:
        kind, record = CODEC.decode_any(data)
    except DecodeError:
        return
    assert isinstance(record, dict)
    assert CODEC.decode(kind, data) == record


_HEADERS = [b"\xc3\x01" + CODEC.writer_fingerprint(kind) for kind in RecordKind]
_VALID_ENCODINGS = [CODEC.encode(kind, SAMPLES[kind]) for kind in RecordKind]
_FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FAST
@given(st.binary(max_size=256))
def test_arbitrary_bytes_never_raise_anything_but_decode_error(data: bytes) -> None:
    _decodes_or_raises_decode_error(data)


@_FAST
@given(st.sampled_from(_HEADERS), st.binary(max_size=256))
def test_known_header_with_garbage_body_never_raises_anything_but_decode_error(
    header: bytes, body: bytes
) -> None:
    _decodes_or_raises_decode_error(header + body)


@settings(_FAST, max_examples=300)
@given(st.sampled_from(_VALID_ENCODINGS), st.data())
def test_corrupted_valid_records_never_raise_anything_but_decode_error(
    valid: bytes, data: st.DataObject
) -> None:
    corrupted = bytearray(valid)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(HEADER_LEN, len(corrupted) - 1))
        corrupted[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(HEADER_LEN, len(corrupted)))
    _decodes_or_raises_decode_error(bytes(corrupted[:cut]))
