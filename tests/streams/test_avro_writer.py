"""Generated record encoders write exactly the bytes fastavro writes.

Checked with hypothesis on the timer state's schema and on a schema using every type the
encoder writes (enums, a union with null second, arrays of arrays, nested records): any
value, in the codec's form or the timer's (an object or a dict, nested records as dicts or
tuples), encodes to fastavro's bytes, the decoder generated alongside reads them back to
the value, and the conversions to and from the codec's form are inverses. A run of a
record's fields, as a record of its own, writes its part of the bytes. What the encoder
writes no code for is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.avro_binary import avro_long
from streams.avro_reader import generate_reader
from streams.avro_writer import _sequential_writer, generate_spliced_writer, generate_writer
from streams.codec import SINGLE_OBJECT_MAGIC, Codec, RecordKind
from streams.exceptions import ConfigurationError, UnsupportedSchemaError
from tests.streams.avro_testkit import (
    ANY_LONGS,
    READABLE_LONGS,
    WRITABLE,
    fastavro_bytes,
    parsed,
    records_of,
)

CODEC = Codec.from_directory()
TIMER_STATE = CODEC.writer_schema(RecordKind.TIMER_STATE)
SCHEMAS = {"timer_state": TIMER_STATE, "writable": WRITABLE}
JOB = CODEC.writer_schema(RecordKind.JOB)  # a map, unions of null and records, doubles
WRITTEN = {**SCHEMAS, "job": JOB}  # written and compared by their bytes (NaN != NaN read)


def _namespace(schema: Mapping[str, Any]) -> Any:
    """A ``make`` building an object with an attribute per field."""
    names = [f["name"] for f in schema["fields"]]

    def make(*values: Any) -> SimpleNamespace:
        return SimpleNamespace(**dict(zip(names, values, strict=True)))

    return make


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=300, deadline=None)
@given(data=st.data(), tuple_records=st.booleans())
def test_generated_code_writes_and_reads_as_fastavro(
    name: str, data: st.DataObject, tuple_records: bool
) -> None:
    schema = SCHEMAS[name]
    record = data.draw(records_of(schema, READABLE_LONGS))
    expected = fastavro_bytes(schema, record)
    for attribute in (True, False):
        writer = generate_writer(
            schema, attribute=attribute, tuple_records=tuple_records, prefix=b"xx"
        )
        make = _namespace(schema) if attribute else None
        reader = generate_reader(schema, start=2, make=make, tuple_records=tuple_records)
        value = reader.from_record(record)
        assert writer.encode(value) == b"xx" + expected
        assert writer.to_record(value) == record
        assert reader.read(b"xx" + expected) == value
    # Any long, even one the decoder leaves to the codec, is written as fastavro writes it.
    record = data.draw(records_of(schema, ANY_LONGS))
    writer = generate_writer(schema, attribute=False, tuple_records=tuple_records)
    value = generate_reader(schema, tuple_records=tuple_records).from_record(record)
    assert writer.encode(value) == fastavro_bytes(schema, record)


def _run(schema: Mapping[str, Any], first: int, stop: int | None) -> dict[str, Any]:
    """The record of ``schema``'s fields ``first`` to ``stop`` alone."""
    return {**schema, "fields": schema["fields"][first:stop]}


@settings(max_examples=300, deadline=None)
@given(record=records_of(WRITABLE, READABLE_LONGS), first=st.integers(0, 9), stop=st.integers(0, 9))
def test_a_run_of_fields_reads_and_writes_its_part_of_the_bytes(
    record: dict[str, Any], first: int, stop: int
) -> None:
    stop = max(first, stop)
    data = fastavro_bytes(WRITABLE, record)
    before, run, after = (
        _run(WRITABLE, 0, first),
        _run(WRITABLE, first, stop),
        _run(WRITABLE, stop, None),
    )
    parts = []
    for schema in (before, run, after):
        value = generate_reader(schema, tuple_records=True).from_record(record)
        parts.append(generate_writer(schema, attribute=False, tuple_records=True).encode(value))
    assert b"".join(parts) == data
    fields = generate_reader(run, tuple_records=True, memo_longs=True).read(parts[1])
    assert list(fields) == [f["name"] for f in run["fields"]]
    assert generate_writer(run, attribute=False, tuple_records=True).encode(fields) == parts[1]


@pytest.mark.parametrize(
    "avro_type",
    [
        ["long", "string"],
        {"type": "long", "logicalType": "timestamp-millis"},
        {"type": "array", "items": "R"},  # a record that contains itself
        {"type": "fixed", "name": "F", "size": 2},
    ],
)
def test_what_the_writer_does_not_write_code_for_is_refused(avro_type: Any) -> None:
    schema = parsed({"type": "record", "name": "R", "fields": [{"name": "x", "type": avro_type}]})
    with pytest.raises(UnsupportedSchemaError):
        generate_writer(schema)


DUE_EVENT = Codec.from_directory().writer_schema(RecordKind.DUE_EVENT)
_ZERO_OR_NOT = st.sampled_from([0.0, -0.0, 2.0, 0.1])


