"""The hand-written Avro primitives write and read exactly what fastavro writes and reads."""

from __future__ import annotations

import io

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from streams.avro_binary import (
    MAX_READ_LONG_BYTES,
    avro_bytes,
    avro_long,
    avro_string,
    read_long,
)

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


def _fastavro_read(data: bytes) -> object:
    return schemaless_reader(io.BytesIO(data), "long", None)


# Every varint of 1 to 9 bytes, canonical or not (e.g. 0x80 0x00 for 0).
VARINTS = st.builds(
    lambda more, last: bytes(more) + bytes([last]),
    st.lists(st.integers(0x80, 0xFF), max_size=MAX_READ_LONG_BYTES - 1),
    st.integers(0, 0x7F),
)


@given(st.integers(min_value=-(2**62), max_value=2**62 - 1), st.binary(max_size=3))
def test_read_long_reads_what_avro_long_writes(value: int, around: bytes) -> None:
    data = around + avro_long(value) + around
    assert read_long(data, len(around)) == (value, len(data) - len(around))


@given(VARINTS)
def test_read_long_reads_any_varint_of_up_to_nine_bytes_as_fastavro_does(varint: bytes) -> None:
    assert read_long(varint + b"\x01", 0) == (_fastavro_read(varint), len(varint))


def test_read_long_leaves_varints_longer_than_nine_bytes_to_the_codec() -> None:
    for value in (2**62, -(2**62) - 1, 2**63 - 1, -(2**63)):
        assert len(avro_long(value)) == 10
        with pytest.raises(ValueError, match="varint longer than 9 bytes"):
            read_long(avro_long(value), 0)
    # Bits past 64 in the tenth byte: fastavro drops them, Python's integers would keep them.
    with pytest.raises(ValueError):
        read_long(b"\xff" * 9 + b"\x7f", 0)


def test_read_long_raises_index_error_when_the_data_ends_inside_the_varint() -> None:
    for data in (b"", b"\x80", avro_long(1_790_000_000_000)[:-1]):
        with pytest.raises(IndexError):
            read_long(data, 0)
