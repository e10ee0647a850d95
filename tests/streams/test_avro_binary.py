"""The hand-written Avro primitives write exactly what fastavro writes."""

from __future__ import annotations

import io

from fastavro import schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from streams.avro_binary import avro_bytes, avro_long, avro_string

LONGS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-200, max_value=200),
    st.integers(min_value=1_700_000_000_000, max_value=2_000_000_000_000),  # epoch ms
)


def _fastavro(schema: str, value: object) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, schema, value)
    return out.getvalue()


@given(LONGS)
def test_avro_long_equals_fastavro(value: int) -> None:
    assert avro_long(value) == _fastavro("long", value)


def test_avro_long_at_every_varint_size_boundary() -> None:
    for bits in range(0, 64):
        for value in (2**bits - 1, 2**bits, -(2**bits), -(2**bits) - 1):
            if -(2**63) <= value < 2**63:
                assert avro_long(value) == _fastavro("long", value), value


@given(st.text())
def test_avro_string_equals_fastavro(value: str) -> None:
    assert avro_string(value) == _fastavro("string", value)


@given(st.binary())
def test_avro_bytes_equals_fastavro(value: bytes) -> None:
    assert avro_bytes(value) == _fastavro("bytes", value)
