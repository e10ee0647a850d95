"""Generated record decoders read exactly what fastavro reads, or leave the bytes to it.

For every record schema in schemas/ and for one no reader was written for (a map of arrays
of a nested record, unions of three branches, an enum of 70 symbols, fixed, float, bytes):
random valid records decode as fastavro decodes them, with any fields selected, any
memo runs and with or without the memo of longs; randomly damaged records decode to the
same values or raise for the codec to decide, never to a different value. The same in the
form the timer reads its state in (nested records as tuples, built by ``make``), for the
timer state's schema and one using every type the encoder writes.
"""

from __future__ import annotations

import json
import math
import struct
from functools import cache
from io import BytesIO
from types import SimpleNamespace
from typing import Any

import pytest
from fastavro import schemaless_reader
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from schemas import schema_paths
from streams.avro_binary import avro_long, avro_string
from streams.avro_reader import GeneratedReader, Memo, generate_reader
from streams.avro_writer import generate_writer
from streams.exceptions import ConfigurationError, InvalidRecordError, UnsupportedSchemaError
from tests.streams.avro_testkit import (
    READABLE_LONGS,
    TEXTS,
    WRITABLE,
    fastavro_bytes,
    fastavro_read,
    has_ten_byte_varint,
    parsed,
    records_of,
)

UNSEEN: dict[str, Any] = {
    "type": "record",
    "name": "Outer",
    "namespace": "test",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {
            "name": "level",
            "type": {"type": "enum", "name": "Level", "symbols": [f"L{i}" for i in range(70)]},
        },
        {
            "name": "groups",
            "type": {
                "type": "map",
                "values": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Point",
                        "fields": [
                            {"name": "x", "type": "int"},
                            {"name": "label", "type": ["null", "string", "Digest"]},
                            {"name": "weight", "type": "double"},
                        ],
                    },
                },
            },
        },
        {"name": "choice", "type": ["null", "string", "Point"]},
        {"name": "blob", "type": "bytes"},
        {"name": "scores", "type": {"type": "array", "items": ["null", "double"]}},
        {
            "name": "inner",
            "type": {
                "type": "record",
                "name": "Inner",
                "fields": [
                    {"name": "point", "type": "Point"},
                    {"name": "tags", "type": {"type": "map", "values": "long"}},
                    {"name": "nothing", "type": "null"},
                ],
            },
        },
        {"name": "empty", "type": {"type": "record", "name": "Empty", "fields": []}},
        {"name": "level2", "type": "Level"},
        {"name": "when", "type": "long"},
    ],
}


SCHEMAS = {path.name: parsed(json.loads(path.read_text())) for path in schema_paths()}
SCHEMAS["unseen (test schema)"] = parsed(UNSEEN)
REFUSED = "refused"  # what fastavro makes of bytes it cannot read (or with bytes left over)
FELL_BACK = "fell back"  # a decoder that leaves the bytes to the codec


@cache
def _records(name: str) -> st.SearchStrategy[dict[str, Any]]:
    return records_of(SCHEMAS[name])


@st.composite
def _readers(draw: st.DrawFn, name: str) -> tuple[GeneratedReader, list[str] | None]:
    """A decoder of ``name`` with random fields selected and random memo runs, and the
    fields it selects."""
    schema = SCHEMAS[name]
    names = [f["name"] for f in schema["fields"]]
    fields = draw(st.none() | st.lists(st.sampled_from(names), unique=True))
    cuts = sorted(draw(st.lists(st.integers(0, len(names)), unique=True, max_size=6)))
    memos = [
        Memo(
            names[start],
            names[stop - 1],
            max_entries=draw(st.integers(1, 4)),
            max_key_bytes=draw(st.sampled_from([4, 512])),
            max_widths=draw(st.integers(1, 3)),
            try_last=draw(st.booleans()),
        )
        for start, stop in zip(cuts[::2], cuts[1::2], strict=False)
    ]
    memo_longs = draw(st.booleans())
    return generate_reader(schema, fields=fields, memos=memos, memo_longs=memo_longs), fields


def _encoded(name: str, record: dict[str, Any]) -> bytes:
    return fastavro_bytes(SCHEMAS[name], record)


def _reference(name: str, body: bytes, fields: list[str] | None) -> Any:
    """What the codec reads: fastavro's record (or the fields selected of it), or REFUSED
    (the codec raises DecodeError then)."""
    try:
        record, end = fastavro_read(SCHEMAS[name], body)
    except Exception:
        return REFUSED
    if end != len(body):
        return REFUSED
    return record if fields is None else tuple(record[name] for name in fields)


