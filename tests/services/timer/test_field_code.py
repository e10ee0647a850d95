"""The code ``field_code.py`` generates from a schema reads and writes exactly as fastavro.

Checked with hypothesis on the timer state's schema and on a schema using every type the
generator supports (enums, a union with null second, arrays of arrays, nested records):
any value encodes to fastavro's bytes, those bytes decode to the value, and bytes the
generated decoder accepts are bytes fastavro reads to the same value.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from services.timer.field_code import UnsupportedSchemaError, field_code
from streams.codec import Codec, RecordKind

CODEC = Codec.from_directory()
TIMER_STATE = CODEC.writer_schema(RecordKind.TIMER_STATE)
EVERY_TYPE = parse_schema(
    {
        "type": "record",
        "name": "Every",
        "namespace": "test",
        "fields": [
            {"name": "flag", "type": "boolean"},
            {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["R", "G"]}},
            {"name": "late", "type": ["long", "null"]},
            {"name": "text", "type": ["null", "string"]},
            {"name": "blob", "type": "bytes"},
            {"name": "nothing", "type": "null"},
            {
                "name": "grid",
                "type": {"type": "array", "items": {"type": "array", "items": "long"}},
            },
            {
                "name": "inner",
                "type": {
                    "type": "record",
                    "name": "Inner",
                    "fields": [
                        {"name": "color", "type": "Color"},
                        {"name": "tags", "type": {"type": "array", "items": "string"}},
                        {"name": "maybe", "type": ["null", "Color"]},
                    ],
                },
            },
            {"name": "inners", "type": {"type": "array", "items": ["null", "Inner"]}},
        ],
    }
)

# What the generated decoder reads (varints of up to 9 bytes), and every long: a longer
# varint is left to the codec (test_stored_state.py checks that it still reads).
READABLE_LONGS = st.integers(-(2**62), 2**62 - 1) | st.integers(-300, 300)
ANY_LONGS = st.integers(-(2**63), 2**63 - 1)


def values_of(
    avro_type: Any, named: Mapping[str, Any], longs: st.SearchStrategy[int] = READABLE_LONGS
) -> st.SearchStrategy[Any]:
    """Values of ``avro_type`` in the codec's form (nested records as dicts)."""
    if isinstance(avro_type, str) and avro_type in named:
        avro_type = named[avro_type]
    if isinstance(avro_type, list):
        return st.one_of(*[values_of(branch, named, longs) for branch in avro_type])
    kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
    primitives: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "long": longs,
        "string": st.text(max_size=20),
        "bytes": st.binary(max_size=20),
    }
    if kind in primitives:
        return primitives[kind]
    if kind == "enum":
        return st.sampled_from(avro_type["symbols"])
    if kind == "array":
        return st.lists(values_of(avro_type["items"], named, longs), max_size=4)
    assert kind == "record", kind
    return st.fixed_dictionaries(
        {f["name"]: values_of(f["type"], named, longs) for f in avro_type["fields"]}
    )


def records_of(
    schema: Mapping[str, Any], longs: st.SearchStrategy[int] = READABLE_LONGS
) -> st.SearchStrategy[dict[str, Any]]:
    return values_of(schema, schema["__named_schemas"], longs)


def fastavro_bytes(schema: Mapping[str, Any], record: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, schema, record)
    return buf.getvalue()


def fastavro_read(schema: Mapping[str, Any], data: bytes) -> tuple[Any, int]:
    buf = io.BytesIO(data)
    return schemaless_reader(buf, schema, None), buf.tell()