@settings(max_examples=200, deadline=None)
@given(
    retries=st.lists(
        st.fixed_dictionaries(
            {
                "max_attempts": st.integers(-(2**31), 2**31 - 1),
                "initial_backoff_ms": st.integers(-(2**63), 2**63 - 1),
                "multiplier": _ZERO_OR_NOT,
                "max_backoff_ms": st.integers(0, 5),
                "jitter_ratio": _ZERO_OR_NOT,
            }
        ),
        min_size=1,
        max_size=6,
    ),
    payload=st.binary(max_size=300),
    trigger=st.integers(0, 5),
)
def test_a_template_writes_what_fastavro_writes_for_its_values(
    retries: list[dict[str, Any]], payload: bytes, trigger: int
) -> None:
    """Fields from arguments, given encoded, fixed, enums by index, a run kept by its values
    (zeros of doubles told apart by their bytes; a long payload not kept)."""
    template = generate_writer(
        DUE_EVENT,
        attribute=False,
        prefix=b"<",
        params=("job", "ids", "version", "trigger"),
        sources={"job_version": "version", "trigger": "trigger"},
        encoded={("execution_id", "job_id"): "ids", "emitted_at_ms": "job['raw_emitted']"},
        constants={"attempt": 1, "history": []},
        enum_values={"kafkron.Trigger": range(6)},
        memos=[("attempt", "tenant")],
    )
    symbols = [s for s in DUE_EVENT["fields"][11]["type"]["symbols"]]
    for retry in retries * 2:
        record = {
            "execution_id": "j@1",
            "job_id": "j",
            "job_version": 3,
            "scheduled_for_ms": 1_790_000_000_000,
            "fire_at_ms": 1_790_000_000_007,
            "attempt": 1,
            "handler": "h",
            "payload": payload,
            "timeout_ms": 10,
            "priority": "LOW",
            "retry": retry,
            "trigger": symbols[trigger],
            "tenant": "t",
            "emitted_at_ms": 5,
            "history": [],
        }
        job = {**record, "raw_emitted": b"\x0a"}
        ids = b"\x06j@1\x02j"
        expected = b"<" + fastavro_bytes(DUE_EVENT, record)
        assert template.encode(job, ids, 3, trigger) == expected


@pytest.mark.parametrize("name", sorted(WRITTEN))
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_spliced_writer_writes_what_fastavro_writes(name: str, data: st.DataObject) -> None:
    """Any fields varying, the others encoded once as runs: records that share the runs and
    differ in the varying fields (any values) encode as fastavro encodes each."""
    schema = WRITTEN[name]
    names = [f["name"] for f in schema["fields"]]
    varying = data.draw(st.lists(st.sampled_from(names), unique=True))
    writer = generate_spliced_writer(schema, varying, prefix=b"<")
    shared = data.draw(records_of(schema))
    runs = writer.encode_runs(shared)
    assert [first for first, _ in writer.runs] == [
        n for i, n in enumerate(names) if n not in varying and (i == 0 or names[i - 1] in varying)
    ]
    for _ in range(3):
        record = {
            **shared,
            **{n: v for n, v in data.draw(records_of(schema)).items() if n in varying},
        }
        args = [record[n] for n in varying]
        assert writer.encode(runs, *args) == b"<" + fastavro_bytes(schema, record)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_job_spliced_from_its_shape_is_what_the_codec_encodes(data: st.DataObject) -> None:
    """The bulk path's template: the per-job fields from arguments (both stamps from one),
    the rest of the Job from runs, equal to ``Codec.encode`` with its single-object header."""
    writer = generate_spliced_writer(
        JOB,
        ["job_id", "version", "payload", "run_at_ms", "created_at_ms", "updated_at_ms"],
        prefix=SINGLE_OBJECT_MAGIC + CODEC.writer_fingerprint(RecordKind.JOB),
        params=("job_id", "version", "payload", "run_at", "now_ms"),
        sources={"run_at_ms": "run_at", "created_at_ms": "now_ms", "updated_at_ms": "now_ms"},
        sequential=("version", "run_at_ms"),
    )
    shared = data.draw(records_of(JOB))
    runs = writer.encode_runs(shared)
    first = data.draw(records_of(JOB))
    run_at = first["run_at_ms"]
    following = [  # the next jobs of a load: versions and run times one apart, or any
        {**first, "version": first["version"] + i, "run_at_ms": run_at and run_at + i}
        if data.draw(st.booleans()) and max(first["version"], run_at or 0) < 2**63 - 10
        else data.draw(records_of(JOB))
        for i in range(1, 4)
    ]
    for job in [first, *following]:
        record = {**shared, **{n: job[n] for n in ("job_id", "version", "payload", "run_at_ms")}}
        record["updated_at_ms"] = record["created_at_ms"] = job["created_at_ms"]
        args = (job["job_id"], job["version"], job["payload"], job["run_at_ms"])
        encoded = writer.encode(runs, *args, job["created_at_ms"])
        assert encoded == CODEC.encode(RecordKind.JOB, record)


def test_a_spliced_writer_refuses_fields_the_schema_lacks() -> None:
    with pytest.raises(ConfigurationError):
        generate_spliced_writer(JOB, ["job_id", "no_such_field"])


@settings(max_examples=200, deadline=None)
@given(record=records_of(JOB))
def test_a_job_with_its_labels_map_is_written_as_fastavro_writes_it(record: dict[str, Any]) -> None:
    assert generate_writer(JOB, attribute=False).encode(record) == fastavro_bytes(JOB, record)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**62) | st.integers(-(2**63), 2**63 - 1), max_size=30))
def test_a_sequential_long_is_avro_long_in_any_sequence(values: list[int]) -> None:
    write = _sequential_writer(b"\x02")
    for value in values:
        assert write(value) == b"\x02" + avro_long(value)


def test_a_sequential_long_is_avro_long_across_consecutive_values() -> None:
    write = _sequential_writer(b"")
    for start in (-300, 0, 60, 8_000, 1_780_000_000_000, 1_780_000_000_000_000, 2**63 - 400):
        for value in range(start, start + 400):
            assert write(value) == avro_long(value), value