def _read(reader: GeneratedReader, body: bytes) -> Any:
    try:
        return reader.read(body)
    except (ValueError, IndexError):
        return FELL_BACK


def _same(a: Any, b: Any) -> bool:
    """Equal, with the same types, floats by their bits (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b)
    return bool(a == b)


def _mutated(body: bytes, mutation: tuple[str, int, int]) -> bytes:
    kind, at, byte = mutation
    if not body:
        return bytes([byte])
    at %= len(body)
    if kind == "truncate":
        return body[:at]
    if kind == "flip":
        return body[:at] + bytes([body[at] ^ byte]) + body[at + 1 :]
    if kind == "set":  # an edge value: a boolean 2, a union branch or enum index too high
        return body[:at] + bytes([byte]) + body[at + 1 :]
    if kind == "insert":
        return body[:at] + bytes([byte]) + body[at:]
    return body[:at] + body[at + 1 :]


mutations = st.tuples(
    st.sampled_from(["truncate", "flip", "insert", "delete"]),
    st.integers(0, 400),
    st.integers(1, 255),
) | st.tuples(
    st.just("set"), st.integers(0, 400), st.sampled_from([0, 1, 2, 3, 4, 5, 6, 0x7F, 0x80, 0xFF])
)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_random_records_decode_as_fastavro_decodes_them(name: str, data: st.DataObject) -> None:
    reader, fields = data.draw(_readers(name))
    records = data.draw(st.lists(_records(name), min_size=1, max_size=4))
    for record in [*records, *records]:  # read again: from the memo runs
        body = _encoded(name, record)
        expected = _reference(name, body, fields)
        assert expected != REFUSED
        got = _read(reader, body)
        # Only a long beyond +-2**62 (a 10-byte varint) may be left to the codec.
        assert _same(got, expected) or (got == FELL_BACK and has_ten_byte_varint(record))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_damaged_records_decode_to_the_same_values_or_fall_back(
    name: str, data: st.DataObject
) -> None:
    """Never a different value: the same as fastavro, or left to the codec (which raises
    its DecodeError or reads the record)."""
    reader, fields = data.draw(_readers(name))
    records = data.draw(st.lists(_records(name), min_size=1, max_size=3))
    for record in records:
        body = _encoded(name, record)
        for mutation in data.draw(st.lists(mutations, max_size=3)):
            body = _mutated(body, mutation)
        for candidate in (_encoded(name, record), body, body):
            got = _read(reader, candidate)
            if got != FELL_BACK:
                assert _same(got, _reference(name, candidate, fields))
    for kept in reader.memos:  # bounded
        assert len(kept.entries) <= kept.memo.max_entries
        assert len(kept.widths) <= kept.memo.max_widths
        assert all(len(key) <= kept.memo.max_key_bytes for key in kept.entries)


EDGE_BYTES = (0, 1, 2, 3, 4, 5, 6, 0x7E, 0x7F, 0x80, 0x81, 0xFF)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_byte_set_to_an_edge_value_decodes_the_same_or_falls_back(
    name: str, data: st.DataObject
) -> None:
    """Each byte of a record in turn set to a boolean 2, a union branch or enum index one
    past the last, a sign bit, a continuation bit, or the record cut there: the same values
    as fastavro or left to the codec, whichever fields and memo runs the decoder has."""
    reader, fields = data.draw(_readers(name))
    body = _encoded(name, data.draw(_records(name)))
    for at in range(len(body)):
        for candidate in [
            body[:at],
            *(body[:at] + bytes([v]) + body[at + 1 :] for v in EDGE_BYTES),
        ]:
            got = _read(reader, candidate)
            if got != FELL_BACK:
                assert _same(got, _reference(name, candidate, fields))


BLOCKS: dict[str, Any] = parsed(
    {
        "type": "record",
        "name": "Blocks",
        "fields": [
            {"name": "items", "type": {"type": "array", "items": "long"}},
            {"name": "names", "type": {"type": "map", "values": "string"}},
            {"name": "after", "type": "long"},
        ],
    }
)


def _blocks(counts: list[int], values: list[bytes], sized: bool) -> bytes:
    """Blocks of the given item counts, each written with a negative count and its byte
    size when ``sized`` (as the spec allows, though fastavro never writes it), then 0."""
    out, items = b"", iter(values)
    for count in counts:
        block = b"".join(next(items) for _ in range(count))
        if sized:
            out += avro_long(-count) + avro_long(len(block)) + block
        else:
            out += avro_long(count) + block
    return out + b"\x00"


@settings(max_examples=100, deadline=None)
@given(
    numbers=st.lists(READABLE_LONGS, max_size=6),
    names=st.dictionaries(TEXTS, TEXTS, max_size=4),
    split=st.integers(1, 3),
    sized=st.booleans(),
    fields=st.sampled_from([None, ["after"], ["names"]]),
)
def test_blocks_with_negative_counts_read_as_fastavro_reads_them(
    numbers: list[int], names: dict[str, str], split: int, sized: bool, fields: list[str] | None
) -> None:
    def counts(n: int) -> list[int]:
        return [len(range(i, min(i + split, n))) for i in range(0, n, split)]

    pairs = [avro_string(k) + avro_string(v) for k, v in names.items()]
    body = (
        _blocks(counts(len(numbers)), [avro_long(n) for n in numbers], sized)
        + _blocks(counts(len(pairs)), pairs, sized)
        + avro_long(7)
    )
    record: Any = schemaless_reader(BytesIO(body), BLOCKS, None)
    assert record == {"items": numbers, "names": names, "after": 7}
    reader = generate_reader(BLOCKS, fields=fields)
    expected = record if fields is None else tuple(record[name] for name in fields)
    assert reader.read(body) == expected


@settings(max_examples=50, deadline=None)
@given(record=_records("unseen (test schema)"))
def test_decoded_records_share_no_containers_with_the_memo_or_each_other(
    record: dict[str, Any],
) -> None:
    assume(not has_ten_byte_varint(record))
    name = "unseen (test schema)"
    reader = generate_reader(
        SCHEMAS[name], memos=[Memo("groups", "scores"), Memo("inner", "empty")]
    )
    body = _encoded(name, record)
    first = reader.read(body)
    _scramble(first)
    assert _same(reader.read(body), _reference(name, body, None))


def _scramble(value: Any) -> None:
    """Change every container inside ``value`` in place."""
    children = list(value.values()) if isinstance(value, dict) else list(value)
    for child in children:
        if isinstance(child, dict | list):
            _scramble(child)
    if isinstance(value, dict):
        value["scrambled"] = True
    else:
        value.append("scrambled")


def test_a_memo_check_runs_when_its_fields_are_parsed_and_a_refused_run_is_not_kept() -> None:
    """The bounds of a memo's fields are checked once per distinct run of bytes; a run they
    refuse raises InvalidRecordError every time it is read, and is never reused."""
    seen: list[Any] = []

    def check(record: Any) -> str | None:
        seen.append(record["level"])
        return "level L3 is refused" if record["level"] == "L3" else None

    schema = SCHEMAS["unseen (test schema)"]
    reader = generate_reader(schema, memos=[Memo("digest", "level", check=check)])
    base = {
        "flag": True, "ratio": 0.5, "digest": b"abcd", "level": "L1", "groups": {},
        "choice": None, "blob": b"", "scores": [], "empty": {}, "level2": "L69", "when": 1,
        "inner": {"point": {"x": 1, "label": None, "weight": 1.0}, "tags": {}, "nothing": None},
    }  # fmt: skip
    good, bad = (
        _encoded("unseen (test schema)", base),
        _encoded("unseen (test schema)", {**base, "level": "L3"}),
    )
    for _ in range(3):
        assert reader.read(good)["level"] == "L1"
        with pytest.raises(InvalidRecordError, match="L3 is refused"):
            reader.read(bad)
    assert seen == ["L1", "L3", "L3", "L3"]
    assert [len(memo.entries) for memo in reader.memos] == [1]


@pytest.mark.parametrize(
    ("schema", "match"),
    [
        (
            {"type": "record", "name": "Node", "fields": [
                {"name": "next", "type": ["null", "Node"]}]},
            "contains itself",
        ),
        (
            {"type": "record", "name": "T", "fields": [
                {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]},
            "logical type",
        ),
    ],
)  # fmt: skip
def test_schemas_it_cannot_decode_exactly_are_refused(schema: dict[str, Any], match: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match=match):
        generate_reader(parsed(schema))


@pytest.mark.parametrize(
    ("fields", "memos"),
    [
        (["nope"], []),
        (None, [Memo("nope", "when")]),
        (None, [Memo("when", "flag")]),  # last before first
        (None, [Memo("flag", "level"), Memo("digest", "groups")]),  # overlapping
    ],
)
def test_fields_and_memos_must_be_the_schemas(fields: list[str] | None, memos: list[Memo]) -> None:
    with pytest.raises(ConfigurationError):
        generate_reader(SCHEMAS["unseen (test schema)"], fields=fields, memos=memos)


def test_selected_fields_come_in_the_order_asked_for() -> None:
    schema = SCHEMAS["job.v1.avsc"]
    reader = generate_reader(
        schema, fields=["status", "job_id"], memos=[Memo("status", "run_at_ms")]
    )
    record = {
        "job_id": "j", "version": 1, "status": "PAUSED", "handler": "h", "payload": b"",
        "run_at_ms": 5, "created_at_ms": 1, "updated_at_ms": 2,
    }  # fmt: skip
    assert reader.read(fastavro_bytes(schema, record)) == ("PAUSED", "j")


# --- the timer's form: nested records as tuples, longs through the memo -----------------

TUPLE_FORM = {"timer_state": SCHEMAS["timer_state.v1.avsc"], "writable (test schema)": WRITABLE}


@pytest.mark.parametrize("name", sorted(TUPLE_FORM))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_bytes_the_tuple_form_decoder_accepts_fastavro_reads_alike(
    name: str, data: st.DataObject
) -> None:
    """Any bytes (random, or a valid record with a few bytes changed or cut): the decoder
    reads them as fastavro does or raises ValueError or IndexError (for the codec to say)."""
    schema = TUPLE_FORM[name]
    valid = fastavro_bytes(schema, data.draw(records_of(schema, READABLE_LONGS)))
    raw = data.draw(
        st.binary(max_size=60)
        | st.builds(lambda cut: valid[:cut], st.integers(0, len(valid)))
        | st.builds(
            lambda at, byte: valid[:at] + bytes([byte]) + valid[at + 1 :],
            st.integers(0, max(len(valid) - 1, 0)),
            st.integers(0, 255),
        )
    )
    reader = generate_reader(schema, tuple_records=True, memo_longs=True)
    to_record = generate_writer(schema, attribute=False, tuple_records=True).to_record
    try:
        fields = reader.read(raw)
    except (ValueError, IndexError):
        return
    assert fastavro_read(schema, raw) == (to_record(fields), len(raw))


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(records_of(WRITABLE, READABLE_LONGS), min_size=1, max_size=4),
    memo_from=st.integers(0, 8),
    make=st.booleans(),
)
def test_fields_kept_by_their_bytes_read_as_parsed_into_new_lists(
    records: list[dict[str, Any]], memo_from: int, make: bool
) -> None:
    """A memo of the fields from ``memo_from`` to the end (looked up by the rest of the
    bytes), in the tuple form: the same values as parsing, read twice (parsed, then kept),
    and a caller changing the lists it got changes no later record."""
    names = [f["name"] for f in WRITABLE["fields"]]
    maker = _namespace(names) if make else None
    memo = Memo(names[memo_from], names[-1])
    kept = generate_reader(WRITABLE, memos=[memo], tuple_records=True, make=maker)
    plain = generate_reader(WRITABLE, tuple_records=True, make=maker)
    for record in records * 2:
        data = fastavro_bytes(WRITABLE, record)
        for _ in range(2):
            fields = kept.read(data)
            assert fields == plain.read(data)
            for value in vars(fields).values() if make else fields.values():
                if isinstance(value, list):
                    value.append(None)  # the next read must not see it
    assert not kept.memos[0].widths  # looked up by the rest of the bytes alone


def _namespace(names: list[str]) -> Any:
    """A ``make`` building an object with an attribute per field."""

    def make(*values: Any) -> SimpleNamespace:
        return SimpleNamespace(**dict(zip(names, values, strict=True)))

    return make


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "record", "name": "U", "fields": [
            {"name": "u", "type": ["null", "string", {"type": "record", "name": "P",
                                                     "fields": []}]}]},
        {"type": "record", "name": "Node", "fields": [
            {"name": "next", "type": {"type": "array", "items": "Node"}}]},
    ],
)  # fmt: skip
def test_what_the_tuple_form_cannot_convert_is_refused(schema: dict[str, Any]) -> None:
    """A union of a record and more than null (which branch is a dict?), and recursion."""
    with pytest.raises(UnsupportedSchemaError):
        generate_reader(parsed(schema), tuple_records=True)


# --- runs inside runs, and values derived from the bytes (the executor's DueEvent view) -----

DUE = "due_event.v1.avsc"
_PRIORITY_VALUES = (10, 11, 12)


def _due_reader() -> GeneratedReader:
    """A decoder of the form services/executor/due_view.py asks for: the tail after the ids
    kept as one run around three smaller ones, raw spans, UTF-8 bytes, the data itself."""
    return generate_reader(
        SCHEMAS[DUE],
        fields=["job_id", "key", "raw_ids", "job_version", "raw_version", "priority", "data", "no"],
        memos=[
            Memo("job_version", "history", last_only=True),
            Memo("scheduled_for_ms", "attempt"),
            Memo("handler", "tenant"),
            Memo("emitted_at_ms", "emitted_at_ms"),
        ],
        raw={"raw_ids": ("execution_id", "job_id"), "raw_version": ("job_version", "job_version")},
        utf8={"key": "job_id"},
        data_as="data",
        constants={"no": None},
        enum_values={"kafkron.Priority": _PRIORITY_VALUES},
        require={"history": b"\x00"},
        canonical=True,
    )


def _due_expected(record: dict[str, Any], body: bytes) -> tuple[Any, ...]:
    symbols = SCHEMAS[DUE]["fields"][9]["type"]["symbols"]
    return (
        record["job_id"],
        record["job_id"].encode(),
        avro_string(record["execution_id"]) + avro_string(record["job_id"]),
        record["job_version"],
        avro_long(record["job_version"]),
        _PRIORITY_VALUES[symbols.index(record["priority"])],
        body,
        None,
    )


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(_records(DUE), min_size=1, max_size=3),
    versions=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=2, max_size=4),
)
def test_a_per_record_field_defeats_the_outer_run_alone(
    records: list[dict[str, Any]], versions: list[int]
) -> None:
    """Records that differ in job_version alone (a herd's fires of distinct jobs) read from
    the runs inside the tail; raw spans are the values encoded again (canonical varints of
    up to 10 bytes read; others left to the codec); a non-empty history is left to it."""
    reader = _due_reader()
    for record in records:
        for version in versions:
            event = {**record, "job_version": version}
            body = _encoded(DUE, event)
            got = _read(reader, body)
            if event["history"]:
                assert got == FELL_BACK
            else:
                assert _same(got, _due_expected(event, body))
    # The tail's last run alone; the inner runs once per record, not per version.
    assert not reader.memos[0].entries
    assert all(len(memo.entries) <= len(records) for memo in reader.memos[1:])
    with pytest.raises(ConfigurationError, match="derived"):
        reader.from_record({})


def test_a_varint_not_as_fastavro_writes_it_is_left_to_the_codec() -> None:
    """Equal values, other bytes: a raw span must be what encoding the value gives."""
    event = {
        "execution_id": "e", "job_id": "j", "job_version": 5, "scheduled_for_ms": -(2**63),
        "fire_at_ms": 1, "attempt": 1, "handler": "h", "payload": b"", "timeout_ms": 1,
        "priority": "LOW", "trigger": "SCHEDULE", "tenant": "t", "emitted_at_ms": 9,
        "retry": {"max_attempts": 1, "initial_backoff_ms": 1, "multiplier": 1.0,
                  "max_backoff_ms": 1, "jitter_ratio": 0.0},
        "history": [],
    }  # fmt: skip
    body = _encoded(DUE, event)
    reader = _due_reader()
    assert _same(reader.read(body), _due_expected(event, body))  # -2**63: 10 bytes, read
    at = 1 + 1 + 1 + 1  # "e", "j" with their lengths: job_version's one byte (10, zig-zag)
    assert body[at] == 10
    longer = body[:at] + b"\x8a\x00" + body[at + 1 :]  # 5 again, in two bytes
    assert _reference(DUE, longer, None) != REFUSED  # fastavro reads it
    assert _read(reader, longer) == FELL_BACK
    plain = generate_reader(SCHEMAS[DUE])  # not canonical: the value is what counts
    shorter = {**event, "scheduled_for_ms": 1}
    body = _encoded(DUE, shorter)
    longer = body[:at] + b"\x8a\x00" + body[at + 1 :]
    assert _same(plain.read(longer), shorter) and _same(plain.read(body), shorter)


def test_derived_values_must_fit_the_memos_and_fields() -> None:
    schema = SCHEMAS[DUE]
    with pytest.raises(ConfigurationError, match="straddles"):
        generate_reader(
            schema,
            fields=["r"],
            memos=[Memo("scheduled_for_ms", "attempt")],
            raw={"r": ("job_version", "fire_at_ms")},
        )
    with pytest.raises(ConfigurationError, match="not a string"):
        generate_reader(schema, fields=["u"], utf8={"u": "attempt"})
    with pytest.raises(ConfigurationError, match="required encoding"):
        generate_reader(schema, fields=["history"], require={"history": b"\x00"})
    with pytest.raises(ConfigurationError, match="among fields"):
        generate_reader(schema, data_as="d")
