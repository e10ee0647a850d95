"""Codecs for the tests of readers that serve only records needing no schema resolution."""

from __future__ import annotations

import copy
import json
from typing import Any

from schemas import SCHEMA_DIR
from streams.codec import Codec, RecordKind


def _shipped(kind: RecordKind) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMA_DIR / f"{kind.value}.v1.avsc").read_text())
    return schema


def codec_resolving(kind: RecordKind) -> Codec:
    """A codec writing ``kind`` with the shipped v1 schema and reading it with a v2 that adds
    a string ``note`` (default ``""``): every record it writes of ``kind`` needs resolution."""
    newer = copy.deepcopy(_shipped(kind))
    newer["fields"].append({"name": "note", "type": "string", "default": ""})
    schemas = {other: {1: _shipped(other)} for other in RecordKind}
    schemas[kind] = {1: _shipped(kind), 2: newer}
    return Codec(schemas, writer_versions={kind: 1})
