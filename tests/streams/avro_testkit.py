"""Test kit for the code generated from schemas (``streams/avro_reader.py``,
``streams/avro_writer.py``): random valid Avro values of a schema (hypothesis), and
fastavro's bytes and reading of them, the reference the generated code is held to."""

from __future__ import annotations

from collections.abc import Mapping
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from hypothesis import strategies as st


def parsed(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as fastavro parses it (with ``__named_schemas``)."""
    result: Any = parse_schema(schema)
    assert isinstance(result, dict)
    return result


READABLE_LONGS = st.integers(-200, 200) | st.integers(0, 2**45) | st.integers(-(2**62), 2**62 - 1)
"""Longs the generated decoders read themselves: varints of up to 9 bytes, with one- and
two-byte ones and epoch milliseconds often."""
ANY_LONGS = READABLE_LONGS | st.integers(-(2**63), 2**63 - 1)
"""Every long: a 10-byte varint (past +-2**62) is left to the codec by the decoders."""
TEXTS = st.text(max_size=8) | st.text(min_size=60, max_size=70)
"""Strings of a one-byte length and of a two-byte one."""
WRITABLE = parsed(
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
"""A record of every type the generated encoder writes (enums, a union with null second,
arrays of arrays, nested records, in arrays and unions), in the timer state's form too."""


def values_of(
    avro_type: Any, named: Mapping[str, Any], longs: st.SearchStrategy[int] = ANY_LONGS
) -> st.SearchStrategy[Any]:
    """Random valid values of ``avro_type`` in the codec's form (nested records as dicts)."""
    if isinstance(avro_type, str) and avro_type in named:
        avro_type = named[avro_type]
    if isinstance(avro_type, list):
        return st.one_of([values_of(branch, named, longs) for branch in avro_type])
    kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": longs,
        "float": st.floats(width=32),
        "double": st.floats(),
        "bytes": st.binary(max_size=8) | st.binary(min_size=64, max_size=70),
        "string": TEXTS,
    }
    if kind in simple:
        return simple[kind]
    if kind == "enum":
        return st.sampled_from(avro_type["symbols"])
    if kind == "fixed":
        return st.binary(min_size=avro_type["size"], max_size=avro_type["size"])
    if kind == "array":
        return st.lists(values_of(avro_type["items"], named, longs), max_size=4)
    if kind == "map":
        return st.dictionaries(TEXTS, values_of(avro_type["values"], named, longs), max_size=3)
    assert kind == "record", kind
    fields = {f["name"]: values_of(f["type"], named, longs) for f in avro_type["fields"]}
    return st.fixed_dictionaries(fields)


def records_of(
    schema: Mapping[str, Any], longs: st.SearchStrategy[int] = ANY_LONGS
) -> st.SearchStrategy[dict[str, Any]]:
    """Random valid records of the parsed record ``schema``."""
    return values_of(schema, schema["__named_schemas"], longs)


def fastavro_bytes(schema: dict[str, Any], record: Mapping[str, Any]) -> bytes:
    buf = BytesIO()
    schemaless_writer(buf, schema, record)
    return buf.getvalue()


def fastavro_read(schema: dict[str, Any], data: bytes) -> tuple[Any, int]:
    """The value fastavro reads at the start of ``data``, and where it stops."""
    buf = BytesIO(data)
    return schemaless_reader(buf, schema, None), buf.tell()


def has_ten_byte_varint(value: Any) -> bool:
    """Does ``value`` hold a long past +-2**62 (which the decoders leave to the codec)?"""
    if isinstance(value, dict):
        return any(has_ten_byte_varint(v) for v in value.values())
    if isinstance(value, list):
        return any(has_ten_byte_varint(v) for v in value)
    if isinstance(value, int) and not isinstance(value, bool):
        return not -(2**62) <= value < 2**62
    return False
