"""A response body as JSON bytes: orjson, or json where orjson cannot write the value.

orjson refuses integers beyond 64 bits (``TypeError: Integer exceeds 64-bit range``), which
a stored payload or an echoed input may hold; json writes them exactly."""

from __future__ import annotations

import json
from typing import Any

import orjson


def json_bytes(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (what orjson.dumps writes, whenever it can)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