@pytest.mark.parametrize("schema", [TIMER_STATE, EVERY_TYPE], ids=["timer_state", "every_type"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_generated_code_writes_and_reads_as_fastavro(
    schema: Mapping[str, Any], data: st.DataObject
) -> None:
    record = data.draw(records_of(schema))
    expected = fastavro_bytes(schema, record)
    for attribute in (True, False):
        code = field_code(schema, attribute=attribute)
        value = code.from_record(record, SimpleNamespace if attribute else dict)
        assert code.encode(value) == expected
        assert code.to_record(value) == record
        decoded, end = code.decode(b"xx" + expected, 2, SimpleNamespace if attribute else dict)
        assert decoded == value and end == len(expected) + 2
    # Any long, even one the decoder leaves to the codec, is written as fastavro writes it.
    record = data.draw(records_of(schema, ANY_LONGS))
    code = field_code(schema, attribute=False)
    assert code.encode(code.from_record(record, dict)) == fastavro_bytes(schema, record)


@settings(max_examples=300, deadline=None)
@given(record=records_of(EVERY_TYPE), first=st.integers(0, 9), stop=st.integers(0, 9))
def test_a_run_of_fields_reads_and_writes_its_part_of_the_bytes(
    record: dict[str, Any], first: int, stop: int
) -> None:
    whole = field_code(EVERY_TYPE, attribute=False)
    data = whole.encode(whole.from_record(record, dict))
    start = field_code(EVERY_TYPE, 0, first).decode(data, 0, dict)[1]
    end = field_code(EVERY_TYPE, 0, max(first, stop)).decode(data, 0, dict)[1]
    part = field_code(EVERY_TYPE, first, stop, attribute=False)
    fields, at = part.decode(data, start, dict)
    assert at == end and list(fields) == list(part.names)
    assert part.encode(fields) == data[start:end]


@pytest.mark.parametrize("schema", [TIMER_STATE, EVERY_TYPE], ids=["timer_state", "every_type"])
@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_bytes_the_generated_decoder_accepts_fastavro_reads_alike(
    schema: Mapping[str, Any], data: st.DataObject
) -> None:
    """Any bytes (random, or a valid record with a few bytes changed or cut): the decoder
    reads them as fastavro does or raises ValueError or IndexError (for the codec to say)."""
    valid = fastavro_bytes(schema, data.draw(records_of(schema)))
    raw = data.draw(
        st.binary(max_size=60)
        | st.builds(lambda cut: valid[:cut], st.integers(0, len(valid)))
        | st.builds(
            lambda at, byte: valid[:at] + bytes([byte]) + valid[at + 1 :],
            st.integers(0, max(len(valid) - 1, 0)),
            st.integers(0, 255),
        )
    )
    code = field_code(schema, attribute=False)
    try:
        fields, end = code.decode(raw, 0, dict)
    except (ValueError, IndexError):
        return
    assert fastavro_read(schema, raw) == (code.to_record(fields), end)


def test_what_the_generator_does_not_write_code_for_is_refused() -> None:
    for avro_type in [
        "int",
        "double",
        {"type": "map", "values": "long"},
        ["long", "string"],
        {"type": "long", "logicalType": "timestamp-millis"},
        {"type": "array", "items": "R"},  # a record that contains itself
    ]:
        schema = parse_schema(
            {"type": "record", "name": "R", "fields": [{"name": "x", "type": avro_type}]}
        )
        with pytest.raises(UnsupportedSchemaError):
            field_code(schema)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(records_of(EVERY_TYPE), min_size=1, max_size=4), memo_from=st.integers(0, 9)
)
def test_fields_kept_by_their_bytes_read_as_parsed_into_new_lists(
    records: list[dict[str, Any]], memo_from: int
) -> None:
    """A memo of the fields from ``memo_from`` on: the same values as parsing, read twice
    (parsed, then kept), and a caller changing the lists it got changes no later record."""
    kept = field_code(EVERY_TYPE, attribute=False, memo_from=memo_from)
    plain = field_code(EVERY_TYPE, attribute=False)
    for record in records * 2:
        data = fastavro_bytes(EVERY_TYPE, record)
        for _ in range(2):
            fields, end = kept.decode(data, 0, dict)
            assert (fields, end) == plain.decode(data, 0, dict)
            for value in fields.values():
                if isinstance(value, list):
                    value.append(None)  # the next read must not see it


def test_a_memo_is_of_the_fields_to_the_end_of_the_record() -> None:
    with pytest.raises(ValueError, match="to the end"):
        field_code(EVERY_TYPE, 0, 5, memo_from=3)
