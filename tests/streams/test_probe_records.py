"""Probe records derived from a schema hold every value the fast paths' proofs need.

For every record kind: every enum symbol and both branches of every union (nested records
too), empty, non-ASCII and two-byte-length strings where the bounds allow them, longs at the
edges of their bounds or of the caller's varints, each record encodable by the codec and
keeping every declared field bound.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from streams.avro_binary import avro_long
from streams.codec import Codec, RecordKind
from streams.exceptions import ConfigurationError
from streams.probe_records import probe_records
from tests.streams.avro_testkit import parsed

CODEC = Codec.from_directory()


def _leaves(schema: Mapping[str, Any], records: list[Any]) -> Iterator[tuple[str, Any, Any]]:
    """(path, resolved type, value) of every field of every record, nested ones too."""
    named = schema["__named_schemas"]

    def walk(path: str, avro_type: Any, value: Any) -> Iterator[tuple[str, Any, Any]]:
        avro_type = named.get(avro_type, avro_type) if isinstance(avro_type, str) else avro_type
        yield path, avro_type, value
        if isinstance(avro_type, list):
            for branch in avro_type:
                resolved = named.get(branch, branch) if isinstance(branch, str) else branch
                if isinstance(resolved, dict) and resolved["type"] == "record" and value:
                    yield from walk(path, resolved, value)
        elif isinstance(avro_type, dict) and avro_type["type"] == "record":
            for f in avro_type["fields"]:
                yield from walk(f"{path}.{f['name']}", f["type"], value[f["name"]])
        elif isinstance(avro_type, dict) and avro_type["type"] == "array":
            for item in value:
                yield from walk(f"{path}[]", avro_type["items"], item)

    for record in records:
        yield from walk(schema["name"], schema, record)


@pytest.mark.parametrize("kind", list(RecordKind), ids=lambda k: k.value)
def test_every_symbol_and_union_branch_within_the_bounds(kind: RecordKind) -> None:
    schema = CODEC.writer_schema(kind)
    records = probe_records(schema, CODEC.bounds)
    check = CODEC.bounds.checker(CODEC.record_name(kind))
    seen: dict[str, list[Any]] = {}
    types: dict[str, Any] = {}
    for path, avro_type, value in _leaves(schema, records):
        seen.setdefault(path, []).append(value)
        types.setdefault(path, avro_type)
    for path, avro_type in types.items():
        values = seen[path]
        if isinstance(avro_type, dict) and avro_type["type"] == "enum":
            assert set(values) == set(avro_type["symbols"]), path
        if isinstance(avro_type, list):
            assert any(v is None for v in values) and any(v is not None for v in values), path
    for record in records:
        data = CODEC.encode(kind, record)
        assert CODEC.decode(kind, data, check=False) == record
        reason = check(record)
        assert reason is None or "exactly one" in reason, reason  # record rules not derived


def test_strings_longs_and_doubles_reach_their_edges() -> None:
    records = probe_records(CODEC.writer_schema(RecordKind.JOB), CODEC.bounds)
    tenants = {r["tenant"] for r in records}
    assert "é" in tenants and "x" * 256 in tenants  # non-ASCII; the longest the bound allows
    assert "" not in tenants  # min_bytes 1
    assert any(len(t.encode()) >= 64 and not t.isascii() for t in tenants)  # two-byte length
    keys = {r["idempotency_key"] for r in records}
    assert "" in keys and None in keys  # no bound: empty too, and null
    created = {r["created_at_ms"] for r in records}
    assert {0, 253402300799999} <= created  # epoch_ms bounds
    versions = {r["version"] for r in records}
    assert min(versions) == 0 and max(versions) == 2**63 - 1  # min 0, no max
    multipliers = {r["retry"]["multiplier"] for r in records}
    assert {1.0, 100.0} <= multipliers and all(1 <= m <= 100 for m in multipliers)


@pytest.mark.parametrize(("max_varint_bytes", "bound"), [(9, 2**62), (10, 2**63)])
def test_unbounded_longs_are_the_widest_the_callers_varints_hold(
    max_varint_bytes: int, bound: int
) -> None:
    records = probe_records(
        CODEC.writer_schema(RecordKind.JOB), None, max_varint_bytes=max_varint_bytes
    )
    longs = [v for r in records for v in (r["version"], r["run_at_ms"]) if v is not None]
    assert {bound - 1, -bound} <= set(longs)
    assert max(len(avro_long(v)) for v in longs) == max_varint_bytes


def test_maps_arrays_and_nested_unions_hold_every_value() -> None:
    records = probe_records(CODEC.writer_schema(RecordKind.JOB), CODEC.bounds)
    assert {} in [r["labels"] for r in records]
    labels = max((r["labels"] for r in records), key=len)
    assert set(labels.values()) >= {"", "é", "x" * 70}
    assert [] in [r["depends_on"] for r in records]
    crons = [r["cron"] for r in records if r["cron"] is not None]
    assert {c["fold_policy"] for c in crons} >= {"EVERY"} and None in {c["end_ms"] for c in crons}


def test_a_record_that_contains_itself_has_no_probes() -> None:
    schema = parsed(
        {
            "type": "record",
            "name": "Node",
            "fields": [{"name": "next", "type": ["null", "Node"]}],
        }
    )
    with pytest.raises(ConfigurationError):
        probe_records(schema)
