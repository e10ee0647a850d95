"""Probe records derived from a schema, for the fast paths' proof against the codec.

Every fast reader and writer proves at start-up that it handles a few records exactly as the
codec does (``streams/fast_path.py``). :func:`probe_records` writes those records from the
record schema (as fastavro parses it) and the bounds of ``schemas/bounds.json``, so a field
added to a schema is probed without anyone writing a probe for it. Together the records hold,
for every field, nested ones too:

- every symbol of an enum, and both branches of a union (null, and each value of the other);
- strings empty, of one non-ASCII character, and long (a two-byte length) in ASCII and not;
  bytes empty, short and long;
- longs and ints at the edges of their declared bounds, or without bounds the widest the
  caller's varints hold (``max_varint_bytes``: a decoder that leaves 10-byte varints to the
  codec asks for 9), with one- and two-byte ones and an epoch millisecond between;
- doubles at their bounds, or -0.0, 2.5, a huge one and infinity;
- arrays and maps empty and holding every value of their items (at most ``max_items``).

The values of a field cycle through its list from a different starting point per field, in
as many records as the longest list needs; values a bound refuses (a string shorter than its
``min_bytes``) are left out, so every probe keeps the bounds its fields declare (record-level
rules such as ``exactly_one`` are not derived).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.bounds import Bounds
from streams.exceptions import ConfigurationError

MAX_AVRO_LONG_BYTES = 10
"""The bytes of the widest zig-zag varint of a 64-bit long."""
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_INT_RANGE = (-(2**31), 2**31 - 1)
_LONG_RANGE = (-(2**63), 2**63 - 1)
_SAMPLE_LONGS = (0, 63, 64, -65, 1_780_000_000_123)
_STRINGS = ("", "é", "x" * 70, "jöb€" * 30)
_BYTES = (b"", b"\x00\xff", bytes(range(256)))
_DOUBLES = (-0.0, 2.5, 1e300, float("inf"))
_FLOATS = (-0.0, 2.5, float("inf"))
_MAP_KEYS = ("k", "é" * 40, "")


def probe_records(
    schema: Mapping[str, Any],
    bounds: Bounds | None = None,
    *,
    max_varint_bytes: int = MAX_AVRO_LONG_BYTES,
) -> list[dict[str, Any]]:
    """Records of the record ``schema`` (fastavro's parsed form) that together hold every
    value listed in the module, within ``bounds`` and ``max_varint_bytes`` (see there)."""
    if not 1 <= max_varint_bytes <= MAX_AVRO_LONG_BYTES:
        raise ConfigurationError(f"max_varint_bytes {max_varint_bytes} is not 1 to 10")
    values = _Values(schema.get("__named_schemas", {}), bounds, max_varint_bytes)
    records: list[dict[str, Any]] = values.of(schema, {})
    return records


class _Values:
    """The values of each type a probe takes, resolved against the named types and bounds."""

    def __init__(self, named: Mapping[str, Any], bounds: Bounds | None, varint_bytes: int) -> None:
        self.named = named
        self.bounds = bounds
        # A zig-zag varint of n bytes holds 7n bits: magnitudes up to 2**(7n - 1).
        magnitude = 2 ** (7 * varint_bytes - 1)
        self.long_range = (max(-magnitude, _LONG_RANGE[0]), min(magnitude - 1, _LONG_RANGE[1]))
        self.records: list[str] = []

    def of(self, avro_type: Any, bound: Mapping[str, float]) -> list[Any]:
        """The values of ``avro_type`` under ``bound`` (a field's declared bound)."""
        if isinstance(avro_type, str) and avro_type in self.named:
            avro_type = self.named[avro_type]
        if isinstance(avro_type, list):
            return [value for branch in avro_type for value in self.of(branch, bound)]
        if isinstance(avro_type, dict):
            if "logicalType" in avro_type:  # the codec may want another type: not probed
                raise ConfigurationError(f"no probe values of {avro_type['logicalType']!r}")
            if avro_type["type"] in _PRIMITIVES:
                avro_type = avro_type["type"]
        kind = avro_type if isinstance(avro_type, str) else avro_type["type"]
        if kind == "null":
            return [None]
        if kind == "boolean":
            return [False, True]
        if kind in ("int", "long"):
            return self.integers(_INT_RANGE if kind == "int" else self.long_range, bound)
        if kind in ("float", "double"):
            return self.floats(_FLOATS if kind == "float" else _DOUBLES, bound)
        if kind == "string":
            return self.sized(_STRINGS, bound, lambda s: len(s.encode()), "x")
        if kind == "bytes":
            return self.sized(_BYTES, bound, len, b"x")
        if kind == "enum":
            return list(avro_type["symbols"])
        if kind == "array":
            items = self.of(avro_type["items"], {})
            most = int(bound.get("max_items", len(items)))
            return [[], items[:most]] if most else [[]]
        if kind == "map":
            entries = self.of(avro_type["values"], {})
            most = int(bound.get("max_items", len(entries)))
            keys = [f"{_MAP_KEYS[i % len(_MAP_KEYS)]}{i}" for i in range(len(entries))]
            return [{}, dict(zip(keys, entries[:most], strict=False))] if most else [{}]
        if kind in ("record", "error"):
            return self.record(avro_type)
        raise ConfigurationError(f"no probe values of type {kind!r}")

    def record(self, schema: Mapping[str, Any]) -> list[dict[str, Any]]:
        """As many records as the field with the most values needs: field ``f`` of record
        ``i`` is its value ``(i + f) % len(values)``."""
        name = str(schema["name"])
        if name in self.records:
            raise ConfigurationError(f"record {name} contains itself: no finite probes")
        self.records.append(name)
        try:
            fields = [
                (str(f["name"]), self.of(f["type"], self.field_bound(name, str(f["name"]))))
                for f in schema["fields"]
            ]
        finally:
            self.records.pop()
        count = max((len(values) for _, values in fields), default=1)
        return [
            {field: values[(i + f) % len(values)] for f, (field, values) in enumerate(fields)}
            for i in range(count)
        ]

    def field_bound(self, record: str, field: str) -> Mapping[str, float]:
        return {} if self.bounds is None else self.bounds.field_bound(record, field)

    def integers(self, limits: tuple[int, int], bound: Mapping[str, float]) -> list[int]:
        low = max(limits[0], int(bound.get("min", limits[0])))
        high = min(limits[1], int(bound.get("max", limits[1])))
        inside = [v for v in _SAMPLE_LONGS if low <= v <= high]
        return list(dict.fromkeys([low, high, *inside]))

    @staticmethod
    def floats(samples: tuple[float, ...], bound: Mapping[str, float]) -> list[float]:
        low, high = bound.get("min"), bound.get("max")
        edges = [float(v) for v in (low, high) if v is not None]
        inside = [v for v in samples if (low is None or low <= v) and (high is None or v <= high)]
        return list(dict.fromkeys([*edges, *inside]))

    @staticmethod
    def sized(
        samples: tuple[Any, ...], bound: Mapping[str, float], size: Any, unit: Any
    ) -> list[Any]:
        """``samples`` of a size within ``bound``, and one of its largest size (at least one)."""
        low, high = int(bound.get("min_bytes", 0)), bound.get("max_bytes")
        kept = [v for v in samples if low <= size(v) and (high is None or size(v) <= high)]
        if high is not None:
            kept.append(unit * int(high))  # the longest allowed
        return kept or [unit * max(low, 1)]
