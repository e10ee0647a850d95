"""Test kit for the exact readers (``JobReader``, ``ResultReader``): codecs that need schema
resolution, and the check that a reader refuses bytes as the codec does."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from schemas import latest_schema_path
from streams.codec import HEADER_LEN, Codec, RecordKind
from streams.exceptions import DecodeError, InvalidRecordError


def _shipped(kind: RecordKind) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(latest_schema_path(kind.value).read_text())
    return schema


def codec_resolving(kind: RecordKind) -> Codec:
    """A codec writing ``kind`` with the shipped v1 schema and reading it with a v2 that adds
    a string ``note`` (default ``""``): every record it writes of ``kind`` needs resolution."""
    newer = copy.deepcopy(_shipped(kind))
    newer["fields"].append({"name": "note", "type": "string", "default": ""})
    schemas = {other: {1: _shipped(other)} for other in RecordKind}
    schemas[kind] = {1: _shipped(kind), 2: newer}
    return Codec(schemas, writer_versions={kind: 1})


def assert_refused_as_the_codec_refuses(
    codec: Codec, kind: RecordKind, read: Callable[[bytes], object], data: bytes
) -> None:
    """``read(data)`` raises the DecodeError ``codec.decode`` raises, with the same message."""
    with pytest.raises(DecodeError) as expected:
        codec.decode(kind, data)
    with pytest.raises(DecodeError) as raised:
        read(data)
    assert str(raised.value) == str(expected.value)


FRAME_MANGLES: tuple[Callable[[bytes], bytes], ...] = (
    lambda data: data[:-1],  # truncated
    lambda data: data + b"\x00",  # trailing byte
    lambda data: data[:HEADER_LEN] + b"\x7f" + data[HEADER_LEN + 1 :],  # first string too long
    lambda data: b"",
    lambda data: b"\x00\x01" + data[2:],  # bad magic
    lambda data: data[:2] + bytes(8) + data[HEADER_LEN:],  # unknown fingerprint
)
"""Garbage any framed record whose first field is a string (a job's id, an execution's) can
become; each reader's test adds the breakages of its own fields."""


INVALID = "invalid"
"""What :func:`checked` gives for a record that breaks a bound of ``schemas/bounds.json``."""


def checked(read: Callable[..., Any], *args: Any) -> Any:
    """What ``read(*args)`` returns, or :data:`INVALID` when it raises ``InvalidRecordError``: a
    fast reader must refuse exactly the records whose bounds the codec refuses."""
    try:
        return read(*args)
    except InvalidRecordError:
        return INVALID


def codec_without_bounds() -> Codec:
    """The shipped schemas without ``bounds.json``: for tests of the shape of records alone
    (every Avro value), whose readers then check nothing."""
    return Codec({kind: {1: _shipped(kind)} for kind in RecordKind})
